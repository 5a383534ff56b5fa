/* test_write_frames.c - a video's PNG frames written on several threads
 * (app/output.c): the same bytes in every file as one thread writes, the
 * a fork after a threaded write still
 * writes (the reason it is pthreads, not OpenMP), and the time of both.
 *
 * Synthetic frames, structured as a decoded video is (a gradient, a moving
 * disc, a little noise), so that deflate works as on real frames.
 * E2E_WRITE_FRAMES=189 E2E_WRITE_SIZE=1280x720 measures the headline
 * video's write (bench/NOTES.md, session 8 e2e). */
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "output.h"
#include "test_util.h"

static char tmpdir[256];

static cosmos3_result *video(int W, int H, int F) {
    cosmos3_result *r = xcalloc(1, sizeof *r);
    r->width = W;
    r->height = H;
    r->frames = F;
    r->fps = 24;
    r->seed = 5;
    r->rgb = xmalloc((size_t)F * W * H * 3); /* [F, H, W, 3] */
    uint64_t s = 12345;
    for (int f = 0; f < F; f++) {
        double cx = W * (0.2 + 0.6 * f / (double)(F > 1 ? F - 1 : 1)), cy = H * 0.5, rad = H * 0.2;
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                uint8_t *p = r->rgb + (((size_t)f * H + y) * W + x) * 3;
                bool in = (x - cx) * (x - cx) + (y - cy) * (y - cy) < rad * rad;
                int n = (int)(t_frand(&s) * 3);
                p[0] = (uint8_t)C3_MIN(255, C3_MAX(0, (in ? 220 : x * 255 / W) + n));
                p[1] = (uint8_t)C3_MIN(255, C3_MAX(0, (in ? 40 : y * 255 / H) + n));
                p[2] = (uint8_t)C3_MIN(255, C3_MAX(0, (in ? 30 : 128) + n));
            }
    }
    return r;
}

/* Write r as a folder of frames with `threads` writers; seconds in *sec. */
static int write_folder(const char *dir, const cosmos3_result *r, const char *threads, char ***p,
                        int *n, double *sec) {
    setenv("COSMOS3_WRITE_THREADS", threads, 1);
    c3_settings s;
    memset(&s, 0, sizeof s);
    settings_defaults(&s);
    settings_set(&s, "output", dir, CMD_GEN);
    c3_output o;
    int rc = output_plan(&s, r->frames, r->width, r->height, (int64_t)r->seed, &o);
    c3_media_meta m = {"a prompt\nSteps: 1, Seed: 5",
                       "{\"version\":\"t\",\"settings\":{\"seed\":5}}"};
    double t0 = c3_now();
    if (rc == C3_OK) rc = output_write(&o, r, &m, p, n);
    *sec = c3_now() - t0;
    if (rc == C3_OK) output_free(&o);
    settings_free(&s);
    return rc;
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long L = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = xmalloc((size_t)(L > 0 ? L : 1));
    *n = fread(b, 1, (size_t)L, f);
    fclose(f);
    return b;
}

static void free_paths(char **p, int n) {
    for (int i = 0; i < n; i++)
        free(p[i]);
    free(p);
}

/* Every frame's file equal, byte for byte. */
static int differing(char **a, char **b, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        size_t na = 0, nb = 0;
        uint8_t *x = slurp(a[i], &na), *y = slurp(b[i], &nb);
        bad += !x || !y || na != nb || memcmp(x, y, na) != 0;
        free(x);
        free(y);
    }
    return bad;
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/c3wfXXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) return 1;
    const char *fe = getenv("E2E_WRITE_FRAMES"), *se = getenv("E2E_WRITE_SIZE");
    int F = fe ? atoi(fe) : 17, W = 640, H = 360;
    if (se) sscanf(se, "%dx%d", &W, &H);
    cosmos3_result *r = video(W, H, F);
    char d1[300], dn[300], dc[300];
    snprintf(d1, sizeof d1, "%s/one/", tmpdir);
    snprintf(dn, sizeof dn, "%s/many/", tmpdir);
    snprintf(dc, sizeof dc, "%s/child/", tmpdir);
    char **p1 = NULL, **pn = NULL;
    int n1 = 0, nn = 0;
    double s1 = 0, sn = 0;
    int rc1 = write_folder(d1, r, "1", &p1, &n1, &s1);
    int rcn = write_folder(dn, r, "4", &pn, &nn, &sn);
    T_CHECK(rc1 == C3_OK && rcn == C3_OK, "writes: %d %d: %s", rc1, rcn, c3_errmsg());
    T_CHECK(n1 == F && nn == F, "frames written: %d and %d of %d", n1, nn, F);
    if (n1 == F && nn == F) {
        int bad = differing(p1, pn, F);
        T_CHECK(bad == 0, "%d of %d frames differ between 1 and 4 writers", bad, F);
    }
    fprintf(stderr, "%d frames %dx%d: 1 writer %.3f s, 4 writers %.3f s (x%.2f on %ld cores)\n", F,
            W, H, s1, sn, sn > 0 ? s1 / sn : 0, sysconf(_SC_NPROCESSORS_ONLN));

    /* a fork after threaded writes: the child writes on threads too (an
       OpenMP pool would hang here) and finishes in time */
    pid_t pid = fork();
    if (pid == 0) {
        alarm(60);
        char **pc;
        int nc;
        double sc;
        int rc = write_folder(dc, r, "4", &pc, &nc, &sc);
        _exit(rc == C3_OK && nc == F && differing(p1, pc, F) == 0 ? 0 : 3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the forked child's write: status %d", st);

    free_paths(p1, n1);
    free_paths(pn, nn);
    free(r->rgb);
    free(r);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", tmpdir);
    return t_done("write_frames");
}
