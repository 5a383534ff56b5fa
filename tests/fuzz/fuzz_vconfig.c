/* fuzz_vconfig.c - libFuzzer harness for vae/config.json parsing, including
 * the sizes vae_load takes from it (dec_dims, the up blocks' channel
 * repeats, the patch). An accepted config must satisfy the invariants the VAE
 * code relies on, and every size it leads to must be exact in int. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    c3_vconfig v;
    if (ckpt_parse_vconfig(&v, (const char *)data, size, "fuzz/vae/config.json") != C3_OK) {
        if (!c3_errmsg()[0]) abort();
        return 0;
    }
    if (v.z_dim <= 0 || v.z_dim > 64 || v.decoder_base_dim <= 0 || v.patch_size <= 0) abort();
    if (v.n_mult < 1 || v.n_mult > 8 || v.n_tdown < 0 || v.n_tdown > 8) abort();
    for (int i = 0; i < v.n_mult; i++)
        if (v.dim_mult[i] <= 0) abort();
    for (int i = 0; i < v.z_dim; i++)
        if (v.latents_std[i] == 0 || !isfinite(v.latents_std[i]) || !isfinite(v.latents_mean[i])) abort();
    /* vae_load's arithmetic: widths, res blocks, repeats, conv_out = 3 x patch^2 */
    if (!v.is_residual || v.num_res_blocks < 0 || v.num_res_blocks > 64 ||
        v.n_tdown != v.n_mult - 1)
        abort();
    if ((v.patch_size << (v.n_mult - 1)) != 16)
        abort(); /* 16 pixels per latent, as the pipeline sizes */
    int tdown = 0;
    for (int i = 0; i < v.n_tdown; i++)
        tdown += v.temporal_down[i];
    if (tdown != 2) abort(); /* 4 frames per latent */
    for (int i = 0; i <= v.n_mult; i++) {
        int64_t want = (int64_t)v.decoder_base_dim * v.dim_mult[i ? v.n_mult - i : v.n_mult - 1];
        if (v.dec_dims[i] != want || want <= 0 || want > 65536) abort();
    }
    for (int u = 0; u + 1 < v.n_mult; u++) {
        int64_t f = (int64_t)v.dec_dims[u + 1] * (v.temporal_down[v.n_tdown - 1 - u] ? 2 : 1) * 4;
        if (f % v.dec_dims[u] || f / v.dec_dims[u] > INT32_MAX) abort();
    }
    int io = 3 * v.patch_size * v.patch_size;
    if (v.in_channels != io || v.out_channels != io) abort();
    return 0;
}
