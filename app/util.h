/* util.h - the applications' small helpers: errors as values, allocation
 * that never returns NULL, files and paths, time, bytes as text.
 *
 * The status codes are cosmos3.h's (COSMOS3_OK, COSMOS3_EUSAGE, ...: also
 * the exit statuses). The calls are a subset of the library's own helpers
 * (src/common.h, whose declarations these agree with: a test that includes
 * both compiles). libcosmos3.so exports only cosmos3_*, so the build
 * compiles src/common.c once more into the applications' helper archive
 * (meson.build: app_util_lib); a program that links the static library
 * instead (the tests of internals) gets them from there. No application
 * file includes a src/ header.
 *
 * Errors: a function that can fail returns a status and records a one-line
 * message with c3_fail() (thread-local); one place prints it. A library call
 * returns its message in an err buffer: pass it on with
 * c3_fail(rc, "%s", err).
 */
#ifndef COSMOS3_APP_UTIL_H
#define COSMOS3_APP_UTIL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cosmos3.h"

/* Record a one-line error message (printf style) and return `code`. */
int c3_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last message recorded on this thread ("" if none). */
const char *c3_errmsg(void);
/* Prefix the current message with "ctx: ". Returns code. */
int c3_context(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Propagate a non-zero status. */
#define APP_TRY(expr)                                                                              \
    do {                                                                                           \
        int app_rc_ = (expr);                                                                      \
        if (app_rc_ != COSMOS3_OK) return app_rc_;                                                 \
    } while (0)

/* Allocation that never returns NULL (aborts with file:line on OOM). */
void *c3_xmalloc_(size_t n, const char *file, int line) __attribute__((returns_nonnull, malloc));
void *c3_xcalloc_(size_t n, size_t size, const char *file, int line)
    __attribute__((returns_nonnull, malloc));
void *c3_xrealloc_(void *p, size_t n, const char *file, int line) __attribute__((returns_nonnull));
char *c3_xstrdup_(const char *s, const char *file, int line)
    __attribute__((returns_nonnull, malloc));
#define xmalloc(n) c3_xmalloc_((n), __FILE__, __LINE__)
#define xcalloc(n, s) c3_xcalloc_((n), (s), __FILE__, __LINE__)
#define xrealloc(p, n) c3_xrealloc_((p), (n), __FILE__, __LINE__)
#define xstrdup(s) c3_xstrdup_((s), __FILE__, __LINE__)

/* Open a regular file for reading without blocking on a FIFO; refuses
 * folders, FIFOs, devices and sockets, and names a symlink loop as one. Every
 * refusal returns `code` with a message naming the path. *size: its length. */
int c3_open_regular(const char *path, int code, int *fd, size_t *size);
/* The whole file, NUL-terminated (through c3_open_regular; COSMOS3_EINPUT). */
int c3_read_file(const char *path, char **data, size_t *len);
/* Something is at path (a symlink loop counts: opening it names the loop). */
bool c3_file_exists(const char *path);
char *c3_path_join(const char *a, const char *b); /* xmalloc'd */
int c3_mkdir_p(const char *path);                 /* COSMOS3_EOUTPUT naming the folder */

/* The documented environment variables (src/env.h): entry i's name and its
 * man page paragraph (mdoc) in *help; NULL past the last. */
const char *c3_env_doc(int i, const char **help);

/* Time in seconds from a monotonic clock. */
double c3_now(void);

/* FNV-1a 64-bit hash (hashes of inputs in metadata). */
uint64_t c3_fnv1a(const void *data, size_t n, uint64_t h);
#define C3_FNV_INIT 0xcbf29ce484222325ull
/* b bytes as text for people: "1.23 GiB", "4.5 MiB" or "6.0 KiB"; returns buf. */
const char *c3_bytes_text(int64_t b, char *buf, size_t n);

#define C3_MIN(a, b) ((a) < (b) ? (a) : (b))
#define C3_MAX(a, b) ((a) > (b) ? (a) : (b))
#define C3_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
