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
    for (int i = 0; i < ndim; i++) v.ne[i] = ne[i];
    return v;
}

c3_tensor c3_rows(const c3_tensor *t, int64_t r0, int64_t nrows) {
    int64_t cols = t->ndim ? c3_numel(t) / t->ne[0] : 1;
    int64_t ne[C3_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) ne[i] = t->ne[i];
    ne[0] = nrows;
    return c3_view(t, r0 * cols, t->ndim ? t->ndim : 1, ne);
}

int c3_alloc(c3_backend *be, c3_tensor *t, c3_dtype dtype, c3_memcat cat, int ndim, ...) {
    int64_t ne[C3_MAX_DIMS];
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++) ne[i] = va_arg(ap, int64_t);
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
