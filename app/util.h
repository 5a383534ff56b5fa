/* util.h - the applications' small helpers: the base library both sides
 * link (base/c3base.h: errors as values, allocation that never returns NULL,
 * files and the one atomic writer, time, bytes as text) and APP_TRY.
 *
 * The status codes are cosmos3.h's (COSMOS3_OK, COSMOS3_EUSAGE, ...: also
 * the exit statuses; c3base.h's C3_* are the same numbers). libcosmos3.so
 * exports only cosmos3_*, so a program on the shared library links the base
 * archive (libcosmos3base.a) itself; a program that links the static library
 * (the tests of internals) gets it from there. No application file includes
 * a src/ header.
 *
 * Errors: a function that can fail returns a status and records a one-line
 * message with c3_fail() (thread-local); one place prints it. A library call
 * returns its message in an err buffer: pass it on with
 * c3_fail(rc, "%s", err).
 */
#ifndef COSMOS3_APP_UTIL_H
#define COSMOS3_APP_UTIL_H

#include "c3base.h"
#include "cosmos3.h"

/* Propagate a non-zero status. */
#define APP_TRY(expr)                                                                              \
    do {                                                                                           \
        int app_rc_ = (expr);                                                                      \
        if (app_rc_ != COSMOS3_OK) return app_rc_;                                                 \
    } while (0)

#endif
