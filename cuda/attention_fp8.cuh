/* attention_fp8.cuh - the Hopper (sm_90a) FP8 GEN attention kernel (issue
 * 24 item 4, `--attention fp8`): Q K^T and P V in E4M3 with fp32
 * accumulation, bf16 in and out. Shared by the backend (cuda/attention.cu)
 * and the lab (cuda/lab/attention_lab.cu); include after
 * attention_hopper.cuh (it reuses that file's barriers, TMA and
 * descriptors).
 *
 * Quantisation (fa8_prepare, three passes before the kernel):
 *  - per head amax of Q [Sq, Hq, 128], of K and of V over the visible rows
 *    of every key segment ([n, Hkv, 128], rows < valid), one scale per head
 *    s = amax / 448 (1 where amax is 0);
 *  - Q and K as E4M3 codes round(x / s) (round to nearest even, saturated
 *    at 448) in their own layout: the K-major operands of Q K^T;
 *  - V transposed to Vt [Hkv, 128, npad] codes (npad = n rounded up to 16,
 *    keys >= valid zero): FP8 wgmma takes B only K-major, and P V sums over
 *    keys. Inside each 16 keys the columns are permuted so that the score
 *    accumulator of Q K^T is already the register A fragment of P V (no
 *    register shuffles): column 4t + i holds key 2t + (i & 1) + 8 (i >> 1).
 * The kernel folds sq * sk into the softmax scale and sv into the output.
 * P = exp2(s - m + 8) lies in [0, 256] (FlashAttention-3's max offset: the
 * E4M3 range is used, small probabilities keep 3 mantissa bits); the row
 * sum l adds the unrounded values, so the 2^8 cancels in O / l.
 *
 * Layout of the kernel: as att_wgmma<128, 1, 1, 1> (a producer warpgroup,
 * two consumer warpgroups in pingpong, Q K^T of tile j and P V of tile j-1
 * in flight under the softmax of tile j, masks only on tail tiles), with
 * 128-key tiles: one 128-byte swizzled row is 128 codes (a whole head row
 * of Q or K, or 128 keys of one Vt row). */
#ifndef COSMOS3_ATTENTION_FP8_CUH
#define COSMOS3_ATTENTION_FP8_CUH

#include "wgmma.cuh"

#ifndef COSMOS3_ATTENTION_HOPPER_CUH
#error "include attention_hopper.cuh before attention_fp8.cuh"
#endif

#define FA8_BK 128     /* keys per tile (one 128-byte row of Vt) */
#define FA8_KSTEP 32   /* wgmma K for 8-bit types */
#define FA8_MAX 448.0f /* largest finite E4M3 */
#define FA8_POFF 8.0f  /* P = 2^(s - m + 8): probabilities in [0, 256] */
/* Vt keys padded to a multiple (the permutation's span; TMA's 16-byte strides) */
#define FA8_KPAD 16

/* the per-head scale of an amax (the quantise pass and the kernel agree bit for bit) */
static __host__ __device__ __forceinline__ float fa8_scale(float amax) {
    return amax > 0.0f ? amax / FA8_MAX : 1.0f;
}
/* key of column c of a 16-key group of Vt, and the column of key k */
static __host__ __device__ __forceinline__ int fa8_key_of_col(int c) {
    return 2 * (c >> 2) + (c & 1) + 8 * ((c >> 1) & 1);
}
static __host__ __device__ __forceinline__ int fa8_col_of_key(int k) {
    return 4 * ((k & 7) >> 1) + (k & 1) + 2 * (k >> 3);
}

typedef struct {
    CUtensorMap tq;              /* q8 [Sq, Hq, 128] u8, box {128, 1, FA_BQ} */
    CUtensorMap tk[ATT_MAX_SEG]; /* k8 [n, Hkv, 128] u8, box {128, 1, FA8_BK} */
    CUtensorMap tv[ATT_MAX_SEG]; /* vt [Hkv * 128, npad] u8, box {FA8_BK, 128} */
    void *out;                   /* [Sq, Hq, 128] bf16 */
    const float *amax;           /* [Hq] q, [Hkv] k, [Hkv] v */
    int64_t Sq;
    int Hq, Hkv, nseg;
    int64_t valid[ATT_MAX_SEG];
    float scale_log2; /* > 0, before the quantisation scales */
} fa8_params;

/* D[64 x 128] (+)= A[64 x 32] * B[32 x 128], E4M3, both K-major in shared memory */
__device__ __forceinline__ void wgmma8_ss_n128(float (&d)[64], uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, "
                 "%6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
                 "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, "
                 "%39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
                 "%55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
                 : C3_WG_D64(d)
                 : "l"(da), "l"(db), "r"(acc));
}

/* D[64 x 128] (+)= A[64 x 32] (registers) * B[32 x 128] (K-major in shared memory), E4M3 */
__device__ __forceinline__ void wgmma8_rs_n128(float (&d)[64], const uint32_t (&a)[4], uint64_t db,
                                               int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, "
        "%26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
        "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
        "%62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
        : C3_WG_D64(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

/* TMA: 2-D box at {c0 (column), c1 (row)} */
static __device__ __forceinline__ void fa8_tma2d(uint32_t dst, const CUtensorMap *map, int c0,
                                                 int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
/* two floats -> two E4M3 codes, lo in the low byte */
static __device__ __forceinline__ uint32_t fa8_cvt2(float lo, float hi) {
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

/* As fa_softmax, with P = 2^(s sl2 - m sl2 + FA8_POFF) and alpha = 2^((m_old - m) sl2). */
template <bool MASK>
static __device__ __forceinline__ void fa8_softmax(float (&s)[FA8_BK / 2], int64_t lim, float sl2,
                                                   float (&m)[2], float (&l)[2], float (&alpha)[2],
                                                   int t) {
    if (MASK) {
        const int lt = (int)(lim < FA8_BK ? lim : FA8_BK) - 2 * t;
#pragma unroll
        for (int i = 0; i < FA8_BK / 2; i++)
            s[i] = (i / 4) * 8 + (i & 1) < lt ? s[i] : -INFINITY;
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < FA8_BK / 2; i++)
        mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    float mu[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        float mn = fmaxf(m[r], mx[r]);
        float ms = mn == -INFINITY ? 0.0f : mn * sl2; /* a row with nothing visible yet */
        alpha[r] = fa_exp2(m[r] * sl2 - ms);
        mu[r] = ms - FA8_POFF;
        m[r] = mn;
        l[r] *= alpha[r];
    }
#pragma unroll
    for (int i = 0; i < FA8_BK / 2; i++) {
        float p = fa_exp2(fmaf(s[i], sl2, -mu[(i >> 1) & 1]));
        s[i] = p;
        l[(i >> 1) & 1] += p;
    }
}

/* probabilities (accumulator layout) -> E4M3 A fragments of P V. k-step j
 * covers accumulator columns 32j..32j+31; with Vt's column permutation the
 * A fragment of row g, columns 4t..4t+3 is this thread's keys 2t, 2t+1,
 * 2t+8, 2t+9 (accumulator s[16j + {0, 1, 4, 5}]), row g + 8 the same keys
 * (s[16j + {2, 3, 6, 7}]), and columns 16 + 4t.. the keys 16 further. */
static __device__ __forceinline__ void fa8_pack(const float (&s)[FA8_BK / 2],
                                                uint32_t (&pa)[FA8_BK / 32][4]) {
#pragma unroll
    for (int j = 0; j < FA8_BK / 32; j++) {
        const float *c = s + 16 * j;
        pa[j][0] = fa8_cvt2(c[0], c[1]) | fa8_cvt2(c[4], c[5]) << 16;
        pa[j][1] = fa8_cvt2(c[2], c[3]) | fa8_cvt2(c[6], c[7]) << 16;
        pa[j][2] = fa8_cvt2(c[8], c[9]) | fa8_cvt2(c[12], c[13]) << 16;
        pa[j][3] = fa8_cvt2(c[10], c[11]) | fa8_cvt2(c[14], c[15]) << 16;
    }
}

/* S = Q K^T over 128 head columns: 4 k-steps of 32 bytes inside the one swizzled row */
static __device__ __forceinline__ void fa8_qk(float (&s)[FA8_BK / 2], uint32_t qbase,
                                              uint32_t kbase) {
#pragma unroll
    for (int kk = 0; kk < FA_D / FA8_KSTEP; kk++) {
        uint64_t da = fa_desc(qbase + kk * 32, 16, FA_ATOM_BYTES);
        uint64_t db = fa_desc(kbase + kk * 32, 16, FA_ATOM_BYTES);
        wgmma8_ss_n128(s, da, db, kk > 0);
    }
}
/* O += P V over 128 keys: Vt tile [128 head columns][128 keys], K-major */
static __device__ __forceinline__ void
fa8_pv(float (&o)[FA_D / 2], const uint32_t (&pa)[FA8_BK / 32][4], uint32_t vbase) {
#pragma unroll
    for (int j = 0; j < FA8_BK / FA8_KSTEP; j++)
        wgmma8_rs_n128(o, pa[j], fa_desc(vbase + j * 32, 16, FA_ATOM_BYTES), 1);
}

/* the fa_params fields fa_next / fa_first read */
static __device__ __forceinline__ void fa8_next(fa_cur &c, const fa8_params &p) {
    c.k0 += FA8_BK;
    while (c.sg < p.nseg && c.k0 >= p.valid[c.sg])
        c.sg++, c.k0 = 0;
}
static __device__ __forceinline__ fa_cur fa8_first(const fa8_params &p) {
    fa_cur c = {0, 0};
    while (c.sg < p.nseg && p.valid[c.sg] <= 0)
        c.sg++;
    return c;
}

template <int STAGES>
static __device__ __forceinline__ void
fa8_consumer(const fa8_params &p, uint32_t sq, uint32_t sk, uint32_t sv, uint32_t full_q,
             uint32_t full_k, uint32_t empty_k, uint32_t full_v, uint32_t empty_v, int h, int hk,
             int64_t q0, int warp, int lane) {
    constexpr uint32_t TILE = FA8_BK * FA_D; /* bytes of one K or Vt tile */
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(FA_REG_CONSUMER));
    const int wg = warp / 4, wl = warp % 4, g = lane / 4, t = lane % 4;
    const uint32_t qbase = sq + wg * FA_WG_ROWS * FA_ROW_BYTES;
    const float sl2 = p.scale_log2 * fa8_scale(p.amax[h]) * fa8_scale(p.amax[p.Hq + hk]);
    const float vs = fa8_scale(p.amax[p.Hq + p.Hkv + hk]); /* V's scale, folded into 1 / l */
    float o[FA_D / 2];
#pragma unroll
    for (int i = 0; i < FA_D / 2; i++)
        o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, alpha[2];
    float s[FA8_BK / 2];
    uint32_t pa[FA8_BK / 32][4];
    fa_bar_wait(full_q, 0);

    fa_cur c = fa8_first(p);
    if (wg == 1) fa_turn_pass(1); /* warpgroup 0 goes first */
    if (c.sg < p.nseg) {
        fa_bar_wait(full_k, 0);
        fa_turn_wait(wg);
        wg_fence();
        fa8_qk(s, qbase, sk);
        wg_commit();
        fa_turn_pass(wg);
        wg_wait<0>();
        wg_pin(s);
        fa_bar_arrive(empty_k);
        fa8_softmax<true>(s, p.valid[c.sg] - c.k0, sl2, m, l, alpha, t);
        fa8_pack(s, pa);
        int it = 1;
        for (fa8_next(c, p); c.sg < p.nseg; fa8_next(c, p), it++) {
            const int st = it % STAGES, sp = (it - 1) % STAGES;
            const uint32_t ph = (it / STAGES) & 1, pph = ((it - 1) / STAGES) & 1;
            const int64_t lim = p.valid[c.sg] - c.k0;
            auto step = [&](auto maskc) {
                constexpr bool MASK = decltype(maskc)::value;
                fa_bar_wait(full_k + 8 * st, ph);
                fa_bar_wait(full_v + 8 * sp, pph);
                fa_turn_wait(wg);
                wg_fence();
                fa8_qk(s, qbase, sk + st * TILE);
                wg_commit();
                fa8_pv(o, pa, sv + sp * TILE);
                wg_commit();
                fa_turn_pass(wg);
                wg_wait<1>();
                wg_pin(s);
                fa_bar_arrive(empty_k + 8 * st);
                fa8_softmax<MASK>(s, lim, sl2, m, l, alpha, t);
                wg_wait<0>();
                wg_pin(o);
                fa_bar_arrive(empty_v + 8 * sp);
                fa_scale_o(o, alpha);
                fa8_pack(s, pa);
            };
            if (lim >= FA8_BK)
                step(std::false_type());
            else
                step(std::true_type());
        }
        const int sp = (it - 1) % STAGES;
        fa_bar_wait(full_v + 8 * sp, ((it - 1) / STAGES) & 1);
        fa_turn_wait(wg);
        wg_fence();
        fa8_pv(o, pa, sv + sp * TILE);
        wg_commit();
        fa_turn_pass(wg);
        wg_wait<0>();
        wg_pin(o);
    }
    if (wg == 0) fa_turn_wait(0); /* the pass warpgroup 1 gave last */

#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        l[r] = l[r] > 0.0f ? vs / l[r] : 0.0f;
    }
    const int64_t r0 = q0 + wg * FA_WG_ROWS + wl * 16 + g, r1 = r0 + 8;
    const int64_t qstride = (int64_t)p.Hq * FA_D;
    __nv_bfloat16 *out = (__nv_bfloat16 *)p.out + h * FA_D;
#pragma unroll
    for (int cc = 0; cc < FA_D / 8; cc++) {
        const int col = cc * 8 + 2 * t;
        if (r0 < p.Sq)
            *(__nv_bfloat162 *)(out + r0 * qstride + col) =
                __floats2bfloat162_rn(o[4 * cc] * l[0], o[4 * cc + 1] * l[0]);
        if (r1 < p.Sq)
            *(__nv_bfloat162 *)(out + r1 * qstride + col) =
                __floats2bfloat162_rn(o[4 * cc + 2] * l[1], o[4 * cc + 3] * l[1]);
    }
}

template <int STAGES>
__global__ void __launch_bounds__(FA_THREADS, 1) att_fp8(const __grid_constant__ fa8_params p) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap(); /* built without sm_90a: the host never launches this */
#else
    constexpr uint32_t TILE = FA8_BK * FA_D;
    extern __shared__ unsigned char fa8_raw[];
    unsigned char *base = (unsigned char *)(((uintptr_t)fa8_raw + FA_ATOM_BYTES - 1) &
                                            ~(uintptr_t)(FA_ATOM_BYTES - 1));
    const uint32_t sq = fa_smem(base);      /* Q [FA_BQ][128] codes */
    const uint32_t sk = sq + FA_BQ * FA_D;  /* K [STAGES][FA8_BK][128] */
    const uint32_t sv = sk + STAGES * TILE; /* Vt [STAGES][128][FA8_BK] */
    const uint32_t bars = sv + STAGES * TILE;
    const uint32_t full_q = bars, full_k = bars + 8, empty_k = full_k + 8 * STAGES,
                   full_v = empty_k + 8 * STAGES, empty_v = full_v + 8 * STAGES;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int h = blockIdx.y, hk = h / (p.Hq / p.Hkv);
    const int64_t q0 = (int64_t)blockIdx.x * FA_BQ;

    if (threadIdx.x == 0) {
        fa_bar_init(full_q, 1);
        fa_stage_bars_init(full_k, empty_k, full_v, empty_v, STAGES);
    }
    __syncthreads();

    if (warp >= FA_CONSUMERS * 4) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(FA_REG_PRODUCER));
        if (threadIdx.x != FA_CONSUMERS * FA_WG) return;
        fa_bar_expect(full_q, FA_BQ * FA_D);
        fa_tma(sq, &p.tq, 0, h, (int)q0, full_q);
        int it = 0;
        for (fa_cur c = fa8_first(p); c.sg < p.nseg; fa8_next(c, p), it++) {
            const int s = it % STAGES;
            const uint32_t ph = ((it / STAGES) & 1) ^ 1;
            fa_bar_wait(empty_k + 8 * s, ph);
            fa_bar_expect(full_k + 8 * s, TILE);
            fa_tma(sk + s * TILE, &p.tk[c.sg], 0, hk, (int)c.k0, full_k + 8 * s);
            fa_bar_wait(empty_v + 8 * s, ph);
            fa_bar_expect(full_v + 8 * s, TILE);
            fa8_tma2d(sv + s * TILE, &p.tv[c.sg], (int)c.k0, hk * FA_D, full_v + 8 * s);
        }
    } else {
        fa8_consumer<STAGES>(p, sq, sk, sv, full_q, full_k, empty_k, full_v, empty_v, h, hk, q0,
                             warp, lane);
    }
#endif
}

template <int STAGES> static constexpr size_t fa8_smem_bytes() {
    return FA_ATOM_BYTES + (size_t)FA_BQ * FA_D + 2 * (size_t)STAGES * FA8_BK * FA_D +
           8 * (1 + 4 * STAGES);
}

/* ---- the quantise passes ---- */

/* amax[h] = max(amax[h], max |x[r, h, :]|) over rows r < rows; x [rows, H, 128] bf16.
 * 16 threads read one row of a head (16-byte chunks); the grid is a
 * multiple of H blocks of 256 threads, so a thread's head never changes
 * along its grid-stride loop and its maximum stays in a register. */
__global__ void __launch_bounds__(256)
    fa8_amax(const __nv_bfloat16 *x, int64_t rows, int H, float *amax) {
    constexpr int CH = FA_D / 8; /* chunks per row of a head */
    const int64_t n = rows * H * CH;
    const int64_t i0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    float a = 0.0f;
    for (int64_t i = i0; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint4 u = ((const uint4 *)x)[i];
        const __nv_bfloat162 *b = (const __nv_bfloat162 *)&u;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 f = __bfloat1622float2(b[j]);
            a = fmaxf(a, fmaxf(fabsf(f.x), fabsf(f.y)));
        }
    }
#pragma unroll
    for (int w = 1; w < CH; w <<= 1)
        a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, w));
    /* non-negative floats order as their bits */
    if (threadIdx.x % CH == 0 && a > 0.0f)
        atomicMax((int *)&amax[(i0 / CH) % H], __float_as_int(a));
}
static unsigned fa8_amax_grid(int sms, int H) {
    const int want = sms > 0 ? 2 * sms : 256;
    return (unsigned)((want + H - 1) / H * H);
}

/* y = E4M3(x / scale(amax[head])), same layout [rows, H, 128] */
__global__ void fa8_quant(const __nv_bfloat16 *x, int64_t rows, int H, const float *amax,
                          uint8_t *y) {
    const int64_t n = rows * H * (FA_D / 8);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float r =
            __frcp_rn(fa8_scale(amax[(i / (FA_D / 8)) % H])); /* x * (1 / s), as the CPU */
        uint4 u = ((const uint4 *)x)[i];
        const __nv_bfloat162 *b = (const __nv_bfloat162 *)&u;
        uint32_t w[2];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            float2 f0 = __bfloat1622float2(b[2 * j]), f1 = __bfloat1622float2(b[2 * j + 1]);
            w[j] = fa8_cvt2(__fmul_rn(f0.x, r), __fmul_rn(f0.y, r)) |
                   fa8_cvt2(__fmul_rn(f1.x, r), __fmul_rn(f1.y, r)) << 16;
        }
        ((uint2 *)y)[i] = make_uint2(w[0], w[1]);
    }
}

/* vt [Hkv, 128, npad] = E4M3(v / scale) transposed, keys permuted inside
 * each 16 (fa8_col_of_key), keys >= valid zero. Block (key block of 64, hk). */
#define FA8_TR_KEYS 64
__global__ void __launch_bounds__(256)
    fa8_vtrans(const __nv_bfloat16 *v, int64_t valid, int64_t npad, int Hkv, const float *amax,
               uint8_t *vt) {
    __shared__ uint8_t tile[FA_D][FA8_TR_KEYS + 4]; /* [head column][key column], padded rows */
    const int hk = blockIdx.y;
    const int64_t k0 = (int64_t)blockIdx.x * FA8_TR_KEYS;
    const float r = __frcp_rn(fa8_scale(amax[hk]));
    /* read: 64 keys x 128 columns, 2 columns per thread-step */
    for (int i = threadIdx.x; i < FA8_TR_KEYS * (FA_D / 2); i += blockDim.x) {
        const int kr = i / (FA_D / 2), d = 2 * (i % (FA_D / 2));
        const int64_t key = k0 + kr;
        float2 f = make_float2(0.0f, 0.0f);
        if (key < valid)
            f = __bfloat1622float2(*(const __nv_bfloat162 *)(v + (key * Hkv + hk) * FA_D + d));
        const uint32_t c = fa8_cvt2(__fmul_rn(f.x, r), __fmul_rn(f.y, r));
        const int col = (kr & ~15) + fa8_col_of_key(kr & 15);
        tile[d][col] = (uint8_t)c;
        tile[d + 1][col] = (uint8_t)(c >> 8);
    }
    __syncthreads();
    /* write: 128 rows of 64 key columns, 4 bytes per thread */
    for (int i = threadIdx.x; i < FA_D * (FA8_TR_KEYS / 4); i += blockDim.x) {
        const int d = i / (FA8_TR_KEYS / 4), c4 = 4 * (i % (FA8_TR_KEYS / 4));
        const int64_t col = k0 + c4;
        if (col >= npad) continue;
        const uint32_t w = tile[d][c4] | tile[d][c4 + 1] << 8 | tile[d][c4 + 2] << 16 |
                           (uint32_t)tile[d][c4 + 3] << 24;
        *(uint32_t *)(vt + ((int64_t)hk * FA_D + d) * npad + col) = w;
    }
}

/* the FP8 problem: bf16 q [Sq, Hq, 128], segments k/v [n, Hkv, 128] (rows < valid visible) */
typedef struct {
    const void *q;
    void *out;
    int64_t Sq;
    int Hq, Hkv, nseg;
    const void *k[ATT_MAX_SEG], *v[ATT_MAX_SEG];
    int64_t n[ATT_MAX_SEG], valid[ATT_MAX_SEG];
    float scale_log2;
} fa8_problem;

static int64_t fa8_npad(int64_t n) {
    return (n + FA8_KPAD - 1) / FA8_KPAD * FA8_KPAD;
}
static size_t fa8_align(size_t b) {
    return (b + 255) & ~(size_t)255;
}
/* scratch bytes fa8_prepare carves: amax, q8, then k8 and vt of each segment */
static size_t fa8_scratch_bytes(const fa8_problem &a) {
    size_t b = fa8_align((size_t)(a.Hq + 2 * a.Hkv) * sizeof(float)) +
               fa8_align((size_t)a.Sq * a.Hq * FA_D);
    for (int s = 0; s < a.nseg; s++)
        b += fa8_align((size_t)a.n[s] * a.Hkv * FA_D) +
             fa8_align((size_t)fa8_npad(a.n[s]) * a.Hkv * FA_D);
    return b;
}

/* a u8 tensor map over rows x cols (cols contiguous, row stride `stride` bytes) */
static bool fa8_map2(CUtensorMap *m, const void *ptr, int64_t rows, int64_t cols, int64_t stride,
                     int box_rows, int box_cols) {
    fa_encode_fn enc = fa_encoder();
    if (!enc || rows <= 0 || cols <= 0 || ((uintptr_t)ptr & 15) || (stride & 15)) return false;
    cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    cuuint64_t str[1] = {(cuuint64_t)stride};
    cuuint32_t box[2] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows};
    cuuint32_t estr[2] = {1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, (void *)ptr, dim, str, box, estr,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
/* a u8 [rows, heads, 128] tensor as a map with box {128, 1, box_rows} */
static bool fa8_map3(CUtensorMap *m, const void *ptr, int64_t rows, int heads, int box_rows) {
    fa_encode_fn enc = fa_encoder();
    if (!enc || rows <= 0 || ((uintptr_t)ptr & 15)) return false;
    cuuint64_t dim[3] = {FA_D, (cuuint64_t)heads, (cuuint64_t)rows};
    cuuint64_t str[2] = {FA_D, (cuuint64_t)heads * FA_D};
    cuuint32_t box[3] = {FA_D, 1, (cuuint32_t)box_rows};
    cuuint32_t estr[3] = {1, 1, 1};
    return enc(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, (void *)ptr, dim, str, box, estr,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* Quantise a's inputs into scratch (fa8_scratch_bytes of it, 256-byte
 * aligned) on stream st and fill the kernel's parameters. false: a problem
 * the kernel does not take (heads, alignment, no tensor maps); a CUDA
 * launch error is left for the caller's cudaGetLastError. */
static bool fa8_prepare(const fa8_problem &a, void *scratch, int sms, cudaStream_t st,
                        fa8_params *p) {
    memset(p, 0, sizeof *p);
    if (a.Hkv <= 0 || a.Hq % a.Hkv || a.nseg < 1 || a.nseg > ATT_MAX_SEG) return false;
    if (((uintptr_t)a.q & 15)) return false;
    for (int s = 0; s < a.nseg; s++)
        if (((uintptr_t)a.k[s] & 15) || ((uintptr_t)a.v[s] & 15)) return false;
    char *b = (char *)scratch;
    float *amax = (float *)b;
    b += fa8_align((size_t)(a.Hq + 2 * a.Hkv) * sizeof(float));
    uint8_t *q8 = (uint8_t *)b;
    b += fa8_align((size_t)a.Sq * a.Hq * FA_D);
    uint8_t *k8[ATT_MAX_SEG], *vt[ATT_MAX_SEG];
    for (int s = 0; s < a.nseg; s++) {
        k8[s] = (uint8_t *)b;
        b += fa8_align((size_t)a.n[s] * a.Hkv * FA_D);
        vt[s] = (uint8_t *)b;
        b += fa8_align((size_t)fa8_npad(a.n[s]) * a.Hkv * FA_D);
    }
    if (!fa8_map3(&p->tq, q8, a.Sq, a.Hq, FA_BQ)) return false;
    for (int s = 0; s < a.nseg; s++) {
        if (a.valid[s] <= 0) continue;
        const int64_t np = fa8_npad(a.n[s]);
        if (!fa8_map3(&p->tk[s], k8[s], a.n[s], a.Hkv, FA8_BK) ||
            !fa8_map2(&p->tv[s], vt[s], (int64_t)a.Hkv * FA_D, np, np, FA_D, FA8_BK))
            return false;
    }
    const unsigned grid = (unsigned)(sms > 0 ? 4 * sms : 512), gq = fa8_amax_grid(sms, a.Hq),
                   gk = fa8_amax_grid(sms, a.Hkv);
    /* from here on every failure is a CUDA error, left for cudaGetLastError */
    (void)cudaMemsetAsync(amax, 0, (size_t)(a.Hq + 2 * a.Hkv) * sizeof(float), st);
    fa8_amax<<<gq, 256, 0, st>>>((const __nv_bfloat16 *)a.q, a.Sq, a.Hq, amax);
    for (int s = 0; s < a.nseg; s++) {
        if (a.valid[s] <= 0) continue;
        fa8_amax<<<gk, 256, 0, st>>>((const __nv_bfloat16 *)a.k[s], a.valid[s], a.Hkv, amax + a.Hq);
        fa8_amax<<<gk, 256, 0, st>>>((const __nv_bfloat16 *)a.v[s], a.valid[s], a.Hkv,
                                     amax + a.Hq + a.Hkv);
    }
    fa8_quant<<<grid, 256, 0, st>>>((const __nv_bfloat16 *)a.q, a.Sq, a.Hq, amax, q8);
    for (int s = 0; s < a.nseg; s++) {
        if (a.valid[s] <= 0) continue;
        const int64_t np = fa8_npad(a.n[s]);
        fa8_quant<<<grid, 256, 0, st>>>((const __nv_bfloat16 *)a.k[s], a.n[s], a.Hkv, amax + a.Hq,
                                        k8[s]);
        fa8_vtrans<<<dim3((unsigned)((np + FA8_TR_KEYS - 1) / FA8_TR_KEYS), (unsigned)a.Hkv), 256,
                     0, st>>>((const __nv_bfloat16 *)a.v[s], a.valid[s], np, a.Hkv,
                              amax + a.Hq + a.Hkv, vt[s]);
        p->valid[s] = a.valid[s];
    }
    p->out = a.out, p->amax = amax, p->Sq = a.Sq, p->Hq = a.Hq, p->Hkv = a.Hkv, p->nseg = a.nseg;
    p->scale_log2 = a.scale_log2;
    return true;
}

#define FA8_STAGES 2 /* K/V stages of the shipped FP8 kernel */
/* the kernel on prepared parameters (after fa8_prepare on the same stream) */
template <int STAGES = FA8_STAGES>
static cudaError_t fa8_launch(const fa8_params &p, cudaStream_t st) {
    constexpr size_t smem = fa8_smem_bytes<STAGES>();
    cudaError_t e = cudaFuncSetAttribute(att_fp8<STAGES>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((p.Sq + FA_BQ - 1) / FA_BQ), (unsigned)p.Hq);
    att_fp8<STAGES><<<grid, FA_THREADS, smem, st>>>(p);
    return cudaGetLastError();
}

#endif
