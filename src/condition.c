/* condition.c - image- and video-to-video conditioning (see condition.h).
 *
 * The two resizes reproduce upstream's arithmetic, because the rounded
 * pixels are what the encoder sees (the cond_pixels goldens pin them):
 *   - the picture (_preprocess_conditioning_image): torch's antialiased
 *     bilinear on float32, width pass then height pass, a pass skipped when
 *     that size does not change; weights in float as ATen computes them;
 *   - clip frames (VideoProcessor.preprocess_video, resample "bilinear"):
 *     PIL's Image.resize on uint8, 22-bit fixed-point weights, width pass
 *     then height pass, each rounded to uint8; a frame already at the target
 *     size is copied. */
#include "condition.h"

#include <math.h>
#include <stdlib.h>

/* Channels of the pictures and clips. */
enum { IMG_CH = 3 };
/* the largest conditioning input taken (app/media.h's bounds) */
enum { COND_MAX_SIDE = 16384 };
#define COND_MAX_PIXELS (4096ll * 4096)
/* PIL's fixed-point precision of 8-bit resampling (Resample.c). */
enum { PIL_PRECISION_BITS = 32 - 8 - 2 };
/* The latent frames a clip pins when the request names none (upstream's default). */
static const int default_indexes[] = {0, 1};

bool cond_given(const c3_cond_input *in) {
    return in && (in->image || in->video);
}

static void indexes_of(const c3_cond_input *in, const int **idx, int *n) {
    if (in->indexes && in->nindexes > 0) {
        *idx = in->indexes;
        *n = in->nindexes;
    } else {
        *idx = default_indexes;
        *n = (int)C3_ARRAY_LEN(default_indexes);
    }
}

static int max_index(const c3_cond_input *in) {
    const int *idx;
    int n, m = 0;
    indexes_of(in, &idx, &n);
    for (int i = 0; i < n; i++)
        m = idx[i] > m ? idx[i] : m;
    return m;
}

/* W x H: the output; a source at most its size is always taken, larger
 * ones up to COND_MAX_PIXELS (0: no output yet, first-last's ends). */
static int check_media(const c3_media *m, const char *what, int W, int H) {
    if (!m->rgb || m->width < 1 || m->height < 1 || m->frames < 1)
        return c3_fail(C3_EINPUT, "the conditioning %s is empty (%dx%d, %d frames)", what, m->width,
                       m->height, m->frames);
    /* the resize holds a picture as floats (12 bytes a pixel): bound it
       before any of that is made */
    int64_t maxpx = (int64_t)W * H > COND_MAX_PIXELS ? (int64_t)W * H : COND_MAX_PIXELS;
    if (m->width > COND_MAX_SIDE || m->height > COND_MAX_SIDE ||
        (int64_t)m->width * m->height > maxpx)
        return c3_fail(C3_EINPUT,
                       "the conditioning %s is %dx%d; at most %lld pixels (%d a side): scale it "
                       "down first",
                       what, m->width, m->height, (long long)maxpx, COND_MAX_SIDE);
    return C3_OK;
}

int cond_check(const c3_cond_input *in, int F, int W, int H, int tscale) {
    if (!cond_given(in)) return C3_OK;
    if (F < 1 || W < 1 || H < 1 || tscale < 1)
        return c3_fail(C3_EFAIL, "conditioning for %d frames of %dx%d (%d a latent frame)", F, W, H,
                       tscale);
    if (in->image && in->video)
        return c3_fail(C3_EUSAGE,
                       "give a picture (image-to-video) or a clip (video-to-video), not both");
    int T = (F - 1) / tscale + 1;
    if (in->image) {
        C3_TRY(check_media(in->image, "picture", W, H));
        if (in->image->frames != 1)
            return c3_fail(
                C3_EINPUT,
                "the conditioning picture has %d frames; give one, or pass a clip as a video",
                in->image->frames);
        if (in->indexes && in->nindexes > 0)
            return c3_fail(
                C3_EUSAGE,
                "condition frames apply to a clip; a picture always gives latent frame 0");
        if (F == 1)
            return c3_fail(
                C3_EUSAGE,
                "a conditioning picture starts a video; ask for frames 1 + 4k > 1 (e.g. 9)");
        return C3_OK;
    }
    C3_TRY(check_media(in->video, "clip", W, H));
    if (F == 1)
        return c3_fail(C3_EUSAGE,
                       "a conditioning clip needs a video; ask for frames 1 + 4k > 1 (e.g. 17)");
    const int *idx;
    int n;
    indexes_of(in, &idx, &n);
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= T)
            return c3_fail(C3_EUSAGE,
                           "condition frame %d is outside the latent timeline (%d latent frames "
                           "for %d frames); "
                           "use 0..%d",
                           idx[i], T, F, T - 1);
    int need = max_index(in) * tscale + 1;
    if (in->video->frames < need)
        return c3_fail(C3_EINPUT,
                       "the clip has %d frames; condition frames up to %d need at least %d",
                       in->video->frames, max_index(in), need);
    return C3_OK;
}

/* ------------------------------------------------------------ the picture */

/* ATen's linear antialias filter. */
static float aa_filter(float x) {
    x = fabsf(x);
    return x < 1.0f ? (float)(1.0 - x) : 0.0f;
}

/* One axis of torch's antialiased bilinear resize (align_corners false):
 * xmin[i], xsize[i] and the weights w[i * ksize + j], in ATen's types
 * (float, with the double literals of its expressions). Returns ksize. */
static int aa_weights(int insz, int outsz, int *xmin, int *xsize, float **w) {
    float scale = (float)insz / (float)outsz;
    float support = scale >= 1.0f ? (float)(1.0 * scale) : 1.0f;
    int ksize = (int)ceil(support) * 2 + 1;
    float invscale = scale >= 1.0f ? (float)(1.0 / scale) : 1.0f;
    *w = xcalloc((size_t)outsz * (size_t)ksize, sizeof(float));
    for (int i = 0; i < outsz; i++) {
        float center = (float)(scale * (i + 0.5));
        int64_t lo = (int64_t)((double)(center - support) + 0.5),
                hi = (int64_t)((double)(center + support) + 0.5);
        if (lo < 0) lo = 0;
        if (hi > insz) hi = insz;
        int64_t n = hi - lo;
        if (n < 0) n = 0;
        if (n > ksize) n = ksize;
        float total = 0, *wi = *w + (size_t)i * ksize;
        for (int64_t j = 0; j < n; j++) {
            wi[j] = aa_filter((float)(((double)((float)(j + lo) - center) + 0.5) * invscale));
            total += wi[j];
        }
        if (total != 0.0f)
            for (int64_t j = 0; j < n; j++)
                wi[j] /= total;
        xmin[i] = (int)lo;
        xsize[i] = (int)n;
    }
    return ksize;
}

/* out[c, r, i] = sum_j w_ij in[c, r, xmin_i + j] along the last axis
 * (step 1) or, with rows = 1 and step = the row length, along the rows. */
static void aa_pass(const float *in, float *out, int planes, int outsz, int step, int64_t in_plane,
                    int64_t out_plane, int inner, const int *xmin, const int *xsize, const float *w,
                    int ksize) {
    for (int p = 0; p < planes; p++)
        for (int i = 0; i < outsz; i++) {
            const float *wi = w + (size_t)i * ksize;
            for (int k = 0; k < inner; k++) {
                /* step 1: inner indexes rows of length in_plane / inner; else columns */
                const float *src =
                    step == 1 ? in + p * in_plane + (int64_t)k * (in_plane / inner) + xmin[i]
                              : in + p * in_plane + (int64_t)xmin[i] * step + k;
                /* ATen's AVX2 build contracts `out += t * w` into FMAs: so do we,
                 * or a value that lands on .5 rounds the other way */
                float acc = src[0] * wi[0];
                for (int j = 1; j < xsize[i]; j++)
                    acc = fmaf(src[(int64_t)j * step], wi[j], acc);
                if (step == 1)
                    out[p * out_plane + (int64_t)k * outsz + i] = acc;
                else
                    out[p * out_plane + (int64_t)i * inner + k] = acc;
            }
        }
}

/* One pass of the resize, insz -> outsz samples along the axis aa_pass's
 * step and inner say: cur [3, in_plane] -> a new [3, out_plane] (cur freed). */
static float *aa_axis(float *cur, int insz, int outsz, int step, int64_t in_plane,
                      int64_t out_plane, int inner) {
    int *lo = xmalloc(sizeof(int) * (size_t)outsz), *n = xmalloc(sizeof(int) * (size_t)outsz);
    float *w;
    int k = aa_weights(insz, outsz, lo, n, &w);
    float *nx = xmalloc(sizeof(float) * (size_t)(IMG_CH * out_plane));
    aa_pass(cur, nx, IMG_CH, outsz, step, in_plane, out_plane, inner, lo, n, w, k);
    free(cur);
    free(lo);
    free(n);
    free(w);
    return nx;
}

void cond_resize_aa(const uint8_t *rgb, int sw, int sh, int rw, int rh, float *out) {
    int64_t sp = (int64_t)sw * sh;
    float *cur = xmalloc(sizeof(float) * (size_t)(IMG_CH * sp));
    for (int c = 0; c < IMG_CH; c++)
        for (int64_t i = 0; i < sp; i++)
            cur[c * sp + i] = (float)rgb[i * IMG_CH + c];
    int cw = sw, ch = sh;
    if (rw != sw) { /* width pass: [3, sh, sw] -> [3, sh, rw] */
        cur = aa_axis(cur, sw, rw, 1, (int64_t)sh * sw, (int64_t)sh * rw, sh);
        cw = rw;
    }
    if (rh != sh) { /* height pass: [3, sh, cw] -> [3, rh, cw] */
        cur = aa_axis(cur, sh, rh, cw, (int64_t)sh * cw, (int64_t)rh * cw, cw);
        ch = rh;
    }
    memcpy(out, cur, sizeof(float) * (size_t)(IMG_CH * (int64_t)ch * cw));
    free(cur);
}

/* The picture as upstream's _preprocess_conditioning_image: [3, H, W] in [-1, 1]. */
static void picture_frame(const c3_media *m, int W, int H, float *frame) {
    double scale = fmax((double)W / m->width, (double)H / m->height);
    int rw = (int)ceil(scale * m->width), rh = (int)ceil(scale * m->height);
    float *big = xmalloc(sizeof(float) * (size_t)IMG_CH * (size_t)rw * (size_t)rh);
    cond_resize_aa(m->rgb, m->width, m->height, rw, rh, big);
    /* Python's round: half to even (nearbyint in the default rounding mode) */
    int top = (int)nearbyint((rh - H) / 2.0), left = (int)nearbyint((rw - W) / 2.0);
    for (int c = 0; c < IMG_CH; c++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                float v = nearbyintf(big[((int64_t)c * rh + top + y) * rw + left + x]);
                v = v < 0 ? 0 : v > 255 ? 255 : v;
                frame[((int64_t)c * H + y) * W + x] = v / 127.5f - 1.0f;
            }
    free(big);
}

/* ------------------------------------------------------------ clip frames */

static double pil_bilinear(double x) {
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* PIL's precompute_coeffs + normalize_coeffs_8bpc for one axis (box = the
 * whole image): bounds lo[i], n[i] and fixed-point weights k[i * ksize + j]. */
static int pil_coeffs(int insz, int outsz, int *lo, int *n, int32_t **k) {
    double scale = (double)insz / outsz, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 1.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    double *kk = xcalloc((size_t)outsz * (size_t)ksize, sizeof(double));
    for (int xx = 0; xx < outsz; xx++) {
        double center = (xx + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > insz) xmax = insz;
        xmax -= xmin;
        double *kx = kk + (size_t)xx * ksize;
        for (int x = 0; x < xmax; x++) {
            kx[x] = pil_bilinear((x + xmin - center + 0.5) * ss);
            ww += kx[x];
        }
        for (int x = 0; x < xmax; x++)
            if (ww != 0.0) kx[x] /= ww;
        lo[xx] = xmin;
        n[xx] = xmax;
    }
    *k = xmalloc(sizeof(int32_t) * (size_t)outsz * (size_t)ksize);
    for (int i = 0; i < outsz * ksize; i++)
        (*k)[i] = kk[i] < 0 ? (int32_t)(-0.5 + kk[i] * (1 << PIL_PRECISION_BITS))
                            : (int32_t)(0.5 + kk[i] * (1 << PIL_PRECISION_BITS));
    free(kk);
    return ksize;
}

static uint8_t pil_clip8(int32_t v) {
    int32_t s = v >> PIL_PRECISION_BITS;
    return (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
}

void cond_resize_pil(const uint8_t *rgb, int sw, int sh, int rw, int rh, uint8_t *out) {
    const uint8_t *cur = rgb;
    uint8_t *tmp = NULL;
    int cw = sw;
    if (rw != sw) { /* horizontal pass: [sh, sw, 3] -> [sh, rw, 3] */
        int *lo = xmalloc(sizeof(int) * (size_t)rw), *n = xmalloc(sizeof(int) * (size_t)rw);
        int32_t *k;
        int ks = pil_coeffs(sw, rw, lo, n, &k);
        tmp = xmalloc((size_t)sh * rw * IMG_CH);
        for (int y = 0; y < sh; y++)
            for (int x = 0; x < rw; x++)
                for (int c = 0; c < IMG_CH; c++) {
                    int32_t ss = 1 << (PIL_PRECISION_BITS - 1);
                    for (int j = 0; j < n[x]; j++)
                        ss += (int32_t)rgb[((int64_t)y * sw + lo[x] + j) * IMG_CH + c] *
                              k[(size_t)x * ks + j];
                    tmp[((int64_t)y * rw + x) * IMG_CH + c] = pil_clip8(ss);
                }
        free(lo);
        free(n);
        free(k);
        cur = tmp;
        cw = rw;
    }
    if (rh != sh) { /* vertical pass: [sh, cw, 3] -> [rh, cw, 3] */
        int *lo = xmalloc(sizeof(int) * (size_t)rh), *n = xmalloc(sizeof(int) * (size_t)rh);
        int32_t *k;
        int ks = pil_coeffs(sh, rh, lo, n, &k);
        for (int y = 0; y < rh; y++)
            for (int x = 0; x < cw; x++)
                for (int c = 0; c < IMG_CH; c++) {
                    int32_t ss = 1 << (PIL_PRECISION_BITS - 1);
                    for (int j = 0; j < n[y]; j++)
                        ss += (int32_t)cur[((int64_t)(lo[y] + j) * cw + x) * IMG_CH + c] *
                              k[(size_t)y * ks + j];
                    out[((int64_t)y * cw + x) * IMG_CH + c] = pil_clip8(ss);
                }
        free(lo);
        free(n);
        free(k);
    } else {
        memcpy(out, cur, (size_t)sh * cw * IMG_CH);
    }
    free(tmp);
}

/* Clip frame f as VideoProcessor.preprocess: resized, u / 255, 2 x - 1. */
static void clip_frame(const c3_media *m, int f, int W, int H, uint8_t *scratch, float *frame) {
    const uint8_t *src = m->rgb + (size_t)f * m->width * m->height * IMG_CH;
    if (m->width != W || m->height != H) {
        cond_resize_pil(src, m->width, m->height, W, H, scratch);
        src = scratch;
    }
    int64_t plane = (int64_t)W * H;
    for (int c = 0; c < IMG_CH; c++)
        for (int64_t i = 0; i < plane; i++)
            frame[c * plane + i] = 2.0f * ((float)src[i * IMG_CH + c] / 255.0f) - 1.0f;
}

/* ------------------------------------------------------------ the clip */

int cond_pixels(const c3_cond_input *in, int F, int W, int H, int tscale, int nframes,
                float **out) {
    *out = NULL;
    C3_TRY(cond_check(in, F, W, H, tscale));
    if (!cond_given(in)) return c3_fail(C3_EFAIL, "cond_pixels: no conditioning given");
    if (nframes < 1 || nframes > F) nframes = F;
    int64_t fsz = (int64_t)W * H;
    float *px = xcalloc((size_t)(IMG_CH * (int64_t)nframes * fsz), sizeof(float));
    float *frame = xmalloc(sizeof(float) * (size_t)(IMG_CH * fsz));
    /* src[f]: the clip frame that output frame f shows (-1: the picture) */
    int *src = xmalloc(sizeof(int) * (size_t)F);
    if (in->image) {
        for (int f = 0; f < F; f++)
            src[f] = -1;
    } else {
        const c3_media *v = in->video;
        int kept = max_index(in) * tscale + 1,
            first = in->keep == C3_KEEP_LAST ? v->frames - kept : 0;
        int fill = kept < F ? kept : F;
        for (int f = 0; f < F; f++)
            src[f] = first + (f < fill ? f : fill - 1);
    }
    uint8_t *scratch = in->video ? xmalloc((size_t)fsz * IMG_CH) : NULL;
    for (int f = 0, done = -2; f < nframes; f++) {
        if (src[f] != done) { /* a repeated frame is preprocessed once */
            if (src[f] < 0)
                picture_frame(in->image, W, H, frame);
            else
                clip_frame(in->video, src[f], W, H, scratch, frame);
            done = src[f];
        }
        for (int c = 0; c < IMG_CH; c++)
            memcpy(px + ((int64_t)c * nframes + f) * fsz, frame + c * fsz,
                   sizeof(float) * (size_t)fsz);
    }
    free(scratch);
    free(src);
    free(frame);
    *out = px;
    return C3_OK;
}

/* ------------------------------------------------------------ first-last */

/* Frame f of an end (a picture or a clip frame) at W x H as uint8 RGB. */
static void end_frame(const c3_media *m, int f, int W, int H, float *scratch, uint8_t *out) {
    int64_t plane = (int64_t)W * H;
    if (m->frames == 1) {
        picture_frame(m, W, H, scratch); /* [3, H, W], rounded levels / 127.5 - 1 */
        for (int64_t i = 0; i < plane; i++)
            for (int c = 0; c < IMG_CH; c++)
                out[i * IMG_CH + c] = (uint8_t)lrintf((scratch[c * plane + i] + 1.0f) * 127.5f);
        return;
    }
    const uint8_t *src = m->rgb + (size_t)f * m->width * m->height * IMG_CH;
    if (m->width != W || m->height != H)
        cond_resize_pil(src, m->width, m->height, W, H, out);
    else
        memcpy(out, src, (size_t)plane * IMG_CH);
}

int cond_first_last(const c3_media *a, const c3_media *b, int F, int W, int H, int tscale,
                    uint8_t **rgb, c3_media *clip, int *idx, int max, int *n) {
    *rgb = NULL;
    *n = 0;
    C3_TRY(check_media(a, "start", W, H));
    C3_TRY(check_media(b, "end", W, H));
    if (F < 1 || W < 1 || H < 1 || tscale < 1)
        return c3_fail(C3_EFAIL, "first-last for %d frames of %dx%d", F, W, H);
    int T = (F - 1) / tscale + 1;
    if (T < 2)
        return c3_fail(C3_EUSAGE,
                       "first-last needs a video of at least 2 latent frames; ask for frames "
                       "1 + 4k with k >= 1 (e.g. 9)");
    /* the frames each end gives and the latent frames they pin */
    int head = 1, hlat = 1, tail = tscale, tlat = 1;
    if (a->frames > 1) {
        int k = (a->frames - 1) / tscale;
        head = k * tscale + 1;
        hlat = k + 1;
    }
    if (b->frames > 1) {
        int j = (b->frames - 1) / tscale;
        tail = j * tscale + 1;
        tlat = j + 1;
    }
    if (hlat + tlat > T || head + tail > F)
        return c3_fail(C3_EUSAGE,
                       "first-last: the start pins %d and the end %d latent frames of %d (%d "
                       "frames); ask for more frames or give shorter clips",
                       hlat, tlat, T, F);
    if (hlat + tlat > max)
        return c3_fail(C3_EUSAGE, "first-last: at most %d pinned latent frames", max);
    for (int i = 0; i < hlat; i++)
        idx[(*n)++] = i;
    for (int i = T - tlat; i < T; i++)
        idx[(*n)++] = i;
    int64_t fsz = (int64_t)W * H * IMG_CH;
    uint8_t *px = xmalloc((size_t)(fsz * F));
    float *scratch = xmalloc(sizeof(float) * (size_t)fsz);
    for (int f = 0; f < head; f++)
        end_frame(a, f, W, H, scratch, px + f * fsz);
    int bfirst = b->frames > 1 ? b->frames - tail : 0;
    for (int f = 0; f < tail; f++)
        end_frame(b, bfirst + f, W, H, scratch, px + (int64_t)(F - tail + f) * fsz);
    for (int f = head; f < F - tail; f++) /* the filler: the end's first kept frame */
        memcpy(px + f * fsz, px + (int64_t)(F - tail) * fsz, (size_t)fsz);
    free(scratch);
    *rgb = px;
    *clip = (c3_media){.rgb = px, .width = W, .height = H, .frames = F};
    return C3_OK;
}

void cond_free(c3_condition *c) {
    free(c->x0);
    free(c->pinned);
    memset(c, 0, sizeof *c);
}

int cond_prepare(const c3_cond_input *in, c3_vae_enc *enc, int F, int W, int H, int tscale,
                 c3_condition *out) {
    memset(out, 0, sizeof *out);
    C3_TRY(cond_check(in, F, W, H, tscale));
    if (!cond_given(in)) return c3_fail(C3_EFAIL, "cond_prepare: no conditioning given");
    int T = (F - 1) / tscale + 1;
    uint8_t *pinned = xcalloc((size_t)T, 1);
    if (in->image) {
        pinned[0] = 1;
    } else {
        const int *idx;
        int n;
        indexes_of(in, &idx, &n);
        for (int i = 0; i < n; i++)
            pinned[idx[i]] = 1;
    }
    int last = 0;
    for (int t = 0; t < T; t++)
        last = pinned[t] ? t : last;
    /* the encoder is causal: latent frames <= last need pixel frames < last * tscale + 1 */
    int need = last * tscale + 1;
    float *px = NULL, *lat = NULL;
    int Te, h, w;
    int rc = cond_pixels(in, F, W, H, tscale, need, &px);
    if (rc == C3_OK) rc = vae_encode(enc, px, need, H, W, &lat, &Te, &h, &w);
    free(px);
    if (rc == C3_OK && Te != last + 1)
        rc = c3_fail(C3_EFAIL, "VAE encode: %d pixel frames gave %d latent frames, expected %d",
                     need, Te, last + 1);
    if (rc) {
        free(pinned);
        free(lat);
        return rc;
    }
    int C = vae_enc_channels(enc);
    int64_t hw = (int64_t)h * w;
    float *x0 = xcalloc((size_t)C * (size_t)T * (size_t)hw, sizeof(float));
    for (int c = 0; c < C; c++)
        for (int t = 0; t < Te; t++)
            if (pinned[t])
                memcpy(x0 + ((int64_t)c * T + t) * hw, lat + ((int64_t)c * Te + t) * hw,
                       sizeof(float) * (size_t)hw);
    free(lat);
    *out = (c3_condition){.T = T, .h = h, .w = w, .C = C, .x0 = x0, .pinned = pinned};
    for (int t = 0; t < T; t++)
        out->npinned += pinned[t];
    return C3_OK;
}

void cond_mix(const c3_condition *c, float *x) {
    int64_t hw = (int64_t)c->h * c->w;
    for (int ch = 0; ch < c->C; ch++)
        for (int t = 0; t < c->T; t++)
            if (c->pinned[t]) /* mask * x0 + (1 - mask) * noise with mask 1 */
                memcpy(x + ((int64_t)ch * c->T + t) * hw, c->x0 + ((int64_t)ch * c->T + t) * hw,
                       sizeof(float) * (size_t)hw);
}
