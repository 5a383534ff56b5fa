/* test_util.h - the tests' small harness: checks that count failures,
 * fixture lookup (skip with exit 77 when absent), error metrics. */
#ifndef COSMOS3_TEST_UTIL_H
#define COSMOS3_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
