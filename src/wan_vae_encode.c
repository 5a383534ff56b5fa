/* wan_vae_encode.c - the Wan2.2 VAE encoder (diffusers WanEncoder3d with
 * is_residual, AutoencoderKLWan._encode) on the backend table: the mirror of
 * the decoder in wan_vae.c, sharing its conv, ResBlock and attention layers.
 *
 * Structure (dims = base_dim * [1, dim_mult...]):
 *   patchify (patch p: channel c*p*p + pw*p + ph holds pixel (y*p + ph, x*p + pw))
 *   per chunk (the first frame, then 4 frames at a time, with the causal cache):
 *     conv_in (causal 3x3x3)
 *     down_blocks[i]: num_res_blocks ResBlocks, then the downsampler
 *       (downsample2d: zero pad right/bottom, 3x3 conv stride 2, per frame;
 *        downsample3d: the same, then a (3,1,1) time conv of stride 2 over
 *        [the previous chunk's last frame, this chunk], skipped on the first
 *        chunk), plus the AvgDown3D shortcut of the block input
 *     mid: ResBlock, attention, ResBlock
 *     norm_out, SiLU, conv_out (causal 3x3x3) to 2 z_dim channels
 *     quant_conv (1x1x1; per chunk equals over all frames)
 *   the posterior's mean (first z_dim channels), normalised with the VAE
 *   config: (mu - latents_mean) * (1 / latents_std), as the pipeline's
 *   _encode_video.
 *
 * Layouts as in wan_vae.c: activations [C, T, H, W]. */
#include "wan_vae_encode.h"
#include "wan_vae_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* Frames per encoder call after the first one (diffusers _encode). */
enum { ENC_CHUNK = 4 };
/* Spatial and temporal factor of a downsampling block. */
enum { ENC_DOWN_S = 2, ENC_DOWN_T = 2 };
/* Image channels before patchify. */
enum { ENC_IMG_CH = 3 };
enum { ENC_NAME_LEN = 160 };

typedef enum { DOWN_NONE, DOWN_2D, DOWN_3D } down_mode;

typedef struct {
    int cin, cout, nres;
    vres *res;
    down_mode mode;
    vconv resample;  /* [C, C, 1, 3, 3]: zero pad right and bottom, stride 2 */
    vconv time_conv; /* [C, C, 3, 1, 1], stride 2 in time (DOWN_3D) */
    c3_tensor last;  /* DOWN_3D: the last resampled frame of the previous chunk [1, C, H*W] */
    bool last_live;
    int ft, fs; /* AvgDown3D shortcut factors */
} vdown;

struct c3_vae_enc {
    c3_backend *be;
    c3_vae *ctx; /* the layers' context: the encoder's convs and their histories */
    c3_vconfig cfg;
    int z_dim, patch, in_ch, spatial, temporal;
    vconv conv_in, conv_out, quant;
    vdown *down;
    int ndown;
    vres mid[2];
    vattn attn;
    c3_tensor norm_out; /* [C] */
};

static int act4(c3_vae_enc *e, c3_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    c3_backend *be = e->be;
    return c3_alloc(be, t, be->act_dtype, C3_MEM_ACT, 4, a, b, c, d);
}

/* ------------------------------------------------------------------ loading */

static int load_gamma(c3_vae_enc *e, const c3_ckpt *ck, c3_tensor *t, const char *name, int64_t n) {
    int64_t shape[4] = {n, 1, 1, 1};
    const st_tensor *s = ckpt_get(ck, &ck->vae, name, 4, shape);
    if (!s) return C3_EMODEL; /* ckpt_get named the tensor and the problem */
    c3_backend *be = e->be;
    C3_TRY(be->alloc(be, t, be->weight_dtype, 1, &n, C3_MEM_WEIGHTS));
    return be->upload(be, t, s->data, s->dtype);
}

static int enc_load_(c3_vae_enc *e, const c3_ckpt *ck) {
    const c3_vconfig *cf = &e->cfg;
    const char *path = ck->vae.path;
    if (!cf->is_residual)
        return c3_fail(C3_EMODEL, "%s: only the Wan2.2 VAE (is_residual true) is supported", path);
    int n = cf->n_mult;
    if (n < 1 || n > 7 || cf->n_tdown < n - 1)
        return c3_fail(C3_EMODEL,
                       "%s: dim_mult (%d entries) and temperal_downsample (%d) do not fit", path, n,
                       cf->n_tdown);
    e->z_dim = cf->z_dim;
    e->patch = cf->patch_size > 0 ? cf->patch_size : 1;
    e->in_ch = ENC_IMG_CH * e->patch * e->patch;
    if (cf->in_channels != e->in_ch)
        return c3_fail(C3_EMODEL, "%s: in_channels %d is not %d image channels after patch %d",
                       path, cf->in_channels, ENC_IMG_CH, e->patch);
    int dims[9];
    dims[0] = cf->base_dim;
    for (int i = 0; i < n; i++)
        dims[i + 1] = cf->base_dim * cf->dim_mult[i];
    c3_vae *v = e->ctx;
    char name[ENC_NAME_LEN];
    C3_TRY(load_conv(v, ck, &e->conv_in, "encoder.conv_in", e->in_ch, dims[0], 3, 3, 3, false));
    e->down = xcalloc((size_t)n, sizeof *e->down);
    e->ndown = n;
    e->spatial = e->patch;
    e->temporal = 1;
    for (int i = 0; i < n; i++) {
        vdown *d = &e->down[i];
        d->cin = dims[i];
        d->cout = dims[i + 1];
        d->nres = cf->num_res_blocks;
        d->res = xcalloc((size_t)d->nres, sizeof *d->res);
        for (int r = 0; r < d->nres; r++) {
            snprintf(name, sizeof name, "encoder.down_blocks.%d.resnets.%d", i, r);
            C3_TRY(load_res(v, ck, &d->res[r], name, r ? d->cout : d->cin, d->cout));
        }
        bool down = i != n - 1, tdown = down && cf->temporal_down[i];
        d->mode = !down ? DOWN_NONE : tdown ? DOWN_3D : DOWN_2D;
        if (down) {
            snprintf(name, sizeof name, "encoder.down_blocks.%d.downsampler.resample.1", i);
            C3_TRY(load_conv(v, ck, &d->resample, name, d->cout, d->cout, 1, 3, 3, true));
            e->spatial *= ENC_DOWN_S;
        }
        if (tdown) {
            snprintf(name, sizeof name, "encoder.down_blocks.%d.downsampler.time_conv", i);
            C3_TRY(load_conv(v, ck, &d->time_conv, name, d->cout, d->cout, 3, 1, 1, false));
            e->temporal *= ENC_DOWN_T;
        }
        d->ft = tdown ? ENC_DOWN_T : 1;
        d->fs = down ? ENC_DOWN_S : 1;
        int64_t f = (int64_t)d->cin * d->ft * d->fs * d->fs;
        if (f % d->cout)
            return c3_fail(C3_EMODEL,
                           "%s: down block %d: %d input channels x %d cannot average into %d", path,
                           i, d->cin, d->ft * d->fs * d->fs, d->cout);
    }
    if (ENC_CHUNK % e->temporal)
        return c3_fail(
            C3_EMODEL,
            "%s: temporal downsampling by %d does not divide the encoder's %d-frame chunks", path,
            e->temporal, ENC_CHUNK);
    int c = dims[n];
    C3_TRY(load_res(v, ck, &e->mid[0], "encoder.mid_block.resnets.0", c, c));
    C3_TRY(load_attn(v, ck, &e->attn, "encoder.mid_block.attentions.0", c));
    C3_TRY(load_res(v, ck, &e->mid[1], "encoder.mid_block.resnets.1", c, c));
    C3_TRY(load_gamma(e, ck, &e->norm_out, "encoder.norm_out.gamma", c));
    C3_TRY(load_conv(v, ck, &e->conv_out, "encoder.conv_out", c, 2 * e->z_dim, 3, 3, 3, false));
    C3_TRY(load_conv(v, ck, &e->quant, "quant_conv", 2 * e->z_dim, 2 * e->z_dim, 1, 1, 1, false));
    return C3_OK;
}

void vae_enc_free(c3_vae_enc *e) {
    if (!e) return;
    free_conv(&e->conv_in);
    free_conv(&e->conv_out);
    free_conv(&e->quant);
    for (int i = 0; i < e->ndown; i++) {
        vdown *d = &e->down[i];
        for (int r = 0; d->res && r < d->nres; r++)
            free_res(&d->res[r]);
        free(d->res);
        free_conv(&d->resample);
        free_conv(&d->time_conv);
        c3_free(&d->last);
    }
    free(e->down);
    for (int i = 0; i < 2; i++)
        free_res(&e->mid[i]);
    c3_free(&e->attn.gamma);
    c3_free(&e->attn.wqkv);
    c3_free(&e->attn.bqkv);
    c3_free(&e->attn.wproj);
    c3_free(&e->attn.bproj);
    c3_free(&e->norm_out);
    vae_free(e->ctx);
    free(e);
}

int vae_enc_load(c3_vae_enc **out, const c3_ckpt *ck, c3_backend *be) {
    *out = NULL;
    if (!ck->has_vae)
        return c3_fail(C3_EMODEL,
                       "%s: the checkpoint was opened without its VAE (vae/ is needed to encode)",
                       ck->dir);
    if (!be->conv3d_strided || !be->avgdown3d)
        return c3_fail(C3_EFAIL, "the %s backend has no VAE encoder operations", be->name);
    c3_vae_enc *e = xcalloc(1, sizeof *e);
    e->be = be;
    e->ctx = vae_context(be);
    e->cfg = ck->v;
    int rc = enc_load_(e, ck);
    if (rc != C3_OK) {
        vae_enc_free(e);
        return rc;
    }
    *out = e;
    return C3_OK;
}

int vae_enc_spatial(const c3_vae_enc *e) {
    return e->spatial;
}
int vae_enc_temporal(const c3_vae_enc *e) {
    return e->temporal;
}
int vae_enc_channels(const c3_vae_enc *e) {
    return e->z_dim;
}

/* ------------------------------------------------------------------ layers */

static c3_tensor view3(const c3_tensor *t, int64_t a, int64_t b, int64_t c) {
    int64_t ne[3] = {a, b, c};
    return c3_view(t, 0, 3, ne);
}

/* The downsampler's time conv: y = conv_t([last, x]) with stride 2, where
 * last is the previous chunk's last frame of x; x [C, T, H, W]. Leaves x's
 * last frame as the next `last`. */
static int time_down(c3_vae_enc *e, vdown *d, const c3_tensor *x, c3_tensor *y) {
    c3_backend *be = e->be;
    int64_t C = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3], HW = H * W;
    c3_tensor stage = {0}, xin = {0};
    static const int swap01[3] = {1, 0, 2};
    /* stage [1 + T, C, HW] (time-major) = [last, x] */
    int rc = c3_alloc(be, &stage, be->act_dtype, C3_MEM_ACT, 3, 1 + T, C, HW);
    c3_tensor front = c3_rows(&stage, 0, 1), back = c3_rows(&stage, 1, T), x3 = view3(x, C, T, HW);
    if (!rc) rc = be->copy(be, &front, &d->last);
    if (!rc) rc = be->permute(be, &back, &x3, swap01);
    if (!rc) rc = c3_alloc(be, &xin, be->act_dtype, C3_MEM_ACT, 4, C, 1 + T, H, W);
    c3_tensor xin3 = view3(&xin, C, 1 + T, HW);
    if (!rc) rc = be->permute(be, &xin3, &stage, swap01);
    static const int tstride[3] = {ENC_DOWN_T, 1, 1}, nopad[4] = {0, 0, 0, 0};
    if (!rc) rc = act4(e, y, C, (T + 1 - d->time_conv.kt) / ENC_DOWN_T + 1, H, W);
    if (!rc) rc = be->conv3d_strided(be, y, &xin, &d->time_conv.w, &d->time_conv.b, tstride, nopad);
    c3_tensor tail = c3_rows(&stage, T, 1);
    if (!rc) rc = be->copy(be, &d->last, &tail);
    c3_free(&stage);
    c3_free(&xin);
    if (rc) c3_free(y);
    return rc;
}

/* A down block: ResBlocks, then (unless DOWN_NONE) the downsampler, plus
 * AvgDown3D of its input. */
typedef struct {
    c3_vae_enc *e;
    vdown *d;
    bool first;
} down_ctx;

/* ZeroPad2d(0, 1, 0, 1) + Conv2d(3, stride 2) on every frame of x, then for
 * DOWN_3D the time conv (a first chunk of one frame passes and is the next
 * history). */
static int down_resample(void *ud, const c3_tensor *x, c3_tensor *y) {
    down_ctx *c = ud;
    c3_vae_enc *e = c->e;
    vdown *d = c->d;
    c3_backend *be = e->be;
    c3_tensor a = {0}, b = {0};
    int64_t C = x->ne[0], T = x->ne[1], H = x->ne[2], W = x->ne[3];
    static const int sstride[3] = {1, ENC_DOWN_S, ENC_DOWN_S}, rbpad[4] = {0, 1, 0, 1};
    int rc = act4(e, &a, C, T, (H + 1 - 3) / ENC_DOWN_S + 1, (W + 1 - 3) / ENC_DOWN_S + 1);
    if (rc) goto out;
    if ((rc = be->conv3d_strided(be, &a, x, &d->resample.w, &d->resample.b, sstride, rbpad)))
        goto out;
    if (d->mode == DOWN_3D) {
        int64_t HW = a.ne[2] * a.ne[3];
        if (c->first) {
            if (a.ne[1] != 1) {
                rc = c3_fail(C3_EFAIL, "VAE encoder: a first chunk must have one frame, found %lld",
                             (long long)a.ne[1]);
                goto out;
            }
            c3_free(&d->last);
            if ((rc = c3_alloc(be, &d->last, be->act_dtype, C3_MEM_ACT, 3, (int64_t)1, C, HW)))
                goto out;
            if ((rc = be->copy(be, &d->last, &a))) goto out;
            d->last_live = true;
        } else {
            if (!d->last_live) {
                rc = c3_fail(C3_EFAIL, "VAE encoder: a later chunk came without the first");
                goto out;
            }
            VAE_STEP(time_down(e, d, &a, &b));
        }
    }
    *y = a;
    a = (c3_tensor){0};
out:
    c3_free(&a);
    c3_free(&b);
    return rc;
}

static int down_shortcut(void *ud, const c3_tensor *x, c3_tensor *y) {
    down_ctx *c = ud;
    vdown *d = c->d;
    int64_t Ts = (x->ne[1] + d->ft - 1) / d->ft;
    C3_TRY(act4(c->e, y, d->cout, Ts, x->ne[2] / d->fs, x->ne[3] / d->fs));
    return c->e->be->avgdown3d(c->e->be, y, x, d->ft, d->fs);
}

static int down_fwd(c3_vae_enc *e, vdown *d, const c3_tensor *x, c3_tensor *y, bool first,
                    bool keep) {
    down_ctx c = {e, d, first};
    vblock k = {"VAE encoder down block", d->mode != DOWN_NONE ? down_resample : NULL,
                down_shortcut, &c};
    return block_fwd(e->ctx, d->res, d->nres, &k, x, y, keep);
}

/* One encoder call: x [in_ch, Tc, H/p, W/p] -> y [2 z_dim, t, h, w] after quant_conv. */
static int encode_chunk(c3_vae_enc *e, const c3_tensor *x, bool first, bool keep, c3_tensor *y) {
    c3_vae *v = e->ctx;
    c3_tensor a = {0}, b = {0};
    int rc;
    if ((rc = conv_fwd(v, &e->conv_in, x, &a, keep))) goto out;
    for (int i = 0; i < e->ndown; i++)
        VAE_STEP(down_fwd(e, &e->down[i], &a, &b, first, keep));
    VAE_STEP(mid_fwd(v, e->mid, &e->attn, &a, &b, keep));
    VAE_STEP(head_fwd(v, &e->norm_out, &e->conv_out, &a, &b, keep));
    rc = conv_fwd(v, &e->quant, &a, y, false);
out:
    c3_free(&a);
    c3_free(&b);
    return rc;
}

static void drop_history(c3_vae_enc *e) {
    reset_history(e->ctx);
    for (int i = 0; i < e->ndown; i++) {
        c3_free(&e->down[i].last);
        e->down[i].last_live = false;
    }
}

/* The encode's state across chunks: the pixels and the frames taken so far. */
typedef struct {
    c3_vae_enc *e;
    const float *pixels; /* [3, F, H, W] */
    int F, H, W, f0;
    float *patched; /* one chunk's patchified frames (host) */
} enc_walk;

/* Chunk c of the encode (vae_walk body): frames [f0, f0 + fc) (the first
 * frame, then ENC_CHUNK at a time) patchified -> y [2 z_dim, t, h, w]. */
static int enc_chunk(void *ud, int c, bool first, bool keep, c3_tensor *y) {
    enc_walk *ew = ud;
    c3_vae_enc *e = ew->e;
    c3_backend *be = e->be;
    int p = e->patch, fc = first ? 1 : ENC_CHUNK, F = ew->F, W = ew->W, f0 = ew->f0;
    int64_t Hp = ew->H / p, Wp = W / p, fplane = (int64_t)ew->H * W;
    const float *pixels = ew->pixels;
    (void)c;
    /* patchify frames [f0, f0 + fc) on the host: [3 p p, fc, H/p, W/p] */
    ew->patched = xrealloc(ew->patched, sizeof(float) * (size_t)(e->in_ch * fc * Hp * Wp));
    for (int ch = 0; ch < ENC_IMG_CH; ch++)
        for (int pw = 0; pw < p; pw++)
            for (int ph = 0; ph < p; ph++) {
                float *dst = ew->patched + (int64_t)((ch * p + pw) * p + ph) * fc * Hp * Wp;
                for (int f = 0; f < fc; f++)
                    for (int64_t yy = 0; yy < Hp; yy++)
                        for (int64_t xx = 0; xx < Wp; xx++)
                            dst[(f * Hp + yy) * Wp + xx] =
                                pixels[((int64_t)ch * F + f0 + f) * fplane + (yy * p + ph) * W +
                                       xx * p + pw];
            }
    ew->f0 += fc;
    c3_tensor x = {0};
    int rc = act4(e, &x, e->in_ch, fc, Hp, Wp);
    if (rc == C3_OK) rc = be->upload(be, &x, ew->patched, C3_F32);
    if (rc == C3_OK) rc = encode_chunk(e, &x, first, keep, y);
    c3_free(&x);
    return rc;
}

int vae_encode(c3_vae_enc *e, const float *pixels, int F, int H, int W, float **out, int *T, int *h,
               int *w) {
    *out = NULL;
    int s = e->spatial;
    if (F < 1 || (F - 1) % ENC_CHUNK)
        return c3_fail(C3_EINPUT, "VAE encode: %d frames; the encoder takes 1 + %dk", F, ENC_CHUNK);
    if (H < s || W < s || H % s || W % s)
        return c3_fail(C3_EINPUT, "VAE encode: %dx%d pixels must be positive multiples of %d", W, H,
                       s);
    int64_t hw = (int64_t)(H / s) * (W / s), Cz = e->z_dim;
    int64_t Tl = 1 + (int64_t)(F - 1) / e->temporal;
    float *res = xcalloc((size_t)(Cz * Tl * hw), sizeof(float));
    /* the posterior's mean (the first z_dim channels), normalised as the pipeline does */
    float *mean = xmalloc(sizeof(float) * (size_t)Cz),
          *inv_std = xmalloc(sizeof(float) * (size_t)Cz);
    for (int64_t ch = 0; ch < Cz; ch++) {
        mean[ch] = e->cfg.latents_mean[ch];
        inv_std[ch] = 1.0f / e->cfg.latents_std[ch];
    }
    enc_walk ew = {.e = e, .pixels = pixels, .F = F, .H = H, .W = W};
    vae_walk wk = {.what = "VAE encode",
                   .n = 1 + (F - 1) / ENC_CHUNK,
                   .Cy = 2 * Cz,
                   .C = Cz,
                   .T = Tl,
                   .plane = hw,
                   .out = res,
                   .shift = mean,
                   .scale = inv_std,
                   .body = enc_chunk,
                   .ud = &ew};
    drop_history(e);
    int rc = vae_walk_chunks(e->be, &wk);
    drop_history(e);
    free(ew.patched);
    free(mean);
    free(inv_std);
    if (rc) {
        free(res);
        return rc;
    }
    *out = res;
    *T = (int)Tl;
    *h = H / s;
    *w = W / s;
    return C3_OK;
}
