/* attention.cu - flash-style attention: online softmax with fp32 running
 * max/sum and fp32 output accumulators, never an Sq x Skv score matrix.
 * GQA (query head h reads kv head h / (Hq/Hkv)), several key segments
 * (GEN queries over [UND K/V | GEN K/V]), causal masking (one segment),
 * and `valid` masking of each segment's padded tail.
 *
 * Two kernels:
 *  - att_mma<D>: bf16 tensor cores (mma.sync m16n8k16, fp32 accumulate) for
 *    bf16 tensors and head_dim D in {16, 32, 64, 128}. A block of 4 warps
 *    owns 64 queries of one head; each warp owns 16 query rows, keeps its Q
 *    fragments, scores, probabilities and output in registers, and streams
 *    64-key K/V tiles through shared memory.
 *  - att_wgmma: the Hopper kernel (sm_90a) for bf16, head_dim 128, non-causal
 *    (the GEN shapes): wgmma from shared memory tiles that TMA fills, a
 *    producer warpgroup and two consumer warpgroups (see below). Developed
 *    and timed in cuda/lab/attention_lab.cu (bench/NOTES.md).
 *  - att_fp8 (attention_fp8.cuh): the FP8 variant of att_wgmma for the GEN
 *    attention when be->attn_fp8 asks for it (--attention fp8): Q, K, V
 *    quantised per head to E4M3 by three passes, P in E4M3, fp32
 *    accumulation. Where it cannot run the bf16 kernels do, and the backend
 *    counts the call as declined with the reason (the engine warns once).
 *  - att_generic: any float type and any head_dim up to ATT_GEN_MAXD (the
 *    VAE's single-head attention), one warp per query, fp32 throughout.
 * att_mma takes what att_wgmma does not (causal, other head dims, GPUs
 * before Hopper, tensors not 16-byte aligned). */
#include <cuda.h>

#include "cuda_internal.h"

#include <math.h>
#include <type_traits>

#define ATT_MAX_SEG 4
#define ATT_WARPS 4
#define ATT_BQ (16 * ATT_WARPS) /* queries per block: 16 rows per warp */
#define ATT_BK 64               /* keys per shared-memory tile */
#define ATT_PAD 8               /* bf16 row padding: rows shift by 4 banks */
#define ATT_GEN_BK 32           /* generic kernel: keys per tile (one per lane) */
#define ATT_GEN_MAXD 512        /* generic kernel: largest head_dim */
#define LOG2E 1.4426950408889634f

typedef struct {
    const void *q; /* [Sq, Hq, D] */
    void *out;     /* [Sq, Hq, D] */
    int qt, ot;    /* dtypes (generic kernel) */
    int64_t Sq;
    int Hq, Hkv, D;
    int nseg;
    const void *k[ATT_MAX_SEG], *v[ATT_MAX_SEG]; /* [n, Hkv, D] */
    int kt[ATT_MAX_SEG], vt[ATT_MAX_SEG];
    int64_t n[ATT_MAX_SEG], valid[ATT_MAX_SEG], start[ATT_MAX_SEG];
    int causal;
    int64_t causal_off; /* query i sees global key j <= i + causal_off */
    float scale_log2;   /* softmax scale times log2(e): exp2 replaces exp */
} att_args;

/* lab override: 0 automatic, 1 mma.sync tensor cores, 2 generic, 3 Hopper wgmma */
static int att_which = 0;
extern "C" void c3_cuda_attention_kernel(int which) { att_which = which; }

/* ======================================================================== */
/* tensor-core kernel                                                        */
/* ======================================================================== */

static __device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); /* .x = lo (lower address / lower k) */
    return *(uint32_t *)&h;
}
static __device__ __forceinline__ uint32_t pack_raw(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}

/* Fragment layout of m16n8k16 (g = lane / 4, t = lane % 4):
 *   A 16x16 row-major: a0 (g, 2t..2t+1) a1 (g+8, 2t..) a2 (g, 2t+8..) a3 (g+8, 2t+8..)
 *   B 16x8 (k x n):    b0 (k = 2t..2t+1, n = g)  b1 (k = 2t+8.., n = g)
 *   C 16x8:            c0,c1 (g, 2t..2t+1)       c2,c3 (g+8, 2t..2t+1) */
template <int D>
__global__ void __launch_bounds__(ATT_WARPS * 32) att_mma(att_args a) {
    constexpr int KS = D / 16; /* k-steps over head_dim */
    constexpr int DT = D / 8;  /* n-tiles over head_dim */
    constexpr int NT = ATT_BK / 8;
    constexpr int LD = D + ATT_PAD;
    extern __shared__ __align__(16) unsigned char att_smem[];
    __nv_bfloat16 *Ks = (__nv_bfloat16 *)att_smem; /* [ATT_BK][LD] */
    __nv_bfloat16 *Vs = Ks + ATT_BK * LD;          /* [ATT_BK][LD] */

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int h = blockIdx.y, hk = h / (a.Hq / a.Hkv);
    const int64_t qblk = (int64_t)blockIdx.x * ATT_BQ;
    const int64_t r0 = qblk + warp * 16 + g, r1 = r0 + 8; /* this lane's two query rows */
    const int64_t qstride = (int64_t)a.Hq * D, kstride = (int64_t)a.Hkv * D;
    const __nv_bfloat16 *q = (const __nv_bfloat16 *)a.q;

    uint32_t qa[KS][4];
#pragma unroll
    for (int kk = 0; kk < KS; kk++) {
        const int c = kk * 16 + 2 * t;
        qa[kk][0] = r0 < a.Sq ? *(const uint32_t *)(q + r0 * qstride + h * D + c) : 0u;
        qa[kk][1] = r1 < a.Sq ? *(const uint32_t *)(q + r1 * qstride + h * D + c) : 0u;
        qa[kk][2] = r0 < a.Sq ? *(const uint32_t *)(q + r0 * qstride + h * D + c + 8) : 0u;
        qa[kk][3] = r1 < a.Sq ? *(const uint32_t *)(q + r1 * qstride + h * D + c + 8) : 0u;
    }
    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int64_t qlast = (qblk + ATT_BQ < a.Sq ? qblk + ATT_BQ : a.Sq) - 1;

    for (int sg = 0; sg < a.nseg; sg++) {
        const __nv_bfloat16 *kp = (const __nv_bfloat16 *)a.k[sg], *vp = (const __nv_bfloat16 *)a.v[sg];
        const int64_t n = a.n[sg], valid = a.valid[sg], start = a.start[sg];
        for (int64_t k0 = 0; k0 < valid; k0 += ATT_BK) {
            if (a.causal && start + k0 > qlast + a.causal_off) break; /* block-uniform */
            __syncthreads(); /* the previous tile is no longer read */
            constexpr int CH = D / 8; /* 16-byte chunks per row */
            for (int i = threadIdx.x; i < ATT_BK * CH; i += ATT_WARPS * 32) {
                int r = i / CH, c = (i % CH) * 8;
                int64_t j = k0 + r;
                uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
                if (j < n) {
                    kv = *(const uint4 *)(kp + j * kstride + hk * D + c);
                    vv = *(const uint4 *)(vp + j * kstride + hk * D + c);
                }
                *(uint4 *)(Ks + r * LD + c) = kv;
                *(uint4 *)(Vs + r * LD + c) = vv;
            }
            __syncthreads();

            /* S = Q K^T for 16 rows x 64 keys */
            float s[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
                const __nv_bfloat16 *kr = Ks + (nt * 8 + g) * LD + 2 * t;
#pragma unroll
                for (int kk = 0; kk < KS; kk++)
                    mma_bf16(s[nt], qa[kk], *(const uint32_t *)(kr + kk * 16), *(const uint32_t *)(kr + kk * 16 + 8));
            }
            /* scale, mask, row max */
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int64_t j = k0 + nt * 8 + 2 * t + (e & 1);
                    int64_t row = (e < 2) ? r0 : r1;
                    bool ok = j < valid && (!a.causal || start + j <= row + a.causal_off);
                    float v = ok ? s[nt][e] * a.scale_log2 : -INFINITY;
                    s[nt][e] = v;
                    mx[e >> 1] = fmaxf(mx[e >> 1], v);
                }
            float alpha[2], mu[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                float mn = fmaxf(m[r], mx[r]);
                mu[r] = mn == -INFINITY ? 0.0f : mn; /* a row with nothing visible yet */
                alpha[r] = exp2f(m[r] - mu[r]);
                m[r] = mn;
                l[r] *= alpha[r];
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float p = exp2f(s[nt][e] - mu[e >> 1]);
                    s[nt][e] = p;
                    l[e >> 1] += p;
                }
#pragma unroll
            for (int i = 0; i < DT; i++) {
                o[i][0] *= alpha[0], o[i][1] *= alpha[0];
                o[i][2] *= alpha[1], o[i][3] *= alpha[1];
            }
            /* O += P V: the score C-fragments are the A-fragments of P */
#pragma unroll
            for (int kk = 0; kk < ATT_BK / 16; kk++) {
                uint32_t pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                  pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                  pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
                const __nv_bfloat16 *v0 = Vs + (kk * 16 + 2 * t) * LD + g;
#pragma unroll
                for (int i = 0; i < DT; i++) {
                    const __nv_bfloat16 *vc = v0 + i * 8;
                    uint32_t b0 = pack_raw(vc[0], vc[LD]);
                    uint32_t b1 = pack_raw(vc[8 * LD], vc[9 * LD]);
                    mma_bf16(o[i], pa, b0, b1);
                }
            }
        }
    }
    /* finish: full row sums across the quad, normalise, store bf16 */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        l[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
    __nv_bfloat16 *out = (__nv_bfloat16 *)a.out;
#pragma unroll
    for (int i = 0; i < DT; i++) {
        const int c = i * 8 + 2 * t;
        if (r0 < a.Sq) *(uint32_t *)(out + r0 * qstride + h * D + c) = pack_bf16(o[i][0] * l[0], o[i][1] * l[0]);
        if (r1 < a.Sq) *(uint32_t *)(out + r1 * qstride + h * D + c) = pack_bf16(o[i][2] * l[1], o[i][3] * l[1]);
    }
}

/* ======================================================================== */
/* Hopper kernel                                                             */
/* ======================================================================== */

#include "attention_hopper.cuh"
#include "attention_fp8.cuh"

/* ======================================================================== */
/* generic kernel                                                            */
/* ======================================================================== */

__global__ void __launch_bounds__(ATT_WARPS * 32) att_generic(att_args a) {
    extern __shared__ float gsm[];
    const int D = a.D, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Ks = gsm;                          /* [ATT_GEN_BK][D+1] */
    float *Vs = Ks + ATT_GEN_BK * (D + 1);    /* [ATT_GEN_BK][D] */
    float *qs = Vs + ATT_GEN_BK * D + warp * D; /* [D] for this warp */
    const int h = blockIdx.y, hk = h / (a.Hq / a.Hkv);
    const int64_t qblk = (int64_t)blockIdx.x * ATT_WARPS, row = qblk + warp;
    const bool active = row < a.Sq;
    const int64_t qstride = (int64_t)a.Hq * D, kstride = (int64_t)a.Hkv * D;
    for (int d = lane; d < D; d += 32) qs[d] = active ? cu_ld(a.q, a.qt, row * qstride + h * D + d) : 0.0f;
    float o[ATT_GEN_MAXD / 32];
#pragma unroll
    for (int i = 0; i < ATT_GEN_MAXD / 32; i++) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t qlast = (qblk + ATT_WARPS < a.Sq ? qblk + ATT_WARPS : a.Sq) - 1;
    for (int sg = 0; sg < a.nseg; sg++) {
        const int64_t n = a.n[sg], valid = a.valid[sg], start = a.start[sg];
        for (int64_t k0 = 0; k0 < valid; k0 += ATT_GEN_BK) {
            if (a.causal && start + k0 > qlast + a.causal_off) break;
            __syncthreads();
            for (int i = threadIdx.x; i < ATT_GEN_BK * D; i += ATT_WARPS * 32) {
                int r = i / D, d = i % D;
                int64_t j = k0 + r;
                float kv = 0.0f, vv = 0.0f;
                if (j < n) {
                    kv = cu_ld(a.k[sg], a.kt[sg], j * kstride + hk * D + d);
                    vv = cu_ld(a.v[sg], a.vt[sg], j * kstride + hk * D + d);
                }
                Ks[r * (D + 1) + d] = kv;
                Vs[r * D + d] = vv;
            }
            __syncthreads();
            int64_t j = k0 + lane;
            float s = 0.0f;
            for (int d = 0; d < D; d++) s += qs[d] * Ks[lane * (D + 1) + d];
            bool ok = active && j < valid && (!a.causal || start + j <= row + a.causal_off);
            s = ok ? s * a.scale_log2 : -INFINITY;
            float mx = s;
#pragma unroll
            for (int w = 16; w > 0; w >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, w));
            float mn = fmaxf(m, mx), mu = mn == -INFINITY ? 0.0f : mn;
            float alpha = exp2f(m - mu), p = exp2f(s - mu), ps = p;
#pragma unroll
            for (int w = 16; w > 0; w >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, w);
            l = l * alpha + ps;
            m = mn;
#pragma unroll
            for (int i = 0; i < ATT_GEN_MAXD / 32; i++) o[i] *= alpha;
            for (int jj = 0; jj < ATT_GEN_BK; jj++) {
                float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
                for (int i = 0; i < ATT_GEN_MAXD / 32; i++) {
                    int d = lane + 32 * i;
                    if (d < D) o[i] += pj * Vs[jj * D + d];
                }
            }
        }
    }
    if (!active) return;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int i = 0; i < ATT_GEN_MAXD / 32; i++) {
        int d = lane + 32 * i;
        if (d < D) cu_st(a.out, a.ot, row * qstride + h * D + d, o[i] * inv);
    }
}

/* ======================================================================== */
/* dispatch                                                                  */
/* ======================================================================== */

template <int D>
static int launch_mma(c3_backend *be, const att_args &a) {
    size_t smem = 2 * (size_t)ATT_BK * (D + ATT_PAD) * sizeof(__nv_bfloat16);
    if (smem > 48 * 1024) CU_CHECK(cudaFuncSetAttribute(att_mma<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((a.Sq + ATT_BQ - 1) / ATT_BQ), (unsigned)a.Hq);
    att_mma<D><<<grid, ATT_WARPS * 32, smem, cu_of(be)->stream>>>(a);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

#define FA_BK 176 /* keys per tile: 176 beat 128 at 16k-44k queries (bench/NOTES.md) */
#define FA_KERNEL att_wgmma<FA_BK, 1, 1, 1> /* pipelined, pingpong, mask only where needed */

/* true when this build carries sm_90a code and the device runs it */
static bool fa_usable(c3_backend *be) {
    static int usable = -1;
    if (usable < 0) {
        int major = 0;
        cudaFuncAttributes fa;
        usable = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, cu_of(be)->device) == cudaSuccess &&
                 major == 9 && cudaFuncGetAttributes(&fa, FA_KERNEL) == cudaSuccess && fa.binaryVersion >= 90 &&
                 fa_encoder() != NULL && fa_smem_bytes<FA_BK>() <= cu_of(be)->smem_optin;
        cudaGetLastError();
    }
    return usable > 0;
}

#define FA_DECLINED (-1) /* launch_wgmma: the Hopper kernel does not take this problem */

/* C3_OK when launched, FA_DECLINED, or an error status */
static int launch_wgmma(c3_backend *be, const att_args &a) {
    fa_params p;
    memset(&p, 0, sizeof p);
    if (a.D != FA_D || a.causal || !(a.scale_log2 > 0.0f) || !fa_usable(be)) return FA_DECLINED;
    if (!fa_map(&p.tq, a.q, a.Sq, a.Hq, FA_BQ)) return FA_DECLINED;
    for (int s = 0; s < a.nseg; s++) {
        if (a.valid[s] > 0 && (!fa_map(&p.tk[s], a.k[s], a.n[s], a.Hkv, FA_BK) ||
                               !fa_map(&p.tv[s], a.v[s], a.n[s], a.Hkv, FA_BK)))
            return FA_DECLINED;
        p.valid[s] = a.valid[s];
    }
    p.out = a.out, p.Sq = a.Sq, p.Hq = a.Hq, p.Hkv = a.Hkv, p.nseg = a.nseg, p.scale_log2 = a.scale_log2;
    constexpr size_t smem = fa_smem_bytes<FA_BK>();
    CU_CHECK(cudaFuncSetAttribute(FA_KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((a.Sq + FA_BQ - 1) / FA_BQ), (unsigned)a.Hq);
    FA_KERNEL<<<grid, FA_THREADS, smem, cu_of(be)->stream>>>(p);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* FP8 GEN attention: C3_OK when launched, FA_DECLINED (the reason noted on
 * be), or an error status. */
static int launch_fp8(c3_backend *be, const att_args &a, bool all_bf16) {
    const char *why = NULL;
    if (!all_bf16)
        why = "the tensors are not bf16 (the fp32 check path, COSMOS3_CUDA_FP32)";
    else if (a.D != FA_D)
        why = "the FP8 kernel takes head_dim 128 only";
    else if (a.causal)
        why = "causal attention has no FP8 kernel";
    else if (!fa_usable(be) || fa8_smem_bytes<FA8_STAGES>() > cu_of(be)->smem_optin)
        why = "the FP8 kernel needs a Hopper GPU (sm_90a) and a build with its code";
    fa8_problem f;
    memset(&f, 0, sizeof f);
    f.q = a.q, f.out = a.out, f.Sq = a.Sq, f.Hq = a.Hq, f.Hkv = a.Hkv, f.nseg = a.nseg, f.scale_log2 = a.scale_log2;
    for (int s = 0; s < a.nseg; s++) f.k[s] = a.k[s], f.v[s] = a.v[s], f.n[s] = a.n[s], f.valid[s] = a.valid[s];
    fa8_params p;
    if (!why) {
        void *scr;
        C3_TRY(cu_scratch(be, fa8_scratch_bytes(f), &scr));
        if (!fa8_prepare(f, scr, cu_of(be)->sm_count, cu_of(be)->stream, &p))
            why = "the tensors are not 16-byte aligned for the FP8 kernel's tensor maps";
        CU_CHECK_LAUNCH();
    }
    if (why) {
        be->attn_fp8_declined++;
        if (!be->attn_fp8_why) be->attn_fp8_why = why;
        return FA_DECLINED;
    }
    CU_CHECK(fa8_launch(p, cu_of(be)->stream));
    be->attn_fp8_calls++;
    return C3_OK;
}

static int launch_generic(c3_backend *be, const att_args &a) {
    size_t smem = ((size_t)ATT_GEN_BK * (a.D + 1) + (size_t)ATT_GEN_BK * a.D + (size_t)ATT_WARPS * a.D) * sizeof(float);
    if (smem > cu_of(be)->smem_optin)
        return c3_fail(C3_EFAIL, "cuda attention: head_dim %d needs %zu bytes of shared memory, the GPU has %zu", a.D,
                       smem, cu_of(be)->smem_optin);
    if (smem > 48 * 1024) CU_CHECK(cudaFuncSetAttribute(att_generic, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((a.Sq + ATT_WARPS - 1) / ATT_WARPS), (unsigned)a.Hq);
    att_generic<<<grid, ATT_WARPS * 32, smem, cu_of(be)->stream>>>(a);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

int cu_attention(c3_backend *be, c3_tensor *out, const c3_tensor *q, const c3_kvseg *kv, int nseg, bool causal,
                 float scale) {
    C3_TRY(cu_check_float("attention", out, "out"));
    C3_TRY(cu_check_float("attention", q, "q"));
    if (q->ndim != 3) return c3_fail(C3_EFAIL, "cuda attention: q has %d dimensions, expected [Sq, Hq, D]", q->ndim);
    if (nseg < 1 || nseg > ATT_MAX_SEG)
        return c3_fail(C3_EFAIL, "cuda attention: %d key segments (1..%d supported)", nseg, ATT_MAX_SEG);
    if (causal && nseg != 1) return c3_fail(C3_EFAIL, "cuda attention: causal attention takes one key segment");
    att_args a;
    memset(&a, 0, sizeof a);
    a.q = q->data, a.out = out->data, a.qt = q->dtype, a.ot = out->dtype;
    a.Sq = q->ne[0], a.Hq = (int)q->ne[1], a.D = (int)q->ne[2];
    if (c3_numel(out) != c3_numel(q)) return c3_fail(C3_EFAIL, "cuda attention: out and q differ in size");
    bool all_bf16 = q->dtype == C3_BF16 && out->dtype == C3_BF16;
    int64_t total = 0;
    for (int s = 0; s < nseg; s++) {
        C3_TRY(cu_check_float("attention", kv[s].k, "k"));
        C3_TRY(cu_check_float("attention", kv[s].v, "v"));
        const c3_tensor *k = kv[s].k, *v = kv[s].v;
        int64_t hkv = k->ndim == 3 ? k->ne[1] : 0;
        if (k->ndim != 3 || k->ne[2] != a.D || c3_numel(k) != kv[s].n * hkv * a.D || c3_numel(v) != c3_numel(k) ||
            kv[s].valid < 0 || kv[s].valid > kv[s].n)
            return c3_fail(C3_EFAIL, "cuda attention: key segment %d is not [%lld, Hkv, %d] (valid %lld)", s,
                           (long long)kv[s].n, a.D, (long long)kv[s].valid);
        if (s == 0) a.Hkv = (int)hkv;
        if (hkv != a.Hkv || a.Hkv <= 0 || a.Hq % a.Hkv)
            return c3_fail(C3_EFAIL, "cuda attention: %d query heads do not group over %lld kv heads", a.Hq,
                           (long long)hkv);
        a.k[s] = k->data, a.v[s] = v->data, a.kt[s] = k->dtype, a.vt[s] = v->dtype;
        a.n[s] = kv[s].n, a.valid[s] = kv[s].valid, a.start[s] = total;
        total += kv[s].n;
        all_bf16 = all_bf16 && k->dtype == C3_BF16 && v->dtype == C3_BF16;
    }
    a.nseg = nseg;
    a.causal = causal;
    a.causal_off = total - a.Sq;
    a.scale_log2 = scale * LOG2E;
    CU_ENTER(be);
    if (a.Sq == 0) return C3_OK;
    if (be->attn_fp8 && be->attn_gen && att_which == 0) {
        int rc = launch_fp8(be, a, all_bf16);
        if (rc != FA_DECLINED) return rc;
    }
    bool mma = all_bf16 && att_which != 2;
    if (mma && att_which != 1) {
        int rc = launch_wgmma(be, a);
        if (rc != FA_DECLINED) return rc;
        if (att_which == 3)
            return c3_fail(C3_EFAIL, "cuda attention: the Hopper kernel needs sm_90a, bf16, head_dim %d, no causal mask "
                                     "and 16-byte aligned tensors", FA_D);
    }
    if (mma) {
        switch (a.D) {
        case 16: return launch_mma<16>(be, a);
        case 32: return launch_mma<32>(be, a);
        case 64: return launch_mma<64>(be, a);
        case 128: return launch_mma<128>(be, a);
        default: break;
        }
    }
    if (att_which == 1)
        return c3_fail(C3_EFAIL, "cuda attention: the tensor-core kernel needs bf16 and head_dim 16/32/64/128");
    if (a.D > ATT_GEN_MAXD)
        return c3_fail(C3_EFAIL, "cuda attention: head_dim %d is larger than %d", a.D, ATT_GEN_MAXD);
    return launch_generic(be, a);
}
