/* test_output.c - app/output.c on synthetic frames (no model): the format
 * and destination checks, atomic writes, video folders replaced as a whole,
 * and nothing half-written after SIGTERM / SIGHUP during a write or when
 * the file-size limit (SIGXFSZ -> EFBIG) cuts it. */
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "config.h"
#include "output.h"
#include "test_util.h"

static char tmpdir[256];

static const char *tp(const char *name) {
    static char b[8][600];
    static int k;
    char *p = b[k++ & 7];
    snprintf(p, 600, "%s/%s", tmpdir, name);
    return p;
}

static cosmos3_result *fake_result(int W, int H, int F) {
    cosmos3_result *r = xcalloc(1, sizeof *r);
    r->width = W;
    r->height = H;
    r->frames = F;
    r->fps = 24;
    r->seed = 77;
    r->rgb = xmalloc((size_t)F * W * H * 3);
    uint64_t x = 88172645463325252ull; /* xorshift64: incompressible bytes */
    for (size_t i = 0; i < (size_t)F * W * H * 3; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        r->rgb[i] = (uint8_t)(x >> 56);
    }
    return r;
}

static void free_result(cosmos3_result *r) {
    free(r->rgb);
    free(r);
}

static c3_settings settings_for(const char *out, bool overwrite) {
    c3_settings s;
    memset(&s, 0, sizeof s);
    settings_defaults(&s);
    if (out) settings_set(&s, "output", out, CMD_GEN);
    if (overwrite) settings_set(&s, "overwrite", "on", CMD_GEN);
    return s;
}

static int plan_rc(const char *out, bool overwrite, int frames) {
    c3_settings s = settings_for(out, overwrite);
    c3_output o;
    int rc = output_plan(&s, frames, 64, 64, -1, &o);
    if (rc == C3_OK) output_free(&o);
    settings_free(&s);
    return rc;
}

static int write_out(const char *out, bool overwrite, const cosmos3_result *r, char ***paths,
                     int *np) {
    c3_settings s = settings_for(out, overwrite);
    c3_output o;
    int rc = output_plan(&s, r->frames, r->width, r->height, (int64_t)r->seed, &o);
    c3_media_meta m = {"a prompt\nSteps: 1, Seed: 77",
                       "{\"version\":\"t\",\"settings\":{\"seed\":77}}"};
    if (rc == C3_OK) rc = output_write(&o, r, &m, paths, np);
    output_free(&o);
    settings_free(&s);
    return rc;
}

static void free_paths(char **p, int n) {
    for (int i = 0; i < n; i++)
        free(p[i]);
    free(p);
}

static void test_plan(void) {
    T_CHECK(plan_rc(tp("a.gif"), false, 1) == C3_EUSAGE && strstr(c3_errmsg(), ".png, .jpg"),
            "gif: %s", c3_errmsg());
    T_CHECK(plan_rc(tp("noext"), false, 1) == C3_OK, "a picture without an extension is PNG: %s",
            c3_errmsg());
    T_CHECK(plan_rc(tp("v.jpg"), false, 5) == C3_EUSAGE && strstr(c3_errmsg(), ".mp4 or .webm"),
            "video jpg: %s", c3_errmsg());
    T_CHECK(plan_rc(tp("v.png"), false, 5) == C3_EUSAGE &&
                strstr(c3_errmsg(), "a folder or a pattern"),
            "video png: %s", c3_errmsg());
    T_CHECK(plan_rc(tp("p%d%d.png"), false, 5) == C3_EUSAGE, "two conversions: %s", c3_errmsg());
    T_CHECK(plan_rc(tp("f%04d/x.png"), false, 5) == C3_EUSAGE, "pattern in a folder name: %s",
            c3_errmsg());
    T_CHECK(plan_rc(tp("v.mp4"), false, 5) == C3_OK && plan_rc("-", false, 5) == C3_OK,
            "mp4, stdout");
    mkdir(tp("isdir.mp4"), 0755);
    T_CHECK(plan_rc(tp("isdir.mp4"), true, 5) == C3_EOUTPUT && strstr(c3_errmsg(), "is a folder"),
            "dir: %s", c3_errmsg());
    T_CHECK(plan_rc("/nonexistent-c3/x/y.mp4", false, 5) == C3_EOUTPUT || getuid() == 0,
            "unwritable: %s", c3_errmsg());
    FILE *f = fopen(tp("old.png"), "w");
    fputs("old", f);
    fclose(f);
    T_CHECK(plan_rc(tp("old.png"), false, 1) == C3_EOUTPUT && strstr(c3_errmsg(), "--overwrite"),
            "exists: %s", c3_errmsg());
    T_CHECK(plan_rc(tp("old.png"), true, 1) == C3_OK, "exists with --overwrite");
    mkdir(tp("mixed"), 0755);
    f = fopen(tp("mixed/notes.txt"), "w");
    fclose(f);
    T_CHECK(plan_rc(tp("mixed"), true, 5) == C3_EOUTPUT && strstr(c3_errmsg(), "other files"),
            "mixed: %s", c3_errmsg());
    /* room: a huge estimate fails before any work with the cause */
    c3_settings s = settings_for(tp("huge.png"), false);
    c3_output o;
    int rc = output_plan(&s, 4097, 16384, 16384, -1, &o);
    T_CHECK(rc == C3_EUSAGE || (rc == C3_EOUTPUT && strstr(c3_errmsg(), "not enough room")),
            "room: %s", c3_errmsg());
    settings_free(&s);
    s = settings_for(tp("huge%04d.png"), false);
    rc = output_plan(&s, 4097, 16384, 16384, -1, &o);
    T_CHECK(rc == C3_EOUTPUT && strstr(c3_errmsg(), "not enough room") &&
                strstr(c3_errmsg(), "ENOSPC"),
            "room (frames): %s", c3_errmsg());
    settings_free(&s);
}

static void test_folder_replace(void) {
    cosmos3_result *r17 = fake_result(32, 32, 17), *r9 = fake_result(32, 32, 9);
    char **p;
    int n;
    int rc = write_out(tp("vid"), false, r17, &p, &n);
    T_CHECK(rc == C3_OK && n == 17 && t_count_entries(tp("vid"), "frame_") == 17, "17 frames: %s",
            c3_errmsg());
    if (rc == C3_OK) free_paths(p, n);
    rc = write_out(tp("vid"), false, r9, &p, &n);
    T_CHECK(rc == C3_EOUTPUT && t_count_entries(tp("vid"), "frame_") == 17,
            "no --overwrite keeps the old: %s", c3_errmsg());
    rc = write_out(tp("vid"), true, r9, &p, &n);
    T_CHECK(rc == C3_OK && t_count_entries(tp("vid"), "frame_") == 9,
            "replaced as a whole: %d frames (%s)", t_count_entries(tp("vid"), "frame_"),
            c3_errmsg());
    if (rc == C3_OK) free_paths(p, n);
    T_CHECK(t_count_entries(tmpdir, ".tmp.") == 0, "temporary names left: %d",
            t_count_entries(tmpdir, ".tmp."));
    /* a pattern: all frames placed */
    mkdir(tp("shots"), 0755);
    rc = write_out(tp("shots/s%03d.png"), false, r9, &p, &n);
    T_CHECK(rc == C3_OK && t_count_entries(tp("shots"), "s0") == 9 &&
                t_count_entries(tp("shots"), "tmp") == 0,
            "pattern: %s", c3_errmsg());
    if (rc == C3_OK) free_paths(p, n);
    /* an MP4 and its default name */
    rc = COSMOS3_HAVE_FFMPEG ? write_out(NULL, false, r9, &p, &n) : C3_EFAIL;
    T_CHECK(!COSMOS3_HAVE_FFMPEG || (rc == C3_OK && n == 1 && !strcmp(p[0], "cosmos3-77.mp4")),
            "default name %s", rc ? c3_errmsg() : p[0]);
    if (rc == C3_OK) {
        unlink(p[0]);
        free_paths(p, n);
    }
    free_result(r17);
    free_result(r9);
}

/* In a child: write; the parent signals it once the temporary folder (or
 * file) appears. Nothing may stay behind. */
static void test_signal(int sig, const char *out, const char *tmp_part) {
    pid_t pid = fork();
    if (pid == 0) {
        output_signals_install();
        cosmos3_result *r = fake_result(256, 256, 400);
        char **p;
        int n;
        int rc = write_out(out, false, r, &p, &n);
        _exit(rc == C3_OK ? 0 : 3);
    }
    bool seen = false;
    for (int i = 0; i < 200000 && !seen; i++) {
        seen = t_count_entries(tmpdir, tmp_part) > 0;
        if (!seen) usleep(200);
    }
    if (seen) kill(pid, sig);
    int st;
    waitpid(pid, &st, 0);
    T_CHECK(seen, "signal %d: the write's temporary never showed", sig);
    T_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == sig, "signal %d: child status %d", sig, st);
    T_CHECK(t_count_entries(tmpdir, tmp_part) == 0, "signal %d: %d temporary entries left", sig,
            t_count_entries(tmpdir, tmp_part));
    struct stat sb;
    T_CHECK(stat(out, &sb) != 0, "signal %d: %s exists after the signal", sig, out);
}

/* The file-size limit: SIGXFSZ ignored, EFBIG named, nothing left; an old
 * folder survives a failed --overwrite. */
static void test_fsize(void) {
    pid_t pid = fork();
    if (pid == 0) {
        output_signals_install();
        struct rlimit rl = {64 * 1024, 64 * 1024};
        setrlimit(RLIMIT_FSIZE, &rl);
        cosmos3_result *r = fake_result(256, 256, 9);
        char **p;
        int n;
        int rc = write_out(tp("vid"), true, r, &p, &n);
        int r2 = COSMOS3_HAVE_FFMPEG ? write_out(tp("big.mp4"), false, r, &p, &n) : C3_EOUTPUT;
        fprintf(stderr, "child: rc %d, %d: %s\n", rc, r2, c3_errmsg());
        _exit(rc == C3_EOUTPUT && r2 == C3_EOUTPUT && strstr(c3_errmsg(), "EFBIG") ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "file-size limit: child status %d", st);
    T_CHECK(t_count_entries(tp("vid"), "frame_") == 9, "the old folder survives: %d frames",
            t_count_entries(tp("vid"), "frame_"));
    T_CHECK(t_count_entries(tmpdir, ".tmp.") == 0 && !c3_file_exists(tp("big.mp4")),
            "nothing half-written");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/c3outXXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) return 1;
    test_plan();
    test_folder_replace();
    test_fsize();
    test_signal(SIGTERM, tp("sig_term"), ".sig_term.tmp.");
    test_signal(SIGHUP, tp("sig_hup"), ".sig_hup.tmp.");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "note: could not remove %s\n", tmpdir);
    return t_done("output");
}
