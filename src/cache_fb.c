/* cache_fb.c - the first-block cache's change signal (--cache fb, Cache-DiT's
 * FBCache): the first GEN block runs on every step and its residual (output
 * - input) per branch is the signal; the rest of the stack is skipped while
 * its accumulated relative L1 change stays below the threshold. The probe
 * runs the first block once more on a computed step (1 / layers of a
 * step). */
#include "stepcache.h"

static int64_t fb_size(const c3_stepcache_step *st) {
    int64_t S, D;
    model_gen_rows(st->model, st->g, &S, &D);
    return S * D;
}

static int fb_signal(const c3_stepcache_step *st, const bool want[2], float *const sig[2]) {
    if (want[0] && want[1] && model_batches(st->model)) {
        c3_gen_cache io = {.probe = {sig[0], sig[1]}};
        return model_gen_cached(st->model, 2, st->kv, st->x, st->g, st->timestep, NULL, &io);
    }
    for (int b = 0; b < 2; b++) {
        if (!want[b]) continue;
        c3_gen_cache io = {.probe = {sig[b]}};
        C3_TRY(model_gen_cached(st->model, 1, &st->kv[b], st->x, st->g, st->timestep, NULL, &io));
    }
    return C3_OK;
}

/* Cache-DiT's FBCache residual_diff_threshold default */
const c3_cache_kind c3_cache_fb = {
    .name = "fb", .threshold = 0.08, .whole = false, .size = fb_size, .signal = fb_signal};
