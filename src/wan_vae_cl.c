/* wan_vae_cl.c - the Wan2.2 VAE decoder in padded channels-last layout,
 * on backends with the vcl_* ops (C3_CAP_VAE_CL: CUDA, bf16); wan_vae.c
 * chooses it at load and runs its chunks (wan_vae_cl.h). */
#include "wan_vae_cl.h"

#include <stdio.h>

/* On backends with the vcl_* ops (CUDA, bf16) the decoder runs on padded
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

/* Chunk t of the channels-last decode (vae_walk body): latent frame t ->
 * img [C, Tc, Ho, Wo] F32, unpatchified and clamped. */
int cl_chunk(void *ud, int t, bool first, bool keep, c3_tensor *img) {
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
int cl_prepare(cl_walk *cw, const float *zr, int T) {
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
