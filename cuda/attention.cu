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
#define ATT_GEN_BK 32    /* generic kernel: keys per tile (one per lane) */
#define ATT_GEN_MAXD 512 /* generic kernel: largest head_dim */
#define LOG2E 1.4426950408889634f

/* lab override: 0 automatic, 1 mma.sync tensor cores, 2 generic, 3 Hopper wgmma */
static int att_which = 0;
extern "C" void c3_cuda_attention_kernel(int which) { att_which = which; }

/* ======================================================================== */
/* tensor-core kernel: attention_mma.cuh                                     */
/* ======================================================================== */

#include "attention_mma.cuh"

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
