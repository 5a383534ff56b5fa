/* test_distilled.c - the distilled (fixed-step SDE) checkpoints through the
 * real CLI.
 *
 * A distilled copy of tiny-a (its transformer, VAE and tokenizer, and a
 * FlowMatchEulerDiscreteScheduler config with fixed_step_sampler_config, as
 * the Cosmos3-Super-*-4Step checkpoints) must:
 *   - reproduce the upstream run distilled_e2e_t2i_64 (tiny-a/cond) from
 *     --noise holding latents = noise_init and step_noise: final latents
 *     within rel L2 1e-3, frames within 1 level (on at most 0.1 % of values);
 *   - refuse --guidance 7, --steps 6, --schedule linear and --cfg-parallel 2
 *     (exit 2, one line naming the fix) and a step_noise of the wrong shape
 *     (exit 4);
 *   - draw its re-noising from the seed: two runs of one seed give the same
 *     bytes, another seed differs;
 * and scheduler configs without sample_type "sde" or with an empty t_list are
 * refused naming the key (exit 3). Skips (77) without fixtures. */
#include <jansson.h>

#include "scheduler.h"
#include "test_cli.h"

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    T_CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "writing %s", path);
}

/* A distilled scheduler config with the given fixed_step_sampler_config body. */
static void write_sched(const char *model, const char *fixed) {
    char p[4200], txt[2048];
    snprintf(p, sizeof p, "%s/scheduler/scheduler_config.json", model);
    snprintf(
        txt, sizeof txt,
        "{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"num_train_timesteps\": 1000, "
        "\"shift\": 1.0, \"use_dynamic_shifting\": false, \"stochastic_sampling\": true%s%s}",
        fixed ? ", \"fixed_step_sampler_config\": " : "", fixed ? fixed : "");
    write_text(p, txt);
}

/* A golden tensor into a new safetensors file. */
static void write_noise(const st_file *g, const char *path, bool with_steps, bool bad_shape) {
    const st_tensor *ni = st_find(g, "distilled_e2e_t2i_64.noise_init");
    const st_tensor *sn = st_find(g, "distilled_e2e_t2i_64.step_noise");
    T_CHECK(ni && sn && sn->ndim == 7, "golden noise_init / step_noise [steps, 1, 1, C, T, h, w]");
    if (!ni || !sn || sn->ndim != 7) exit(1);
    float *a = st_to_f32(ni), *b = st_to_f32(sn);
    st_wtensor w[2] = {{.name = "latents", .dtype = C3_F32, .ndim = ni->ndim, .data = a},
                       {.name = "step_noise", .dtype = C3_F32, .ndim = 6, .data = b}};
    for (int i = 0; i < ni->ndim; i++)
        w[0].shape[i] = ni->shape[i];
    /* [steps, 1, 1, C, T, h, w] -> [steps, 1, C, T, h, w]: the same numbers */
    w[1].shape[0] = sn->shape[0] - (bad_shape ? 1 : 0);
    for (int i = 1; i < 6; i++)
        w[1].shape[i] = sn->shape[i + 1];
    T_CHECK(st_write(path, w, with_steps ? 2 : 1, NULL, 0, true) == C3_OK, "%s", c3_errmsg());
    free(a), free(b);
}

/* A small run of the distilled copy: bin gen -m model -p prompt -W W -H H
 * EXTRA... -o png --overwrite -q --device cpu, stderr to err; *text gets
 * what it printed there (free it). The exit status. */
typedef struct {
    const char *bin, *model, *prompt, *W, *H, *png, *err;
} small_run;
static int run_small(const small_run *s, const char *const *extra, char **text) {
    const char *head[] = {s->bin, "gen", "-m", s->model, "-p", s->prompt, "-W", s->W, "-H", s->H};
    const char *tail[] = {"-o", s->png, "--overwrite", "-q", "--device", "cpu"};
    char *argv[48];
    int a = 0;
    for (size_t k = 0; k < C3_ARRAY_LEN(head); k++)
        argv[a++] = (char *)head[k];
    for (int k = 0; extra[k] && a < 40; k++)
        argv[a++] = (char *)extra[k];
    for (size_t k = 0; k < C3_ARRAY_LEN(tail); k++)
        argv[a++] = (char *)tail[k];
    argv[a] = NULL;
    int rc = t_run(argv, s->err);
    *text = t_slurp(s->err);
    return rc;
}

/* `mkmodel --distilled` writes a checkpoint detected as distilled: it runs
 * its 4 steps by default and refuses another step count. No fixtures. */
static void test_mkmodel(const char *bin) {
    char tmpd[] = "/tmp/c3_distilled_mk_XXXXXX";
    T_CHECK(mkdtemp(tmpd) != NULL, "mkdtemp");
    char model[4200], png[4200], err[4200], js[4200];
    snprintf(model, sizeof model, "%s/m", tmpd);
    snprintf(png, sizeof png, "%s/o.png", tmpd);
    snprintf(err, sizeof err, "%s/err.txt", tmpd);
    snprintf(js, sizeof js, "%s/out.json", tmpd);
    char *mk[] = {(char *)bin, "mkmodel", "--preset", "tiny", "--distilled", "--seed",
                  "3",         "-o",      model,      "-q",   NULL};
    int rc = t_run(mk, err);
    T_CHECK(rc == 0, "mkmodel --distilled exited %d", rc);
    char *gen[] = {(char *)bin, "gen", "-m", model, "-p",       "a cube", "-W",     "32", "-H",
                   "32",        "-o",  png,  "-q",  "--device", "cpu",    "--json", NULL};
    rc = t_run_io(gen, js, NULL);
    T_CHECK(rc == 0, "gen on the distilled tiny model: exit %d", rc);
    char *out = t_slurp(js);
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    json_t *stp = json_object_get(o, "steps");
    if (!stp) stp = json_object_get(json_object_get(o, "settings"), "steps");
    T_CHECK(json_integer_value(stp) == C3_TLIST4_N, "distilled run took %lld steps (want %d): %s",
            (long long)json_integer_value(stp), C3_TLIST4_N, out);
    json_decref(o);
    free(out);
    char *bad[] = {(char *)bin,   "gen", "-m",       model,     "-p", "a cube", "-W",
                   "32",          "-H",  "32",       "--steps", "8",  "-o",     png,
                   "--overwrite", "-q",  "--device", "cpu",     NULL};
    rc = t_run(bad, err);
    char *e = t_slurp(err);
    T_CHECK(rc == 2 && strstr(e, "--steps 4"),
            "--steps 8 on the distilled tiny model: exit %d, '%s'", rc, e);
    free(e);
    T_CHECK(t_rm_tree(tmpd), "cleanup");
}

int main(void) {
    const char *bin = getenv("COSMOS3_BIN");
    if (!bin) {
        fprintf(stderr, "distilled: SKIP: COSMOS3_BIN not set\n");
        return T_SKIP;
    }
    test_mkmodel(bin);
    const char *fx = t_fixtures();
    if (!fx) {
        fprintf(
            stderr,
            "distilled: SKIP: fixtures not found (set COSMOS3_FIXTURES); mkmodel checks only\n");
        return t_failures ? t_done("distilled") : T_SKIP;
    }
    char mpath[4200];
    snprintf(mpath, sizeof mpath, "%s/tiny-a/cond/cond_manifest.json", fx);
    json_error_t je;
    json_t *man = json_load_file(mpath, 0, &je);
    if (!man) {
        fprintf(stderr, "distilled: SKIP: %s: %s\n", mpath, je.text);
        return T_SKIP;
    }
    json_t *cs = json_object_get(json_object_get(man, "cases"), "distilled_e2e_t2i_64");
    T_CHECK(json_is_object(cs), "manifest case distilled_e2e_t2i_64");
    if (!cs) return t_done("distilled");
    st_file g;
    t_open_golden(&g, "tiny-a/cond/cond.safetensors");

    /* the distilled copy of tiny-a */
    char tmpd[] = "/tmp/c3_distilled_XXXXXX";
    T_CHECK(mkdtemp(tmpd) != NULL, "mkdtemp");
    char model[4200], p[4300], q[4300];
    snprintf(model, sizeof model, "%s/model", tmpd);
    T_CHECK(c3_mkdir_p(model) == C3_OK, "mkdir");
    const char *links[] = {"model_index.json", "transformer", "vae", "text_tokenizer"};
    for (size_t i = 0; i < C3_ARRAY_LEN(links); i++) {
        snprintf(p, sizeof p, "%s/tiny-a/model/%s", fx, links[i]);
        snprintf(q, sizeof q, "%s/%s", model, links[i]);
        T_CHECK(symlink(p, q) == 0, "symlink %s", q);
    }
    snprintf(p, sizeof p, "%s/scheduler", model);
    T_CHECK(c3_mkdir_p(p) == C3_OK, "mkdir scheduler");
    char fixed[1024];
    {
        json_t *tl = json_object_get(cs, "t_list");
        char *tls = json_dumps(tl, JSON_COMPACT);
        snprintf(fixed, sizeof fixed,
                 "{\"num_train_timesteps\": 1000, \"sample_type\": \"sde\", \"t_list\": %s}",
                 tls ? tls : "[]");
        free(tls);
    }
    write_sched(model, fixed);

    char W[16], H[16], noise[4300], lat[4300], png[4300], err[4300];
    snprintf(W, sizeof W, "%lld", (long long)json_integer_value(json_object_get(cs, "width")));
    snprintf(H, sizeof H, "%lld", (long long)json_integer_value(json_object_get(cs, "height")));
    snprintf(noise, sizeof noise, "%s/noise.safetensors", tmpd);
    snprintf(lat, sizeof lat, "%s/out.safetensors", tmpd);
    snprintf(png, sizeof png, "%s/out.png", tmpd);
    snprintf(err, sizeof err, "%s/stderr.txt", tmpd);
    write_noise(&g, noise, true, false);
    char *prompt = (char *)json_string_value(json_object_get(cs, "prompt"));
    char *neg = (char *)json_string_value(json_object_get(cs, "negative_prompt"));

    /* 1. the upstream run, reproduced from its noise */
    {
        char *argv[] = {(char *)bin, "gen", "-m",      model,         "-p",
                        prompt,      "-n",  neg,       "-W",          W,
                        "-H",        H,     "--noise", noise,         "--save-latents",
                        lat,         "-o",  png,       "--overwrite", "-q",
                        "--device",  "cpu", NULL};
        double t0 = c3_now();
        int rc = t_run(argv, err);
        char *e = t_slurp(err);
        T_CHECK(rc == 0, "cosmos3 gen exited %d: %s", rc, e);
        free(e);
        int64_t n = 0, nr = 0;
        float *x = t_read_latents(lat, &n);
        float *ref = t_golden_f32(&g, "distilled_e2e_t2i_64.latents_final", &nr);
        T_CHECK(x && n == nr, "saved latents: %lld floats (golden %lld)", (long long)n,
                (long long)nr);
        if (x && n == nr) {
            double rel = t_rel_l2(x, ref, n);
            fprintf(stderr, "distilled_e2e_t2i_64: final latents rel L2 %.3e (%.1f s)\n", rel,
                    c3_now() - t0);
            T_CHECK(rel <= T_F32_LATENTS_REL_L2, "final latents rel L2 %.3e > %.0e", rel,
                    T_F32_LATENTS_REL_L2);
        }
        free(x), free(ref);
        t_check_frames(&g, "distilled_e2e_t2i_64.frames_uint8", "distilled_e2e_t2i_64", png, false,
                       false);
    }
    small_run sr = {
        .bin = bin, .model = model, .prompt = prompt, .W = W, .H = H, .png = png, .err = err};
    /* 2. what upstream refuses */
    {
        const char *bad[][2] = {{"--guidance", "7"},
                                {"--steps", "6"},
                                {"--schedule", "linear"},
                                {"--cfg-parallel", "2"}};
        const char *want[] = {"--guidance 1", "--steps 4", "--schedule out", "--cfg-parallel 1"};
        for (size_t i = 0; i < C3_ARRAY_LEN(bad); i++) {
            const char *extra[] = {bad[i][0], bad[i][1], NULL};
            char *e;
            int rc = run_small(&sr, extra, &e);
            T_CHECK(rc == 2 && strstr(e, want[i]) &&
                        !strchr(strchr(e, '\n') ? strchr(e, '\n') + 1 : "", '\n'),
                    "%s %s: exit %d, message '%s' (want 2 and '%s' on one line)", bad[i][0],
                    bad[i][1], rc, e, want[i]);
            free(e);
        }
        char badn[4300];
        snprintf(badn, sizeof badn, "%s/badnoise.safetensors", tmpd);
        write_noise(&g, badn, true, true);
        const char *extra[] = {"--noise", badn, NULL};
        char *e;
        int rc = run_small(&sr, extra, &e);
        T_CHECK(rc == 4 && strstr(e, "step_noise"), "step_noise of 3 steps: exit %d, '%s'", rc, e);
        free(e);
    }
    /* 3. re-noising from the seed: the same seed twice, then another */
    {
        float *runs[3] = {NULL, NULL, NULL};
        int64_t n[3] = {0, 0, 0};
        const char *seeds[3] = {"11", "11", "12"};
        for (int r = 0; r < 3; r++) {
            const char *extra[] = {"--seed",         seeds[r], "-n", "ignored",
                                   "--save-latents", lat,      NULL};
            char *e;
            int rc = run_small(&sr, extra, &e);
            T_CHECK(rc == 0, "seed %s: exit %d: %s", seeds[r], rc, e);
            if (r == 0)
                T_CHECK(strstr(e, "negative prompt is ignored") != NULL, "no warning for -n: '%s'",
                        e);
            free(e);
            runs[r] = t_read_latents(lat, &n[r]);
        }
        T_CHECK(runs[0] && runs[1] && runs[2] && n[0] == n[1] && n[1] == n[2], "seeded runs");
        if (runs[0] && runs[1] && runs[2] && n[0] == n[1] && n[1] == n[2]) {
            T_CHECK(!memcmp(runs[0], runs[1], (size_t)n[0] * sizeof(float)),
                    "seed 11 twice differs");
            T_CHECK(t_rel_l2(runs[2], runs[0], n[0]) > 1e-2, "seed 12 equals seed 11");
        }
        for (int r = 0; r < 3; r++)
            free(runs[r]);
    }
    /* 4. malformed distilled scheduler configs, refused naming the key */
    {
        const char *fx_bad[] = {"{\"sample_type\": \"ode\", \"t_list\": [1.0, 0.5]}",
                                "{\"sample_type\": \"sde\", \"t_list\": []}", NULL};
        const char *key[] = {"fixed_step_sampler_config.sample_type",
                             "fixed_step_sampler_config.t_list", "fixed_step_sampler_config"};
        for (size_t i = 0; i < C3_ARRAY_LEN(key); i++) {
            write_sched(model, fx_bad[i]);
            const char *none[] = {NULL};
            char *e;
            int rc = run_small(&sr, none, &e);
            T_CHECK(rc == 3 && strstr(e, key[i]), "config %zu: exit %d, '%s' (want 3 naming %s)", i,
                    rc, e, key[i]);
            free(e);
        }
    }
    st_close(&g);
    json_decref(man);
    T_CHECK(t_rm_tree(tmpd), "cleanup");
    return t_done("distilled");
}
