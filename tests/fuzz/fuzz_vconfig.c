/* fuzz_vconfig.c - libFuzzer harness for vae/config.json parsing.
 * An accepted config must satisfy the invariants the VAE code relies on. */
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
    return 0;
}
