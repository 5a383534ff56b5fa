/* audio_vae.c - Cosmos3's sound decoder on the CPU (fp32): the reference.
 *
 *   z [C, T] -> conv1 (k 7) -> for each stride s of reversed(dec_strides):
 *     snake1, conv_t1 (ConvTranspose1d k 2s, stride s, pad ceil(s/2),
 *     output_padding s % 2: length x s), res_unit1..3 (dilation 1, 3, 9:
 *     x + conv2_k1(snake2(conv1_k7_dil(snake1(x)))))
 *   -> snake1 -> conv2 (k 7, no bias) -> clamp [-1, 1]   [out_ch, T * hop]
 *
 * Widths: dec_dim * m[n - i] into block i, with m = [1] + dec_c_mults.
 * Snake (log-scale alpha, beta): x + sin^2(e^a x) / (e^b + 1e-9), per channel.
 * Weight norm folded at load: w = g v / ||v||, the norm over every axis but
 * the first (Conv1d: per output channel; ConvTranspose1d: per input channel).
 *
 * Convolutions are im2col + OpenBLAS sgemm over column tiles (bounded
 * scratch whatever the clip length), tiles split over the OpenMP threads. */
#include "audio_vae.h"

#include <cblas.h>
#include <jansson.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

void (*avae_trace_hook)(const char *name, const float *x, int64_t C, int64_t n);

/* Output columns per im2col tile. */
enum { AVAE_TILE = 2048 };
/* Residual units per block and their dilations (Oobleck). */
enum { AVAE_RES_UNITS = 3 };
static const int res_dilation[AVAE_RES_UNITS] = {1, 3, 9};
/* Kernel widths (Oobleck): the first/last convs and the residual units' first. */
enum { AVAE_K = 7 };

typedef struct {
    char *name;
    float *w, *b; /* folded weight [cout, cin, k]; bias [cout] or NULL */
    int cout, cin, k, dil, pad;
} conv1d;

typedef struct {
    char *name;
    float *w, *b; /* folded weight [cin, cout, k]; bias [cout] */
    int cin, cout, k, stride, pad;
} convt1d;

typedef struct {
    float *a, *ib; /* [C]: e^alpha and 1 / (e^beta + 1e-9) */
    int C;
} snake;

typedef struct {
    snake s1, s2;
    conv1d c1, c2;
} res_unit;

typedef struct {
    snake s1;
    convt1d ct;
    res_unit ru[AVAE_RES_UNITS];
} dec_block;

struct c3_audio_vae {
    c3_aconfig c;
    conv1d conv1, conv2;
    dec_block blk[C3_AVAE_MAX_BLOCKS];
    snake s_out;
};

/* ------------------------------------------------------------- config */

static int json_ints(json_t *o, const char *k, int *out, int max, int *n, const char *path) {
    json_t *v = json_object_get(o, k);
    if (!json_is_array(v) || json_array_size(v) < 1 || json_array_size(v) > (size_t)max)
        return c3_fail(C3_EMODEL, "%s: \"%s\" must be a list of 1 to %d integers", path, k, max);
    *n = (int)json_array_size(v);
    for (int i = 0; i < *n; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > 4096)
            return c3_fail(C3_EMODEL, "%s: \"%s\"[%d] must be an integer from 1 to 4096", path, k,
                           i);
        out[i] = (int)json_integer_value(e);
    }
    return C3_OK;
}

static int json_pos_int(json_t *o, const char *k, int def, int max, int *out, const char *path) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return C3_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max)
        return c3_fail(C3_EMODEL, "%s: \"%s\" must be an integer from 1 to %d", path, k, max);
    *out = (int)json_integer_value(v);
    return C3_OK;
}

/* latent_mean / latent_std: null, a number, or [latent_dim] numbers. */
static int json_norm_vec(json_t *o, const char *k, int n, float **out, const char *path) {
    json_t *v = json_object_get(o, k);
    *out = NULL;
    if (!v || json_is_null(v)) return C3_OK;
    float *x = xmalloc(sizeof(float) * (size_t)n);
    if (json_is_number(v)) {
        for (int i = 0; i < n; i++)
            x[i] = (float)json_number_value(v);
    } else if (json_is_array(v) && json_array_size(v) == (size_t)n) {
        for (int i = 0; i < n; i++) {
            json_t *e = json_array_get(v, (size_t)i);
            if (!json_is_number(e)) {
                free(x);
                return c3_fail(C3_EMODEL, "%s: \"%s\"[%d] must be a number", path, k, i);
            }
            x[i] = (float)json_number_value(e);
        }
    } else {
        free(x);
        return c3_fail(C3_EMODEL, "%s: \"%s\" must be null, a number or %d numbers", path, k, n);
    }
    *out = x;
    return C3_OK;
}

int avae_parse_config(const char *text, size_t len, const char *path, c3_aconfig *out) {
    memset(out, 0, sizeof *out);
    json_error_t e;
    json_t *j = json_loadb(text, len, 0, &e);
    if (!json_is_object(j)) {
        json_decref(j);
        return c3_fail(C3_EMODEL, "%s: not a JSON object (line %d: %s)", path, e.line, e.text);
    }
    int rc = C3_OK, nm = 0;
    c3_aconfig *c = out;
    json_t *dt = json_object_get(j, "dec_type");
    if (dt && !json_is_null(dt) &&
        !(json_is_string(dt) && !strcmp(json_string_value(dt), "oobleck"))) {
        rc = c3_fail(C3_EMODEL, "%s: \"dec_type\" %s is not supported (only \"oobleck\")", path,
                     json_is_string(dt) ? json_string_value(dt) : "(not a string)");
        goto done;
    }
    if ((rc = json_pos_int(j, "sampling_rate", 48000, 1 << 20, &c->sampling_rate, path))) goto done;
    if ((rc = json_pos_int(j, "vocoder_input_dim", 64, 1 << 16, &c->latent_dim, path))) goto done;
    if ((rc = json_pos_int(j, "dec_dim", 320, 1 << 16, &c->dec_dim, path))) goto done;
    if ((rc = json_pos_int(j, "dec_out_channels", 2, 8, &c->out_channels, path))) goto done;
    if ((rc = json_ints(j, "dec_strides", c->strides, C3_AVAE_MAX_BLOCKS, &c->n_blocks, path)))
        goto done;
    if ((rc = json_ints(j, "dec_c_mults", c->c_mults, C3_AVAE_MAX_BLOCKS, &nm, path))) goto done;
    if (nm != c->n_blocks) {
        rc = c3_fail(C3_EMODEL,
                     "%s: \"dec_c_mults\" has %d entries, \"dec_strides\" %d (they must match)",
                     path, nm, c->n_blocks);
        goto done;
    }
    int64_t hop = 1;
    for (int i = 0; i < c->n_blocks; i++)
        hop *= c->strides[i];
    if (hop > (1 << 20)) {
        rc = c3_fail(C3_EMODEL, "%s: the product of \"dec_strides\" (%lld) is too large", path,
                     (long long)hop);
        goto done;
    }
    c->hop = (int)hop;
    json_t *hs = json_object_get(j, "hop_size");
    if (hs && !json_is_null(hs) && !(json_is_integer(hs) && json_integer_value(hs) == hop)) {
        rc = c3_fail(C3_EMODEL,
                     "%s: \"hop_size\" differs from the product of \"dec_strides\" (%lld)", path,
                     (long long)hop);
        goto done;
    }
    if ((rc = json_norm_vec(j, "latent_mean", c->latent_dim, &c->mean, path))) goto done;
    if ((rc = json_norm_vec(j, "latent_std", c->latent_dim, &c->std, path))) goto done;
    if (!c->mean != !c->std) {
        rc =
            c3_fail(C3_EMODEL,
                    "%s: \"latent_mean\" and \"latent_std\" must both be given or both null", path);
        goto done;
    }
    c->norm = c->mean != NULL;
done:
    json_decref(j);
    if (rc) avae_config_free(out);
    return rc;
}

void avae_config_free(c3_aconfig *c) {
    free(c->mean);
    free(c->std);
    c->mean = c->std = NULL;
    c->norm = false;
}

/* ------------------------------------------------------------- weights */

static const st_tensor *find_fmt(const st_file *f, const char *fmt, const char *name) {
    char key[256];
    snprintf(key, sizeof key, fmt, name);
    return st_find(f, key);
}

/* The tensor of `shape` (ndim) or a one-line C3_EMODEL. */
static int want(const st_file *f, const st_tensor *t, const char *key, int ndim,
                const int64_t *shape) {
    if (!t) return c3_fail(C3_EMODEL, "%s: tensor %s is missing", f->path, key);
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = t->shape[i] == shape[i];
    if (!ok) {
        char got[128] = "", exp[128] = "";
        size_t a = 0, b = 0;
        for (int i = 0; i < t->ndim && a < sizeof got; i++)
            a += (size_t)snprintf(got + a, sizeof got - a, "%s%lld", i ? "," : "",
                                  (long long)t->shape[i]);
        for (int i = 0; i < ndim && b < sizeof exp; i++)
            b += (size_t)snprintf(exp + b, sizeof exp - b, "%s%lld", i ? "," : "",
                                  (long long)shape[i]);
        return c3_fail(C3_EMODEL, "%s: tensor %s has shape [%s], expected [%s]", f->path, key, got,
                       exp);
    }
    return C3_OK;
}

/* The folded weight of layer `name` (shape [d0, d1, k]); weight norm over
 * axes 1 and 2 per index of axis 0. Accepts weight_g/weight_v, the
 * parametrizations form, or a plain (already folded) weight. */
static int load_weight(const st_file *f, const char *name, int64_t d0, int64_t d1, int64_t k,
                       float **out) {
    int64_t shape[3] = {d0, d1, k}, gshape[3] = {d0, 1, 1};
    char key[256];
    const st_tensor *w = find_fmt(f, "%s.weight", name);
    if (w) {
        snprintf(key, sizeof key, "%s.weight", name);
        C3_TRY(want(f, w, key, 3, shape));
        *out = st_to_f32(w);
        return C3_OK;
    }
    const char *gf = "%s.weight_g", *vf = "%s.weight_v";
    if (!find_fmt(f, gf, name)) {
        gf = "%s.parametrizations.weight.original0";
        vf = "%s.parametrizations.weight.original1";
    }
    const st_tensor *g = find_fmt(f, gf, name), *v = find_fmt(f, vf, name);
    snprintf(key, sizeof key, gf, name);
    C3_TRY(want(f, g, key, 3, gshape));
    snprintf(key, sizeof key, vf, name);
    C3_TRY(want(f, v, key, 3, shape));
    float *gv = st_to_f32(g), *wv = st_to_f32(v);
    int64_t row = d1 * k;
    for (int64_t i = 0; i < d0; i++) {
        double ss = 0;
        for (int64_t j = 0; j < row; j++)
            ss += (double)wv[i * row + j] * wv[i * row + j];
        float s = (float)(gv[i] / sqrt(ss > 0 ? ss : 1e-30));
        for (int64_t j = 0; j < row; j++)
            wv[i * row + j] *= s;
    }
    free(gv);
    *out = wv;
    return C3_OK;
}

static int load_vec(const st_file *f, const char *name, const char *what, int64_t n, float **out) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", name, what);
    const st_tensor *t = st_find(f, key);
    int64_t s1[1] = {n}, s3[3] = {1, n, 1};
    if (t && t->ndim == 3)
        C3_TRY(want(f, t, key, 3, s3));
    else
        C3_TRY(want(f, t, key, 1, s1));
    *out = st_to_f32(t);
    return C3_OK;
}

static int load_conv(const st_file *f, conv1d *c, const char *name, int cin, int cout, int k,
                     int dil, bool bias) {
    *c = (conv1d){.name = xstrdup(name),
                  .cout = cout,
                  .cin = cin,
                  .k = k,
                  .dil = dil,
                  .pad = (k - 1) * dil / 2};
    C3_TRY(load_weight(f, name, cout, cin, k, &c->w));
    if (bias) C3_TRY(load_vec(f, name, "bias", cout, &c->b));
    return C3_OK;
}

static int load_snake(const st_file *f, snake *s, const char *name, int C) {
    float *al = NULL, *be = NULL;
    int rc = load_vec(f, name, "alpha", C, &al);
    if (!rc) rc = load_vec(f, name, "beta", C, &be);
    if (!rc) {
        s->C = C;
        s->a = xmalloc(sizeof(float) * (size_t)C);
        s->ib = xmalloc(sizeof(float) * (size_t)C);
        for (int i = 0; i < C; i++) { /* float32, as upstream's exp and reciprocal */
            s->a[i] = expf(al[i]);
            s->ib[i] = 1.0f / (expf(be[i]) + 1e-9f);
        }
    }
    free(al);
    free(be);
    return rc;
}

static void conv_free(conv1d *c) {
    free(c->name);
    free(c->w);
    free(c->b);
}
static void snake_free(snake *s) {
    free(s->a);
    free(s->ib);
}

void avae_free(c3_audio_vae *a) {
    if (!a) return;
    conv_free(&a->conv1);
    conv_free(&a->conv2);
    for (int i = 0; i < C3_AVAE_MAX_BLOCKS; i++) {
        dec_block *b = &a->blk[i];
        snake_free(&b->s1);
        free(b->ct.name);
        free(b->ct.w);
        free(b->ct.b);
        for (int r = 0; r < AVAE_RES_UNITS; r++) {
            snake_free(&b->ru[r].s1);
            snake_free(&b->ru[r].s2);
            conv_free(&b->ru[r].c1);
            conv_free(&b->ru[r].c2);
        }
    }
    snake_free(&a->s_out);
    avae_config_free(&a->c);
    free(a);
}

const c3_aconfig *avae_config(const c3_audio_vae *a) {
    return &a->c;
}

/* Width into decoder block i (and out of block i - 1). */
static int width_in(const c3_aconfig *c, int i) {
    int n = c->n_blocks, m = n - i; /* m = [1] + c_mults, index n - i */
    return c->dec_dim * (m == 0 ? 1 : c->c_mults[m - 1]);
}

static int load_all(c3_audio_vae *a, const st_file *f) {
    const c3_aconfig *c = &a->c;
    char n[160];
    C3_TRY(
        load_conv(f, &a->conv1, "decoder.conv1", c->latent_dim, width_in(c, 0), AVAE_K, 1, true));
    for (int i = 0; i < c->n_blocks; i++) {
        dec_block *b = &a->blk[i];
        int cin = width_in(c, i), cout = width_in(c, i + 1), s = c->strides[c->n_blocks - 1 - i];
        snprintf(n, sizeof n, "decoder.block.%d.snake1", i);
        C3_TRY(load_snake(f, &b->s1, n, cin));
        snprintf(n, sizeof n, "decoder.block.%d.conv_t1", i);
        b->ct = (convt1d){.name = xstrdup(n),
                          .cin = cin,
                          .cout = cout,
                          .k = 2 * s,
                          .stride = s,
                          .pad = (s + 1) / 2};
        C3_TRY(load_weight(f, n, cin, cout, 2 * s, &b->ct.w));
        C3_TRY(load_vec(f, n, "bias", cout, &b->ct.b));
        for (int r = 0; r < AVAE_RES_UNITS; r++) {
            res_unit *u = &b->ru[r];
            snprintf(n, sizeof n, "decoder.block.%d.res_unit%d.snake1", i, r + 1);
            C3_TRY(load_snake(f, &u->s1, n, cout));
            snprintf(n, sizeof n, "decoder.block.%d.res_unit%d.snake2", i, r + 1);
            C3_TRY(load_snake(f, &u->s2, n, cout));
            snprintf(n, sizeof n, "decoder.block.%d.res_unit%d.conv1", i, r + 1);
            C3_TRY(load_conv(f, &u->c1, n, cout, cout, AVAE_K, res_dilation[r], true));
            snprintf(n, sizeof n, "decoder.block.%d.res_unit%d.conv2", i, r + 1);
            C3_TRY(load_conv(f, &u->c2, n, cout, cout, 1, 1, true));
        }
    }
    C3_TRY(load_snake(f, &a->s_out, "decoder.snake1", c->dec_dim));
    return load_conv(f, &a->conv2, "decoder.conv2", c->dec_dim, c->out_channels, AVAE_K, 1, false);
}

int avae_load(c3_audio_vae **out, const char *dir) {
    *out = NULL;
    char *cpath = c3_path_join(dir, "config.json"),
         *wpath = c3_path_join(dir, "diffusion_pytorch_model.safetensors");
    char *text = NULL;
    size_t len = 0;
    c3_audio_vae *a = xcalloc(1, sizeof *a);
    st_file f = {0};
    bool opened = false;
    int rc = c3_read_file(cpath, &text, &len);
    if (rc)
        rc = c3_fail(C3_EMODEL, "%s: cannot read the sound tokenizer's config (%s)", cpath,
                     c3_errmsg());
    if (!rc) rc = avae_parse_config(text, len, cpath, &a->c);
    if (!rc) {
        rc = st_open(&f, wpath);
        opened = rc == C3_OK;
    }
    if (!rc) rc = load_all(a, &f);
    if (opened) st_close(&f);
    free(text);
    free(cpath);
    free(wpath);
    if (rc) {
        avae_free(a);
        return rc;
    }
    *out = a;
    return C3_OK;
}

const float *avae_weight(const c3_audio_vae *a, const char *name, int64_t *numel) {
    const conv1d *cv[2 + C3_AVAE_MAX_BLOCKS * AVAE_RES_UNITS * 2];
    int n = 0;
    cv[n++] = &a->conv1;
    cv[n++] = &a->conv2;
    for (int i = 0; i < a->c.n_blocks; i++) {
        const convt1d *t = &a->blk[i].ct;
        if (t->name && !strcmp(t->name, name)) {
            *numel = (int64_t)t->cin * t->cout * t->k;
            return t->w;
        }
        for (int r = 0; r < AVAE_RES_UNITS; r++) {
            cv[n++] = &a->blk[i].ru[r].c1;
            cv[n++] = &a->blk[i].ru[r].c2;
        }
    }
    for (int i = 0; i < n; i++)
        if (cv[i]->name && !strcmp(cv[i]->name, name)) {
            *numel = (int64_t)cv[i]->cout * cv[i]->cin * cv[i]->k;
            return cv[i]->w;
        }
    return NULL;
}

/* ------------------------------------------------------------- compute */

static void trace(const char *name, const float *x, int64_t C, int64_t n) {
    if (avae_trace_hook) avae_trace_hook(name, x, C, n);
}

/* y [C, n] = snake(x [C, n]) (y may be x). */
static void snake_run(const snake *s, const float *x, float *y, int64_t n) {
#pragma omp parallel for schedule(static) if ((int64_t)s->C * n > 65536)
    for (int c = 0; c < s->C; c++) {
        float a = s->a[c], ib = s->ib[c];
        const float *xr = x + (int64_t)c * n;
        float *yr = y + (int64_t)c * n;
        for (int64_t t = 0; t < n; t++) {
            float v = sinf(a * xr[t]);
            yr[t] = xr[t] + ib * (v * v);
        }
    }
}

/* y [cout, n] (+)= conv1d(x [cin, n]) with same-length padding; add: y += conv. */
static void conv_run(const conv1d *c, const float *x, float *y, int64_t n, bool add) {
    int64_t K = (int64_t)c->cin * c->k;
#pragma omp parallel if (openblas_get_num_threads() <= 1)
    {
        float *col = c->k > 1 ? xmalloc(sizeof(float) * (size_t)(K * AVAE_TILE)) : NULL;
#pragma omp for schedule(dynamic)
        for (int64_t t0 = 0; t0 < n; t0 += AVAE_TILE) {
            int64_t nt = C3_MIN((int64_t)AVAE_TILE, n - t0);
            const float *b = x + t0;
            int64_t ldb = n;
            if (col) { /* col[ci * k + j, t] = x[ci, t0 + t + j dil - pad] (0 outside) */
                for (int64_t ci = 0; ci < c->cin; ci++)
                    for (int j = 0; j < c->k; j++) {
                        float *d = col + (ci * c->k + j) * nt;
                        const float *src = x + ci * n;
                        int64_t off = t0 + (int64_t)j * c->dil - c->pad;
                        for (int64_t t = 0; t < nt; t++) {
                            int64_t s = off + t;
                            d[t] = s >= 0 && s < n ? src[s] : 0.0f;
                        }
                    }
                b = col;
                ldb = nt;
            }
            float *yt = y + t0;
            if (!add) {
                for (int64_t o = 0; o < c->cout; o++)
                    for (int64_t t = 0; t < nt; t++)
                        yt[o * n + t] = c->b ? c->b[o] : 0.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->cout, (blasint)nt, (blasint)K,
                        1.0f, c->w, (blasint)K, b, (blasint)ldb, 1.0f, yt, (blasint)n);
            if (add && c->b)
                for (int64_t o = 0; o < c->cout; o++)
                    for (int64_t t = 0; t < nt; t++)
                        yt[o * n + t] += c->b[o];
        }
        free(col);
    }
}

/* y [cout, n * s] = conv_transpose1d(x [cin, n]): y[o, i s + j - pad] +=
 * sum_ci w[ci, o, j] x[ci, i]. Per tile of input columns: P[o k + j, i] =
 * w^T . x, then scattered. Output tiles are disjoint except at their edges,
 * so tiles run in two passes (even, then odd) to keep the sums race-free. */
static void convt_run(const convt1d *c, const float *x, float *y, int64_t n) {
    int64_t N = n * c->stride, OK = (int64_t)c->cout * c->k;
    for (int64_t o = 0; o < c->cout; o++)
        for (int64_t t = 0; t < N; t++)
            y[o * N + t] = c->b[o];
    /* input tile long enough that neighbours of the same parity never overlap */
    int64_t tile = C3_MAX((int64_t)AVAE_TILE / c->stride, (int64_t)c->k);
    int64_t ntiles = (n + tile - 1) / tile;
    for (int pass = 0; pass < 2; pass++) {
#pragma omp parallel if (openblas_get_num_threads() <= 1)
        {
            float *P = xmalloc(sizeof(float) * (size_t)(OK * tile));
#pragma omp for schedule(dynamic)
            for (int64_t ti = pass; ti < ntiles; ti += 2) {
                int64_t i0 = ti * tile, ni = C3_MIN(tile, n - i0);
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)OK, (blasint)ni,
                            c->cin, 1.0f, c->w, (blasint)OK, x + i0, (blasint)n, 0.0f, P,
                            (blasint)ni);
                for (int64_t o = 0; o < c->cout; o++)
                    for (int j = 0; j < c->k; j++) {
                        const float *pr = P + (o * c->k + j) * ni;
                        float *yr = y + o * N;
                        for (int64_t i = 0; i < ni; i++) {
                            int64_t t = (i0 + i) * c->stride + j - c->pad;
                            if (t >= 0 && t < N) yr[t] += pr[i];
                        }
                    }
            }
            free(P);
        }
    }
}

int avae_decode(const c3_audio_vae *a, const float *z, int64_t T, float *wave, float *preclamp) {
    const c3_aconfig *c = &a->c;
    if (T < 1) return c3_fail(C3_EINPUT, "sound decode: no latent frames");
    int64_t N = T * c->hop;
    /* the largest activation: width_in(i) x the length after block i - 1 */
    int64_t cap = (int64_t)c->latent_dim * T, len = T;
    for (int i = 0; i <= c->n_blocks; i++) {
        cap = C3_MAX(cap, (int64_t)width_in(c, i) * len);
        if (i < c->n_blocks) {
            len *= c->strides[c->n_blocks - 1 - i];
            cap = C3_MAX(cap, (int64_t)width_in(c, i + 1) * len);
        }
    }
    float *x = malloc(sizeof(float) * (size_t)cap), *h = malloc(sizeof(float) * (size_t)cap),
          *g = malloc(sizeof(float) * (size_t)cap);
    float *zn = NULL;
    if (!x || !h || !g) {
        free(x);
        free(h);
        free(g);
        return c3_fail(C3_ERESOURCE, "sound decode: out of host memory (%lld floats per buffer)",
                       (long long)cap);
    }
    if (c->norm) { /* z * std + mean */
        zn = xmalloc(sizeof(float) * (size_t)(c->latent_dim * T));
        for (int64_t ch = 0; ch < c->latent_dim; ch++)
            for (int64_t t = 0; t < T; t++)
                zn[ch * T + t] = z[ch * T + t] * c->std[ch] + c->mean[ch];
        z = zn;
    }
    char name[64];
    len = T;
    conv_run(&a->conv1, z, x, len, false); /* [width_in(0), T] */
    trace("conv1", x, width_in(c, 0), len);
    for (int i = 0; i < c->n_blocks; i++) {
        const dec_block *b = &a->blk[i];
        snake_run(&b->s1, x, h, len);
        snprintf(name, sizeof name, "block%d.snake1", i);
        trace(name, h, b->ct.cin, len);
        convt_run(&b->ct, h, x, len); /* [cout, len * s] */
        len *= b->ct.stride;
        snprintf(name, sizeof name, "block%d.conv_t1", i);
        trace(name, x, b->ct.cout, len);
        for (int r = 0; r < AVAE_RES_UNITS; r++) {
            const res_unit *u = &b->ru[r];
            snake_run(&u->s1, x, h, len);
            conv_run(&u->c1, h, g, len, false);
            snake_run(&u->s2, g, g, len);
            conv_run(&u->c2, g, x, len, true); /* x += conv2(...) */
            if (r == 0) {
                snprintf(name, sizeof name, "block%d.res_unit1", i);
                trace(name, x, b->ct.cout, len);
            }
        }
        snprintf(name, sizeof name, "block%d", i);
        trace(name, x, b->ct.cout, len);
    }
    snake_run(&a->s_out, x, h, len);
    trace("snake1", h, c->dec_dim, len);
    conv_run(&a->conv2, h, wave, len, false); /* [out_ch, N] */
    int64_t nw = (int64_t)c->out_channels * N;
    if (preclamp) memcpy(preclamp, wave, sizeof(float) * (size_t)nw);
    for (int64_t i = 0; i < nw; i++)
        wave[i] = wave[i] < -1.0f ? -1.0f : wave[i] > 1.0f ? 1.0f : wave[i];
    free(x);
    free(h);
    free(g);
    free(zn);
    return C3_OK;
}

int64_t avae_sound_len(int frames, double fps, int sampling_rate, int hop) {
    if (frames < 1 || !(fps > 0) || sampling_rate < 1 || hop < 1) return 0;
    int64_t samples = (int64_t)((double)frames / fps * (double)sampling_rate); /* int() truncates */
    return (samples + hop - 1) / hop;
}
