/* c3base.h - the base both sides link: errors as values, allocation that
 * never returns NULL, files (the one atomic writer: c3_write_file_atomic and
 * c3_place_file), time, hashes, bytes as text.
 *
 * One static library (libcosmos3base, base/c3base.c) linked into
 * libcosmos3 (hidden there: the shared library exports cosmos3_* alone) and
 * into the programs on it (the applications' helpers, app/util.h). The
 * status codes are cosmos3.h's (C3_OK = COSMOS3_OK, ...: also the exit
 * statuses).
 *
 * Errors: a function that can fail returns an int status (C3_OK or one of the
 * codes below) and records a one-line message with c3_fail(). The message is
 * thread-local; one place (main, the REPL, a rank's join) prints it. Nothing
 * in the engine prints to the terminal.
 */
#ifndef COSMOS3_C3BASE_H
#define COSMOS3_C3BASE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Exit statuses (documented in the man page, EXIT STATUS). */
enum {
    C3_OK = 0,
    C3_EFAIL = 1,     /* internal or unexpected failure */
    C3_EUSAGE = 2,    /* bad command line or option value */
    C3_EMODEL = 3,    /* checkpoint missing, malformed or inconsistent */
    C3_EINPUT = 4,    /* bad input data (prompt, noise file, ...) */
    C3_EOUTPUT = 5,   /* cannot write the output (exists, permission, disk) */
    C3_ERESOURCE = 6, /* not enough devices or memory for the plan */
    C3_ECANCEL = 130, /* cancelled by the user (Ctrl-C) */
};

/* Record a one-line error message (printf style) and return `code`. */
int c3_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message recorded on this thread ("" if none). */
const char *c3_errmsg(void);
/* Prefix the current message with "ctx: ". Returns code. */
int c3_context(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Check a libc call that returns -1 / NULL on failure. Records file:line,
 * the call and strerror(errno), then returns C3_EFAIL from the caller. */
#define C3_SYS(call)                                                                               \
    do {                                                                                           \
        if ((call) == -1)                                                                          \
            return c3_fail(C3_EFAIL, "%s:%d: %s: %s", __FILE__, __LINE__, #call, strerror(errno)); \
    } while (0)
#define C3_SYSPTR(ptr, call)                                                                       \
    do {                                                                                           \
        if (((ptr) = (call)) == NULL)                                                              \
            return c3_fail(C3_EFAIL, "%s:%d: %s: %s", __FILE__, __LINE__, #call,                   \
                           strerror(errno ? errno : ENOMEM));                                      \
    } while (0)
/* Propagate a non-zero status. */
#define C3_TRY(expr)                                                                               \
    do {                                                                                           \
        int c3_rc_ = (expr);                                                                       \
        if (c3_rc_ != C3_OK) return c3_rc_;                                                        \
    } while (0)

/* Allocation that never returns NULL (aborts with file:line on OOM). */
void *c3_xmalloc_(size_t n, const char *file, int line) __attribute__((returns_nonnull, malloc));
void *c3_xcalloc_(size_t n, size_t size, const char *file, int line) __attribute__((returns_nonnull, malloc));
void *c3_xrealloc_(void *p, size_t n, const char *file, int line) __attribute__((returns_nonnull));
char *c3_xstrdup_(const char *s, const char *file, int line) __attribute__((returns_nonnull, malloc));
#define xmalloc(n) c3_xmalloc_((n), __FILE__, __LINE__)
#define xcalloc(n, s) c3_xcalloc_((n), (s), __FILE__, __LINE__)
#define xrealloc(p, n) c3_xrealloc_((p), (n), __FILE__, __LINE__)
#define xstrdup(s) c3_xstrdup_((s), __FILE__, __LINE__)

/* Files. */
/* Open a regular file for reading without blocking on a FIFO; refuses
 * folders, FIFOs, devices and sockets, and names a symlink loop as one. Every
 * refusal returns `code` with a message naming the path. *size: its length. */
int c3_open_regular(const char *path, int code, int *fd, size_t *size);
/* The whole file, NUL-terminated (through c3_open_regular; C3_EINPUT). */
int c3_read_file(const char *path, char **data, size_t *len);
/* Write atomically: data goes to a new "path.tmp.XXXXXX" beside path
 * (mkostemp: O_EXCL, never through a planted symlink), is fsync'ed and
 * renamed into place, then the folder is fsync'ed. Without overwrite the
 * rename refuses an existing path (RENAME_NOREPLACE, else link + unlink). */
int c3_write_file_atomic(const char *path, const void *data, size_t len, bool overwrite);
/* Rename tmp to path; without overwrite never replace one (-1, errno EEXIST). */
int c3_place_file(const char *tmp, const char *path, bool overwrite);
/* Something is at path (a symlink loop counts: opening it names the loop). */
bool c3_file_exists(const char *path);
char *c3_path_join(const char *a, const char *b); /* xmalloc'd */
int c3_mkdir_p(const char *path);
/* Remove path and everything below it (links themselves, never what they
 * point at); best effort: what cannot be removed stays. */
void c3_rm_tree(const char *path);

/* Time in seconds from a monotonic clock. */
double c3_now(void);

/* FNV-1a 64-bit hash (config hashes in metadata). */
uint64_t c3_fnv1a(const void *data, size_t n, uint64_t h);
/* b bytes as text for people: "1.23 GiB", "4.5 MiB" or "6.0 KiB"; returns buf. */
const char *c3_bytes_text(int64_t b, char *buf, size_t n);
#define C3_FNV_INIT 0xcbf29ce484222325ull

#define C3_MIN(a, b) ((a) < (b) ? (a) : (b))
#define C3_MAX(a, b) ((a) > (b) ? (a) : (b))
#define C3_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
