/* vae_lab.cu - the channels-last VAE ops (cuda/vae_cl.cu) checked against
 * CPU loops and timed on the Wan2.2 decoder's real layer shapes.
 *
 *   1. vcl_conv, every tile variant (128x64, 128x128, 128x256), on small
 *      geometries with a full double-precision CPU reference: 3x3x3, the
 *      zero-history first chunk (a0 = 2), 3x3 spatial, the (3,1,1) time
 *      conv, 1x1 with a residual, Cin not a multiple of 32 (48), Cout 12.
 *      Inputs are fresh hash-random bf16 (zero borders), outputs poisoned
 *      with NaN first: every element must be written, borders exactly 0,
 *      rel L2 of the interior <= 1e-2 (bf16 output rounding).
 *   2. vcl_norm, vcl_upsample (with and without the time interleave),
 *      vcl_dupup (trimmed and not), vcl_layout both ways (unpatchify +
 *      clamp) against CPU loops.
 *   3. The 720p/189f layer shapes: each variant timed (median of reps,
 *      TFLOP/s), sampled positions checked against the CPU (borders and
 *      edges included), against a plain bf16 cuBLAS GEMM of 8192^3 (the
 *      tensor-core ceiling in this run) and the old im2col + cuBLAS
 *      conv3d on one shape.
 *
 * Run: vae_lab [--quick | --all | --wgmma]  (quick: parts 1 and 2; wgmma: only the
 * wgmma variants, checked and timed, and the automatic choice; all: part 3 times
 * every tile variant, not only the automatic choice). Exit 0 all pass, 1 a
 * check failed, 77 no CUDA device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "../cuda_internal.h"
#include "lab.h"

#define TOL 1e-2
#define REPS 7

static int failures, checks;
static bool all_variants, only_wgmma;
static c3_backend *gpu;

/* ---- hash-random values, the same on host and device ---- */
static __host__ __device__ inline float hrand(uint64_t seed, uint64_t i) {
    uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((z >> 40) * (1.0 / 8388608.0)) - 1.0f; /* [-1, 1) */
}
static float bf16r(float f) { /* round to nearest even bf16, as __float2bfloat16_rn */
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    memcpy(&f, &u, 4);
    return f;
}
/* x value at padded channels-last (t, hh, ww, c): zero on borders */
static __host__ __device__ inline float xval(uint64_t seed, int64_t t, int hh, int ww, int c, int H,
                                             int W, int C) {
    if (hh < 1 || hh > H || ww < 1 || ww > W) return 0.0f;
    return hrand(seed, (((uint64_t)t * (H + 2) + hh) * (W + 2) + ww) * C + c);
}
__global__ void k_fill_cl(__nv_bfloat16 *x, int64_t n, uint64_t seed, int H, int W, int C) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int c = (int)(i % C);
        int64_t p = i / C;
        int ww = (int)(p % (W + 2)), hh = (int)(p / (W + 2) % (H + 2));
        int64_t t = p / ((int64_t)(W + 2) * (H + 2));
        x[i] = __float2bfloat16_rn(xval(seed, t, hh, ww, c, H, W, C));
    }
}
__global__ void k_fill(float *x, int64_t n, uint64_t seed, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = hrand(seed, i) * scale;
}
__global__ void k_fill_b(__nv_bfloat16 *x, int64_t n, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = __float2bfloat16_rn(hrand(seed, i));
}
__global__ void k_poison(uint16_t *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        x[i] = 0x7FC1; /* bf16 NaN */
}

static c3_tensor dev(c3_dtype dt, int64_t n) {
    c3_tensor t;
    OK(c3_alloc(gpu, &t, dt, C3_MEM_ACT, 1, n));
    return t;
}
static void fill_cl(c3_tensor *t, uint64_t seed, int H, int W, int C) {
    k_fill_cl<<<1024, 256, 0, c3_cuda_stream(gpu)>>>((__nv_bfloat16 *)t->data, c3_numel(t), seed, H,
                                                     W, C);
    CK(cudaGetLastError());
}
static void fill_flat(c3_tensor *t, uint64_t seed) {
    k_fill_b<<<1024, 256, 0, c3_cuda_stream(gpu)>>>((__nv_bfloat16 *)t->data, c3_numel(t), seed);
    CK(cudaGetLastError());
}
static void poison(c3_tensor *t) {
    k_poison<<<1024, 256, 0, c3_cuda_stream(gpu)>>>((uint16_t *)t->data, c3_numel(t));
    CK(cudaGetLastError());
}
static std::vector<float> down(const c3_tensor *t) {
    std::vector<float> h((size_t)c3_numel(t));
    OK(gpu->download(gpu, h.data(), t));
    return h;
}
static void report(const char *what, double l2, bool ok) {
    checks++;
    if (!ok) failures++;
    printf("  %-64s rel L2 %.3e  %s\n", what, l2, ok ? "ok" : "FAIL");
}

/* ---- one conv problem ---- */
struct conv_case;
static bool variant_takes(int v, const conv_case &g);
struct conv_case {
    int T, H, W, cin, cout, kt, ks, a0;
    bool bias, res;
};
/* vcl_conv variants: mma.sync 1 (128x128), 2 (128x256), 3 (128x64); wgmma 4 (128x256), 5
 * (128x128), 6 (128x256 persistent, output staged in shared memory), 7 (6 on 3 blocks: many
 * tiles a block) */
#define VARIANTS 7
static bool have_wgmma;
static bool variant_takes(int v, const conv_case &g) {
    if (v < 4) return true;
    if (v >= 6 && g.cout % 8) return false;
    return have_wgmma && (g.cin + 31) / 32 * 32 % 64 == 0;
}
struct conv_dev {
    conv_case g;
    uint64_t sx, sw, sb, sr;
    float wscale;
    c3_tensor x, w32, wcl, b, r, y;
    std::vector<float> hx,
        hw; /* host copies for the full check: x [F, Hp, Wp, cin], w [co][tap][ci] */
};

static float wval(const conv_dev &d, int co, int ci, int tap) {
    int taps = d.g.kt * d.g.ks * d.g.ks;
    return bf16r(hrand(d.sw, ((uint64_t)co * d.g.cin + ci) * taps + tap) * d.wscale);
}
static float bval(const conv_dev &d, int co) {
    return d.g.bias ? bf16r(hrand(d.sb, co) * 0.5f) : 0.0f;
}

static void conv_make(conv_dev &d, const conv_case &g, uint64_t seed) {
    d.g = g;
    d.sx = seed * 4 + 1, d.sw = seed * 4 + 2, d.sb = seed * 4 + 3, d.sr = seed * 4 + 4;
    int taps = g.kt * g.ks * g.ks;
    d.wscale = 1.0f / sqrtf((float)g.cin * taps);
    int64_t fr = (int64_t)(g.H + 2) * (g.W + 2);
    int Fin = g.T + g.kt - 1 - g.a0;
    d.x = dev(C3_BF16, Fin * fr * g.cin);
    fill_cl(&d.x, d.sx, g.H, g.W, g.cin);
    int64_t nw = (int64_t)g.cout * g.cin * taps;
    c3_tensor w;
    OK(c3_alloc(gpu, &w, C3_F32, C3_MEM_ACT, 5, (int64_t)g.cout, (int64_t)g.cin, (int64_t)g.kt,
                (int64_t)g.ks, (int64_t)g.ks));
    k_fill<<<1024, 256, 0, c3_cuda_stream(gpu)>>>((float *)w.data, nw, d.sw, d.wscale);
    CK(cudaGetLastError());
    d.wcl = dev(C3_BF16, C3_VCL_WEIGHT_NUMEL(g.cout, g.cin, taps));
    OK(gpu->vcl_weight(gpu, &d.wcl, &w));
    c3_free(&w);
    memset(&d.b, 0, sizeof d.b);
    memset(&d.r, 0, sizeof d.r);
    if (g.bias) {
        std::vector<float> hb(g.cout);
        for (int c = 0; c < g.cout; c++)
            hb[c] = bval(d, c);
        d.b = dev(C3_BF16, g.cout);
        OK(gpu->upload(gpu, &d.b, hb.data(), C3_F32));
    }
    if (g.res) {
        d.r = dev(C3_BF16, g.T * fr * g.cout);
        fill_cl(&d.r, d.sr, g.H, g.W, g.cout);
    }
    d.y = dev(C3_BF16, g.T * fr * g.cout);
}
static void conv_free(conv_dev &d) {
    c3_free(&d.x);
    c3_free(&d.wcl);
    c3_free(&d.b);
    c3_free(&d.r);
    c3_free(&d.y);
}
static int conv_run(conv_dev &d) {
    c3_vcl_geom g = {d.g.T, d.g.H, d.g.W, d.g.cin, d.g.cout, d.g.kt, d.g.ks, d.g.a0};
    return gpu->vcl_conv(gpu, &d.y, &d.x, &d.wcl, d.g.bias ? &d.b : NULL, d.g.res ? &d.r : NULL,
                         &g);
}
/* CPU value of output (t, h, w) real coordinates, channel co */
static double conv_ref(const conv_dev &d, int t, int h, int w, int co) {
    const conv_case &g = d.g;
    int pad = g.ks / 2, taps = g.kt * g.ks * g.ks;
    bool cached = !d.hx.empty();
    double s = bval(d, co);
    for (int a = g.a0; a < g.kt; a++)
        for (int b = 0; b < g.ks; b++)
            for (int c = 0; c < g.ks; c++) {
                int tap = (a * g.ks + b) * g.ks + c;
                int hh = h + 1 + b - pad, ww = w + 1 + c - pad, tt = t + a - g.a0;
                if (cached) {
                    const float *xr =
                        &d.hx[(((size_t)tt * (g.H + 2) + hh) * (g.W + 2) + ww) * g.cin];
                    const float *wr = &d.hw[((size_t)co * taps + tap) * g.cin];
                    for (int ci = 0; ci < g.cin; ci++)
                        s += (double)xr[ci] * wr[ci];
                } else {
                    for (int ci = 0; ci < g.cin; ci++)
                        s += (double)bf16r(xval(d.sx, tt, hh, ww, ci, g.H, g.W, g.cin)) *
                             wval(d, co, ci, tap);
                }
            }
    if (g.res) s += bf16r(xval(d.sr, t, h + 1, w + 1, co, g.H, g.W, g.cout));
    return s;
}
static void conv_cache(conv_dev &d) {
    const conv_case &g = d.g;
    int taps = g.kt * g.ks * g.ks, Fin = g.T + g.kt - 1 - g.a0;
    d.hx.resize((size_t)Fin * (g.H + 2) * (g.W + 2) * g.cin);
    for (int t = 0; t < Fin; t++)
        for (int hh = 0; hh < g.H + 2; hh++)
            for (int ww = 0; ww < g.W + 2; ww++)
                for (int c = 0; c < g.cin; c++)
                    d.hx[(((size_t)t * (g.H + 2) + hh) * (g.W + 2) + ww) * g.cin + c] =
                        bf16r(xval(d.sx, t, hh, ww, c, g.H, g.W, g.cin));
    d.hw.resize((size_t)g.cout * taps * g.cin);
    for (int co = 0; co < g.cout; co++)
        for (int tap = 0; tap < taps; tap++)
            for (int ci = 0; ci < g.cin; ci++)
                d.hw[((size_t)co * taps + tap) * g.cin + ci] = wval(d, co, ci, tap);
}

/* Full check: every output element. */
static void conv_check_full(const conv_case &g, int variant, uint64_t seed) {
    c3_cuda_vcl_variant(variant);
    conv_dev d;
    conv_make(d, g, seed);
    conv_cache(d);
    poison(&d.y);
    OK(conv_run(d));
    std::vector<float> y = down(&d.y);
    double num = 0, den = 0;
    int64_t bad_border = 0, nonfinite = 0;
    int Hp = g.H + 2, Wp = g.W + 2;
    for (int t = 0; t < g.T; t++)
        for (int hh = 0; hh < Hp; hh++)
            for (int ww = 0; ww < Wp; ww++)
                for (int co = 0; co < g.cout; co++) {
                    float v = y[(((size_t)t * Hp + hh) * Wp + ww) * g.cout + co];
                    if (!isfinite(v)) {
                        nonfinite++;
                        continue;
                    }
                    if (hh < 1 || hh > g.H || ww < 1 || ww > g.W) {
                        bad_border += v != 0.0f;
                        continue;
                    }
                    double r = conv_ref(d, t, hh - 1, ww - 1, co);
                    num += (v - r) * (v - r), den += r * r;
                }
    double l2 = sqrt(num / (den > 0 ? den : 1));
    char what[160];
    snprintf(what, sizeof what,
             "conv v%d T%d %dx%d %d->%d k%dx%d a0 %d%s%s (nan %lld, border %lld)", variant, g.T,
             g.H, g.W, g.cin, g.cout, g.kt, g.ks, g.a0, g.bias ? " bias" : "", g.res ? " res" : "",
             (long long)nonfinite, (long long)bad_border);
    report(what, l2, l2 <= TOL && nonfinite == 0 && bad_border == 0);
    conv_free(d);
}

/* ---- part 2: the other ops ---- */
static void check_norm(void) {
    int T = 2, H = 5, W = 7, C = 40;
    int64_t N = (int64_t)T * (H + 2) * (W + 2);
    c3_tensor x = dev(C3_BF16, N * C), y = dev(C3_BF16, N * C), g = dev(C3_BF16, C);
    fill_cl(&x, 11, H, W, C);
    std::vector<float> hg(C);
    for (int c = 0; c < C; c++)
        hg[c] = bf16r(1.0f + 0.5f * hrand(12, c));
    OK(gpu->upload(gpu, &g, hg.data(), C3_F32));
    for (int silu = 0; silu < 2; silu++) {
        poison(&y);
        OK(gpu->vcl_norm(gpu, &y, &x, &g, N, C, silu));
        std::vector<float> hy = down(&y), hx = down(&x);
        double num = 0, den = 0;
        bool fin = true;
        for (int64_t p = 0; p < N; p++) {
            double ss = 0;
            for (int c = 0; c < C; c++)
                ss += (double)hx[p * C + c] * hx[p * C + c];
            double r = sqrt((double)C) / fmax(sqrt(ss), 1e-12);
            for (int c = 0; c < C; c++) {
                double v = hx[p * C + c] * r * hg[c];
                if (silu) v = v / (1 + exp(-v));
                double e = hy[p * C + c] - v;
                fin = fin && isfinite(hy[p * C + c]);
                num += e * e, den += v * v;
            }
        }
        double l2 = sqrt(num / (den > 0 ? den : 1));
        report(silu ? "vcl_norm + silu" : "vcl_norm", l2, fin && l2 <= TOL);
    }
    c3_free(&x), c3_free(&y), c3_free(&g);
}

static void check_upsample(void) {
    int T = 2, H = 4, W = 6, C = 16;
    for (int il = 0; il < 2; il++) {
        int Cx = il ? 2 * C : C, To = il ? 2 * T : T;
        c3_tensor x = dev(C3_BF16, (int64_t)T * (H + 2) * (W + 2) * Cx);
        c3_tensor y = dev(C3_BF16, (int64_t)To * (2 * H + 2) * (2 * W + 2) * C);
        fill_cl(&x, 21 + il, H, W, Cx);
        poison(&y);
        OK(gpu->vcl_upsample(gpu, &y, &x, T, H, W, C, il));
        std::vector<float> hy = down(&y);
        int64_t bad = 0;
        for (int t = 0; t < To; t++)
            for (int hh = 0; hh < 2 * H + 2; hh++)
                for (int ww = 0; ww < 2 * W + 2; ww++)
                    for (int c = 0; c < C; c++) {
                        float want = 0;
                        if (hh >= 1 && hh <= 2 * H && ww >= 1 && ww <= 2 * W)
                            want =
                                bf16r(xval(21 + il, il ? t / 2 : t, (hh - 1) / 2 + 1,
                                           (ww - 1) / 2 + 1, il ? (t % 2) * C + c : c, H, W, Cx));
                        bad +=
                            hy[(((size_t)t * (2 * H + 2) + hh) * (2 * W + 2) + ww) * C + c] != want;
                    }
        report(il ? "vcl_upsample interleave (exact)" : "vcl_upsample (exact)", (double)bad,
               bad == 0);
        c3_free(&x), c3_free(&y);
    }
}

static void check_dupup(void) {
    int H = 3, W = 5, Cin = 32, Cout = 16, fs = 2;
    for (int trim = 0; trim < 2; trim++) {
        int T = trim ? 1 : 2, ft = 2, To = trim ? 1 : T * ft, R = Cout * ft * fs * fs / Cin;
        int Ho = H * fs, Wo = W * fs;
        c3_tensor x = dev(C3_BF16, (int64_t)T * (H + 2) * (W + 2) * Cin);
        c3_tensor y = dev(C3_BF16, (int64_t)To * (Ho + 2) * (Wo + 2) * Cout);
        fill_cl(&x, 31, H, W, Cin);
        fill_cl(&y, 32, Ho, Wo, Cout);
        OK(gpu->vcl_dupup(gpu, &y, &x, T, H, W, Cin, Cout, ft, fs, trim));
        std::vector<float> hy = down(&y);
        double num = 0, den = 0;
        for (int to = 0; to < To; to++)
            for (int ho = 0; ho < Ho + 2; ho++)
                for (int wo = 0; wo < Wo + 2; wo++)
                    for (int o = 0; o < Cout; o++) {
                        double want = bf16r(xval(32, to, ho, wo, o, Ho, Wo, Cout));
                        if (ho >= 1 && ho <= Ho && wo >= 1 && wo <= Wo) {
                            int a = trim ? ft - 1 : to % ft, t = trim ? 0 : to / ft;
                            int h = (ho - 1) / fs, w = (wo - 1) / fs, b = (ho - 1) % fs,
                                dd = (wo - 1) % fs;
                            int ci = (o * ft * fs * fs + a * fs * fs + b * fs + dd) / R;
                            want += bf16r(xval(31, t, h + 1, w + 1, ci, H, W, Cin));
                        }
                        double e =
                            hy[(((size_t)to * (Ho + 2) + ho) * (Wo + 2) + wo) * Cout + o] - want;
                        num += e * e, den += want * want;
                    }
        double l2 = sqrt(num / den);
        report(trim ? "vcl_dupup trimmed first chunk" : "vcl_dupup", l2, l2 <= TOL);
        c3_free(&x), c3_free(&y);
    }
}

static void check_layout(void) {
    int T = 2, H = 3, W = 4, C = 12, p = 2;
    /* channels-last -> [C/p^2, T, H p, W p] unpatchified and clamped to [-0.5, 0.5] */
    c3_tensor x = dev(C3_BF16, (int64_t)T * (H + 2) * (W + 2) * C),
              y = dev(C3_F32, (int64_t)T * H * W * C);
    fill_cl(&x, 41, H, W, C);
    OK(gpu->vcl_layout(gpu, &y, &x, T, H, W, C, p, false, -0.5f, 0.5f));
    std::vector<float> hy = down(&y);
    int64_t bad = 0;
    int Cc = C / (p * p);
    for (int c = 0; c < Cc; c++)
        for (int t = 0; t < T; t++)
            for (int Y = 0; Y < H * p; Y++)
                for (int X = 0; X < W * p; X++) {
                    int ch = c * p * p + (X % p) * p + (Y % p);
                    float want = bf16r(xval(41, t, Y / p + 1, X / p + 1, ch, H, W, C));
                    want = fminf(fmaxf(want, -0.5f), 0.5f);
                    bad += hy[(((size_t)c * T + t) * H * p + Y) * W * p + X] != want;
                }
    report("vcl_layout to [C, T, H, W], unpatchify 2, clamp (exact)", (double)bad, bad == 0);
    /* [C, T, H, W] -> channels-last: round trip of a plain layout */
    c3_tensor z = dev(C3_BF16, (int64_t)T * H * W * C), back = dev(C3_BF16, c3_numel(&x));
    OK(gpu->vcl_layout(gpu, &z, &x, T, H, W, C, 1, false, 0.0f, 0.0f));
    poison(&back);
    OK(gpu->vcl_layout(gpu, &back, &z, T, H, W, C, 1, true, 0.0f, 0.0f));
    std::vector<float> hx = down(&x), hb = down(&back);
    bad = 0;
    for (size_t i = 0; i < hx.size(); i++)
        bad += hx[i] != hb[i];
    report("vcl_layout round trip channels-last (exact, borders zero)", (double)bad, bad == 0);
    c3_free(&x), c3_free(&y), c3_free(&z), c3_free(&back);
}

/* ---- part 3: real shapes ---- */
static float time_ms(int (*fn)(void *), void *arg, int reps) {
    return lab_median_ms(c3_cuda_stream(gpu), 1, reps, [&] { OK(fn(arg)); });
}
static int run_conv(void *p) {
    return conv_run(*(conv_dev *)p);
}

/* sampled check on a real shape: positions spread over frames, edges, borders */
static void conv_check_sampled(conv_dev &d, const char *name) {
    const conv_case &g = d.g;
    poison(&d.y);
    OK(conv_run(d));
    int Hp = g.H + 2, Wp = g.W + 2;
    double num = 0, den = 0;
    int64_t bad = 0;
    const int NS = 24, NC = 8;
    for (int s = 0; s < NS; s++) {
        int t = s % g.T;
        int hh = s % 6 == 0   ? 0
                 : s % 6 == 1 ? 1
                 : s % 6 == 2 ? g.H
                              : (int)((hrand(99, s) + 1) * 0.5f * g.H) + 1;
        int ww = s % 5 == 0   ? Wp - 1
                 : s % 5 == 1 ? 1
                 : s % 5 == 2 ? g.W
                              : (int)((hrand(98, s) + 1) * 0.5f * g.W) + 1;
        hh = std::min(std::max(hh, 0), Hp - 1), ww = std::min(std::max(ww, 0), Wp - 1);
        std::vector<uint16_t> row(g.cout);
        size_t off = (((size_t)t * Hp + hh) * Wp + ww) * g.cout;
        CK(cudaStreamSynchronize(
            c3_cuda_stream(gpu))); /* the backend's stream does not sync with the default one */
        CK(cudaMemcpy(row.data(), (uint16_t *)d.y.data + off, 2 * (size_t)g.cout,
                      cudaMemcpyDeviceToHost));
        for (int k = 0; k < NC; k++) {
            int co = (int)((hrand(97, s * NC + k) + 1) * 0.5f * g.cout) % g.cout;
            uint32_t u = (uint32_t)row[co] << 16;
            float v;
            memcpy(&v, &u, 4);
            if (!isfinite(v)) {
                bad++;
                continue;
            }
            if (hh < 1 || hh > g.H || ww < 1 || ww > g.W) {
                bad += v != 0.0f;
                continue;
            }
            double r = conv_ref(d, t, hh - 1, ww - 1, co);
            num += (v - r) * (v - r), den += r * r;
        }
    }
    double l2 = sqrt(num / (den > 0 ? den : 1));
    char what[160];
    snprintf(what, sizeof what, "%s sampled (%d positions x %d channels, bad %lld)", name, NS, NC,
             (long long)bad);
    report(what, l2, l2 <= TOL && bad == 0);
}

struct shape {
    const char *name;
    conv_case g;
    int per_video; /* calls of this shape in a 720p/189f decode (chunks x layers) */
};

static int old_conv(void *p) {
    c3_tensor *t = (c3_tensor *)p; /* y, x, w, b */
    return gpu->conv3d(gpu, &t[0], &t[1], &t[2], &t[3], 1, 1);
}

int main(int argc, char **argv) {
    bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    all_variants = argc > 1 && !strcmp(argv[1], "--all");
    only_wgmma = argc > 1 && !strcmp(argv[1], "--wgmma");
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "vae_lab: no CUDA device (skip)\n");
        return 77;
    }
    OK(c3_backend_cuda(0, &gpu));
    if (!gpu->vcl_conv) DIE("the CUDA backend has no vcl_conv");
    {
        cudaDeviceProp p;
        CK(cudaGetDeviceProperties(&p, 0));
        have_wgmma = p.major == 9;
        printf("device %s (sm_%d%d): wgmma variants %s\n", p.name, p.major, p.minor,
               have_wgmma ? "checked" : "skipped");
    }

    printf("1. vcl_conv against a double CPU loop (every element)\n");
    const conv_case small[] = {
        {2, 9, 13, 32, 64, 3, 3, 0, true, false},   {1, 7, 5, 48, 12, 3, 3, 2, true, false},
        {3, 12, 12, 64, 256, 1, 3, 0, true, false}, {2, 10, 12, 128, 256, 3, 1, 0, false, false},
        {1, 12, 11, 40, 130, 1, 1, 0, true, true},  {4, 8, 8, 16, 16, 3, 3, 0, true, true},
        {1, 17, 70, 32, 384, 3, 3, 2, true, true},  {2, 9, 21, 128, 256, 3, 3, 0, true, true},
        {1, 5, 150, 64, 512, 3, 3, 2, true, true},  {3, 6, 7, 256, 256, 3, 3, 0, false, true},
    };
    uint64_t seed = 1;
    for (const conv_case &g : small)
        for (int v = 1; v <= VARIANTS; v++)
            if (variant_takes(v, g) && !(only_wgmma && (v < 4 || v == 5)))
                conv_check_full(g, v, seed++);
    c3_cuda_vcl_variant(0);

    printf("2. the other channels-last ops\n");
    check_norm();
    check_upsample();
    check_dupup();
    check_layout();

    if (!quick) {
        printf("3. Wan2.2 720p/189f layer shapes (one chunk: 4 frames at the last two levels)\n");
        /* per_video: chunks (47 later ones) x convs of the shape */
        const shape shapes[] = {
            {"up3 res 256->256 3x3x3 T4 360x640",
             {4, 360, 640, 256, 256, 3, 3, 0, true, true},
             47 * 5},
            {"up2 res 512->512 3x3x3 T4 180x320",
             {4, 180, 320, 512, 512, 3, 3, 0, true, true},
             47 * 5},
            {"up2 res0 1024->512 3x3x3 T4 180x320",
             {4, 180, 320, 1024, 512, 3, 3, 0, true, false},
             47},
            {"up1 res 1024 3x3x3 T2 90x160", {2, 90, 160, 1024, 1024, 3, 3, 0, true, true}, 47 * 6},
            {"up0/mid res 1024 3x3x3 T1 45x80",
             {1, 45, 80, 1024, 1024, 3, 3, 0, true, true},
             47 * 10},
            {"up2 resample 512 3x3 T4 360x640", {4, 360, 640, 512, 512, 1, 3, 0, true, false}, 47},
            {"up1 resample 1024 3x3 T4 180x320",
             {4, 180, 320, 1024, 1024, 1, 3, 0, true, false},
             47},
            {"up1 time_conv 1024->2048 3x1x1 T2 90x160",
             {2, 90, 160, 1024, 2048, 3, 1, 0, true, false},
             47},
            {"conv_out 256->12 3x3x3 T4 360x640", {4, 360, 640, 256, 12, 3, 3, 0, true, false}, 47},
        };
        double video_ms = 0, video_tf = 0, vms[VARIANTS + 1] = {0};
        bool timed[VARIANTS + 1] = {false};
        for (const shape &s : shapes) {
            conv_dev d;
            conv_make(d, s.g, seed++);
            conv_check_sampled(d, s.name);
            double fl = 2.0 * s.g.T * s.g.H * s.g.W * (double)s.g.cout * s.g.cin *
                        (s.g.kt - s.g.a0) * s.g.ks * s.g.ks;
            float best = 1e30f, vt[VARIANTS + 1] = {0};
            /* the mma.sync tiles were timed in device call 1 (bench/NOTES.md); --all
             * times them again; the old default (1) and the wgmma ones every time */
            for (int v = 1; v <= VARIANTS; v++) {
                if ((v == 2 || v == 3) && !all_variants) continue;
                if (only_wgmma && (v < 4 || v == 5)) continue;
                if (v == 3 && s.g.cout > 128) continue;
                if (!variant_takes(v, s.g) || (v >= 4 && s.g.cout <= 64) || v == 7) continue;
                c3_cuda_vcl_variant(v);
                if (v >= 4) {
                    char nm[160];
                    snprintf(nm, sizeof nm, "v%d %s", v, s.name);
                    conv_check_sampled(d, nm);
                }
                float ms = time_ms(run_conv, &d, REPS);
                printf("    v%d %-48s %8.3f ms  %6.1f TFLOP/s\n", v, s.name, ms, fl / ms * 1e-9);
                best = std::min(best, ms);
                vt[v] = ms;
                timed[v] = true;
            }
            c3_cuda_vcl_variant(0);
            float ms = time_ms(run_conv, &d, REPS);
            printf("    auto %-46s %8.3f ms  %6.1f TFLOP/s (best %.3f)\n", s.name, ms,
                   fl / ms * 1e-9, best);
            video_ms += ms * s.per_video;
            video_tf += fl * s.per_video;
            for (int v = 1; v <= VARIANTS; v++) /* where v does not apply: the automatic choice */
                vms[v] += (vt[v] > 0 ? vt[v] : ms) * s.per_video;
            conv_free(d);
        }
        printf(
            "  convs of a 720p/189f decode at these rates: %.2f s for %.0f TFLOP (%.1f TFLOP/s)\n",
            video_ms / 1e3, video_tf / 1e12, video_tf / video_ms * 1e-9);
        for (int v = 1; v <= VARIANTS; v++)
            if (timed[v])
                printf("  convs of a 720p/189f decode with v%d where it applies: %.2f s\n", v,
                       vms[v] / 1e3);

        /* ceiling: plain bf16 GEMM through cuBLASLt */
        {
            int64_t M = 8192;
            c3_tensor A = dev(C3_BF16, M * M), B = dev(C3_BF16, M * M), Cm = dev(C3_BF16, M * M);
            fill_flat(&A, 51);
            fill_flat(&B, 52);
            struct g_arg {
                c3_tensor *a, *b, *c;
                int64_t M;
            } ga = {&A, &B, &Cm, M};
            auto fn = [](void *p) -> int {
                g_arg *g = (g_arg *)p;
                return cu_gemm_nn(gpu, g->M, g->M, g->M, g->a->data, g->M, g->b->data, g->M,
                                  g->c->data, C3_BF16, g->M, 0.0f);
            };
            float ms = time_ms(fn, &ga, REPS);
            printf("  cuBLASLt bf16 GEMM 8192^3: %.3f ms, %.1f TFLOP/s (the tensor-core ceiling "
                   "here)\n",
                   ms, 2.0 * M * M * M / ms * 1e-9);
            c3_free(&A), c3_free(&B), c3_free(&Cm);
        }
        /* the old path: im2col + cuBLAS on [C, T, H, W] (one 180x320 512-channel shape) */
        {
            int C = 512, T = 4, H = 180, W = 320;
            c3_tensor t[4];
            OK(c3_alloc(gpu, &t[0], C3_BF16, C3_MEM_ACT, 4, (int64_t)C, (int64_t)T, (int64_t)H,
                        (int64_t)W));
            OK(c3_alloc(gpu, &t[1], C3_BF16, C3_MEM_ACT, 4, (int64_t)C, (int64_t)T + 2, (int64_t)H,
                        (int64_t)W));
            OK(c3_alloc(gpu, &t[2], C3_BF16, C3_MEM_ACT, 5, (int64_t)C, (int64_t)C, (int64_t)3,
                        (int64_t)3, (int64_t)3));
            OK(c3_alloc(gpu, &t[3], C3_BF16, C3_MEM_ACT, 1, (int64_t)C));
            for (int i = 1; i < 4; i++)
                fill_flat(&t[i], 60 + i);
            float ms = time_ms(old_conv, t, 3);
            double fl = 2.0 * T * H * W * (double)C * C * 27;
            printf(
                "  old conv3d (im2col + cuBLAS) 512->512 3x3x3 T4 180x320: %.3f ms, %.1f TFLOP/s\n",
                ms, fl / ms * 1e-9);
            for (int i = 0; i < 4; i++)
                c3_free(&t[i]);
        }
    }
    printf("vae_lab: %d checks, %d failed\n", checks, failures);
    c3_backend_destroy(gpu);
    return failures ? 1 : 0;
}
