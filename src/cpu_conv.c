/* cpu_conv.c - CPU VAE operations: 3-D convolution, channel RMS norm,
 * permute, nearest upsample.
 *
 * The convolution is im2col + OpenBLAS sgemm, tiled over output rows so the
 * column buffer stays bounded (CONV_COL_BUDGET floats) whatever the image
 * size: y[Cout, n] = w[Cout, K] . col[K, n], K = Cin * kt * kh * kw, each
 * product through cpu_gemm (fixed tiles over the OpenMP threads). */
#include "backend_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

/* Floats in one im2col tile (32 MiB): big enough for efficient GEMMs, small
 * enough to stay bounded at 1024x1024 and 1024 channels. */
enum { CONV_COL_BUDGET = 8 * 1024 * 1024 };
/* Work below which loops stay single-threaded (a parallel region costs more
 * than it saves, badly so on a busy machine): elements for the simple loops
 * and im2col. */
enum { PAR_MIN = 65536, IM2COL_PAR_MIN = 1 << 20 };
/* Norm floor of F.normalize (Wan RMS_norm). */
#define CHAN_NORM_EPS 1e-12

static bool shape_is(const c3_tensor *t, int ndim, const int64_t *ne) {
    if (t->ndim != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (t->ne[i] != ne[i]) return false;
    return true;
}

static void fmt_ne(char *buf, size_t n, int ndim, const int64_t *ne) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* C3_OK when y has the shape want[ndim], else the error naming op and both shapes. */
static int out_shape(const char *op, const c3_tensor *y, int ndim, const int64_t *want) {
    if (shape_is(y, ndim, want)) return C3_OK;
    char a[96], b[96];
    fmt_ne(a, sizeof a, y->ndim, y->ne);
    fmt_ne(b, sizeof b, ndim, want);
    return c3_fail(C3_EFAIL, "cpu %s: output has shape %s, expected %s", op, a, b);
}

/* y[M, n] (row stride ldy) = w[M, K] . b[K, n] (row stride ldb). */
static void gemm_cols(int64_t M, int64_t n, int64_t K, const float *w, const float *b, int64_t ldb,
                      float *y, int64_t ldy) {
    cpu_gemm(false, M, n, K, w, K, b, ldb, 0.0f, y, ldy);
}

int cpu_conv3d(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
               const c3_tensor *bias, int ph, int pw) {
    (void)be;
    if (x->ndim != 4 || w->ndim != 5)
        return c3_fail(C3_EFAIL, "cpu conv3d: expected x [Cin, T, H, W] and w [Cout, Cin, kt, kh, kw], got %d and %d dimensions",
                       x->ndim, w->ndim);
    int64_t Cin = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3];
    int64_t Cout = w->ne[0], kt = w->ne[2], kh = w->ne[3], kw = w->ne[4];
    if (w->ne[1] != Cin)
        return c3_fail(C3_EFAIL, "cpu conv3d: weight takes %lld input channels, input has %lld",
                       (long long)w->ne[1], (long long)Cin);
    if (ph < 0 || pw < 0)
        return c3_fail(C3_EFAIL, "cpu conv3d: negative padding %d, %d", ph, pw);
    int64_t To = T - kt + 1, Ho = H + 2 * ph - kh + 1, Wo = W + 2 * pw - kw + 1;
    if (To < 1 || Ho < 1 || Wo < 1)
        return c3_fail(C3_EFAIL, "cpu conv3d: input [%lld, %lld, %lld, %lld] is smaller than the kernel %lldx%lldx%lld",
                       (long long)Cin, (long long)T, (long long)H, (long long)W, (long long)kt, (long long)kh,
                       (long long)kw);
    int64_t want[4] = {Cout, To, Ho, Wo};
    C3_TRY(out_shape("conv3d", y, 4, want));
    if (bias && c3_numel(bias) != Cout)
        return c3_fail(C3_EFAIL, "cpu conv3d: bias holds %lld elements, expected %lld",
                       (long long)c3_numel(bias), (long long)Cout);

    const float *xd = x->data, *wd = w->data;
    float *yd = y->data;
    int64_t K = Cin * kt * kh * kw;
    int64_t plane = Ho * Wo, ysz = To * plane; /* output channel stride */
    int64_t ichan = T * H * W;                  /* input channel stride */

    if (kt == 1 && kh == 1 && kw == 1 && ph == 0 && pw == 0) {
        /* pointwise: y[Cout, T*H*W] = w[Cout, Cin] . x[Cin, T*H*W] */
        gemm_cols(Cout, ichan, Cin, wd, xd, ichan, yd, ichan);
    } else {
        int64_t rows = CONV_COL_BUDGET / (K * Wo);
        if (rows < 1) rows = 1;
        if (rows > Ho) rows = Ho;
        float *col = malloc(sizeof(float) * (size_t)(K * rows * Wo));
        if (!col) return c3_fail(C3_ERESOURCE, "cpu conv3d: out of host memory for the column buffer");
        int64_t khw = kh * kw, kthw = kt * khw;
        for (int64_t to = 0; to < To; to++) {
            for (int64_t y0 = 0; y0 < Ho; y0 += rows) {
                int64_t nr = C3_MIN(rows, Ho - y0), n = nr * Wo;
                /* col[k, r * Wo + ox] = x[ci, to + dt, y0 + r + dy - ph, ox + dx - pw] (0 outside) */
#pragma omp parallel for schedule(static) if (K * n > IM2COL_PAR_MIN)
                for (int64_t k = 0; k < K; k++) {
                    int64_t ci = k / kthw, rem = k % kthw;
                    int64_t dt = rem / khw, dy = (rem % khw) / kw, dx = rem % kw;
                    const float *src = xd + ci * ichan + (to + dt) * H * W;
                    float *dst = col + k * n;
                    int64_t x0 = C3_MAX((int64_t)0, pw - dx);           /* first valid ox */
                    int64_t x1 = C3_MIN(Wo, W + pw - dx);               /* end of valid ox */
                    for (int64_t r = 0; r < nr; r++) {
                        int64_t iy = y0 + r + dy - ph;
                        float *d = dst + r * Wo;
                        if (iy < 0 || iy >= H || x1 <= x0) {
                            memset(d, 0, sizeof(float) * (size_t)Wo);
                            continue;
                        }
                        for (int64_t ox = 0; ox < x0; ox++) d[ox] = 0;
                        memcpy(d + x0, src + iy * W + x0 + dx - pw, sizeof(float) * (size_t)(x1 - x0));
                        for (int64_t ox = x1; ox < Wo; ox++) d[ox] = 0;
                    }
                }
                gemm_cols(Cout, n, K, wd, col, n, yd + to * plane + y0 * Wo, ysz);
            }
        }
        free(col);
    }
    if (bias) {
        const float *bd = bias->data;
#pragma omp parallel for schedule(static) if (Cout * ysz > PAR_MIN)
        for (int64_t co = 0; co < Cout; co++) {
            float b = bd[co], *p = yd + co * ysz;
            for (int64_t i = 0; i < ysz; i++) p[i] += b;
        }
    }
    return C3_OK;
}

int cpu_chan_rmsnorm(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *gamma,
                     const c3_tensor *bias) {
    (void)be;
    if (x->ndim < 1) return c3_fail(C3_EFAIL, "cpu chan_rmsnorm: input has no dimensions");
    int64_t C = x->ne[0], N = C ? c3_numel(x) / C : 0;
    if (c3_numel(y) != c3_numel(x))
        return c3_fail(C3_EFAIL, "cpu chan_rmsnorm: output holds %lld elements, input %lld",
                       (long long)c3_numel(y), (long long)c3_numel(x));
    if (c3_numel(gamma) != C || (bias && c3_numel(bias) != C))
        return c3_fail(C3_EFAIL, "cpu chan_rmsnorm: gamma/bias hold %lld/%lld elements, expected %lld channels",
                       (long long)c3_numel(gamma), (long long)(bias ? c3_numel(bias) : C), (long long)C);
    const float *xd = x->data, *g = gamma->data, *bd = bias ? bias->data : NULL;
    float *yd = y->data;
    float scale = sqrtf((float)C);
    /* positions in blocks: the channel loop walks rows of the block, so every
     * access is contiguous */
    enum { BLK = 256 };
    int64_t nblk = (N + BLK - 1) / BLK;
#pragma omp parallel for schedule(static) if (C * N > PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t n0 = b * BLK, nn = C3_MIN((int64_t)BLK, N - n0);
        double ss[BLK];
        float nrm[BLK]; /* max(||x[:, n]||, eps) */
        for (int64_t i = 0; i < nn; i++) ss[i] = 0;
        for (int64_t c = 0; c < C; c++) {
            const float *r = xd + c * N + n0;
            for (int64_t i = 0; i < nn; i++) ss[i] += (double)r[i] * (double)r[i];
        }
        for (int64_t i = 0; i < nn; i++) {
            double l2 = sqrt(ss[i]);
            nrm[i] = (float)(l2 > CHAN_NORM_EPS ? l2 : CHAN_NORM_EPS);
        }
        for (int64_t c = 0; c < C; c++) {
            const float *r = xd + c * N + n0;
            float *o = yd + c * N + n0, gc = g[c], bc = bd ? bd[c] : 0.0f;
            for (int64_t i = 0; i < nn; i++) o[i] = r[i] / nrm[i] * scale * gc + bc;
        }
    }
    return C3_OK;
}

int cpu_permute(c3_backend *be, c3_tensor *y, const c3_tensor *x, const int *perm) {
    (void)be;
    int nd = x->ndim;
    if (nd < 1 || nd > C3_MAX_DIMS) return c3_fail(C3_EFAIL, "cpu permute: %d dimensions", nd);
    bool seen[C3_MAX_DIMS] = {false};
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd || seen[perm[i]])
            return c3_fail(C3_EFAIL, "cpu permute: perm is not a permutation of %d dimensions", nd);
        seen[perm[i]] = true;
    }
    if (c3_numel(y) != c3_numel(x))
        return c3_fail(C3_EFAIL, "cpu permute: output holds %lld elements, input %lld",
                       (long long)c3_numel(y), (long long)c3_numel(x));
    if (y->data == x->data && c3_numel(x) > 0) return c3_fail(C3_EFAIL, "cpu permute: output aliases input");
    /* input strides, then the output's dims and matching input strides */
    int64_t xs[C3_MAX_DIMS], one = 1;
    for (int i = nd - 1; i >= 0; i--) {
        xs[i] = one;
        one *= x->ne[i];
    }
    int64_t ne[C3_MAX_DIMS], st[C3_MAX_DIMS];
    for (int i = 0; i < nd; i++) {
        ne[i] = x->ne[perm[i]];
        st[i] = xs[perm[i]];
    }
    /* merge output dims that stay adjacent in the input */
    int m = 0;
    for (int i = 0; i < nd; i++) {
        if (ne[i] == 1) continue;
        if (m > 0 && st[m - 1] == st[i] * ne[i]) {
            ne[m - 1] *= ne[i];
            st[m - 1] = st[i];
        } else {
            ne[m] = ne[i];
            st[m] = st[i];
            m++;
        }
    }
    const float *xd = x->data;
    float *yd = y->data;
    int64_t total = c3_numel(x);
    if (m <= 1) { /* identity order */
        memcpy(yd, xd, sizeof(float) * (size_t)total);
        return C3_OK;
    }
    int64_t inner = ne[m - 1], istr = st[m - 1], outer = total / inner;
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
    for (int64_t o = 0; o < outer; o++) {
        int64_t rem = o, off = 0;
        for (int d = m - 2; d >= 0; d--) {
            off += (rem % ne[d]) * st[d];
            rem /= ne[d];
        }
        const float *s = xd + off;
        float *dst = yd + o * inner;
        if (istr == 1)
            memcpy(dst, s, sizeof(float) * (size_t)inner);
        else
            for (int64_t i = 0; i < inner; i++) dst[i] = s[i * istr];
    }
    return C3_OK;
}

int cpu_upsample2x(c3_backend *be, c3_tensor *y, const c3_tensor *x) {
    (void)be;
    if (x->ndim != 4) return c3_fail(C3_EFAIL, "cpu upsample2x: input has %d dimensions, expected [C, T, H, W]", x->ndim);
    int64_t C = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3];
    int64_t want[4] = {C, T, 2 * H, 2 * W};
    C3_TRY(out_shape("upsample2x", y, 4, want));
    const float *xd = x->data;
    float *yd = y->data;
    int64_t rows = C * T * H;
#pragma omp parallel for schedule(static) if (rows * W > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *s = xd + r * W;
        float *d0 = yd + r * 4 * W, *d1 = d0 + 2 * W; /* output rows 2h and 2h+1 */
        for (int64_t i = 0; i < W; i++) d0[2 * i] = d0[2 * i + 1] = s[i];
        memcpy(d1, d0, sizeof(float) * (size_t)(2 * W));
    }
    return C3_OK;
}

/* ------------------------------------------------------------ the encoder */

int cpu_conv3d_strided(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
                       const c3_tensor *bias, const int stride[3], const int pad[4]) {
    (void)be;
    if (x->ndim != 4 || w->ndim != 5)
        return c3_fail(
            C3_EFAIL,
            "cpu conv3d_strided: expected x [Cin, T, H, W] and w [Cout, Cin, kt, kh, kw], got %d "
            "and %d dimensions",
            x->ndim, w->ndim);
    int64_t Cin = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3];
    int64_t Cout = w->ne[0], kt = w->ne[2], kh = w->ne[3], kw = w->ne[4];
    int64_t st = stride[0], sh = stride[1], sw = stride[2], top = pad[0], left = pad[2];
    if (w->ne[1] != Cin)
        return c3_fail(C3_EFAIL,
                       "cpu conv3d_strided: weight takes %lld input channels, input has %lld",
                       (long long)w->ne[1], (long long)Cin);
    if (st < 1 || sh < 1 || sw < 1 || pad[0] < 0 || pad[1] < 0 || pad[2] < 0 || pad[3] < 0)
        return c3_fail(C3_EFAIL,
                       "cpu conv3d_strided: strides must be positive and padding not negative");
    int64_t Hp = H + pad[0] + pad[1], Wp = W + pad[2] + pad[3];
    if (T < kt || Hp < kh || Wp < kw)
        return c3_fail(
            C3_EFAIL,
            "cpu conv3d_strided: input [%lld, %lld, %lld, %lld] is smaller than the kernel",
            (long long)Cin, (long long)T, (long long)H, (long long)W);
    int64_t To = (T - kt) / st + 1, Ho = (Hp - kh) / sh + 1, Wo = (Wp - kw) / sw + 1;
    int64_t want[4] = {Cout, To, Ho, Wo};
    C3_TRY(out_shape("conv3d_strided", y, 4, want));
    if (bias && c3_numel(bias) != Cout)
        return c3_fail(C3_EFAIL, "cpu conv3d_strided: bias holds %lld elements, expected %lld",
                       (long long)c3_numel(bias), (long long)Cout);
    const float *xd = x->data, *wd = w->data;
    float *yd = y->data;
    int64_t K = Cin * kt * kh * kw, khw = kh * kw, kthw = kt * khw, plane = Ho * Wo;
    /* one output frame at a time: col [K, Ho*Wo], y[:, to] = w . col */
    float *col = malloc(sizeof(float) * (size_t)(K * plane));
    if (!col)
        return c3_fail(C3_ERESOURCE,
                       "cpu conv3d_strided: out of host memory for the column buffer");
    for (int64_t to = 0; to < To; to++) {
#pragma omp parallel for schedule(static) if (K * plane > IM2COL_PAR_MIN)
        for (int64_t k = 0; k < K; k++) {
            int64_t ci = k / kthw, rem = k % kthw;
            int64_t dt = rem / khw, dy = (rem % khw) / kw, dx = rem % kw;
            const float *src = xd + (ci * T + to * st + dt) * H * W;
            float *dst = col + k * plane;
            for (int64_t oy = 0; oy < Ho; oy++) {
                int64_t iy = oy * sh + dy - top;
                for (int64_t ox = 0; ox < Wo; ox++) {
                    int64_t ix = ox * sw + dx - left;
                    dst[oy * Wo + ox] =
                        iy >= 0 && iy < H && ix >= 0 && ix < W ? src[iy * W + ix] : 0.0f;
                }
            }
        }
        gemm_cols(Cout, plane, K, wd, col, plane, yd + to * plane, To * plane);
    }
    free(col);
    if (bias) {
        const float *bd = bias->data;
        for (int64_t co = 0; co < Cout; co++)
            for (int64_t i = 0; i < To * plane; i++)
                yd[co * To * plane + i] += bd[co];
    }
    return C3_OK;
}

int cpu_avgdown3d(c3_backend *be, c3_tensor *y, const c3_tensor *x, int ft, int fs) {
    (void)be;
    if (x->ndim != 4 || y->ndim != 4 || ft < 1 || fs < 1)
        return c3_fail(C3_EFAIL, "cpu avgdown3d: expected x, y [C, T, H, W] and positive factors");
    int64_t Cin = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3], Cout = y->ne[0];
    int64_t Tp = (T + ft - 1) / ft * ft, pad = Tp - T, F = (int64_t)ft * fs * fs;
    if (H % fs || W % fs || Cout < 1 || (Cin * F) % Cout)
        return c3_fail(
            C3_EFAIL,
            "cpu avgdown3d: [%lld, %lld, %lld] by %d x %d x %d does not make %lld channels",
            (long long)Cin, (long long)H, (long long)W, ft, fs, fs, (long long)Cout);
    int64_t To = Tp / ft, Ho = H / fs, Wo = W / fs, G = Cin * F / Cout;
    int64_t want[4] = {Cout, To, Ho, Wo};
    C3_TRY(out_shape("avgdown3d", y, 4, want));
    const float *xd = x->data;
    float *yd = y->data;
    int64_t n = Cout * To * Ho * Wo;
#pragma omp parallel for schedule(static) if (n * G > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        int64_t ow = i % Wo, oh = (i / Wo) % Ho, ot = (i / (Wo * Ho)) % To, o = i / (Wo * Ho * To);
        float s = 0;
        for (int64_t g = 0; g < G; g++) {
            int64_t idx = o * G + g, c = idx / F, r = idx % F;
            int64_t a = r / (fs * fs), b = (r / fs) % fs, d = r % fs;
            int64_t t = ot * ft + a - pad; /* frames before 0 are the zero padding */
            if (t >= 0) s += xd[((c * T + t) * H + oh * fs + b) * W + ow * fs + d];
        }
        yd[i] = s / (float)G;
    }
    return C3_OK;
}
