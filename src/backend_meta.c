/* backend_meta.c - a backend that stores nothing: tensors keep their dtype
 * and shape, uploads and copies are accepted and dropped. Loading a model
 * and its VAE onto it runs every check gen's load makes (tensor names,
 * shapes, dtypes, FP8 scales) without a byte of weights: what `cosmos3 info`
 * validates a checkpoint with (src/api_checkpoint.c). No compute op is set. */
#include "backend.h"

#include <stdlib.h>

/* What every tensor's data points at: never read or written (views offset
 * from it, so it must not be NULL). */
static char meta_mark[64];

static int meta_alloc(c3_backend *be, c3_tensor *t, c3_dtype dtype, int ndim, const int64_t *ne,
                      c3_memcat cat) {
    memset(t, 0, sizeof *t);
    if (ndim < 0 || ndim > C3_MAX_DIMS) return c3_fail(C3_EFAIL, "meta alloc: %d dimensions", ndim);
    t->be = be;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->ne[i] = ne[i];
    t->data = meta_mark;
    t->owned = true;
    t->cat = cat;
    be->mem[cat] += c3_numel(t) * (int64_t)c3_dtype_size(dtype);
    return C3_OK;
}

static void meta_free(c3_backend *be, c3_tensor *t) {
    if (!t->owned) return;
    be->mem[t->cat] -= c3_numel(t) * (int64_t)c3_dtype_size(t->dtype);
    t->data = NULL;
    t->owned = false;
}

static int meta_upload(c3_backend *be, c3_tensor *dst, const void *src, c3_dtype st) {
    (void)be, (void)dst, (void)src, (void)st;
    return C3_OK;
}

static int meta_copy(c3_backend *be, c3_tensor *dst, const c3_tensor *src) {
    (void)be;
    if (c3_numel(dst) != c3_numel(src))
        return c3_fail(C3_EFAIL, "meta copy: %lld elements into %lld", (long long)c3_numel(src),
                       (long long)c3_numel(dst));
    return C3_OK;
}

static int meta_permute(c3_backend *be, c3_tensor *y, const c3_tensor *x, const int *perm) {
    (void)perm;
    return meta_copy(be, y, x);
}

static int meta_sync(c3_backend *be) {
    (void)be;
    return C3_OK;
}

static void meta_destroy(c3_backend *be) {
    free(be);
}

c3_backend *c3_backend_meta(void) {
    c3_backend *be = xcalloc(1, sizeof *be);
    *be = (c3_backend){
        .name = "meta",
        .device = -1,
        .weight_dtype = C3_BF16,
        .act_dtype = C3_F32,
        .meta = true,
        .destroy = meta_destroy,
        .alloc = meta_alloc,
        .free = meta_free,
        .upload = meta_upload,
        .copy = meta_copy,
        .sync = meta_sync,
        .permute = meta_permute,
    };
    return be;
}
