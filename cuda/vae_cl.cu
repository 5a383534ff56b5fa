/* vae_cl.cu - the channels-last VAE decode ops (backend.h "vcl_*").
 *
 * Layout. An activation is bf16 frames [F, Hp, Wp, C] with Hp = H + 2,
 * Wp = W + 2 and a one-pixel border of zeros around every frame
 * ("padded channels-last"). A 3-D convolution is then an implicit GEMM
 * with no index arithmetic in its inner loop: output position p (padded
 * coordinates, frame-major) reads, for tap (a, b, c), the input row
 * p + a*Hp*Wp + (b - pad)*Wp + (c - pad), so every tap is the same [BM, C]
 * tile of rows shifted by a constant. Rows that fall on a border are
 * computed as garbage and stored as zero, which keeps the borders zero
 * for the next layer without any clearing pass.
 *
 * The convolution: bf16 operands, fp32 accumulation in mma.sync m16n8k16,
 * a 4-stage cp.async pipeline, ldmatrix from padded shared rows
 * (conflict-free), bias and an optional residual fused in the epilogue.
 * Weights are reordered once into wcl [Coutp, taps, Cin_s] (Cout padded to
 * the tile, Cin to the K step, zeros in the padding), so weight loads are
 * never predicated and channel counts only need C % 8 == 0.
 * On sm_90a the same problem runs as a wgmma + TMA kernel (vae_wgmma.cuh)
 * wherever Cin_s is a multiple of 64 and Cout of 8 (every decoder conv but
 * conv_out's 12 channels); the mma.sync kernel takes the rest and other GPUs.
 * cuda/lab/vae_lab.cu checks every variant against a CPU loop and times them. */
#include "cuda_internal.h"
#include "vae_wgmma.cuh"

#define VCL_BM 128
#define VCL_BK C3_VCL_CIN_ALIGN /* K step: channels per tap are padded to it */
#define VCL_STAGES 4
#define VCL_LDS (VCL_BK + 8) /* shared row: 32 bf16 + 8 pad = 80 bytes, ldmatrix conflict-free */
#define VCL_THREADS 256
#define VCL_MAX_TAPS 27
#define CHAN_EPS 1e-12f
#define VCL_ROUND(n, a) (((n) + (a)-1) / (a) * (a))
#define VCL_COUT_ALIGN C3_VCL_COUT_ALIGN

typedef __nv_bfloat16 bf16;

struct vcl_conv_args {
    const bf16 *x, *w, *res;
    const void *bias;
    int bias_t;
    bf16 *y;
    int64_t M; /* output rows: T * Hp * Wp */
    int Hp, Wp, H, W;
    int Cin, Cout, ldw; /* ldw: wcl row length taps * Cin_s */
    int k0;             /* first K column used (skipped temporal taps) */
    int cpt, kiters;    /* K steps per tap (Cin_s / BK), K steps in all */
    int off[VCL_MAX_TAPS];
};

static __device__ __forceinline__ unsigned smem_u32(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void cp16(unsigned dst, const void *src, bool valid) {
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
static __device__ __forceinline__ void ldsm4(unsigned addr, unsigned &r0, unsigned &r1,
                                             unsigned &r2, unsigned &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
static __device__ __forceinline__ void mma16816(float *c, const unsigned *a, unsigned b0,
                                                unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* A padded position is a real pixel (not a border). */
static __device__ __forceinline__ bool vcl_real(int64_t p, int Hp, int Wp, int H, int W) {
    int64_t pp = p % ((int64_t)Hp * Wp);
    int hh = (int)(pp / Wp), ww = (int)(pp % Wp);
    return hh >= 1 && hh <= H && ww >= 1 && ww <= W;
}

/* Tile BM x BN, 8 warps as 2 (M) x 4 (N); warp tile 64 x BN/4. */
template <int BN, int MINB>
__global__ void __launch_bounds__(VCL_THREADS, MINB) k_vcl_conv(const vcl_conv_args a) {
    constexpr int WN = BN / 4, NI = WN / 8, MI = 4;
    extern __shared__ uint4 vcl_smem[];
    bf16 *sA = (bf16 *)vcl_smem;                   /* [STAGES][BM][LDS] */
    bf16 *sB = sA + VCL_STAGES * VCL_BM * VCL_LDS; /* [STAGES][BN][LDS] */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int ntn = (a.Cout + BN - 1) / BN;
    const int64_t m0 = (int64_t)(blockIdx.x / ntn) * VCL_BM;
    const int n0 = (int)(blockIdx.x % ntn) * BN;

    /* this thread's A rows (2) and B rows (BN / 64), chunk j of 4 per row */
    const int j = tid & 3, r0 = tid >> 2;
    const bf16 *arow[2];
    bool aval[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int64_t p = m0 + r0 + 64 * i;
        aval[i] = p < a.M && vcl_real(p, a.Hp, a.Wp, a.H, a.W);
        arow[i] = a.x + (aval[i] ? p * a.Cin : 0) + j * 8;
    }
    constexpr int BR = BN / 64;
    const bf16 *brow = a.w + (int64_t)(n0 + r0) * a.ldw + a.k0 + j * 8;

    auto load = [&](int it, int stage) {
        int tap = it / a.cpt, c0 = (it - tap * a.cpt) * VCL_BK;
        int64_t off = (int64_t)a.off[tap] * a.Cin + c0;
        bool cval = c0 + j * 8 < a.Cin;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            bool v = aval[i] && cval;
            cp16(smem_u32(sA + ((size_t)stage * VCL_BM + r0 + 64 * i) * VCL_LDS + j * 8),
                 v ? arow[i] + off : a.x, v);
        }
#pragma unroll
        for (int i = 0; i < BR; i++)
            cp16(smem_u32(sB + ((size_t)stage * BN + r0 + 64 * i) * VCL_LDS + j * 8),
                 brow + (int64_t)64 * i * a.ldw + (int64_t)it * VCL_BK, true);
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[mi][ni][q] = 0.0f;

#pragma unroll
    for (int s = 0; s < VCL_STAGES - 1; s++) {
        if (s < a.kiters) load(s, s);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    const int wm = (warp >> 2) * 64, wn = (warp & 3) * WN;
    for (int it = 0; it < a.kiters; it++) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(VCL_STAGES - 2));
        __syncthreads();
        int nx = it + VCL_STAGES - 1;
        if (nx < a.kiters) load(nx, nx % VCL_STAGES);
        asm volatile("cp.async.commit_group;\n" ::);
        const int st = it % VCL_STAGES;
        const bf16 *tA = sA + (size_t)st * VCL_BM * VCL_LDS, *tB = sB + (size_t)st * BN * VCL_LDS;
#pragma unroll
        for (int kk = 0; kk < VCL_BK; kk += 16) {
            unsigned af[MI][4], bfr[NI][2];
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
                ldsm4(smem_u32(tA + (wm + mi * 16 + (lane & 15)) * VCL_LDS + kk + (lane >> 4) * 8),
                      af[mi][0], af[mi][1], af[mi][2], af[mi][3]);
#pragma unroll
            for (int nj = 0; nj < NI / 2; nj++)
                ldsm4(smem_u32(tB + (wn + nj * 16 + (lane & 7) + (lane >> 4) * 8) * VCL_LDS + kk +
                               ((lane >> 3) & 1) * 8),
                      bfr[2 * nj][0], bfr[2 * nj][1], bfr[2 * nj + 1][0], bfr[2 * nj + 1][1]);
#pragma unroll
            for (int mi = 0; mi < MI; mi++)
#pragma unroll
                for (int ni = 0; ni < NI; ni++)
                    mma16816(acc[mi][ni], af[mi], bfr[ni][0], bfr[ni][1]);
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);

    /* epilogue: + bias (+ residual), zero on borders, bf16 pairs */
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t row = m0 + wm + mi * 16 + (lane >> 2) + h * 8;
            if (row >= a.M) continue;
            bool real = vcl_real(row, a.Hp, a.Wp, a.H, a.W);
#pragma unroll
            for (int ni = 0; ni < NI; ni++) {
                int col = n0 + wn + ni * 8 + 2 * (lane & 3);
                if (col >= a.Cout) continue;
                int64_t o = row * a.Cout + col;
                vw_store_pair(a, real, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1], col, o);
            }
        }
}

/* 0 automatic; mma.sync 1 BN 128, 2 BN 256, 3 BN 64; wgmma (sm_90a) 4 BN 256, 5 BN 128,
 * 6 BN 256 persistent (7: on 3 blocks, for the lab) */
static int vcl_variant = 0;
extern "C" void c3_cuda_vcl_variant(int which) {
    vcl_variant = which;
}

template <int BN, int MINB> static int launch_conv(c3_backend *be, const vcl_conv_args &a) {
    size_t smem = (size_t)VCL_STAGES * (VCL_BM + BN) * VCL_LDS * sizeof(bf16);
    static bool attr_set[64]; /* per device */
    int dev = cu_of(be)->device;
    if (dev < 0 || dev >= 64) return c3_fail(C3_EFAIL, "cuda vcl_conv: device %d", dev);
    if (!attr_set[dev]) {
        CU_CHECK(cudaFuncSetAttribute(k_vcl_conv<BN, MINB>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        attr_set[dev] = true;
    }
    int64_t tiles = (a.M + VCL_BM - 1) / VCL_BM * ((a.Cout + BN - 1) / BN);
    if (tiles > INT32_MAX)
        return c3_fail(C3_EFAIL, "cuda vcl_conv: %lld tiles is too many", (long long)tiles);
    k_vcl_conv<BN, MINB><<<(unsigned)tiles, VCL_THREADS, smem, cu_of(be)->stream>>>(a);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

#define VW_STAGES_256 4 /* 4 x 48 KiB */
#define VW_STAGES_128 6 /* 6 x 32 KiB */
#define VW_PSTAGES 3    /* persistent: 3 x 48 KiB + the 66 KiB staged output tile */

/* the automatic choice takes the wgmma kernel where it can; COSMOS3_VCL_WGMMA=0 or 1 overrides */
#define VW_AUTO 1

/* true when this build carries sm_90a code and the device runs it */
static bool vw_usable(c3_backend *be) {
    static int usable[64];
    int dev = cu_of(be)->device;
    if (dev < 0 || dev >= 64) return false;
    if (!usable[dev]) {
        int major = 0;
        cudaFuncAttributes fa;
        bool ok =
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
            major == 9 &&
            cudaFuncGetAttributes(&fa, k_vw_conv<256, VW_STAGES_256>) == cudaSuccess &&
            fa.binaryVersion >= 90 && vw_encoder() != NULL &&
            vw_smem_bytes<256, VW_STAGES_256>() <= cu_of(be)->smem_optin &&
            vw_smem_bytes<128, VW_STAGES_128>() <= cu_of(be)->smem_optin &&
            vw_psmem_bytes<256, VW_PSTAGES>() <= cu_of(be)->smem_optin;
        (void)cudaGetLastError();
        usable[dev] = ok ? 1 : -1;
    }
    return usable[dev] > 0;
}
static bool vw_auto(void) {
    const char *e = getenv("COSMOS3_VCL_WGMMA");
    return e && *e ? strcmp(e, "0") != 0 : VW_AUTO;
}

/* the wgmma conv on the problem of a (the mma.sync kernel's arguments); C3_OK when launched.
 * PERSIST: k_vw_conv_p on at most min(tiles, SMs, grid_cap) blocks (grid_cap 0: no cap) */
template <int BN, int STAGES, bool PERSIST>
static int launch_wgmma(c3_backend *be, const vcl_conv_args &a, int64_t xrows, int grid_cap) {
    vw_args w;
    memset(&w, 0, sizeof w);
    int64_t coutp = VCL_ROUND(a.Cout, VCL_COUT_ALIGN);
    if (!vw_map(&w.ta, a.x, xrows, a.Cin, a.Cin, VW_BM) ||
        !vw_map(&w.tb, a.w, coutp, a.ldw, a.ldw, BN))
        return c3_fail(C3_EFAIL, "cuda vcl_conv: no TMA map for x [%lld, %d] or wcl [%lld, %d]",
                       (long long)xrows, a.Cin, (long long)coutp, a.ldw);
    w.bias = a.bias, w.bias_t = a.bias_t, w.res = a.res, w.y = a.y, w.M = a.M;
    w.Hp = a.Hp, w.Wp = a.Wp, w.H = a.H, w.W = a.W, w.Cout = a.Cout;
    w.kb0 = a.k0;
    w.cpt = a.cpt * VCL_BK / VW_BK;
    w.kiters = a.kiters * VCL_BK / VW_BK;
    memcpy(w.off, a.off, sizeof w.off);
    void (*kern)(const vw_args);
    size_t smem;
    if constexpr (PERSIST)
        kern = k_vw_conv_p<BN, STAGES>, smem = vw_psmem_bytes<BN, STAGES>();
    else
        kern = k_vw_conv<BN, STAGES>, smem = vw_smem_bytes<BN, STAGES>();
    static bool attr_set[64];
    static int sms[64];
    int dev = cu_of(be)->device;
    if (!attr_set[dev]) {
        CU_CHECK(
            cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CU_CHECK(cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev));
        attr_set[dev] = true;
    }
    int64_t tiles = (a.M + VW_BM - 1) / VW_BM * ((a.Cout + BN - 1) / BN);
    if (tiles > INT32_MAX)
        return c3_fail(C3_EFAIL, "cuda vcl_conv: %lld tiles is too many", (long long)tiles);
    int64_t grid = tiles;
    if (PERSIST) {
        grid = C3_MIN(grid, (int64_t)sms[dev]);
        if (grid_cap > 0) grid = C3_MIN(grid, (int64_t)grid_cap);
    }
    kern<<<(unsigned)grid, VW_THREADS, smem, cu_of(be)->stream>>>(w);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

static int need_bf16(const char *op, const c3_tensor *t, const char *name, int64_t n) {
    if (t->dtype != C3_BF16) return c3_fail(C3_EFAIL, "cuda %s: %s must be bf16", op, name);
    if (c3_numel(t) < n)
        return c3_fail(C3_EFAIL, "cuda %s: %s holds %lld elements, needs %lld", op, name,
                       (long long)c3_numel(t), (long long)n);
    if ((uintptr_t)t->data % 16)
        return c3_fail(C3_EFAIL, "cuda %s: %s is not 16-byte aligned", op, name);
    return C3_OK;
}

__global__ void k_vcl_weight(bf16 *y, const void *w, int wt, int Cout, int Cin, int taps, int Coutp,
                             int Cins) {
    int64_t n = (int64_t)Coutp * taps * Cins;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int ci = (int)(i % Cins), tap = (int)(i / Cins % taps);
        int64_t co = i / ((int64_t)Cins * taps);
        float v = co < Cout && ci < Cin ? cu_ld(w, wt, (co * Cin + ci) * taps + tap) : 0.0f;
        y[i] = __float2bfloat16_rn(v);
    }
}

static int64_t c3_vcl_weight_numel(int Cout, int Cin, int taps) {
    return C3_VCL_WEIGHT_NUMEL(Cout, Cin, taps);
}

int cu_vcl_weight(c3_backend *be, c3_tensor *wcl, const c3_tensor *w) {
    C3_TRY(cu_check_float("vcl_weight", w, "w"));
    if (w->ndim != 5) return c3_fail(C3_EFAIL, "cuda vcl_weight: w has %d dims, want 5", w->ndim);
    int Cout = (int)w->ne[0], Cin = (int)w->ne[1], taps = (int)(w->ne[2] * w->ne[3] * w->ne[4]);
    int64_t n = c3_vcl_weight_numel(Cout, Cin, taps);
    C3_TRY(need_bf16("vcl_weight", wcl, "wcl", n));
    CU_ENTER(be);
    k_vcl_weight<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(
        (bf16 *)wcl->data, w->data, w->dtype, Cout, Cin, taps, VCL_ROUND(Cout, VCL_COUT_ALIGN),
        VCL_ROUND(Cin, VCL_BK));
    CU_CHECK_LAUNCH();
    return C3_OK;
}

int cu_vcl_conv(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *wcl,
                const c3_tensor *bias, const c3_tensor *res, const c3_vcl_geom *g) {
    int T = g->T, H = g->H, W = g->W, Cin = g->cin, Cout = g->cout, kt = g->kt, ks = g->ks,
        a0 = g->a0;
    if (T < 1 || H < 1 || W < 1 || Cin < 8 || Cin % 8 || Cout < 2 || Cout % 2 || kt < 1 || kt > 3 ||
        (ks != 1 && ks != 3) || a0 < 0 || a0 >= kt)
        return c3_fail(
            C3_EFAIL, "cuda vcl_conv: bad geometry T %d H %d W %d Cin %d Cout %d kt %d ks %d a0 %d",
            T, H, W, Cin, Cout, kt, ks, a0);
    int64_t Hp = H + 2, Wp = W + 2, fr = Hp * Wp, M = (int64_t)T * fr;
    int taps = kt * ks * ks, cins = VCL_ROUND(Cin, VCL_BK), pad = ks / 2;
    C3_TRY(need_bf16("vcl_conv", x, "x", (int64_t)(T + kt - 1 - a0) * fr * Cin));
    C3_TRY(need_bf16("vcl_conv", y, "y", M * Cout));
    C3_TRY(need_bf16("vcl_conv", wcl, "wcl", c3_vcl_weight_numel(Cout, Cin, taps)));
    if (res) C3_TRY(need_bf16("vcl_conv", res, "res", M * Cout));
    if (bias && (c3_numel(bias) < Cout || !cu_float_type(bias->dtype)))
        return c3_fail(C3_EFAIL, "cuda vcl_conv: bias holds %lld elements, needs %d",
                       (long long)c3_numel(bias), Cout);
    if (y->data == x->data) return c3_fail(C3_EFAIL, "cuda vcl_conv: y must not alias x");
    vcl_conv_args a;
    memset(&a, 0, sizeof a);
    a.x = (const bf16 *)x->data;
    a.w = (const bf16 *)wcl->data;
    a.res = res ? (const bf16 *)res->data : NULL;
    a.bias = bias ? bias->data : NULL;
    a.bias_t = bias ? bias->dtype : C3_F32;
    a.y = (bf16 *)y->data;
    a.M = M;
    a.Hp = (int)Hp, a.Wp = (int)Wp, a.H = H, a.W = W;
    a.Cin = Cin, a.Cout = Cout, a.ldw = taps * cins;
    a.k0 = a0 * ks * ks * cins;
    a.cpt = cins / VCL_BK;
    a.kiters = (kt - a0) * ks * ks * a.cpt;
    int n = 0;
    for (int ta = a0; ta < kt; ta++)
        for (int tb = 0; tb < ks; tb++)
            for (int tc = 0; tc < ks; tc++)
                a.off[n++] = (int)((ta - a0) * fr + (int64_t)(tb - pad) * Wp + (tc - pad));
    CU_ENTER(be);
    /* the wgmma kernels take K steps of 64 channels of one tap; the persistent one stores
     * 8 channels at a time */
    bool wg_ok = cins % VW_BK == 0 && vw_usable(be), wp_ok = wg_ok && Cout % 8 == 0;
    int v = vcl_variant;
    if (v >= 4 && !(v >= 6 ? wp_ok : wg_ok))
        return c3_fail(C3_EFAIL,
                       "cuda vcl_conv: wgmma variant %d needs sm_90a, Cin_s %% 64 == 0 (Cin %d)%s",
                       v, Cin, v >= 6 ? " and Cout % 8 == 0" : "");
    if (v == 0) {
        /* COSMOS3_VCL_CONV=N: variant N wherever it applies (a preference; else as below) */
        static int env_variant = -1;
        if (env_variant < 0) {
            const char *e = getenv("COSMOS3_VCL_CONV");
            env_variant = e && *e ? atoi(e) : 0;
        }
        int ev = env_variant;
        if (ev >= 1 && ev <= 6 && (ev < 4 || (ev == 6 ? wp_ok : wg_ok))) v = ev;
    }
    /* measured (vae_lab, H200; NOTES.md, s8 VAE): over the 720p decoder shapes the persistent
     * wgmma 128x256 (v6: 504-777 TF/s, 4.18 s summed) is ahead of the plain one (v4: 471-722,
     * 4.45 s), wgmma 128x128 (v5: 439-592, 5.34 s) and the best mma.sync tile (128x128 with 2
     * blocks per SM: 200-286, 10.5 s); 128x64 mma.sync only for conv_out's 12 channels */
    if (v == 0) v = Cout <= 64 ? 3 : wp_ok && vw_auto() ? 6 : wg_ok && vw_auto() ? 4 : 1;
    int64_t xrows = (int64_t)(T + kt - 1 - a0) * fr;
    if (v == 4) return launch_wgmma<256, VW_STAGES_256, false>(be, a, xrows, 0);
    if (v == 5) return launch_wgmma<128, VW_STAGES_128, false>(be, a, xrows, 0);
    /* 7: the persistent kernel on 3 blocks (the lab's check of its walk over many tiles) */
    if (v == 6 || v == 7) return launch_wgmma<256, VW_PSTAGES, true>(be, a, xrows, v == 7 ? 3 : 0);
    if (v == 2) return launch_conv<256, 1>(be, a);
    if (v == 3) return launch_conv<64, 2>(be, a);
    return launch_conv<128, 2>(be, a);
}

int cu_vcl_zero(c3_backend *be, c3_tensor *y) {
    CU_ENTER(be);
    size_t n = (size_t)c3_numel(y) * c3_dtype_size(y->dtype);
    if (n) CU_CHECK(cudaMemsetAsync(y->data, 0, n, cu_of(be)->stream));
    return C3_OK;
}

/* ---- channel RMS norm (+ SiLU) over rows of C: one warp per position ---- */
__global__ void k_vcl_norm(bf16 *y, const bf16 *x, const void *g, int gt, int64_t N, int C,
                           bool silu) {
    int lane = threadIdx.x & 31;
    int64_t wid = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5,
            nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    float scale = sqrtf((float)C);
    int nch = C / 8;
    for (int64_t p = wid; p < N; p += nw) {
        const uint4 *xr = (const uint4 *)(x + p * C);
        uint4 *yr = (uint4 *)(y + p * C);
        float ss = 0.0f;
        for (int c = lane; c < nch; c += 32) {
            uint4 u = xr[c];
            const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float2 f = __bfloat1622float2(h[q]);
                ss += f.x * f.x + f.y * f.y;
            }
        }
#pragma unroll
        for (int o = 16; o; o >>= 1)
            ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float r = scale / fmaxf(sqrtf(ss), CHAN_EPS);
        for (int c = lane; c < nch; c += 32) {
            uint4 u = xr[c], out;
            const __nv_bfloat162 *h = (const __nv_bfloat162 *)&u;
            __nv_bfloat162 *o2 = (__nv_bfloat162 *)&out;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float2 f = __bfloat1622float2(h[q]);
                /* torch's rounding: the norm is stored (bf16) before SiLU */
                float v0 = cu_round(C3_BF16, f.x * r * cu_ld(g, gt, c * 8 + 2 * q));
                float v1 = cu_round(C3_BF16, f.y * r * cu_ld(g, gt, c * 8 + 2 * q + 1));
                if (silu) {
                    v0 = v0 / (1.0f + __expf(-v0));
                    v1 = v1 / (1.0f + __expf(-v1));
                }
                o2[q] = __floats2bfloat162_rn(v0, v1);
            }
            yr[c] = out;
        }
    }
}

int cu_vcl_norm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *gamma, int64_t N,
                int C, bool silu) {
    if (C < 8 || C % 8)
        return c3_fail(C3_EFAIL, "cuda vcl_norm: %d channels (want a multiple of 8)", C);
    C3_TRY(need_bf16("vcl_norm", x, "x", N * C));
    C3_TRY(need_bf16("vcl_norm", y, "y", N * C));
    if (c3_numel(gamma) < C || !cu_float_type(gamma->dtype))
        return c3_fail(C3_EFAIL, "cuda vcl_norm: gamma holds %lld elements, needs %d",
                       (long long)c3_numel(gamma), C);
    CU_ENTER(be);
    if (N == 0) return C3_OK;
    k_vcl_norm<<<cu_grid(be, N * 32), CU_THREADS, 0, cu_of(be)->stream>>>(
        (bf16 *)y->data, (const bf16 *)x->data, gamma->data, gamma->dtype, N, C, silu);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* ---- nearest 2x upsample (with the upsample3d time interleave) ----
 * x [T, H+2, W+2, Cx], y [T', 2H+2, 2W+2, C] whole frames; interleave:
 * Cx = 2C, T' = 2T, frame 2t + s reads channels [s*C, (s+1)*C) of frame t. */
__global__ void k_vcl_upsample(uint4 *y, const uint4 *x, int64_t n, int Hy, int Wy, int H, int W,
                               int C8, bool interleave) {
    int64_t Wpy = Wy + 2, Hpy = Hy + 2, Wpx = W + 2, Hpx = H + 2;
    int cx8 = interleave ? 2 * C8 : C8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int c = (int)(i % C8);
        int64_t p = i / C8;
        int ww = (int)(p % Wpy), hh = (int)(p / Wpy % Hpy);
        int64_t t = p / (Wpy * Hpy);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (hh >= 1 && hh <= Hy && ww >= 1 && ww <= Wy) {
            int64_t tx = interleave ? t / 2 : t;
            int cs = interleave ? (int)(t % 2) * C8 + c : c;
            int hx = (hh - 1) / 2 + 1, wx = (ww - 1) / 2 + 1;
            v = x[((tx * Hpx + hx) * Wpx + wx) * cx8 + cs];
        }
        y[i] = v;
    }
}

int cu_vcl_upsample(c3_backend *be, c3_tensor *y, const c3_tensor *x, int T, int H, int W, int C,
                    bool interleave) {
    if (C < 8 || C % 8 || T < 1)
        return c3_fail(C3_EFAIL, "cuda vcl_upsample: %d channels, %d frames", C, T);
    int64_t To = interleave ? 2 * T : T;
    C3_TRY(need_bf16("vcl_upsample", x, "x",
                     (int64_t)T * (H + 2) * (W + 2) * C * (interleave ? 2 : 1)));
    int64_t n = To * (2 * H + 2) * (2 * W + 2) * (C / 8);
    C3_TRY(need_bf16("vcl_upsample", y, "y", n * 8));
    CU_ENTER(be);
    k_vcl_upsample<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(
        (uint4 *)y->data, (const uint4 *)x->data, n, 2 * H, 2 * W, H, W, C / 8, interleave);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* ---- DupUp3D shortcut added in place ----
 * y[t*ft + a, h*fs + b, w*fs + d, o] += x[t, h, w, (o*ft*fs*fs + a*fs*fs + b*fs + d) / R]
 * (interior positions); trim: one input frame, only a = ft - 1, one output frame. */
__global__ void k_vcl_dupup(bf16 *y, const bf16 *x, int64_t n8, int Ho, int Wo, int H, int W,
                            int Cin, int Cout, int ft, int fs, int R, bool trim) {
    /* 8 output channels a thread: one 16-byte read-modify-write of y */
    const int C8 = Cout / 8;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8;
         i += (int64_t)gridDim.x * blockDim.x) {
        int o0 = (int)(i % C8) * 8;
        int64_t p = i / C8;
        int wo = (int)(p % Wo), ho = (int)(p / Wo % Ho);
        int64_t to = p / ((int64_t)Wo * Ho);
        int a = trim ? ft - 1 : (int)(to % ft);
        int64_t t = trim ? 0 : to / ft;
        int b = ho % fs, d = wo % fs, h = ho / fs, w = wo / fs;
        int64_t yi = ((to * (Ho + 2) + ho + 1) * (Wo + 2) + wo + 1) * Cout + o0;
        const bf16 *xr = x + ((t * (H + 2) + h + 1) * (W + 2) + w + 1) * Cin;
        int64_t K = (int64_t)ft * fs * fs, j = a * fs * fs + b * fs + d;
        uint4 u = *(const uint4 *)(y + yi);
        __nv_bfloat162 *h2 = (__nv_bfloat162 *)&u;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            float2 f = __bfloat1622float2(h2[q]);
            f.x += __bfloat162float(xr[((o0 + 2 * q) * K + j) / R]);
            f.y += __bfloat162float(xr[((o0 + 2 * q + 1) * K + j) / R]);
            h2[q] = __floats2bfloat162_rn(f.x, f.y);
        }
        *(uint4 *)(y + yi) = u;
    }
}

int cu_vcl_dupup(c3_backend *be, c3_tensor *y, const c3_tensor *x, int T, int H, int W, int Cin,
                 int Cout, int ft, int fs, bool trim) {
    if (T < 1 || ft < 1 || fs < 1 || (trim && T != 1) || ((int64_t)Cout * ft * fs * fs) % Cin ||
        Cout % 8)
        return c3_fail(C3_EFAIL, "cuda vcl_dupup: bad geometry T %d Cin %d Cout %d ft %d fs %d", T,
                       Cin, Cout, ft, fs);
    int R = (int)((int64_t)Cout * ft * fs * fs / Cin);
    int64_t To = trim ? 1 : (int64_t)T * ft, Ho = (int64_t)H * fs, Wo = (int64_t)W * fs;
    C3_TRY(need_bf16("vcl_dupup", x, "x", (int64_t)T * (H + 2) * (W + 2) * Cin));
    C3_TRY(need_bf16("vcl_dupup", y, "y", To * (Ho + 2) * (Wo + 2) * Cout));
    int64_t n = To * Ho * Wo * Cout / 8;
    CU_ENTER(be);
    k_vcl_dupup<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(
        (bf16 *)y->data, (const bf16 *)x->data, n, (int)Ho, (int)Wo, H, W, Cin, Cout, ft, fs, R,
        trim);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

/* ---- layouts ----
 * to_cl: x [C, T, H, W] (any float type) -> y padded channels-last (whole frames).
 * else:  x padded channels-last [T, H+2, W+2, C] -> y [C / p^2, T, H p, W p]
 *        (unpatchify: channel c p^2 + r p + q -> pixel (h p + q, w p + r)),
 *        clamped to [lo, hi] when lo < hi; y of any float type. */
__global__ void k_vcl_to_cl(bf16 *y, const void *x, int xt, int64_t n, int T, int H, int W, int C) {
    int64_t Wp = W + 2, Hp = H + 2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int c = (int)(i % C);
        int64_t p = i / C;
        int ww = (int)(p % Wp), hh = (int)(p / Wp % Hp);
        int64_t t = p / (Wp * Hp);
        float v = 0.0f;
        if (hh >= 1 && hh <= H && ww >= 1 && ww <= W)
            v = cu_ld(x, xt, (((int64_t)c * T + t) * H + hh - 1) * W + ww - 1);
        y[i] = __float2bfloat16_rn(v);
    }
}

__global__ void k_vcl_from_cl(void *y, int yt, const bf16 *x, int64_t n, int T, int H, int W, int C,
                              int P, float lo, float hi) {
    int64_t Wo = (int64_t)W * P, Ho = (int64_t)H * P;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t X = i % Wo, Y = i / Wo % Ho, t = i / (Wo * Ho) % T;
        int64_t c = i / (Wo * Ho * T);
        int64_t h = Y / P, q = Y % P, w = X / P, r = X % P;
        int64_t ch = (c * P + r) * P + q;
        float v = __bfloat162float(x[((t * (H + 2) + h + 1) * (W + 2) + w + 1) * C + ch]);
        if (lo < hi) v = fminf(fmaxf(v, lo), hi);
        cu_st(y, yt, i, v);
    }
}

int cu_vcl_layout(c3_backend *be, c3_tensor *y, const c3_tensor *x, int T, int H, int W, int C,
                  int patch, bool to_cl, float lo, float hi) {
    int64_t n = (int64_t)T * H * W * C;
    if (T < 1 || H < 1 || W < 1 || C < 1 || patch < 1 || C % (patch * patch) ||
        (to_cl && patch != 1))
        return c3_fail(C3_EFAIL, "cuda vcl_layout: bad geometry T %d H %d W %d C %d patch %d", T, H,
                       W, C, patch);
    int64_t ncl = (int64_t)T * (H + 2) * (W + 2) * C;
    CU_ENTER(be);
    if (to_cl) {
        C3_TRY(cu_check_float("vcl_layout", x, "x"));
        if (c3_numel(x) < n) return c3_fail(C3_EFAIL, "cuda vcl_layout: x holds too few elements");
        C3_TRY(need_bf16("vcl_layout", y, "y", ncl));
        k_vcl_to_cl<<<cu_grid(be, ncl), CU_THREADS, 0, cu_of(be)->stream>>>(
            (bf16 *)y->data, x->data, x->dtype, ncl, T, H, W, C);
    } else {
        C3_TRY(cu_check_float("vcl_layout", y, "y"));
        if (c3_numel(y) < n) return c3_fail(C3_EFAIL, "cuda vcl_layout: y holds too few elements");
        C3_TRY(need_bf16("vcl_layout", x, "x", ncl));
        k_vcl_from_cl<<<cu_grid(be, n), CU_THREADS, 0, cu_of(be)->stream>>>(
            y->data, y->dtype, (const bf16 *)x->data, n, T, H, W, C, patch, lo, hi);
    }
    CU_CHECK_LAUNCH();
    return C3_OK;
}
