/* result_cache.h - serve's exact-request cache (--result-cache N): a
 * finished image's encoded bytes under the key of every setting it was made
 * with, so that a request whose resolved settings equal an earlier one's is
 * answered without running. At most N entries and RESULT_CACHE_BYTES bytes;
 * the least recently used go first. Not thread-safe: the server's mutex
 * guards it. */
#ifndef COSMOS3_RESULT_CACHE_H
#define COSMOS3_RESULT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "options.h"

#define RESULT_CACHE_BYTES (256u << 20)

typedef struct c3_result_cache c3_result_cache;

c3_result_cache *result_cache_new(int entries); /* NULL when entries <= 0 */
void result_cache_free(c3_result_cache *c);
/* The key of settings s as a request resolves them (every generating
 * option's value) and the answer's format: a malloc'd string, or NULL when
 * the request may not be cached (a random seed). */
char *result_cache_key(const c3_settings *resolved, const char *format, bool seed_given);
/* A copy of the bytes stored under key (malloc'd), or NULL. */
uint8_t *result_cache_get(c3_result_cache *c, const char *key, size_t *len, uint64_t *seed);
/* Store a copy of bytes under key (an entry over the byte bound is not kept). */
void result_cache_put(c3_result_cache *c, const char *key, const uint8_t *bytes, size_t len,
                      uint64_t seed);
/* hits, misses, entries held, bytes held */
void result_cache_stats(const c3_result_cache *c, uint64_t *hits, uint64_t *misses, int *entries,
                        size_t *bytes);

#endif
