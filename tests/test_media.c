/* test_media.c - app/media.c: every format encoded in memory, read back with
 * the libraries (frame count, fps, size, codec, pixel format), compared frame
 * by frame (PSNR), its metadata read back; decoding of pictures, clips,
 * animated WebP, frame folders and globs; every bad input named. */
#include <sys/stat.h>
#include <webp/encode.h>
#include <webp/mux.h>

#include "config.h"
#include "media.h"
#include "png_io.h"
#include "test_util.h"

#define W_CLIP 64
#define H_CLIP 48
#define F_CLIP 17
/* quality floors (dB) on the smooth moving test clip; measured values are
 * printed by the test (MP4 at CRF 18 is ~45 dB here) */
#define PSNR_MP4_MIN 38.0
#define PSNR_WEBM_MIN 36.0
#define PSNR_JPEG_MIN 38.0
#define PSNR_WEBP_MIN 34.0

static char tmpdir[256];

/* A smooth clip: a lit disc moving over a colour gradient. [F, H, W, 3] */
static uint8_t *make_clip(int W, int H, int F) {
    uint8_t *rgb = xmalloc((size_t)F * H * W * 3);
    for (int f = 0; f < F; f++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                double cx = W * (0.25 + 0.5 * f / (F > 1 ? F - 1 : 1)), cy = H * 0.5;
                double d = sqrt((x - cx) * (x - cx) + (y - cy) * (y - cy)) / (H * 0.25);
                double disc = 1.0 / (1.0 + exp(6.0 * (d - 1.0)));
                uint8_t *p = rgb + (((size_t)f * H + y) * W + x) * 3;
                p[0] = (uint8_t)lrint(40 + 150.0 * x / W + 60 * disc);
                p[1] = (uint8_t)lrint(30 + 120.0 * y / H + 90 * disc);
                p[2] = (uint8_t)lrint(200 - 150.0 * x / W * y / H);
            }
    return rgb;
}

static const char *tpath(const char *name) {
    static char b[4][512];
    static int k;
    char *p = b[k++ & 3];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static void write_bytes(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(d, 1, n, f) != n) {
        fprintf(stderr, "FAIL: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* First offset of a top-level MP4 box, or -1. */
static long mp4_box(const uint8_t *d, size_t n, const char *type) {
    size_t pos = 0;
    while (pos + 8 <= n) {
        size_t len = ((size_t)d[pos] << 24) | ((size_t)d[pos + 1] << 16) |
                     ((size_t)d[pos + 2] << 8) | d[pos + 3];
        if (!memcmp(d + pos + 4, type, 4)) return (long)pos;
        if (len < 8) return -1;
        pos += len;
    }
    return -1;
}

static const char *params_text =
    "a red fox in the snow\nNegative prompt: blurry\nSteps: 2, CFG scale: 7, Seed: 42";
static const char *json_text =
    "{\"version\":\"0.1.0\",\"settings\":{\"prompt\":\"a red fox <in> \\\"the\\\" snow & "
    "\xc3\xa9t\xc3\xa9\",\"seed\":42,\"fps\":16}}";

static void check_meta(const uint8_t *d, size_t n, const char *what) {
    char *p = NULL, *j = NULL;
    int rc = media_read_meta_mem(d, n, what, &p, &j);
    T_CHECK(rc == C3_OK, "%s: read meta: %s", what, c3_errmsg());
    T_CHECK(p && !strcmp(p, params_text), "%s: parameters came back as '%s'", what,
            p ? p : "(none)");
    T_CHECK(j && !strcmp(j, json_text), "%s: json came back as '%s'", what, j ? j : "(none)");
    free(p);
    free(j);
}

static void test_video(c3_media_format f, const char *ext, const char *codec, double psnr_min) {
    uint8_t *clip = make_clip(W_CLIP, H_CLIP, F_CLIP);
    c3_media_meta meta = {params_text, json_text};
    uint8_t *enc;
    size_t n;
    int rc = media_encode(f, clip, W_CLIP, H_CLIP, F_CLIP, 24, &meta, NULL, &enc, &n);
    T_CHECK(rc == C3_OK, "%s encode: %s", ext, c3_errmsg());
    if (rc) {
        free(clip);
        return;
    }
    check_meta(enc, n, ext);
    char name[32];
    snprintf(name, sizeof name, "clip%s", ext);
    write_bytes(tpath(name), enc, n);
    c3_media_info info;
    rc = media_probe(tpath(name), &info);
    T_CHECK(rc == C3_OK, "%s probe: %s", ext, c3_errmsg());
    T_CHECK(!strcmp(info.codec, codec), "%s codec %s, want %s", ext, info.codec, codec);
    T_CHECK(!strcmp(info.pix_fmt, "yuv420p"), "%s pix_fmt %s", ext, info.pix_fmt);
    T_CHECK(info.width == W_CLIP && info.height == H_CLIP, "%s size %dx%d", ext, info.width,
            info.height);
    T_CHECK(info.frames == F_CLIP, "%s frames %d, want %d", ext, info.frames, F_CLIP);
    T_CHECK(fabs(info.fps - 24) < 1e-6, "%s fps %g, want 24", ext, info.fps);
    if (f == MEDIA_MP4) { /* +faststart: the index before the media data */
        long moov = mp4_box(enc, n, "moov"), mdat = mp4_box(enc, n, "mdat");
        T_CHECK(moov > 0 && mdat > moov, "faststart: moov at %ld, mdat at %ld", moov, mdat);
    }
    c3_media_frames m;
    rc = media_decode_mem(enc, n, name, NULL, &m);
    T_CHECK(rc == C3_OK, "%s decode: %s", ext, c3_errmsg());
    if (rc == C3_OK) {
        T_CHECK(m.frames == F_CLIP && m.width == W_CLIP && m.height == H_CLIP,
                "%s decoded %d frames %dx%d", ext, m.frames, m.width, m.height);
        T_CHECK(fabs(m.fps - 24) < 1e-6, "%s decoded fps %g", ext, m.fps);
        double worst = INFINITY;
        size_t fb = (size_t)W_CLIP * H_CLIP * 3;
        for (int i = 0; i < m.frames && i < F_CLIP; i++)
            worst = fmin(worst, media_psnr(m.rgb + fb * i, clip + fb * i, fb));
        fprintf(stderr, "%s: %zu bytes, worst frame PSNR %.2f dB\n", ext, n, worst);
        T_CHECK(worst >= psnr_min, "%s worst frame PSNR %.2f < %.1f dB", ext, worst, psnr_min);
        media_frames_free(&m);
    }
    /* another fps; the crf changes the size */
    uint8_t *e16;
    size_t n16;
    c3_media_opts o = {.crf = 40};
    rc = media_encode(f, clip, W_CLIP, H_CLIP, F_CLIP, 16, NULL, &o, &e16, &n16);
    T_CHECK(rc == C3_OK, "%s fps 16: %s", ext, c3_errmsg());
    if (rc == C3_OK) {
        c3_media_frames m16;
        rc = media_decode_mem(e16, n16, "fps16", NULL, &m16);
        T_CHECK(rc == C3_OK && fabs(m16.fps - 16) < 1e-6, "%s fps 16 came back as %g", ext,
                m16.fps);
        T_CHECK(n16 < n, "%s: crf 40 gives %zu bytes, crf default %zu", ext, n16, n);
        /* too short for a caller that needs more frames */
        c3_media_limits lim = {.min_frames = F_CLIP + 4};
        c3_media_frames mm;
        rc = media_decode_mem(e16, n16, "short.mp4", &lim, &mm);
        T_CHECK(rc == C3_EINPUT && strstr(c3_errmsg(), "has 17 frames; at least 21"),
                "too short: %s", c3_errmsg());
        /* max_frames stops early */
        c3_media_limits lim2 = {.max_frames = 5};
        rc = media_decode_mem(e16, n16, "x", &lim2, &mm);
        T_CHECK(rc == C3_OK && mm.frames == 5, "max_frames 5 gave %d", rc ? -1 : mm.frames);
        if (rc == C3_OK) media_frames_free(&mm);
        /* keep_last: the last frames, in order (the ring rotated back) */
        size_t fb = (size_t)W_CLIP * H_CLIP * 3;
        c3_media_limits lim3 = {.max_frames = 5, .keep_last = true};
        rc = media_decode_mem(e16, n16, "tail", &lim3, &mm);
        T_CHECK(rc == C3_OK && mm.frames == 5, "keep_last 5 gave %d", rc ? -1 : mm.frames);
        if (rc == C3_OK && m16.rgb && m16.frames == F_CLIP) {
            for (int i = 0; i < 5; i++)
                T_CHECK(!memcmp(mm.rgb + fb * i, m16.rgb + fb * (F_CLIP - 5 + i), fb),
                        "keep_last frame %d is not the clip's frame %d", i, F_CLIP - 5 + i);
            media_frames_free(&mm);
        }
        /* the decoded bytes are capped, kept frames or not */
        c3_media_limits lim4 = {.max_frames = 2, .keep_last = true, .max_bytes = (int64_t)fb * 6};
        rc = media_decode_mem(e16, n16, "capped", &lim4, &mm);
        T_CHECK(rc == C3_EINPUT && strstr(c3_errmsg(), "capped: more than"),
                "a clip past max_bytes: %d %s", rc, c3_errmsg());
        if (rc == C3_OK) media_frames_free(&mm);
        /* keep-first stops before the cap */
        c3_media_limits lim5 = {.max_frames = 2, .max_bytes = (int64_t)fb * 2};
        rc = media_decode_mem(e16, n16, "first", &lim5, &mm);
        T_CHECK(rc == C3_OK && mm.frames == 2, "max_frames 2 within 2 frames of bytes: %s",
                c3_errmsg());
        if (rc == C3_OK) media_frames_free(&mm);
        /* the size from the codec's parameters, before a frame is decoded */
        c3_media_limits lim6 = {.max_pixels = (int64_t)W_CLIP * H_CLIP - 1};
        rc = media_decode_mem(e16, n16, "big", &lim6, &mm);
        T_CHECK(rc == C3_EINPUT && strstr(c3_errmsg(), "larger than this use takes"),
                "max_pixels below the clip's: %d %s", rc, c3_errmsg());
        if (rc == C3_OK) media_frames_free(&mm);
        if (m16.rgb) media_frames_free(&m16);
        free(e16);
    }
    free(enc);
    free(clip);
}

static void test_picture(c3_media_format f, const char *ext, const char *codec, double psnr_min) {
    uint8_t *img = make_clip(W_CLIP, H_CLIP, 1);
    c3_media_meta meta = {params_text, json_text};
    uint8_t *enc;
    size_t n;
    int rc = media_encode(f, img, W_CLIP, H_CLIP, 1, 0, &meta, NULL, &enc, &n);
    T_CHECK(rc == C3_OK, "%s encode: %s", ext, c3_errmsg());
    if (rc) {
        free(img);
        return;
    }
    check_meta(enc, n, ext);
    if (f == MEDIA_JPEG) { /* quality 95: libjpeg's luminance table scaled to 10 %: DC 16 -> 2 */
        int dqt0 = -1;
        for (size_t i = 2; i + 5 < n; i++)
            if (enc[i] == 0xff && enc[i + 1] == 0xdb) {
                dqt0 = enc[i + 5];
                break;
            }
        T_CHECK(dqt0 == 2, "JPEG quality 95: first luminance quantiser %d, want 2", dqt0);
    }
    char name[32];
    snprintf(name, sizeof name, "pic%s", ext);
    write_bytes(tpath(name), enc, n);
    c3_media_info info;
    rc = media_probe(tpath(name), &info);
    T_CHECK(rc == C3_OK && !strcmp(info.codec, codec) && info.frames == 1 && info.width == W_CLIP,
            "%s probe: codec %s frames %d width %d (%s)", ext, info.codec, info.frames, info.width,
            rc ? c3_errmsg() : "ok");
    c3_media_frames m;
    rc = media_decode(tpath(name), NULL, &m);
    T_CHECK(rc == C3_OK, "%s decode: %s", ext, c3_errmsg());
    if (rc == C3_OK) {
        T_CHECK(m.frames == 1 && m.width == W_CLIP && m.height == H_CLIP && m.fps == 0,
                "%s: %d frames %dx%d fps %g", ext, m.frames, m.width, m.height, m.fps);
        double p = media_psnr(m.rgb, img, (size_t)W_CLIP * H_CLIP * 3);
        fprintf(stderr, "%s: %zu bytes, PSNR %.2f dB\n", ext, n, p);
        T_CHECK(p >= psnr_min, "%s PSNR %.2f < %.1f", ext, p, psnr_min);
        media_frames_free(&m);
    }
    /* many frames into a picture format: refused with the fix */
    uint8_t *clip = make_clip(W_CLIP, H_CLIP, 5), *e2 = NULL;
    size_t n2;
    rc = media_encode(f, clip, W_CLIP, H_CLIP, 5, 24, NULL, NULL, &e2, &n2);
    T_CHECK(rc == C3_EUSAGE && strstr(c3_errmsg(), "use .mp4"), "%s 5 frames: rc %d %s", ext, rc,
            c3_errmsg());
    free(e2);
    free(clip);
    free(enc);
    free(img);
}

/* Animated WebP made with libwebpmux's WebPAnimEncoder, decoded by media.c. */
static void test_anim_webp(void) {
    int F = 5, W = 32, H = 32;
    uint8_t *clip = make_clip(W, H, F);
    WebPAnimEncoderOptions eo;
    T_CHECK(WebPAnimEncoderOptionsInit(&eo), "WebPAnimEncoderOptionsInit");
    WebPAnimEncoder *enc = WebPAnimEncoderNew(W, H, &eo);
    WebPConfig cfg;
    WebPConfigInit(&cfg);
    cfg.lossless = 1;
    for (int f = 0; f < F; f++) {
        WebPPicture pic;
        WebPPictureInit(&pic);
        pic.width = W;
        pic.height = H;
        pic.use_argb = 1;
        WebPPictureImportRGB(&pic, clip + (size_t)f * W * H * 3, W * 3);
        T_CHECK(WebPAnimEncoderAdd(enc, &pic, f * 100, &cfg), "WebPAnimEncoderAdd frame %d", f);
        WebPPictureFree(&pic);
    }
    WebPAnimEncoderAdd(enc, NULL, F * 100, NULL);
    WebPData out;
    WebPDataInit(&out);
    T_CHECK(WebPAnimEncoderAssemble(enc, &out), "assemble");
    WebPAnimEncoderDelete(enc);
    write_bytes(tpath("anim.webp"), out.bytes, out.size);
    c3_media_frames m;
    int rc = media_decode(tpath("anim.webp"), NULL, &m);
    T_CHECK(rc == C3_OK, "animated webp: %s", c3_errmsg());
    if (rc == C3_OK) {
        T_CHECK(m.frames == F && m.width == W && fabs(m.fps - 10) < 1e-6,
                "anim webp: %d frames, fps %g", m.frames, m.fps);
        size_t fb = (size_t)W * H * 3;
        bool same = true;
        for (int f = 0; f < F && same && f < m.frames; f++)
            same = !memcmp(m.rgb + fb * f, clip + fb * f, fb);
        T_CHECK(same, "lossless animated WebP frames differ from the source");
        media_frames_free(&m);
    }
    c3_media_info info;
    rc = media_probe(tpath("anim.webp"), &info);
    T_CHECK(rc == C3_OK && info.frames == F, "anim probe: %d frames", info.frames);
    WebPDataClear(&out);
    free(clip);
}

/* A folder of PNG frames and a glob, in name order. */
static void test_frames_folder(void) {
    int F = 5;
    uint8_t *clip = make_clip(W_CLIP, H_CLIP, F);
    mkdir(tpath("frames"), 0755);
    char path[600];
    for (int f = F - 1; f >= 0; f--) { /* written in reverse: order must come from the names */
        snprintf(path, sizeof path, "%s/frames/frame_%04d.png", tmpdir, f);
        c3_png_text t = {"cosmos3", f == 0 ? json_text : "{}", true};
        T_CHECK(png_write(path, clip + (size_t)f * W_CLIP * H_CLIP * 3, W_CLIP, H_CLIP, &t, 1,
                          true) == C3_OK,
                "png_write: %s", c3_errmsg());
    }
    write_bytes(tpath("frames/notes.txt"), "x", 1);
    c3_media_frames m;
    int rc = media_decode(tpath("frames"), NULL, &m);
    T_CHECK(rc == C3_OK && m.frames == F && !memcmp(m.rgb, clip, (size_t)F * W_CLIP * H_CLIP * 3),
            "folder: rc %d frames %d (%s)", rc, m.frames, c3_errmsg());
    T_CHECK(rc == C3_OK && fabs(m.fps - 16) < 1e-9, "folder fps %g (from frame 0's settings)",
            m.fps);
    if (rc == C3_OK) media_frames_free(&m);
    snprintf(path, sizeof path, "%s/frames/frame_000[1-3].png", tmpdir);
    rc = media_decode(path, NULL, &m);
    T_CHECK(rc == C3_OK && m.frames == 3 &&
                !memcmp(m.rgb, clip + (size_t)W_CLIP * H_CLIP * 3, (size_t)3 * W_CLIP * H_CLIP * 3),
            "glob: rc %d frames %d", rc, m.frames);
    if (rc == C3_OK) media_frames_free(&m);
    char *p, *j;
    rc = media_read_meta(tpath("frames"), &p, &j);
    T_CHECK(rc == C3_OK && j && !strcmp(j, json_text), "folder meta: %s", j ? j : c3_errmsg());
    free(p);
    free(j);
    /* a frame of another size */
    uint8_t *small = make_clip(16, 16, 1);
    snprintf(path, sizeof path, "%s/frames/frame_0009.png", tmpdir);
    png_write(path, small, 16, 16, NULL, 0, true);
    rc = media_decode(tpath("frames"), NULL, &m);
    T_CHECK(rc == C3_EINPUT && strstr(c3_errmsg(), "frame 6 is 16x16"), "mixed sizes: %s",
            c3_errmsg());
    free(small);
    free(clip);
}

static void test_bad_inputs(void) {
    c3_media_frames m;
    int rc = media_decode(tpath("nope.mp4"), NULL, &m);
    T_CHECK(rc == C3_EINPUT && strstr(c3_errmsg(), "No such file"), "missing: %s", c3_errmsg());
    write_bytes(tpath("empty.mp4"), "", 0);
    rc = media_decode(tpath("empty.mp4"), NULL, &m);
    T_CHECK(rc == C3_EINPUT && strstr(c3_errmsg(), "is empty"), "empty: %s", c3_errmsg());
    write_bytes(tpath("junk.mp4"), "this is not a video at all, just text\n", 38);
    rc = media_decode(tpath("junk.mp4"), NULL, &m);
    T_CHECK(rc == C3_EINPUT && strstr(c3_errmsg(), "not a picture or clip"), "junk: %s",
            c3_errmsg());
    mkdir(tpath("nothing"), 0755);
    rc = media_decode(tpath("nothing"), NULL, &m);
    T_CHECK(rc == C3_EINPUT && strstr(c3_errmsg(), "no PNG frames"), "empty folder: %s",
            c3_errmsg());
    rc = media_decode(tpath("nothing/*.png"), NULL, &m);
    T_CHECK(rc == C3_EINPUT && strstr(c3_errmsg(), "no PNG frames match"), "empty glob: %s",
            c3_errmsg());
    /* a truncated MP4 */
    uint8_t *clip = make_clip(W_CLIP, H_CLIP, 9), *enc;
    size_t n;
    if (media_encode(MEDIA_MP4, clip, W_CLIP, H_CLIP, 9, 24, NULL, NULL, &enc, &n) == C3_OK) {
        rc = media_decode_mem(enc, n / 3, "cut.mp4", NULL, &m);
        T_CHECK(rc != C3_OK, "a third of an MP4 decoded (%d frames)", rc ? 0 : m.frames);
        if (rc == C3_OK) media_frames_free(&m);
        free(enc);
    }
    /* odd sizes cannot be yuv420p */
    rc = media_encode(MEDIA_MP4, clip, 63, 47, 1, 24, NULL, NULL, &enc, &n);
    T_CHECK(rc == C3_EUSAGE && strstr(c3_errmsg(), "even width"), "odd size: %s", c3_errmsg());
    free(clip);
    char *p, *j;
    rc = media_read_meta(tpath("junk.mp4"), &p, &j);
    T_CHECK(rc == C3_EINPUT, "meta of junk: rc %d", rc);
}

static void test_formats_and_strip(void) {
    c3_media_format f;
    T_CHECK(media_format_from_path("a/b.MP4", &f) && f == MEDIA_MP4, "MP4 upper case");
    T_CHECK(media_format_from_path("x.jpeg", &f) && f == MEDIA_JPEG, "jpeg");
    T_CHECK(!media_format_from_path("x.gif", &f), "gif is not a format");
    T_CHECK(!media_format_from_path("dir.d/file", &f), "a dot in a folder name is no extension");
    uint8_t *clip = make_clip(8, 4, 9), *s;
    int sw;
    media_strip(clip, 8, 4, 9, &s, &sw);
    int gap = 2;
    T_CHECK(sw == 3 * 8 + 2 * gap, "strip width %d", sw);
    /* the middle panel is frame 4, the last frame 8 */
    T_CHECK(!memcmp(s + (8 + gap) * 3, clip + (size_t)4 * 8 * 4 * 3, 8 * 3),
            "strip middle is frame 4");
    T_CHECK(!memcmp(s + (2 * (8 + gap)) * 3, clip + (size_t)8 * 8 * 4 * 3, 8 * 3),
            "strip last is frame 8");
    free(s);
    media_strip(clip, 8, 4, 1, &s, &sw);
    T_CHECK(sw == 8 && !memcmp(s, clip, 8 * 4 * 3), "a one-frame strip is the frame");
    free(s);
    free(clip);
}

int main(void) {
    if (!COSMOS3_HAVE_FFMPEG) {
        fprintf(stderr, "media: SKIP: built with -Dmedia=disabled (no FFmpeg libraries)\n");
        return T_SKIP;
    }
    snprintf(tmpdir, sizeof tmpdir, "%s/c3mediaXXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) return 1;
    test_formats_and_strip();
    test_video(MEDIA_MP4, ".mp4", "h264", PSNR_MP4_MIN);
    test_video(MEDIA_WEBM, ".webm", "vp9", PSNR_WEBM_MIN);
    test_picture(MEDIA_PNG, ".png", "png", 99);
    test_picture(MEDIA_JPEG, ".jpg", "mjpeg", PSNR_JPEG_MIN);
    test_picture(MEDIA_WEBP, ".webp", "webp", PSNR_WEBP_MIN);
    test_anim_webp();
    test_frames_folder();
    test_bad_inputs();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", tmpdir);
    return t_done("media");
}
