/* test_cli.h - what the C tests that run the cosmos3 binary share
 * (test_e2e.c, test_cond_e2e.c, test_distilled.c, test_fp8.c): running it,
 * the device the run is asked for and the bounds that go with it, the
 * golden noise handed to --noise, and the check of the PNG frames a run
 * wrote against upstream's uint8 frames. */
#ifndef COSMOS3_TEST_CLI_H
#define COSMOS3_TEST_CLI_H

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include "png_io.h"
#include "test_util.h"

extern char **environ;

/* The fixtures README's bounds: float32 final latents after six CFG steps,
 * and bf16 (COSMOS3_TEST_DEVICE=cuda) latents and frames. */
#define T_F32_LATENTS_REL_L2 1e-3
#define T_BF16_LATENTS_REL_L2 6e-2
#define T_BF16_FRAME_MAX_LEVELS 32

/* The --device of a run: cuda with COSMOS3_TEST_DEVICE=cuda (t_on_cuda). */
static inline const char *t_device(void) {
    return t_on_cuda() ? "cuda" : "cpu";
}
/* Whether the run is held to the bf16 bounds. */
static inline bool t_bf16(void) {
    return t_on_cuda() && !t_cuda_fp32();
}
static inline double t_tol_latents(void) {
    return t_bf16() ? T_BF16_LATENTS_REL_L2 : T_F32_LATENTS_REL_L2;
}

/* $COSMOS3_BIN, or skip the whole test (exit 77). */
static inline const char *t_need_bin(const char *name) {
    const char *bin = getenv("COSMOS3_BIN");
    if (!bin) {
        fprintf(stderr, "%s: SKIP: COSMOS3_BIN not set\n", name);
        exit(T_SKIP);
    }
    return bin;
}

/* Run argv (argv[0] a path) with stdout to outf and stderr to errf (NULL:
 * inherited). The exit status, 128 + the signal, or -1 when it did not start. */
static inline int t_run_io(char *const argv[], const char *outf, const char *errf) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (outf) posix_spawn_file_actions_addopen(&fa, 1, outf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (errf) posix_spawn_file_actions_addopen(&fa, 2, errf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return -1;
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
static inline int t_run(char *const argv[], const char *errf) {
    return t_run_io(argv, NULL, errf);
}

/* The final latents of 8 CPU steps of a tiny checkpoint at 64x64 (prompt
 * "a red cube", seed 3) with one option set (opt val, e.g. "--precision"
 * "fp8"), the files in dir named after tag; NULL when gen fails (checked).
 * *n: the element count. */
static inline float *t_gen_tiny_latents(const char *bin, const char *model, const char *opt,
                                        const char *val, const char *dir, const char *tag,
                                        int64_t *n) {
    char lat[4200], png[4200];
    snprintf(lat, sizeof lat, "%s/%s.safetensors", dir, tag);
    snprintf(png, sizeof png, "%s/%s.png", dir, tag);
    char *argv[] = {(char *)bin,
                    "gen",
                    "-m",
                    (char *)model,
                    (char *)opt,
                    (char *)val,
                    "-p",
                    "a red cube",
                    "-W",
                    "64",
                    "-H",
                    "64",
                    "--steps",
                    "8",
                    "--seed",
                    "3",
                    "--save-latents",
                    lat,
                    "-o",
                    png,
                    "--overwrite",
                    "-q",
                    "--device",
                    "cpu",
                    NULL};
    int rc = t_run(argv, NULL);
    T_CHECK(rc == 0, "gen -m %s %s %s exited %d", model, opt, val, rc);
    return rc ? NULL : t_read_latents(lat, n);
}

/* One golden run through `cosmos3 gen`: a manifest case's settings and the
 * files of the run. */
typedef struct {
    const char *prompt, *negative, *schedule;
    long long width, height, frames, steps;
    double fps, guidance, shift;
    const char *noise, *latents, *out; /* --noise, --save-latents, -o */
} t_gen;
/* The numbers of a t_gen as argv text. */
typedef struct {
    char W[24], H[24], F[24], steps[24], fps[32], gs[32], shift[32];
} t_gen_text;
#define T_GEN_ARGC 36 /* what t_gen_argv writes */

/* argv[0, T_GEN_ARGC) = bin gen -m model, g's settings and files (the CFG
 * interval off), --overwrite -q --device t_device(); the caller appends its
 * own flags and the NULL. */
static inline int t_gen_argv(char **argv, t_gen_text *tx, const char *bin, const char *model,
                             const t_gen *g) {
    snprintf(tx->W, sizeof tx->W, "%lld", g->width);
    snprintf(tx->H, sizeof tx->H, "%lld", g->height);
    snprintf(tx->F, sizeof tx->F, "%lld", g->frames);
    snprintf(tx->steps, sizeof tx->steps, "%lld", g->steps);
    snprintf(tx->fps, sizeof tx->fps, "%g", g->fps);
    snprintf(tx->gs, sizeof tx->gs, "%g", g->guidance);
    snprintf(tx->shift, sizeof tx->shift, "%g", g->shift);
    char *const v[T_GEN_ARGC] = {(char *)bin,
                                 "gen",
                                 "-m",
                                 (char *)model,
                                 "-p",
                                 (char *)g->prompt,
                                 "-n",
                                 (char *)g->negative,
                                 "-W",
                                 tx->W,
                                 "-H",
                                 tx->H,
                                 "--frames",
                                 tx->F,
                                 "--fps",
                                 tx->fps,
                                 "--steps",
                                 tx->steps,
                                 "-g",
                                 tx->gs,
                                 "--shift",
                                 tx->shift,
                                 "--schedule",
                                 (char *)g->schedule,
                                 "--guidance-interval",
                                 "none",
                                 "--noise",
                                 (char *)g->noise,
                                 "--save-latents",
                                 (char *)g->latents,
                                 "-o",
                                 (char *)g->out,
                                 "--overwrite",
                                 "-q",
                                 "--device",
                                 (char *)t_device()};
    for (int i = 0; i < T_GEN_ARGC; i++)
        argv[i] = v[i];
    return T_GEN_ARGC;
}

/* A file's text ("" when unreadable); free it. */
static inline char *t_slurp(const char *path) {
    char *d = NULL;
    size_t n;
    if (c3_read_file(path, &d, &n) != C3_OK) return xstrdup("");
    return d;
}

/* Golden tensor `key` of g into a new safetensors file as "latents" (the
 * --noise input), or exit. */
static inline void t_golden_noise(const st_file *g, const char *key, const char *path) {
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

/* The frames a run wrote against g's uint8 frames `key` [F, H, W, 3]:
 * frame f is the file png, or with dir png/frame_%04d.png. Within 1 level
 * on >= 99.9 % of the values, or with loose (bf16) within
 * T_BF16_FRAME_MAX_LEVELS everywhere (the README: up to 14 levels after
 * six steps). */
static inline void t_check_frames(const st_file *g, const char *key, const char *name,
                                  const char *png, bool dir, bool loose) {
    const st_tensor *fr = st_find(g, key);
    T_CHECK(fr && fr->ndim == 4, "%s: golden frames %s", name, key);
    if (!fr || fr->ndim != 4) return;
    int64_t nf = fr->shape[0], fh = fr->shape[1], fw = fr->shape[2], diff = 0, total = 0, maxd = 0;
    const uint8_t *gold = fr->data;
    for (int64_t f = 0; f < nf; f++) {
        char fp[4300];
        if (dir)
            snprintf(fp, sizeof fp, "%s/frame_%04lld.png", png, (long long)f);
        else
            snprintf(fp, sizeof fp, "%s", png);
        uint8_t *rgb = NULL;
        int w = 0, h = 0;
        T_CHECK(png_read_rgb(fp, &rgb, &w, &h) == C3_OK, "%s: %s", name, c3_errmsg());
        if (!rgb) continue;
        T_CHECK(w == fw && h == fh, "%s: frame size %dx%d", name, w, h);
        if (w == fw && h == fh)
            for (int64_t i = 0; i < fh * fw * 3; i++) {
                int d = abs((int)rgb[i] - (int)gold[f * fh * fw * 3 + i]);
                diff += d != 0;
                maxd = d > maxd ? d : maxd;
                total++;
            }
        free(rgb);
    }
    double frac = total ? (double)diff / (double)total : 1;
    fprintf(stderr, "%s: frames differ on %.4f %% of values, max %lld level(s)\n", name, 100 * frac,
            (long long)maxd);
    if (loose)
        T_CHECK(total > 0 && maxd <= T_BF16_FRAME_MAX_LEVELS,
                "%s: frames differ by up to %lld levels (bf16 bound %d)", name, (long long)maxd,
                T_BF16_FRAME_MAX_LEVELS);
    else
        T_CHECK(total > 0 && frac <= 1e-3 && maxd <= 1, "%s: frames differ on %.4f %% (max %lld)",
                name, 100 * frac, (long long)maxd);
}

#endif
