/* test_sound.c - joint sound in the GEN sequence against the diffusers goldens
 * of tiny-a/sound (fixtures README, "Joint sound"): the sound tokens'
 * positions, one forward with vision + sound tokens (both velocity slices
 * and the sound rows' internals), the two CFG branches batched, and a
 * transformer without the sound heads refusing sound tokens. */
#include <jansson.h>

#include "checkpoint.h"
#include "cosmos3.h"
#include "model.h"
#include "sampler.h"
#include "test_util.h"

/* Fixtures README: forward max|d| <= 1e-4 max|ref| per tensor; end to end
 * 1e-3 relative on the latents of both, the waveform 1e-2 relative L2
 * (a 1e-3 latent error moves it by 1.5-3 % of the peak), frames within one
 * level. The sampler replay on the golden velocities is float32 exact up to
 * rounding. */
#define FWD_MAX_REL 1e-4
#define E2E_LAT_REL_L2 1e-3
#define E2E_WAVE_REL_L2 1e-2
#define REPLAY_REL_L2 1e-5

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

/* ------------------------------------------------------------ end to end */

/* A checkpoint folder: tiny-a's parts and the sound tokenizer, linked. */
static void make_ckpt(char *dir) {
    const char *parts[] = {"transformer", "vae", "scheduler", "text_tokenizer"};
    char src[4200], dst[4200];
    for (size_t i = 0; i < C3_ARRAY_LEN(parts); i++) {
        snprintf(src, sizeof src, "%s", t_path("tiny-a/model"));
        snprintf(src + strlen(src), sizeof src - strlen(src), "/%s", parts[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, parts[i]);
        T_CHECK(symlink(src, dst) == 0, "symlink %s", dst);
    }
    snprintf(dst, sizeof dst, "%s/sound_tokenizer", dir);
    T_CHECK(symlink(t_path("tiny-a/sound/model/sound_tokenizer"), dst) == 0, "symlink %s", dst);
    snprintf(src, sizeof src, "cp '%s' '%s/'", t_path("tiny-a/sound/model/model_index.json"), dir);
    T_CHECK(system(src) == 0, "%s", src);
}

/* The sound's UniPC on the golden guided velocities: every step's sound
 * latents (the per-step check the library does not expose), and the CFG combine. */
static void replay_sound(const st_file *f, const char *name, int steps, double g) {
    char k[256];
    int64_t n = 0, m = 0;
    snprintf(k, sizeof k, "%s.sigmas", name);
    float *sg = t_golden_f32(f, k, &m);
    double *sig = xmalloc(sizeof(double) * (size_t)(steps + 1));
    for (int i = 0; i <= steps; i++)
        sig[i] = sg[i];
    snprintf(k, sizeof k, "%s.sound_noise", name);
    float *x = t_golden_f32(f, k, &n);
    float *vg, *vc, *vu, *after;
    snprintf(k, sizeof k, "%s.sound_velocity_guided", name);
    vg = t_golden_f32(f, k, &m);
    snprintf(k, sizeof k, "%s.sound_velocity_cond", name);
    vc = t_golden_f32(f, k, &m);
    snprintf(k, sizeof k, "%s.sound_velocity_uncond", name);
    vu = t_golden_f32(f, k, &m);
    snprintf(k, sizeof k, "%s.sound_latents_after_step", name);
    after = t_golden_f32(f, k, &m);
    T_CHECK(m == steps * n, "%s: %lld per-step values", k, (long long)m);
    c3_sampler *smp = sampler_new(C3_SAMPLER_UNIPC, steps, sig, n);
    float *v = xmalloc(sizeof(float) * (size_t)n);
    double worst = 0, wc = 0;
    for (int i = 0; i < steps && m == steps * n; i++) {
        cfg_combine(v, vc + i * n, vu + i * n, (float)g, n);
        double ec = t_max_rel(v, vg + i * n, n);
        wc = ec > wc ? ec : wc;
        T_CHECK(sampler_step(smp, i, vg + i * n, x, NULL, NULL, NULL) == C3_OK, "step %d", i);
        double e = t_rel_l2(x, after + i * n, n);
        worst = e > worst ? e : worst;
        T_CHECK(e <= REPLAY_REL_L2, "%s step %d sound latents: rel L2 %.3g", name, i, e);
    }
    T_CHECK(wc <= 1e-5, "%s: CFG combine of the sound velocities: max rel %.3g", name, wc);
    fprintf(stderr, "  sound sampler replay: worst step rel L2 %.2e, CFG combine max rel %.2e\n",
            worst, wc);
    sampler_free(smp);
    free(sg);
    free(sig);
    free(x);
    free(vg);
    free(vc);
    free(vu);
    free(after);
    free(v);
}

static void run_e2e(const char *model, const st_file *f, json_t *c, const char *name) {
    const int layouts[][3] = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 1, 2}, {1, 2, 2}};
    static bool layouts_done; /* the layouts on the first case, world 1 on the rest */
    int nl = t_on_cuda() || layouts_done ? 1 : (int)C3_ARRAY_LEN(layouts);
    layouts_done = true;
    char k[256];
    int64_t nn = 0, ns = 0, n;
    snprintf(k, sizeof k, "%s.noise", name);
    float *noise = t_golden_f32(f, k, &nn);
    snprintf(k, sizeof k, "%s.sound_noise", name);
    float *snoise = t_golden_f32(f, k, &ns);
    json_t *ov = json_object_get(c, "scheduler_overrides");
    int steps = (int)json_integer_value(json_object_get(c, "num_inference_steps"));
    double g = json_number_value(json_object_get(c, "guidance_scale"));
    replay_sound(f, name, steps, g);
    float *ref_lat, *ref_snd, *ref_wave;
    snprintf(k, sizeof k, "%s.latents_final", name);
    ref_lat = t_golden_f32(f, k, &n);
    snprintf(k, sizeof k, "%s.sound_latents_final", name);
    ref_snd = t_golden_f32(f, k, &n);
    int64_t nw = 0;
    snprintf(k, sizeof k, "%s.waveform", name);
    ref_wave = t_golden_f32(f, k, &nw);
    snprintf(k, sizeof k, "%s.frames_uint8", name);
    const st_tensor *fr = st_find(f, k);
    T_CHECK(fr && fr->dtype == C3_U8, "%s missing", k);
    float *first_snd = NULL;
    for (int l = 0; l < nl; l++) {
        cosmos3_open_params op;
        cosmos3_open_params_init(&op);
        op.model = model;
        op.device = t_on_cuda() ? "cuda" : "cpu";
        op.tp = layouts[l][0];
        op.cfg_parallel = layouts[l][1];
        op.ulysses = layouts[l][2];
        cosmos3_engine *e = NULL;
        char err[512];
        if (cosmos3_open(&op, &e, err, sizeof err) != COSMOS3_OK) {
            T_CHECK(false, "open (tp %d cfg %d ulysses %d): %s", op.tp, op.cfg_parallel, op.ulysses,
                    err);
            continue;
        }
        cosmos3_request rq;
        cosmos3_request_init(&rq);
        rq.prompt = json_string_value(json_object_get(c, "prompt"));
        rq.negative_prompt = json_string_value(json_object_get(c, "negative_prompt"));
        rq.width = (int)json_integer_value(json_object_get(c, "width"));
        rq.height = (int)json_integer_value(json_object_get(c, "height"));
        rq.frames = (int)json_integer_value(json_object_get(c, "num_frames"));
        rq.fps = json_number_value(json_object_get(c, "fps"));
        rq.steps = steps;
        rq.guidance = g;
        rq.shift = json_object_get(ov, "flow_shift")
                       ? json_number_value(json_object_get(ov, "flow_shift"))
                       : 1.0;
        rq.schedule = json_is_false(json_object_get(ov, "use_karras_sigmas")) ? "linear" : "karras";
        rq.guidance_interval = 0;
        rq.seed = 1;
        rq.noise = noise;
        rq.noise_len = (size_t)nn;
        rq.sound = true;
        rq.sound_noise = snoise;
        rq.sound_noise_len = (size_t)ns;
        rq.want_latents = true;
        cosmos3_result *res = NULL;
        int rc = cosmos3_generate(e, &rq, &res, err, sizeof err);
        T_CHECK(rc == COSMOS3_OK, "%s generate (tp %d cfg %d ulysses %d): %s", name, op.tp,
                op.cfg_parallel, op.ulysses, err);
        if (rc == COSMOS3_OK) {
            T_CHECK(res->L_cond == json_integer_value(json_object_get(c, "cond_len")) &&
                        res->L_uncond == json_integer_value(json_object_get(c, "uncond_len")),
                    "%s: prompt lengths %d / %d", name, res->L_cond, res->L_uncond);
            T_CHECK(res->sound && res->sound_latents && res->sound_rate == 48000 &&
                        res->sound_channels == 2 &&
                        res->sound_channels * res->sound_samples == nw &&
                        res->sound_latent_shape[0] * res->sound_latent_shape[1] == ns,
                    "%s: sound %d Hz x %d, %lld samples", name, res->sound_rate,
                    res->sound_channels, (long long)res->sound_samples);
            double el = t_rel_l2(res->latents, ref_lat, nn), es = -1, ew = -1;
            T_CHECK(el <= E2E_LAT_REL_L2, "%s: final latents rel L2 %.3g", name, el);
            if (res->sound_latents &&
                res->sound_latent_shape[0] * res->sound_latent_shape[1] == ns) {
                es = t_rel_l2(res->sound_latents, ref_snd, ns);
                T_CHECK(es <= E2E_LAT_REL_L2, "%s: final sound latents rel L2 %.3g", name, es);
                if (!first_snd) {
                    first_snd = xmalloc(sizeof(float) * (size_t)ns);
                    memcpy(first_snd, res->sound_latents, sizeof(float) * (size_t)ns);
                } else { /* every layout as world 1 (today's bound for the layouts) */
                    double ep = t_rel_l2(res->sound_latents, first_snd, ns);
                    T_CHECK(ep <= 1e-4, "%s: sound latents vs world 1: rel L2 %.3g", name, ep);
                }
            }
            if (res->sound && res->sound_channels * res->sound_samples == nw) {
                ew = t_rel_l2(res->sound, ref_wave, nw);
                T_CHECK(ew <= E2E_WAVE_REL_L2, "%s: waveform rel L2 %.3g", name, ew);
            }
            int64_t nf = (int64_t)res->frames * res->height * res->width * 3, off = 0;
            if (fr && st_numel(fr) == nf) {
                const uint8_t *gr = fr->data;
                for (int64_t i = 0; i < nf; i++)
                    off += abs((int)res->rgb[i] - (int)gr[i]) > 1;
            }
            T_CHECK(fr && st_numel(fr) == nf && off == 0,
                    "%s: %lld frame values off by more than one", name, (long long)off);
            fprintf(stderr,
                    "  %s tp %d cfg %d ulysses %d: latents rel L2 %.2e, sound latents %.2e, "
                    "waveform %.2e, "
                    "frames off>1: %lld\n",
                    name, op.tp, op.cfg_parallel, op.ulysses, el, es, ew, (long long)off);
        }
        cosmos3_result_free(res);
        cosmos3_close(e);
    }
    free(first_snd);
    free(noise);
    free(snoise);
    free(ref_lat);
    free(ref_snd);
    free(ref_wave);
}

/* A checkpoint without sound_tokenizer/ refuses a sound request with one
 * line naming the folder (COSMOS3_EMODEL, exit 3 in the CLI). */
static void refuse_without_tokenizer(void) {
    cosmos3_open_params op;
    cosmos3_open_params_init(&op);
    op.model = t_path("tiny-a/model");
    op.device = "cpu";
    cosmos3_engine *e = NULL;
    char err[512];
    if (cosmos3_open(&op, &e, err, sizeof err) != COSMOS3_OK) {
        T_CHECK(false, "open tiny-a: %s", err);
        return;
    }
    cosmos3_request rq;
    cosmos3_request_init(&rq);
    rq.prompt = "waves";
    rq.frames = 5;
    rq.width = rq.height = 64;
    rq.steps = 1;
    rq.sound = true;
    cosmos3_result *res = NULL;
    int rc = cosmos3_generate(e, &rq, &res, err, sizeof err);
    T_CHECK(rc == COSMOS3_EMODEL && !res && strstr(err, "sound_tokenizer/") && !strchr(err, '\n'),
            "no sound tokenizer: rc %d, %s", rc, err);
    cosmos3_result_free(res);
    cosmos3_close(e);
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

    refuse_without_tokenizer();
    char dir[] = "/tmp/c3_sound_XXXXXX";
    T_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    make_ckpt(dir);
    json_error_t je;
    json_t *man = json_load_file(t_path("tiny-a/sound/sound_manifest.json"), 0, &je);
    T_CHECK(man != NULL, "manifest: %s", je.text);
    st_file f;
    t_open_golden(&f, "tiny-a/sound/sound.safetensors");
    const char *key;
    json_t *c;
    json_object_foreach(json_object_get(man, "cases"), key, c) {
        const char *kind = json_string_value(json_object_get(c, "kind"));
        if (kind && !strcmp(kind, "e2e_t2vs")) run_e2e(dir, &f, c, key);
    }
    st_close(&f);
    json_decref(man);
    t_rm_tree(dir);
    T_CHECK(cpu->mem[C3_MEM_ACT] == 0 && cpu->mem[C3_MEM_KV] == 0, "activations left after free");
    if (be != cpu) c3_backend_destroy(be);
    c3_backend_destroy(cpu);
    return t_done("sound");
}
