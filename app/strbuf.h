/* strbuf.h - a growing buffer of bytes, always NUL-terminated: text built
 * piece by piece (serve's /metrics and event streams, the XMP packet) and
 * files encoded in memory (PNG). */
#ifndef COSMOS3_STRBUF_H
#define COSMOS3_STRBUF_H

#include "util.h"

typedef struct {
    char *p; /* NULL until the first add; p[len] is 0 */
    size_t len, cap;
} c3_sbuf;

/* Append n bytes (any bytes). */
void sb_add(c3_sbuf *b, const void *s, size_t n);
/* Append a string. */
void sb_puts(c3_sbuf *b, const char *s);
/* Append printf-style text. */
void sb_printf(c3_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
