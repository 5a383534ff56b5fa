/* test_vae.c - the CPU VAE ops against naive loops, and the Wan2.2 decoder
 * against the diffusers goldens (vae_decode.safetensors: decoded video,
 * uint8 frames and per-chunk traces). */
#include <time.h>

#include "backend_cpu.h"
#include "checkpoint.h"
#include "env.h"
#include "mkmodel.h"
#include "test_util.h"
#include "wan_vae.h"

/* Tolerances. Ops: fp32 GEMM vs a double loop. Goldens: fixtures README. */
#define OP_TOL 2e-6
#define DEC_REL_L2 tol_dec
#define TRACE_REL_L2 tol_trace
#define TRACE_MAX_REL tol_trace_max
#define U8_MIN_EQUAL tol_u8_equal
static double tol_dec = 1e-5, tol_trace = 1e-5, tol_trace_max = 1e-4, tol_u8_equal = 0.999;
static bool u8_exact = true; /* no uint8 value off by more than 1 */
/* COSMOS3_TEST_DEVICE=cuda: the decoder on the CUDA backend (bf16), held loosely
 * (fixtures README: bf16 decoded video ~4 % rel L2, 50-77 % of uint8 values differ). */
#define BF16_DEC_REL_L2 6e-2
#define BF16_TRACE_MAX_REL 2e-1
#define BF16_U8_MIN_EQUAL 0.2

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
/* ------------------------------------------------------------ op tests */

static void test_conv(c3_backend *be, int Cin, int T, int H, int W, int Cout, int kt, int kh,
                      int kw, int ph, int pw, bool with_bias) {
    int64_t xn[4] = {Cin, T, H, W}, wn[5] = {Cout, Cin, kt, kh, kw}, bn[1] = {Cout};
    int To = T - kt + 1, Ho = H + 2 * ph - kh + 1, Wo = W + 2 * pw - kw + 1;
    int64_t yn[4] = {Cout, To, Ho, Wo};
    c3_tensor x = t_new_tensor(be, 4, xn, &rng_state), w = t_new_tensor(be, 5, wn, &rng_state),
              b = t_new_tensor(be, 1, bn, &rng_state), y = t_new_tensor(be, 4, yn, NULL);
    int rc = be->conv3d(be, &y, &x, &w, with_bias ? &b : NULL, ph, pw);
    T_CHECK(rc == C3_OK, "conv3d: %s", c3_errmsg());
    const float *xd = x.data, *wd = w.data, *bd = b.data, *yd = y.data;
    float *ref = xmalloc(sizeof(float) * (size_t)c3_numel(&y));
    for (int co = 0; co < Cout; co++)
        for (int t = 0; t < To; t++)
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++) {
                    double s = with_bias ? bd[co] : 0;
                    for (int ci = 0; ci < Cin; ci++)
                        for (int dt = 0; dt < kt; dt++)
                            for (int dy = 0; dy < kh; dy++)
                                for (int dx = 0; dx < kw; dx++) {
                                    int iy = oy + dy - ph, ix = ox + dx - pw;
                                    if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                    s += (double)
                                             wd[(((co * Cin + ci) * kt + dt) * kh + dy) * kw + dx] *
                                         xd[((ci * T + t + dt) * H + iy) * W + ix];
                                }
                    ref[((co * To + t) * Ho + oy) * Wo + ox] = (float)s;
                }
    double e = t_max_rel(yd, ref, c3_numel(&y));
    T_CHECK(e <= OP_TOL, "conv3d Cin %d T %d %dx%d Cout %d k %dx%dx%d pad %d,%d: max rel %.3g", Cin,
            T, H, W, Cout, kt, kh, kw, ph, pw, e);
    fprintf(
        stderr,
        "conv3d Cin %2d T %d %3dx%-3d Cout %2d k %dx%dx%d pad %d,%d bias %d: max rel err %.2e\n",
        Cin, T, H, W, Cout, kt, kh, kw, ph, pw, with_bias, e);
    free(ref);
    c3_free(&x);
    c3_free(&w);
    c3_free(&b);
    c3_free(&y);
}

static void test_chan_rmsnorm(c3_backend *be, int C, int N, bool with_bias, bool in_place) {
    int64_t xn[2] = {C, N}, gn[1] = {C};
    c3_tensor x = t_new_tensor(be, 2, xn, &rng_state), g = t_new_tensor(be, 1, gn, &rng_state),
              b = t_new_tensor(be, 1, gn, &rng_state), y = t_new_tensor(be, 2, xn, NULL);
    float *x0 = xmalloc(sizeof(float) * (size_t)(C * N));
    memcpy(x0, x.data, sizeof(float) * (size_t)(C * N));
    if (N > 1) /* one all-zero column: the 1e-12 norm floor gives zeros (+ bias) */
        for (int c = 0; c < C; c++)
            ((float *)x.data)[c * N + 1] = x0[c * N + 1] = 0;
    c3_tensor *out = in_place ? &x : &y;
    int rc = be->chan_rmsnorm(be, out, &x, &g, with_bias ? &b : NULL);
    T_CHECK(rc == C3_OK, "chan_rmsnorm: %s", c3_errmsg());
    float *ref = xmalloc(sizeof(float) * (size_t)(C * N));
    const float *gd = g.data, *bd = b.data;
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int c = 0; c < C; c++)
            ss += (double)x0[c * N + n] * x0[c * N + n];
        double nrm = fmax(sqrt(ss), 1e-12);
        for (int c = 0; c < C; c++)
            ref[c * N + n] =
                (float)(x0[c * N + n] / nrm * sqrt((double)C) * gd[c] + (with_bias ? bd[c] : 0));
    }
    double e = t_max_rel(out->data, ref, C * N);
    T_CHECK(e <= OP_TOL, "chan_rmsnorm C %d N %d: max rel %.3g", C, N, e);
    free(ref);
    free(x0);
    c3_free(&x);
    c3_free(&g);
    c3_free(&b);
    c3_free(&y);
}

static void test_permute(c3_backend *be, int nd, const int64_t *ne, const int *perm) {
    int64_t yn[C3_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        yn[i] = ne[perm[i]];
    c3_tensor x = t_new_tensor(be, nd, ne, &rng_state), y = t_new_tensor(be, nd, yn, NULL);
    int rc = be->permute(be, &y, &x, perm);
    T_CHECK(rc == C3_OK, "permute: %s", c3_errmsg());
    int64_t xs[C3_MAX_DIMS], s = 1, n = c3_numel(&x), bad = 0;
    for (int i = nd - 1; i >= 0; i--) {
        xs[i] = s;
        s *= ne[i];
    }
    for (int64_t o = 0; o < n; o++) { /* y index o -> coordinates -> x offset */
        int64_t rem = o, off = 0;
        for (int d = nd - 1; d >= 0; d--) {
            off += (rem % yn[d]) * xs[perm[d]];
            rem /= yn[d];
        }
        bad += ((float *)y.data)[o] != ((float *)x.data)[off];
    }
    T_CHECK(bad == 0, "permute of %d dims: %lld elements wrong", nd, (long long)bad);
    c3_free(&x);
    c3_free(&y);
}

static void test_upsample(c3_backend *be, int C, int T, int H, int W) {
    int64_t xn[4] = {C, T, H, W}, yn[4] = {C, T, 2 * H, 2 * W};
    c3_tensor x = t_new_tensor(be, 4, xn, &rng_state), y = t_new_tensor(be, 4, yn, NULL);
    T_CHECK(be->upsample2x(be, &y, &x) == C3_OK, "upsample2x: %s", c3_errmsg());
    int64_t bad = 0;
    const float *xd = x.data, *yd = y.data;
    for (int c = 0; c < C * T; c++)
        for (int i = 0; i < 2 * H; i++)
            for (int j = 0; j < 2 * W; j++)
                bad += yd[((int64_t)c * 2 * H + i) * 2 * W + j] !=
                       xd[((int64_t)c * H + i / 2) * W + j / 2];
    T_CHECK(bad == 0, "upsample2x %dx%d: %lld elements wrong", H, W, (long long)bad);
    c3_free(&x);
    c3_free(&y);
}

static void test_ops(c3_backend *be) {
    /* conv3d: kernel 1 and 3, kt 1 and 3, padding 0/1 and mixed */
    test_conv(be, 5, 1, 7, 9, 6, 1, 1, 1, 0, 0, true);
    test_conv(be, 4, 3, 6, 5, 3, 1, 1, 1, 0, 0, false);
    test_conv(be, 3, 1, 8, 7, 5, 1, 3, 3, 1, 1, true);
    test_conv(be, 6, 3, 5, 6, 4, 3, 3, 3, 1, 1, true);
    test_conv(be, 5, 4, 6, 7, 7, 3, 3, 3, 0, 0, false);
    test_conv(be, 4, 5, 4, 3, 8, 3, 1, 1, 0, 0, true);
    test_conv(be, 3, 3, 5, 8, 2, 1, 3, 3, 1, 0, true);
    test_conv(be, 2, 2, 1, 1, 3, 1, 3, 3, 1, 1, true);     /* 1x1 image: only centre taps */
    test_conv(be, 16, 4, 33, 35, 24, 3, 3, 3, 1, 1, true); /* threaded column split */
    test_conv(be, 64, 3, 72, 72, 4, 3, 3, 3, 1, 1, true);  /* several im2col tiles */
    /* channel RMS norm */
    test_chan_rmsnorm(be, 7, 33, false, false);
    test_chan_rmsnorm(be, 16, 700, true, false);
    test_chan_rmsnorm(be, 5, 300, false, true);
    /* permute: the layouts the VAE uses, plus odd ones */
    {
        int64_t a[2] = {7, 13};
        int p[2] = {1, 0};
        test_permute(be, 2, a, p);
        int64_t b[3] = {3, 5, 11};
        int q[3] = {1, 0, 2}, q2[3] = {2, 0, 1};
        test_permute(be, 3, b, q);
        test_permute(be, 3, b, q2);
        int64_t c[4] = {2, 6, 3, 10};
        int r[4] = {1, 2, 0, 3}, r2[4] = {2, 0, 1, 3}, r3[4] = {3, 2, 1, 0};
        test_permute(be, 4, c, r);
        test_permute(be, 4, c, r2);
        test_permute(be, 4, c, r3);
        int64_t d[5] = {12, 2, 2, 5, 3};
        int s5[5] = {0, 3, 1, 4, 2};
        test_permute(be, 5, d, s5);
        int64_t e[6] = {4, 2, 4, 1, 3, 5};
        int s6[6] = {0, 3, 1, 2, 4, 5}, s6b[6] = {1, 0, 3, 2, 4, 5}, s6c[6] = {0, 3, 4, 2, 5, 1};
        test_permute(be, 6, e, s6);
        test_permute(be, 6, e, s6b);
        test_permute(be, 6, e, s6c);
    }
    test_upsample(be, 3, 2, 5, 7);
    test_upsample(be, 1, 1, 1, 1);
}

/* ------------------------------------------------------------ golden tests */

static st_file golden;
static const char *cur_case;
static int trace_count, trace_missing;
static char first_bad[256];

static void trace_cb(const char *name, int chunk, const c3_tensor *t) {
    char key[256];
    if (strcmp(name, "post_quant_conv") == 0)
        snprintf(key, sizeof key, "%s.trace.%s", cur_case, name);
    else
        snprintf(key, sizeof key, "%s.trace.%s.chunk%d", cur_case, name, chunk);
    const st_tensor *g = st_find(&golden, key);
    if (!g) {
        trace_missing++;
        fprintf(stderr, "  trace %s: no golden\n", key);
        return;
    }
    int64_t n = c3_numel(t);
    T_CHECK(n == st_numel(g), "trace %s: %lld elements, golden %lld", key, (long long)n,
            (long long)st_numel(g));
    if (n != st_numel(g)) return;
    float *a = xmalloc(sizeof(float) * (size_t)n), *ref = st_to_f32(g);
    t->be->download(t->be, a, t);
    double l2 = t_rel_l2(a, ref, n), mr = t_max_rel(a, ref, n);
    bool ok = l2 <= TRACE_REL_L2 && mr <= TRACE_MAX_REL;
    fprintf(stderr, "  trace %-40s rel L2 %.2e  max rel %.2e%s\n", key, l2, mr,
            ok ? "" : "  <-- MISMATCH");
    if (!ok && !first_bad[0]) snprintf(first_bad, sizeof first_bad, "%s", key);
    T_CHECK(ok, "trace %s: rel L2 %.3g, max rel %.3g", key, l2, mr);
    trace_count++;
    free(a);
    free(ref);
}

static void test_case(c3_vae *v, const c3_vconfig *cf, const char *name, bool traced) {
    char key[256];
    cur_case = name;
    trace_count = trace_missing = 0;
    first_bad[0] = 0;
    snprintf(key, sizeof key, "%s.z_norm", name);
    const st_tensor *zt = st_find(&golden, key);
    if (!zt || zt->ndim != 5) {
        T_CHECK(0, "golden %s missing or not 5-D", key);
        return;
    }
    int C = (int)zt->shape[1], T = (int)zt->shape[2], h = (int)zt->shape[3], w = (int)zt->shape[4];
    float *z = st_to_f32(zt);
    /* the de-normalisation the decoder applies, against the golden z_raw */
    {
        int64_t n;
        snprintf(key, sizeof key, "%s.z_raw", name);
        float *zr = t_golden_f32(&golden, key, &n), *mine = xmalloc(sizeof(float) * (size_t)n);
        int64_t per = n / C;
        for (int c = 0; c < C; c++) {
            float inv = 1.0f / cf->latents_std[c];
            for (int64_t i = 0; i < per; i++)
                mine[c * per + i] = z[c * per + i] / inv + cf->latents_mean[c];
        }
        double e = t_max_rel(mine, zr, n);
        T_CHECK(e <= 1e-7, "%s z_raw: max rel %.3g", name, e);
        free(zr);
        free(mine);
    }
    vae_trace_hook = traced ? trace_cb : NULL;
    float *out = NULL;
    int F = 0, H = 0, W = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = vae_decode(v, z, T, h, w, &out, &F, &H, &W, NULL, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    vae_trace_hook = NULL;
    T_CHECK(rc == C3_OK, "%s decode: %s", name, c3_errmsg());
    if (rc != C3_OK) {
        free(z);
        return;
    }
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    int64_t n;
    snprintf(key, sizeof key, "%s.decoded", name);
    float *ref = t_golden_f32(&golden, key, &n);
    const st_tensor *dt = st_find(&golden, key);
    T_CHECK(F == dt->shape[2] && H == dt->shape[3] && W == dt->shape[4],
            "%s: decoded %dx%dx%d, golden %lldx%lldx%lld", name, F, H, W, (long long)dt->shape[2],
            (long long)dt->shape[3], (long long)dt->shape[4]);
    if ((int64_t)3 * F * H * W == n) {
        double l2 = t_rel_l2(out, ref, n), mr = t_max_rel(out, ref, n);
        fprintf(stderr, "%s: [3, %d, %d, %d] in %.3f s: decoded rel L2 %.3e, max rel %.3e\n", name,
                F, H, W, secs, l2, mr);
        T_CHECK(l2 <= DEC_REL_L2, "%s decoded rel L2 %.3g > %.1g", name, l2, DEC_REL_L2);
        /* uint8 frames [F, H, W, 3] */
        snprintf(key, sizeof key, "%s.frames_uint8", name);
        const st_tensor *ut = st_find(&golden, key);
        T_CHECK(ut && st_numel(ut) == n && ut->dtype == C3_U8, "%s: frames_uint8 golden missing",
                name);
        if (ut && st_numel(ut) == n && ut->dtype == C3_U8) {
            const uint8_t *u = ut->data;
            int64_t eq = 0, far = 0, fs = (int64_t)H * W;
            for (int64_t f = 0; f < F; f++)
                for (int64_t p = 0; p < fs; p++)
                    for (int c = 0; c < 3; c++) {
                        float d = out[((int64_t)c * F + f) * fs + p] / 2.0f + 0.5f;
                        d = d < 0 ? 0 : d > 1 ? 1 : d;
                        int mine = (int)nearbyintf(d * 255.0f);
                        int gold = u[(f * fs + p) * 3 + c];
                        eq += mine == gold;
                        far += abs(mine - gold) > 1;
                    }
            fprintf(stderr, "%s: uint8 frames equal %.4f%%, off by more than 1: %lld\n", name,
                    100.0 * eq / n, (long long)far);
            T_CHECK((double)eq / n >= U8_MIN_EQUAL, "%s uint8 equal on %.4f%% only", name,
                    100.0 * eq / n);
            T_CHECK(!u8_exact || far == 0, "%s: %lld uint8 values differ by more than 1", name,
                    (long long)far);
        }
    }
    if (traced) {
        /* post_quant_conv + per chunk: conv_in, mid, up blocks, conv_out */
        /* every golden trace of the case was produced and compared */
        char pre[128];
        int want = 0;
        snprintf(pre, sizeof pre, "%s.trace.", name);
        for (int i = 0; i < golden.n; i++)
            want += strncmp(golden.t[i].name, pre, strlen(pre)) == 0;
        T_CHECK(trace_count == want && trace_missing == 0,
                "%s: %d traces compared of %d golden, %d without golden", name, trace_count, want,
                trace_missing);
        if (first_bad[0]) fprintf(stderr, "%s: first trace mismatch at %s\n", name, first_bad);
    }
    free(ref);
    free(out);
    free(z);
}

/* on_frame: counts calls, returns `stop_at`'s status at that frame */
typedef struct {
    int calls, last_t, last_T, stop_at;
} frame_log;
static int on_frame(void *ud, int t, int T) {
    frame_log *f = ud;
    f->calls++;
    f->last_t = t;
    f->last_T = T;
    return t == f->stop_at ? C3_ECANCEL : C3_OK;
}

static void test_callback(c3_vae *v) {
    const st_tensor *zt = st_find(&golden, "vae_3f_64.z_norm");
    if (!zt) return;
    int T = (int)zt->shape[2], h = (int)zt->shape[3], w = (int)zt->shape[4];
    float *z = st_to_f32(zt), *out = NULL;
    int F, H, W;
    frame_log f = {0, -1, -1, -1};
    int rc = vae_decode(v, z, T, h, w, &out, &F, &H, &W, on_frame, &f);
    T_CHECK(rc == C3_OK && f.calls == T && f.last_t == T - 1 && f.last_T == T,
            "on_frame: rc %d, %d calls, last %d/%d", rc, f.calls, f.last_t, f.last_T);
    free(out);
    out = NULL;
    frame_log g = {0, -1, -1, 1};
    rc = vae_decode(v, z, T, h, w, &out, &F, &H, &W, on_frame, &g);
    T_CHECK(rc == C3_ECANCEL && out == NULL && g.calls == 2,
            "cancel at frame 1: rc %d, %d calls, out %p", rc, g.calls, (void *)out);
    free(out);
    free(z);
}

/* COSMOS3_TEST_DEVICE=cuda and COSMOS3_TEST_VAE_FULL=DIR: the full Wan2.2 VAE
 * (Nano's, random weights; written to DIR by mkmodel when DIR has none) on
 * the CUDA bf16 path (channels-last tensor-core decode) against the CUDA
 * fp32 check path (COSMOS3_CUDA_FP32=1: fp32 everywhere, no TF32) on the
 * same latents, 3 latent frames of 16x24 (9 frames of 256x384). Bounds: rel
 * L2 of the decoded video <= FULL_REL_L2, and of the uint8 frames at most
 * FULL_U8_FAR_FRAC moved by more than FULL_U8_FAR levels. */
/* The staged frame download (backends with pinned host memory: two staging
 * buffers, the host copy on a thread) gives the same video as straight
 * downloads: the CPU backend's table with host_alloc / host_free (malloc). */
static int heap_alloc(c3_backend *be, void **p, size_t bytes) {
    (void)be;
    *p = malloc(bytes ? bytes : 1);
    return *p ? C3_OK : c3_fail(C3_ERESOURCE, "malloc %zu", bytes);
}
static void heap_free(c3_backend *be, void *p) {
    (void)be;
    free(p);
}
static void test_staged(c3_backend *cpu, const c3_ckpt *ck) {
    const st_tensor *zt = st_find(&golden, "vae_3f_64.z_norm");
    if (!zt) return;
    c3_backend st = *cpu; /* shares the CPU backend's state; never destroyed */
    st.host_alloc = heap_alloc, st.host_free = heap_free;
    st.caps |= C3_CAP_PINNED;
    int T = (int)zt->shape[2], h = (int)zt->shape[3], w = (int)zt->shape[4];
    float *z = st_to_f32(zt), *a = NULL, *b = NULL;
    c3_vae *va = NULL, *vb = NULL;
    int F = 0, H = 0, W = 0, F2 = 0, H2 = 0, W2 = 0;
    int rc = vae_load(&va, ck, cpu);
    if (rc == C3_OK) rc = vae_load(&vb, ck, &st);
    if (rc == C3_OK) rc = vae_decode(va, z, T, h, w, &a, &F, &H, &W, NULL, NULL);
    if (rc == C3_OK) rc = vae_decode(vb, z, T, h, w, &b, &F2, &H2, &W2, NULL, NULL);
    T_CHECK(rc == C3_OK, "staged decode: %s", c3_errmsg());
    if (rc == C3_OK) {
        int64_t n = (int64_t)3 * F * H * W, diff = 0;
        for (int64_t i = 0; i < n && F == F2 && H == H2 && W == W2; i++)
            diff += a[i] != b[i];
        T_CHECK(F == F2 && H == H2 && W == W2 && diff == 0,
                "staged download: %dx%dx%d vs %dx%dx%d, %lld values differ", F, H, W, F2, H2, W2,
                (long long)diff);
        fprintf(stderr, "staged download (%d chunks): same %d frames as straight downloads\n", T,
                F);
    }
    free(a);
    free(b);
    free(z);
    vae_free(va);
    vae_free(vb);
}

/* COSMOS3_TEST_VAE_PROFILE="T,h,w;T,h,w...": decode random latents of each
 * size on the bf16 path three times: cold, warm (must equal the cold one
 * exactly: the histories are reset between decodes), and under vae_prof,
 * whose breakdown is printed. */
static void profile_sizes(c3_vae *v, int Cz) {
    const char *e = getenv("COSMOS3_TEST_VAE_PROFILE");
    for (const char *p = e; p && *p;) {
        int T = 0, h = 0, w = 0, used = 0;
        if (sscanf(p, "%d,%d,%d%n", &T, &h, &w, &used) != 3 || T < 1 || h < 1 || w < 1) {
            T_CHECK(false, "COSMOS3_TEST_VAE_PROFILE: cannot read '%s'", p);
            return;
        }
        p += used + (p[used] == ';');
        int64_t nz = (int64_t)Cz * T * h * w;
        float *z = xmalloc(sizeof(float) * (size_t)nz), *o[2] = {NULL, NULL}, *op = NULL;
        for (int64_t i = 0; i < nz; i++)
            z[i] = t_frand(&rng_state) * 1.7f;
        int F = 0, H = 0, W = 0, rc = C3_OK;
        double ts[3];
        vae_profile prof;
        memset(&prof, 0, sizeof prof);
        for (int k = 0; k < 3 && rc == C3_OK; k++) {
            if (k == 2) vae_prof = &prof;
            double t0 = c3_now();
            rc = vae_decode(v, z, T, h, w, k < 2 ? &o[k] : &op, &F, &H, &W, NULL, NULL);
            ts[k] = c3_now() - t0;
            vae_prof = NULL;
        }
        T_CHECK(rc == C3_OK, "VAE decode [%d, %d, %d]: %s", T, h, w, c3_errmsg());
        if (rc == C3_OK) {
            int64_t n = (int64_t)3 * F * H * W, diff = 0, bad = 0;
            for (int64_t i = 0; i < n; i++) {
                diff += o[0][i] != o[1][i];
                bad += !(o[0][i] >= -1.0f && o[0][i] <= 1.0f);
            }
            fprintf(stderr,
                    "VAE decode %dx%d, %d frames (latents [%d, %d, %d]): cold %.1f ms, warm %.1f "
                    "ms, profiled %.1f ms\n",
                    W, H, F, T, h, w, ts[0] * 1e3, ts[1] * 1e3, ts[2] * 1e3);
            for (int k = 0; k < VAE_PROF_N; k++)
                if (prof.n[k])
                    fprintf(stderr, "  %-16s %9.1f ms in %6lld calls\n", vae_prof_names[k],
                            prof.s[k] * 1e3, (long long)prof.n[k]);
            T_CHECK(diff == 0, "VAE decode [%d, %d, %d]: warm differs from cold in %lld values", T,
                    h, w, (long long)diff);
            T_CHECK(bad == 0, "VAE decode [%d, %d, %d]: %lld values outside [-1, 1]", T, h, w,
                    (long long)bad);
        }
        free(z);
        free(o[0]);
        free(o[1]);
        free(op);
    }
}

#define FULL_REL_L2 3e-2
#define FULL_U8_FAR 8
#define FULL_U8_FAR_FRAC 1e-3
static void test_full_vae(c3_backend *gbe, const char *tokdir) {
    const char *dir = getenv("COSMOS3_TEST_VAE_FULL");
    if (!dir || !*dir) return;
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/vae/config.json", dir);
    if (access(probe, R_OK) != 0) {
        c3_mkmodel_opts o = {.preset = "tiny",
                             .layers = 1,
                             .vocab = 64,
                             .vae = MKMODEL_VAE_FULL,
                             .seed = 7,
                             .out_dir = dir,
                             .tokenizer_dir = tokdir,
                             .overwrite = true};
        int rc = mkmodel_write(&o);
        T_CHECK(rc == C3_OK, "mkmodel (full VAE) into %s: %s", dir, c3_errmsg());
        if (rc) return;
    }
    c3_ckpt ck;
    if (ckpt_open(&ck, dir, true) != C3_OK) {
        T_CHECK(false, "open %s: %s", dir, c3_errmsg());
        return;
    }
    setenv("COSMOS3_CUDA_FP32", "1", 1);
    c3_env_reload(); /* the settings are read once (src/env.c) */
    c3_backend *fbe = NULL;
    int rc = c3_backend_cuda(0, &fbe);
    unsetenv("COSMOS3_CUDA_FP32");
    c3_env_reload();
    T_CHECK(rc == C3_OK && fbe->act_dtype == C3_F32, "fp32 CUDA backend: %s", c3_errmsg());
    c3_vae *vb = NULL, *vf = NULL;
    if (rc == C3_OK) rc = vae_load(&vb, &ck, gbe);
    if (rc == C3_OK) rc = vae_load(&vf, &ck, fbe);
    T_CHECK(rc == C3_OK, "vae_load (full): %s", c3_errmsg());
    int T = 3, h = 16, w = 24, Cz = ck.v.z_dim;
    int64_t nz = (int64_t)Cz * T * h * w;
    float *z = xmalloc(sizeof(float) * (size_t)nz), *ob = NULL, *of = NULL;
    for (int64_t i = 0; i < nz; i++)
        z[i] = t_frand(&rng_state) * 1.7f; /* roughly unit variance */
    int F1 = 0, H1 = 0, W1 = 0, F2 = 0, H2 = 0, W2 = 0;
    if (rc == C3_OK) {
        double t0 = c3_now();
        rc = vae_decode(vb, z, T, h, w, &ob, &F1, &H1, &W1, NULL, NULL);
        double t1 = c3_now();
        if (rc == C3_OK) rc = vae_decode(vf, z, T, h, w, &of, &F2, &H2, &W2, NULL, NULL);
        T_CHECK(rc == C3_OK, "full VAE decode: %s", c3_errmsg());
        fprintf(stderr,
                "full VAE [%d, %d, %d] -> %d frames of %dx%d: bf16 path %.3f s, fp32 path %.3f s\n",
                T, h, w, F1, W1, H1, t1 - t0, c3_now() - t1);
    }
    bool same = F1 == F2 && H1 == H2 && W1 == W2 && F1 == 1 + 4 * (T - 1);
    if (rc == C3_OK) T_CHECK(same, "shapes differ: %dx%dx%d vs %dx%dx%d", F1, H1, W1, F2, H2, W2);
    if (rc == C3_OK && same) {
        int64_t n = (int64_t)3 * F1 * H1 * W1, eq = 0, far = 0, maxd = 0;
        double l2 = t_rel_l2(ob, of, n), sum_d = 0;
        for (int64_t i = 0; i < n; i++) {
            long a = lrintf(fminf(fmaxf(ob[i] * 0.5f + 0.5f, 0.0f), 1.0f) * 255.0f);
            long b = lrintf(fminf(fmaxf(of[i] * 0.5f + 0.5f, 0.0f), 1.0f) * 255.0f);
            long d = labs(a - b);
            eq += d == 0;
            far += d > FULL_U8_FAR;
            sum_d += (double)d;
            if (d > maxd) maxd = d;
        }
        fprintf(stderr,
                "full VAE bf16 vs fp32: decoded rel L2 %.3e; uint8 equal %.2f %%, mean |diff| %.3f "
                "levels, max %lld, "
                "more than %d levels on %.4f %%\n",
                l2, 100.0 * eq / n, sum_d / n, (long long)maxd, FULL_U8_FAR, 100.0 * far / n);
        T_CHECK(l2 <= FULL_REL_L2, "full VAE bf16 vs fp32: rel L2 %.3e > %.0e", l2, FULL_REL_L2);
        T_CHECK((double)far / n <= FULL_U8_FAR_FRAC,
                "full VAE: %.4f %% of uint8 values moved by more than %d levels", 100.0 * far / n,
                FULL_U8_FAR);
    }
    free(z);
    free(ob);
    free(of);
    if (rc == C3_OK) profile_sizes(vb, Cz);
    vae_free(vb);
    vae_free(vf);
    if (fbe) c3_backend_destroy(fbe);
    ckpt_close(&ck);
}

int main(void) {
    c3_backend *be = c3_backend_cpu();
    test_ops(be);

    const char *fx = t_need_fixtures("vae");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tiny-a/model", fx);
    c3_ckpt ck;
    if (ckpt_open(&ck, dir, true) != C3_OK) {
        fprintf(stderr, "FAIL: open %s: %s\n", dir, c3_errmsg());
        return 1;
    }
    c3_vae *v = NULL;
    c3_backend *gbe = t_golden_backend(be);
    if (t_on_cuda()) {
        if (t_cuda_fp32()) { /* the backend's fp32 check path: 1e-4 */
            tol_dec = tol_trace = 1e-4;
            tol_trace_max = 1e-3;
        } else {
            tol_dec = tol_trace = BF16_DEC_REL_L2;
            tol_trace_max = BF16_TRACE_MAX_REL;
            tol_u8_equal = BF16_U8_MIN_EQUAL;
            u8_exact = false;
        }
        fprintf(stderr, "golden part on cuda: decoded rel L2 <= %.0e, uint8 equal >= %.0f %%\n",
                tol_dec, 100 * tol_u8_equal);
    }
    int rc = vae_load(&v, &ck, gbe);
    T_CHECK(rc == C3_OK, "vae_load: %s", c3_errmsg());
    if (rc == C3_OK) {
        t_open_golden(&golden, "tiny-a/golden/vae_decode.safetensors");
        test_case(v, &ck.v, "vae_1f_64", true);
        test_case(v, &ck.v, "vae_3f_64", true);
        test_case(v, &ck.v, "vae_1f_48x80", false);
        test_callback(v);
        if (gbe == be) test_staged(be, &ck);
        /* decoding again (after a cancelled run) gives the same result: histories reset */
        test_case(v, &ck.v, "vae_1f_64", false);
        st_close(&golden);
        vae_free(v);
    }
    if (gbe != be) test_full_vae(gbe, dir);
    ckpt_close(&ck);
    if (gbe != be) c3_backend_destroy(gbe);
    c3_backend_destroy(be);
    return t_done("vae");
}
