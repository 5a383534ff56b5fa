/* vae_wgmma.cuh - the Hopper (sm_90a) implicit-GEMM 3-D convolution of the
 * channels-last VAE decode (cuda/vae_cl.cu includes it; vcl_conv picks it).
 *
 * Same problem as k_vcl_conv (vae_cl.cu's header comment): output rows p of
 * the padded channels-last volume, K = taps x Cin, tap t reading the input
 * rows p + off[t]. Here both operands come by TMA into 128-byte-swizzled
 * shared memory and the products run as wgmma (m64nBNk16, bf16 in, fp32
 * accumulate):
 *   - A: one 2-D tensor map over x as [rows, Cin], box {64 channels, 128
 *     rows}; tap t of K step (t, c0) is the box at (c0, m0 + off[t]). Rows
 *     before the first or past the last input row, and channels past Cin,
 *     come as zeros (TMA's out-of-bounds fill): no predication anywhere.
 *   - B: one 2-D tensor map over wcl [Coutp, taps * Cin_s], box {64, BN}.
 * Block: BM = 128 rows x BN columns; warpgroups 0 and 1 consume (64 rows
 * each, BN/2 fp32 accumulators per thread), warp 8 produces (one lane issues
 * every copy into STAGES stages, each completing on a "full" mbarrier;
 * consumers release a stage on its "empty" mbarrier once the wgmma that read
 * it has retired). Epilogue as k_vcl_conv: + bias (+ residual), borders
 * stored as zero, bf16 pairs straight from the accumulators.
 * Usable when Cin_s (Cin rounded up to 32) is a multiple of 64. */
#ifndef COSMOS3_VAE_WGMMA_CUH
#define COSMOS3_VAE_WGMMA_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include "wgmma.cuh"

#define VW_BM 128
#define VW_BK 64 /* K step: 64 bf16 = one 128-byte swizzled row */
#define VW_ROW_BYTES 128
#define VW_ATOM_BYTES 1024 /* 8 swizzled rows */
#define VW_WG 128          /* threads in a warpgroup */
#define VW_CONSUMERS 2
#define VW_THREADS ((VW_CONSUMERS + 1) * VW_WG)
#define VW_REG_PRODUCER 40
#define VW_REG_CONSUMER 232 /* 128 * 40 + 256 * 232 <= 65536 */
#define VW_MAX_TAPS 27

struct vw_args {
    CUtensorMap ta; /* x [rows, Cin] bf16, box {64, VW_BM} */
    CUtensorMap tb; /* wcl [Coutp, ldw] bf16, box {64, BN} */
    const void *bias;
    int bias_t;
    const __nv_bfloat16 *res; /* [M, Cout] or NULL */
    __nv_bfloat16 *y;         /* [M, Cout] */
    int64_t M;                /* output rows: T * Hp * Wp */
    int Hp, Wp, H, W, Cout;
    int kb0;         /* first wcl column (skipped temporal taps) */
    int cpt, kiters; /* K steps per tap (Cin_s / 64), K steps in all */
    int off[VW_MAX_TAPS];
};

template <int BN, int STAGES> static constexpr size_t vw_smem_bytes() {
    return VW_ATOM_BYTES + (size_t)STAGES * (VW_BM + BN) * VW_ROW_BYTES + 16 * STAGES;
}

static __device__ __forceinline__ void vw_bar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
static __device__ __forceinline__ void vw_bar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ void vw_bar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void vw_bar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* TMA: the box at {c0 (column), c1 (row)} into shared dst, completing on bar */
static __device__ __forceinline__ void vw_tma(uint32_t dst, const CUtensorMap *map, int c0, int c1,
                                              uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
static __device__ __forceinline__ void vw_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void vw_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void vw_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int N> static __device__ __forceinline__ void vw_pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}
/* shared-memory matrix descriptor, K-major, 128-byte swizzle (SBO: 8 rows) */
static __device__ __forceinline__ uint64_t vw_desc(uint32_t addr) {
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(16 >> 4) << 16) |
           ((uint64_t)(VW_ATOM_BYTES >> 4) << 32) | (1ull << 62);
}

/* D[64 x 128] (+)= A[64 x 16] * B[16 x 128]; A and B K-major in shared memory. */
static __device__ __forceinline__ void vw_mma_n128(float (&d)[64], uint64_t da, uint64_t db,
                                                   int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
                 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : C3_WG_D64(d)
                 : "l"(da), "l"(db), "r"(acc));
}

/* D[64 x 256] (+)= A[64 x 16] * B[16 x 256]; A and B K-major in shared memory. */
static __device__ __forceinline__ void vw_mma_n256(float (&d)[128], uint64_t da, uint64_t db,
                                                   int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "
        "%111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
        "%127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : C3_WG_D128(d)
        : "l"(da), "l"(db), "r"(acc));
}

template <int BN>
static __device__ __forceinline__ void vw_mma(float (&d)[BN / 2], uint64_t da, uint64_t db,
                                              int acc) {
    if constexpr (BN == 256)
        vw_mma_n256(d, da, db, acc);
    else
        vw_mma_n128(d, da, db, acc);
}

/* An epilogue's bf16 pair at flat index o (column col): the accumulators
 * d0, d1 + bias (+ residual), 0 where the row is padding (real false). The
 * mma.sync kernel (vae_cl.cu) stores through it too. */
template <typename A>
static __device__ __forceinline__ void vw_store_pair(const A &a, bool real, float d0, float d1,
                                                     int col, int64_t o) {
    float v0 = 0.0f, v1 = 0.0f;
    if (real) {
        v0 = d0;
        v1 = d1;
        if (a.bias) {
            v0 += cu_ld(a.bias, a.bias_t, col);
            v1 += cu_ld(a.bias, a.bias_t, col + 1);
        }
        if (a.res) {
            __nv_bfloat162 r = *(const __nv_bfloat162 *)(a.res + o);
            v0 += __bfloat162float(r.x);
            v1 += __bfloat162float(r.y);
        }
    }
    *(__nv_bfloat162 *)(a.y + o) = __floats2bfloat162_rn(v0, v1);
}

static __device__ __forceinline__ bool vw_real(int64_t p, int Hp, int Wp, int H, int W) {
    int64_t pp = p % ((int64_t)Hp * Wp);
    int hh = (int)(pp / Wp), ww = (int)(pp % Wp);
    return hh >= 1 && hh <= H && ww >= 1 && ww <= W;
}

/* Thread 0: the stages' mbarriers, full[s] (one arrival: the producer's
 * expect_tx) and empty[s] (every consumer thread), then the fence. */
template <int STAGES> static __device__ __forceinline__ void vw_bars_init(uint32_t bars) {
    for (int s = 0; s < STAGES; s++) {
        vw_bar_init(bars + 8 * s, 1);
        vw_bar_init(bars + 8 * (STAGES + s), VW_CONSUMERS * VW_WG);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* The producer's K step it of the tile at (m0, n0), its g-th over the block's
 * life: wait for stage g % STAGES to be empty, then the A rows of its tap and
 * channel slice and the B slice into it by TMA. */
template <int STAGES, uint32_t ABYTES, uint32_t SBYTES>
static __device__ __forceinline__ void vw_load_step(const vw_args &a, uint32_t s0, uint32_t bars,
                                                    int g, int it, int64_t m0, int n0) {
    const int s = g % STAGES;
    const uint32_t sa = s0 + s * SBYTES, full = bars + 8 * s, empty = bars + 8 * (STAGES + s);
    vw_bar_wait(empty, ((g / STAGES) & 1) ^ 1);
    vw_bar_expect(full, SBYTES);
    const int tap = it / a.cpt, c0 = (it - tap * a.cpt) * VW_BK;
    vw_tma(sa, &a.ta, c0, (int)(m0 + a.off[tap]), full);
    vw_tma(sa + ABYTES, &a.tb, a.kb0 + it * VW_BK, n0, full);
}

template <int BN, int STAGES>
__global__ void __launch_bounds__(VW_THREADS, 1) k_vw_conv(const __grid_constant__ vw_args a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* built without sm_90a: the host never launches this */
#else
    static_assert(BN == 128 || BN == 256, "k_vw_conv: BN is 128 or 256");
    constexpr uint32_t ABYTES = VW_BM * VW_ROW_BYTES, BBYTES = BN * VW_ROW_BYTES;
    constexpr uint32_t SBYTES = ABYTES + BBYTES; /* a multiple of the 1024-byte atom */
    extern __shared__ unsigned char vw_raw[];
    unsigned char *base = (unsigned char *)(((uintptr_t)vw_raw + VW_ATOM_BYTES - 1) &
                                            ~(uintptr_t)(VW_ATOM_BYTES - 1));
    const uint32_t s0 = (uint32_t)__cvta_generic_to_shared(base);
    const uint32_t bars = s0 + STAGES * SBYTES; /* full[STAGES], empty[STAGES] */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int ntn = (a.Cout + BN - 1) / BN;
    const int64_t m0 = (int64_t)(blockIdx.x / ntn) * VW_BM;
    const int n0 = (int)(blockIdx.x % ntn) * BN;

    if (threadIdx.x == 0) vw_bars_init<STAGES>(bars);
    __syncthreads();

    if (warp >= VW_CONSUMERS * 4) { /* producer warpgroup: one thread issues every copy */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(VW_REG_PRODUCER));
        if (threadIdx.x != VW_CONSUMERS * VW_WG) return;
        for (int it = 0; it < a.kiters; it++)
            vw_load_step<STAGES, ABYTES, SBYTES>(a, s0, bars, it, it, m0, n0);
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(VW_REG_CONSUMER));
    const int wg = warp / 4, wl = warp % 4, g = lane / 4, t = lane % 4;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
        d[i] = 0.0f;
    for (int it = 0; it < a.kiters; it++) {
        const int s = it % STAGES;
        const uint32_t sa = s0 + s * SBYTES + wg * (VW_BM / 2) * VW_ROW_BYTES,
                       sb = s0 + s * SBYTES + ABYTES;
        vw_bar_wait(bars + 8 * s, (it / STAGES) & 1);
        vw_pin(d);
        vw_fence();
#pragma unroll
        for (int kk = 0; kk < VW_BK / 16; kk++) /* 16 columns = 32 bytes of the swizzled row */
            vw_mma<BN>(d, vw_desc(sa + kk * 32), vw_desc(sb + kk * 32), it > 0 || kk > 0);
        vw_commit();
        vw_wait<1>(); /* the products of step it - 1 have retired: release its stage */
        vw_pin(d);
        if (it > 0) vw_bar_arrive(bars + 8 * (STAGES + (it - 1) % STAGES));
    }
    vw_wait<0>();
    vw_pin(d);

    /* epilogue: d[4c + e] is row 16 wl + g + 8 (e / 2), column 8c + 2t + (e % 2) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t row = m0 + wg * (VW_BM / 2) + wl * 16 + g + 8 * h;
        if (row >= a.M) continue;
        const bool real = vw_real(row, a.Hp, a.Wp, a.H, a.W);
#pragma unroll
        for (int c = 0; c < BN / 8; c++) {
            const int col = n0 + 8 * c + 2 * t;
            if (col >= a.Cout) continue;
            const int64_t o = row * a.Cout + col;
            vw_store_pair(a, real, d[4 * c + 2 * h], d[4 * c + 2 * h + 1], col, o);
        }
    }
#endif
}

/* ---- persistent variant: each block walks tiles blockIdx.x, + gridDim.x, ...;
 * the producer runs ahead into the next tile while the consumers store the
 * last one, and the store goes through shared memory: each warpgroup writes
 * its 64 x BN accumulators (+ bias, bf16) into a padded tile, then copies it
 * out in 16-byte chunks, adding the residual with 16-byte loads (so the
 * residual is added to the bf16-rounded conv output, as torch adds two bf16
 * tensors). Needs Cout % 8 == 0. */
#define VW_EPAD 8 /* bf16 of padding per staged row: rows 4 banks apart */
template <int BN, int STAGES> static constexpr size_t vw_psmem_bytes() {
    return VW_ATOM_BYTES + (size_t)STAGES * (VW_BM + BN) * VW_ROW_BYTES +
           (size_t)VW_BM * (BN + VW_EPAD) * 2 + 16 * STAGES;
}
static __device__ __forceinline__ void vw_wg_sync(int wg) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + wg), "n"(VW_WG) : "memory");
}

template <int BN, int STAGES>
__global__ void __launch_bounds__(VW_THREADS, 1) k_vw_conv_p(const __grid_constant__ vw_args a) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* built without sm_90a: the host never launches this */
#else
    static_assert(BN == 128 || BN == 256, "k_vw_conv_p: BN is 128 or 256");
    constexpr uint32_t ABYTES = VW_BM * VW_ROW_BYTES, BBYTES = BN * VW_ROW_BYTES;
    constexpr uint32_t SBYTES = ABYTES + BBYTES;
    constexpr int LDE = BN + VW_EPAD; /* staged row, bf16 */
    extern __shared__ unsigned char vw_raw[];
    unsigned char *base = (unsigned char *)(((uintptr_t)vw_raw + VW_ATOM_BYTES - 1) &
                                            ~(uintptr_t)(VW_ATOM_BYTES - 1));
    const uint32_t s0 = (uint32_t)__cvta_generic_to_shared(base);
    __nv_bfloat16 *E = (__nv_bfloat16 *)(base + STAGES * SBYTES); /* [VW_BM][LDE] */
    const uint32_t bars = s0 + STAGES * SBYTES + VW_BM * LDE * 2;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int ntn = (a.Cout + BN - 1) / BN;
    const int64_t ntiles = (a.M + VW_BM - 1) / VW_BM * ntn;

    if (threadIdx.x == 0) vw_bars_init<STAGES>(bars);
    __syncthreads();

    if (warp >= VW_CONSUMERS * 4) { /* producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(VW_REG_PRODUCER));
        if (threadIdx.x != VW_CONSUMERS * VW_WG) return;
        int g = 0; /* K steps issued so far, over all tiles */
        for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
            const int64_t m0 = tile / ntn * VW_BM;
            const int n0 = (int)(tile % ntn) * BN;
            for (int it = 0; it < a.kiters; it++, g++)
                vw_load_step<STAGES, ABYTES, SBYTES>(a, s0, bars, g, it, m0, n0);
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(VW_REG_CONSUMER));
    const int wg = warp / 4, wl = warp % 4, gq = lane / 4, t = lane % 4, tw = threadIdx.x % VW_WG;
    float d[BN / 2];
    int g = 0;
    for (int64_t tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {
        const int64_t m0 = tile / ntn * VW_BM;
        const int n0 = (int)(tile % ntn) * BN;
#pragma unroll
        for (int i = 0; i < BN / 2; i++)
            d[i] = 0.0f;
        for (int it = 0; it < a.kiters; it++, g++) {
            const int s = g % STAGES;
            const uint32_t sa = s0 + s * SBYTES + wg * (VW_BM / 2) * VW_ROW_BYTES,
                           sb = s0 + s * SBYTES + ABYTES;
            vw_bar_wait(bars + 8 * s, (g / STAGES) & 1);
            vw_pin(d);
            vw_fence();
#pragma unroll
            for (int kk = 0; kk < VW_BK / 16; kk++)
                vw_mma<BN>(d, vw_desc(sa + kk * 32), vw_desc(sb + kk * 32), 1);
            vw_commit();
            vw_wait<1>();
            vw_pin(d);
            if (it > 0) vw_bar_arrive(bars + 8 * (STAGES + (g - 1) % STAGES));
        }
        vw_wait<0>();
        vw_pin(d);
        vw_bar_arrive(bars +
                      8 * (STAGES + (g - 1) % STAGES)); /* the producer is on the next tile */

        /* stage: rows 64 wg + 16 wl + gq (+ 8), columns 8c + 2t (+ 1), + bias, bf16 */
        vw_wg_sync(wg); /* this warpgroup's copy-out of the last tile is done */
        __nv_bfloat16 *Ew = E + (size_t)wg * (VW_BM / 2) * LDE;
#pragma unroll
        for (int c = 0; c < BN / 8; c++) {
            const int col = n0 + 8 * c + 2 * t;
            float b0 = 0.0f, b1 = 0.0f;
            if (a.bias && col < a.Cout) {
                b0 = cu_ld(a.bias, a.bias_t, col);
                b1 = cu_ld(a.bias, a.bias_t, col + 1);
            }
#pragma unroll
            for (int h = 0; h < 2; h++)
                *(__nv_bfloat162 *)(Ew + (wl * 16 + gq + 8 * h) * LDE + 8 * c + 2 * t) =
                    __floats2bfloat162_rn(d[4 * c + 2 * h] + b0, d[4 * c + 2 * h + 1] + b1);
        }
        vw_wg_sync(wg);
        /* copy out: 64 rows x BN / 8 chunks of 16 bytes, 128 threads, PER chunks a thread: all
         * residual loads issued before the first add (one memory latency, not PER) */
        constexpr int CPR = BN / 8, PER = (VW_BM / 2) * CPR / VW_WG;
        uint4 u[PER], rv[PER];
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int k = tw + i * VW_WG, r = k / CPR, c8 = (k % CPR) * 8;
            const int64_t row = m0 + wg * (VW_BM / 2) + r;
            const int col = n0 + c8;
            u[i] = *(const uint4 *)(Ew + r * LDE + c8);
            rv[i] = make_uint4(0, 0, 0, 0);
            if (a.res && row < a.M && col < a.Cout)
                rv[i] = *(const uint4 *)(a.res + row * a.Cout + col);
        }
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int k = tw + i * VW_WG, r = k / CPR, c8 = (k % CPR) * 8;
            const int64_t row = m0 + wg * (VW_BM / 2) + r;
            const int col = n0 + c8;
            if (row >= a.M || col >= a.Cout) continue;
            uint4 o = make_uint4(0, 0, 0, 0);
            if (vw_real(row, a.Hp, a.Wp, a.H, a.W)) {
                o = u[i];
                if (a.res) {
                    __nv_bfloat162 *h2 = (__nv_bfloat162 *)&o;
                    const __nv_bfloat162 *r2 = (const __nv_bfloat162 *)&rv[i];
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        float2 x = __bfloat1622float2(h2[q]), y = __bfloat1622float2(r2[q]);
                        h2[q] = __floats2bfloat162_rn(x.x + y.x, x.y + y.y);
                    }
                }
            }
            *(uint4 *)(a.y + row * a.Cout + col) = o;
        }
    }
#endif
}

/* host: tensor maps through the driver entry point (no -lcuda needed) */
typedef CUresult (*vw_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                 const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                 const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static vw_encode_fn vw_encoder(void) {
    static vw_encode_fn fn = NULL;
    if (!fn) {
        void *f = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                             &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (vw_encode_fn)f;
    }
    return fn;
}
/* a bf16 [rows, cols] row-major matrix (row stride ld elements) as a TMA map, box {64, box_rows} */
static bool vw_map(CUtensorMap *m, const void *ptr, int64_t rows, int64_t cols, int64_t ld,
                   int box_rows) {
    vw_encode_fn enc = vw_encoder();
    if (!enc || rows <= 0 || cols <= 0 || ((uintptr_t)ptr & 15) || (ld * 2) % 16 ||
        rows > INT32_MAX)
        return false;
    cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t stride[1] = {(cuuint64_t)ld * 2};
    cuuint32_t box[2] = {VW_BK, (cuuint32_t)box_rows};
    cuuint32_t estr[2] = {1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)ptr, dim, stride, box, estr,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

#endif
