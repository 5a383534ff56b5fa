/* backend_cuda.cu - the CUDA backend for one device: memory and accounting,
 * host transfers with type conversion, elementwise ops (GLU, add, SiLU,
 * affine, clamp, embed, copy) and the operation table. Weights and
 * activations are bf16 on the device; statistics are fp32 inside kernels.
 * Every op is queued on the backend's one stream; only download and sync wait. */
#include "cuda_internal.h"

/* y[m, n] += bias[n] (the fp32 GEMM path has no fused bias). */
__global__ void k_add_bias_rows(float *y, const void *b, int bt, int64_t M, int64_t N) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < M * N; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += cu_ld(b, bt, i % N);
}
int cu_add_bias_rows(c3_backend *be, c3_tensor *y, const c3_tensor *bias, int64_t M, int64_t N) {
    k_add_bias_rows<<<cu_grid(be, M * N), CU_THREADS, 0, cu_of(be)->stream>>>((float *)y->data, bias->data,
                                                                             bias->dtype, M, N);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* Head dims above the flash kernels' limit (the VAE's one 1024-channel head)
 * go to the cuBLAS path (attention_gemm.cu); everything else to attention.cu. */
static int cu_attention_route(c3_backend *be, c3_tensor *out, const c3_tensor *q, const c3_kvseg *kv, int nseg,
                              bool causal, float scale) {
    if (q->ndim == 3 && q->ne[2] > CU_ATT_FLASH_MAXD && nseg == 1 && !causal)
        return cu_attention_gemm(be, out, q, kv, scale);
    return cu_attention(be, out, q, kv, nseg, causal, scale);
}

#include <stdio.h>
#include <stdlib.h>

/* Largest host<->device conversion staged through scratch at once (elements). */
#define CU_XFER_CHUNK ((int64_t)1 << 24)
/* Scratch grows in steps of this many bytes. */
#define CU_SCRATCH_ALIGN ((size_t)1 << 20)

/* ======================================================================== */
/* memory                                                                    */
/* ======================================================================== */

static size_t tensor_bytes(const c3_tensor *t) { return (size_t)c3_numel(t) * c3_dtype_size(t->dtype); }

static void account(c3_backend *be, c3_memcat cat, int64_t delta) {
    be->mem[cat] += delta;
    int64_t tot = 0;
    for (int i = 0; i < C3_MEM_NCAT; i++) tot += be->mem[i];
    if (tot > be->mem_peak) be->mem_peak = tot;
}

int cu_scratch(c3_backend *be, size_t bytes, void **out) {
    cu_ctx *c = cu_of(be);
    if (c->recording) c->scratch_in_graph = true;
    if (bytes > c->scratch_bytes) {
        if (c->recording)
            return c3_fail(C3_EFAIL,
                           "cuda scratch: %zu bytes needed while recording a graph (%zu held)",
                           bytes, c->scratch_bytes);
        size_t want = (bytes + CU_SCRATCH_ALIGN - 1) / CU_SCRATCH_ALIGN * CU_SCRATCH_ALIGN;
        if (c->scratch && c->scratch_in_graph &&
            c->nretired < (int)(sizeof c->retired / sizeof c->retired[0])) {
            c->retired[c->nretired++] = c->scratch; /* a recorded graph still names it */
            c->scratch = NULL;
            c->scratch_bytes = 0;
            c->scratch_in_graph = false;
        }
        if (c->scratch) {
            CU_CHECK(cudaFreeAsync(c->scratch, c->stream));
            account(be, C3_MEM_ACT, -(int64_t)c->scratch_bytes);
            c->scratch = NULL;
            c->scratch_bytes = 0;
        }
        CU_CHECK(cudaMallocAsync(&c->scratch, want, c->stream));
        c->scratch_bytes = want;
        account(be, C3_MEM_ACT, (int64_t)want);
    }
    *out = c->scratch;
    return C3_OK;
}

int cu_check_float(const char *op, const c3_tensor *t, const char *name) {
    if (!t || !t->data) return c3_fail(C3_EFAIL, "cuda %s: %s is missing", op, name);
    if (!cu_float_type(t->dtype))
        return c3_fail(C3_EFAIL, "cuda %s: %s has type %s; expected F32, BF16 or F16", op, name,
                       c3_dtype_name(t->dtype));
    return C3_OK;
}

static int cuda_alloc(c3_backend *be, c3_tensor *t, c3_dtype dtype, int ndim, const int64_t *ne,
                      c3_memcat cat) {
    memset(t, 0, sizeof *t);
    if (ndim < 0 || ndim > C3_MAX_DIMS) return c3_fail(C3_EFAIL, "cuda alloc: %d dimensions", ndim);
    if (dtype >= C3_NDTYPE) return c3_fail(C3_EFAIL, "cuda alloc: bad dtype %d", (int)dtype);
    CU_ENTER(be);
    t->be = be;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (ne[i] < 0) return c3_fail(C3_EFAIL, "cuda alloc: negative dimension %lld", (long long)ne[i]);
        t->ne[i] = ne[i];
    }
    size_t bytes = tensor_bytes(t);
    void *p = NULL;
    cudaError_t e = cudaMallocAsync(&p, bytes ? bytes : 1, cu_of(be)->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t fr = 0, tot = 0;
        (void)cudaMemGetInfo(&fr, &tot);
        return c3_fail(C3_ERESOURCE,
                       "out of GPU memory on device %d allocating %zu MiB (%zu MiB free of %zu); "
                       "use a smaller size, more GPUs (--tp/--ulysses) or --offload",
                       be->device, bytes >> 20, fr >> 20, tot >> 20);
    }
    t->data = p;
    t->owned = true;
    t->cat = cat;
    account(be, cat, (int64_t)bytes);
    return C3_OK;
}

static void cuda_free(c3_backend *be, c3_tensor *t) {
    if (!t->owned || !t->data) return;
    (void)cudaSetDevice(cu_of(be)->device);
    (void)cudaFreeAsync(t->data, cu_of(be)->stream); /* stream-ordered: queued work finishes first */
    account(be, t->cat, -(int64_t)tensor_bytes(t));
    t->data = NULL;
    t->owned = false;
}

/* ======================================================================== */
/* conversion and transfers                                                  */
/* ======================================================================== */

__global__ void k_convert(void *dst, int dt, const void *src, int st, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        cu_st(dst, dt, i, cu_ld(src, st, i));
}

int cu_convert(c3_backend *be, void *dst, c3_dtype dt, const void *src, c3_dtype st, int64_t n) {
    if (n <= 0) return C3_OK;
    k_convert<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(dst, dt, src, st, n);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

int cu_as_bf16(c3_backend *be, const c3_tensor *t, void *buf, const __nv_bfloat16 **out) {
    if (t->dtype == C3_BF16) {
        *out = (const __nv_bfloat16 *)t->data;
        return C3_OK;
    }
    C3_TRY(cu_convert(be, buf, C3_BF16, t->data, t->dtype, c3_numel(t)));
    *out = (const __nv_bfloat16 *)buf;
    return C3_OK;
}

static int cuda_upload(c3_backend *be, c3_tensor *dst, const void *src, c3_dtype st) {
    if (dst->dtype == C3_F8E4M3 && st == C3_F8E4M3) { /* FP8 weight codes, as stored */
        CU_ENTER(be);
        CU_CHECK(cudaMemcpyAsync(dst->data, src, (size_t)c3_numel(dst), cudaMemcpyHostToDevice,
                                 cu_of(be)->stream));
        return C3_OK;
    }
    C3_TRY(cu_check_float("upload", dst, "destination"));
    if (!cu_float_type(st))
        return c3_fail(C3_EFAIL, "cuda upload: host data of type %s; expected F32, BF16 or F16",
                       c3_dtype_name(st));
    CU_ENTER(be);
    cu_ctx *c = cu_of(be);
    int64_t n = c3_numel(dst);
    if (st == dst->dtype) {
        CU_CHECK(cudaMemcpyAsync(dst->data, src, tensor_bytes(dst), cudaMemcpyHostToDevice, c->stream));
        return C3_OK;
    }
    size_t ss = c3_dtype_size(st), ds = c3_dtype_size(dst->dtype);
    for (int64_t off = 0; off < n; off += CU_XFER_CHUNK) {
        int64_t m = C3_MIN(CU_XFER_CHUNK, n - off);
        void *stage;
        C3_TRY(cu_scratch(be, (size_t)m * ss, &stage));
        CU_CHECK(cudaMemcpyAsync(stage, (const char *)src + (size_t)off * ss, (size_t)m * ss,
                                 cudaMemcpyHostToDevice, c->stream));
        C3_TRY(cu_convert(be, (char *)dst->data + (size_t)off * ds, dst->dtype, stage, st, m));
    }
    return C3_OK;
}

static int cuda_download(c3_backend *be, float *dst, const c3_tensor *src) {
    C3_TRY(cu_check_float("download", src, "source"));
    CU_ENTER(be);
    cu_ctx *c = cu_of(be);
    int64_t n = c3_numel(src);
    if (src->dtype == C3_F32) {
        CU_CHECK(cudaMemcpyAsync(dst, src->data, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost,
                                 c->stream));
    } else {
        size_t ss = c3_dtype_size(src->dtype);
        for (int64_t off = 0; off < n; off += CU_XFER_CHUNK) {
            int64_t m = C3_MIN(CU_XFER_CHUNK, n - off);
            void *stage;
            C3_TRY(cu_scratch(be, (size_t)m * sizeof(float), &stage));
            C3_TRY(cu_convert(be, stage, C3_F32, (const char *)src->data + (size_t)off * ss, src->dtype, m));
            CU_CHECK(cudaMemcpyAsync(dst + off, stage, (size_t)m * sizeof(float), cudaMemcpyDeviceToHost,
                                     c->stream));
        }
    }
    CU_CHECK(cudaStreamSynchronize(c->stream));
    return C3_OK;
}

static int cuda_copy(c3_backend *be, c3_tensor *dst, const c3_tensor *src) {
    C3_TRY(cu_check_float("copy", dst, "destination"));
    C3_TRY(cu_check_float("copy", src, "source"));
    if (c3_numel(dst) != c3_numel(src))
        return c3_fail(C3_EFAIL, "cuda copy: %lld vs %lld elements", (long long)c3_numel(dst),
                       (long long)c3_numel(src));
    CU_ENTER(be);
    cu_ctx *c = cu_of(be);
    size_t db = tensor_bytes(dst), sb = tensor_bytes(src);
    const char *d0 = (const char *)dst->data, *s0 = (const char *)src->data;
    bool overlap = d0 < s0 + sb && s0 < d0 + db;
    if (src->dtype == dst->dtype && !overlap) {
        CU_CHECK(cudaMemcpyAsync(dst->data, src->data, db, cudaMemcpyDeviceToDevice, c->stream));
        return C3_OK;
    }
    if (overlap && d0 != s0) { /* memmove semantics: go through scratch */
        void *tmp;
        C3_TRY(cu_scratch(be, sb, &tmp));
        CU_CHECK(cudaMemcpyAsync(tmp, src->data, sb, cudaMemcpyDeviceToDevice, c->stream));
        return cu_convert(be, dst->data, dst->dtype, tmp, src->dtype, c3_numel(src));
    }
    if (overlap && src->dtype == dst->dtype) return C3_OK; /* same storage */
    if (overlap) return c3_fail(C3_EFAIL, "cuda copy: in-place type change %s -> %s is not supported",
                                c3_dtype_name(src->dtype), c3_dtype_name(dst->dtype));
    return cu_convert(be, dst->data, dst->dtype, src->data, src->dtype, c3_numel(src));
}

static int cuda_sync(c3_backend *be) {
    CU_ENTER(be);
    CU_CHECK(cudaStreamSynchronize(cu_of(be)->stream));
    return C3_OK;
}

/* ======================================================================== */
/* elementwise                                                               */
/* ======================================================================== */

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

static __device__ __forceinline__ float silu_f(float v) { return v / (1.0f + __expf(-v)); }

/* out[M, I] = silu(gu[:, :I]) * gu[:, I:] with torch's rounding: silu(gate)
 * is stored in the activation type before the multiply. */
__global__ void k_swiglu(void *out, int ot, const void *gu, int gt, int64_t M, int64_t I) {
    GRID_STRIDE(i, M * I) {
        int64_t r = i / I, j = i - r * I;
        float s = cu_round(ot, silu_f(cu_ld(gu, gt, 2 * I * r + j)));
        cu_st(out, ot, i, s * cu_ld(gu, gt, 2 * I * r + I + j));
    }
}
/* silu(gate) * up of eight bf16 values (k_swiglu's rounding points). */
static __device__ __forceinline__ uint4 swiglu8(uint4 g, uint4 u) {
    uint4 o;
    const __nv_bfloat162 *gh = (const __nv_bfloat162 *)&g, *uh = (const __nv_bfloat162 *)&u;
    __nv_bfloat162 *oh = (__nv_bfloat162 *)&o;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float2 gf = __bfloat1622float2(gh[e]), uf = __bfloat1622float2(uh[e]);
        float s0 = cu_round(C3_BF16, silu_f(gf.x)), s1 = cu_round(C3_BF16, silu_f(gf.y));
        oh[e] = __floats2bfloat162_rn(s0 * uf.x, s1 * uf.y);
    }
    return o;
}
/* The same in bf16, eight values per thread (I8 = I / 8, 16-byte aligned rows).
 * (A block-per-row form with four chunks of loads in flight a thread ran no
 * faster on the H200: 1.83 against 1.64 ms a T2I step, 67.7 against 65.3 ms a
 * 720p step, session 11 `step`; bench/NOTES.md.) */
__global__ void k_swiglu_bf16x8(uint4 *out, const uint4 *gu, int64_t M, int64_t I8) {
    GRID_STRIDE(i, M * I8) {
        int64_t r = i / I8, j = i - r * I8;
        out[i] = swiglu8(gu[2 * I8 * r + j], gu[2 * I8 * r + I8 + j]);
    }
}
__global__ void k_relu2(void *out, int ot, const void *u, int ut, int64_t n) {
    GRID_STRIDE(i, n) {
        float r = fmaxf(cu_ld(u, ut, i), 0.0f);
        cu_st(out, ot, i, r * r);
    }
}
__global__ void k_add(void *y, int yt, const void *x, int xt, int64_t n) {
    GRID_STRIDE(i, n) cu_st(y, yt, i, cu_ld(y, yt, i) + cu_ld(x, xt, i));
}
__global__ void k_silu(void *y, int yt, const void *x, int xt, int64_t n) {
    GRID_STRIDE(i, n) cu_st(y, yt, i, silu_f(cu_ld(x, xt, i)));
}
__global__ void k_clamp(void *y, int yt, const void *x, int xt, int64_t n, float lo, float hi) {
    GRID_STRIDE(i, n) cu_st(y, yt, i, fminf(fmaxf(cu_ld(x, xt, i), lo), hi));
}
/* x [C, N]; ab = [a[0..C) | b[0..C)] on the device, has_a/has_b select. */
__global__ void k_affine(void *y, int yt, const void *x, int xt, const float *ab, int C, int64_t N,
                         int has_a, int has_b) {
    GRID_STRIDE(i, (int64_t)C * N) {
        int c = (int)(i / N);
        float a = has_a ? ab[c] : 1.0f, b = has_b ? ab[C + c] : 0.0f;
        cu_st(y, yt, i, cu_ld(x, xt, i) * a + b);
    }
}
/* out [n, D] = table [V, D] rows ids[0..n) */
__global__ void k_embed(void *out, int ot, const void *table, int tt, const int32_t *ids, int n, int64_t D) {
    GRID_STRIDE(i, (int64_t)n * D) {
        int64_t r = i / D, d = i - r * D;
        cu_st(out, ot, i, cu_ld(table, tt, (int64_t)ids[r] * D + d));
    }
}

static int same_numel(const char *op, const c3_tensor *a, const c3_tensor *b) {
    if (c3_numel(a) != c3_numel(b))
        return c3_fail(C3_EFAIL, "cuda %s: %lld vs %lld elements", op, (long long)c3_numel(a),
                       (long long)c3_numel(b));
    return C3_OK;
}

static int cuda_glu(c3_backend *be, c3_tensor *out, const c3_tensor *gu, c3_act act) {
    C3_TRY(cu_check_float("glu", out, "out"));
    C3_TRY(cu_check_float("glu", gu, "gate/up"));
    CU_ENTER(be);
    int64_t n = c3_numel(out);
    cudaStream_t s = cu_of(be)->stream;
    if (act == C3_ACT_SWIGLU) {
        int64_t I = out->ndim ? out->ne[out->ndim - 1] : 1;
        if (c3_numel(gu) != 2 * n)
            return c3_fail(C3_EFAIL, "cuda glu: gate/up has %lld elements, expected 2 x %lld",
                           (long long)c3_numel(gu), (long long)n);
        if (n == 0) return C3_OK;
        if (out->dtype == C3_BF16 && gu->dtype == C3_BF16 && I % 8 == 0 &&
            ((uintptr_t)out->data | (uintptr_t)gu->data) % 16 == 0)
            k_swiglu_bf16x8<<<cu_grid(be, n / 8), CU_THREADS, 0, s>>>(
                (uint4 *)out->data, (const uint4 *)gu->data, n / I, I / 8);
        else
            k_swiglu<<<cu_grid(be, n), CU_THREADS, 0, s>>>(out->data, out->dtype, gu->data,
                                                           gu->dtype, n / I, I);
    } else if (act == C3_ACT_RELU2) {
        C3_TRY(same_numel("glu", out, gu));
        if (n == 0) return C3_OK;
        k_relu2<<<cu_grid(be, n), CU_THREADS, 0, s>>>(out->data, out->dtype, gu->data, gu->dtype,
                                                      n);
    } else {
        return c3_fail(C3_EFAIL, "cuda glu: unknown activation %d", (int)act);
    }
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* y and x: float tensors of the same element count (the elementwise ops). */
static int same_floats(const char *op, const c3_tensor *y, const c3_tensor *x) {
    C3_TRY(cu_check_float(op, y, "y"));
    C3_TRY(cu_check_float(op, x, "x"));
    return same_numel(op, y, x);
}

static int cuda_add(c3_backend *be, c3_tensor *y, const c3_tensor *x) {
    C3_TRY(same_floats("add", y, x));
    CU_ENTER(be);
    int64_t n = c3_numel(y);
    if (n == 0) return C3_OK;
    k_add<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(y->data, y->dtype, x->data, x->dtype, n);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

static int cuda_silu(c3_backend *be, c3_tensor *y, const c3_tensor *x) {
    C3_TRY(same_floats("silu", y, x));
    CU_ENTER(be);
    int64_t n = c3_numel(y);
    if (n == 0) return C3_OK;
    k_silu<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(y->data, y->dtype, x->data, x->dtype, n);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

static int cuda_clamp(c3_backend *be, c3_tensor *y, const c3_tensor *x, float lo, float hi) {
    C3_TRY(same_floats("clamp", y, x));
    CU_ENTER(be);
    int64_t n = c3_numel(y);
    if (n == 0) return C3_OK;
    k_clamp<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(y->data, y->dtype, x->data, x->dtype,
                                                                  n, lo, hi);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

static int cuda_affine(c3_backend *be, c3_tensor *y, const c3_tensor *x, const float *a, const float *b,
                       int C) {
    C3_TRY(same_floats("affine", y, x));
    int64_t n = c3_numel(x);
    if (C <= 0 || n % C)
        return c3_fail(C3_EFAIL, "cuda affine: %lld elements do not split into %d channels", (long long)n, C);
    CU_ENTER(be);
    if (n == 0) return C3_OK;
    cu_ctx *c = cu_of(be);
    float *ab;
    C3_TRY(cu_scratch(be, 2 * (size_t)C * sizeof(float), (void **)&ab));
    if (a) CU_CHECK(cudaMemcpyAsync(ab, a, (size_t)C * sizeof(float), cudaMemcpyHostToDevice, c->stream));
    if (b) CU_CHECK(cudaMemcpyAsync(ab + C, b, (size_t)C * sizeof(float), cudaMemcpyHostToDevice, c->stream));
    k_affine<<<cu_grid(be, n), CU_THREADS, 0, c->stream>>>(y->data, y->dtype, x->data, x->dtype, ab, C,
                                                           n / C, a != NULL, b != NULL);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

static int cuda_embed(c3_backend *be, c3_tensor *out, const c3_tensor *table, const int32_t *ids, int n) {
    C3_TRY(cu_check_float("embed", out, "out"));
    C3_TRY(cu_check_float("embed", table, "table"));
    if (table->ndim != 2) return c3_fail(C3_EFAIL, "cuda embed: table has %d dimensions, expected 2", table->ndim);
    int64_t V = table->ne[0], D = table->ne[1];
    if (c3_numel(out) != (int64_t)n * D)
        return c3_fail(C3_EFAIL, "cuda embed: out has %lld elements, expected %d x %lld",
                       (long long)c3_numel(out), n, (long long)D);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return c3_fail(C3_EINPUT, "token id %d is outside the vocabulary (%lld)", ids[i], (long long)V);
    CU_ENTER(be);
    if (n == 0) return C3_OK;
    cu_ctx *c = cu_of(be);
    int32_t *dids;
    C3_TRY(cu_scratch(be, (size_t)n * sizeof(int32_t), (void **)&dids));
    CU_CHECK(cudaMemcpyAsync(dids, ids, (size_t)n * sizeof(int32_t), cudaMemcpyHostToDevice, c->stream));
    k_embed<<<cu_grid(be, (int64_t)n * D), CU_THREADS, 0, c->stream>>>(out->data, out->dtype, table->data,
                                                                      table->dtype, dids, n, D);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* ======================================================================== */
/* layerwise offload: pinned host memory, the copy stream, events            */
/* ======================================================================== */

static cudaStream_t queue_of(c3_backend *be, int queue) {
    return queue == C3_Q_COPY ? cu_of(be)->copy_stream : cu_of(be)->stream;
}

static int cuda_host_alloc(c3_backend *be, void **p, size_t bytes) {
    *p = NULL;
    CU_ENTER(be);
    cudaError_t e = cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *p = NULL;
        return c3_fail(C3_ERESOURCE, "cannot pin %zu MiB of host memory for --offload (%s); free host memory or "
                       "run without --offload", bytes >> 20, cudaGetErrorString(e));
    }
    return C3_OK;
}

static void cuda_host_free(c3_backend *be, void *p) {
    (void)be;
    if (p) (void)cudaFreeHost(p);
}

static int cuda_event_new(c3_backend *be, void **ev, bool timing) {
    *ev = NULL;
    CU_ENTER(be);
    cudaEvent_t e;
    CU_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    *ev = (void *)e;
    return C3_OK;
}

static void cuda_event_free(c3_backend *be, void *ev) {
    if (!ev) return;
    (void)cudaSetDevice(cu_of(be)->device);
    (void)cudaEventDestroy((cudaEvent_t)ev);
}

static int cuda_event_record(c3_backend *be, void *ev, int queue) {
    CU_ENTER(be);
    CU_CHECK(cudaEventRecord((cudaEvent_t)ev, queue_of(be, queue)));
    return C3_OK;
}

static int cuda_event_wait(c3_backend *be, void *ev, int queue) {
    CU_ENTER(be);
    CU_CHECK(cudaStreamWaitEvent(queue_of(be, queue), (cudaEvent_t)ev, 0));
    return C3_OK;
}

static int cuda_event_ms(c3_backend *be, void *a, void *b, float *ms) {
    CU_ENTER(be);
    CU_CHECK(cudaEventSynchronize((cudaEvent_t)b));
    CU_CHECK(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b));
    return C3_OK;
}

static int cuda_upload_async(c3_backend *be, c3_tensor *dst, const void *src) {
    if (!dst || !dst->data || !src) return c3_fail(C3_EFAIL, "cuda upload_async: missing buffer");
    CU_ENTER(be);
    CU_CHECK(cudaMemcpyAsync(dst->data, src, tensor_bytes(dst), cudaMemcpyHostToDevice, cu_of(be)->copy_stream));
    return C3_OK;
}

/* ======================================================================== */
/* graphs                                                                    */
/* ======================================================================== */

static int cuda_graph_begin(c3_backend *be) {
    CU_ENTER(be);
    /* thread-local: other rank threads' calls are not this capture's business */
    CU_CHECK(cudaStreamBeginCapture(cu_of(be)->stream, cudaStreamCaptureModeThreadLocal));
    cu_of(be)->recording = true;
    return C3_OK;
}

static int cuda_graph_end(c3_backend *be, void **graph) {
    *graph = NULL;
    CU_ENTER(be);
    cudaGraph_t g = NULL;
    cu_of(be)->recording = false;
    CU_CHECK(cudaStreamEndCapture(cu_of(be)->stream, &g));
    cudaGraphExec_t x = NULL;
    cudaError_t e = cudaGraphInstantiate(&x, g, 0);
    (void)cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return c3_fail(C3_EFAIL, "cuda graph: instantiate failed: %s", cudaGetErrorString(e));
    }
    *graph = (void *)x;
    return C3_OK;
}

static int cuda_graph_launch(c3_backend *be, void *graph) {
    CU_ENTER(be);
    CU_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, cu_of(be)->stream));
    return C3_OK;
}

static void cuda_graph_free(c3_backend *be, void *graph) {
    (void)be;
    if (graph) (void)cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

/* ======================================================================== */
/* the table                                                                 */
/* ======================================================================== */

static void cuda_destroy(c3_backend *be) {
    cu_ctx *c = cu_of(be);
    if (c) {
        (void)cudaSetDevice(c->device);
        if (c->stream) (void)cudaStreamSynchronize(c->stream);
        if (c->scratch) (void)cudaFree(c->scratch);
        for (int i = 0; i < c->nretired; i++)
            (void)cudaFree(c->retired[i]);
        cu_gemm_cache_free(be);
        if (c->lt_ws) (void)cudaFree(c->lt_ws);
        if (c->lt) (void)cublasLtDestroy(c->lt);
        if (c->blas) (void)cublasDestroy(c->blas);
        if (c->stream) (void)cudaStreamDestroy(c->stream);
        if (c->copy_stream) (void)cudaStreamDestroy(c->copy_stream);
        free(c);
    }
    free(be);
}

extern "C" cudaStream_t c3_cuda_stream(c3_backend *be) { return cu_of(be)->stream; }

static int cuda_init(c3_backend *be, cu_ctx *c, int device) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return c3_fail(C3_ERESOURCE, "no CUDA device found (%s); run with --device cpu",
                       e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (device < 0 || device >= count)
        return c3_fail(C3_ERESOURCE, "not enough GPUs: device %d asked for, %d found", device, count);
    c->device = device;
    CU_CHECK(cudaSetDevice(device));
    cudaDeviceProp p;
    CU_CHECK(cudaGetDeviceProperties(&p, device));
    if (p.major < 8)
        return c3_fail(C3_ERESOURCE, "GPU %d (%s) has compute capability %d.%d; cosmos3 needs 8.0 or newer",
                       device, p.name, p.major, p.minor);
    c->sm_count = p.multiProcessorCount;
    c->smem_optin = p.sharedMemPerBlockOptin;
    /* Keep freed blocks in the stream-ordered pool instead of returning them. */
    cudaMemPool_t pool;
    CU_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = UINT64_MAX;
    CU_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    CU_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CU_CHECK(cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&c->blas));
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    CUBLAS_CHECK(cublasLtCreate(&c->lt));
    CU_CHECK(cudaMalloc(&c->lt_ws, CU_LT_WORKSPACE));
    account(be, C3_MEM_ACT, CU_LT_WORKSPACE);
    return C3_OK;
}

extern "C" int cuda_backend_new(int device, c3_backend **out) {
    *out = NULL;
    c3_backend *be = (c3_backend *)xcalloc(1, sizeof *be);
    cu_ctx *c = (cu_ctx *)xcalloc(1, sizeof *c);
    be->name = "cuda";
    be->device = device;
    be->caps = C3_CAP_PINNED | C3_CAP_EVENTS | C3_CAP_ASYNC_UPLOAD | C3_CAP_GRAPHS | C3_CAP_VAE_CL |
               C3_CAP_FP8 | C3_CAP_RANDOM;
    /* COSMOS3_CUDA_FP32=1: F32 weights and activations with fp32 GEMMs (no
     * TF32), to separate bugs from bf16 rounding against the fp32 goldens. */
    bool fp32 = c3_env()->cuda_fp32;
    be->weight_dtype = fp32 ? C3_F32 : C3_BF16;
    be->act_dtype = fp32 ? C3_F32 : C3_BF16;
    be->ctx = c;
    be->destroy = cuda_destroy;
    be->alloc = cuda_alloc;
    be->free = cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->copy = cuda_copy;
    be->sync = cuda_sync;
    be->fill_random = cu_fill_random;
    be->quantize_e4m3 = cu_quantize_e4m3;
    be->linear = cu_linear;
    be->rmsnorm = cu_rmsnorm;
    be->rope = cu_rope;
    be->qkv_rope = cu_qkv_rope;
    be->attention = cu_attention_route;
    be->glu = cuda_glu;
    be->add = cuda_add;
    be->embed = cuda_embed;
    be->conv3d = cu_conv3d;
    be->chan_rmsnorm = cu_chan_rmsnorm;
    be->silu = cuda_silu;
    be->permute = cu_permute;
    be->upsample2x = cu_upsample2x;
    be->vcl_weight = cu_vcl_weight;
    be->vcl_conv = cu_vcl_conv;
    be->vcl_norm = cu_vcl_norm;
    be->vcl_upsample = cu_vcl_upsample;
    be->vcl_dupup = cu_vcl_dupup;
    be->vcl_layout = cu_vcl_layout;
    be->vcl_zero = cu_vcl_zero;
    be->conv3d_strided = cu_conv3d_strided;
    be->avgdown3d = cu_avgdown3d;
    be->affine = cuda_affine;
    be->graph_begin = cuda_graph_begin;
    be->graph_end = cuda_graph_end;
    be->graph_launch = cuda_graph_launch;
    be->graph_free = cuda_graph_free;
    be->clamp = cuda_clamp;
    be->host_alloc = cuda_host_alloc;
    be->host_free = cuda_host_free;
    be->event_new = cuda_event_new;
    be->event_free = cuda_event_free;
    be->event_record = cuda_event_record;
    be->event_wait = cuda_event_wait;
    be->event_ms = cuda_event_ms;
    be->upload_async = cuda_upload_async;
    int rc = cuda_init(be, c, device);
    if (rc != C3_OK) {
        cuda_destroy(be);
        return rc;
    }
    *out = be;
    return C3_OK;
}

/* ---- device queries (plan.h): count and memory of the visible GPUs ---- */
extern "C" int cuda_gpu_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
    return n;
}

extern "C" int cuda_gpu_probe(char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, n, "%s", cudaGetErrorString(e));
        return 0;
    }
    if (count == 0) {
        const char *v = getenv("CUDA_VISIBLE_DEVICES");
        if (v)
            snprintf(why, n, "the driver lists no GPU with CUDA_VISIBLE_DEVICES='%.64s'", v);
        else
            snprintf(why, n, "the driver lists no GPU");
    }
    return count;
}

extern "C" int cuda_gpu_id(int dev, char *id, size_t n) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return c3_fail(C3_ERESOURCE, "GPU %d: cannot query it", dev);
    int k = snprintf(id, n, "%04x:%02x:%02x.0 GPU-", (unsigned)prop.pciDomainID,
                     (unsigned)prop.pciBusID, (unsigned)prop.pciDeviceID);
    for (int i = 0; i < 16 && k > 0 && (size_t)k + 2 < n; i++, k += 2)
        snprintf(id + k, n - (size_t)k, "%02x", (unsigned char)prop.uuid.bytes[i]);
    return C3_OK;
}

extern "C" int cuda_gpu_info(int dev, char *name, size_t n, int64_t *total, int64_t *free_b) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return c3_fail(C3_ERESOURCE, "GPU %d: cannot query it", dev);
    snprintf(name, n, "%s", prop.name);
    size_t fr = 0, tot = 0;
    int old = 0;
    cudaGetDevice(&old);
    if (cudaSetDevice(dev) == cudaSuccess && cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
        *total = (int64_t)tot;
        *free_b = (int64_t)fr;
    } else {
        *total = (int64_t)prop.totalGlobalMem;
        *free_b = *total;
    }
    cudaSetDevice(old);
    return C3_OK;
}
