/* sig_hook.c - an LD_PRELOAD library for tests/test_place_signals.sh: two
 * Ctrl-Cs (SIGINT sent to the process, as a terminal sends them, so any
 * thread may take them) at chosen moments of the write of the output file
 * named C3HOOK_NAME (its temporary file is NAME.tmp.XXXXXX beside it):
 *   C3HOOK_MODE=write   both once the temporary file is written (its fchmod)
 *   C3HOOK_MODE=before  one then, one as its rename into place starts
 *   C3HOOK_MODE=after   one then, one the moment the rename has returned
 * After each signal the hook waits until a thread has taken it, and 0.2 s
 * more, so the handler runs before the writer goes on (the race the audit
 * saw once in 13 runs, every time). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* SIGINT pending for the process (not yet taken by a thread) */
static int sigint_pending(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long set = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "ShdPnd: %llx", &set) == 1) break;
    fclose(f);
    return (set >> (SIGINT - 1)) & 1;
}

/* one Ctrl-C, noted in C3HOOK_LOG (the test counts them) */
static void ctrl_c(const char *when) {
    const char *log = getenv("C3HOOK_LOG");
    if (log && *log) {
        int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd >= 0) {
            char line[128];
            int n = snprintf(line, sizeof line, "SIGINT %s\n", when);
            if (write(fd, line, (size_t)n) != n) n = -1;
            close(fd);
        }
    }
    kill(getpid(), SIGINT);
    /* until a thread has taken it (the process's pending set, ShdPnd, no
     * longer holds SIGINT; at most 10 s on a loaded machine), then 0.2 s
     * for its handler */
    for (int i = 0; i < 1000 && sigint_pending(); i++)
        usleep(10000);
    usleep(200000);
}

static const char *mode(void) {
    const char *m = getenv("C3HOOK_MODE");
    return m ? m : "";
}

/* path is the output's temporary file (NAME.tmp.*) */
static int is_tmp(const char *path) {
    const char *name = getenv("C3HOOK_NAME");
    if (!name || !*name || !path) return 0;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(name);
    return !strncmp(base, name, n) && !strncmp(base + n, ".tmp.", 5);
}

int fchmod(int fd, mode_t m) {
    static int (*real)(int, mode_t);
    if (!real) real = (int (*)(int, mode_t))dlsym(RTLD_NEXT, "fchmod");
    int rc = real(fd, m);
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, path, sizeof path - 1);
    if (k > 0) {
        path[k] = 0;
        if (is_tmp(path) && *mode()) {
            ctrl_c("written"); /* the first Ctrl-C: the write phase */
            if (!strcmp(mode(), "write")) ctrl_c("written");
        }
    }
    return rc;
}

/* the second Ctrl-C around the placing of the file (rename, or renameat2 /
 * link without --overwrite) */
static void around(const char *from, int after) {
    if (!is_tmp(from)) return;
    if (after && !strcmp(mode(), "after")) ctrl_c("after the rename");
    if (!after && !strcmp(mode(), "before")) ctrl_c("at the rename");
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    around(from, 0);
    int rc = real(from, to);
    if (rc == 0) around(from, 1);
    return rc;
}

int renameat2(int fd1, const char *from, int fd2, const char *to, unsigned flags) {
    static int (*real)(int, const char *, int, const char *, unsigned);
    if (!real)
        real =
            (int (*)(int, const char *, int, const char *, unsigned))dlsym(RTLD_NEXT, "renameat2");
    around(from, 0);
    int rc = real(fd1, from, fd2, to, flags);
    if (rc == 0) around(from, 1);
    return rc;
}
