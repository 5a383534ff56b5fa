/* c3base.c - the base both sides link (c3base.h): error messages, checked
 * allocation, files, time, hashes. */
#include "c3base.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char g_errmsg[1024];

int c3_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_errmsg, sizeof g_errmsg, fmt, ap);
    va_end(ap);
    return code;
}

int c3_context(int code, const char *fmt, ...) {
    char ctx[512], old[sizeof g_errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, g_errmsg, sizeof old);
    size_t n = strlen(ctx);
    if (n > sizeof g_errmsg - 3) n = sizeof g_errmsg - 3;
    memcpy(g_errmsg, ctx, n);
    memcpy(g_errmsg + n, ": ", 2);
    size_t m = strlen(old);
    if (m > sizeof g_errmsg - n - 3) m = sizeof g_errmsg - n - 3;
    memcpy(g_errmsg + n + 2, old, m);
    g_errmsg[n + 2 + m] = 0;
    return code;
}

const char *c3_errmsg(void) { return g_errmsg; }

static void oom(size_t n, const char *file, int line) {
    fprintf(stderr, "cosmos3: out of memory allocating %zu bytes at %s:%d\n", n, file, line);
    abort();
}

void *c3_xmalloc_(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n, file, line);
    return p;
}

void *c3_xcalloc_(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size, file, line);
    return p;
}

void *c3_xrealloc_(void *p, size_t n, const char *file, int line) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n, file, line);
    return q;
}

char *c3_xstrdup_(const char *s, const char *file, int line) {
    size_t n = strlen(s) + 1;
    char *p = c3_xmalloc_(n, file, line);
    memcpy(p, s, n);
    return p;
}

int c3_open_regular(const char *path, int code, int *fd_out, size_t *size) {
    *fd_out = -1;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ELOOP)
            return c3_fail(code, "%s: a loop of symbolic links; point the link at a real file",
                           path);
        return c3_fail(code, "%s: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return c3_fail(code, "%s: fstat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        const char *what = S_ISDIR(st.st_mode)    ? "a folder"
                           : S_ISFIFO(st.st_mode) ? "a FIFO"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                                                  : "a device";
        return c3_fail(code, "%s: is %s, not a regular file; give a file", path, what);
    }
    *fd_out = fd;
    if (size) *size = (size_t)st.st_size;
    return C3_OK;
}

int c3_read_file(const char *path, char **data, size_t *len) {
    int fd;
    size_t hint;
    C3_TRY(c3_open_regular(path, C3_EINPUT, &fd, &hint));
    size_t cap = hint + 1 > (1u << 16) ? hint + 1 : (1u << 16), n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return c3_fail(C3_EFAIL, "%s: read failed: %s", path, strerror(e));
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    *data = buf;
    if (len) *len = n;
    return C3_OK;
}

bool c3_file_exists(const char *path) {
    struct stat st;
    /* a symlink loop is there (opening it reports the loop), not absent */
    return stat(path, &st) == 0 || errno == ELOOP;
}

/* fsync a file's folder, so that a rename into it survives a crash. Some
 * filesystems cannot sync a folder (EINVAL): nothing more can be done. */
static int sync_dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    if (rc != 0 && errno == EINVAL) rc = 0;
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int c3_place_file(const char *tmp, const char *path, bool overwrite) {
    if (overwrite) return rename(tmp, path);
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -1;
    /* a filesystem without RENAME_NOREPLACE: link refuses an existing name too */
    if (link(tmp, path) != 0) return -1;
    unlink(tmp);
    return 0;
}

int c3_write_file_atomic(const char *path, const void *data, size_t len, bool overwrite) {
    if (!overwrite && c3_file_exists(path))
        return c3_fail(C3_EOUTPUT, "%s already exists; use --overwrite to replace it", path);
    /* an unpredictable name beside the target, created here and only here:
     * a planted file or symlink of that name makes mkostemp try another */
    size_t n = strlen(path) + 16;
    char *tmp = xmalloc(n);
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkostemp(tmp, O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        int rc = c3_fail(C3_EOUTPUT, "cannot write %s: %s (is the folder there and writable?)",
                         path, strerror(errno));
        free(tmp);
        return rc;
    }
    const char *p = data;
    size_t left = len;
    int rc = C3_OK;
    while (left && rc == C3_OK) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            rc = c3_fail(C3_EOUTPUT, "cannot write %s: %s", path, strerror(errno));
            break;
        }
        p += w;
        left -= (size_t)w;
    }
    if (rc == C3_OK && fchmod(fd, 0644) != 0)
        rc = c3_fail(C3_EOUTPUT, "cannot write %s: chmod: %s", path, strerror(errno));
    if (rc == C3_OK && fsync(fd) != 0)
        rc = c3_fail(C3_EOUTPUT, "cannot write %s: fsync: %s", path, strerror(errno));
    if (close(fd) != 0 && rc == C3_OK)
        rc = c3_fail(C3_EOUTPUT, "cannot write %s: %s", path, strerror(errno));
    if (rc == C3_OK && c3_place_file(tmp, path, overwrite) != 0)
        rc = errno == EEXIST
                 ? c3_fail(C3_EOUTPUT, "%s already exists; use --overwrite to replace it", path)
                 : c3_fail(C3_EOUTPUT, "cannot write %s: %s", path, strerror(errno));
    if (rc == C3_OK && sync_dir_of(path) != 0)
        rc = c3_fail(C3_EOUTPUT, "cannot write %s: fsync of its folder: %s", path, strerror(errno));
    if (rc != C3_OK) unlink(tmp); /* fails harmlessly once renamed */
    free(tmp);
    return rc;
}

char *c3_path_join(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    char *p = xmalloc(na + nb + 2);
    memcpy(p, a, na);
    size_t k = na;
    if (na && a[na - 1] != '/') p[k++] = '/';
    memcpy(p + k, b, nb + 1);
    return p;
}

int c3_mkdir_p(const char *path) {
    char *p = xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int rc = c3_fail(C3_EOUTPUT, "cannot create folder %s: %s", p, strerror(errno));
            free(p);
            return rc;
        }
        *s = '/';
    }
    int rc = C3_OK;
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        rc = c3_fail(C3_EOUTPUT, "cannot create folder %s: %s", p, strerror(errno));
    free(p);
    return rc;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path); /* go on past what cannot be removed */
    return 0;
}

void c3_rm_tree(const char *path) {
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

double c3_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t c3_fnv1a(const void *data, size_t n, uint64_t h) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

const char *c3_bytes_text(int64_t b, char *buf, size_t n) {
    if (b >= (1ll << 30))
        snprintf(buf, n, "%.2f GiB", (double)b / (double)(1ll << 30));
    else if (b >= (1 << 20))
        snprintf(buf, n, "%.1f MiB", (double)b / (double)(1 << 20));
    else
        snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
    return buf;
}
