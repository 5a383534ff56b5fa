/* test_cond_e2e.c - every conditioned case of tiny-a/cond through the real
 * CLI: `cosmos3 gen --image PNG` or `--video` of the case's PNG frames (with
 * --condition-frames / --condition-keep), the case's prompt, size, steps,
 * guidance and schedule, `--noise` holding the case's pure noise, and
 * --save-latents must give upstream's final latents (rel L2 <= 1e-3) and
 * uint8 frames (within 1 level on >= 99.9 % of values). The same runs
 * through the parallel layouts on CPU threads (CFG-parallel, TP, Ulysses)
 * give the same latents. Then the refusals. */
#include <jansson.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include "png_io.h"
#include "test_util.h"

extern char **environ;

#define F32_LATENTS_REL_L2 1e-3
#define BF16_LATENTS_REL_L2 6e-2
#define BF16_FRAME_MAX_LEVELS 32
static bool on_cuda(void) {
    const char *d = getenv("COSMOS3_TEST_DEVICE");
    return d && !strcmp(d, "cuda");
}
static bool cuda_fp32(void) {
    const char *f = getenv("COSMOS3_CUDA_FP32");
    return f && *f && strcmp(f, "0") != 0;
}
static double tol_latents(void) {
    return on_cuda() && !cuda_fp32() ? BF16_LATENTS_REL_L2 : F32_LATENTS_REL_L2;
}

/* Run argv; stderr to errf (NULL: inherited). Returns the exit status. */
static int run_argv(char *const argv[], const char *errf) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (errf) posix_spawn_file_actions_addopen(&fa, 2, errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int ok = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (ok != 0) return -1;
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void extract(const st_file *g, const char *key, const char *path) {
    const st_tensor *t = st_find(g, key);
    if (!t) {
        fprintf(stderr, "FAIL: %s missing\n", key);
        exit(1);
    }
    float *x = st_to_f32(t);
    st_wtensor w = {.name = "latents", .dtype = C3_F32, .ndim = t->ndim, .data = x};
    for (int i = 0; i < t->ndim; i++)
        w.shape[i] = t->shape[i];
    if (st_write(path, &w, 1, NULL, 0, true) != C3_OK) {
        fprintf(stderr, "FAIL: %s\n", c3_errmsg());
        exit(1);
    }
    free(x);
}

/* The input files of a conditioned case (the manifest does not name them). */
static const struct {
    const char *name, *picture, *clip;
} case_inputs[] = {
    {"i2v_9f_64_resize", "i2v_picture_96x72.png", NULL},
    {"i2v_9f_48x80_linear", "i2v_picture_80x48.png", NULL},
    {"v2v_17f_64_first", NULL, "v2v_clip_64_%02d.png"},
    {"v2v_17f_64_last3", NULL, "v2v_clip_64_%02d.png"},
    {"v2v_9f_64_resize", NULL, "v2v_clip_96x72_%02d.png"},
};

static st_file g;
static const char *bin, *model, *tmpd;

/* Relative L2 of the latents saved at `lat` against the case's final latents. */
static double latents_err(const char *name, const char *lat) {
    st_file o;
    if (st_open(&o, lat) != C3_OK) return INFINITY;
    char key[256];
    snprintf(key, sizeof key, "%s.latents_final", name);
    int64_t n = 0;
    float *ref = t_golden_f32(&g, key, &n);
    const st_tensor *ot = st_find(&o, "latents");
    double e = INFINITY;
    if (ot && st_numel(ot) == n) {
        float *x = st_to_f32(ot);
        e = t_rel_l2(x, ref, n);
        free(x);
    }
    free(ref);
    st_close(&o);
    return e;
}

static void run_case(json_t *c, const char *name) {
    const char *picture = NULL, *clip = NULL;
    for (size_t i = 0; i < C3_ARRAY_LEN(case_inputs); i++)
        if (!strcmp(case_inputs[i].name, name))
            picture = case_inputs[i].picture, clip = case_inputs[i].clip;
    T_CHECK(picture || clip, "%s: no input files known for this case", name);
    if (!picture && !clip) return;
    char key[256], noise[4200], lat[4200], out[4200], input[4200];
    snprintf(key, sizeof key, "%s.noise", name);
    snprintf(noise, sizeof noise, "%s/%s.noise.safetensors", tmpd, name);
    extract(&g, key, noise);
    snprintf(input, sizeof input, "%s%s", t_path("tiny-a/cond/inputs/"), picture ? picture : clip);
    int frames = (int)json_integer_value(json_object_get(c, "num_frames"));
    char W[16], H[16], F[16], fps[32], steps[16], gs[32], shift[32] = "1", idx[64] = "";
    snprintf(W, sizeof W, "%lld", (long long)json_integer_value(json_object_get(c, "width")));
    snprintf(H, sizeof H, "%lld", (long long)json_integer_value(json_object_get(c, "height")));
    snprintf(F, sizeof F, "%d", frames);
    snprintf(fps, sizeof fps, "%g", json_number_value(json_object_get(c, "fps")));
    snprintf(steps, sizeof steps, "%lld",
             (long long)json_integer_value(json_object_get(c, "steps")));
    snprintf(gs, sizeof gs, "%g", json_number_value(json_object_get(c, "guidance_scale")));
    json_t *ov = json_object_get(c, "scheduler_overrides");
    const char *sched =
        json_is_false(json_object_get(ov, "use_karras_sigmas")) ? "linear" : "karras";
    if (json_object_get(ov, "flow_shift"))
        snprintf(shift, sizeof shift, "%g", json_number_value(json_object_get(ov, "flow_shift")));
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(c, "condition_frame_indexes_vision"), i, v) {
        size_t k = strlen(idx);
        snprintf(idx + k, sizeof idx - k, "%s%lld", i ? "," : "", (long long)json_integer_value(v));
    }
    const char *keep = json_string_value(json_object_get(c, "condition_video_keep"));
    /* the layouts: one rank, then CFG-parallel, TP and Ulysses on CPU threads */
    static const char *layouts[][3] = {
        {"1", "1", "1"}, {"1", "2", "1"}, {"2", "1", "1"}, {"1", "1", "2"}};
    int nlayouts = on_cuda() ? 1 : (int)C3_ARRAY_LEN(layouts);
    for (int l = 0; l < nlayouts; l++) {
        snprintf(lat, sizeof lat, "%s/%s.%d.out.safetensors", tmpd, name, l);
        snprintf(out, sizeof out, "%s/%s_%d_frames", tmpd, name, l);
        char *argv[64];
        int a = 0;
        char *base[] = {(char *)bin,
                        "gen",
                        "-m",
                        (char *)model,
                        "-p",
                        (char *)json_string_value(json_object_get(c, "prompt")),
                        "-n",
                        (char *)json_string_value(json_object_get(c, "negative_prompt")),
                        "-W",
                        W,
                        "-H",
                        H,
                        "--frames",
                        F,
                        "--fps",
                        fps,
                        "--steps",
                        steps,
                        "-g",
                        gs,
                        "--schedule",
                        (char *)sched,
                        "--shift",
                        shift,
                        "--guidance-interval",
                        "none",
                        "--noise",
                        noise,
                        "--save-latents",
                        lat,
                        "-o",
                        out,
                        "--overwrite",
                        "-q",
                        "--device",
                        on_cuda() ? "cuda" : "cpu",
                        "--tp",
                        (char *)layouts[l][0],
                        "--cfg-parallel",
                        (char *)layouts[l][1],
                        "--ulysses",
                        (char *)layouts[l][2]};
        for (size_t k = 0; k < C3_ARRAY_LEN(base); k++)
            argv[a++] = base[k];
        argv[a++] = picture ? "--image" : "--video";
        argv[a++] = input;
        if (clip) {
            argv[a++] = "--condition-frames";
            argv[a++] = idx;
            argv[a++] = "--condition-keep";
            argv[a++] = (char *)(keep ? keep : "first");
        }
        argv[a] = NULL;
        double t0 = c3_now();
        int rc = run_argv(argv, NULL);
        T_CHECK(rc == 0, "%s (tp %s cfg %s ulysses %s): cosmos3 gen exited %d", name, layouts[l][0],
                layouts[l][1], layouts[l][2], rc);
        if (rc) continue;
        double e = latents_err(name, lat);
        fprintf(stderr, "%s (tp %s cfg %s ulysses %s): final latents rel L2 %.3e (%.1f s)\n", name,
                layouts[l][0], layouts[l][1], layouts[l][2], e, c3_now() - t0);
        T_CHECK(e <= tol_latents(), "%s: final latents rel L2 %.3e > %.0e", name, e, tol_latents());
        if (l) continue; /* frames once */
        snprintf(key, sizeof key, "%s.frames_uint8", name);
        const st_tensor *fr = st_find(&g, key);
        T_CHECK(fr && fr->ndim == 4, "%s: golden frames", name);
        if (!fr) continue;
        int64_t nf = fr->shape[0], fh = fr->shape[1], fw = fr->shape[2], diff = 0, total = 0,
                maxd = 0;
        const uint8_t *gold = fr->data;
        for (int64_t f = 0; f < nf; f++) {
            char fp[4300];
            snprintf(fp, sizeof fp, "%s/frame_%04lld.png", out, (long long)f);
            uint8_t *rgb = NULL;
            int w = 0, h = 0;
            T_CHECK(png_read_rgb(fp, &rgb, &w, &h) == C3_OK, "%s: %s", name, c3_errmsg());
            if (!rgb) continue;
            T_CHECK(w == fw && h == fh, "%s: frame size %dx%d", name, w, h);
            if (w == fw && h == fh)
                for (int64_t k = 0; k < fh * fw * 3; k++) {
                    int d = abs((int)rgb[k] - (int)gold[f * fh * fw * 3 + k]);
                    diff += d != 0;
                    maxd = d > maxd ? d : maxd;
                    total++;
                }
            free(rgb);
        }
        double frac = total ? (double)diff / (double)total : 1;
        fprintf(stderr, "%s: frames differ on %.4f %% of values, max %lld level(s)\n", name,
                100 * frac, (long long)maxd);
        if (on_cuda() && !cuda_fp32())
            T_CHECK(total > 0 && maxd <= BF16_FRAME_MAX_LEVELS,
                    "%s: frames differ by up to %lld levels", name, (long long)maxd);
        else
            T_CHECK(total > 0 && frac <= 1e-3 && maxd <= 1,
                    "%s: frames differ on %.4f %% (max %lld)", name, 100 * frac, (long long)maxd);
    }
}

/* A refused request: exit `code` with one line on stderr that contains `want`. */
static void refuse(const char *what, int code, const char *want, char *const extra[]) {
    char errf[4200], out[4200];
    snprintf(errf, sizeof errf, "%s/refuse.err", tmpd);
    snprintf(out, sizeof out, "%s/refused_frames", tmpd);
    char *argv[48];
    int a = 0;
    char *base[] = {(char *)bin, "gen",     "-m", (char *)model, "-p", "x",  "-W",       "64", "-H",
                    "64",        "--steps", "1",  "-o",          out,  "-q", "--device", "cpu"};
    for (size_t k = 0; k < C3_ARRAY_LEN(base); k++)
        argv[a++] = base[k];
    for (int k = 0; extra[k]; k++)
        argv[a++] = extra[k];
    argv[a] = NULL;
    int rc = run_argv(argv, errf);
    char *text = NULL;
    size_t len = 0;
    c3_read_file(errf, &text, &len);
    int lines = 0;
    for (size_t k = 0; text && k < len; k++)
        lines += text[k] == '\n';
    T_CHECK(rc == code, "%s: exit %d, expected %d (%s)", what, rc, code, text ? text : "");
    T_CHECK(text && strstr(text, want) && lines == 1,
            "%s: stderr '%s' lacks '%s' or is not one line", what, text ? text : "", want);
    T_CHECK(access(out, F_OK) != 0, "%s: output written", what);
    fprintf(stderr, "refused %s: %s", what, text ? text : "\n");
    free(text);
}

int main(void) {
    const char *fx = t_need_fixtures("cond_e2e");
    bin = getenv("COSMOS3_BIN");
    if (!bin) {
        fprintf(stderr, "cond_e2e: SKIP: COSMOS3_BIN not set\n");
        return T_SKIP;
    }
    static char mdir[4096], tdir[] = "/tmp/c3_cond_XXXXXX";
    snprintf(mdir, sizeof mdir, "%s/tiny-a/model", fx);
    model = mdir;
    T_CHECK(mkdtemp(tdir) != NULL, "mkdtemp");
    tmpd = tdir;
    json_error_t je;
    json_t *man = json_load_file(t_path("tiny-a/cond/cond_manifest.json"), 0, &je);
    T_CHECK(man != NULL, "cond_manifest.json: %s", je.text);
    if (!man) return t_done("cond_e2e");
    t_open_golden(&g, "tiny-a/cond/cond.safetensors");
    const char *name;
    json_t *c;
    int n = 0;
    json_object_foreach(json_object_get(man, "cases"), name, c) {
        const char *kind = json_string_value(json_object_get(c, "kind"));
        if (!kind || (strcmp(kind, "i2v") && strcmp(kind, "v2v"))) continue;
        run_case(c, name);
        n++;
    }
    T_CHECK(n >= 5, "only %d conditioned cases", n);
    /* refusals: what upstream refuses, and a clip too short for its indexes */
    char pic[4200], clip[4200];
    snprintf(pic, sizeof pic, "%s", t_path("tiny-a/cond/inputs/i2v_picture_96x72.png"));
    snprintf(clip, sizeof clip, "%s", t_path("tiny-a/cond/inputs/v2v_clip_64_%02d.png"));
    char *both[] = {"--frames", "9", "--image", pic, "--video", clip, NULL};
    refuse("picture and clip", 2, "not both", both);
    char *outside[] = {"--frames", "9", "--video", clip, "--condition-frames", "0,3", NULL};
    refuse("index outside the latent timeline", 2, "outside the latent timeline", outside);
    char one[4200];
    snprintf(one, sizeof one, "%s", t_path("tiny-a/cond/inputs/v2v_clip_64_00.png"));
    char *short_clip[] = {"--frames", "9", "--video", one, "--condition-frames", "0,1", NULL};
    refuse("clip shorter than the indexes need", 4, "need at least 5", short_clip);
    char *image_still[] = {"--image", pic, NULL};
    refuse("picture for one frame", 2, "starts a video", image_still);
    char *badidx[] = {"--frames", "9", "--video", clip, "--condition-frames", "0,x", NULL};
    refuse("bad index list", 2, "latent frame indexes", badidx);
    char *missing[] = {"--frames", "9", "--image", "/nonexistent/picture.png", NULL};
    refuse("missing picture", 4, "/nonexistent/picture.png", missing);
    st_close(&g);
    json_decref(man);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpd);
    T_CHECK(system(cmd) == 0, "cleanup");
    return t_done("cond_e2e");
}
