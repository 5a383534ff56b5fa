/* latents.c - latents as safetensors ("latents" [1, C, T, h, w]), the one
 * file the library writes when asked (cosmos3_latents_write). */
#include <stdio.h>
#include <stdlib.h>

#include "cosmos3.h"
#include "safetensors.h"

int cosmos3_latents_write(const char *path, const float *latents, const int shape[5],
                          bool overwrite, char *err, size_t errlen) {
    st_wtensor wt = {.name = "latents", .dtype = C3_F32, .ndim = 5, .data = latents};
    for (int i = 0; i < 5; i++)
        wt.shape[i] = shape[i];
    int rc = st_write(path, &wt, 1, NULL, 0, overwrite);
    if (rc && err && errlen) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}

static int read_latents(const char *path, const int want[5], float **out, size_t *n) {
    st_file f;
    if (st_open(&f, path)) return C3_EINPUT; /* st_open's message names the file and the cause */
    const st_tensor *t = st_find(&f, "latents");
    bool ok = t && t->ndim == 5;
    for (int i = 0; ok && i < 5; i++)
        ok = t->shape[i] == want[i];
    if (!ok) {
        st_close(&f);
        return c3_fail(C3_EINPUT,
                       "%s: needs a tensor 'latents' of shape [%d, %d, %d, %d, %d] for this size",
                       path, want[0], want[1], want[2], want[3], want[4]);
    }
    if (t->dtype != C3_F32) {
        c3_dtype dt = t->dtype; /* t lives in f */
        st_close(&f);
        return c3_fail(C3_EINPUT,
                       "%s: tensor 'latents' is %s; it must be F32 (float32 noise, e.g. "
                       "torch.randn(...).float())",
                       path, c3_dtype_name(dt));
    }
    *n = (size_t)st_numel(t);
    *out = xmalloc(*n * sizeof(float));
    c3_to_f32(*out, t->data, t->dtype, *n);
    st_close(&f);
    size_t bad = c3_first_nonfinite(*out, *n);
    if (bad < *n) {
        int rc = c3_fail(C3_EINPUT,
                         "%s: 'latents' holds %g at element %zu; noise must be finite numbers",
                         path, (double)(*out)[bad], bad);
        free(*out);
        *out = NULL;
        *n = 0;
        return rc;
    }
    return C3_OK;
}

int cosmos3_latents_read(const char *path, const int want[5], float **out, size_t *n, char *err,
                         size_t errlen) {
    *out = NULL;
    *n = 0;
    int rc = read_latents(path, want, out, n);
    if (rc && err && errlen) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}

int cosmos3_step_noise_read(const char *path, int steps, const int want[5], float **out, size_t *n,
                            char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    st_file f;
    int rc = st_open(&f, path);
    if (rc) rc = c3_fail(C3_EINPUT, "%s", c3_errmsg());
    const st_tensor *t = rc ? NULL : st_find(&f, "step_noise");
    if (t) {
        bool ok = t->ndim == 6 && t->shape[0] == steps;
        for (int i = 0; ok && i < 5; i++)
            ok = t->shape[i + 1] == want[i];
        if (ok) {
            *n = (size_t)st_numel(t);
            *out = xmalloc(*n * sizeof(float));
            c3_to_f32(*out, t->data, t->dtype, *n);
        } else {
            rc = c3_fail(
                C3_EINPUT,
                "%s: 'step_noise' must have shape [%d, %d, %d, %d, %d, %d] (steps, 1, C, T, "
                "h, w) for this run",
                path, steps, want[0], want[1], want[2], want[3], want[4]);
        }
    }
    if (!rc || t) st_close(&f);
    if (rc && err && errlen) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}
