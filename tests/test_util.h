/* test_util.h - the tests' small harness: checks that count failures,
 * fixture lookup (skip with exit 77 when absent), error metrics. */
#ifndef COSMOS3_TEST_UTIL_H
#define COSMOS3_TEST_UTIL_H

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "backend.h"
#include "common.h"
#include "safetensors.h"

#define T_SKIP 77

static int t_failures, t_checks;

#define T_CHECK(cond, ...)                                                                         \
    do {                                                                                           \
        t_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            t_failures++;                                                                          \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Report and return the exit status (0 pass, 1 fail). */
static inline int t_done(const char *name) {
    fprintf(stderr, "%s: %d checks, %d failed\n", name, t_checks, t_failures);
    return t_failures ? 1 : 0;
}

/* COSMOS3_TEST_DEVICE=cuda: the golden parts run on the CUDA backend (bf16). */
static inline bool t_on_cuda(void) {
    const char *d = getenv("COSMOS3_TEST_DEVICE");
    return d && !strcmp(d, "cuda");
}
/* COSMOS3_CUDA_FP32=1 puts the CUDA backend on its fp32 check path. */
static inline bool t_cuda_fp32(void) {
    const char *f = getenv("COSMOS3_CUDA_FP32");
    return f && *f && strcmp(f, "0") != 0;
}
/* The backend a golden part runs on: cpu, or with COSMOS3_TEST_DEVICE=cuda
 * CUDA device 0 (the test fails, exit 1, when it does not open). */
static inline c3_backend *t_golden_backend(c3_backend *cpu) {
    if (!t_on_cuda()) return cpu;
    c3_backend *be = NULL;
    if (c3_backend_cuda(0, &be) != C3_OK) {
        fprintf(stderr, "FAIL: COSMOS3_TEST_DEVICE=cuda: %s\n", c3_errmsg());
        exit(1);
    }
    return be;
}

/* A uniform value in [-1, 1) from the LCG state *s (each test seeds its own). */
static inline float t_frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}
/* A new F32 tensor [ne] on be, filled with t_frand(s) where s is given (else
 * as allocated); exit 1 when it cannot be allocated. */
static inline c3_tensor t_new_tensor(c3_backend *be, int ndim, const int64_t *ne, uint64_t *s) {
    c3_tensor t;
    if (be->alloc(be, &t, C3_F32, ndim, ne, C3_MEM_ACT) != C3_OK) {
        fprintf(stderr, "FAIL: alloc: %s\n", c3_errmsg());
        exit(1);
    }
    if (s)
        for (int64_t i = 0; i < c3_numel(&t); i++)
            ((float *)t.data)[i] = t_frand(s);
    return t;
}

/* The fixtures folder: the first folder of $COSMOS3_FIXTURES (a ':' list:
 * the user's, then meson's -Dfixtures) that holds tiny-a, else NULL. */
static inline const char *t_fixtures(void) {
    static char dir[3072]; /* short enough for the paths the tests build on it */
    const char *e = getenv("COSMOS3_FIXTURES");
    while (e && *e) {
        size_t n = strcspn(e, ":");
        if (n > 0 && n < sizeof dir - 64) {
            char buf[4096 + 64];
            snprintf(dir, sizeof dir, "%.*s", (int)n, e);
            snprintf(buf, sizeof buf, "%s/tiny-a/model/model_index.json", dir);
            FILE *f = fopen(buf, "r");
            if (f) {
                fclose(f);
                return dir;
            }
        }
        e += n;
        if (*e == ':') e++;
    }
    return NULL;
}
/* Skip the whole test (exit 77) when fixtures are absent. */
static inline const char *t_need_fixtures(const char *name) {
    const char *d = t_fixtures();
    if (!d) {
        fprintf(stderr,
                "%s: SKIP: fixtures not found (set COSMOS3_FIXTURES or -Dfixtures to the folder "
                "with tiny-a/)\n",
                name);
        exit(T_SKIP);
    }
    return d;
}
/* path = fixtures/rel (static buffer, rotating 8) */
static inline const char *t_path(const char *rel) {
    static char bufs[8][4096];
    static int k;
    char *b = bufs[k++ & 7];
    snprintf(b, 4096, "%s/%s", t_need_fixtures("test"), rel);
    return b;
}

/* Open a golden safetensors file or fail the test hard. */
static inline void t_open_golden(st_file *f, const char *rel) {
    if (st_open(f, t_path(rel)) != C3_OK) {
        fprintf(stderr, "FAIL: cannot open %s: %s\n", rel, c3_errmsg());
        exit(1);
    }
}
/* A golden tensor as floats (xmalloc'd) or exit. */
static inline float *t_golden_f32(const st_file *f, const char *key, int64_t *numel) {
    const st_tensor *t = st_find(f, key);
    if (!t) {
        fprintf(stderr, "FAIL: golden tensor %s missing in %s\n", key, f->path);
        exit(1);
    }
    if (numel) *numel = st_numel(t);
    return st_to_f32(t);
}

/* The tensor "latents" of a --save-latents file as floats (*n of them), or
 * NULL (*n 0). */
static inline float *t_read_latents(const char *path, int64_t *n) {
    st_file f;
    *n = 0;
    if (st_open(&f, path) != C3_OK) return NULL;
    const st_tensor *t = st_find(&f, "latents");
    float *x = t ? st_to_f32(t) : NULL;
    if (t) *n = st_numel(t);
    st_close(&f);
    return x;
}

/* The entries of dir whose name contains part (-1: no such folder). */
static inline int t_count_entries(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int k = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, part)) k++;
    closedir(d);
    return k;
}

/* rm -rf dir (the test's own mkdtemp folder); whether it went. */
static inline bool t_rm_tree(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0;
}

/* ||a-b|| / ||b|| */
static inline double t_rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
/* max|a-b| / max|b| */
static inline double t_max_rel(const float *a, const float *b, int64_t n) {
    double m = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || isnan(d)) m = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > r) r = fabs(b[i]);
    }
    return r > 0 ? m / r : m;
}

#endif
