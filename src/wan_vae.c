/* wan_vae.c - the Wan2.2 VAE decoder (diffusers AutoencoderKLWan with
 * is_residual, spec section 6) on the backend table.
 *
 * Structure (channels from c3_vconfig: dims = base * [mult[-1], mult reversed]):
 *   post_quant_conv (1x1x1, all frames at once)
 *   per latent frame ("chunk"):
 *     conv_in (causal 3x3x3)
 *     mid: ResBlock, single-head spatial attention per frame, ResBlock
 *     up_blocks[i]: (num_res_blocks + 1) ResBlocks, then the upsampler
 *       (upsample3d: causal (3,1,1) time conv to 2C, interleave in time,
 *        nearest 2x, 3x3 conv; upsample2d: nearest 2x, 3x3 conv), plus the
 *       DupUp3D shortcut of the block input (channel repeat + pixel/time
 *       shuffle; the first chunk keeps only its last frame)
 *     norm_out, SiLU, conv_out (causal 3x3x3), unpatchify, clamp [-1, 1]
 *
 * Causal cache. Every temporal-kernel conv sees [history, x] where history
 * holds the last kt - 1 = CACHE_T input frames of the previous chunks, zeros
 * before the first. This reproduces diffusers' feat_cache exactly (a chunk
 * of one frame caches [previous last frame, frame]; the first chunk pads with
 * zeros). The upsample3d time conv is skipped on the first chunk ("Rep") and
 * its history starts at zero on the second. While a conv's history is still
 * all zeros and the chunk has one frame, only the last temporal tap sees
 * data, so the conv runs as a 2-D conv with that tap (3x less work on the
 * first chunk, i.e. for every image).
 *
 * Layouts: activations are [C, T, H, W]; histories are time-major
 * [CACHE_T, C, H*W] so that joining them with a chunk is a row copy. */
#include "wan_vae.h"
#include "wan_vae_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void (*vae_trace_hook)(const char *name, int chunk, const c3_tensor *t) = NULL;
vae_profile *vae_prof = NULL;
const char *const vae_prof_names[VAE_PROF_N] = {"conv",     "norm+silu", "history copies",
                                                "upsample", "dupup",     "attention",
                                                "layout",   "copies",    "download"};

/* Profiling (vae_prof set): wait for the device before and after an op and add
 * the wall time between to its kind, so the op's device work is counted. */
static int prof_begin(c3_backend *be, double *t0) {
    if (!vae_prof) return C3_OK;
    C3_TRY(be->sync(be));
    *t0 = c3_now();
    return C3_OK;
}
static int prof_end(c3_backend *be, int k, double t0, int rc) {
    if (!vae_prof || rc) return rc;
    rc = be->sync(be);
    vae_prof->s[k] += c3_now() - t0;
    vae_prof->n[k]++;
    return rc;
}
/* In a function with rc, v and an out label: rc = call (timed into kind k), out on failure. */
#define PROF_TRY(k, call)                                                                          \
    do {                                                                                           \
        double t0_ = 0;                                                                            \
        if ((rc = prof_begin(v->be, &t0_))) goto out;                                              \
        if ((rc = prof_end(v->be, (k), t0_, (call)))) goto out;                                    \
    } while (0)

/* Frames of causal history kept per temporal conv (diffusers CACHE_T). */
enum { VAE_CACHE_T = 2 };
/* Spatial upsampling factor of every up block that upsamples (DupUp3D factor_s). */
enum { VAE_UP_S = 2 };
/* Temporal factor of an upsample3d block. */
enum { VAE_UP_T = 2 };
/* Output image channels promised by wan_vae.h. */
enum { VAE_IMG_CH = 3 };
enum { NAME_MAX_LEN = 160 };

typedef enum { UP_NONE, UP_2D, UP_3D } up_mode;

typedef struct {
    int cin, cout, nres;
    vres *res;
    up_mode mode;
    vconv time_conv, resample; /* resample: the 3x3 conv after nearest 2x */
    int ft, fs, repeats;       /* DupUp3D shortcut factors */
} vup;

struct c3_vae {
    c3_backend *be;
    c3_vconfig cfg;
    int z_dim, patch, dec_out, img_ch;
    vconv post_quant, conv_in, conv_out;
    vres mid[2];
    vattn attn;
    vup *up;
    int nup;
    c3_tensor norm_out; /* [C] */
    vconv **convs;      /* every conv, for history resets */
    int nconvs;
    bool cl;     /* decode in padded channels-last layout (backend vcl_* ops) */
    int cl_tcap; /* most frames a chunk has at any level (staging size) */
    /* one-frame decodes replayed as a recorded graph (backends with graph
     * ops): input and output buffers kept for one latent size; the first
     * decode of a size runs eagerly, the second records, later ones replay */
    struct {
        int h, w, state; /* state: 0 none, 1 seen once, 2 recorded */
        c3_tensor z, img;
        void *exec;
    } g;
};

/* ------------------------------------------------------------------ helpers */

static int act4(c3_vae *v, c3_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return c3_alloc(v->be, t, v->be->act_dtype, C3_MEM_ACT, 4, a, b, c, d);
}

static c3_tensor view(const c3_tensor *t, int64_t off, int ndim, ...) {
    int64_t ne[C3_MAX_DIMS];
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++)
        ne[i] = va_arg(ap, int64_t);
    va_end(ap);
    return c3_view(t, off, ndim, ne);
}

/* Zero a tensor through the upload path (backends need not zero allocations). */
static int zero_fill(c3_vae *v, c3_tensor *t) {
    size_t n = (size_t)c3_numel(t);
    float *z = xcalloc(n ? n : 1, sizeof(float));
    int rc = v->be->upload(v->be, t, z, C3_F32);
    free(z);
    return rc;
}

static void trace(const char *name, int chunk, const c3_tensor *t) {
    if (vae_trace_hook) vae_trace_hook(name, chunk, t);
}

/* ------------------------------------------------------------------ loading */

/* Upload checkpoint tensor `name` (checked against shape[ndim]) into t with
 * the shape up[up_ndim] (same element count). */
static int load_t(c3_vae *v, const c3_ckpt *ck, c3_tensor *t, const char *name, int ndim,
                  const int64_t *shape, int up_ndim, const int64_t *up) {
    const st_tensor *s = ckpt_get(ck, &ck->vae, name, ndim, shape);
    if (!s) return C3_EMODEL; /* ckpt_get named the tensor and the problem */
    C3_TRY(v->be->alloc(v->be, t, v->be->weight_dtype, up_ndim, up, C3_MEM_WEIGHTS));
    return v->be->upload(v->be, t, s->data, s->dtype);
}

static int load_vec(c3_vae *v, const c3_ckpt *ck, c3_tensor *t, const char *name, int ndim,
                    int64_t n) {
    int64_t shape[4] = {n, 1, 1, 1};
    return load_t(v, ck, t, name, ndim, shape, 1, &n);
}

/* A conv "<prefix>.weight/.bias". twod: stored as Conv2d [Cout, Cin, kh, kw]. */
int load_conv(c3_vae *v, const c3_ckpt *ck, vconv *c, const char *prefix, int cin, int cout, int kt,
              int kh, int kw, bool twod) {
    char name[NAME_MAX_LEN];
    memset(c, 0, sizeof *c);
    c->cin = cin;
    c->cout = cout;
    c->kt = kt;
    c->kh = kh;
    c->kw = kw;
    c->pad = kh / 2;
    if (kt != 1 && kt - 1 != VAE_CACHE_T)
        return c3_fail(C3_EFAIL, "VAE %s: temporal kernel %d is not supported (1 or %d)", prefix,
                       kt, VAE_CACHE_T + 1);
    int64_t s5[5] = {cout, cin, kt, kh, kw}, s4[4] = {cout, cin, kh, kw};
    snprintf(name, sizeof name, "%s.weight", prefix);
    C3_TRY(load_t(v, ck, &c->w, name, twod ? 4 : 5, twod ? s4 : s5, 5, s5));
    snprintf(name, sizeof name, "%s.bias", prefix);
    C3_TRY(load_vec(v, ck, &c->b, name, 1, cout));
    if (v->cl) {
        /* the channels-last path needs only the reordered weight */
        c3_backend *be = v->be;
        int64_t n = C3_VCL_WEIGHT_NUMEL(cout, cin, kt * kh * kw);
        C3_TRY(c3_alloc(be, &c->wcl, C3_BF16, C3_MEM_WEIGHTS, 1, n));
        C3_TRY(be->vcl_weight(be, &c->wcl, &c->w));
        c3_free(&c->w);
    } else if (kt > 1) {
        /* tap-major copy [kt, Cout, Cin, kh*kw], keep row kt - 1 */
        c3_backend *be = v->be;
        int64_t khw = (int64_t)kh * kw;
        c3_tensor tmp = {0};
        C3_TRY(c3_alloc(be, &tmp, be->weight_dtype, C3_MEM_ACT, 4, (int64_t)kt, (int64_t)cout,
                        (int64_t)cin, khw));
        c3_tensor w4 = view(&c->w, 0, 4, (int64_t)cout, (int64_t)cin, (int64_t)kt, khw);
        static const int to_tap_major[4] = {2, 0, 1, 3};
        int64_t s1[5] = {cout, cin, 1, kh, kw};
        int rc = be->permute(be, &tmp, &w4, to_tap_major);
        if (rc == C3_OK) rc = be->alloc(be, &c->wlast, be->weight_dtype, 5, s1, C3_MEM_WEIGHTS);
        c3_tensor last = c3_rows(&tmp, kt - 1, 1);
        if (rc == C3_OK) rc = be->copy(be, &c->wlast, &last);
        c3_free(&tmp);
        C3_TRY(rc);
    }
    v->convs = xrealloc(v->convs, (size_t)(v->nconvs + 1) * sizeof *v->convs);
    v->convs[v->nconvs++] = c;
    return C3_OK;
}

int load_res(c3_vae *v, const c3_ckpt *ck, vres *r, const char *prefix, int cin, int cout) {
    char name[NAME_MAX_LEN];
    memset(r, 0, sizeof *r);
    snprintf(name, sizeof name, "%s.norm1.gamma", prefix);
    C3_TRY(load_vec(v, ck, &r->g1, name, 4, cin));
    snprintf(name, sizeof name, "%s.norm2.gamma", prefix);
    C3_TRY(load_vec(v, ck, &r->g2, name, 4, cout));
    snprintf(name, sizeof name, "%s.conv1", prefix);
    C3_TRY(load_conv(v, ck, &r->conv1, name, cin, cout, 3, 3, 3, false));
    snprintf(name, sizeof name, "%s.conv2", prefix);
    C3_TRY(load_conv(v, ck, &r->conv2, name, cout, cout, 3, 3, 3, false));
    r->has_shortcut = cin != cout;
    if (r->has_shortcut) {
        snprintf(name, sizeof name, "%s.conv_shortcut", prefix);
        C3_TRY(load_conv(v, ck, &r->shortcut, name, cin, cout, 1, 1, 1, false));
    }
    return C3_OK;
}

int load_attn(c3_vae *v, const c3_ckpt *ck, vattn *a, const char *prefix, int dim) {
    char name[NAME_MAX_LEN];
    a->dim = dim;
    snprintf(name, sizeof name, "%s.norm.gamma", prefix);
    C3_TRY(load_vec(v, ck, &a->gamma, name, 3, dim));
    int64_t sq[4] = {3 * (int64_t)dim, dim, 1, 1}, sp[4] = {dim, dim, 1, 1};
    snprintf(name, sizeof name, "%s.to_qkv.weight", prefix);
    C3_TRY(load_t(v, ck, &a->wqkv, name, 4, sq, 2, sq));
    snprintf(name, sizeof name, "%s.to_qkv.bias", prefix);
    C3_TRY(load_vec(v, ck, &a->bqkv, name, 1, 3 * (int64_t)dim));
    snprintf(name, sizeof name, "%s.proj.weight", prefix);
    C3_TRY(load_t(v, ck, &a->wproj, name, 4, sp, 2, sp));
    snprintf(name, sizeof name, "%s.proj.bias", prefix);
    C3_TRY(load_vec(v, ck, &a->bproj, name, 1, dim));
    return C3_OK;
}

void free_conv(vconv *c) {
    c3_free(&c->w);
    c3_free(&c->b);
    c3_free(&c->wlast);
    c3_free(&c->wcl);
    c3_free(&c->hist);
    c->hist_live = false;
}

void free_res(vres *r) {
    c3_free(&r->g1);
    c3_free(&r->g2);
    free_conv(&r->conv1);
    free_conv(&r->conv2);
    free_conv(&r->shortcut);
}

static void graph_drop(c3_vae *v) {
    if (v->g.exec) v->be->graph_free(v->be, v->g.exec);
    c3_free(&v->g.z);
    c3_free(&v->g.img);
    memset(&v->g, 0, sizeof v->g);
}

void vae_free(c3_vae *v) {
    if (!v) return;
    graph_drop(v);
    free_conv(&v->post_quant);
    free_conv(&v->conv_in);
    free_conv(&v->conv_out);
    for (int i = 0; i < 2; i++)
        free_res(&v->mid[i]);
    c3_free(&v->attn.gamma);
    c3_free(&v->attn.wqkv);
    c3_free(&v->attn.bqkv);
    c3_free(&v->attn.wproj);
    c3_free(&v->attn.bproj);
    for (int i = 0; i < v->nup; i++) {
        vup *u = &v->up[i];
        for (int r = 0; u->res && r < u->nres; r++)
            free_res(&u->res[r]);
        free(u->res);
        free_conv(&u->time_conv);
        free_conv(&u->resample);
    }
    free(v->up);
    c3_free(&v->norm_out);
    free(v->convs);
    free(v);
}

static int vae_load_(c3_vae *v, const c3_ckpt *ck) {
    const c3_vconfig *cf = &v->cfg;
    const char *path = ck->vae.path;
    if (!cf->is_residual)
        return c3_fail(C3_EMODEL, "%s: only the Wan2.2 VAE (is_residual true) is supported", path);
    int n = cf->n_mult;
    const int *dims = cf->dec_dims; /* computed and bounded by ckpt_parse_vconfig */
    v->z_dim = cf->z_dim;
    v->patch = cf->patch_size;

    C3_TRY(load_conv(v, ck, &v->post_quant, "post_quant_conv", v->z_dim, v->z_dim, 1, 1, 1, false));
    C3_TRY(load_conv(v, ck, &v->conv_in, "decoder.conv_in", v->z_dim, dims[0], 3, 3, 3, false));
    C3_TRY(load_res(v, ck, &v->mid[0], "decoder.mid_block.resnets.0", dims[0], dims[0]));
    C3_TRY(load_attn(v, ck, &v->attn, "decoder.mid_block.attentions.0", dims[0]));
    C3_TRY(load_res(v, ck, &v->mid[1], "decoder.mid_block.resnets.1", dims[0], dims[0]));

    v->up = xcalloc((size_t)n, sizeof *v->up);
    v->nup = n;
    char name[NAME_MAX_LEN];
    for (int i = 0; i < n; i++) {
        vup *u = &v->up[i];
        u->cin = dims[i];
        u->cout = dims[i + 1];
        u->nres = cf->num_res_blocks + 1;
        u->res = xcalloc((size_t)u->nres, sizeof *u->res);
        for (int r = 0; r < u->nres; r++) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.resnets.%d", i, r);
            C3_TRY(load_res(v, ck, &u->res[r], name, r ? u->cout : u->cin, u->cout));
        }
        bool up_flag = i != n - 1;
        bool tup = up_flag && cf->temporal_down[cf->n_tdown - 1 - i];
        u->mode = !up_flag ? UP_NONE : tup ? UP_3D : UP_2D;
        if (u->mode == UP_3D) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.upsampler.time_conv", i);
            C3_TRY(load_conv(v, ck, &u->time_conv, name, u->cout, 2 * u->cout, 3, 1, 1, false));
        }
        if (u->mode != UP_NONE) {
            snprintf(name, sizeof name, "decoder.up_blocks.%d.upsampler.resample.1", i);
            C3_TRY(load_conv(v, ck, &u->resample, name, u->cout, u->cout, 1, 3, 3, true));
            u->ft = tup ? VAE_UP_T : 1;
            u->fs = VAE_UP_S;
            int64_t f = (int64_t)u->cout * u->ft * u->fs * u->fs;
            if (f % u->cin)
                return c3_fail(
                    C3_EMODEL,
                    "%s: up block %d: %d output channels x %d cannot repeat %d input channels",
                    path, i, u->cout, u->ft * u->fs * u->fs, u->cin);
            u->repeats = (int)(f / u->cin);
        }
    }
    int clast = dims[n];
    C3_TRY(load_vec(v, ck, &v->norm_out, "decoder.norm_out.gamma", 4, clast));
    /* conv_out's width decides the image channels after unpatchify */
    int64_t so[5] = {-1, clast, 3, 3, 3};
    const st_tensor *wo = ckpt_get(ck, &ck->vae, "decoder.conv_out.weight", 5, so);
    if (!wo) return C3_EMODEL;
    int pp = v->patch * v->patch;
    if (wo->shape[0] != (int64_t)VAE_IMG_CH * pp)
        return c3_fail(C3_EMODEL,
                       "%s: decoder.conv_out has %lld channels; with patch_size %d that is not %d "
                       "image channels",
                       path, (long long)wo->shape[0], v->patch, VAE_IMG_CH);
    v->dec_out = (int)wo->shape[0];
    if (v->dec_out % pp || v->dec_out / pp != VAE_IMG_CH)
        return c3_fail(C3_EMODEL,
                       "%s: decoder.conv_out has %d channels; with patch_size %d that is not %d "
                       "image channels",
                       path, v->dec_out, v->patch, VAE_IMG_CH);
    v->img_ch = VAE_IMG_CH;
    C3_TRY(load_conv(v, ck, &v->conv_out, "decoder.conv_out", clast, v->dec_out, 3, 3, 3, false));
    return C3_OK;
}

/* The channels-last decode: a backend with the vcl_* ops in bf16, channel
 * counts that are multiples of 8, an even number of output channels;
 * COSMOS3_VAE_CL=0 keeps the generic ops (for comparisons). */
static bool cl_usable(const c3_vconfig *cf, const c3_backend *be) {
    const char *e = getenv("COSMOS3_VAE_CL");
    if (e && !strcmp(e, "0")) return false;
    if (!be->vcl_weight || !be->vcl_conv || !be->vcl_norm || !be->vcl_upsample || !be->vcl_dupup ||
        !be->vcl_layout || !be->vcl_zero || be->act_dtype != C3_BF16)
        return false;
    if (cf->z_dim % 8 || cf->patch_size % 2 || cf->n_mult < 1 || cf->n_mult > 8) return false;
    for (int i = 0; i < cf->n_mult; i++)
        if (cf->decoder_base_dim * cf->dim_mult[i] % 8) return false;
    return true;
}

int vae_load(c3_vae **out, const c3_ckpt *ck, c3_backend *be) {
    *out = NULL;
    if (!ck->has_vae)
        return c3_fail(C3_EMODEL,
                       "%s: the checkpoint was opened without its VAE (vae/ is needed to decode)",
                       ck->dir);
    c3_vae *v = xcalloc(1, sizeof *v);
    v->be = be;
    v->cfg = ck->v;
    v->cl = cl_usable(&ck->v, be);
    int rc = vae_load_(v, ck);
    if (rc != C3_OK) {
        vae_free(v);
        return rc;
    }
    *out = v;
    return C3_OK;
}

c3_vae *vae_context(c3_backend *be) {
    c3_vae *v = xcalloc(1, sizeof *v);
    v->be = be;
    return v;
}

/* ------------------------------------------------------------------ layers */

/* y = conv(x), x [Cin, T, H, W]. A temporal conv reads [history, x] and, when
 * keep, leaves the last kt - 1 frames of that sequence as the next history. */
int conv_fwd(c3_vae *v, vconv *cv, const c3_tensor *x, c3_tensor *y, bool keep) {
    c3_backend *be = v->be;
    int64_t Cin = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3], HW = H * W;
    if (Cin != cv->cin)
        return c3_fail(C3_EFAIL, "VAE conv: input has %lld channels, the weight takes %d",
                       (long long)Cin, cv->cin);
    int64_t Ho = H + 2 * cv->pad - cv->kh + 1, Wo = W + 2 * cv->pad - cv->kw + 1;
    C3_TRY(act4(v, y, cv->cout, T, Ho, Wo));
    int rc = C3_OK;
    c3_tensor stage = {0}, xin = {0};
    int64_t L = cv->kt - 1; /* history frames */
    if (L == 0) {
        rc = be->conv3d(be, y, x, &cv->w, &cv->b, cv->pad, cv->pad);
        goto out;
    }
    if (!cv->hist_live && T == 1) {
        /* zero history: only the last temporal tap sees data */
        if ((rc = be->conv3d(be, y, x, &cv->wlast, &cv->b, cv->pad, cv->pad))) goto out;
        if (keep) {
            if ((rc = c3_alloc(be, &cv->hist, be->act_dtype, C3_MEM_ACT, 3, L, Cin, HW))) goto out;
            c3_tensor old = c3_rows(&cv->hist, 0, L - 1), last = c3_rows(&cv->hist, L - 1, 1);
            if ((rc = zero_fill(v, &old))) goto out;
            if ((rc = be->copy(be, &last, x))) goto out; /* [Cin, 1, HW] == [1, Cin, HW] */
            cv->hist_live = true;
        }
        goto out;
    }
    /* stage [L + T, Cin, HW] (time-major) = [history, x] */
    if ((rc = c3_alloc(be, &stage, be->act_dtype, C3_MEM_ACT, 3, L + T, Cin, HW))) goto out;
    c3_tensor front = c3_rows(&stage, 0, L), back = c3_rows(&stage, L, T);
    if (cv->hist_live)
        rc = be->copy(be, &front, &cv->hist);
    else
        rc = zero_fill(v, &front);
    if (rc) goto out;
    static const int swap01[3] = {1, 0, 2};
    c3_tensor x3 = view(x, 0, 3, Cin, T, HW);
    if ((rc = be->permute(be, &back, &x3, swap01))) goto out;
    if ((rc = c3_alloc(be, &xin, be->act_dtype, C3_MEM_ACT, 3, Cin, L + T, HW))) goto out;
    if ((rc = be->permute(be, &xin, &stage, swap01))) goto out;
    c3_tensor xin4 = view(&xin, 0, 4, Cin, L + T, H, W);
    if ((rc = be->conv3d(be, y, &xin4, &cv->w, &cv->b, cv->pad, cv->pad))) goto out;
    if (keep) {
        if (!cv->hist_live &&
            (rc = c3_alloc(be, &cv->hist, be->act_dtype, C3_MEM_ACT, 3, L, Cin, HW)))
            goto out;
        c3_tensor tail = c3_rows(&stage, T, L);
        if ((rc = be->copy(be, &cv->hist, &tail))) goto out;
        cv->hist_live = true;
    }
out:
    c3_free(&stage);
    c3_free(&xin);
    if (rc) c3_free(y);
    return rc;
}

/* ResBlock: conv2(silu(rms2(conv1(silu(rms1(x)))))) + shortcut(x). */
int res_fwd(c3_vae *v, vres *r, const c3_tensor *x, c3_tensor *y, bool keep) {
    c3_backend *be = v->be;
    c3_tensor h = {0}, a = {0}, b = {0};
    int rc;
    if (r->has_shortcut && (rc = conv_fwd(v, &r->shortcut, x, &h, false))) goto out;
    if ((rc = act4(v, &a, x->ne[0], x->ne[1], x->ne[2], x->ne[3]))) goto out;
    if ((rc = be->chan_rmsnorm(be, &a, x, &r->g1, NULL))) goto out;
    if ((rc = be->silu(be, &a, &a))) goto out;
    if ((rc = conv_fwd(v, &r->conv1, &a, &b, keep))) goto out;
    c3_free(&a);
    if ((rc = be->chan_rmsnorm(be, &b, &b, &r->g2, NULL))) goto out;
    if ((rc = be->silu(be, &b, &b))) goto out;
    if ((rc = conv_fwd(v, &r->conv2, &b, y, keep))) goto out;
    rc = be->add(be, y, r->has_shortcut ? &h : x);
out:
    c3_free(&h);
    c3_free(&a);
    c3_free(&b);
    if (rc) c3_free(y);
    return rc;
}

/* Mid-block attention: one head over the H*W positions of each frame. */
int attn_fwd(c3_vae *v, vattn *at, const c3_tensor *x, c3_tensor *y) {
    c3_backend *be = v->be;
    int64_t C = at->dim, T = x->ne[1], HW = x->ne[2] * x->ne[3], N = T * HW;
    c3_tensor nrm = {0}, tok = {0}, q = {0}, k = {0}, val = {0}, o = {0}, p = {0};
    int rc;
    static const int tr2[2] = {1, 0};
    if ((rc = c3_alloc(be, &nrm, be->act_dtype, C3_MEM_ACT, 2, C, N))) goto out;
    if ((rc = be->chan_rmsnorm(be, &nrm, x, &at->gamma, NULL))) goto out;
    if ((rc = c3_alloc(be, &tok, be->act_dtype, C3_MEM_ACT, 2, N, C))) goto out; /* [N, C] */
    if ((rc = be->permute(be, &tok, &nrm, tr2))) goto out;
    c3_free(&nrm);
    c3_tensor *qkv[3] = {&q, &k, &val};
    for (int i = 0; i < 3; i++) {
        c3_tensor wi = c3_rows(&at->wqkv, i * C, C), bi = c3_rows(&at->bqkv, i * C, C);
        if ((rc = c3_alloc(be, qkv[i], be->act_dtype, C3_MEM_ACT, 3, N, (int64_t)1, C)))
            goto out; /* [N, 1, C] */
        if ((rc = be->linear(be, qkv[i], &tok, &wi, &bi, false))) goto out;
    }
    c3_free(&tok);
    if ((rc = c3_alloc(be, &o, be->act_dtype, C3_MEM_ACT, 3, N, (int64_t)1, C))) goto out;
    float scale = 1.0f / sqrtf((float)C);
    for (int64_t t = 0; t < T; t++) {
        c3_tensor qt = c3_rows(&q, t * HW, HW), kt = c3_rows(&k, t * HW, HW),
                  vt = c3_rows(&val, t * HW, HW), ot = c3_rows(&o, t * HW, HW);
        c3_kvseg seg = {.k = &kt, .v = &vt, .n = HW, .valid = HW};
        if ((rc = be->attention(be, &ot, &qt, &seg, 1, false, scale))) goto out;
    }
    c3_free(&q);
    c3_free(&k);
    c3_free(&val);
    if ((rc = c3_alloc(be, &p, be->act_dtype, C3_MEM_ACT, 2, N, C))) goto out;
    if ((rc = be->linear(be, &p, &o, &at->wproj, &at->bproj, false))) goto out;
    if ((rc = act4(v, y, C, T, x->ne[2], x->ne[3]))) goto out;
    c3_tensor y2 = view(y, 0, 2, C, N);
    if ((rc = be->permute(be, &y2, &p, tr2))) goto out;
    rc = be->add(be, y, x);
out:
    c3_free(&nrm);
    c3_free(&tok);
    c3_free(&q);
    c3_free(&k);
    c3_free(&val);
    c3_free(&o);
    c3_free(&p);
    if (rc) c3_free(y);
    return rc;
}

/* Resample (upsample2d / upsample3d) of x [C, T, H, W]. */
static int upsample_fwd(c3_vae *v, vup *u, const c3_tensor *x, c3_tensor *y, bool first,
                        bool keep) {
    c3_backend *be = v->be;
    int64_t C = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3];
    c3_tensor tc = {0}, il = {0}, up = {0};
    const c3_tensor *src = x;
    int rc = C3_OK;
    if (u->mode == UP_3D && !first) {
        /* time conv to 2C channels, then frame 2t = first half at t, 2t+1 = second half */
        if ((rc = conv_fwd(v, &u->time_conv, x, &tc, keep))) goto out;
        if ((rc = act4(v, &il, C, VAE_UP_T * T, H, W))) goto out;
        c3_tensor tc4 = view(&tc, 0, 4, (int64_t)VAE_UP_T, C, T, H * W);
        c3_tensor il4 = view(&il, 0, 4, C, T, (int64_t)VAE_UP_T, H * W);
        static const int interleave[4] = {1, 2, 0, 3};
        if ((rc = be->permute(be, &il4, &tc4, interleave))) goto out;
        c3_free(&tc);
        src = &il;
    }
    if ((rc = act4(v, &up, C, src->ne[1], 2 * H, 2 * W))) goto out;
    if ((rc = be->upsample2x(be, &up, src))) goto out;
    c3_free(&il);
    rc = conv_fwd(v, &u->resample, &up, y, false);
out:
    c3_free(&tc);
    c3_free(&il);
    c3_free(&up);
    if (rc) c3_free(y);
    return rc;
}

/* DupUp3D shortcut: y[o, t*ft + a, h*fs + b, w*fs + d] =
 * x[(o*ft*fs*fs + a*fs*fs + b*fs + d) / repeats, t, h, w]; the first chunk
 * keeps only a = ft - 1 (diffusers trims x[:, :, ft-1:] of one frame). */
static int dupup_fwd(c3_vae *v, vup *u, const c3_tensor *x, c3_tensor *y, bool first) {
    c3_backend *be = v->be;
    int64_t Cin = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3], THW = T * H * W;
    int64_t R = u->repeats, Co = u->cout, ft = u->ft, fs = u->fs, f2 = fs * fs;
    bool trim = first && ft > 1;
    if (trim && T != 1)
        return c3_fail(C3_EFAIL, "VAE DupUp3D: a first chunk must have one frame, found %lld",
                       (long long)T);
    c3_tensor rep = {0}, xr = {0}, sh = {0};
    int rc;
    /* repeat_interleave over channels: [R, Cin, THW] -> [Cin, R, THW] */
    if ((rc = c3_alloc(be, &rep, be->act_dtype, C3_MEM_ACT, 3, R, Cin, THW))) goto out;
    for (int64_t r = 0; r < R; r++) {
        c3_tensor row = c3_rows(&rep, r, 1);
        if ((rc = be->copy(be, &row, x))) goto out;
    }
    if ((rc = c3_alloc(be, &xr, be->act_dtype, C3_MEM_ACT, 3, Cin, R, THW))) goto out;
    static const int swap01[3] = {1, 0, 2};
    if ((rc = be->permute(be, &xr, &rep, swap01))) goto out;
    c3_free(&rep);
    /* xr = [Co, ft, fs*fs, T, H, W] -> [Co, T, ft, fs*fs, H, W], or for a
     * trimmed first chunk [ft, Co, T, fs*fs, H, W] and keep row ft - 1 */
    c3_tensor x6 = view(&xr, 0, 6, Co, ft, f2, T, H, W);
    if ((rc = c3_alloc(be, &sh, be->act_dtype, C3_MEM_ACT, 6, trim ? ft : Co, trim ? Co : T,
                       trim ? T : ft, f2, H, W)))
        goto out;
    static const int keep_t[6] = {0, 3, 1, 2, 4, 5}, tmajor[6] = {1, 0, 3, 2, 4, 5};
    if ((rc = be->permute(be, &sh, &x6, trim ? tmajor : keep_t))) goto out;
    c3_free(&xr);
    int64_t Tout = trim ? 1 : T * ft, M = Co * Tout;
    c3_tensor s5 = view(&sh, trim ? (ft - 1) * M * f2 * H * W : 0, 5, M, fs, fs, H, W);
    if ((rc = act4(v, y, Co, Tout, H * fs, W * fs))) goto out;
    c3_tensor y5 = view(y, 0, 5, M, H, fs, W, fs);
    static const int shuffle[5] = {0, 3, 1, 4, 2};
    rc = be->permute(be, &y5, &s5, shuffle);
out:
    c3_free(&rep);
    c3_free(&xr);
    c3_free(&sh);
    if (rc) c3_free(y);
    return rc;
}

/* y += sc, the block's shortcut; what names the block in the error. */
int add_shortcut(c3_vae *v, const char *what, c3_tensor *y, const c3_tensor *sc) {
    if (c3_numel(sc) != c3_numel(y))
        return c3_fail(C3_EFAIL, "%s: shortcut holds %lld elements, main path %lld", what,
                       (long long)c3_numel(sc), (long long)c3_numel(y));
    return v->be->add(v->be, y, sc);
}

int block_fwd(c3_vae *v, vres *res, int n, const vblock *k, const c3_tensor *x, c3_tensor *y,
              bool keep) {
    if (n < 1) return c3_fail(C3_EFAIL, "%s without ResBlocks", k->what);
    c3_tensor a = {0}, b = {0}, sc = {0};
    int rc = C3_OK;
    for (int r = 0; r < n; r++)
        VAE_STEP(res_fwd(v, &res[r], r ? &a : x, &b, keep));
    if (k->resample) VAE_STEP(k->resample(k->ud, &a, &b));
    if (k->shortcut) {
        if ((rc = k->shortcut(k->ud, x, &sc))) goto out;
        if ((rc = add_shortcut(v, k->what, &a, &sc))) goto out;
    }
    *y = a;
    a = (c3_tensor){0};
out:
    c3_free(&a);
    c3_free(&b);
    c3_free(&sc);
    return rc;
}

int mid_fwd(c3_vae *v, vres mid[2], vattn *at, const c3_tensor *x, c3_tensor *y, bool keep) {
    c3_tensor a = {0}, b = {0};
    int rc;
    if ((rc = res_fwd(v, &mid[0], x, &a, keep))) goto out;
    VAE_STEP(attn_fwd(v, at, &a, &b));
    VAE_STEP(res_fwd(v, &mid[1], &a, &b, keep));
    *y = a;
    a = (c3_tensor){0};
out:
    c3_free(&a);
    c3_free(&b);
    return rc;
}

int head_fwd(c3_vae *v, const c3_tensor *gamma, vconv *conv, c3_tensor *x, c3_tensor *y,
             bool keep) {
    C3_TRY(v->be->chan_rmsnorm(v->be, x, x, gamma, NULL));
    C3_TRY(v->be->silu(v->be, x, x));
    return conv_fwd(v, conv, x, y, keep);
}

/* An up block: ResBlocks, then (unless UP_NONE) the upsampler plus DupUp3D of its input. */
typedef struct {
    c3_vae *v;
    vup *u;
    bool first, keep;
} up_ctx;
static int up_resample(void *ud, const c3_tensor *a, c3_tensor *y) {
    up_ctx *c = ud;
    return upsample_fwd(c->v, c->u, a, y, c->first, c->keep);
}
static int up_shortcut(void *ud, const c3_tensor *x, c3_tensor *y) {
    up_ctx *c = ud;
    return dupup_fwd(c->v, c->u, x, y, c->first);
}
static int up_fwd(c3_vae *v, vup *u, const c3_tensor *x, c3_tensor *y, bool first, bool keep) {
    up_ctx c = {v, u, first, keep};
    bool up = u->mode != UP_NONE;
    vblock k = {"VAE up block", up ? up_resample : NULL, up ? up_shortcut : NULL, &c};
    return block_fwd(v, u->res, u->nres, &k, x, y, keep);
}

/* One decoder call on one latent frame x [z_dim, 1, h, w] -> y [dec_out, F, H/p, W/p]. */
static int decode_chunk(c3_vae *v, const c3_tensor *x, int chunk, bool keep, c3_tensor *y) {
    bool first = chunk == 0;
    c3_tensor a = {0}, b = {0};
    int rc;
    if ((rc = conv_fwd(v, &v->conv_in, x, &a, keep))) goto out;
    trace("decoder.conv_in", chunk, &a);
    VAE_STEP(mid_fwd(v, v->mid, &v->attn, &a, &b, keep));
    trace("decoder.mid_block", chunk, &a);
    for (int i = 0; i < v->nup; i++) {
        char name[NAME_MAX_LEN];
        VAE_STEP(up_fwd(v, &v->up[i], &a, &b, first, keep));
        snprintf(name, sizeof name, "decoder.up_blocks.%d", i);
        trace(name, chunk, &a);
    }
    if ((rc = head_fwd(v, &v->norm_out, &v->conv_out, &a, y, keep))) goto out;
    trace("decoder.conv_out", chunk, y);
out:
    c3_free(&a);
    c3_free(&b);
    return rc;
}

void reset_history(c3_vae *v) {
    for (int i = 0; i < v->nconvs; i++) {
        c3_free(&v->convs[i]->hist);
        v->convs[i]->hist_live = false;
    }
}

/* The host half of a chunk's frames: channels [0, C) of src [C, tc, P] (pinned
 * staging) into out [C, T, P] at frame t0, on a thread of its own, so that the
 * copy (and the first touch of out's pages) overlaps the next chunk. */
typedef struct {
    float *out;
    const float *src;
    int64_t C, T, t0, tc, P;
} frame_copy;
static void *copy_frames(void *p) {
    const frame_copy *j = p;
    for (int64_t ch = 0; ch < j->C; ch++)
        memcpy(j->out + (ch * j->T + j->t0) * j->P, j->src + ch * j->tc * j->P,
               sizeof(float) * (size_t)(j->tc * j->P));
    return NULL;
}

/* Two pinned staging buffers and their copy threads (vae_walk_chunks). */
typedef struct {
    void *buf[2];
    size_t cap[2];
    pthread_t th[2];
    bool busy[2];
    frame_copy job[2];
} frame_stage;
static void stage_join(frame_stage *st, int b) {
    if (!st->busy[b]) return;
    pthread_join(st->th[b], NULL);
    st->busy[b] = false;
}
/* channels [0, C) of y [Cy, tc, P] to out at frame t0 through staging buffer b */
static int stage_chunk(c3_backend *be, frame_stage *st, int b, const c3_tensor *y,
                       const vae_walk *w, int64_t t0) {
    int64_t tc = y->ne[1], n = w->C * tc * w->plane;
    stage_join(st, b);
    if (st->cap[b] < sizeof(float) * (size_t)n) {
        if (st->buf[b]) be->host_free(be, st->buf[b]);
        st->buf[b] = NULL, st->cap[b] = 0;
        C3_TRY(be->host_alloc(be, &st->buf[b], sizeof(float) * (size_t)n));
        st->cap[b] = sizeof(float) * (size_t)n;
    }
    c3_tensor yc = c3_view(y, 0, 1, (int64_t[]){n});
    C3_TRY(be->download(be, st->buf[b], &yc));
    st->job[b] = (frame_copy){w->out, st->buf[b], w->C, w->T, t0, tc, w->plane};
    if (pthread_create(&st->th[b], NULL, copy_frames, &st->job[b]) == 0)
        st->busy[b] = true;
    else
        copy_frames(&st->job[b]); /* no thread: copy here */
    return C3_OK;
}

int vae_walk_chunks(c3_backend *be, const vae_walk *w) {
    c3_tensor y = {0};
    float *host = NULL;
    int64_t t0 = 0, P = w->plane;
    int rc = C3_OK;
    /* several chunks, no scaling, pinned memory: staged downloads (a download into
     * pinned memory runs at the link's rate; pageable memory takes several times longer) */
    frame_stage st = {0};
    bool staged = !w->scale && w->n > 1 && be->host_alloc && be->host_free;
    for (int c = 0; c < w->n && rc == C3_OK; c++) {
        if ((rc = w->body(w->ud, c, c == 0, c + 1 < w->n, &y))) break;
        int64_t tc = y.ne[1];
        if (y.ndim != 4 || y.ne[0] != w->Cy || y.ne[2] * y.ne[3] != P || t0 + tc > w->T) {
            rc = c3_fail(C3_EFAIL, "%s: chunk %d came out [%lld, %lld, %lld, %lld]", w->what, c,
                         (long long)y.ne[0], (long long)y.ne[1], (long long)y.ne[2],
                         (long long)y.ne[3]);
            break;
        }
        double tp = c3_now();
        bool done = staged && stage_chunk(be, &st, c % 2, &y, w, t0) == C3_OK;
        staged = done;            /* else (no pinned memory) straight downloads from here on */
        if (!done && !w->scale) { /* channel ch of y [Cy, tc, P] straight to frames [t0, t0 + tc) */
            for (int64_t ch = 0; ch < w->C && rc == C3_OK; ch++) {
                c3_tensor ych = c3_view(&y, ch * tc * P, 1, (int64_t[]){tc * P});
                rc = be->download(be, w->out + (ch * w->T + t0) * P, &ych);
            }
        } else if (!done) { /* through the host: (y - shift) * scale */
            host = xrealloc(host, sizeof(float) * (size_t)c3_numel(&y));
            rc = be->download(be, host, &y);
            for (int64_t ch = 0; ch < w->C && rc == C3_OK; ch++) {
                float *dst = w->out + (ch * w->T + t0) * P;
                const float *src = host + ch * tc * P;
                float shift = w->shift[ch], scale = w->scale[ch];
                for (int64_t i = 0; i < tc * P; i++)
                    dst[i] = (src[i] - shift) * scale;
            }
        }
        c3_free(&y);
        if (rc) break;
        if (vae_prof) {
            vae_prof->s[VAE_PROF_DOWNLOAD] += c3_now() - tp;
            vae_prof->n[VAE_PROF_DOWNLOAD]++;
        }
        t0 += tc;
        if (w->on_chunk) {
            int st_ = w->on_chunk(w->on_ud, c, w->n);
            if (st_ != C3_OK)
                rc = c3_fail(st_, "%s stopped after latent frame %d of %d", w->what, c + 1, w->n);
        }
    }
    for (int b = 0; b < 2; b++) {
        stage_join(&st, b);
        if (st.buf[b]) be->host_free(be, st.buf[b]);
    }
    if (rc == C3_OK && t0 != w->T)
        rc = c3_fail(C3_EFAIL, "%s: %lld frames came out, expected %lld", w->what, (long long)t0,
                     (long long)w->T);
    c3_free(&y);
    free(host);
    return rc;
}

/* One latent frame, z [z_dim, 1, h, w] (raw latents) -> img [C, 1, Ho, Wo]
 * clamped: post_quant_conv, the decoder, unpatchify. Every temporary is made
 * and freed inside, so the whole call can be recorded as one graph. */
static int decode_frame(c3_vae *v, const c3_tensor *z, c3_tensor *img) {
    c3_backend *be = v->be;
    int64_t Cz = z->ne[0], hw = z->ne[2] * z->ne[3], C = v->img_ch, p = v->patch;
    c3_tensor pq = {0}, chunk = {0};
    int rc = conv_fwd(v, &v->post_quant, z, &pq, false);
    if (rc == C3_OK) { /* [z_dim, 1, h, w] is already the one frame's [z_dim, 1, h, w] */
        c3_tensor xt = view(&pq, 0, 4, Cz, (int64_t)1, z->ne[2], z->ne[3]);
        rc = decode_chunk(v, &xt, 0, false, &chunk);
    }
    if (rc == C3_OK) {
        int64_t hc = chunk.ne[2], wc = chunk.ne[3];
        c3_tensor c6 = view(&chunk, 0, 6, C, p, p, (int64_t)1, hc, wc);
        c3_tensor i6 = view(img, 0, 6, C, (int64_t)1, hc, p, wc, p);
        static const int unpatch[6] = {0, 3, 4, 2, 5, 1};
        rc = be->permute(be, &i6, &c6, unpatch);
    }
    if (rc == C3_OK) rc = be->clamp(be, img, img, -1.0f, 1.0f);
    (void)hw;
    c3_free(&pq);
    c3_free(&chunk);
    return rc;
}

static bool graphs_on(const c3_vae *v) {
    const char *e = getenv("COSMOS3_GRAPHS");
    return v->be->graph_begin && v->be->graph_end && v->be->graph_launch && v->be->graph_free &&
           !vae_trace_hook && !(e && !strcmp(e, "0"));
}

/* An image (T == 1) through decode_frame as a graph: zr [z_dim, h, w] raw
 * latents in, pixels [C, Ho, Wo] out (host). */
static int decode_image_graph(c3_vae *v, const float *zr, int h, int w, int64_t Ho, int64_t Wo,
                              float *pixels) {
    c3_backend *be = v->be;
    if (v->g.h != h || v->g.w != w) {
        graph_drop(v);
        C3_TRY(act4(v, &v->g.z, v->z_dim, 1, h, w));
        C3_TRY(act4(v, &v->g.img, v->img_ch, 1, Ho, Wo));
        v->g.h = h, v->g.w = w;
    }
    C3_TRY(be->upload(be, &v->g.z, zr, C3_F32));
    if (v->g.state == 2) {
        C3_TRY(be->graph_launch(be, v->g.exec));
    } else if (v->g.state == 1) {
        C3_TRY(be->graph_begin(be));
        int rc = decode_frame(v, &v->g.z, &v->g.img);
        void *exec = NULL;
        int rc2 = be->graph_end(be, &exec);
        if (rc || rc2) {
            if (exec) be->graph_free(be, exec);
            v->g.state = 0;
            return rc ? rc : rc2;
        }
        v->g.exec = exec;
        v->g.state = 2;
        C3_TRY(be->graph_launch(be, exec));
    } else {
        C3_TRY(decode_frame(v, &v->g.z, &v->g.img));
        v->g.state = 1;
    }
    return be->download(be, pixels, &v->g.img);
}

/* ------------------------------------------------------------------ channels-last path
 *
 * On backends with the vcl_* ops (CUDA, bf16) the decoder runs on padded
 * channels-last frames [F, H + 2, W + 2, C] (backend.h): every convolution
 * is one tensor-core implicit GEMM with bias and residual fused, the norm
 * and SiLU one pass, nearest upsampling with the time interleave one pass,
 * the DupUp3D shortcut one pass. A temporal conv's causal history lives in
 * front of its input in one staging tensor (cv->hist: [CACHE_T + T, ...]),
 * so the layer before writes its output straight behind the history and
 * keeping the history for the next chunk is a copy of CACHE_T frames, all on
 * the device. The mid-block attention converts to [C, T, H, W] and back and
 * runs attn_fwd (the backend's attention kernels). Same numbers as the
 * generic path up to bf16 rounding (one rounding per conv instead of two
 * where a residual is added); tests/test_vae.c holds it to the goldens. */

static int cl_alloc(c3_vae *v, c3_tensor *t, int64_t F, int64_t H, int64_t W, int64_t C) {
    return c3_alloc(v->be, t, C3_BF16, C3_MEM_ACT, 4, F, H + 2, W + 2, C);
}

/* x [T, H, W, C] channels-last for the trace hook as [C, T, H, W]. */
static int cl_trace(c3_vae *v, const char *name, int chunk, const c3_tensor *x, int T, int H, int W,
                    int C) {
    if (!vae_trace_hook) return C3_OK;
    c3_tensor t = {0};
    C3_TRY(act4(v, &t, C, T, H, W));
    int rc = v->be->vcl_layout(v->be, &t, x, T, H, W, C, 1, false, 0.0f, 0.0f);
    if (rc == C3_OK) trace(name, chunk, &t);
    c3_free(&t);
    return rc;
}

/* A temporal conv keeps its input behind the history while a history is,
 * or is to be, kept. */
static bool cl_staged(const vconv *cv, int T, bool keep) {
    return cv->kt > 1 && (keep || cv->hist_live || T > 1);
}

/* Where the input of conv cv for a chunk of T frames goes: frames [L, L+T)
 * of its staging tensor (a view) or, unstaged, a new tensor (owned). */
static int cl_slot(c3_vae *v, vconv *cv, int T, int H, int W, bool keep, c3_tensor *slot) {
    if (!cl_staged(cv, T, keep)) return cl_alloc(v, slot, T, H, W, cv->cin);
    int64_t L = cv->kt - 1;
    if (!cv->hist.data || cv->hist.ne[1] != H + 2 || cv->hist.ne[2] != W + 2 ||
        cv->hist.ne[0] < L + T) {
        if (cv->hist_live)
            return c3_fail(
                C3_EFAIL,
                "VAE conv: chunk of %d frames of %dx%d does not fit the history [%lld, %lld, %lld]",
                T, H, W, (long long)cv->hist.ne[0], (long long)cv->hist.ne[1] - 2,
                (long long)cv->hist.ne[2] - 2);
        c3_free(&cv->hist);
        C3_TRY(cl_alloc(v, &cv->hist, L + C3_MAX(T, v->cl_tcap), H, W, cv->cin));
        c3_tensor front = c3_rows(&cv->hist, 0, L);
        C3_TRY(v->be->vcl_zero(v->be, &front));
    }
    *slot = c3_rows(&cv->hist, L, T);
    return C3_OK;
}

/* y [T, H, W, cout] = conv(in) + bias (+ res). in: for kt == 1 any
 * channels-last tensor of T frames; else the slot cl_slot gave (freed here
 * when owned). y: allocated unless it already has storage (a view to fill). */
static int cl_conv(c3_vae *v, vconv *cv, c3_tensor *in, int T, int H, int W, bool keep,
                   const c3_tensor *res, c3_tensor *y) {
    c3_backend *be = v->be;
    int64_t L = cv->kt - 1;
    bool staged = cl_staged(cv, T, keep), own_y = !y->data;
    c3_vcl_geom g = {.T = T,
                     .H = H,
                     .W = W,
                     .cin = cv->cin,
                     .cout = cv->cout,
                     .kt = cv->kt,
                     .ks = cv->kh,
                     .a0 = 0};
    c3_tensor x = *in;
    int rc = C3_OK;
    if (cv->kh != cv->kw || cv->pad != cv->kh / 2) {
        rc = c3_fail(C3_EFAIL, "VAE conv: kernel %dx%d with padding %d has no channels-last form",
                     cv->kh, cv->kw, cv->pad);
        goto out;
    }
    if (L > 0 && !cv->hist_live && T == 1) {
        g.a0 = (int)L; /* zero history, one frame: only the last temporal tap sees data */
    } else if (staged) {
        x = c3_rows(&cv->hist, 0, L + T); /* [history (zeros before the first chunk), chunk] */
    } else if (L > 0) {
        rc = c3_fail(C3_EFAIL, "VAE conv: a chunk of %d frames without its history", T);
        goto out;
    }
    if (own_y && (rc = cl_alloc(v, y, T, H, W, cv->cout))) goto out;
    PROF_TRY(VAE_PROF_CONV, be->vcl_conv(be, y, &x, &cv->wcl, &cv->b, res, &g));
    if (staged && keep) {
        /* the last L frames of [history, chunk] become the history (in order: they may overlap) */
        for (int64_t i = 0; i < L; i++) {
            c3_tensor dst = c3_rows(&cv->hist, i, 1), src = c3_rows(&cv->hist, T + i, 1);
            PROF_TRY(VAE_PROF_HIST, be->copy(be, &dst, &src));
        }
        cv->hist_live = true;
    }
out:
    if (in->owned) c3_free(in);
    if (rc && own_y) c3_free(y);
    return rc;
}

/* ResBlock on x [T, H, W, cin] -> y [T, H, W, cout]. */
static int cl_res(c3_vae *v, vres *r, const c3_tensor *x, int T, int H, int W, bool keep,
                  c3_tensor *y) {
    c3_backend *be = v->be;
    int64_t N = (int64_t)T * (H + 2) * (W + 2);
    c3_tensor h = {0}, s1 = {0}, b = {0}, s2 = {0};
    int rc;
    if (r->has_shortcut) {
        c3_tensor xi = *x;
        xi.owned = false;
        if ((rc = cl_conv(v, &r->shortcut, &xi, T, H, W, false, NULL, &h))) goto out;
    }
    if ((rc = cl_slot(v, &r->conv1, T, H, W, keep, &s1))) goto out;
    PROF_TRY(VAE_PROF_NORM, be->vcl_norm(be, &s1, x, &r->g1, N, r->conv1.cin, true));
    if ((rc = cl_conv(v, &r->conv1, &s1, T, H, W, keep, NULL, &b))) goto out;
    if ((rc = cl_slot(v, &r->conv2, T, H, W, keep, &s2))) goto out;
    PROF_TRY(VAE_PROF_NORM, be->vcl_norm(be, &s2, &b, &r->g2, N, r->conv2.cin, true));
    c3_free(&b);
    rc = cl_conv(v, &r->conv2, &s2, T, H, W, keep, r->has_shortcut ? &h : x, y);
out:
    if (s1.owned) c3_free(&s1);
    if (s2.owned) c3_free(&s2);
    c3_free(&h);
    c3_free(&b);
    return rc;
}

/* Mid-block attention on x [T, H, W, C] through attn_fwd. */
static int cl_attn(c3_vae *v, const c3_tensor *x, int T, int H, int W, c3_tensor *y) {
    c3_backend *be = v->be;
    int C = v->attn.dim;
    c3_tensor xc = {0}, yc = {0};
    int rc;
    if ((rc = act4(v, &xc, C, T, H, W))) goto out;
    PROF_TRY(VAE_PROF_ATTN, be->vcl_layout(be, &xc, x, T, H, W, C, 1, false, 0.0f, 0.0f));
    PROF_TRY(VAE_PROF_ATTN, attn_fwd(v, &v->attn, &xc, &yc));
    c3_free(&xc);
    if ((rc = cl_alloc(v, y, T, H, W, C))) goto out;
    PROF_TRY(VAE_PROF_ATTN, be->vcl_layout(be, y, &yc, T, H, W, C, 1, true, 0.0f, 0.0f));
out:
    if (rc) c3_free(y);
    c3_free(&xc);
    c3_free(&yc);
    return rc;
}

/* Up block on x [T, H, W, cin] -> y [*To, H fs, W fs, cout] (fs = 1 without upsampler). */
static int cl_up(c3_vae *v, vup *u, const c3_tensor *x, int T, int H, int W, bool first, bool keep,
                 c3_tensor *y, int *To) {
    c3_backend *be = v->be;
    c3_tensor a = {0}, b = {0}, tc = {0}, up = {0}, slot = {0};
    int rc = C3_OK;
    /* an upsample3d after the first chunk: the last res block writes straight into the time
     * conv's input slot (behind its history) */
    bool il = u->mode == UP_3D && !first;
    if (il && (rc = cl_slot(v, &u->time_conv, T, H, W, keep, &slot))) goto out;
    if (il && u->nres == 0) PROF_TRY(VAE_PROF_COPY, be->copy(be, &slot, x));
    for (int r = 0; r < u->nres; r++) {
        if (il && r == u->nres - 1) {
            if ((rc = cl_res(v, &u->res[r], r ? &a : x, T, H, W, keep, &slot))) goto out;
            break;
        }
        VAE_STEP(cl_res(v, &u->res[r], r ? &a : x, T, H, W, keep, &b));
    }
    if (u->mode == UP_NONE) {
        *y = a;
        a = (c3_tensor){0};
        *To = T;
        goto out;
    }
    const c3_tensor *src = &a;
    if (il) {
        if ((rc = cl_conv(v, &u->time_conv, &slot, T, H, W, keep, NULL, &tc))) goto out;
        src = &tc;
    }
    int T2 = il ? VAE_UP_T * T : T, C = u->cout;
    bool trim = first && u->ft > 1;
    if (T2 != (trim ? 1 : T * u->ft)) {
        rc = c3_fail(C3_EFAIL, "VAE up block: %d frames on the main path, %d on the shortcut", T2,
                     trim ? 1 : T * u->ft);
        goto out;
    }
    if ((rc = cl_alloc(v, &up, T2, (int64_t)H * VAE_UP_S, (int64_t)W * VAE_UP_S, C))) goto out;
    PROF_TRY(VAE_PROF_UPSAMPLE, be->vcl_upsample(be, &up, src, T, H, W, C, il));
    c3_free(&tc);
    c3_free(&a);
    if ((rc = cl_conv(v, &u->resample, &up, T2, H * VAE_UP_S, W * VAE_UP_S, false, NULL, y)))
        goto out;
    PROF_TRY(VAE_PROF_DUPUP, be->vcl_dupup(be, y, x, T, H, W, u->cin, u->cout, u->ft, u->fs, trim));
    *To = T2;
out:
    if (slot.owned) c3_free(&slot);
    if (rc) c3_free(y);
    c3_free(&a);
    c3_free(&b);
    c3_free(&tc);
    c3_free(&up);
    return rc;
}

/* The channels-last decode's state across chunks: pq [CACHE_T + T, h, w,
 * z_dim], post_quant_conv of every latent frame behind CACHE_T zero frames. */
typedef struct {
    c3_vae *v;
    c3_tensor pq;
    int h, w;
    int64_t Ho, Wo;
} cl_walk;

/* Chunk t of the channels-last decode (vae_walk body): latent frame t ->
 * img [C, Tc, Ho, Wo] F32, unpatchified and clamped. */
static int cl_chunk(void *ud, int t, bool first, bool keep, c3_tensor *img) {
    cl_walk *cw = ud;
    c3_vae *v = cw->v;
    c3_backend *be = v->be;
    int Cz = v->z_dim, C = v->img_ch, p = v->patch, Co = v->dec_out, h = cw->h, w = cw->w;
    int64_t Ho = cw->Ho, Wo = cw->Wo;
    c3_tensor a = {0}, b = {0}, o = {0}, slot = {0};
    int rc;
    int H = h, W = w, Tc = 1;
    /* conv_in: frames [t, t + 3) of pq; the first chunk sees only its own frame */
    c3_vcl_geom g = {.T = 1,
                     .H = h,
                     .W = w,
                     .cin = Cz,
                     .cout = v->conv_in.cout,
                     .kt = 3,
                     .ks = 3,
                     .a0 = first ? VAE_CACHE_T : 0};
    c3_tensor xin = c3_rows(&cw->pq, first ? VAE_CACHE_T : t, first ? 1 : VAE_CACHE_T + 1);
    if ((rc = cl_alloc(v, &a, 1, h, w, v->conv_in.cout))) goto out;
    PROF_TRY(VAE_PROF_CONV, be->vcl_conv(be, &a, &xin, &v->conv_in.wcl, &v->conv_in.b, NULL, &g));
    if ((rc = cl_trace(v, "decoder.conv_in", t, &a, 1, h, w, v->conv_in.cout))) goto out;
    int C0 = v->conv_in.cout;
    VAE_STEP(cl_res(v, &v->mid[0], &a, 1, H, W, keep, &b));
    VAE_STEP(cl_attn(v, &a, 1, H, W, &b));
    VAE_STEP(cl_res(v, &v->mid[1], &a, 1, H, W, keep, &b));
    if ((rc = cl_trace(v, "decoder.mid_block", t, &a, 1, H, W, C0))) goto out;
    for (int i = 0; i < v->nup; i++) {
        vup *u = &v->up[i];
        int To = Tc;
        VAE_STEP(cl_up(v, u, &a, Tc, H, W, first, keep, &b, &To));
        Tc = To;
        if (u->mode != UP_NONE) H *= u->fs, W *= u->fs;
        char name[NAME_MAX_LEN];
        snprintf(name, sizeof name, "decoder.up_blocks.%d", i);
        if ((rc = cl_trace(v, name, t, &a, Tc, H, W, u->cout))) goto out;
    }
    int Cl = v->conv_out.cin;
    if (Tc != (first ? 1 : v->cl_tcap) || (int64_t)H * p != Ho || (int64_t)W * p != Wo) {
        rc = c3_fail(C3_EFAIL,
                     "VAE decode: chunk %d came out %d frames of %dx%d, expected %d of %lldx%lld",
                     t, Tc, H, W, first ? 1 : v->cl_tcap, (long long)(Ho / p), (long long)(Wo / p));
        goto out;
    }
    if ((rc = cl_slot(v, &v->conv_out, Tc, H, W, keep, &slot))) goto out;
    PROF_TRY(VAE_PROF_NORM,
             be->vcl_norm(be, &slot, &a, &v->norm_out, (int64_t)Tc * (H + 2) * (W + 2), Cl, true));
    c3_free(&a);
    if ((rc = cl_conv(v, &v->conv_out, &slot, Tc, H, W, keep, NULL, &o))) goto out;
    if ((rc = cl_trace(v, "decoder.conv_out", t, &o, Tc, H, W, Co))) goto out;
    /* unpatchify + clamp into [C, Tc, Ho, Wo] */
    if ((rc = c3_alloc(be, img, C3_F32, C3_MEM_ACT, 4, (int64_t)C, (int64_t)Tc, Ho, Wo))) goto out;
    PROF_TRY(VAE_PROF_LAYOUT, be->vcl_layout(be, img, &o, Tc, H, W, Co, p, false, -1.0f, 1.0f));
out:
    if (slot.owned) c3_free(&slot);
    c3_free(&a);
    c3_free(&b);
    c3_free(&o);
    if (rc) c3_free(img);
    return rc;
}

/* The channels-last decode before its chunks: zr [z_dim, T, h, w] raw
 * latents -> cw->pq (cw's v, h, w, Ho, Wo set by the caller). */
static int cl_prepare(cl_walk *cw, const float *zr, int T) {
    c3_vae *v = cw->v;
    c3_backend *be = v->be;
    int Cz = v->z_dim, h = cw->h, w = cw->w;
    c3_tensor z = {0}, zl = {0};
    int rc;
    v->cl_tcap = 1;
    for (int i = 0; i < v->nup; i++)
        if (v->up[i].mode != UP_NONE) v->cl_tcap *= v->up[i].ft;
    if ((rc = act4(v, &z, Cz, T, h, w))) goto out;
    PROF_TRY(VAE_PROF_LAYOUT, be->upload(be, &z, zr, C3_F32));
    if ((rc = cl_alloc(v, &zl, T, h, w, Cz))) goto out;
    PROF_TRY(VAE_PROF_LAYOUT, be->vcl_layout(be, &zl, &z, T, h, w, Cz, 1, true, 0.0f, 0.0f));
    c3_free(&z);
    /* pq [CACHE_T + T, h, w, z_dim]: post_quant_conv of every frame behind CACHE_T zero frames,
     * so conv_in reads frames [t, t + 3) for chunk t with no history copies */
    if ((rc = cl_alloc(v, &cw->pq, VAE_CACHE_T + T, h, w, Cz))) goto out;
    c3_tensor pq0 = c3_rows(&cw->pq, 0, VAE_CACHE_T), pqt = c3_rows(&cw->pq, VAE_CACHE_T, T);
    if ((rc = be->vcl_zero(be, &pq0))) goto out;
    if ((rc = cl_conv(v, &v->post_quant, &zl, T, h, w, false, NULL, &pqt))) goto out;
    c3_free(&zl);
    if ((rc = cl_trace(v, "post_quant_conv", 0, &pqt, T, h, w, Cz))) goto out;
    if (v->conv_in.kt != VAE_CACHE_T + 1 || v->conv_in.kh != 3) {
        rc = c3_fail(C3_EFAIL, "VAE conv_in: kernel %dx%d, expected 3x3x3", v->conv_in.kt,
                     v->conv_in.kh);
        goto out;
    }
out:
    c3_free(&z);
    c3_free(&zl);
    return rc;
}

/* The generic decode's state across chunks: frames [T, z_dim, h*w], the
 * post_quant_conv output time-major (each latent frame contiguous). */
typedef struct {
    c3_vae *v;
    c3_tensor frames;
    int h, w;
    int64_t tf, Ho, Wo; /* frames a later chunk yields; output size */
} dec_walk;

/* Chunk t of the generic decode (vae_walk body): latent frame t through the
 * decoder -> img [C, Fc, Ho, Wo], unpatchified and clamped. */
static int dec_chunk(void *ud, int t, bool first, bool keep, c3_tensor *img) {
    dec_walk *dw = ud;
    c3_vae *v = dw->v;
    c3_backend *be = v->be;
    int64_t Cz = v->z_dim, hw = (int64_t)dw->h * dw->w, C = v->img_ch, p = v->patch;
    int64_t tf = dw->tf, Ho = dw->Ho, Wo = dw->Wo;
    c3_tensor chunk = {0};
    (void)first; /* decode_chunk knows the first chunk by its index */
    c3_tensor xt =
        view(&dw->frames, (int64_t)t * Cz * hw, 4, Cz, (int64_t)1, (int64_t)dw->h, (int64_t)dw->w);
    int rc = decode_chunk(v, &xt, t, keep, &chunk);
    if (rc) goto out;
    int64_t Fc = chunk.ne[1], hc = chunk.ne[2], wc = chunk.ne[3];
    if (chunk.ne[0] != C * p * p || Fc != (t ? tf : 1) || hc * p != Ho || wc * p != Wo) {
        rc = c3_fail(C3_EFAIL,
                     "VAE decode: chunk %d came out [%lld, %lld, %lld, %lld], expected [%lld, "
                     "%lld, %lld, %lld]",
                     t, (long long)chunk.ne[0], (long long)Fc, (long long)hc, (long long)wc,
                     (long long)(C * p * p), (long long)(t ? tf : 1), (long long)(Ho / p),
                     (long long)(Wo / p));
        goto out;
    }
    /* unpatchify: channel c*p*p + r*p + q -> pixel (y*p + q, x*p + r) */
    if ((rc = act4(v, img, C, Fc, Ho, Wo))) goto out;
    c3_tensor c6 = view(&chunk, 0, 6, C, p, p, Fc, hc, wc);
    c3_tensor i6 = view(img, 0, 6, C, Fc, hc, p, wc, p);
    static const int unpatch[6] = {0, 3, 4, 2, 5, 1};
    if ((rc = be->permute(be, &i6, &c6, unpatch))) goto out;
    c3_free(&chunk);
    rc = be->clamp(be, img, img, -1.0f, 1.0f);
out:
    c3_free(&chunk);
    if (rc) c3_free(img);
    return rc;
}

/* The generic decode before its chunks: zr [z_dim, T, h, w] raw latents ->
 * dw->frames, post_quant_conv over all frames at once (dw's v, h, w, tf,
 * Ho, Wo set by the caller). */
static int dec_prepare(dec_walk *dw, const float *zr, int T) {
    c3_vae *v = dw->v;
    c3_backend *be = v->be;
    int64_t Cz = v->z_dim, h = dw->h, w = dw->w, hw = h * w;
    c3_tensor z = {0}, pq = {0};
    int rc;
    if ((rc = act4(v, &z, Cz, T, h, w))) goto out;
    if ((rc = be->upload(be, &z, zr, C3_F32))) goto out;
    if ((rc = conv_fwd(v, &v->post_quant, &z, &pq, false))) goto out;
    trace("post_quant_conv", 0, &pq); /* one call over all frames: chunk 0 */
    c3_free(&z);
    /* time-major copy so each latent frame is a contiguous [z_dim, 1, h, w] */
    if ((rc = c3_alloc(be, &dw->frames, be->act_dtype, C3_MEM_ACT, 3, (int64_t)T, Cz, hw)))
        goto out;
    c3_tensor pq3 = view(&pq, 0, 3, Cz, (int64_t)T, hw);
    static const int swap01[3] = {1, 0, 2};
    if ((rc = be->permute(be, &dw->frames, &pq3, swap01))) goto out;
    c3_free(&pq);
out:
    c3_free(&z);
    c3_free(&pq);
    return rc;
}

int vae_decode(c3_vae *v, const float *z_norm, int T, int h, int w, float **out, int *F, int *H,
               int *W, int (*on_frame)(void *ud, int t, int T), void *ud) {
    *out = NULL;
    if (T < 1 || h < 1 || w < 1)
        return c3_fail(C3_EINPUT, "VAE decode: latent size %dx%dx%d must be positive", T, h, w);
    int64_t Cz = v->z_dim, hw = (int64_t)h * w, n = Cz * T * hw;
    /* z_raw = z_norm / inv_std + mean, inv_std = 1/std in fp32 (as the pipeline) */
    float *zr = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t c = 0; c < Cz; c++) {
        float inv_std = 1.0f / v->cfg.latents_std[c], mean = v->cfg.latents_mean[c];
        for (int64_t i = 0; i < T * hw; i++)
            zr[c * T * hw + i] = z_norm[c * T * hw + i] / inv_std + mean;
    }
    int rc;
    /* output geometry: the first chunk yields one frame, later ones ft each */
    int64_t C = v->img_ch, p = v->patch, tf = 1, sf = 1;
    for (int i = 0; i < v->nup; i++)
        if (v->up[i].mode != UP_NONE) {
            tf *= v->up[i].ft;
            sf *= v->up[i].fs;
        }
    int64_t Fo = 1 + tf * (T - 1), Ho = h * sf * p, Wo = w * sf * p;
    float *res = xmalloc(sizeof(float) * (size_t)(C * Fo * Ho * Wo));
    /* one walk over the latent frames, by the channels-last or the generic chunk */
    cl_walk cw = {.v = v, .h = h, .w = w, .Ho = Ho, .Wo = Wo};
    dec_walk dw = {.v = v, .h = h, .w = w, .tf = tf, .Ho = Ho, .Wo = Wo};
    vae_walk wk = {.what = "VAE decode",
                   .n = T,
                   .Cy = C,
                   .C = C,
                   .T = Fo,
                   .plane = Ho * Wo,
                   .out = res,
                   .on_chunk = on_frame,
                   .on_ud = ud};
    reset_history(v);
    if (v->cl) {
        rc = cl_prepare(&cw, zr, T);
        wk.body = cl_chunk, wk.ud = &cw;
    } else if (T == 1 && graphs_on(v)) { /* an image: one graph after its size's first decode */
        rc = decode_image_graph(v, zr, h, w, Ho, Wo, res);
        if (rc == C3_OK && on_frame && (rc = on_frame(ud, 0, 1)) != C3_OK)
            rc = c3_fail(rc, "VAE decode stopped after latent frame 1 of 1");
    } else {
        rc = dec_prepare(&dw, zr, T);
        wk.body = dec_chunk, wk.ud = &dw;
    }
    if (rc == C3_OK && wk.body) rc = vae_walk_chunks(v->be, &wk);
    reset_history(v);
    c3_free(&cw.pq);
    c3_free(&dw.frames);
    free(zr);
    if (rc) {
        free(res);
        return rc;
    }
    *out = res;
    *F = (int)Fo;
    *H = (int)Ho;
    *W = (int)Wo;
    return C3_OK;
}
