/* attention_hopper.cuh - the Hopper (sm_90a) GEN attention kernel: wgmma +
 * TMA, shared by the backend (cuda/attention.cu, which launches it) and its
 * lab (cuda/lab/attention_lab.cu, which checks and times its variants), so
 * that what the lab measures is what ships. The includer defines
 * ATT_MAX_SEG (key segments per call) and includes cuda.h / cuda_bf16.h. */
#ifndef COSMOS3_ATTENTION_HOPPER_CUH
#define COSMOS3_ATTENTION_HOPPER_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "wgmma.cuh"

#ifndef ATT_MAX_SEG
#error "define ATT_MAX_SEG before including attention_hopper.cuh"
#endif
/* ------------------------------------------------------------------------ */
/* Hopper kernel: wgmma + TMA, one producer warp, two consumer warpgroups.   */
/* ------------------------------------------------------------------------ */
/* A block owns FA_BQ = 128 queries of one head: consumer warpgroup w (warps
 * 4w..4w+3) owns rows 64w..64w+63 and keeps S (64 x BK fp32), P (bf16) and
 * O (64 x 128 fp32) in registers. Warp 8 is the producer: one lane issues
 * TMA copies of Q once and of each BK-key K and V tile into ST (FA_STAGES)
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
#define FA_STAGES 2 /* K/V stages (the template parameter ST's default) */
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
/* Thread 0's part of a block's start: each K/V stage's mbarriers, full (one
 * arrival: the producer's expect_tx) and empty (every consumer thread), then
 * the fence that makes them visible to the TMA unit. */
static __device__ __forceinline__ void fa_stage_bars_init(uint32_t full_k, uint32_t empty_k, uint32_t full_v,
                                                          uint32_t empty_v, int stages) {
    for (int s = 0; s < stages; s++) {
        fa_bar_init(full_k + 8 * s, 1);
        fa_bar_init(full_v + 8 * s, 1);
        fa_bar_init(empty_k + 8 * s, FA_CONSUMERS * FA_WG);
        fa_bar_init(empty_v + 8 * s, FA_CONSUMERS * FA_WG);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
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
        : C3_WG_D32(d)
        : "l"(da), "l"(db), "r"(acc));
}

/* D[64 x 128] (+)= A[64 x 16] * B[16 x 128]; A and B K-major in shared memory. */
__device__ __forceinline__ void wgmma_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : C3_WG_D64(d)
        : "l"(da), "l"(db), "r"(acc));
}

/* D[64 x 176] (+)= A[64 x 16] * B[16 x 176]; A and B K-major in shared memory. */
__device__ __forceinline__ void wgmma_ss_n176(float (&d)[88], uint64_t da, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87}, %88, %89, p, 1, 1, 0, 0;\n}\n"
        : C3_WG_D88(d)
        : "l"(da), "l"(db), "r"(acc));
}

/* D[64 x 128] (+)= A[64 x 16] (registers) * B[16 x 128]; B MN-major (transposed) in shared memory. */
__device__ __forceinline__ void wgmma_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : C3_WG_D64(d)
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

template <int BK, int PIPE, int PP, int MSPLIT, int ST = FA_STAGES>
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
            const int st = it % ST;
            const uint32_t ph = (it / ST) & 1;
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
                const int st = it % ST, sp = (it - 1) % ST;
                const uint32_t ph = (it / ST) & 1, pph = ((it - 1) / ST) & 1;
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
            const int sp = (it - 1) % ST;
            fa_bar_wait(full_v + 8 * sp, ((it - 1) / ST) & 1);
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

template <int BK, int PIPE, int PP, int MSPLIT, int ST = FA_STAGES>
__global__ void __launch_bounds__(FA_THREADS, 1) att_wgmma(const __grid_constant__ fa_params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* built without sm_90a: the host never launches this */
#else
    constexpr uint32_t TILE = BK * FA_D * 2; /* bytes of one K or V tile */
    extern __shared__ unsigned char fa_raw[];
    /* the 128-byte swizzle repeats every 1024 bytes of address: align */
    unsigned char *base = (unsigned char *)(((uintptr_t)fa_raw + FA_ATOM_BYTES - 1) & ~(uintptr_t)(FA_ATOM_BYTES - 1));
    const uint32_t sq = fa_smem(base);                          /* Q [2][FA_BQ][64] */
    const uint32_t sk = sq + FA_BQ * FA_D * 2;                  /* K [ST][2][BK][64] */
    const uint32_t sv = sk + ST * TILE;                         /* V [ST][2][BK][64] */
    const uint32_t bars = sv + ST * TILE;                       /* mbarriers, 8 bytes each */
    const uint32_t full_q = bars, full_k = bars + 8, empty_k = full_k + 8 * ST,
                   full_v = empty_k + 8 * ST, empty_v = full_v + 8 * ST;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y, hk = h / (p.Hq / p.Hkv);
    const int64_t q0 = (int64_t)blockIdx.x * FA_BQ;

    if (threadIdx.x == 0) {
        fa_bar_init(full_q, 1);
        fa_stage_bars_init(full_k, empty_k, full_v, empty_v, ST);
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
            const int s = it % ST;
            const uint32_t ph = ((it / ST) & 1) ^ 1;
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
        consumer<BK, PIPE, PP, MSPLIT, ST>(p, sq, sk, sv, full_q, full_k, empty_k, full_v, empty_v, h, q0, warp, lane);
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
template <int BK, int ST = FA_STAGES>
static constexpr size_t fa_smem_bytes() {
    return FA_ATOM_BYTES + (size_t)FA_BQ * FA_D * 2 + 2 * (size_t)ST * BK * FA_D * 2 + 8 * (1 + 4 * ST);
}

#endif
