/* wan_vae_encode.h - the Wan2.2 VAE encoder (diffusers AutoencoderKLWan.encode
 * with is_residual) on the backend table: pixels to normalised latents, the
 * x0 of image- and video-to-video conditioning. */
#ifndef COSMOS3_WAN_VAE_ENCODE_H
#define COSMOS3_WAN_VAE_ENCODE_H

#include "backend.h"
#include "checkpoint.h"

typedef struct c3_vae_enc c3_vae_enc;

/* Upload the encoder and quant_conv weights of ck->vae to `be`. */
int vae_enc_load(c3_vae_enc **out, const c3_ckpt *ck, c3_backend *be);
void vae_enc_free(c3_vae_enc *e);

/* The pixel size one latent cell covers (16 for Wan2.2) and the frames per
 * latent frame after the first (4). */
int vae_enc_spatial(const c3_vae_enc *e);
int vae_enc_temporal(const c3_vae_enc *e);
/* The latent channels (z_dim). */
int vae_enc_channels(const c3_vae_enc *e);

/* pixels: host floats [3, F, H, W] in [-1, 1], F = 1 + 4k, H and W multiples
 * of vae_enc_spatial. Encodes the first frame, then 4 frames per call with
 * the causal cache; keeps the mean of the posterior and normalises it,
 * (mu - latents_mean) * (1 / latents_std). out: host floats [z_dim, T, h, w]
 * (xmalloc'd), T = 1 + (F - 1) / 4 * 4 / temporal, h = H / spatial. */
int vae_encode(c3_vae_enc *e, const float *pixels, int F, int H, int W, float **out, int *T, int *h,
               int *w);

#endif
