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
 *    and timed in cuda/lab/attention_lab.cu (bench/attention_notes.md).
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

/* ------------------------------------------------------------------------ */
/* Hopper kernel: wgmma + TMA, one producer warp, two consumer warpgroups.   */
/* ------------------------------------------------------------------------ */
/* A block owns FA_BQ = 128 queries of one head: consumer warpgroup w (warps
 * 4w..4w+3) owns rows 64w..64w+63 and keeps S (64 x BK fp32), P (bf16) and
 * O (64 x 128 fp32) in registers. Warp 8 is the producer: one lane issues
 * TMA copies of Q once and of each BK-key K and V tile into FA_STAGES
 * shared-memory stages, each completing on a "full" mbarrier; consumers
 * release a stage through its "empty" mbarrier (one arrival per consumer
 * warp). K and V have separate barriers: K of a tile is released as soon as
 * its scores are done, V after P V. Shared tiles are [2 halves][rows][64]
 * bf16 with the 128-byte swizzle (TMA writes it, wgmma reads it): a 128-byte
 * row holds 64 head-dim columns, 8 rows form a 1024-byte swizzle atom.
 * PIPE = 1 overlaps softmax of tile j with P V of tile j-1 and Q K^T of j
 * issued ahead (FlashAttention-3's intra-warpgroup pipelining). */
#define FA_D 128           /* head dim of the Hopper kernel */
#define FA_HALF 64         /* bf16 columns in one 128-byte swizzled row */
#define FA_ROW_BYTES 128   /* bytes of one swizzled row */
#define FA_ATOM_BYTES 1024 /* 8 rows x 128 bytes: one swizzle atom */
#define FA_WG 128          /* threads in a warpgroup */
#define FA_CONSUMERS 2     /* consumer warpgroups */
#define FA_WG_ROWS 64      /* query rows per consumer warpgroup (wgmma M) */
#define FA_BQ (FA_CONSUMERS * FA_WG_ROWS)
#define FA_THREADS ((FA_CONSUMERS + 1) * FA_WG) /* + one producer warpgroup */
#define FA_REG_PRODUCER 40  /* setmaxnreg: the producer gives registers ... */
#define FA_REG_CONSUMER 232 /* ... to the consumers: 128*40 + 256*232 <= 65536 */
#define FA_STAGES 2
#define FA_KSTEP 16 /* wgmma K for bf16 */

typedef struct {
    CUtensorMap tq;                 /* q [Sq, Hq, D], box {64, 1, FA_BQ} */
    CUtensorMap tk[ATT_MAX_SEG];    /* k [n, Hkv, D], box {64, 1, BK} */
    CUtensorMap tv[ATT_MAX_SEG];    /* v [n, Hkv, D], box {64, 1, BK} */
    void *out;                      /* [Sq, Hq, D] bf16 */
    int64_t Sq;
    int Hq, Hkv, nseg;
    int64_t valid[ATT_MAX_SEG];
    float scale_log2; /* > 0 */
} fa_params;

static __device__ __forceinline__ uint32_t fa_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void fa_bar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
static __device__ __forceinline__ void fa_bar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void fa_bar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void fa_bar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
/* TMA: box at coordinates {c0 (head-dim column), c1 (head), c2 (row)} */
static __device__ __forceinline__ void fa_tma(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                              uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
            dst),
        "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}
static __device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* keep the compiler from moving accumulator reads/writes across async wgmma */
template <int N>
static __device__ __forceinline__ void wg_pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
static __device__ __forceinline__ float fa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
/* pingpong between the consumer warpgroups (named barriers 1, 2: 0 is
 * __syncthreads): a warpgroup issues its wgmma only in its turn, so one
 * warpgroup's softmax runs while the other's products use the tensor cores */
#define FA_BAR_SCHED 1
static __device__ __forceinline__ void fa_turn_wait(int wg) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(FA_BAR_SCHED + wg), "n"(2 * FA_WG) : "memory");
}
static __device__ __forceinline__ void fa_turn_pass(int wg) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(FA_BAR_SCHED + (wg ^ 1)), "n"(2 * FA_WG) : "memory");
}
/* shared-memory matrix descriptor, 128-byte swizzle */
static __device__ __forceinline__ uint64_t fa_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           (1ull << 62);
}

/* D[64 x 64] (+)= A[64 x 16] * B[16 x 64]; A and B K-major in shared memory. */
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(acc));
}

/* D[64 x 128] (+)= A[64 x 16] * B[16 x 128]; A and B K-major in shared memory. */
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(acc));
}

/* D[64 x 176] (+)= A[64 x 16] * B[16 x 176]; A and B K-major in shared memory. */
__device__ __forceinline__ void wgmma_ss_n176(float (&d)[88], uint64_t da, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87}, %88, %89, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
        : "l"(da), "l"(db), "r"(acc));
}

/* D[64 x 128] (+)= A[64 x 16] (registers) * B[16 x 128]; B MN-major (transposed) in shared memory. */
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

/* Scores of one tile -> probabilities in place; running max m, partial row
 * sums l (this thread's columns), alpha = rescale factor for O. `lim` is the
 * number of visible columns of the tile (>= BK: all). Accumulator layout:
 * s[4c + e] is row g (e < 2) or g + 8 (e >= 2), column 8c + 2t + (e & 1). */
template <int BK, bool MASK>
static __device__ __forceinline__ void fa_softmax(float (&s)[BK / 2], int64_t lim, float sl2, float (&m)[2],
                                                  float (&l)[2], float (&alpha)[2], int t) {
    /* branch-free mask (a branch here would serialise the wgmma in flight) */
    if (MASK) {
        const int lt = (int)(lim < BK ? lim : BK) - 2 * t;
#pragma unroll
        for (int i = 0; i < BK / 2; i++) s[i] = (i / 4) * 8 + (i & 1) < lt ? s[i] : -INFINITY;
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < BK / 2; i++) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    float mu[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float mn = fmaxf(m[r], mx[r]);
        mu[r] = mn == -INFINITY ? 0.0f : mn * sl2; /* a row with nothing visible yet */
        alpha[r] = fa_exp2(m[r] * sl2 - mu[r]);
        m[r] = mn;
        l[r] *= alpha[r];
    }
#pragma unroll
    for (int i = 0; i < BK / 2; i++) {
        float p = fa_exp2(fmaf(s[i], sl2, -mu[(i >> 1) & 1]));
        s[i] = p;
        l[(i >> 1) & 1] += p;
    }
}

/* probabilities (fp32 accumulator layout) -> bf16 A fragments of P V: the
 * accumulator of keys 16j..16j+15 is exactly the A fragment of k-step j */
template <int BK>
static __device__ __forceinline__ void fa_pack(const float (&s)[BK / 2], uint32_t (&pa)[BK / 16][4]) {
#pragma unroll
    for (int j = 0; j < BK / 16; j++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            __nv_bfloat162 h = __floats2bfloat162_rn(s[8 * j + 2 * r], s[8 * j + 2 * r + 1]);
            pa[j][r] = *(uint32_t *)&h;
        }
}

static __device__ __forceinline__ void fa_scale_o(float (&o)[FA_D / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < FA_D / 2; i++) o[i] *= alpha[(i >> 1) & 1];
}

template <int BK>
static __device__ __forceinline__ void fa_qk(float (&s)[BK / 2], uint32_t qbase, uint32_t kbase) {
    static_assert(BK == 64 || BK == 128 || BK == 176, "fa_qk: BK is 64, 128 or 176");
#pragma unroll
    for (int kk = 0; kk < FA_D / FA_KSTEP; kk++) {
        const uint32_t off = (kk % 4) * 32; /* 16 columns = 32 bytes within a half */
        uint64_t da = fa_desc(qbase + (kk / 4) * (FA_BQ * FA_ROW_BYTES) + off, 16, FA_ATOM_BYTES);
        uint64_t db = fa_desc(kbase + (kk / 4) * (BK * FA_ROW_BYTES) + off, 16, FA_ATOM_BYTES);
        if constexpr (BK == 176)
            wgmma_ss_n176(s, da, db, kk > 0);
        else if constexpr (BK == 128)
            wgmma_ss_n128(s, da, db, kk > 0);
        else
            wgmma_ss_n64(s, da, db, kk > 0);
    }
}
/* O += P V over BK keys; V tile is MN-major for this product */
template <int BK>
static __device__ __forceinline__ void fa_pv(float (&o)[FA_D / 2], const uint32_t (&pa)[BK / 16][4], uint32_t vbase) {
    const uint32_t half = BK * FA_ROW_BYTES;
#pragma unroll
    for (int j = 0; j < BK / 16; j++) {
        /* MN-major: LBO = stride between the two 64-column halves, SBO = 8 keys */
        uint64_t db = fa_desc(vbase + j * 16 * FA_ROW_BYTES, half, FA_ATOM_BYTES);
        wgmma_rs_n128(o, pa[j], db, 1);
    }
}

/* tile cursor over the key segments (the same sequence on both sides) */
typedef struct {
    int sg;
    int64_t k0;
} fa_cur;
static __device__ __forceinline__ void fa_next(fa_cur &c, const fa_params &p, int bk) {
    c.k0 += bk;
    while (c.sg < p.nseg && c.k0 >= p.valid[c.sg]) c.sg++, c.k0 = 0;
}
static __device__ __forceinline__ fa_cur fa_first(const fa_params &p) {
    fa_cur c = {0, 0};
    while (c.sg < p.nseg && p.valid[c.sg] <= 0) c.sg++;
    return c;
}

template <int BK, int PIPE, int PP, int MSPLIT>
static __device__ __forceinline__ void consumer(const fa_params &p, uint32_t sq, uint32_t sk, uint32_t sv,
                                                uint32_t full_q, uint32_t full_k, uint32_t empty_k, uint32_t full_v,
                                                uint32_t empty_v, int h, int64_t q0, int warp, int lane) {
    constexpr uint32_t TILE = BK * FA_D * 2;
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(FA_REG_CONSUMER));
    const int wg = warp / 4, wl = warp % 4, g = lane / 4, t = lane % 4;
    const uint32_t qbase = sq + wg * FA_WG_ROWS * FA_ROW_BYTES;
    const float sl2 = p.scale_log2;
    float o[FA_D / 2];
#pragma unroll
    for (int i = 0; i < FA_D / 2; i++) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
    float s[BK / 2];
    uint32_t pa[BK / 16][4];
    fa_bar_wait(full_q, 0);

    fa_cur c = fa_first(p);
    if (!PIPE) {
        for (int it = 0; c.sg < p.nseg; fa_next(c, p, BK), it++) {
            const int st = it % FA_STAGES;
            const uint32_t ph = (it / FA_STAGES) & 1;
            fa_bar_wait(full_k + 8 * st, ph);
            wg_fence();
            fa_qk<BK>(s, qbase, sk + st * TILE);
            wg_commit();
            wg_wait<0>();
            wg_pin(s);
            fa_bar_arrive(empty_k + 8 * st);
            fa_softmax<BK, true>(s, p.valid[c.sg] - c.k0, sl2, m, l, alpha, t);
            fa_scale_o(o, alpha);
            fa_pack<BK>(s, pa);
            fa_bar_wait(full_v + 8 * st, ph);
            wg_fence();
            fa_pv<BK>(o, pa, sv + st * TILE);
            wg_commit();
            wg_wait<0>();
            wg_pin(o);
            fa_bar_arrive(empty_v + 8 * st);
        }
    } else {
        if (PP && wg == 1) fa_turn_pass(1); /* warpgroup 0 goes first */
        if (c.sg < p.nseg) {
            /* prologue: scores of tile 0 */
            fa_bar_wait(full_k, 0);
            if (PP) fa_turn_wait(wg);
            wg_fence();
            fa_qk<BK>(s, qbase, sk);
            wg_commit();
            if (PP) fa_turn_pass(wg);
            wg_wait<0>();
            wg_pin(s);
            fa_bar_arrive(empty_k);
            fa_softmax<BK, true>(s, p.valid[c.sg] - c.k0, sl2, m, l, alpha, t);
            fa_pack<BK>(s, pa);
            int it = 1;
            for (fa_next(c, p, BK); c.sg < p.nseg; fa_next(c, p, BK), it++) {
                const int st = it % FA_STAGES, sp = (it - 1) % FA_STAGES;
                const uint32_t ph = (it / FA_STAGES) & 1, pph = ((it - 1) / FA_STAGES) & 1;
                const int64_t lim = p.valid[c.sg] - c.k0;
                /* the whole step, waits included, sits inside one branch: a
                 * branch while wgmma runs would serialise it */
                auto step = [&](auto maskc) {
                    constexpr bool MASK = decltype(maskc)::value;
                    fa_bar_wait(full_k + 8 * st, ph);
                    fa_bar_wait(full_v + 8 * sp, pph);
                    if (PP) fa_turn_wait(wg);
                    wg_fence();
                    fa_qk<BK>(s, qbase, sk + st * TILE); /* S_it = Q K_it^T */
                    wg_commit();
                    fa_pv<BK>(o, pa, sv + sp * TILE); /* O += P_{it-1} V_{it-1} */
                    wg_commit();
                    if (PP) fa_turn_pass(wg);
                    wg_wait<1>(); /* scores ready */
                    wg_pin(s);
                    fa_bar_arrive(empty_k + 8 * st);
                    fa_softmax<BK, MASK>(s, lim, sl2, m, l, alpha, t);
                    wg_wait<0>(); /* P V done */
                    wg_pin(o);
                    fa_bar_arrive(empty_v + 8 * sp);
                    fa_scale_o(o, alpha);
                    fa_pack<BK>(s, pa);
                };
                if (MSPLIT && lim >= BK)
                    step(std::false_type());
                else
                    step(std::true_type());
            }
            const int sp = (it - 1) % FA_STAGES;
            fa_bar_wait(full_v + 8 * sp, ((it - 1) / FA_STAGES) & 1);
            if (PP) fa_turn_wait(wg);
            wg_fence();
            fa_pv<BK>(o, pa, sv + sp * TILE);
            wg_commit();
            if (PP) fa_turn_pass(wg);
            wg_wait<0>();
            wg_pin(o);
        }
        if (PP && wg == 0) fa_turn_wait(0); /* the pass warpgroup 1 gave last */
    }

    /* finish: full row sums across the quad, normalise, store bf16 */
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        l[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
    const int64_t r0 = q0 + wg * FA_WG_ROWS + wl * 16 + g, r1 = r0 + 8;
    const int64_t qstride = (int64_t)p.Hq * FA_D;
    __nv_bfloat16 *out = (__nv_bfloat16 *)p.out + h * FA_D;
#pragma unroll
    for (int cc = 0; cc < FA_D / 8; cc++) {
        const int col = cc * 8 + 2 * t;
        if (r0 < p.Sq) {
            __nv_bfloat162 v = __floats2bfloat162_rn(o[4 * cc] * l[0], o[4 * cc + 1] * l[0]);
            *(__nv_bfloat162 *)(out + r0 * qstride + col) = v;
        }
        if (r1 < p.Sq) {
            __nv_bfloat162 v = __floats2bfloat162_rn(o[4 * cc + 2] * l[1], o[4 * cc + 3] * l[1]);
            *(__nv_bfloat162 *)(out + r1 * qstride + col) = v;
        }
    }
}

template <int BK, int PIPE, int PP, int MSPLIT>
__global__ void __launch_bounds__(FA_THREADS, 1) att_wgmma(const __grid_constant__ fa_params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* built without sm_90a: the host never launches this */
#else
    constexpr uint32_t TILE = BK * FA_D * 2; /* bytes of one K or V tile */
    extern __shared__ unsigned char fa_raw[];
    /* the 128-byte swizzle repeats every 1024 bytes of address: align */
    unsigned char *base = (unsigned char *)(((uintptr_t)fa_raw + FA_ATOM_BYTES - 1) & ~(uintptr_t)(FA_ATOM_BYTES - 1));
    const uint32_t sq = fa_smem(base);                          /* Q [2][FA_BQ][64] */
    const uint32_t sk = sq + FA_BQ * FA_D * 2;                  /* K [FA_STAGES][2][BK][64] */
    const uint32_t sv = sk + FA_STAGES * TILE;                  /* V [FA_STAGES][2][BK][64] */
    const uint32_t bars = sv + FA_STAGES * TILE;                /* mbarriers, 8 bytes each */
    const uint32_t full_q = bars, full_k = bars + 8, empty_k = full_k + 8 * FA_STAGES,
                   full_v = empty_k + 8 * FA_STAGES, empty_v = full_v + 8 * FA_STAGES;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y, hk = h / (p.Hq / p.Hkv);
    const int64_t q0 = (int64_t)blockIdx.x * FA_BQ;

    if (threadIdx.x == 0) {
        fa_bar_init(full_q, 1);
        for (int s = 0; s < FA_STAGES; s++) {
            fa_bar_init(full_k + 8 * s, 1);
            fa_bar_init(full_v + 8 * s, 1);
            fa_bar_init(empty_k + 8 * s, FA_CONSUMERS * FA_WG);
            fa_bar_init(empty_v + 8 * s, FA_CONSUMERS * FA_WG);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warp >= FA_CONSUMERS * 4) { /* producer warpgroup: one thread issues every copy */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(FA_REG_PRODUCER));
        if (threadIdx.x != FA_CONSUMERS * FA_WG) return;
        fa_bar_expect(full_q, FA_BQ * FA_D * 2);
        fa_tma(sq, &p.tq, 0, h, (int)q0, full_q);
        fa_tma(sq + FA_BQ * FA_ROW_BYTES, &p.tq, FA_HALF, h, (int)q0, full_q);
        int it = 0;
        for (fa_cur c = fa_first(p); c.sg < p.nseg; fa_next(c, p, BK), it++) {
            const int s = it % FA_STAGES;
            const uint32_t ph = ((it / FA_STAGES) & 1) ^ 1;
            const uint32_t dk = sk + s * TILE, dv = sv + s * TILE;
            fa_bar_wait(empty_k + 8 * s, ph);
            fa_bar_expect(full_k + 8 * s, TILE);
            fa_tma(dk, &p.tk[c.sg], 0, hk, (int)c.k0, full_k + 8 * s);
            fa_tma(dk + BK * FA_ROW_BYTES, &p.tk[c.sg], FA_HALF, hk, (int)c.k0, full_k + 8 * s);
            fa_bar_wait(empty_v + 8 * s, ph);
            fa_bar_expect(full_v + 8 * s, TILE);
            fa_tma(dv, &p.tv[c.sg], 0, hk, (int)c.k0, full_v + 8 * s);
            fa_tma(dv + BK * FA_ROW_BYTES, &p.tv[c.sg], FA_HALF, hk, (int)c.k0, full_v + 8 * s);
        }
    } else {
        consumer<BK, PIPE, PP, MSPLIT>(p, sq, sk, sv, full_q, full_k, empty_k, full_v, empty_v, h, q0, warp, lane);
    }
#endif
}
/* host: tensor maps through the driver entry point (no -lcuda needed) */
typedef CUresult (*fa_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                 const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static fa_encode_fn fa_encoder(void) {
    static fa_encode_fn fn = NULL;
    if (!fn) {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) ==
                cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (fa_encode_fn)f;
    }
    return fn;
}
/* a bf16 [rows, heads, FA_D] tensor as a TMA map with box {64, 1, box_rows} */
static bool fa_map(CUtensorMap *m, const void *ptr, int64_t rows, int heads, int box_rows) {
    fa_encode_fn enc = fa_encoder();
    if (!enc || rows <= 0 || ((uintptr_t)ptr & 15)) return false;
    cuuint64_t dim[3] = {FA_D, (cuuint64_t)heads, (cuuint64_t)rows};
    cuuint64_t stride[2] = {FA_D * 2, (cuuint64_t)heads * FA_D * 2};
    cuuint32_t box[3] = {FA_HALF, 1, (cuuint32_t)box_rows};
    cuuint32_t estr[3] = {1, 1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)ptr, dim, stride, box, estr,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
template <int BK>
static constexpr size_t fa_smem_bytes() {
    return FA_ATOM_BYTES + (size_t)FA_BQ * FA_D * 2 + 2 * (size_t)FA_STAGES * BK * FA_D * 2 + 8 * (1 + 4 * FA_STAGES);
}

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

#define FA_BK 176 /* keys per tile: 176 beat 128 at 16k-44k queries (bench/attention_notes.md) */
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
