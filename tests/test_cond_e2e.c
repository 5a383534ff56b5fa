/* test_cond_e2e.c - every conditioned case of tiny-a/cond through the real
 * CLI: `cosmos3 gen --image PNG` or `--video` of the case's PNG frames (with
 * --condition-frames / --condition-keep), the case's prompt, size, steps,
 * guidance and schedule, `--noise` holding the case's pure noise, and
 * --save-latents must give upstream's final latents (rel L2 <= 1e-3) and
 * uint8 frames (within 1 level on >= 99.9 % of values). The same runs
 * through the parallel layouts on CPU threads (CFG-parallel, TP, Ulysses
 * and the combined TP 2 x CFG 2 and Ulysses 2 x CFG 2) give the same
 * latents. Then the refusals. */
#include <jansson.h>

#include "test_cli.h"

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
    char key[256];
    snprintf(key, sizeof key, "%s.latents_final", name);
    int64_t n = 0, nx = 0;
    float *ref = t_golden_f32(&g, key, &n), *x = t_read_latents(lat, &nx);
    double e = x && nx == n ? t_rel_l2(x, ref, n) : INFINITY;
    free(x);
    free(ref);
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
    t_golden_noise(&g, key, noise);
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
    /* the layouts: one rank, then CFG-parallel, TP, Ulysses and two combined on CPU threads */
    static const char *layouts[][3] = {
        {"1", "1", "1"}, {"1", "2", "1"}, {"2", "1", "1"}, {"1", "1", "2"},
        {"2", "2", "1"}, {"1", "2", "2"}}; /* tp 2 x ulysses 2: tiny-a has 2 KV heads */
    int nlayouts = t_on_cuda() ? 1 : (int)C3_ARRAY_LEN(layouts);
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
                        (char *)t_device(),
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
        int rc = t_run(argv, NULL);
        T_CHECK(rc == 0, "%s (tp %s cfg %s ulysses %s): cosmos3 gen exited %d", name, layouts[l][0],
                layouts[l][1], layouts[l][2], rc);
        if (rc) continue;
        double e = latents_err(name, lat);
        fprintf(stderr, "%s (tp %s cfg %s ulysses %s): final latents rel L2 %.3e (%.1f s)\n", name,
                layouts[l][0], layouts[l][1], layouts[l][2], e, c3_now() - t0);
        T_CHECK(e <= t_tol_latents(), "%s: final latents rel L2 %.3e > %.0e", name, e,
                t_tol_latents());
        if (l) continue; /* frames once */
        snprintf(key, sizeof key, "%s.frames_uint8", name);
        t_check_frames(&g, key, name, out, true, t_bf16());
    }
}

/* cosmos3 gen with i2v_9f_64_resize's settings (9 frames of 64x64, its noise)
 * and the conditioning arguments `cond`; 0 on success. */
static int gen_9f(json_t *c, const char *noise, const char *lat, const char *out,
                  char *const cond[]) {
    char steps[16], gs[32];
    snprintf(steps, sizeof steps, "%lld",
             (long long)json_integer_value(json_object_get(c, "steps")));
    snprintf(gs, sizeof gs, "%g", json_number_value(json_object_get(c, "guidance_scale")));
    char *argv[48] = {(char *)bin,
                      "gen",
                      "-m",
                      (char *)model,
                      "-p",
                      (char *)json_string_value(json_object_get(c, "prompt")),
                      "-W",
                      "64",
                      "-H",
                      "64",
                      "--frames",
                      "9",
                      "--steps",
                      steps,
                      "-g",
                      gs,
                      "--noise",
                      (char *)noise,
                      "--save-latents",
                      (char *)lat,
                      "-o",
                      (char *)out,
                      "--overwrite",
                      "-q",
                      "--device",
                      (char *)t_device()};
    int a = 0;
    while (argv[a])
        a++;
    for (int k = 0; cond[k]; k++)
        argv[a++] = cond[k];
    argv[a] = NULL;
    return t_run(argv, NULL);
}

/* --first-last START END (vLLM-Omni's FL2V): with a picture at each end of 9
 * frames it must be exactly the clip [START, END x 8] given as --video with
 * --condition-frames 0,2 (the clip written here from the golden
 * cond_pixels and the input PNG, not by the code under test), and its first
 * latent frame stays at upstream's x0 of the picture (i2v_9f_64_resize). */
static void test_first_last(json_t *c) {
    char noise[4200], pic[4200], end[4200], lat_fl[4200], lat_v[4200], out[4200], clip[4300];
    snprintf(noise, sizeof noise, "%s/fl.noise.safetensors", tmpd);
    t_golden_noise(&g, "i2v_9f_64_resize.noise", noise);
    snprintf(pic, sizeof pic, "%s", t_path("tiny-a/cond/inputs/i2v_picture_96x72.png"));
    snprintf(end, sizeof end, "%s", t_path("tiny-a/cond/inputs/v2v_clip_64_12.png"));
    snprintf(lat_fl, sizeof lat_fl, "%s/fl.out.safetensors", tmpd);
    snprintf(lat_v, sizeof lat_v, "%s/fl_video.out.safetensors", tmpd);
    snprintf(out, sizeof out, "%s/fl_frames", tmpd);
    /* the expected clip: frame 0 the preprocessed picture, 1-8 the end */
    int64_t npx = 0;
    float *px = t_golden_f32(&g, "i2v_9f_64_resize.cond_pixels", &npx); /* [3, 9, 64, 64] */
    uint8_t *ergb = NULL;
    int ew = 0, eh = 0;
    T_CHECK(png_read_rgb(end, &ergb, &ew, &eh) == C3_OK && ew == 64 && eh == 64, "%s", end);
    uint8_t *f0 = xmalloc(64 * 64 * 3);
    for (int k = 0; k < 64 * 64; k++)
        for (int ch = 0; ch < 3; ch++)
            f0[k * 3 + ch] = (uint8_t)lrintf((px[(int64_t)ch * 9 * 64 * 64 + k] + 1.0f) * 127.5f);
    for (int f = 0; f < 9; f++) {
        snprintf(clip, sizeof clip, "%s/fl_clip_%02d.png", tmpd, f);
        T_CHECK(png_write(clip, f ? ergb : f0, 64, 64, NULL, 0, true) == C3_OK, "%s: %s", clip,
                c3_errmsg());
    }
    snprintf(clip, sizeof clip, "%s/fl_clip_%%02d.png", tmpd);
    char *fl[] = {"--first-last", pic, end, NULL};
    char *vid[] = {"--video", clip, "--condition-frames", "0,2", NULL};
    int rc1 = gen_9f(c, noise, lat_fl, out, fl), rc2 = gen_9f(c, noise, lat_v, out, vid);
    T_CHECK(rc1 == 0 && rc2 == 0, "first-last: cosmos3 gen exited %d / %d", rc1, rc2);
    int64_t n1 = 0, n2 = 0, nx = 0;
    float *a = t_read_latents(lat_fl, &n1), *b = t_read_latents(lat_v, &n2);
    float *x0 = t_golden_f32(&g, "i2v_9f_64_resize.x0", &nx); /* [1, 48, 3, 4, 4] */
    T_CHECK(a && b && n1 == n2 && n1 == nx && nx == 48 * 3 * 16, "first-last: latents %lld %lld",
            (long long)n1, (long long)n2);
    if (a && b && n1 == n2 && n1 == nx && nx == 48 * 3 * 16) {
        double same = t_rel_l2(a, b, n1);
        /* latent frame 0 of every channel against upstream's x0 */
        float f0a[48 * 16], f0x[48 * 16];
        for (int ch = 0; ch < 48; ch++)
            for (int k = 0; k < 16; k++) {
                f0a[ch * 16 + k] = a[(ch * 3 + 0) * 16 + k];
                f0x[ch * 16 + k] = x0[(ch * 3 + 0) * 16 + k];
            }
        double e0 = t_rel_l2(f0a, f0x, 48 * 16);
        fprintf(stderr,
                "first-last: against --video of the built clip rel L2 %.3e; latent frame 0 "
                "against x0 %.3e\n",
                same, e0);
        T_CHECK(same == 0, "first-last differs from the same clip as --video (rel L2 %.3e)", same);
        T_CHECK(e0 <= (t_bf16() ? T_BF16_LATENTS_REL_L2 : 1e-5),
                "first-last: latent frame 0 rel L2 %.3e against x0", e0);
    }
    free(a);
    free(b);
    free(x0);
    free(px);
    free(ergb);
    free(f0);
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
    int rc = t_run(argv, errf);
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
    bin = t_need_bin("cond_e2e");
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
    test_first_last(json_object_get(json_object_get(man, "cases"), "i2v_9f_64_resize"));
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
    char *fl_short[] = {"--frames", "9", "--first-last", clip, clip, NULL};
    refuse("first-last ends overlapping", 2, "ask for more frames", fl_short);
    char *fl_image[] = {"--frames", "9", "--image", pic, "--first-last", pic, pic, NULL};
    refuse("first-last with a picture", 2, "not both", fl_image);
    char *fl_one[] = {"--frames", "9", "--first-last", pic, NULL};
    refuse("first-last with one value", 2, "two values", fl_one);
    char *missing[] = {"--frames", "9", "--image", "/nonexistent/picture.png", NULL};
    refuse("missing picture", 4, "/nonexistent/picture.png", missing);
    st_close(&g);
    json_decref(man);
    T_CHECK(t_rm_tree(tmpd), "cleanup");
    return t_done("cond_e2e");
}
