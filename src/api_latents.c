/* api_latents.c - latents as safetensors ("latents" [1, C, T, h, w]), the one
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

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* Noise tensor `name` of f (the caller's file): shape[ndim] exactly
 * (COSMOS3_EUSAGE naming both shapes: the request's size does not fit the
 * file), F32 (COSMOS3_EINPUT naming the dtype: noise is float32, and the
 * other dtypes a safetensors file may hold are refused, not converted), every
 * value finite (COSMOS3_EINPUT naming the first bad element by its index). */
static int read_noise(const st_file *f, const char *path, const char *name, int ndim,
                      const int64_t *shape, const char *dims, float **out, size_t *n) {
    const st_tensor *t = st_find(f, name);
    char want[160], got[160];
    shape_text(want, sizeof want, ndim, shape);
    if (!t)
        return c3_fail(C3_EUSAGE, "%s: needs a tensor '%s' of shape %s %s for this size; it has none",
                       path, name, want, dims);
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        shape_text(got, sizeof got, t->ndim, t->shape);
        return c3_fail(C3_EUSAGE, "%s: needs a tensor '%s' of shape %s %s for this size; it has %s",
                       path, name, want, dims, got);
    }
    if (t->dtype != C3_F32)
        return c3_fail(C3_EINPUT,
                       "%s: tensor '%s' is %s; it must be F32 (float32 noise, e.g. "
                       "torch.randn(...).float(); BF16, F16, I64, U8 and the other dtypes are "
                       "refused, not converted)",
                       path, name, c3_dtype_name(t->dtype));
    *n = (size_t)st_numel(t);
    *out = xmalloc((*n ? *n : 1) * sizeof(float));
    c3_to_f32(*out, t->data, t->dtype, *n);
    size_t bad = c3_first_nonfinite(*out, *n);
    if (bad < *n) {
        /* the element's index in the tensor, last dimension fastest */
        int64_t idx[8] = {0}; /* ndim <= 6 */
        size_t r = bad;
        for (int i = ndim - 1; i >= 0; i--) {
            idx[i] = (int64_t)(r % (size_t)shape[i]);
            r /= (size_t)shape[i];
        }
        shape_text(got, sizeof got, ndim, idx);
        int rc = c3_fail(C3_EINPUT,
                         "%s: tensor '%s' holds %g at %s (element %zu); noise must be finite "
                         "numbers",
                         path, name, (double)(*out)[bad], got, bad);
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
    st_file f;
    int rc = st_open(&f, path); /* its message names the file and the cause */
    if (rc) {
        rc = C3_EINPUT;
    } else {
        int64_t shape[5];
        for (int i = 0; i < 5; i++)
            shape[i] = want[i];
        rc = read_noise(&f, path, "latents", 5, shape, "(1, C, T, h, w)", out, n);
        st_close(&f);
    }
    if (rc && err && errlen) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}

int cosmos3_step_noise_read(const char *path, int steps, const int want[5], float **out, size_t *n,
                            char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    st_file f;
    int rc = st_open(&f, path);
    if (rc) {
        rc = C3_EINPUT;
    } else {
        int64_t shape[6] = {steps};
        for (int i = 0; i < 5; i++)
            shape[i + 1] = want[i];
        if (st_find(&f, "step_noise")) /* optional: absent, the seed's stream re-noises */
            rc = read_noise(&f, path, "step_noise", 6, shape, "(steps, 1, C, T, h, w)", out, n);
        st_close(&f);
    }
    if (rc && err && errlen) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}
