/* backend_cpu.c - CPU backend: memory, elementwise ops and the table.
 * Tensors are F32 in host memory; uploads convert bf16/f16 weights once. */
#include "backend_cpu.h"

#include <math.h>
#include <stdlib.h>

static int cpu_alloc(c3_backend *be, c3_tensor *t, c3_dtype dtype, int ndim, const int64_t *ne,
                     c3_memcat cat) {
    (void)dtype; /* the CPU stores F32 whatever was asked */
    memset(t, 0, sizeof *t);
    if (ndim < 0 || ndim > C3_MAX_DIMS) return c3_fail(C3_EFAIL, "cpu alloc: %d dimensions", ndim);
    t->be = be;
    t->dtype = C3_F32;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->ne[i] = ne[i];
    size_t bytes = (size_t)c3_numel(t) * sizeof(float);
    t->data = calloc(1, bytes ? bytes : 1);
    if (!t->data)
        return c3_fail(C3_ERESOURCE, "out of host memory allocating %zu MiB", bytes >> 20);
    t->owned = true;
    t->cat = cat;
    be->mem[cat] += (int64_t)bytes;
    int64_t tot = be->mem[0] + be->mem[1] + be->mem[2];
    if (tot > be->mem_peak) be->mem_peak = tot;
    return C3_OK;
}

static void cpu_free(c3_backend *be, c3_tensor *t) {
    if (!t->owned) return;
    be->mem[t->cat] -= (int64_t)((size_t)c3_numel(t) * sizeof(float));
    free(t->data);
    t->data = NULL;
    t->owned = false;
}

static int cpu_upload(c3_backend *be, c3_tensor *dst, const void *src, c3_dtype st) {
    (void)be;
    c3_to_f32(dst->data, src, st, (size_t)c3_numel(dst));
    return C3_OK;
}

static int cpu_download(c3_backend *be, float *dst, const c3_tensor *src) {
    (void)be;
    memcpy(dst, src->data, (size_t)c3_numel(src) * sizeof(float));
    return C3_OK;
}

static int cpu_copy(c3_backend *be, c3_tensor *dst, const c3_tensor *src) {
    (void)be;
    if (c3_numel(dst) != c3_numel(src))
        return c3_fail(C3_EFAIL, "cpu copy: %lld vs %lld elements", (long long)c3_numel(dst),
                       (long long)c3_numel(src));
    memmove(dst->data, src->data, (size_t)c3_numel(src) * sizeof(float));
    return C3_OK;
}

static int cpu_sync(c3_backend *be) {
    (void)be;
    return C3_OK;
}

static int cpu_glu(c3_backend *be, c3_tensor *out, const c3_tensor *gu, c3_act act) {
    (void)be;
    int64_t n = c3_numel(out);
    float *o = out->data;
    const float *u = gu->data;
    if (act == C3_ACT_SWIGLU) {
        int64_t I = out->ndim ? out->ne[out->ndim - 1] : 1;
        if (c3_numel(gu) != 2 * n || I <= 0)
            return c3_fail(C3_EFAIL, "cpu glu: gate/up holds %lld elements, expected 2 x %lld",
                           (long long)c3_numel(gu), (long long)n);
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) {
            int64_t r = i / I, j = i - r * I;
            float g = u[2 * I * r + j];
            o[i] = g / (1.0f + expf(-g)) * u[2 * I * r + I + j];
        }
    } else {
        if (c3_numel(gu) != n)
            return c3_fail(C3_EFAIL, "cpu glu: input holds %lld elements, expected %lld",
                           (long long)c3_numel(gu), (long long)n);
#pragma omp parallel for schedule(static) if (n > 65536)
        for (int64_t i = 0; i < n; i++) {
            float r = u[i] > 0 ? u[i] : 0;
            o[i] = r * r;
        }
    }
    return C3_OK;
}

static int cpu_add(c3_backend *be, c3_tensor *y, const c3_tensor *x) {
    (void)be;
    int64_t n = c3_numel(y);
    float *a = y->data;
    const float *b = x->data;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) a[i] += b[i];
    return C3_OK;
}

static int cpu_embed(c3_backend *be, c3_tensor *out, const c3_tensor *table, const int32_t *ids,
                     int n) {
    (void)be;
    int64_t V = table->ne[0], D = table->ne[1];
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= V)
            return c3_fail(C3_EINPUT, "token id %d is outside the vocabulary (%lld)", ids[i], (long long)V);
        memcpy((float *)out->data + (size_t)i * (size_t)D, (const float *)table->data + (size_t)ids[i] * (size_t)D,
               (size_t)D * sizeof(float));
    }
    return C3_OK;
}

static int cpu_silu(c3_backend *be, c3_tensor *y, const c3_tensor *x) {
    (void)be;
    int64_t n = c3_numel(x);
    float *o = y->data;
    const float *a = x->data;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) o[i] = a[i] / (1.0f + expf(-a[i]));
    return C3_OK;
}

static int cpu_affine(c3_backend *be, c3_tensor *y, const c3_tensor *x, const float *a, const float *b,
                      int C) {
    (void)be;
    int64_t N = c3_numel(x) / C;
    float *o = y->data;
    const float *in = x->data;
    for (int c = 0; c < C; c++) {
        float s = a ? a[c] : 1.0f, t = b ? b[c] : 0.0f;
        for (int64_t i = 0; i < N; i++) o[c * N + i] = in[c * N + i] * s + t;
    }
    return C3_OK;
}

static int cpu_clamp(c3_backend *be, c3_tensor *y, const c3_tensor *x, float lo, float hi) {
    (void)be;
    int64_t n = c3_numel(x);
    float *o = y->data;
    const float *a = x->data;
    for (int64_t i = 0; i < n; i++) o[i] = a[i] < lo ? lo : a[i] > hi ? hi : a[i];
    return C3_OK;
}

static void cpu_destroy(c3_backend *be) { free(be); }

c3_backend *c3_backend_cpu(void) {
    c3_backend *be = xcalloc(1, sizeof *be);
    *be = (c3_backend){
        .name = "cpu",
        .device = -1,
        .weight_dtype = C3_F32,
        .act_dtype = C3_F32,
        .destroy = cpu_destroy,
        .alloc = cpu_alloc,
        .free = cpu_free,
        .upload = cpu_upload,
        .download = cpu_download,
        .copy = cpu_copy,
        .sync = cpu_sync,
        .linear = cpu_linear,
        .rmsnorm = cpu_rmsnorm,
        .rope = cpu_rope,
        .attention = cpu_attention,
        .qkv_rope = cpu_qkv_rope,
        .glu = cpu_glu,
        .add = cpu_add,
        .embed = cpu_embed,
        .conv3d = cpu_conv3d,
        .chan_rmsnorm = cpu_chan_rmsnorm,
        .silu = cpu_silu,
        .permute = cpu_permute,
        .upsample2x = cpu_upsample2x,
        .affine = cpu_affine,
        .clamp = cpu_clamp,
        .conv3d_strided = cpu_conv3d_strided,
        .avgdown3d = cpu_avgdown3d,
    };
    return be;
}
