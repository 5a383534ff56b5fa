/* audio_vae.h - Cosmos3's sound decoder (Cosmos3AVAEAudioTokenizer, an
 * Oobleck decoder): sound latents [C, T] -> waveform [channels, T * hop] at
 * the tokenizer's sampling rate, clamped to [-1, 1]. CPU reference (fp32).
 *
 * Every size comes from DIR/sound_tokenizer/config.json and the safetensors
 * header: vocoder_input_dim (C), dec_dim, dec_c_mults, dec_strides (hop is
 * their product), dec_out_channels, sampling_rate. Weight norm (weight_g,
 * weight_v) is folded at load. */
#ifndef COSMOS3_AUDIO_VAE_H
#define COSMOS3_AUDIO_VAE_H

#include "common.h"

#define C3_AVAE_MAX_BLOCKS 8

typedef struct {
    int sampling_rate;               /* Hz (48000 in the published model) */
    int latent_dim;                  /* vocoder_input_dim (= transformer sound_dim) */
    int dec_dim;                     /* base width */
    int n_blocks;                    /* len(dec_strides) == len(dec_c_mults) */
    int strides[C3_AVAE_MAX_BLOCKS]; /* dec_strides as stored; the decoder runs them reversed */
    int c_mults[C3_AVAE_MAX_BLOCKS]; /* dec_c_mults */
    int out_channels;                /* dec_out_channels (2: stereo) */
    int hop;                         /* samples per latent: the product of dec_strides */
    /* latent_mean / latent_std: null in the tiny and the published configs
     * (no normalisation); given, z * std + mean before the decoder, with
     * one value or one per latent channel */
    bool norm;
    float *mean, *std; /* [latent_dim] when norm */
} c3_aconfig;

typedef struct c3_audio_vae c3_audio_vae;

/* Parse a sound_tokenizer/config.json (path for messages); C3_EMODEL naming
 * the key on a bad or unsupported config. */
int avae_parse_config(const char *text, size_t len, const char *path, c3_aconfig *out);
void avae_config_free(c3_aconfig *c);

/* Load DIR (the sound_tokenizer folder: config.json and
 * diffusion_pytorch_model.safetensors). C3_EMODEL on a missing file or
 * tensor, naming it. */
int avae_load(c3_audio_vae **out, const char *dir);
void avae_free(c3_audio_vae *a);
const c3_aconfig *avae_config(const c3_audio_vae *a);

/* z [latent_dim, T] (host floats) -> wave [out_channels, T * hop] (host,
 * caller's buffer), clamped to [-1, 1]; preclamp (may be NULL) gets the
 * conv2 output before the clamp. */
int avae_decode(const c3_audio_vae *a, const float *z, int64_t T, float *wave, float *preclamp);

/* Debug taps for the golden test (NULL = off): called with the names of the
 * golden's trace ("conv1", "block0.snake1", "block0.conv_t1",
 * "block0.res_unit1", "block0", ..., "snake1") and x [C, n]. */
extern void (*avae_trace_hook)(const char *name, const float *x, int64_t C, int64_t n);

/* The folded weight of a layer by its checkpoint name ("decoder.conv1",
 * "decoder.block.0.conv_t1", ...) and its element count, or NULL. */
const float *avae_weight(const c3_audio_vae *a, const char *name, int64_t *numel);

/* Upstream's sound length for a clip: ceil(int(frames / fps * rate) / hop),
 * the float64 product truncated. 0 on bad arguments. */
int64_t avae_sound_len(int frames, double fps, int sampling_rate, int hop);

#endif
