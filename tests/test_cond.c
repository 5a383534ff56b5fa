/* test_cond.c - image- and video-to-video: the encoder's backend ops
 * against naive loops, the Wan2.2 encoder against the vae_enc_* goldens,
 * and the conditioned cases of tiny-a/cond (preprocessed pixels, x0, mask,
 * initial latents, the first step's velocities) against upstream diffusers.
 * COSMOS3_TEST_DEVICE=cuda runs the golden part on the CUDA backend. */
#include <jansson.h>
#include <string.h>

#include "backend_cpu.h"
#include "checkpoint.h"
#include "condition.h"
#include "model.h"
#include "plan.h"
#include "png_io.h"
#include "prompt.h"
#include "test_util.h"
#include "wan_vae_encode.h"

/* Tolerances. Ops: fp32 GEMM vs a double loop. Goldens (float32, fixtures
 * README): encoder latents and x0 rel L2 <= 1e-5. */
#define OP_TOL 2e-6
static double tol_enc = 1e-5;
/* preprocessed pixels: one uint8 level is 1/127.5 in [-1, 1]; float32 rounding
 * of u / 255 * 2 - 1 vs u / 127.5 - 1 stays far below it */
#define PIXEL_TOL 1e-6
/* one GEN forward in float32 (fixtures README: rel L2 <= 1e-5 for single calls) */
static double tol_vel = 1e-5;
#define BF16_VEL_REL_L2 2e-2
/* COSMOS3_TEST_DEVICE=cuda in bf16: held loosely, as the decoder's goldens */
#define BF16_ENC_REL_L2 6e-2
#define FP32_CHECK_REL_L2 1e-4

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
/* ------------------------------------------------------------ op tests */

static void test_strided(c3_backend *be, int Cin, int T, int H, int W, int Cout, int kt, int kh,
                         int kw, const int st[3], const int pad[4]) {
    int Hp = H + pad[0] + pad[1], Wp = W + pad[2] + pad[3];
    int To = (T - kt) / st[0] + 1, Ho = (Hp - kh) / st[1] + 1, Wo = (Wp - kw) / st[2] + 1;
    int64_t xn[4] = {Cin, T, H, W}, wn[5] = {Cout, Cin, kt, kh, kw}, bn[1] = {Cout},
            yn[4] = {Cout, To, Ho, Wo};
    c3_tensor x = t_new_tensor(be, 4, xn, &rng_state), w = t_new_tensor(be, 5, wn, &rng_state),
              b = t_new_tensor(be, 1, bn, &rng_state), y = t_new_tensor(be, 4, yn, NULL);
    int rc = be->conv3d_strided(be, &y, &x, &w, &b, st, pad);
    T_CHECK(rc == C3_OK, "conv3d_strided: %s", c3_errmsg());
    const float *xd = x.data, *wd = w.data, *bd = b.data;
    float *ref = xmalloc(sizeof(float) * (size_t)c3_numel(&y));
    for (int co = 0; co < Cout; co++)
        for (int t = 0; t < To; t++)
            for (int oy = 0; oy < Ho; oy++)
                for (int ox = 0; ox < Wo; ox++) {
                    double s = bd[co];
                    for (int ci = 0; ci < Cin; ci++)
                        for (int dt = 0; dt < kt; dt++)
                            for (int dy = 0; dy < kh; dy++)
                                for (int dx = 0; dx < kw; dx++) {
                                    int iy = oy * st[1] + dy - pad[0],
                                        ix = ox * st[2] + dx - pad[2];
                                    if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                    s += (double)
                                             wd[(((co * Cin + ci) * kt + dt) * kh + dy) * kw + dx] *
                                         xd[((ci * T + t * st[0] + dt) * H + iy) * W + ix];
                                }
                    ref[((co * To + t) * Ho + oy) * Wo + ox] = (float)s;
                }
    double e = t_max_rel(y.data, ref, c3_numel(&y));
    T_CHECK(e <= OP_TOL,
            "conv3d_strided Cin %d T %d %dx%d k %dx%dx%d stride %d,%d,%d: max rel %.3g", Cin, T, H,
            W, kt, kh, kw, st[0], st[1], st[2], e);
    fprintf(stderr,
            "conv3d_strided Cin %d T %d %2dx%-2d k %dx%dx%d stride %d,%d,%d: max rel err %.2e\n",
            Cin, T, H, W, kt, kh, kw, st[0], st[1], st[2], e);
    free(ref);
    c3_free(&x);
    c3_free(&w);
    c3_free(&b);
    c3_free(&y);
}

/* AvgDown3D against the diffusers reshape written out as loops. */
static void test_avgdown(c3_backend *be, int Cin, int T, int H, int W, int Cout, int ft, int fs) {
    int pad = (ft - T % ft) % ft, Tp = T + pad, To = Tp / ft, F = ft * fs * fs, G = Cin * F / Cout;
    int64_t xn[4] = {Cin, T, H, W}, yn[4] = {Cout, To, H / fs, W / fs};
    c3_tensor x = t_new_tensor(be, 4, xn, &rng_state), y = t_new_tensor(be, 4, yn, NULL);
    int rc = be->avgdown3d(be, &y, &x, ft, fs);
    T_CHECK(rc == C3_OK, "avgdown3d: %s", c3_errmsg());
    const float *xd = x.data;
    float *ref = xcalloc((size_t)c3_numel(&y), sizeof(float));
    /* view [C, To, ft, H', fs, W', fs] -> [C, ft, fs, fs, To, H', W'] -> [Cout, G, ...] mean over G
     */
    for (int c = 0; c < Cin; c++)
        for (int a = 0; a < ft; a++)
            for (int b = 0; b < fs; b++)
                for (int d = 0; d < fs; d++) {
                    int idx = ((c * ft + a) * fs + b) * fs + d, o = idx / G;
                    for (int t = 0; t < To; t++)
                        for (int hh = 0; hh < H / fs; hh++)
                            for (int ww = 0; ww < W / fs; ww++) {
                                int tt = t * ft + a - pad;
                                float v =
                                    tt < 0 ? 0
                                           : xd[((c * T + tt) * H + hh * fs + b) * W + ww * fs + d];
                                ref[((o * To + t) * (H / fs) + hh) * (W / fs) + ww] += v / (float)G;
                            }
                }
    double e = t_max_rel(y.data, ref, c3_numel(&y));
    T_CHECK(e <= OP_TOL, "avgdown3d C %d->%d T %d ft %d fs %d: max rel %.3g", Cin, Cout, T, ft, fs,
            e);
    fprintf(stderr, "avgdown3d C %2d->%-2d T %d %dx%d ft %d fs %d: max rel err %.2e\n", Cin, Cout,
            T, H, W, ft, fs, e);
    free(ref);
    c3_free(&x);
    c3_free(&y);
}

static void test_ops(c3_backend *be) {
    static const int s122[3] = {1, 2, 2}, s211[3] = {2, 1, 1}, s111[3] = {1, 1, 1};
    static const int rb[4] = {0, 1, 0, 1}, none[4] = {0, 0, 0, 0}, odd[4] = {1, 0, 2, 1};
    test_strided(be, 3, 2, 8, 10, 4, 1, 3, 3, s122, rb);  /* the resample conv */
    test_strided(be, 4, 5, 3, 2, 4, 3, 1, 1, s211, none); /* the time conv: 5 frames -> 2 */
    test_strided(be, 2, 3, 6, 7, 3, 2, 3, 2, s111, odd);  /* asymmetric padding, stride 1 */
    test_avgdown(be, 8, 4, 8, 8, 16, 2, 2);
    test_avgdown(be, 8, 1, 4, 6, 16, 2, 2); /* one frame: zero frame in front */
    test_avgdown(be, 6, 3, 4, 4, 6, 1, 2);
    test_avgdown(be, 4, 2, 2, 2, 4, 1, 1); /* identity */
}

/* First-last clips: which source frame each output frame shows, the pinned
 * latent frames, the overlap refusal. Frames are filled with their index so
 * the layout can be read back. */
static c3_media flat_clip(int frames, int W, int H, int base, uint8_t **buf) {
    *buf = xmalloc((size_t)frames * W * H * 3);
    for (int f = 0; f < frames; f++)
        memset(*buf + (size_t)f * W * H * 3, base + f, (size_t)W * H * 3);
    return (c3_media){.rgb = *buf, .width = W, .height = H, .frames = frames};
}

static void check_fl(const c3_media *a, const c3_media *b, int F, const int *want_src,
                     const int *want_idx, int want_n) {
    uint8_t *rgb = NULL;
    c3_media clip;
    int idx[16], n = 0;
    int rc = cond_first_last(a, b, F, 8, 8, 4, &rgb, &clip, idx, 16, &n);
    T_CHECK(rc == C3_OK, "first-last %d+%d frames -> %d: %s", a->frames, b->frames, F, c3_errmsg());
    if (rc) return;
    T_CHECK(clip.frames == F && clip.width == 8 && clip.height == 8, "first-last clip %dx%dx%d",
            clip.width, clip.height, clip.frames);
    for (int f = 0; f < F; f++) {
        int bad = 0;
        for (int k = 0; k < 8 * 8 * 3; k++)
            bad += rgb[(size_t)f * 8 * 8 * 3 + k] != want_src[f];
        T_CHECK(bad == 0, "first-last %d+%d: frame %d is not source value %d (%d values)",
                a->frames, b->frames, f, want_src[f], bad);
    }
    T_CHECK(n == want_n, "first-last %d+%d: %d pinned latent frames, want %d", a->frames, b->frames,
            n, want_n);
    for (int i = 0; i < n && i < want_n; i++)
        T_CHECK(idx[i] == want_idx[i], "first-last: pinned[%d] = %d, want %d", i, idx[i],
                want_idx[i]);
    free(rgb);
}

static void test_first_last(void) {
    uint8_t *pa, *pb, *ca, *cb;
    c3_media a = flat_clip(1, 8, 8, 10, &pa), b = flat_clip(1, 8, 8, 200, &pb);
    /* picture + picture, 9 frames (3 latent frames): A, then B for the rest */
    static const int src9[] = {10, 200, 200, 200, 200, 200, 200, 200, 200}, idx9[] = {0, 2};
    check_fl(&a, &b, 9, src9, idx9, 2);
    /* clips: A's first 5 of 7 frames (latents 0-1), B's last 5 of 6 (latents 3-4), 17 frames */
    c3_media va = flat_clip(7, 8, 8, 20, &ca), vb = flat_clip(6, 8, 8, 100, &cb);
    int src17[17];
    for (int f = 0; f < 17; f++)
        src17[f] = f < 5 ? 20 + f : f < 12 ? 101 : 101 + (f - 12);
    static const int idx17[] = {0, 1, 3, 4};
    check_fl(&va, &vb, 17, src17, idx17, 4);
    /* the ends overlap: 9 frames cannot pin 2 + 2 of 3 latent frames */
    uint8_t *rgb = NULL;
    c3_media clip;
    int idx[16], n;
    int rc = cond_first_last(&va, &vb, 9, 8, 8, 4, &rgb, &clip, idx, 16, &n);
    T_CHECK(rc == C3_EUSAGE && strstr(c3_errmsg(), "ask for more frames") && !rgb,
            "first-last overlap: rc %d '%s'", rc, c3_errmsg());
    rc = cond_first_last(&a, &b, 1, 8, 8, 4, &rgb, &clip, idx, 16, &n);
    T_CHECK(rc == C3_EUSAGE && !rgb, "first-last of one frame: rc %d", rc);
    /* a picture end of another size is preprocessed as the i2v picture: a
       flat picture stays flat */
    uint8_t *big;
    c3_media bigb = flat_clip(1, 12, 10, 77, &big);
    static const int srcbig[] = {10, 77, 77, 77, 77}, idx5[] = {0, 1};
    check_fl(&a, &bigb, 5, srcbig, idx5, 2);
    free(pa);
    free(pb);
    free(ca);
    free(cb);
    free(big);
}

/* ------------------------------------------------------------ goldens */

static st_file cond;

static void test_encoder(c3_vae_enc *enc, const char *name) {
    char key[256];
    snprintf(key, sizeof key, "%s.pixels", name);
    const st_tensor *pt = st_find(&cond, key);
    T_CHECK(pt && pt->ndim == 5, "%s missing", key);
    if (!pt || pt->ndim != 5) return;
    float *pix = st_to_f32(pt);
    snprintf(key, sizeof key, "%s.latents", name);
    int64_t nref;
    float *ref = t_golden_f32(&cond, key, &nref);
    float *lat = NULL;
    int T, h, w;
    int rc = vae_encode(enc, pix, (int)pt->shape[2], (int)pt->shape[3], (int)pt->shape[4], &lat, &T,
                        &h, &w);
    T_CHECK(rc == C3_OK, "%s: vae_encode: %s", name, c3_errmsg());
    if (rc == C3_OK) {
        int64_t n = 48 * (int64_t)T * h * w;
        T_CHECK(n == nref, "%s: %d x %d x %d latents, golden holds %lld values", name, T, h, w,
                (long long)nref);
        if (n == nref) {
            double e = t_rel_l2(lat, ref, n);
            T_CHECK(e <= tol_enc, "%s: latents rel L2 %.3g > %.0e", name, e, tol_enc);
            fprintf(stderr, "%s: latents [48, %d, %d, %d] rel L2 %.2e, max rel %.2e\n", name, T, h,
                    w, e, t_max_rel(lat, ref, n));
        }
    }
    free(lat);
    free(ref);
    free(pix);
}

/* The input files of a conditioned case (the manifest does not name them):
 * the picture, or the clip's frames <prefix>_00.png, _01.png ... */
static const struct {
    const char *name, *picture, *clip;
} case_inputs[] = {
    {"i2v_9f_64_resize", "i2v_picture_96x72.png", NULL},
    {"i2v_9f_48x80_linear", "i2v_picture_80x48.png", NULL},
    {"v2v_17f_64_first", NULL, "v2v_clip_64"},
    {"v2v_17f_64_last3", NULL, "v2v_clip_64"},
    {"v2v_9f_64_resize", NULL, "v2v_clip_96x72"},
};

/* Load the case's picture or clip frames (RGB) into m. */
static bool load_inputs(const char *picture, const char *clip, c3_media *m, uint8_t **buf) {
    char path[4200];
    *buf = NULL;
    memset(m, 0, sizeof *m);
    for (int f = 0;; f++) {
        if (picture && f) break;
        if (picture)
            snprintf(path, sizeof path, "%s", t_path("tiny-a/cond/inputs/"));
        else
            snprintf(path, sizeof path, "%s", t_path("tiny-a/cond/inputs/"));
        size_t k = strlen(path);
        if (picture)
            snprintf(path + k, sizeof path - k, "%s", picture);
        else
            snprintf(path + k, sizeof path - k, "%s_%02d.png", clip, f);
        if (!picture && access(path, R_OK) != 0) break;
        uint8_t *rgb;
        int W, H;
        if (png_read_rgb(path, &rgb, &W, &H) != C3_OK) {
            fprintf(stderr, "FAIL: %s: %s\n", path, c3_errmsg());
            free(*buf);
            return false;
        }
        if (f && (W != m->width || H != m->height)) {
            fprintf(stderr, "FAIL: %s is %dx%d, the clip %dx%d\n", path, W, H, m->width, m->height);
            free(rgb);
            free(*buf);
            return false;
        }
        size_t fb = (size_t)W * H * 3;
        *buf = xrealloc(*buf, fb * (size_t)(f + 1));
        memcpy(*buf + fb * (size_t)f, rgb, fb);
        free(rgb);
        m->width = W;
        m->height = H;
        m->frames = f + 1;
    }
    m->rgb = *buf;
    return m->frames > 0;
}

/* The conditioning input of a manifest case. */
typedef struct {
    c3_media media;
    uint8_t *buf;
    int idx[16];
    c3_cond_input in;
    int F, W, H;
} cond_case;

static bool case_setup(json_t *c, const char *name, cond_case *k) {
    memset(k, 0, sizeof *k);
    const char *picture = NULL, *clip = NULL;
    for (size_t i = 0; i < C3_ARRAY_LEN(case_inputs); i++)
        if (!strcmp(case_inputs[i].name, name)) {
            picture = case_inputs[i].picture;
            clip = case_inputs[i].clip;
        }
    T_CHECK(picture || clip, "%s: no input files known for this case", name);
    if (!(picture || clip) || !load_inputs(picture, clip, &k->media, &k->buf)) return false;
    k->F = (int)json_integer_value(json_object_get(c, "num_frames"));
    k->W = (int)json_integer_value(json_object_get(c, "width"));
    k->H = (int)json_integer_value(json_object_get(c, "height"));
    if (picture) {
        k->in.image = &k->media;
    } else {
        k->in.video = &k->media;
        json_t *ix = json_object_get(c, "condition_frame_indexes_vision");
        size_t i;
        json_t *v;
        json_array_foreach(ix, i, v) if (i < C3_ARRAY_LEN(k->idx)) k->idx[k->in.nindexes++] =
            (int)json_integer_value(v);
        k->in.indexes = k->idx;
        const char *keep = json_string_value(json_object_get(c, "condition_video_keep"));
        k->in.keep = keep && !strcmp(keep, "last") ? C3_KEEP_LAST : C3_KEEP_FIRST;
    }
    return true;
}

/* Preprocessing, encoding, mask and initial latents of one case. */
static void test_condition(c3_vae_enc *enc, const c3_ckpt *ck, json_t *c, const char *name) {
    cond_case k;
    if (!case_setup(c, name, &k)) return;
    int tscale = ck->v.scale_temporal;
    char key[256];
    /* 1. the preprocessed clip */
    float *px = NULL;
    int rc = cond_pixels(&k.in, k.F, k.W, k.H, tscale, k.F, &px);
    T_CHECK(rc == C3_OK, "%s: cond_pixels: %s", name, c3_errmsg());
    snprintf(key, sizeof key, "%s.cond_pixels", name);
    int64_t npx;
    float *gpx = t_golden_f32(&cond, key, &npx);
    if (rc == C3_OK) {
        T_CHECK(npx == 3LL * k.F * k.W * k.H, "%s: cond_pixels holds %lld values", name,
                (long long)npx);
        double m = 0;
        int64_t off = 0;
        for (int64_t i = 0; i < npx; i++) {
            double d = fabs((double)px[i] - gpx[i]);
            m = d > m ? d : m;
            off += d > PIXEL_TOL;
        }
        T_CHECK(m <= PIXEL_TOL, "%s: cond_pixels max |diff| %.3g (%lld values off)", name, m,
                (long long)off);
        fprintf(stderr,
                "%s: cond_pixels [3, %d, %d, %d] max |diff| %.2e (%lld of %lld values off)\n", name,
                k.F, k.H, k.W, m, (long long)off, (long long)npx);
    }
    /* 2. the whole golden clip through the encoder = x0 */
    snprintf(key, sizeof key, "%s.x0", name);
    int64_t nx0;
    float *gx0 = t_golden_f32(&cond, key, &nx0);
    float *lat = NULL;
    int T, h, w;
    rc = vae_encode(enc, gpx, k.F, k.H, k.W, &lat, &T, &h, &w);
    T_CHECK(rc == C3_OK, "%s: vae_encode: %s", name, c3_errmsg());
    if (rc == C3_OK && nx0 == 48LL * T * h * w) {
        double e = t_rel_l2(lat, gx0, nx0);
        T_CHECK(e <= tol_enc, "%s: x0 rel L2 %.3g > %.0e", name, e, tol_enc);
        fprintf(stderr, "%s: x0 from the golden pixels rel L2 %.2e\n", name, e);
    }
    /* 3. cond_prepare: mask, x0 on the pinned frames, latents_init */
    c3_condition cd;
    rc = cond_prepare(&k.in, enc, k.F, k.W, k.H, tscale, &cd);
    T_CHECK(rc == C3_OK, "%s: cond_prepare: %s", name, c3_errmsg());
    if (rc == C3_OK) {
        snprintf(key, sizeof key, "%s.mask", name);
        int64_t nm;
        float *gm = t_golden_f32(&cond, key, &nm);
        T_CHECK(nm == cd.T, "%s: mask has %lld frames, %d latent frames", name, (long long)nm,
                cd.T);
        for (int t = 0; t < cd.T && t < nm; t++)
            T_CHECK(gm[t] == (float)cd.pinned[t], "%s: mask[%d] %g, ours %d", name, t, gm[t],
                    cd.pinned[t]);
        free(gm);
        int64_t hw = (int64_t)cd.h * cd.w, worst_frame = -1;
        double worst = 0;
        for (int t = 0; t < cd.T; t++) {
            if (!cd.pinned[t]) continue;
            for (int ch = 0; ch < cd.C; ch++) {
                /* per pinned frame: rel L2 over its channels */
            }
            double num = 0, den = 0;
            for (int ch = 0; ch < cd.C; ch++)
                for (int64_t i = 0; i < hw; i++) {
                    double a = cd.x0[((int64_t)ch * cd.T + t) * hw + i],
                           b = gx0[((int64_t)ch * cd.T + t) * hw + i];
                    num += (a - b) * (a - b);
                    den += b * b;
                }
            double e = sqrt(num / (den > 0 ? den : 1));
            if (e > worst) worst = e, worst_frame = t;
        }
        T_CHECK(worst <= tol_enc, "%s: x0 of pinned frame %lld rel L2 %.3g", name,
                (long long)worst_frame, worst);
        snprintf(key, sizeof key, "%s.noise", name);
        int64_t nn, ni;
        float *x = t_golden_f32(&cond, key, &nn);
        snprintf(key, sizeof key, "%s.latents_init", name);
        float *gi = t_golden_f32(&cond, key, &ni);
        cond_mix(&cd, x);
        double e = t_rel_l2(x, gi, ni);
        T_CHECK(nn == ni && e <= tol_enc, "%s: latents_init rel L2 %.3g", name, e);
        fprintf(stderr,
                "%s: %d of %d latent frames pinned, their x0 rel L2 <= %.2e, latents_init rel L2 "
                "%.2e\n",
                name, cd.npinned, cd.T, worst, e);
        free(x);
        free(gi);
        cond_free(&cd);
    }
    free(lat);
    free(gx0);
    free(gpx);
    free(px);
    free(k.buf);
}

/* The first step's GEN forwards of a case: pinned tokens clean and without a
 * timestep, their velocity zero; checked against step0_{cond,uncond}_velocity
 * and the count of step0_vision_timesteps. */
static void test_step0(c3_model *m, const c3_tokenizer *tok, const c3_ckpt *ck, json_t *c,
                       const char *name) {
    char key[256];
    int F = (int)json_integer_value(json_object_get(c, "num_frames"));
    int W = (int)json_integer_value(json_object_get(c, "width")),
        H = (int)json_integer_value(json_object_get(c, "height"));
    double fps = json_number_value(json_object_get(c, "fps"));
    snprintf(key, sizeof key, "%s.mask", name);
    int64_t T;
    float *mask = t_golden_f32(&cond, key, &T);
    uint8_t pinned[64] = {0};
    int64_t npinned = 0;
    for (int64_t t = 0; t < T && t < 64; t++)
        npinned += pinned[t] = mask[t] > 0.5f;
    free(mask);
    snprintf(key, sizeof key, "%s.latents_init", name);
    float *lat = t_golden_f32(&cond, key, NULL);
    snprintf(key, sizeof key, "%s.timesteps", name);
    const st_tensor *ts = st_find(&cond, key);
    T_CHECK(ts && ts->dtype == C3_I64, "%s missing", key);
    if (!ts || ts->dtype != C3_I64) return;
    int64_t t0 = ((const int64_t *)ts->data)[0];
    /* the noisy tokens: one timestep each, all the first step's */
    snprintf(key, sizeof key, "%s.step0_vision_timesteps", name);
    const st_tensor *vt = st_find(&cond, key);
    int64_t h = H / 16, w = W / 16, p = ck->t.patch, per = ((h + p - 1) / p) * ((w + p - 1) / p);
    T_CHECK(vt && st_numel(vt) == (T - npinned) * per, "%s: %lld noisy tokens, golden %lld", name,
            (long long)((T - npinned) * per), vt ? (long long)st_numel(vt) : -1LL);
    for (int64_t i = 0; vt && i < st_numel(vt); i++)
        T_CHECK(((const int64_t *)vt->data)[i] == t0, "%s: vision timestep %lld is not %lld", name,
                (long long)i, (long long)t0);
    c3_prompt_opts po = {.system_prompt = ck->default_system_prompt,
                         .templates = true,
                         .width = W,
                         .height = H,
                         .frames = F,
                         .fps = fps};
    c3_latent_geom g = {.T = (int)T, .h = (int)h, .w = (int)w, .fps = fps, .pinned = pinned};
    int64_t n = 48 * T * h * w;
    float *vel = xmalloc(sizeof(float) * (size_t)n);
    static const char *branch[2] = {"cond", "uncond"}, *text_key[2] = {"prompt", "negative_prompt"};
    for (int b = 0; b < 2; b++) {
        int32_t *ids = NULL;
        int L = 0;
        const char *text = json_string_value(json_object_get(c, text_key[b]));
        int rc = prompt_ids(tok, text ? text : "", b == 1, &po, &ids, &L);
        T_CHECK(rc == C3_OK, "%s: prompt_ids: %s", name, c3_errmsg());
        if (b == 0) {
            int want = (int)json_integer_value(json_object_get(c, "cond_input_ids_len"));
            T_CHECK(L == want, "%s: %d cond ids, upstream %d", name, L, want);
        }
        c3_undkv kv = {0};
        if (rc == C3_OK) rc = model_und(m, ids, L, &kv);
        if (rc == C3_OK) rc = model_gen(m, &kv, lat, &g, t0, vel);
        T_CHECK(rc == C3_OK, "%s %s: GEN forward: %s", name, branch[b], c3_errmsg());
        if (rc == C3_OK) {
            snprintf(key, sizeof key, "%s.step0_%s_velocity", name, branch[b]);
            int64_t nr;
            float *ref = t_golden_f32(&cond, key, &nr);
            double e = nr == n ? t_rel_l2(vel, ref, n) : INFINITY;
            T_CHECK(e <= tol_vel, "%s: step0 %s velocity rel L2 %.3g > %.0e", name, branch[b], e,
                    tol_vel);
            /* the pinned frames are exactly zero */
            int64_t nonzero = 0;
            for (int64_t ch = 0; ch < 48; ch++)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t i = 0; pinned[t] && i < h * w; i++)
                        nonzero += vel[(ch * T + t) * h * w + i] != 0;
            T_CHECK(nonzero == 0, "%s: %lld velocity values of pinned frames are not zero", name,
                    (long long)nonzero);
            fprintf(stderr, "%s: step0 %s velocity rel L2 %.2e (t %lld, %lld noisy tokens)\n", name,
                    branch[b], e, (long long)t0, (long long)((T - npinned) * per));
            free(ref);
        }
        undkv_free(&kv);
        free(ids);
    }
    free(vel);
    free(lat);
}

/* The plan's encoder bytes against what the CPU backend allocates: the
 * weights exactly, the activations of a 9-frame 64x64 encode at most the
 * estimate and not below a tenth of it. */
static void test_plan_encoder(const c3_ckpt *ck) {
    c3_sizes sz = {0};
    ckpt_sizes(ck, &sz);
    c3_plan p;
    int rc = plan_make(&p, &ck->t, &sz, 1, 1, 1, "cpu", NULL, false, 0, 64, 64, 9);
    T_CHECK(rc == C3_OK, "plan_make: %s", c3_errmsg());
    c3_backend *be = c3_backend_cpu();
    int64_t w0 = be->mem[C3_MEM_WEIGHTS];
    c3_vae_enc *enc = NULL;
    rc = vae_enc_load(&enc, ck, be);
    T_CHECK(rc == C3_OK, "vae_enc_load: %s", c3_errmsg());
    if (rc) {
        c3_backend_destroy(be);
        return;
    }
    int64_t wenc = be->mem[C3_MEM_WEIGHTS] - w0;
    T_CHECK(wenc == p.enc_weights, "plan: encoder weights %lld, the backend holds %lld",
            (long long)p.enc_weights, (long long)wenc);
    int64_t base = be->mem[C3_MEM_WEIGHTS] + be->mem[C3_MEM_KV] + be->mem[C3_MEM_ACT];
    be->mem_peak = base;
    float *px = xcalloc(3 * 9 * 64 * 64, sizeof(float)), *lat = NULL;
    int T, h, w;
    rc = vae_encode(enc, px, 9, 64, 64, &lat, &T, &h, &w);
    T_CHECK(rc == C3_OK, "vae_encode: %s", c3_errmsg());
    int64_t act = be->mem_peak - base;
    fprintf(stderr,
            "plan: encoder weights %lld B (backend %lld), activations ~%lld B (peak %lld)\n",
            (long long)p.enc_weights, (long long)wenc, (long long)p.enc_act, (long long)act);
    T_CHECK(act > 0 && act <= p.enc_act && act * 10 >= p.enc_act,
            "plan: encoder activations ~%lld, the encode peaked at %lld", (long long)p.enc_act,
            (long long)act);
    free(lat);
    free(px);
    vae_enc_free(enc);
    c3_backend_destroy(be);
}

int main(void) {
    c3_backend *be = c3_backend_cpu();
    test_ops(be);
    test_first_last();

    const char *fx = t_need_fixtures("cond");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/tiny-a/model", fx);
    c3_ckpt ck;
    if (ckpt_open(&ck, dir, true) != C3_OK) {
        fprintf(stderr, "FAIL: open %s: %s\n", dir, c3_errmsg());
        return 1;
    }
    c3_backend *gbe = t_golden_backend(be);
    if (t_on_cuda()) {
        bool fp32 = t_cuda_fp32();
        tol_enc = fp32 ? FP32_CHECK_REL_L2 : BF16_ENC_REL_L2;
        tol_vel = fp32 ? FP32_CHECK_REL_L2 : BF16_VEL_REL_L2;
        fprintf(stderr, "golden part on cuda: encoder rel L2 <= %.0e\n", tol_enc);
    }
    t_open_golden(&cond, "tiny-a/cond/cond.safetensors");
    test_plan_encoder(&ck);
    c3_vae_enc *enc = NULL;
    int rc = vae_enc_load(&enc, &ck, gbe);
    T_CHECK(rc == C3_OK, "vae_enc_load: %s", c3_errmsg());
    if (rc == C3_OK) {
        test_encoder(enc, "vae_enc_1f_64");
        test_encoder(enc, "vae_enc_9f_48x80");
        test_encoder(enc, "vae_enc_1f_64"); /* again: the histories were reset */
        json_error_t jerr;
        json_t *man = json_load_file(t_path("tiny-a/cond/cond_manifest.json"), 0, &jerr);
        T_CHECK(man != NULL, "cond_manifest.json: %s", jerr.text);
        const char *name;
        json_t *c;
        int ncases = 0;
        json_object_foreach(json_object_get(man, "cases"), name, c) {
            const char *kind = json_string_value(json_object_get(c, "kind"));
            if (!kind || (strcmp(kind, "i2v") && strcmp(kind, "v2v"))) continue;
            test_condition(enc, &ck, c, name);
            ncases++;
        }
        T_CHECK(ncases >= 5, "only %d conditioned cases in the manifest", ncases);
        /* the GEN tower with pinned frames */
        c3_model *m = NULL;
        c3_tokenizer *tok = NULL;
        c3_shard sh = {.tp_size = 1, .sp_size = 1};
        rc = model_load(&m, &ck, gbe, &sh);
        T_CHECK(rc == C3_OK, "model_load: %s", c3_errmsg());
        if (rc == C3_OK) rc = tok_load(&tok, ck.tokenizer_json);
        T_CHECK(rc == C3_OK, "tok_load: %s", c3_errmsg());
        if (rc == C3_OK) json_object_foreach(json_object_get(man, "cases"), name, c) {
                const char *kind = json_string_value(json_object_get(c, "kind"));
                if (kind && (!strcmp(kind, "i2v") || !strcmp(kind, "v2v")))
                    test_step0(m, tok, &ck, c, name);
            }
        tok_free(tok);
        model_free(m);
        json_decref(man);
    }
    vae_enc_free(enc);
    st_close(&cond);
    ckpt_close(&ck);
    if (gbe != be) c3_backend_destroy(gbe);
    c3_backend_destroy(be);
    return t_done("cond");
}
