/* model.c - the Cosmos3 MoT transformer's forward (spec section 3) on the backend table.
 *
 * UND tower: embed ids, per layer pre-norm causal GQA attention with text RoPE
 * and a SwiGLU/ReLU^2 MLP; each layer's K (post-norm, post-RoPE; Edge: the
 * k_norm_und_for_gen form) and V are kept as the branch's cache.
 * GEN tower: patchify, proj_in + timestep embedding, per layer attention of
 * the GEN queries over [UND K/V | GEN K/V] with 3-D interleaved mRoPE, MLP,
 * final norm, proj_out, unpatchify.
 *
 * Every size comes from c3_tconfig and the safetensors headers. Tensor
 * parallelism: q/k/v, gate/up are split by output rows, to_out/down by input
 * columns (then all-reduced over shard.tp).
 *
 * This file is the forward; the weights load in model_load.c, stream in
 * model_offload.c, and the GEN layer loop replays in model_graphs.c. */
#include "env.h"
#include "model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void (*model_trace_hook)(const char *name, int layer, const c3_tensor *t);

const c3_tconfig *model_config(const c3_model *m) { return &m->c; }

bool model_has_sound(const c3_model *m) {
    return m && m->has_sound;
}

static void trace(const char *name, int layer, const c3_tensor *t) {
    if (model_trace_hook) model_trace_hook(name, layer, t);
}

void model_fp8_gen_act(c3_model *m, bool w8a8) {
    m->gen_w8a8 = w8a8;
}
void model_fp8_und_act(c3_model *m, bool w8a8) {
    m->und_w8a8 = w8a8;
}
bool model_fp8(const c3_model *m) {
    return m && m->fp8_any;
}

bool model_fp8_step_w8a8(const c3_tconfig *c, int i, int n) {
    if (!c->fp8_policy || n <= 1) return true;
    bool first = i < c->fp8_first, last = i >= n - c->fp8_last;
    if (first && last) return !c->fp8_overlap_a16;
    return !(first || last);
}

/* ------------------------------------------------------------ positions */

void model_gen_position(const c3_tconfig *c, int L, const c3_latent_geom *g, int64_t token,
                        double pos[3]) {
    int64_t hp = (g->h + c->patch - 1) / c->patch, wp = (g->w + c->patch - 1) / c->patch;
    int64_t f = token / (hp * wp), r = (token / wp) % hp, col = token % wp;
    int64_t o = (int64_t)L + c->temporal_margin;
    int64_t Sv = (int64_t)g->T * hp * wp;
    if (g->sound_T > 0 && token >= Sv) { /* sound token k: (t, 0, 0) from vision frame 0's t */
        int64_t k = token - Sv;
        if (g->sound_T > 1 &&
            c->fps_modulation) /* fp32 as upstream: (k / sound_fps) * base_fps + o */
            pos[0] = (float)((float)k / (float)c->sound_latent_fps * (float)c->base_fps) + (float)o;
        else
            pos[0] = (double)(o + k);
        pos[1] = pos[2] = 0;
        return;
    }
    if (g->T > 1 && c->fps_modulation && g->fps > 0) {
        /* fp32, as the reference computes it: o + f * (base_fps / fps) */
        float ratio = (float)(c->base_fps / g->fps);
        float pt = (float)o + (float)f * ratio;
        pos[0] = pt;
    } else {
        pos[0] = (double)(o + f);
    }
    pos[1] = (double)r;
    pos[2] = (double)col;
}

/* cos/sin tables [n, hd] for positions pos[n][3] (fp32 angles). */
static void rope_tables(const c3_model *m, const double (*pos)[3], int64_t n, float *cs, float *sn) {
    int hd = m->c.head_dim, half = hd / 2;
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < half; j++) {
            float p = (float)pos[i][m->rope_axis[j]];
            float ang = p * m->inv_freq[j];
            float cv = (float)cos((double)ang), sv = (float)sin((double)ang);
            cs[i * hd + j] = cs[i * hd + j + half] = cv;
            sn[i * hd + j] = sn[i * hd + j + half] = sv;
        }
}

/* Upload host floats into a new activation tensor. */
static int upload_new(c3_backend *be, c3_tensor *t, const float *src, c3_memcat cat, int ndim, const int64_t *ne) {
    C3_TRY(be->alloc(be, t, be->act_dtype, ndim, ne, cat));
    return be->upload(be, t, src, C3_F32);
}

/* cos/sin tables [n, hd] of the positions pos[n][3] (t, h, w), uploaded. */
static int upload_rope(c3_model *m, double (*pos)[3], int64_t n, c3_tensor *cs, c3_tensor *sn) {
    int64_t hd = m->c.head_dim;
    float *hc = xmalloc(sizeof(float) * (size_t)(n * hd)), *hs = xmalloc(sizeof(float) * (size_t)(n * hd));
    rope_tables(m, (const double(*)[3])pos, n, hc, hs);
    int64_t ne[] = {n, hd};
    int rc = upload_new(m->be, cs, hc, C3_MEM_ACT, 2, ne);
    if (!rc) rc = upload_new(m->be, sn, hs, C3_MEM_ACT, 2, ne);
    free(hc);
    free(hs);
    return rc;
}

static int check_cancel(const c3_model *m) {
    if (m->shard.cancel && *m->shard.cancel) return c3_fail(C3_ECANCEL, "cancelled");
    return C3_OK;
}

/* y = x . w^T (row-parallel under TP: all-reduce the partial sums). */
static int linear_rowpar(c3_model *m, c3_tensor *y, const c3_tensor *x, const c3_tensor *w) {
    c3_backend *be = m->be;
    if (m->shard.tp_size <= 1) return be->linear(be, y, x, w, NULL, false);
    if (y->dtype == C3_F32) {
        C3_TRY(be->linear(be, y, x, w, NULL, false));
        return m->shard.tp->allreduce_sum(m->shard.tp, y);
    }
    /* bf16 activations: the partial sums stay fp32 through the all-reduce and
     * are rounded once, as the one unsplit product would be */
    c3_tensor acc = {0};
    C3_TRY(be->alloc(be, &acc, C3_F32, y->ndim, y->ne, C3_MEM_ACT));
    int rc = be->linear(be, &acc, x, w, NULL, false);
    if (rc == C3_OK) rc = m->shard.tp->allreduce_sum(m->shard.tp, &acc);
    if (rc == C3_OK) rc = be->copy(be, y, &acc);
    c3_free(&acc);
    return rc;
}

static int mlp_alloc(c3_model *m, mlp_scratch *s, int64_t n) {
    c3_backend *be = m->be;
    int64_t D = m->c.hidden, I = m->inter;
    C3_TRY(c3_alloc(be, &s->xn, be->act_dtype, C3_MEM_ACT, 2, n, D));
    if (m->shard.tp_size > 1) C3_TRY(c3_alloc(be, &s->tmp, be->act_dtype, C3_MEM_ACT, 2, n, D));
    C3_TRY(c3_alloc(be, &s->gu, be->act_dtype, C3_MEM_ACT, 2, n, (m->c.mlp_gated ? 2 : 1) * I));
    C3_TRY(c3_alloc(be, &s->h, be->act_dtype, C3_MEM_ACT, 2, n, I));
    return C3_OK;
}
static void mlp_free(mlp_scratch *s) {
    c3_free(&s->xn);
    c3_free(&s->tmp);
    c3_free(&s->gu);
    c3_free(&s->h);
}

int gen_acts_alloc(c3_model *m, gen_acts *g, int64_t T, int64_t hp, int64_t wp, int nb,
                          int64_t n) {
    c3_backend *be = m->be;
    const c3_tconfig *c = &m->c;
    int64_t p = c->patch, D = c->hidden, hd = c->head_dim, C = c->latent_ch;
    c3_dtype at = be->act_dtype;
    C3_TRY(c3_alloc(be, &g->lat, at, C3_MEM_ACT, 6, C, T, hp, p, wp, p));
    C3_TRY(c3_alloc(be, &g->out, at, C3_MEM_ACT, 6, (int64_t)nb * C, T, hp, p, wp, p));
    C3_TRY(c3_alloc(be, &g->x, at, C3_MEM_ACT, 2, n, D));
    C3_TRY(c3_alloc(be, &g->qkv, at, C3_MEM_ACT, 2, n, ((int64_t)m->hq + 2 * m->hkv) * hd));
    C3_TRY(c3_alloc(be, &g->q, at, C3_MEM_ACT, 3, n, (int64_t)m->hq, hd));
    C3_TRY(c3_alloc(be, &g->a, at, C3_MEM_ACT, 3, n, (int64_t)m->hq, hd));
    C3_TRY(c3_alloc(be, &g->k, at, C3_MEM_ACT, 3, n, (int64_t)m->hkv, hd));
    C3_TRY(c3_alloc(be, &g->v, at, C3_MEM_ACT, 3, n, (int64_t)m->hkv, hd));
    C3_TRY(c3_alloc(be, &g->y, at, C3_MEM_ACT, 2, n, (int64_t)c->patch_dim));
    return mlp_alloc(m, &g->s, n);
}
void gen_acts_free(gen_acts *g) {
    c3_tensor *t[] = {&g->lat, &g->out, &g->x, &g->qkv, &g->q, &g->a, &g->k, &g->v, &g->y};
    for (size_t i = 0; i < C3_ARRAY_LEN(t); i++)
        c3_free(t[i]);
    mlp_free(&g->s);
}

/* x += in . w^T: one accumulating product on one rank (the residual add in
 * the GEMM epilogue); with tp > 1 the row-parallel sum into tmp, then added. */
static int residual_linear(c3_model *m, c3_tensor *x, const c3_tensor *in, const c3_tensor *w,
                           c3_tensor *tmp) {
    if (m->shard.tp_size <= 1) return m->be->linear(m->be, x, in, w, NULL, true);
    C3_TRY(linear_rowpar(m, tmp, in, w));
    return m->be->add(m->be, x, tmp);
}

/* x += attn_out . wo^T ; x += MLP(RMS_post(x)). `a` is the attention output;
 * gate and up are one product (wgu), then the GLU. */
static int attn_out_and_mlp(c3_model *m, const tower_w *w, c3_tensor *x, const c3_tensor *a, mlp_scratch *s) {
    c3_backend *be = m->be;
    const c3_tconfig *c = &m->c;
    C3_TRY(residual_linear(m, x, a, &w->wo, &s->tmp));
    C3_TRY(be->rmsnorm(be, &s->xn, x, &w->post_norm, c->hidden, c->eps, c->norm_mul_fp32));
    C3_TRY(be->linear(be, &s->gu, &s->xn, &w->wgu, NULL, false));
    C3_TRY(be->glu(be, &s->h, &s->gu, c->mlp_gated ? C3_ACT_SWIGLU : C3_ACT_RELU2));
    return residual_linear(m, x, &s->h, &w->down, &s->tmp);
}

/* ------------------------------------------------------------- UND tower */

void undkv_free(c3_undkv *kv) {
    if (!kv) return;
    if (kv->k)
        for (int l = 0; l < kv->layers; l++) c3_free(&kv->k[l]);
    if (kv->v)
        for (int l = 0; l < kv->layers; l++) c3_free(&kv->v[l]);
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

int model_und(c3_model *m, const int32_t *ids, int L, c3_undkv *kv) {
    memset(kv, 0, sizeof *kv);
    if (L <= 0) return c3_fail(C3_EINPUT, "the prompt has no tokens");
    c3_backend *be = m->be;
    const c3_tconfig *c = &m->c;
    int64_t D = c->hidden, hd = c->head_dim, n = L;
    int rc = C3_OK;
    c3_tensor x = {0}, q = {0}, kr = {0}, a = {0}, cs = {0}, sn = {0};
    mlp_scratch s = {0};
    be->fp8_act = m->und_w8a8;
    kv->L = L;
    kv->layers = c->layers;
    kv->k = xcalloc((size_t)c->layers, sizeof *kv->k);
    kv->v = xcalloc((size_t)c->layers, sizeof *kv->v);

    /* text positions (n, n, n): the interleaved mRoPE reduces to 1-D */
    {
        double (*pos)[3] = xmalloc(sizeof *pos * (size_t)n);
        for (int64_t i = 0; i < n; i++) pos[i][0] = pos[i][1] = pos[i][2] = (double)i;
        rc = upload_rope(m, pos, n, &cs, &sn);
        free(pos);
        if (rc) goto done;
    }
    trace("rope.cos_und", -1, &cs);
    trace("rope.sin_und", -1, &sn);

    TRY(c3_alloc(be, &x, be->act_dtype, C3_MEM_ACT, 2, n, D));
    TRY(c3_alloc(be, &q, be->act_dtype, C3_MEM_ACT, 3, n, (int64_t)m->hq, hd));
    TRY(c3_alloc(be, &a, be->act_dtype, C3_MEM_ACT, 3, n, (int64_t)m->hq, hd));
    if (c->und_k_norm_for_gen) TRY(c3_alloc(be, &kr, be->act_dtype, C3_MEM_ACT, 3, n, (int64_t)m->hkv, hd));
    TRY(mlp_alloc(m, &s, n));
    if (m->embed_map) { /* sparse embedding: token ids -> rows */
        if (L > m->ids_cap) {
            m->ids_buf = xrealloc(m->ids_buf, sizeof *m->ids_buf * (size_t)L);
            m->ids_cap = L;
        }
        for (int i = 0; i < L; i++)
            m->ids_buf[i] = ids[i] >= 0 && ids[i] < c->vocab ? m->embed_map[ids[i]]
                                                             : (int32_t)(m->embed.ne[0] - 1);
        ids = m->ids_buf;
    }
    TRY(be->embed(be, &x, &m->embed, ids, L));
    trace("layer_in.und", -1, &x);

    TRY(ring_begin(m, 0));
    for (int l = 0; l < c->layers; l++) {
        TRY(check_cancel(m));
        const tower_w *w;
        TRY(tower_acquire(m, 0, l, &w));
        c3_tensor *kc = &kv->k[l], *vc = &kv->v[l];
        TRY(c3_alloc(be, kc, be->act_dtype, C3_MEM_KV, 3, n, (int64_t)m->hkv, hd));
        TRY(c3_alloc(be, vc, be->act_dtype, C3_MEM_KV, 3, n, (int64_t)m->hkv, hd));
        /* k used by UND attention: the cache itself, or (Edge) a scratch */
        c3_tensor *k = c->und_k_norm_for_gen ? &kr : kc;
        TRY(be->rmsnorm(be, &s.xn, &x, &w->in_norm, (int)D, c->eps, c->norm_mul_fp32));
        TRY(be->linear(be, &q, &s.xn, &w->wq, NULL, false)); /* [n, Hq_l, hd] */
        TRY(be->linear(be, k, &s.xn, &w->wk, NULL, false));  /* [n, Hkv_l, hd] */
        TRY(be->linear(be, vc, &s.xn, &w->wv, NULL, false)); /* [n, Hkv_l, hd] */
        if (w->has_k_norm_gen) /* GEN sees RoPE(k_norm_und_for_gen(raw k)) */
            TRY(be->rmsnorm(be, kc, k, &w->k_norm_gen, (int)hd, c->eps, c->norm_mul_fp32));
        if (w->has_qk_norm) {
            TRY(be->rmsnorm(be, &q, &q, &w->q_norm, (int)hd, c->eps, c->norm_mul_fp32));
            TRY(be->rmsnorm(be, k, k, &w->k_norm, (int)hd, c->eps, c->norm_mul_fp32));
        }
        trace("layers.und_q_prerope", l, &q);
        trace("layers.und_k_prerope", l, k);
        TRY(be->rope(be, &q, &cs, &sn));
        TRY(be->rope(be, k, &cs, &sn));
        if (w->has_k_norm_gen) TRY(be->rope(be, kc, &cs, &sn));
        trace("layers.und_q", l, &q);
        trace("layers.und_k", l, kc);
        trace("layers.und_v", l, vc);
        /* the last layer's attention output and MLP feed nothing GEN reads */
        if (l == c->layers - 1 && !model_trace_hook) {
            TRY(tower_release(m, 0, l));
            break;
        }
        c3_kvseg seg = {k, vc, n, n};
        TRY(be->attention(be, &a, &q, &seg, 1, true, 1.0f / sqrtf((float)hd)));
        trace("layers.und_attn", l, &a);
        TRY(attn_out_and_mlp(m, w, &x, &a, &s));
        trace("layers.und_out", l, &x);
        TRY(tower_release(m, 0, l));
    }
    TRY(ring_collect(m, 0));
done:
    c3_free(&x);
    c3_free(&q);
    c3_free(&kr);
    c3_free(&a);
    c3_free(&cs);
    c3_free(&sn);
    mlp_free(&s);
    if (rc) undkv_free(kv);
    return rc;
}

/* ------------------------------------------------------------- GEN tower */

/* The timestep's sinusoidal features (fp32, cos first): s = t * timestep_scale
 * as upstream's float32 tensor times a Python float (both float32 operands;
 * t is fractional for the fixed-step sampler), f_k = exp(-ln(10000) k / half),
 * e = [cos(s f), sin(s f)]. The MLP runs on the device (time_embed). */
static void time_sinusoid(const c3_model *m, double timestep, float *e) {
    int half = m->te_in / 2;
    float s = (float)timestep * (float)m->c.timestep_scale;
    float lmax = (float)log(10000.0);
    for (int k = 0; k < half; k++) {
        float f = expf(-lmax * (float)k / (float)half);
        float arg = s * f;
        e[k] = (float)cos((double)arg);
        e[k + half] = (float)sin((double)arg);
    }
}

/* temb [1, D] (F32, on the device) = linear_2(SiLU(linear_1(e))). */
static int time_embed(c3_model *m, const float *e, c3_tensor *temb) {
    c3_backend *be = m->be;
    int64_t D = m->c.hidden;
    c3_tensor ed = {0}, h = {0};
    int64_t ne[] = {1, m->te_in};
    int rc = be->alloc(be, &ed, C3_F32, 2, ne, C3_MEM_ACT);
    if (!rc) rc = be->upload(be, &ed, e, C3_F32);
    if (!rc) rc = c3_alloc(be, &h, C3_F32, C3_MEM_ACT, 2, (int64_t)1, D);
    if (!rc) rc = be->linear(be, &h, &ed, &m->te_w1d, &m->te_b1d, false);
    if (!rc) rc = be->silu(be, &h, &h);
    if (!rc) rc = c3_alloc(be, temb, C3_F32, C3_MEM_ACT, 2, (int64_t)1, D);
    if (!rc) rc = be->linear(be, temb, &h, &m->te_w2d, &m->te_b2d, false);
    c3_free(&ed);
    c3_free(&h);
    return rc;
}

/* Trace a host [D]-vector broadcast to n rows (debug only). */
static void trace_rows(c3_backend *be, const char *name, const float *v, int64_t n, int64_t D) {
    if (!model_trace_hook) return;
    float *buf = xmalloc(sizeof(float) * (size_t)(n * D));
    for (int64_t i = 0; i < n; i++) memcpy(buf + i * D, v, sizeof(float) * (size_t)D);
    c3_tensor t = {0};
    int64_t ne[] = {n, D};
    if (upload_new(be, &t, buf, C3_MEM_ACT, 2, ne) == C3_OK) trace(name, -1, &t);
    c3_free(&t);
    free(buf);
}

/* Ulysses: local tokens x all local heads <-> all tokens x a slice of heads.
 * scatter: in [Sl, H, hd] -> out [S_pad, H/sp, hd] (tmp [sp, Sl, H/sp*hd]);
 * gather is the inverse. Token block j of the padded sequence lives on
 * sequence rank j; head slice j is computed by sequence rank j. */
static int ulysses_scatter(c3_model *m, c3_tensor *out, const c3_tensor *in, c3_tensor *tmp) {
    c3_backend *be = m->be;
    int sp = m->shard.sp_size;
    int64_t Sl = in->ne[0], H = in->ne[1], hd = in->ne[2];
    int64_t ne[3] = {Sl, sp, H / sp * hd};
    c3_tensor v = c3_view(in, 0, 3, ne);
    static const int perm[3] = {1, 0, 2};
    int64_t tne[3] = {sp, Sl, H / sp * hd};
    c3_tensor t = c3_view(tmp, 0, 3, tne);
    C3_TRY(be->permute(be, &t, &v, perm));                /* [sp, Sl, H/sp*hd] */
    return m->shard.sp->alltoall(m->shard.sp, out, &t); /* [sp * Sl, H/sp, hd] */
}

static int ulysses_gather(c3_model *m, c3_tensor *out, const c3_tensor *in, c3_tensor *tmp) {
    c3_backend *be = m->be;
    int sp = m->shard.sp_size;
    int64_t Sl = out->ne[0], H = out->ne[1], hd = out->ne[2];
    int64_t tne[3] = {sp, Sl, H / sp * hd};
    c3_tensor t = c3_view(tmp, 0, 3, tne);
    C3_TRY(m->shard.sp->alltoall(m->shard.sp, &t, in)); /* [sp(head slice), Sl, H/sp*hd] */
    static const int perm[3] = {1, 0, 2};
    int64_t one[3] = {Sl, sp, H / sp * hd};
    c3_tensor o = c3_view(out, 0, 3, one);
    return be->permute(be, &o, &t, perm);               /* [Sl, H, hd] */
}

/* Scratch for the Ulysses exchange of one GEN call. */
typedef struct {
    c3_tensor qh, kh, vh, ah;  /* [S_pad, H/sp, hd] */
    c3_tensor tmp;             /* [sp, Sl, Hq_l/sp*hd] (largest) */
    c3_tensor uk, uv, utmp;    /* UND head slice [L, Hkv_l/sp, hd], tmp [sp, L, Hkv_l/sp*hd] */
    int64_t S, S_pad;
} ulysses_scratch;

static void ulysses_free(ulysses_scratch *u) {
    c3_free(&u->qh);
    c3_free(&u->kh);
    c3_free(&u->vh);
    c3_free(&u->ah);
    c3_free(&u->tmp);
    c3_free(&u->uk);
    c3_free(&u->uv);
    c3_free(&u->utmp);
}

/* The GEN attention of layer l: q [S, Hq_l, hd] over [UND K/V | GEN K/V].
 * With Ulysses (sp > 1) q, k, v hold this rank's Sl tokens: they are swapped
 * to all S_pad tokens of H/sp heads, attention runs on the head slice with
 * the UND K/V head-sliced and the padded keys masked, and the output is
 * swapped back. */
static int gen_attention(c3_model *m, int l, const c3_undkv *kv, c3_tensor *out, const c3_tensor *q,
                         const c3_tensor *k, const c3_tensor *v, ulysses_scratch *u) {
    c3_backend *be = m->be;
    float scale = 1.0f / sqrtf((float)m->c.head_dim);
    int sp = m->shard.sp_size;
    if (sp <= 1) {
        int64_t S = q->ne[0];
        c3_kvseg seg[2] = {{&kv->k[l], &kv->v[l], kv->L, kv->L}, {k, v, S, S}};
        be->attn_gen = true; /* --attention fp8 applies here */
        int rc = be->attention(be, out, q, seg, 2, false, scale);
        be->attn_gen = false;
        return rc;
    }
    int r = m->shard.sp_rank;
    int64_t L = kv->L, hs = m->hkv / sp, hd = m->c.head_dim;
    /* this rank's head slice of the replicated UND K/V */
    static const int perm[3] = {1, 0, 2};
    int64_t vne[3] = {L, sp, hs * hd}, tne[3] = {sp, L, hs * hd}, sne[3] = {L, hs, hd};
    c3_tensor t = c3_view(&u->utmp, 0, 3, tne);
    c3_tensor src = c3_view(&kv->k[l], 0, 3, vne);
    C3_TRY(be->permute(be, &t, &src, perm));
    c3_tensor sl = c3_view(&t, (int64_t)r * L * hs * hd, 3, sne);
    C3_TRY(be->copy(be, &u->uk, &sl));
    src = c3_view(&kv->v[l], 0, 3, vne);
    C3_TRY(be->permute(be, &t, &src, perm));
    sl = c3_view(&t, (int64_t)r * L * hs * hd, 3, sne);
    C3_TRY(be->copy(be, &u->uv, &sl));
    /* sequence shards -> head shards */
    C3_TRY(ulysses_scatter(m, &u->qh, q, &u->tmp));
    C3_TRY(ulysses_scatter(m, &u->kh, k, &u->tmp));
    C3_TRY(ulysses_scatter(m, &u->vh, v, &u->tmp));
    c3_kvseg seg[2] = {{&u->uk, &u->uv, L, L}, {&u->kh, &u->vh, u->S_pad, u->S}};
    be->attn_gen = true;
    int rc = be->attention(be, &u->ah, &u->qh, seg, 2, false, scale); /* [S_pad, Hq_l/sp, hd] */
    be->attn_gen = false;
    C3_TRY(rc);
    return ulysses_gather(m, out, &u->ah, &u->tmp);
}

/* Trace [UND K|GEN K] concatenated, as the reference's attention receives it. */
static void trace_concat(c3_model *m, const char *name, int l, const c3_tensor *a, const c3_tensor *b) {
    if (!model_trace_hook) return;
    c3_backend *be = m->be;
    c3_tensor t = {0};
    if (c3_alloc(be, &t, be->act_dtype, C3_MEM_ACT, 3, a->ne[0] + b->ne[0], a->ne[1], a->ne[2]) != C3_OK) return;
    c3_tensor va = c3_view(&t, 0, 3, a->ne), vb = c3_view(&t, c3_numel(a), 3, b->ne);
    if (be->copy(be, &va, a) == C3_OK && be->copy(be, &vb, b) == C3_OK) trace(name, l, &t);
    c3_free(&t);
}

/* The RoPE tables of one branch's GEN tokens [t0, t0 + S) (views; the cache
 * owns them): found in rope_cache, else computed into the slot used least
 * recently, never one this call (m->rope_call) already handed out. */
static int gen_rope(c3_model *m, int L, const c3_latent_geom *g, int64_t t0, int64_t S,
                    c3_tensor *cs, c3_tensor *sn) {
    rope_cache *hit = NULL;
    for (int i = 0; i < ROPE_CACHE_SLOTS && !hit; i++) {
        rope_cache *r = &m->rope[i];
        if (r->valid && r->L == L && r->t0 == t0 && r->S == S && r->g.T == g->T && r->g.h == g->h &&
            r->g.w == g->w && r->g.sound_T == g->sound_T && (g->T <= 1 || r->g.fps == g->fps))
            hit = r;
    }
    if (!hit) {
        for (int i = 0; i < ROPE_CACHE_SLOTS; i++) {
            rope_cache *r = &m->rope[i];
            if (r->call == m->rope_call) continue; /* in use by this call */
            if (!hit || !r->valid || (hit->valid && r->used < hit->used)) hit = r;
            if (!r->valid) break;
        }
        if (!hit) return c3_fail(C3_EFAIL, "GEN forward: more RoPE tables than %d", ROPE_CACHE_SLOTS);
        c3_free(&hit->cs);
        c3_free(&hit->sn);
        hit->valid = false;
        double(*pos)[3] = xmalloc(sizeof *pos * (size_t)S);
        for (int64_t i = 0; i < S; i++)
            model_gen_position(&m->c, L, g, t0 + i, pos[i]);
        int rc = upload_rope(m, pos, S, &hit->cs, &hit->sn);
        free(pos);
        C3_TRY(rc);
        *hit = (rope_cache){
            .valid = true, .L = L, .g = *g, .t0 = t0, .S = S, .cs = hit->cs, .sn = hit->sn};
    }
    hit->call = m->rope_call;
    hit->used = ++m->rope_tick;
    *cs = c3_view(&hit->cs, 0, 2, hit->cs.ne);
    *sn = c3_view(&hit->sn, 0, 2, hit->sn.ne);
    return C3_OK;
}

bool model_batches(const c3_model *m) {
    return m->shard.sp_size <= 1 && !m->no_batch && c3_env()->cfg_batch;
}
void model_batch(c3_model *m, bool on) {
    m->no_batch = !on;
}

int model_gen(c3_model *m, const c3_undkv *kv, const float *latents, const c3_latent_geom *g,
              double timestep, float *velocity) {
    return model_gen_batch(m, 1, &kv, latents, g, timestep, &velocity);
}

int model_gen_batch(c3_model *m, int nb, const c3_undkv *const *kvs, const float *latents,
                    const c3_latent_geom *g, double timestep, float *const *velocity) {
    return model_gen_cached(m, nb, kvs, latents, g, timestep, velocity, NULL);
}

void model_gen_rows(const c3_model *m, const c3_latent_geom *g, int64_t *S, int64_t *D) {
    int64_t p = m->c.patch, hp = (g->h + p - 1) / p, wp = (g->w + p - 1) / p;
    int64_t S_all = (int64_t)g->T * hp * wp;
    int sp = m->shard.sp_size > 1 ? m->shard.sp_size : 1;
    *S = (S_all + sp - 1) / sp;
    *D = m->c.hidden;
}

/* The step cache's residual of branch rows x: res = x - xin_neg's negation
 * (xin_neg holds -input), allocated on first use. */
static int cache_record(c3_model *m, c3_tensor *res, const c3_tensor *x, const c3_tensor *xin_neg) {
    c3_backend *be = m->be;
    if (!res->data) C3_TRY(c3_alloc(be, res, x->dtype, C3_MEM_ACT, 2, x->ne[0], x->ne[1]));
    if (c3_numel(res) != c3_numel(x))
        return c3_fail(C3_EFAIL, "step cache: the residual's shape changed within a run");
    C3_TRY(be->copy(be, res, x));
    return be->add(be, res, xin_neg);
}

int model_gen_cached(c3_model *m, int nb, const c3_undkv *const *kvs, const float *latents,
                     const c3_latent_geom *g, double timestep, float *const *velocity,
                     const c3_gen_cache *gc) {
    return model_gen_multi(m, nb, kvs, 1, &latents, NULL, g, timestep, velocity, gc);
}

/* The model's host staging buffer *buf of at least n floats (kept across
 * calls: contents undefined). */
static float *host_stage(float **buf, size_t *cap, int64_t n) {
    if (*cap < (size_t)n) {
        free(*buf);
        *buf = xmalloc(sizeof(float) * (size_t)n);
        *cap = (size_t)n;
    }
    return *buf;
}

int model_gen_multi(c3_model *m, int nb, const c3_undkv *const *kvs, int nl,
                    const float *const *lats, const int *lat_of, const c3_latent_geom *g,
                    double timestep, float *const *velocity, const c3_gen_cache *gc) {
    c3_backend *be = m->be;
    const c3_tconfig *c = &m->c;
    be->fp8_act = m->gen_w8a8;
    if (nb < 1 || nb > GEN_MAX_BATCH)
        return c3_fail(C3_EFAIL, "GEN forward: %d branches (1 to %d)", nb, GEN_MAX_BATCH);
    for (int b = 0; b < nb; b++)
        if (!kvs[b] || kvs[b]->layers != c->layers || kvs[b]->L <= 0)
            return c3_fail(C3_EFAIL, "GEN forward: the UND cache does not belong to this model");
    if (g->T <= 0 || g->h <= 0 || g->w <= 0)
        return c3_fail(C3_EINPUT, "GEN forward: latent grid %dx%dx%d is empty", g->T, g->h, g->w);
    if (g->sound_T < 0 || (g->sound_T > 0 && (!m->has_sound || !g->sound || !g->sound_vel)))
        return c3_fail(C3_EFAIL,
                       "GEN forward: sound tokens need the transformer's audio_proj_in/out");
    int64_t C = c->latent_ch, p = c->patch, P = c->patch_dim, D = c->hidden;
    int64_t T = g->T, h = g->h, w = g->w, Ts = g->sound_T, SD = c->sound_dim;
    /* the sequence: S_v vision tokens, then Ts sound tokens */
    int64_t hp = (h + p - 1) / p, wp = (w + p - 1) / p, S_v = T * hp * wp, S_all = S_v + Ts;
    /* Ulysses: this rank holds tokens [t0, t0 + S) of the sequence padded to S_pad */
    int sp = m->shard.sp_size > 1 ? m->shard.sp_size : 1;
    if (nb > 1 && sp > 1)
        return c3_fail(C3_EFAIL, "GEN forward: branches are batched only without Ulysses");
    if (nl < 1 || nl > nb || (nl > 1 && (Ts > 0 || gc)))
        return c3_fail(C3_EFAIL,
                       "GEN forward: %d latents for %d branches (several only without sound and "
                       "the step cache)",
                       nl, nb);
    /* the branch -> latent map, and the first branch of each latent (it
     * computes the latent's input rows; the others copy them) */
    int lof[GEN_MAX_BATCH], first[GEN_MAX_BATCH];
    for (int i = 0; i < nl; i++)
        first[i] = -1;
    for (int b = 0; b < nb; b++) {
        lof[b] = lat_of ? lat_of[b] : 0;
        if (lof[b] < 0 || lof[b] >= nl)
            return c3_fail(C3_EFAIL, "GEN forward: branch %d reads latent %d of %d", b, lof[b], nl);
        if (first[lof[b]] < 0) first[lof[b]] = b;
    }
    const float *latents = lats[0];
    int64_t S = (S_all + sp - 1) / sp, S_pad = S * sp, t0 = (int64_t)m->shard.sp_rank * S;
    if (sp == 1) t0 = 0;
    int64_t n = nb * S; /* rows: branch b holds [b S, (b + 1) S) */
    int rc = C3_OK;
    /* replayable layer loop (see gen_graphs): buffers kept across calls */
    bool probe = gc && gc->probe[0], reuse = gc && !probe && gc->reuse;
    bool record = gc && !probe && !reuse;
    bool graphs = sp == 1 && Ts == 0 && gg_enabled(m) && !probe && !reuse, recording = false;
    if (graphs) C3_TRY(gg_buffers(m, T, hp, wp, nb));
    gen_acts own = {0}, A = {0};                    /* A: views of the graph buffers, or of own */
    c3_tensor tok = {0}, tok_all = {0}, bias = {0}; /* tokens [nl S_pad, P]: this rank's [S, P] */
    c3_tensor toks[GEN_MAX_BATCH];                  /* latent i's rows of this rank (views) */
    c3_tensor xin = {0}; /* the step cache's stack input, negated: [S, D] */
    c3_tensor snd = {0}, sbias = {0}, sout = {0}; /* sound: [S, SD] in, F32 [D] bias, [n, SD] out */
    float *shost = NULL, *sall = NULL;
    c3_tensor cs[GEN_MAX_BATCH] = {{0}}, sn[GEN_MAX_BATCH] = {{0}};
    ulysses_scratch u = {.S = S_all, .S_pad = S_pad};
    float *host = NULL, *e = NULL, *temb = NULL, *all = NULL;
    if (!graphs) TRY(gen_acts_alloc(m, &own, T, hp, wp, nb, n));
    {
        const gen_acts *src = graphs ? &m->gg.buf : &own;
        c3_tensor *d[] = {&A.lat, &A.out, &A.x,    &A.qkv,   &A.q,    &A.a,  &A.k,
                          &A.v,   &A.y,   &A.s.xn, &A.s.tmp, &A.s.gu, &A.s.h};
        const c3_tensor *f[] = {&src->lat,   &src->out,  &src->x,  &src->qkv, &src->q,
                                &src->a,     &src->k,    &src->v,  &src->y,   &src->s.xn,
                                &src->s.tmp, &src->s.gu, &src->s.h};
        for (size_t i = 0; i < C3_ARRAY_LEN(d); i++)
            *d[i] = c3_view(f[i], 0, f[i]->ndim, f[i]->ne);
    }

    /* patchify on the device: latents [C, T, hp*p, wp*p] (zero-padded on the
     * host only when h or w is odd) seen as [C, T, hp, p, wp, p], permuted to
     * tokens [T, hp, wp, p, p, C] = [S_all, P] (feature (ph * p + pw) * C + ch) */
    TRY(c3_alloc(be, &tok_all, be->act_dtype, C3_MEM_ACT, 2, (int64_t)nl * S_pad, P));
    for (int li = 0; li < nl; li++) {
        latents = lats[li];
        int64_t Hp = hp * p, Wp = wp * p;
        const float *src = latents;
        if (Hp != h || Wp != w) { /* [C, T, Hp, Wp]: the rows and columns past h, w zero */
            float *padded = host_stage(&m->stage_up, &m->stage_up_n, C * T * Hp * Wp);
            for (int64_t ct = 0; ct < C * T; ct++) {
                for (int64_t yy = 0; yy < h; yy++) {
                    float *row = padded + (ct * Hp + yy) * Wp;
                    memcpy(row, latents + (ct * h + yy) * w, sizeof(float) * (size_t)w);
                    memset(row + w, 0, sizeof(float) * (size_t)(Wp - w));
                }
                memset(padded + (ct * Hp + h) * Wp, 0, sizeof(float) * (size_t)((Hp - h) * Wp));
            }
            src = padded;
        }
        rc = be->upload(be, &A.lat, src, C3_F32);
        if (rc) goto done;
        static const int to_tokens[6] = {1, 2, 4, 3, 5, 0};
        c3_tensor tl = c3_rows(&tok_all, li * S_pad, S_pad); /* latent li's [S_pad, P] */
        int64_t pne[] = {T, hp, wp, p, p, C};
        c3_tensor body = c3_view(&tl, 0, 6, pne);
        TRY(be->permute(be, &body, &A.lat, to_tokens));
        if (S_pad > S_v) { /* the sound and Ulysses padding rows: zeros */
            float *z = xcalloc((size_t)((S_pad - S_v) * P), sizeof(float));
            c3_tensor pad = c3_rows(&tl, S_v, S_pad - S_v);
            rc = be->upload(be, &pad, z, C3_F32);
            free(z);
            if (rc) goto done;
        }
        toks[li] = c3_rows(&tl, t0, S); /* this rank's [S, P] (a view) */
    }
    latents = lats[0];
    tok = toks[lof[0]];
    /* host staging only where it is used: the Ulysses gather, or a crop of odd h / w */
    if (sp > 1) host = xcalloc((size_t)(S * P), sizeof(float));
    if (sp > 1)
        all = xcalloc((size_t)(S_pad * P), sizeof(float));
    else if (hp * p != h || wp * p != w) /* every float read back is downloaded first */
        all = host_stage(&m->stage_down, &m->stage_down_n, S_pad * P);
    trace("gen.patchified_tokens", -1, &tok);

    /* GEN positions and RoPE tables (cached per branch: see rope_cache) */
    m->rope_call++; /* the tables of this call stay until it ends */
    for (int b = 0; b < nb; b++)
        TRY(gen_rope(m, kvs[b]->L, g, t0, S, &cs[b], &sn[b]));
    trace("rope.cos_gen", -1, &cs[0]);
    trace("rope.sin_gen", -1, &sn[0]);

    /* x = proj_in(tok) + temb: the timestep embedding joins the bias; every
     * branch starts from the same rows */
    e = xmalloc(sizeof(float) * (size_t)m->te_in);
    time_sinusoid(m, timestep, e);
    TRY(time_embed(m, e, &bias)); /* [1, D] F32 */
    c3_tensor x0 = c3_rows(&A.x, 0, S);
    if (model_trace_hook) {
        temb = xmalloc(sizeof(float) * (size_t)D);
        TRY(be->download(be, temb, &bias));
        trace_rows(be, "gen.time_proj", e, S, m->te_in);
        trace_rows(be, "gen.time_embedder", temb, S, D);
        TRY(be->linear(be, &x0, &tok, &m->proj_in, &m->proj_in_bd, false));
        trace("gen.proj_in", -1, &x0);
    }
    if (Ts > 0) { /* the sound tokens' bias: audio_proj_in's + audio_modality_embed + temb */
        TRY(c3_alloc(be, &sbias, C3_F32, C3_MEM_ACT, 2, (int64_t)1, D));
        TRY(be->copy(be, &sbias, &m->a_in_b));
        TRY(be->add(be, &sbias, &m->a_me));
        TRY(be->add(be, &sbias, &bias));
    }
    TRY(be->add(be, &bias, &m->proj_in_bd)); /* temb + proj_in bias: one bias vector */
    for (int li = 0; li < nl; li++) { /* each latent's rows, in its first branch */
        c3_tensor xl = c3_rows(&A.x, first[li] * S, S), tk = toks[li];
        if (!g->pinned) {
            TRY(be->linear(be, &xl, &tk, &m->proj_in, &bias, false)); /* [S, D] */
        } else { /* pinned frames' tokens without the timestep: runs of rows by frame */
            int64_t fs = hp * wp;
            for (int64_t r0 = 0, r1; r0 < S; r0 = r1) {
                int64_t j = t0 + r0;
                bool pin = j < S_v && g->pinned[j / fs];
                r1 = j < S_v ? C3_MIN(S, (j / fs + 1) * fs - t0) : S;
                c3_tensor xr = c3_rows(&xl, r0, r1 - r0), tr = c3_rows(&tk, r0, r1 - r0);
                TRY(be->linear(be, &xr, &tr, &m->proj_in, pin ? &m->proj_in_bd : &bias, false));
            }
        }
    }
    /* this rank's sound rows [s0, s1) of the sequence: audio_proj_in(z) +
     * (its bias + audio_modality_embed) + temb over the vision rows there */
    int64_t s0 = C3_MAX(S_v, t0), s1 = C3_MIN(S_all, t0 + S);
    if (s1 > s0) {
        int64_t ns = s1 - s0;
        float *zt = xmalloc(sizeof(float) * (size_t)(ns * SD)); /* [ns, SD]: z transposed */
        for (int64_t k = 0; k < ns; k++)
            for (int64_t ch = 0; ch < SD; ch++)
                zt[k * SD + ch] = g->sound[ch * Ts + (s0 - S_v + k)];
        int64_t zne[] = {ns, SD};
        rc = upload_new(be, &snd, zt, C3_MEM_ACT, 2, zne);
        free(zt);
        if (rc) goto done;
        c3_tensor xs = c3_rows(&x0, s0 - t0, ns);
        if (model_trace_hook) {
            TRY(be->linear(be, &xs, &snd, &m->a_in, &m->a_in_b, false));
            trace("gen.sound_proj_in", -1, &xs);
        }
        TRY(be->linear(be, &xs, &snd, &m->a_in, &sbias, false)); /* [ns, D] */
    }
    for (int b = 0; b < nb; b++) { /* the other branches of a latent start from its rows */
        if (first[lof[b]] == b) continue;
        c3_tensor xb = c3_rows(&A.x, b * S, S), xf = c3_rows(&A.x, first[lof[b]] * S, S);
        TRY(be->copy(be, &xb, &xf));
    }
    trace("layer_in.gen", -1, &A.x);

    if (sp > 1) {
        int64_t hq_s = m->hq / sp, hkv_s = m->hkv / sp, hd = c->head_dim, L = kvs[0]->L;
        TRY(c3_alloc(be, &u.qh, be->act_dtype, C3_MEM_ACT, 3, S_pad, hq_s, hd));
        TRY(c3_alloc(be, &u.ah, be->act_dtype, C3_MEM_ACT, 3, S_pad, hq_s, hd));
        TRY(c3_alloc(be, &u.kh, be->act_dtype, C3_MEM_ACT, 3, S_pad, hkv_s, hd));
        TRY(c3_alloc(be, &u.vh, be->act_dtype, C3_MEM_ACT, 3, S_pad, hkv_s, hd));
        TRY(c3_alloc(be, &u.tmp, be->act_dtype, C3_MEM_ACT, 1, S * m->hq * hd));
        TRY(c3_alloc(be, &u.uk, be->act_dtype, C3_MEM_ACT, 3, L, hkv_s, hd));
        TRY(c3_alloc(be, &u.uv, be->act_dtype, C3_MEM_ACT, 3, L, hkv_s, hd));
        TRY(c3_alloc(be, &u.utmp, be->act_dtype, C3_MEM_ACT, 1, L * m->hkv * hd));
    }
    if (reuse) { /* the step cache: the stack's input plus the cached residual */
        for (int b = 0; b < nb; b++) {
            c3_tensor xb = c3_rows(&A.x, b * S, S);
            if (!gc->res[b] || !gc->res[b]->data || c3_numel(gc->res[b]) != c3_numel(&xb)) {
                rc = c3_fail(C3_EFAIL, "step cache: no residual of this shape to reuse");
                goto done;
            }
            TRY(be->add(be, &xb, gc->res[b]));
        }
        goto stack_done;
    }
    if (record || probe) {
        TRY(c3_alloc(be, &xin, A.x.dtype, C3_MEM_ACT, 2, S, D));
        TRY(be->affine(be, &xin, &x0, (const float[]){-1.0f}, NULL, 1));
    }
    int slot = -1;
    bool replayed = false;
    if (graphs) /* replay, record, or (first sight of this key) run eagerly */
        TRY(gg_begin(m, nb, kvs, cs, sn, &slot, &recording, &replayed));
    if (replayed) goto layers_done;
    TRY(ring_begin(m, 1));
    for (int l = 0; l < c->layers; l++) {
        TRY(check_cancel(m));
        const tower_w *wl;
        TRY(tower_acquire(m, 1, l, &wl));
        TRY(be->rmsnorm(be, &A.s.xn, &A.x, &wl->in_norm, (int)D, c->eps, c->norm_mul_fp32));
        TRY(be->linear(be, &A.qkv, &A.s.xn, &wl->wqkv, NULL, false)); /* [n, (Hq_l + 2 Hkv_l) hd] */
        const c3_tensor *qn = wl->has_qk_norm ? &wl->q_norm : NULL,
                        *kn = wl->has_qk_norm ? &wl->k_norm : NULL;
        for (int b = 0; b < nb; b++) {
            const c3_undkv *kv = kvs[b];
            if (kv->k[l].ne[0] != kv->L || kv->k[l].ne[1] != m->hkv) {
                rc = c3_fail(C3_EFAIL, "GEN forward: UND cache layer %d has the wrong shape", l);
                goto done;
            }
            c3_tensor qkv = c3_rows(&A.qkv, b * S, S), q = c3_rows(&A.q, b * S, S),
                      k = c3_rows(&A.k, b * S, S), v = c3_rows(&A.v, b * S, S),
                      a = c3_rows(&A.a, b * S, S);
            if (model_trace_hook) { /* the normalised q, k before the rotation */
                TRY(be->qkv_rope(be, &q, &k, &v, &qkv, qn, kn, NULL, NULL, c->eps,
                                 c->norm_mul_fp32));
                trace("layers.gen_q_prerope", l, &q);
                trace("layers.gen_k_prerope", l, &k);
            }
            TRY(be->qkv_rope(be, &q, &k, &v, &qkv, qn, kn, &cs[b], &sn[b], c->eps,
                             c->norm_mul_fp32));
            trace("layers.gen_q", l, &q);
            trace_concat(m, "layers.gen_k_all", l, &kv->k[l], &k);
            trace_concat(m, "layers.gen_v_all", l, &kv->v[l], &v);
            TRY(gen_attention(m, l, kv, &a, &q, &k, &v, &u));
        }
        trace("layers.gen_attn", l, &A.a);
        TRY(attn_out_and_mlp(m, wl, &A.x, &A.a, &A.s));
        trace("layers.gen_out", l, &A.x);
        TRY(tower_release(m, 1, l));
        if (probe) { /* the first block's residual, output - input, per branch */
            for (int b = 0; b < nb; b++) {
                c3_tensor xb = c3_rows(&A.x, b * S, S);
                TRY(be->add(be, &xb, &xin));
                TRY(be->download(be, gc->probe[b], &xb));
            }
            goto done; /* the next forward's ring_collect counts the copies queued */
        }
    }
    if (record && !graphs) /* replayed graphs record after layers_done */
        for (int b = 0; b < nb; b++) {
            c3_tensor xb = c3_rows(&A.x, b * S, S);
            TRY(cache_record(m, gc->res[b], &xb, &xin));
        }
stack_done:
    /* output: norm_moe_gen, proj_out + bias, unpatchify, crop */
    TRY(be->rmsnorm(be, &A.s.xn, &A.x, &m->norm_gen, (int)D, c->eps, c->norm_mul_fp32));
    trace("gen.final_norm", -1, &A.s.xn);
    TRY(be->linear(be, &A.y, &A.s.xn, &m->proj_out, &m->proj_out_b, false)); /* [n, P] */
    trace("gen.proj_out", -1, &A.y);
    if (Ts > 0) { /* sound velocity: audio_proj_out over the rank's rows, the sound rows kept */
        TRY(c3_alloc(be, &sout, be->act_dtype, C3_MEM_ACT, 2, n, SD));
        TRY(be->linear(be, &sout, &A.s.xn, &m->a_out, &m->a_out_b, false)); /* [n, SD] */
        trace("gen.sound_proj_out", -1, &sout);
        shost = xmalloc(sizeof(float) * (size_t)(n * SD));
        TRY(be->download(be, shost, &sout));
        const float *rows = shost; /* [nb S, SD]; Ulysses: gathered [S_pad, SD] */
        if (sp > 1) {
            sall = xmalloc(sizeof(float) * (size_t)(S_pad * SD));
            TRY(m->shard.sp->allgather_host(m->shard.sp, sall, shost, S * SD));
            rows = sall;
        }
        for (int b = 0; b < nb; b++) /* [SD, Ts] */
            for (int64_t k = 0; k < Ts; k++)
                for (int64_t ch = 0; ch < SD; ch++)
                    g->sound_vel[b][ch * Ts + k] = rows[(b * S + S_v + k) * SD + ch];
    }
    TRY(ring_collect(m, 1));
    if (sp > 1) { /* gather the sequence shards, unpatchify on the host */
        TRY(be->download(be, host, &A.y));
        TRY(m->shard.sp->allgather_host(m->shard.sp, all, host, S * P)); /* [S_pad, P] */
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t f = 0; f < T; f++)
                for (int64_t yy = 0; yy < h; yy++)
                    for (int64_t xx = 0; xx < w; xx++) {
                        int64_t t = (f * hp + yy / p) * wp + xx / p;
                        int64_t feat = ((yy % p) * p + xx % p) * C + ch;
                        velocity[0][((ch * T + f) * h + yy) * w + xx] = all[t * P + feat];
                    }
    } else { /* unpatchify on the device: [T, hp, wp, p, p, C] -> [C, T, hp, p, wp, p], then crop */
        static const int to_latent[6] = {5, 0, 1, 3, 2, 4};
        int64_t yne[] = {T, hp, wp, p, p, C}, one = c3_numel(&A.lat);
        for (int b = 0; b < nb; b++) {
            c3_tensor yv = c3_view(&A.y, b * S * P, 6, yne),
                      ob = c3_view(&A.out, b * one, 6, A.lat.ne);
            TRY(be->permute(be, &ob, &yv, to_latent)); /* [C, T, hp, p, wp, p] */
        }
        if (graphs) TRY(gg_end(m, slot, &recording));
    layers_done:;
        if (record && graphs) /* A.x still holds the stack's output (the norm wrote A.s.xn) */
            for (int b = 0; b < nb; b++) {
                c3_tensor xb = c3_rows(&A.x, b * S, S);
                TRY(cache_record(m, gc->res[b], &xb, &xin));
            }
        int64_t Hp = hp * p, Wp = wp * p;
        for (int b = 0; b < nb; b++) {
            c3_tensor ob = c3_view(&A.out, b * c3_numel(&A.lat), 6, A.lat.ne);
            if (Hp == h && Wp == w) {
                TRY(be->download(be, velocity[b], &ob));
            } else {
                TRY(be->download(be, all, &ob)); /* [C, T, Hp, Wp] (S_pad * P floats) */
                for (int64_t ct = 0; ct < C * T; ct++)
                    for (int64_t yy = 0; yy < h; yy++)
                        memcpy(velocity[b] + (ct * h + yy) * w, all + (ct * Hp + yy) * Wp,
                               sizeof(float) * (size_t)w);
            }
        }
    }
    if (g->pinned) /* the pinned frames' velocity is zero (upstream predicts noisy frames only) */
        for (int b = 0; b < nb; b++)
            for (int64_t ch = 0; ch < C; ch++)
                for (int64_t f = 0; f < T; f++)
                    if (g->pinned[f])
                        memset(velocity[b] + (ch * T + f) * h * w, 0,
                               sizeof(float) * (size_t)(h * w));
done:
    if (recording) gg_abort(m, slot);
    gen_acts_free(&own);
    c3_free(&xin);
    c3_free(&tok_all);
    c3_free(&bias);
    c3_free(&snd);
    c3_free(&sbias);
    c3_free(&sout);
    free(shost);
    free(sall);
    ulysses_free(&u);
    free(host);
    if (sp > 1) free(all); /* else the model's stage_down */
    free(e);
    free(temb);
    return rc;
}
