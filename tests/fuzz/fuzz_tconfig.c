/* fuzz_tconfig.c - libFuzzer harness for transformer/config.json parsing.
 * An accepted config must satisfy the invariants the model code relies on. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    c3_tconfig t;
    if (ckpt_parse_tconfig(&t, (const char *)data, size, "fuzz/config.json") != C3_OK) {
        if (!c3_errmsg()[0]) abort();
        return 0;
    }
    if (t.hidden <= 0 || t.layers <= 0 || t.heads <= 0 || t.kv_heads <= 0 || t.head_dim <= 0 || t.inter <= 0 ||
        t.vocab <= 0)
        abort();
    if (t.heads % t.kv_heads || t.head_dim % 2) abort();
    if (t.mrope[0] < 0 || t.mrope[1] < 0 || t.mrope[2] < 0 || t.mrope[0] + t.mrope[1] + t.mrope[2] > t.head_dim / 2)
        abort();
    if (!(t.eps > 0) || !isfinite(t.eps) || !(t.rope_theta > 0) || !isfinite(t.rope_theta)) abort();
    if (!(t.timestep_scale > 0) || !isfinite(t.timestep_scale) || !(t.base_fps > 0) || !isfinite(t.base_fps)) abort();
    if (t.latent_ch <= 0 || t.patch <= 0 || t.patch_dim != t.patch * t.patch * t.latent_ch) abort();
    return 0;
}
