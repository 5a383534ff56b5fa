/* wan_vae.h - the Wan2.2 VAE decoder (spec section 6) on the backend table.
 * Decodes one latent frame at a time with the two-frame causal cache, so
 * activation memory is bounded by one latent frame whatever the length. */
#ifndef COSMOS3_WAN_VAE_H
#define COSMOS3_WAN_VAE_H

#include "backend.h"
#include "checkpoint.h"

typedef struct c3_vae c3_vae;

/* Upload the decoder weights of ck->vae to `be`. */
int vae_load(c3_vae **out, const c3_ckpt *ck, c3_backend *be);
void vae_free(c3_vae *v);
/* z_norm: [C=z_dim, T, h, w] host floats in the normalised latent space.
 * De-normalises (z / (1/std) + mean, inv_std in fp32), decodes and clamps to
 * [-1, 1]. out: host floats [3, F, H, W] with F = 1 + tf (T - 1), H = sf h,
 * W = sf w (xmalloc'd), tf and sf the up blocks' factors (the config's
 * scale_factor_temporal and _spatial: 4 and 16 for Wan2.2). The optional
 * callback gets each latent frame's index (for progress and cancellation: a
 * non-zero return stops with that status). */
int vae_decode(c3_vae *v, const float *z_norm, int T, int h, int w, float **out, int *F, int *H,
               int *W, int (*on_frame)(void *ud, int t, int T), void *ud);

/* Debug taps for the golden tests: when non-NULL, called with
 * (name, chunk index, tensor) at post_quant_conv, decoder.conv_in,
 * decoder.mid_block, decoder.up_blocks.N, decoder.conv_out. */
extern void (*vae_trace_hook)(const char *name, int chunk, const c3_tensor *t);

/* Where a decode's time goes (tests and labs): when vae_prof is non-NULL, the
 * channels-last decode waits for the device after each op and adds its wall
 * time (seconds) and count to the op's kind. Slows the decode a little (one
 * host sync per op); NULL (the default) costs nothing. */
enum {
    VAE_PROF_CONV,     /* vcl_conv */
    VAE_PROF_NORM,     /* vcl_norm (+ SiLU) */
    VAE_PROF_HIST,     /* causal history copies between chunks */
    VAE_PROF_UPSAMPLE, /* nearest 2x (+ time interleave) */
    VAE_PROF_DUPUP,    /* the DupUp3D shortcut */
    VAE_PROF_ATTN,     /* mid-block attention, its layout changes included */
    VAE_PROF_LAYOUT,   /* latents in, frames out (unpatchify, clamp) */
    VAE_PROF_COPY,     /* other device copies and zero fills */
    VAE_PROF_DOWNLOAD, /* the frames to the host */
    VAE_PROF_N
};
typedef struct {
    double s[VAE_PROF_N];
    int64_t n[VAE_PROF_N];
} vae_profile;
extern vae_profile *vae_prof;
extern const char *const vae_prof_names[VAE_PROF_N];

#endif
