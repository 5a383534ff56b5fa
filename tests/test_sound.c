/* test_sound.c - joint sound in the GEN sequence against the diffusers goldens
 * of tiny-a/sound (fixtures README, "Joint sound"): the sound tokens'
 * positions, one forward with vision + sound tokens (both velocity slices
 * and the sound rows' internals), the two CFG branches batched, and a
 * transformer without the sound heads refusing sound tokens. */
#include "checkpoint.h"
#include "model.h"
#include "test_util.h"

/* Fixtures README: forward max|d| <= 1e-4 max|ref| per tensor. */
#define FWD_MAX_REL 1e-4

typedef struct {
    char name[64];
    int layer;
    float *data;
    int64_t n;
} trace_ent;
static trace_ent traces[512];
static int ntraces;

static void hook(const char *name, int layer, const c3_tensor *t) {
    if (ntraces >= (int)C3_ARRAY_LEN(traces)) return;
    trace_ent *e = &traces[ntraces++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->layer = layer;
    e->n = c3_numel(t);
    e->data = xmalloc(sizeof(float) * (size_t)e->n);
    t->be->download(t->be, e->data, t);
}
static void trace_clear(void) {
    for (int i = 0; i < ntraces; i++)
        free(traces[i].data);
    ntraces = 0;
}
static const trace_ent *trace_get(const char *name, int layer) {
    for (int i = 0; i < ntraces; i++)
        if (!strcmp(traces[i].name, name) && traces[i].layer == layer) return &traces[i];
    return NULL;
}

static void check(const char *what, const float *got, const float *ref, int64_t n, double tol) {
    double mr = t_max_rel(got, ref, n), l2 = t_rel_l2(got, ref, n);
    T_CHECK(mr <= tol, "%s: max rel %.3g (rel L2 %.3g)", what, mr, l2);
    fprintf(stderr, "  %-44s max rel %.2e  rel L2 %.2e\n", what, mr, l2);
}

static int32_t *golden_ids(const st_file *f, const char *key, int *L) {
    const st_tensor *t = st_find(f, key);
    if (!t || t->dtype != C3_I64) {
        fprintf(stderr, "FAIL: golden ids %s missing\n", key);
        exit(1);
    }
    *L = (int)st_numel(t);
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)*L);
    const int64_t *src = t->data;
    for (int i = 0; i < *L; i++)
        ids[i] = (int32_t)src[i];
    return ids;
}

/* rows [r0, r0 + nr) of a traced [*, D] tensor against golden key [nr, D]. */
static void check_rows(const st_file *f, const char *key, const char *tname, int layer, int64_t r0,
                       int64_t nr, int64_t D) {
    const trace_ent *e = trace_get(tname, layer);
    T_CHECK(e != NULL, "trace %s (layer %d) not emitted", tname, layer);
    if (!e || e->n < (r0 + nr) * D) return;
    int64_t n = 0;
    float *ref = t_golden_f32(f, key, &n);
    T_CHECK(n == nr * D, "%s: %lld values, expected %lld", key, (long long)n, (long long)(nr * D));
    if (n == nr * D) check(key, e->data + r0 * D, ref, n, FWD_MAX_REL);
    free(ref);
}

/* gen_out_sound [layers, Ts, D]: each layer's residual stream at the sound rows. */
static void check_layers(const st_file *f, const char *key, int layers, int64_t r0, int64_t Ts,
                         int64_t D) {
    int64_t n = 0;
    float *ref = t_golden_f32(f, key, &n);
    T_CHECK(n == layers * Ts * D, "%s size", key);
    double worst = 0;
    for (int l = 0; l < layers && n == layers * Ts * D; l++) {
        const trace_ent *e = trace_get("layers.gen_out", l);
        T_CHECK(e && e->n >= (r0 + Ts) * D, "layers.gen_out %d not emitted", l);
        if (!e) continue;
        double mr = t_max_rel(e->data + r0 * D, ref + l * Ts * D, Ts * D);
        worst = mr > worst ? mr : worst;
        T_CHECK(mr <= FWD_MAX_REL, "%s layer %d: max rel %.3g", key, l, mr);
    }
    fprintf(stderr, "  %-44s max rel %.2e (worst layer)\n", key, worst);
    free(ref);
}

typedef struct {
    const char *name;
    int T, h, w, Ts;
    double fps, t;
} fcase;

static void test_forward(c3_model *m, const fcase *fc) {
    st_file f;
    t_open_golden(&f, "tiny-a/sound/sound.safetensors");
    const c3_tconfig *c = model_config(m);
    int64_t D = c->hidden, SD = c->sound_dim, hp = (fc->h + c->patch - 1) / c->patch,
            wp = (fc->w + c->patch - 1) / c->patch, S_v = fc->T * hp * wp;
    char key[256];
    fprintf(stderr, "forward %s (T %d, %dx%d, fps %g, %d sound tokens, t %g):\n", fc->name, fc->T,
            fc->h, fc->w, fc->fps, fc->Ts, fc->t);
    int64_t nl = 0, ns = 0;
    snprintf(key, sizeof key, "%s.latents", fc->name);
    float *lat = t_golden_f32(&f, key, &nl);
    snprintf(key, sizeof key, "%s.sound_latents", fc->name);
    float *snd = t_golden_f32(&f, key, &ns);
    T_CHECK(nl == (int64_t)c->latent_ch * fc->T * fc->h * fc->w && ns == SD * fc->Ts,
            "latent sizes %lld, %lld", (long long)nl, (long long)ns);
    float *vel[2], *svel[2];
    c3_undkv kv[2] = {{0}};
    const char *br[] = {"cond", "uncond"};
    for (int b = 0; b < 2; b++) {
        vel[b] = xcalloc((size_t)nl, sizeof(float));
        svel[b] = xcalloc((size_t)ns, sizeof(float));
        int L;
        snprintf(key, sizeof key, "%s.%s.input_ids", fc->name, br[b]);
        int32_t *ids = golden_ids(&f, key, &L);
        float *sv1[1] = {svel[b]};
        c3_latent_geom g = {.T = fc->T,
                            .h = fc->h,
                            .w = fc->w,
                            .fps = fc->fps,
                            .sound_T = fc->Ts,
                            .sound = snd,
                            .sound_vel = sv1};
        /* positions: text (j, j, j), then vision and sound through model_gen_position */
        int64_t np = 0;
        snprintf(key, sizeof key, "%s.%s.position_ids", fc->name, br[b]);
        float *pos = t_golden_f32(&f, key, &np);
        int64_t tot = np / 3, bad = 0;
        T_CHECK(tot == L + S_v + fc->Ts, "%s: %lld positions, expected %lld", key, (long long)tot,
                (long long)(L + S_v + fc->Ts));
        for (int64_t j = L; j < tot; j++) {
            double p[3];
            model_gen_position(c, L, &g, j - L, p);
            for (int a = 0; a < 3; a++)
                bad += (float)p[a] != pos[a * tot + j];
        }
        T_CHECK(bad == 0, "%s: %lld of %lld GEN positions differ", key, (long long)bad,
                (long long)(tot - L));
        free(pos);

        ntraces = 0;
        model_trace_hook = hook;
        int rc = model_und(m, ids, L, &kv[b]);
        T_CHECK(rc == C3_OK, "model_und: %s", c3_errmsg());
        if (rc == C3_OK) rc = model_gen(m, &kv[b], lat, &g, fc->t, vel[b]);
        model_trace_hook = NULL;
        T_CHECK(rc == C3_OK, "model_gen: %s", c3_errmsg());
        if (rc == C3_OK) {
            int64_t n;
            snprintf(key, sizeof key, "%s.%s.velocity", fc->name, br[b]);
            float *ref = t_golden_f32(&f, key, &n);
            check(key, vel[b], ref, nl, FWD_MAX_REL);
            free(ref);
            snprintf(key, sizeof key, "%s.%s.sound_velocity", fc->name, br[b]);
            ref = t_golden_f32(&f, key, &n);
            check(key, svel[b], ref, ns, FWD_MAX_REL);
            free(ref);
            char pre[160];
            snprintf(pre, sizeof pre, "%s.%s.trace", fc->name, br[b]);
#define K(s) (snprintf(key, sizeof key, "%s.%s", pre, s), key)
            check_rows(&f, K("sound_proj_in"), "gen.sound_proj_in", -1, 0, fc->Ts, D);
            check_rows(&f, K("sound_time_embed"), "gen.time_embedder", -1, 0, fc->Ts, D);
            check_rows(&f, K("sound_tokens_in"), "layer_in.gen", -1, S_v, fc->Ts, D);
            check_rows(&f, K("rope_cos_sound"), "rope.cos_gen", -1, S_v, fc->Ts, c->head_dim);
            check_rows(&f, K("rope_sin_sound"), "rope.sin_gen", -1, S_v, fc->Ts, c->head_dim);
            check_layers(&f, K("gen_out_sound"), c->layers, S_v, fc->Ts, D);
            check_rows(&f, K("final_norm_sound"), "gen.final_norm", -1, S_v, fc->Ts, D);
            check_rows(&f, K("sound_proj_out"), "gen.sound_proj_out", -1, S_v, fc->Ts, SD);
#undef K
        }
        trace_clear();
        free(ids);
    }
    /* both branches as one batch (what CFG runs): the same velocities */
    if (kv[0].k && kv[1].k) {
        const c3_undkv *both[2] = {&kv[0], &kv[1]};
        float *out[2] = {xmalloc(sizeof(float) * (size_t)nl), xmalloc(sizeof(float) * (size_t)nl)};
        float *sout[2] = {xmalloc(sizeof(float) * (size_t)ns), xmalloc(sizeof(float) * (size_t)ns)};
        c3_latent_geom g = {.T = fc->T,
                            .h = fc->h,
                            .w = fc->w,
                            .fps = fc->fps,
                            .sound_T = fc->Ts,
                            .sound = snd,
                            .sound_vel = sout};
        int rc = model_gen_batch(m, 2, both, lat, &g, fc->t, out);
        T_CHECK(rc == C3_OK, "model_gen_batch: %s", c3_errmsg());
        for (int b = 0; rc == C3_OK && b < 2; b++) {
            T_CHECK(t_max_rel(out[b], vel[b], nl) <= 1e-5, "%s batched vs alone (vision)", br[b]);
            T_CHECK(t_max_rel(sout[b], svel[b], ns) <= 1e-5, "%s batched vs alone (sound)", br[b]);
        }
        for (int b = 0; b < 2; b++) {
            free(out[b]);
            free(sout[b]);
        }
    }
    for (int b = 0; b < 2; b++) {
        undkv_free(&kv[b]);
        free(vel[b]);
        free(svel[b]);
    }
    free(lat);
    free(snd);
    st_close(&f);
}

int main(void) {
    t_need_fixtures("sound");
    c3_backend *cpu = c3_backend_cpu(), *be = t_golden_backend(cpu);
    c3_ckpt ck;
    if (ckpt_open(&ck, t_path("tiny-a/model"), false) != C3_OK) {
        fprintf(stderr, "FAIL: ckpt_open: %s\n", c3_errmsg());
        return 1;
    }
    T_CHECK(ck.t.sound_gen && ck.t.sound_dim == 64 && ck.t.sound_latent_fps == 25.0,
            "sound config");
    c3_model *m = NULL;
    if (model_load(&m, &ck, be, NULL) != C3_OK) {
        fprintf(stderr, "FAIL: model_load: %s\n", c3_errmsg());
        return 1;
    }
    T_CHECK(model_has_sound(m), "tiny-a holds the sound heads");
    const fcase cases[] = {
        {"fwd_9f_48x80_fps16", 3, 3, 5, 15, 16.0, 777},
        {"fwd_17f_64_fps24", 5, 4, 4, 18, 24.0, 412},
    };
    for (size_t i = 0; i < C3_ARRAY_LEN(cases); i++)
        test_forward(m, &cases[i]);
    model_free(m);
    ckpt_close(&ck);
    T_CHECK(cpu->mem[C3_MEM_ACT] == 0 && cpu->mem[C3_MEM_KV] == 0, "activations left after free");
    if (be != cpu) c3_backend_destroy(be);
    c3_backend_destroy(cpu);
    return t_done("sound");
}
