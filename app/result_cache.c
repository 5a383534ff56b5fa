/* result_cache.c - serve's exact-request cache (see result_cache.h). */
#include "result_cache.h"

#include <stdlib.h>
#include <string.h>

#include "strbuf.h"
#include "util.h"

typedef struct {
    char *key;
    uint8_t *bytes;
    size_t len;
    uint64_t seed, used; /* used: the tick of the last hit or store */
} entry;

struct c3_result_cache {
    entry *e;
    int cap, n;
    size_t bytes;
    uint64_t tick, hits, misses;
};

c3_result_cache *result_cache_new(int entries) {
    if (entries <= 0) return NULL;
    c3_result_cache *c = xcalloc(1, sizeof *c);
    c->e = xcalloc((size_t)entries, sizeof *c->e);
    c->cap = entries;
    return c;
}

static void drop(c3_result_cache *c, int i) {
    c->bytes -= c->e[i].len;
    free(c->e[i].key);
    free(c->e[i].bytes);
    c->e[i] = c->e[--c->n];
}

void result_cache_free(c3_result_cache *c) {
    if (!c) return;
    while (c->n)
        drop(c, 0);
    free(c->e);
    free(c);
}

char *result_cache_key(const c3_settings *s, const char *format, bool seed_given) {
    if (!seed_given) return NULL; /* a random seed asks for a new picture */
    c3_sbuf b = {0};
    sb_printf(&b, "format=%s\n", format);
    for (int i = 0; i < c3_noptions; i++) {
        const c3_option *o = &c3_options[i];
        /* what a request sets, and the layout knobs (--precision, --attention) */
        if (!(o->cmds & CMD_SERVE) || !strcmp(o->name, "output")) continue;
        char *v = settings_get(s, o);
        sb_printf(&b, "%s=%s\n", o->name, v);
        free(v);
    }
    return b.p;
}

uint8_t *result_cache_get(c3_result_cache *c, const char *key, size_t *len, uint64_t *seed) {
    if (!c || !key) return NULL;
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->e[i].key, key)) {
            c->hits++;
            c->e[i].used = ++c->tick;
            *len = c->e[i].len;
            *seed = c->e[i].seed;
            uint8_t *out = xmalloc(c->e[i].len ? c->e[i].len : 1);
            memcpy(out, c->e[i].bytes, c->e[i].len);
            return out;
        }
    c->misses++;
    return NULL;
}

void result_cache_put(c3_result_cache *c, const char *key, const uint8_t *bytes, size_t len,
                      uint64_t seed) {
    if (!c || !key || len > RESULT_CACHE_BYTES) return;
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->e[i].key, key)) drop(c, i--);
    while (c->n && (c->n >= c->cap || c->bytes + len > RESULT_CACHE_BYTES)) {
        int old = 0; /* the least recently used */
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[old].used) old = i;
        drop(c, old);
    }
    entry *e = &c->e[c->n++];
    e->key = xstrdup(key);
    e->bytes = xmalloc(len ? len : 1);
    memcpy(e->bytes, bytes, len);
    e->len = len;
    e->seed = seed;
    e->used = ++c->tick;
    c->bytes += len;
}

void result_cache_stats(const c3_result_cache *c, uint64_t *hits, uint64_t *misses, int *entries,
                        size_t *bytes) {
    *hits = c ? c->hits : 0;
    *misses = c ? c->misses : 0;
    *entries = c ? c->n : 0;
    *bytes = c ? c->bytes : 0;
}
