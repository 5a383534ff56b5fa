/* backend.c - views and allocation helpers over the backend table. */
#include "backend.h"

#include <stdarg.h>
#include <stdlib.h>

c3_tensor c3_view(const c3_tensor *t, int64_t offset, int ndim, const int64_t *ne) {
    c3_tensor v = *t;
    v.owned = false;
    memset(&v.fp8, 0, sizeof v.fp8); /* a weight view gets its own scales (model_load.c) */
    v.data = (char *)t->data + (size_t)offset * c3_dtype_size(t->dtype);
    v.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        v.ne[i] = ne[i];
    return v;
}

c3_tensor c3_rows(const c3_tensor *t, int64_t r0, int64_t nrows) {
    int64_t cols = t->ndim ? c3_numel(t) / t->ne[0] : 1;
    int64_t ne[C3_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++)
        ne[i] = t->ne[i];
    ne[0] = nrows;
    return c3_view(t, r0 * cols, t->ndim ? t->ndim : 1, ne);
}

int c3_alloc(c3_backend *be, c3_tensor *t, c3_dtype dtype, c3_memcat cat, int ndim, ...) {
    int64_t ne[C3_MAX_DIMS];
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++)
        ne[i] = va_arg(ap, int64_t);
    va_end(ap);
    return be->alloc(be, t, dtype, ndim, ne, cat);
}

void c3_free(c3_tensor *t) {
    if (t && t->be && t->owned) t->be->free(t->be, t);
    if (t) memset(t, 0, sizeof *t);
}

void c3_backend_destroy(c3_backend *be) {
    if (be && be->destroy) be->destroy(be);
}

int c3_backend_check(const c3_backend *be) {
    static const char *const names[] = {
        "pinned", "events", "async upload", "graphs", "channels-last VAE", "FP8", "random weights"};
    const struct {
        unsigned cap;
        const char *op;
        bool ok;
    } need[] = {
        {C3_CAP_PINNED, "host_alloc", be->host_alloc},
        {C3_CAP_PINNED, "host_free", be->host_free},
        {C3_CAP_EVENTS, "event_new", be->event_new},
        {C3_CAP_EVENTS, "event_free", be->event_free},
        {C3_CAP_EVENTS, "event_record", be->event_record},
        {C3_CAP_EVENTS, "event_wait", be->event_wait},
        {C3_CAP_EVENTS, "event_ms", be->event_ms},
        {C3_CAP_ASYNC_UPLOAD, "upload_async", be->upload_async},
        {C3_CAP_GRAPHS, "graph_begin", be->graph_begin},
        {C3_CAP_GRAPHS, "graph_end", be->graph_end},
        {C3_CAP_GRAPHS, "graph_launch", be->graph_launch},
        {C3_CAP_GRAPHS, "graph_free", be->graph_free},
        {C3_CAP_VAE_CL, "vcl_weight", be->vcl_weight},
        {C3_CAP_VAE_CL, "vcl_conv", be->vcl_conv},
        {C3_CAP_VAE_CL, "vcl_norm", be->vcl_norm},
        {C3_CAP_VAE_CL, "vcl_upsample", be->vcl_upsample},
        {C3_CAP_VAE_CL, "vcl_dupup", be->vcl_dupup},
        {C3_CAP_VAE_CL, "vcl_layout", be->vcl_layout},
        {C3_CAP_VAE_CL, "vcl_zero", be->vcl_zero},
        {C3_CAP_FP8, "quantize_e4m3", be->quantize_e4m3},
        {C3_CAP_RANDOM, "fill_random", be->fill_random},
    };
    for (size_t i = 0; i < C3_ARRAY_LEN(need); i++)
        if ((be->caps & need[i].cap) && !need[i].ok)
            return c3_fail(C3_EFAIL, "backend %s claims %s but has no %s", be->name,
                           names[__builtin_ctz(need[i].cap)], need[i].op);
    return C3_OK;
}
