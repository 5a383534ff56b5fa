/* checkpoint_random.c - the transformer made in memory on open
 * (checkpoint_random.h): transformer/random.json, the tensor list of a
 * geometry, and the one random bf16 buffer every tensor points into. */
#include "checkpoint_random.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weights_random.h"

#define TIME_FREQ_DIM 256 /* timestep features: 128 frequencies, cos | sin (spec section 3) */
#define RANDOM_FIX                                                                                 \
    "write {\"generator\": \"" CKPT_RANDOM_GENERATOR "\", \"amplitude\": 0.03} there, or run "     \
    "cosmos3 mkmodel --random-transformer again"

json_t *ckpt_random_json(double amp) {
    return json_pack("{s:s,s:f}", "generator", CKPT_RANDOM_GENERATOR, "amplitude", amp);
}

int ckpt_random_parse(const char *text, size_t len, const char *path, double *amp) {
    json_error_t e;
    json_t *j = json_loadb(text, len, 0, &e);
    if (!j)
        return c3_fail(C3_EMODEL, "%s: invalid JSON (line %d: %s); " RANDOM_FIX, path, e.line,
                       e.text);
    int rc = C3_OK;
    json_t *g = json_object_get(j, "generator"), *a = json_object_get(j, "amplitude");
    double x = a ? json_number_value(a) : CKPT_RANDOM_AMPLITUDE;
    if (!json_is_object(j))
        rc = c3_fail(C3_EMODEL, "%s: expected a JSON object; " RANDOM_FIX, path);
    else if (!json_is_string(g))
        rc = c3_fail(C3_EMODEL, "%s: no \"generator\" string; " RANDOM_FIX, path);
    else if (strcmp(json_string_value(g), CKPT_RANDOM_GENERATOR) != 0)
        rc = c3_fail(C3_EMODEL,
                     "%s: unknown generator \"%.64s\" (the one there is: \"" CKPT_RANDOM_GENERATOR
                     "\"); " RANDOM_FIX,
                     path, json_string_value(g));
    else if (a && !json_is_number(a))
        rc = c3_fail(C3_EMODEL, "%s: \"amplitude\" must be a number; " RANDOM_FIX, path);
    else if (!(x > 0 && x <= CKPT_RANDOM_MAX_AMPLITUDE))
        rc = c3_fail(C3_EMODEL, "%s: \"amplitude\" %g must be in (0, %g]; " RANDOM_FIX, path, x,
                     CKPT_RANDOM_MAX_AMPLITUDE);
    json_decref(j);
    if (rc == C3_OK) *amp = x;
    return rc;
}

/* ------------------------------------------------------ the tensor list */

typedef struct {
    st_tensor *t;
    int n, cap;
} tlist;

static void tl_add(tlist *l, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void tl_add(tlist *l, int ndim, const int64_t *shape, const char *fmt, ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->t = xrealloc(l->t, (size_t)l->cap * sizeof *l->t);
    }
    st_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    t->name = xstrdup(name);
    t->dtype = C3_BF16;
    t->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (t->shape[i] = shape[i]);
    t->nbytes = (size_t)n * c3_dtype_size(C3_BF16);
}
#define SH(...)                                                                                    \
    (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                               \
        ((const int64_t[]){__VA_ARGS__})

/* Every transformer tensor generation reads, in the flat diffusers layout
 * (spec section 5), for the geometry c. */
static void list_transformer(tlist *l, const c3_tconfig *c) {
    const int64_t D = c->hidden, I = c->inter, hd = c->head_dim, Q = (int64_t)c->heads * hd,
                  KV = (int64_t)c->kv_heads * hd, P = c->patch_dim;
    tl_add(l, SH(c->vocab, D), "embed_tokens.weight");
    for (int i = 0; i < c->layers; i++) {
        for (int gen = 0; gen < 2; gen++) {
            const char *sfx = gen ? "_moe_gen" : "", *mlp = gen ? "mlp_moe_gen" : "mlp";
            tl_add(l, SH(D), "layers.%d.input_layernorm%s.weight", i, sfx);
            tl_add(l, SH(D), "layers.%d.post_attention_layernorm%s.weight", i, sfx);
            if (c->mlp_gated) tl_add(l, SH(I, D), "layers.%d.%s.gate_proj.weight", i, mlp);
            tl_add(l, SH(I, D), "layers.%d.%s.up_proj.weight", i, mlp);
            tl_add(l, SH(D, I), "layers.%d.%s.down_proj.weight", i, mlp);
            tl_add(l, SH(Q, D), "layers.%d.self_attn.%s.weight", i, gen ? "add_q_proj" : "to_q");
            tl_add(l, SH(KV, D), "layers.%d.self_attn.%s.weight", i, gen ? "add_k_proj" : "to_k");
            tl_add(l, SH(KV, D), "layers.%d.self_attn.%s.weight", i, gen ? "add_v_proj" : "to_v");
            tl_add(l, SH(D, Q), "layers.%d.self_attn.%s.weight", i, gen ? "to_add_out" : "to_out");
        }
        if (c->und_qk_norm) {
            tl_add(l, SH(hd), "layers.%d.self_attn.norm_q.weight", i);
            tl_add(l, SH(hd), "layers.%d.self_attn.norm_k.weight", i);
        }
        if (c->und_k_norm_for_gen)
            tl_add(l, SH(hd), "layers.%d.self_attn.k_norm_und_for_gen.weight", i);
        tl_add(l, SH(hd), "layers.%d.self_attn.norm_added_q.weight", i);
        tl_add(l, SH(hd), "layers.%d.self_attn.norm_added_k.weight", i);
    }
    tl_add(l, SH(D), "norm.weight");
    tl_add(l, SH(D), "norm_moe_gen.weight");
    tl_add(l, SH(D, P), "proj_in.weight");
    tl_add(l, SH(D), "proj_in.bias");
    tl_add(l, SH(P, D), "proj_out.weight");
    tl_add(l, SH(P), "proj_out.bias");
    tl_add(l, SH(D, TIME_FREQ_DIM), "time_embedder.linear_1.weight");
    tl_add(l, SH(D), "time_embedder.linear_1.bias");
    tl_add(l, SH(D, D), "time_embedder.linear_2.weight");
    tl_add(l, SH(D), "time_embedder.linear_2.bias");
}

static int cmp_tref(const void *a, const void *b) {
    return strcmp(((const struct c3_tref *)a)->name, ((const struct c3_tref *)b)->name);
}

int ckpt_random_tensors(c3_ckpt *c, double amp) {
    if (!(amp > 0 && amp <= CKPT_RANDOM_MAX_AMPLITUDE))
        return c3_fail(C3_EUSAGE, "random weights: amplitude %g must be in (0, %g]", amp,
                       CKPT_RANDOM_MAX_AMPLITUDE);
    tlist l = {0};
    list_transformer(&l, &c->t);
    size_t big = 0;
    for (int i = 0; i < l.n; i++)
        big = C3_MAX(big, l.t[i].nbytes);
    int64_t n = (int64_t)(big / sizeof(uint16_t));
    uint16_t *buf = xmalloc(big); /* [n] bf16: element i = bf16(c3_random_weight(i, amp)) */
    const float a = (float)amp;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++)
        buf[i] = c3_f32_to_bf16(c3_random_weight(i, a));
    for (int i = 0; i < l.n; i++)
        l.t[i].data = buf;
    c->random = true;
    c->random_amp = amp;
    c->random_buf = buf;
    c->random_n = n;
    c->shards = xcalloc(1, sizeof *c->shards);
    c->shards[0] =
        (st_file){.path = xstrdup("(random weights made in memory)"), .t = l.t, .n = l.n};
    c->nshards = 1;
    c->tens = xcalloc((size_t)(l.n ? l.n : 1), sizeof *c->tens);
    for (int i = 0; i < l.n; i++)
        c->tens[i] = (struct c3_tref){xstrdup(l.t[i].name), 0, &l.t[i]};
    c->ntens = l.n;
    qsort(c->tens, (size_t)l.n, sizeof *c->tens, cmp_tref);
    return C3_OK;
}
