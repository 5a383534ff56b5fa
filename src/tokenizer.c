/* tokenizer.c - Qwen3 byte-level BPE from a Hugging Face tokenizer.json.
 *
 * The encode path is the one the Hugging Face `tokenizers` library runs for
 * this file:
 *
 *   text --added tokens (leftmost-longest, on the raw text)--> segments
 *        --normalizer (NFC, utf8proc)--> --Split regex (PCRE2, UTF+UCP)-->
 *        words --byte-level map--> symbols --BPE merges by rank--> ids
 *
 * Loading: the two big sections of tokenizer.json (model.vocab, ~151k
 * entries, and model.merges, ~151k pairs) are read by a small dedicated
 * scanner; everything else (added_tokens, normalizer, pre_tokenizer, model
 * options) goes through jansson. Building jansson objects for the whole 11 MB
 * file costs several hundred milliseconds; the scanner keeps loading fast.
 */
#include "tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define BYTE_VALUES 256
#define UTF8_MAX_BYTES 4
#define MAX_CODEPOINT 0x10FFFF
#define JIT_STACK_START (32 * 1024)
#define JIT_STACK_MAX (8 * 1024 * 1024)
/* While loading, an id may not exceed the file's length divided by this
 * (the shortest vocab entry, "x":N, takes 5 bytes, plus a separator): the
 * per-id tables then stay linear in the input. The exact rule comes at the
 * end: every id below the entries of model.vocab plus added_tokens. */
#define MIN_BYTES_PER_ID 6
#define MAX_ADDED 65536 /* added_tokens entries (Qwen3 has 26); each is tried per byte */

/* ------------------------------------------------------------------------ */
/* UTF-8                                                                     */
/* ------------------------------------------------------------------------ */

/* Decode one code point at s[0..n); returns its byte length, 0 if invalid. */
static int utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > MAX_CODEPOINT || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

static int utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t tok_utf8_invalid(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        int k = utf8_decode(u + i, len - i, &cp);
        if (!k) return i;
        i += (size_t)k;
    }
    return len;
}

/* ------------------------------------------------------------------------ */
/* Growable byte buffer and id list                                          */
/* ------------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_reserve(sbuf *b, size_t extra) {
    if (b->n + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra)
        cap *= 2;
    b->p = xrealloc(b->p, cap);
    b->cap = cap;
}
static void sb_add(sbuf *b, const void *s, size_t n) {
    if (!n) return; /* an empty buffer has no storage: memcpy(NULL, .., 0) is undefined */
    sb_reserve(b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

typedef struct {
    int32_t *v;
    int n, cap;
} idlist;

static void ids_push(idlist *l, int32_t id) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = id;
}

/* ------------------------------------------------------------------------ */
/* The tokenizer                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
    char *content; /* UTF-8, NUL-terminated */
    size_t len;
    int32_t id;
    bool normalized; /* matched after normalisation instead of on raw text */
    bool lstrip, rstrip, single_word;
} added_tok;

/* A vocab hash slot carries the string's place so a probe touches only the
 * slot and, on a fingerprint hit, the string. */
typedef struct {
    uint32_t fp; /* high hash bits */
    int32_t id;
    uint32_t off, len; /* into the raw arena */
} vocab_ent;

typedef struct {
    uint64_t key; /* (left id << 32) | right id; EMPTY_KEY when free */
    int32_t rank;
    int32_t id; /* the merged token */
} merge_ent;
#define EMPTY_KEY UINT64_MAX
#define MERGE_PREFETCH 16 /* hash-table entries prefetched this far ahead when loading */

struct c3_tokenizer {
    int n_ids;       /* highest id + 1 (vocab and added tokens) */
    char *raw;       /* arena: vocab strings as stored (byte-level alphabet) */
    size_t *raw_off; /* [n_ids] offset into raw, or SIZE_MAX when id unused */
    uint32_t *raw_len;
    char *dec;        /* arena: decoded bytes per id, NUL-terminated */
    size_t *dec_off;  /* [n_ids] offset into dec, or SIZE_MAX */
    vocab_ent *vhash; /* open-addressed, keyed by raw string; id -1 = free */
    size_t vmask;
    merge_ent *mhash; /* open-addressed merges keyed by id pair */
    size_t mmask;
    int32_t byte_id[BYTE_VALUES];  /* id of the one-byte token for each byte */
    uint32_t byte_cp[BYTE_VALUES]; /* the byte-level alphabet: byte -> code point */
    added_tok *added;
    int n_added;
    bool any_normalized_added;
    bool nfc;
    bool ignore_merges;
    pcre2_code *re; /* the Split pattern */
    bool jit;
    int64_t probes; /* slots the vocab and merge tables' inserts looked at (tok_load_probes) */
};

/* GPT-2's byte-level alphabet: printable Latin-1 bytes map to themselves,
 * the others to U+0100 upwards in byte order. */
static void byte_alphabet(uint32_t cp[BYTE_VALUES]) {
    uint32_t next = BYTE_VALUES;
    for (int b = 0; b < BYTE_VALUES; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = keep ? (uint32_t)b : next++;
    }
}

/* The hash tables' key, drawn once per process: a tokenizer.json cannot be
 * crafted so that its strings or merge pairs collide (an unkeyed hash let
 * every entry land in one probe chain, and the load went quadratic). */
static uint64_t hash_key[2];
static pthread_once_t hash_key_once = PTHREAD_ONCE_INIT;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void hash_key_init(void) {
    /* the kernel's random bytes; without them (no getrandom, or its pool not
     * ready) the clock, the process id and an address, mixed */
    if (getrandom(hash_key, sizeof hash_key, GRND_NONBLOCK) == (ssize_t)sizeof hash_key) return;
    struct timespec ts = {0};
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&ts;
    hash_key[0] = splitmix64(&x);
    hash_key[1] = splitmix64(&x);
}

/* SipHash-1-3 (Aumasson and Bernstein; the variant Rust's and Python's
 * hash tables use) of n bytes under hash_key. */
#define SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIP_ROUND                                                                                  \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = SIP_ROTL(v1, 13);                                                                     \
        v1 ^= v0;                                                                                  \
        v0 = SIP_ROTL(v0, 32);                                                                     \
        v2 += v3;                                                                                  \
        v3 = SIP_ROTL(v3, 16);                                                                     \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = SIP_ROTL(v3, 21);                                                                     \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = SIP_ROTL(v1, 17);                                                                     \
        v1 ^= v2;                                                                                  \
        v2 = SIP_ROTL(v2, 32);                                                                     \
    } while (0)
static uint64_t siphash13(const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t k0 = hash_key[0], k1 = hash_key[1];
    uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull,
             v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
    size_t full = n & ~(size_t)7;
    for (size_t i = 0; i < full; i += 8) {
        uint64_t m;
        memcpy(&m, p + i, 8); /* little-endian hosts (x86-64, aarch64) */
        v3 ^= m;
        SIP_ROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)n << 56;
    for (size_t i = 0; i < (n & 7); i++)
        b |= (uint64_t)p[full + i] << (8 * i);
    v3 ^= b;
    SIP_ROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIP_ROUND;
    SIP_ROUND;
    SIP_ROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    return siphash13(s, n);
}
static uint64_t hash_pair(uint64_t k) {
    return siphash13(&k, sizeof k);
}
static size_t table_size(size_t n) {
    size_t s = 16;
    while (s < n + n / 2) /* linear probing stays short below ~2/3 full */
        s *= 2;
    return s;
}

/* Vocab lookup of a raw (byte-level alphabet) string; -1 if absent. */
static int32_t vocab_find_h(const c3_tokenizer *t, const char *s, size_t n, uint64_t h) {
    if (!t->vhash) return -1;
    uint32_t fp = (uint32_t)(h >> 32);
    for (size_t i = h & t->vmask;; i = (i + 1) & t->vmask) {
        const vocab_ent *e = &t->vhash[i];
        if (e->id < 0) return -1;
        if (e->fp == fp && e->len == n && !memcmp(t->raw + e->off, s, n)) return e->id;
    }
}
static int32_t vocab_find(const c3_tokenizer *t, const char *s, size_t n) {
    return vocab_find_h(t, s, n, hash_bytes(s, n));
}

static const merge_ent *merge_find(const c3_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = hash_pair(key) & t->mmask;; i = (i + 1) & t->mmask) {
        const merge_ent *e = &t->mhash[i];
        if (e->key == key) return e;
        if (e->key == EMPTY_KEY) return NULL;
    }
}

/* ------------------------------------------------------------------------ */
/* Loading: a small JSON scanner for the big sections                        */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *p, *end, *start;
    const char *path;
} scan;

static int scan_fail(scan *s, const char *what) {
    return c3_fail(
        C3_EMODEL,
        "%s: malformed tokenizer.json at byte %zu: %s; re-copy the file from the checkpoint",
        s->path, (size_t)(s->p - s->start), what);
}
static void skip_ws(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}
static bool expect(scan *s, char c) {
    skip_ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}
static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
static int read_hex4(scan *s, uint32_t *v) {
    if (s->end - s->p < 4) return -1;
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(s->p[i]);
        if (h < 0) return -1;
        x = x << 4 | (uint32_t)h;
    }
    s->p += 4;
    *v = x;
    return 0;
}

/* A JSON string into b (b->n reset); not NUL-terminated. */
static int scan_string(scan *s, sbuf *b) {
    b->n = 0;
    if (!expect(s, '"')) return scan_fail(s, "expected a string");
    for (;;) {
        const char *q = s->p;
        while (q < s->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20)
            q++;
        sb_add(b, s->p, (size_t)(q - s->p));
        s->p = q;
        if (s->p >= s->end) return scan_fail(s, "unterminated string");
        char c = *s->p++;
        if (c == '"') return C3_OK;
        if (c != '\\') return scan_fail(s, "control character in a string");
        if (s->p >= s->end) return scan_fail(s, "unterminated escape");
        char e = *s->p++;
        char out[UTF8_MAX_BYTES];
        switch (e) {
        case '"':
        case '\\':
        case '/':
            sb_add(b, &e, 1);
            break;
        case 'b':
            sb_add(b, "\b", 1);
            break;
        case 'f':
            sb_add(b, "\f", 1);
            break;
        case 'n':
            sb_add(b, "\n", 1);
            break;
        case 'r':
            sb_add(b, "\r", 1);
            break;
        case 't':
            sb_add(b, "\t", 1);
            break;
        case 'u': {
            uint32_t v, lo;
            if (read_hex4(s, &v)) return scan_fail(s, "bad \\u escape");
            if (v >= 0xDC00 && v <= 0xDFFF) return scan_fail(s, "lone low surrogate");
            if (v >= 0xD800 && v <= 0xDBFF) {
                if (s->end - s->p < 2 || s->p[0] != '\\' || s->p[1] != 'u')
                    return scan_fail(s, "lone high surrogate");
                s->p += 2;
                if (read_hex4(s, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return scan_fail(s, "bad surrogate pair");
                v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            }
            sb_add(b, out, (size_t)utf8_encode(v, out));
            break;
        }
        default:
            return scan_fail(s, "unknown escape");
        }
    }
}

static int scan_int(scan *s, long *v) {
    skip_ws(s);
    const char *q = s->p;
    bool neg = q < s->end && *q == '-';
    if (neg) q++;
    long x = 0;
    const char *digits = q;
    while (q < s->end && *q >= '0' && *q <= '9' && x < (1L << 40))
        x = x * 10 + (*q++ - '0');
    if (q == digits) return scan_fail(s, "expected an integer");
    s->p = q;
    *v = neg ? -x : x;
    return C3_OK;
}

/* Skip one JSON value of any kind (jansson validates the parts it reads). */
static int scan_skip(scan *s) {
    skip_ws(s);
    int depth = 0;
    do {
        if (s->p >= s->end) return scan_fail(s, "truncated value");
        char c = *s->p;
        if (c == '"') {
            s->p++;
            while (s->p < s->end && *s->p != '"')
                s->p += (*s->p == '\\') ? 2 : 1;
            if (s->p >= s->end) return scan_fail(s, "unterminated string");
            s->p++;
        } else if (c == '{' || c == '[') {
            depth++, s->p++;
        } else if (c == '}' || c == ']') {
            if (--depth < 0) return scan_fail(s, "unbalanced brackets");
            s->p++;
        } else if (depth == 0) { /* a scalar */
            while (s->p < s->end && !strchr(",}] \t\r\n", *s->p))
                s->p++;
        } else {
            s->p++;
        }
        if (depth > 0) skip_ws(s);
    } while (depth > 0);
    return C3_OK;
}

/* Parse the value at s with jansson. */
static int scan_json(scan *s, json_t **out) {
    skip_ws(s);
    const char *a = s->p;
    C3_TRY(scan_skip(s));
    json_error_t err;
    *out = json_loadb(a, (size_t)(s->p - a), JSON_DECODE_ANY, &err);
    if (!*out) {
        s->p = a;
        return scan_fail(s, err.text);
    }
    return C3_OK;
}

/* Make room for id in the per-id arrays. */
static void ensure_id(c3_tokenizer *t, int32_t id, int *cap) {
    if (id < *cap) {
        if (id >= t->n_ids) t->n_ids = id + 1;
        return;
    }
    int nc = *cap ? *cap : 1024;
    while (nc <= id)
        nc *= 2;
    t->raw_off = xrealloc(t->raw_off, (size_t)nc * sizeof *t->raw_off);
    t->raw_len = xrealloc(t->raw_len, (size_t)nc * sizeof *t->raw_len);
    for (int i = *cap; i < nc; i++)
        t->raw_off[i] = SIZE_MAX, t->raw_len[i] = 0;
    *cap = nc;
    if (id >= t->n_ids) t->n_ids = id + 1;
}

/* model.vocab: { "token": id, ... } */
static int load_vocab(c3_tokenizer *t, scan *s, sbuf *arena, int *cap, int *count) {
    sbuf key = {0};
    int rc = C3_OK;
    if (!expect(s, '{')) {
        rc = scan_fail(s, "model.vocab is not an object");
        goto out;
    }
    if (expect(s, '}')) goto out;
    do {
        if ((rc = scan_string(s, &key))) goto out;
        if (!expect(s, ':')) {
            rc = scan_fail(s, "expected ':' in model.vocab");
            goto out;
        }
        long id = 0;
        if ((rc = scan_int(s, &id))) goto out;
        if (id < 0 || id > INT32_MAX / 2 || id > (s->end - s->start) / MIN_BYTES_PER_ID) {
            rc = scan_fail(s, "token id out of range for the vocabulary this file can declare");
            goto out;
        }
        ensure_id(t, (int32_t)id, cap);
        if (t->raw_off[id] != SIZE_MAX) {
            rc = scan_fail(s, "duplicate token id in model.vocab");
            goto out;
        }
        t->raw_off[id] = arena->n;
        t->raw_len[id] = (uint32_t)key.n;
        sb_add(arena, key.p, key.n);
        (*count)++;
    } while (expect(s, ','));
    if (!expect(s, '}')) rc = scan_fail(s, "expected ',' or '}' in model.vocab");
out:
    free(key.p);
    return rc;
}

static int build_vocab_hash(c3_tokenizer *t, const char *path) {
    size_t n = 0;
    for (int i = 0; i < t->n_ids; i++)
        n += t->raw_off[i] != SIZE_MAX;
    size_t sz = table_size(n);
    t->vhash = xmalloc(sz * sizeof *t->vhash);
    for (size_t i = 0; i < sz; i++)
        t->vhash[i].id = -1;
    t->vmask = sz - 1;
    /* hashes first, then the inserts with their slots prefetched ahead */
    uint64_t *hs = xmalloc(sizeof *hs * (size_t)(t->n_ids ? t->n_ids : 1));
    for (int32_t id = 0; id < t->n_ids; id++)
        if (t->raw_off[id] != SIZE_MAX) hs[id] = hash_bytes(t->raw + t->raw_off[id], t->raw_len[id]);
    for (int32_t id = 0; id < t->n_ids; id++) {
        if (id + MERGE_PREFETCH < t->n_ids && t->raw_off[id + MERGE_PREFETCH] != SIZE_MAX)
            __builtin_prefetch(&t->vhash[hs[id + MERGE_PREFETCH] & t->vmask], 1);
        if (t->raw_off[id] == SIZE_MAX) continue;
        const char *str = t->raw + t->raw_off[id];
        uint32_t len = t->raw_len[id];
        uint64_t h = hs[id];
        uint32_t fp = (uint32_t)(h >> 32);
        size_t i = h & t->vmask;
        for (t->probes++; t->vhash[i].id >= 0; i = (i + 1) & t->vmask, t->probes++) {
            const vocab_ent *e = &t->vhash[i];
            if (e->fp == fp && e->len == len && !memcmp(t->raw + e->off, str, len)) {
                free(hs);
                return c3_fail(C3_EMODEL,
                               "%s: token \"%.*s\" appears twice in model.vocab (ids %d and %d)",
                               path, (int)len, str, e->id, id);
            }
        }
        t->vhash[i] = (vocab_ent){fp, id, (uint32_t)t->raw_off[id], len};
    }
    free(hs);
    return C3_OK;
}

/* The merges, scanned first (each as its two halves, stored back to back so
 * the merged token is their concatenation), then resolved to ids in a second
 * pass that prefetches the hash-table slots a few merges ahead: ~150k x 3
 * lookups into a 4 MB table are memory-latency bound, and overlapping them
 * cuts the load of a Qwen3 tokenizer.json by about a third. */
typedef struct {
    uint32_t off;   /* into the halves arena: a then b */
    uint16_t la, lb;
    uint64_t ha, hb, hm; /* hashes of a, b and a||b */
} merge_src;


static int resolve_merges(c3_tokenizer *t, const scan *s, const char *arena, const merge_src *ms, size_t n) {
    int32_t(*ids)[3] = xmalloc(n * sizeof *ids);
    int rc = C3_OK;
    for (size_t i = 0; i < n; i++) {
        if (i + MERGE_PREFETCH < n) {
            const merge_src *f = &ms[i + MERGE_PREFETCH];
            __builtin_prefetch(&t->vhash[f->ha & t->vmask]);
            __builtin_prefetch(&t->vhash[f->hb & t->vmask]);
            __builtin_prefetch(&t->vhash[f->hm & t->vmask]);
        }
        const merge_src *m = &ms[i];
        const char *a = arena + m->off, *b = a + m->la;
        ids[i][0] = vocab_find_h(t, a, m->la, m->ha);
        ids[i][1] = vocab_find_h(t, b, m->lb, m->hb);
        ids[i][2] = vocab_find_h(t, a, (size_t)m->la + m->lb, m->hm);
        if (ids[i][0] < 0 || ids[i][1] < 0 || ids[i][2] < 0) {
            rc = c3_fail(C3_EMODEL,
                         "%s: merge %zu (\"%.*s\" \"%.*s\") uses a token missing from model.vocab; "
                         "re-copy the file",
                         s->path, i, (int)m->la, a, (int)m->lb, b);
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (i + MERGE_PREFETCH < n) {
            uint64_t k = ((uint64_t)(uint32_t)ids[i + MERGE_PREFETCH][0] << 32) |
                         (uint32_t)ids[i + MERGE_PREFETCH][1];
            __builtin_prefetch(&t->mhash[hash_pair(k) & t->mmask]);
        }
        uint64_t key = ((uint64_t)(uint32_t)ids[i][0] << 32) | (uint32_t)ids[i][1];
        size_t h = hash_pair(key) & t->mmask;
        bool seen = false;
        for (t->probes++; t->mhash[h].key != EMPTY_KEY; h = (h + 1) & t->mmask, t->probes++)
            if (t->mhash[h].key == key) {
                seen = true; /* a repeated merge keeps its first (lower) rank */
                break;
            }
        if (!seen) t->mhash[h] = (merge_ent){key, (int32_t)i, ids[i][2]};
    }
out:
    free(ids);
    return rc;
}

/* model.merges: [ ["a", "b"], ... ] or [ "a b", ... ] */
static int load_merges(c3_tokenizer *t, scan *s, int vocab_count) {
    sbuf a = {0}, b = {0}, tmp = {0}, arena = {0};
    merge_src *ms = NULL;
    size_t n = 0, cap = 0;
    int rc = C3_OK;
    /* sized before counting: merges never exceed the vocab (each makes one token) */
    size_t sz = table_size((size_t)vocab_count + 1);
    t->mhash = xmalloc(sz * sizeof *t->mhash);
    for (size_t i = 0; i < sz; i++)
        t->mhash[i].key = EMPTY_KEY;
    t->mmask = sz - 1;
    if (!expect(s, '[')) {
        rc = scan_fail(s, "model.merges is not an array");
        goto out;
    }
    if (expect(s, ']')) goto out;
    do {
        skip_ws(s);
        if (s->p < s->end && *s->p == '[') {
            s->p++;
            if ((rc = scan_string(s, &a))) goto out;
            if (!expect(s, ',')) {
                rc = scan_fail(s, "a merge must be a pair of strings");
                goto out;
            }
            if ((rc = scan_string(s, &b))) goto out;
            if (!expect(s, ']')) {
                rc = scan_fail(s, "a merge must be a pair of strings");
                goto out;
            }
        } else {
            if ((rc = scan_string(s, &tmp))) goto out;
            char *sp = tmp.n ? memchr(tmp.p, ' ', tmp.n) : NULL; /* "" has no storage */
            if (!sp) {
                rc = scan_fail(s, "a merge string must be \"left right\"");
                goto out;
            }
            a.n = b.n = 0;
            sb_add(&a, tmp.p, (size_t)(sp - tmp.p));
            sb_add(&b, sp + 1, tmp.n - (size_t)(sp - tmp.p) - 1);
        }
        if (n + 1 > (size_t)vocab_count + 1) {
            rc = c3_fail(C3_EMODEL, "%s: more merges than vocabulary entries; re-copy the file",
                         s->path);
            goto out;
        }
        if (a.n > UINT16_MAX || b.n > UINT16_MAX || arena.n > UINT32_MAX - a.n - b.n) {
            rc = scan_fail(s, "a merge half is too long");
            goto out;
        }
        if (!a.n || !b.n) { /* a merge joins two tokens; an empty half matches nothing */
            rc = scan_fail(s, "a merge half is empty");
            goto out;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            ms = xrealloc(ms, cap * sizeof *ms);
        }
        merge_src *m = &ms[n++];
        m->off = (uint32_t)arena.n;
        m->la = (uint16_t)a.n;
        m->lb = (uint16_t)b.n;
        sb_add(&arena, a.p, a.n);
        sb_add(&arena, b.p, b.n);
        m->ha = hash_bytes(a.p, a.n);
        m->hb = hash_bytes(b.p, b.n);
        m->hm = hash_bytes(arena.p + m->off, a.n + b.n);
    } while (expect(s, ','));
    if (!expect(s, ']')) {
        rc = scan_fail(s, "expected ',' or ']' in model.merges");
        goto out;
    }
    rc = resolve_merges(t, s, arena.p, ms, n);
out:
    free(a.p);
    free(b.p);
    free(tmp.p);
    free(arena.p);
    free(ms);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Loading: configuration sections (jansson)                                 */
/* ------------------------------------------------------------------------ */

static int load_added(c3_tokenizer *t, json_t *arr, const char *path, int *cap, size_t file_len) {
    if (!json_is_array(arr)) return c3_fail(C3_EMODEL, "%s: added_tokens is not an array", path);
    size_t n = json_array_size(arr);
    if (n > MAX_ADDED)
        return c3_fail(C3_EMODEL, "%s: %zu added_tokens; at most %d are supported", path, n,
                       MAX_ADDED);
    t->added = xcalloc(n ? n : 1, sizeof *t->added);
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(arr, i);
        json_t *id = json_object_get(o, "id"), *content = json_object_get(o, "content");
        if (!json_is_integer(id) || !json_is_string(content) || json_string_length(content) == 0 ||
            json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX / 2)
            return c3_fail(C3_EMODEL, "%s: added_tokens[%zu] needs an id and a non-empty content",
                           path, i);
        if (json_integer_value(id) > (json_int_t)(file_len / MIN_BYTES_PER_ID))
            return c3_fail(C3_EMODEL,
                           "%s: added_tokens[%zu] id %lld is out of range for the vocabulary this "
                           "file can declare",
                           path, i, (long long)json_integer_value(id));
        added_tok *a = &t->added[t->n_added++];
        a->len = json_string_length(content);
        a->content = xmalloc(a->len + 1);
        memcpy(a->content, json_string_value(content), a->len + 1);
        a->id = (int32_t)json_integer_value(id);
        a->normalized = json_is_true(json_object_get(o, "normalized"));
        a->lstrip = json_is_true(json_object_get(o, "lstrip"));
        a->rstrip = json_is_true(json_object_get(o, "rstrip"));
        a->single_word = json_is_true(json_object_get(o, "single_word"));
        t->any_normalized_added |= a->normalized;
        ensure_id(t, a->id, cap);
    }
    return C3_OK;
}

static int load_normalizer(c3_tokenizer *t, json_t *n, const char *path) {
    if (!n || json_is_null(n)) return C3_OK;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (type && !strcmp(type, "NFC")) {
        t->nfc = true;
        return C3_OK;
    }
    if (type && !strcmp(type, "Sequence")) {
        json_t *list = json_object_get(n, "normalizers");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) C3_TRY(load_normalizer(t, e, path));
        return C3_OK;
    }
    return c3_fail(C3_EMODEL,
                   "%s: normalizer \"%s\" is not supported (only NFC); use a Qwen3 tokenizer.json",
                   path, type ? type : "?");
}

static int load_pretok_one(c3_tokenizer *t, json_t *p, const char *path) {
    const char *type = json_string_value(json_object_get(p, "type"));
    if (type && !strcmp(type, "ByteLevel")) {
        if (json_is_true(json_object_get(p, "use_regex")) ||
            json_is_true(json_object_get(p, "add_prefix_space")))
            return c3_fail(
                C3_EMODEL,
                "%s: ByteLevel pre-tokenizer with use_regex/add_prefix_space is not supported",
                path);
        return C3_OK;
    }
    if (type && !strcmp(type, "Split")) {
        const char *re = json_string_value(json_object_get(json_object_get(p, "pattern"), "Regex"));
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        if (!re || !beh || strcmp(beh, "Isolated") || json_is_true(json_object_get(p, "invert")))
            return c3_fail(
                C3_EMODEL,
                "%s: only a Split pre-tokenizer with a Regex pattern and Isolated behaviour "
                "is supported",
                path);
        if (t->re)
            return c3_fail(C3_EMODEL, "%s: more than one Split pre-tokenizer is not supported",
                           path);
        int err;
        PCRE2_SIZE off;
        t->re = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                              &off, NULL);
        if (!t->re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return c3_fail(C3_EMODEL,
                           "%s: the pre-tokenizer regex does not compile at offset %zu: %s", path,
                           (size_t)off, (const char *)msg);
        }
        t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
        return C3_OK;
    }
    return c3_fail(C3_EMODEL,
                   "%s: pre-tokenizer \"%s\" is not supported; use a Qwen3 tokenizer.json", path,
                   type ? type : "?");
}

static int load_pretok(c3_tokenizer *t, json_t *p, const char *path) {
    const char *type = json_string_value(json_object_get(p, "type"));
    if (type && !strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e) C3_TRY(load_pretok_one(t, e, path));
    } else {
        C3_TRY(load_pretok_one(t, p, path));
    }
    if (!t->re)
        return c3_fail(C3_EMODEL, "%s: no Split pre-tokenizer regex; use a Qwen3 tokenizer.json",
                       path);
    return C3_OK;
}

static int load_model_opts(c3_tokenizer *t, json_t *m, const char *path) {
    const char *type = json_string_value(json_object_get(m, "type"));
    if (!type || strcmp(type, "BPE"))
        return c3_fail(C3_EMODEL, "%s: model type \"%s\" is not BPE; use a Qwen3 tokenizer.json",
                       path, type ? type : "?");
    const char *pre = json_string_value(json_object_get(m, "continuing_subword_prefix"));
    const char *suf = json_string_value(json_object_get(m, "end_of_word_suffix"));
    json_t *drop = json_object_get(m, "dropout");
    if ((pre && *pre) || (suf && *suf) || json_is_true(json_object_get(m, "byte_fallback")) ||
        (drop && !json_is_null(drop)))
        return c3_fail(
            C3_EMODEL,
            "%s: BPE options (subword prefix/suffix, byte_fallback, dropout) are not supported",
            path);
    t->ignore_merges = json_is_true(json_object_get(m, "ignore_merges"));
    return C3_OK;
}

/* Decoded bytes of every id. */
static void build_decoded(c3_tokenizer *t) {
    uint8_t cp_byte[2 * BYTE_VALUES + 1];
    bool cp_ok[2 * BYTE_VALUES + 1] = {0};
    for (int b = 0; b < BYTE_VALUES; b++)
        cp_byte[t->byte_cp[b]] = (uint8_t)b, cp_ok[t->byte_cp[b]] = true;
    /* decoding never lengthens a token: one arena of raw bytes + NULs + added tokens */
    size_t cap = 1;
    for (int id = 0; id < t->n_ids; id++)
        if (t->raw_off[id] != SIZE_MAX) cap += t->raw_len[id] + 1;
    for (int i = 0; i < t->n_added; i++)
        cap += t->added[i].len + 1;
    char *d = xmalloc(cap), *o = d;
    t->dec_off = xmalloc((size_t)t->n_ids * sizeof *t->dec_off);
    for (int id = 0; id < t->n_ids; id++) {
        t->dec_off[id] = SIZE_MAX;
        if (t->raw_off[id] == SIZE_MAX) continue;
        t->dec_off[id] = (size_t)(o - d);
        const unsigned char *s = (const unsigned char *)t->raw + t->raw_off[id];
        size_t n = t->raw_len[id], i = 0;
        while (i < n) {
            uint32_t cp;
            int k = s[i] < 0x80 ? (cp = s[i], 1) : utf8_decode(s + i, n - i, &cp);
            if (!k) k = 1, cp = s[i];
            if (cp < C3_ARRAY_LEN(cp_ok) && cp_ok[cp]) {
                *o++ = (char)cp_byte[cp];
            } else {
                memcpy(o, s + i, (size_t)k);
                o += k;
            }
            i += (size_t)k;
        }
        *o++ = 0;
    }
    for (int i = 0; i < t->n_added; i++) {
        t->dec_off[t->added[i].id] = (size_t)(o - d);
        memcpy(o, t->added[i].content, t->added[i].len + 1);
        o += t->added[i].len + 1;
    }
    t->dec = d;
}

/* Step through an object's members: after '{' was read, each call reads
 * the separator and the next key (s is then at its value); *more is false at
 * the closing '}'. */
static int object_next(scan *s, sbuf *key, bool *first, bool *more) {
    *more = false;
    if (expect(s, '}')) return C3_OK;
    if (!*first && !expect(s, ',')) return scan_fail(s, "expected ',' or '}'");
    *first = false;
    C3_TRY(scan_string(s, key));
    if (!expect(s, ':')) return scan_fail(s, "expected ':' after a key");
    *more = true;
    return C3_OK;
}
#define KEY_IS(k) (key.n == strlen(k) && !memcmp(key.p, k, key.n))

int tok_load(c3_tokenizer **out, const char *path) {
    *out = NULL;
    if (pthread_once(&hash_key_once, hash_key_init) != 0)
        return c3_fail(C3_EFAIL, "tokenizer: cannot draw the hash key");
    char *text = NULL;
    size_t len = 0;
    if (c3_read_file(path, &text, &len) != C3_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", c3_errmsg()); /* never format the message into itself */
        return c3_fail(
            C3_EMODEL,
            "%s: cannot read the tokenizer (%s); copy text_tokenizer/ from the checkpoint", path,
            why);
    }
    c3_tokenizer *t = xcalloc(1, sizeof *t);
    json_t *added = NULL, *norm = NULL, *pretok = NULL, *mopts = json_object();
    sbuf arena = {0};
    int cap = 0, vocab_count = 0, rc = C3_OK;
    bool have_vocab = false, have_merges = false, have_model = false;
    scan s = {text, text + len, text, path};
    scan merges_at = {0};

    if (!expect(&s, '{')) {
        rc = scan_fail(&s, "not a JSON object");
        goto out;
    }
    sbuf key = {0};
    bool first = true, more;
    while (!(rc = object_next(&s, &key, &first, &more)) && more) {
        json_t **slot = KEY_IS("added_tokens")    ? &added
                        : KEY_IS("normalizer")    ? &norm
                        : KEY_IS("pre_tokenizer") ? &pretok
                                                  : NULL;
        if ((slot && *slot) || (KEY_IS("model") && have_model)) {
            rc = scan_fail(&s, "a top-level key appears twice");
        } else if (slot) {
            rc = scan_json(&s, slot);
        } else if (KEY_IS("model")) {
            have_model = true;
            if (!expect(&s, '{')) {
                rc = scan_fail(&s, "model is not an object");
                break;
            }
            bool mfirst = true, mmore;
            while (!(rc = object_next(&s, &key, &mfirst, &mmore)) && mmore) {
                if ((KEY_IS("vocab") && have_vocab) || (KEY_IS("merges") && have_merges)) {
                    rc = scan_fail(&s, "model.vocab or model.merges appears twice");
                } else if (KEY_IS("vocab")) {
                    rc = load_vocab(t, &s, &arena, &cap, &vocab_count);
                    have_vocab = true;
                    t->raw = arena.p ? arena.p : xcalloc(1, 1);
                    arena.p = NULL;
                    if (!rc) rc = build_vocab_hash(t, path);
                    if (!rc && have_merges) rc = load_merges(t, &merges_at, vocab_count);
                } else if (KEY_IS("merges")) {
                    /* merges need the whole vocab: parse now or note where they are */
                    skip_ws(&s);
                    merges_at = s;
                    rc = have_vocab ? load_merges(t, &s, vocab_count) : scan_skip(&s);
                    have_merges = true;
                } else {
                    char *k = xmalloc(key.n + 1);
                    memcpy(k, key.p, key.n);
                    k[key.n] = 0;
                    json_t *v = NULL;
                    rc = scan_json(&s, &v);
                    if (v) json_object_set_new(mopts, k, v);
                    free(k);
                }
                if (rc) break;
            }
        } else {
            rc = scan_skip(&s);
        }
        if (rc) break;
    }
    free(key.p);
    if (rc) goto out;
    if (!have_model || !have_vocab || !have_merges) {
        rc = c3_fail(
            C3_EMODEL,
            "%s: model.vocab or model.merges missing; copy text_tokenizer/ from the checkpoint",
            path);
        goto out;
    }
    if ((rc = load_model_opts(t, mopts, path))) goto out;
    if (added && (rc = load_added(t, added, path, &cap, len))) goto out;
    if (t->n_ids > vocab_count + t->n_added) {
        rc = c3_fail(C3_EMODEL,
                     "%s: token id %d is beyond the vocabulary the file declares (%d entries in "
                     "model.vocab + %d added_tokens); re-copy the file from the checkpoint",
                     path, t->n_ids - 1, vocab_count, t->n_added);
        goto out;
    }
    if ((rc = load_normalizer(t, norm, path))) goto out;
    if (!pretok) {
        rc = c3_fail(C3_EMODEL, "%s: no pre_tokenizer; use a Qwen3 tokenizer.json", path);
        goto out;
    }
    if ((rc = load_pretok(t, pretok, path))) goto out;

    byte_alphabet(t->byte_cp);
    for (int b = 0; b < BYTE_VALUES; b++) {
        char u[UTF8_MAX_BYTES];
        t->byte_id[b] = vocab_find(t, u, (size_t)utf8_encode(t->byte_cp[b], u));
        if (t->byte_id[b] < 0) {
            rc = c3_fail(
                C3_EMODEL,
                "%s: byte 0x%02x has no token in model.vocab; not a byte-level BPE vocabulary",
                path, b);
            goto out;
        }
    }
    build_decoded(t);
out:
    free(arena.p);
    free(text);
    json_decref(added);
    json_decref(norm);
    json_decref(pretok);
    json_decref(mopts);
    if (rc) {
        tok_free(t);
        return rc;
    }
    *out = t;
    return C3_OK;
}

#undef KEY_IS

void tok_free(c3_tokenizer *t) {
    if (!t) return;
    free(t->raw);
    free(t->raw_off);
    free(t->raw_len);
    free(t->dec);
    free(t->dec_off);
    free(t->vhash);
    free(t->mhash);
    for (int i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    pcre2_code_free(t->re);
    free(t);
}

int32_t tok_id(const c3_tokenizer *t, const char *token) {
    size_t n = strlen(token);
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->added[i].content, token, n)) return t->added[i].id;
    return vocab_find(t, token, n);
}

const char *tok_piece(const c3_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_ids || t->dec_off[id] == SIZE_MAX) return NULL;
    return t->dec + t->dec_off[id];
}

int64_t tok_load_probes(const c3_tokenizer *t) {
    return t->probes;
}

int tok_vocab_size(const c3_tokenizer *t) {
    return t->n_ids;
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */
/* ------------------------------------------------------------------------ */

/* BPE of one pre-tokenized word (raw bytes), merging the lowest-ranked
 * adjacent pair first, leftmost among equal ranks. */
typedef struct {
    int32_t id;
    int prev, next; /* -1 at the ends */
    bool dead;
} bpe_sym;
typedef struct {
    int32_t rank, pos, id;
} bpe_cand;

static bool cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}
typedef struct {
    bpe_sym *sym;
    bpe_cand *heap;
    int heap_n, cap;
    sbuf mapped;
} bpe_work;

static void heap_push(bpe_work *w, bpe_cand c) {
    int i = w->heap_n++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_less(&c, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = c;
}
static bpe_cand heap_pop(bpe_work *w) {
    bpe_cand top = w->heap[0], last = w->heap[--w->heap_n];
    int i = 0, n = w->heap_n;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!cand_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}
static void push_pair(const c3_tokenizer *t, bpe_work *w, int pos) {
    if (pos < 0) return;
    int nx = w->sym[pos].next;
    if (nx < 0) return;
    const merge_ent *m = merge_find(t, w->sym[pos].id, w->sym[nx].id);
    if (m) heap_push(w, (bpe_cand){m->rank, pos, m->id});
}

static void bpe_word(const c3_tokenizer *t, bpe_work *w, const unsigned char *s, size_t n,
                     idlist *out) {
    if (t->ignore_merges) { /* a whole word found in the vocab is kept as is */
        w->mapped.n = 0;
        for (size_t i = 0; i < n; i++) {
            char u[UTF8_MAX_BYTES];
            sb_add(&w->mapped, u, (size_t)utf8_encode(t->byte_cp[s[i]], u));
        }
        int32_t id = vocab_find(t, w->mapped.p, w->mapped.n);
        if (id >= 0) {
            ids_push(out, id);
            return;
        }
    }
    if ((size_t)w->cap < n) {
        w->cap = (int)n;
        w->sym = xrealloc(w->sym, n * sizeof *w->sym);
        /* live + stale candidates: n-1 initial, then each merge pops one and
         * pushes at most two, and there are at most n-1 merges: < 2n */
        w->heap = xrealloc(w->heap, 2 * n * sizeof *w->heap);
    }
    int len = (int)n;
    for (int i = 0; i < len; i++)
        w->sym[i] = (bpe_sym){t->byte_id[s[i]], i - 1, i + 1 < len ? i + 1 : -1, false};
    w->heap_n = 0;
    for (int i = 0; i + 1 < len; i++)
        push_pair(t, w, i);
    while (w->heap_n) {
        bpe_cand c = heap_pop(w);
        bpe_sym *a = &w->sym[c.pos];
        if (a->dead || a->next < 0) continue;
        const merge_ent *m = merge_find(t, a->id, w->sym[a->next].id);
        if (!m || m->id != c.id) continue; /* stale candidate */
        int b = a->next;
        a->id = c.id;
        a->next = w->sym[b].next;
        w->sym[b].dead = true;
        if (a->next >= 0) w->sym[a->next].prev = c.pos;
        push_pair(t, w, a->prev);
        push_pair(t, w, c.pos);
    }
    for (int i = 0; i >= 0; i = w->sym[i].next)
        ids_push(out, w->sym[i].id);
}

/* Split by the pre-tokenizer regex (Isolated: matches and the gaps between
 * them are all words), then BPE each word. */
static int pretok_bpe(const c3_tokenizer *t, const char *s, size_t n, bpe_work *w,
                      pcre2_match_data *md, pcre2_match_context *mc, idlist *out) {
    size_t pos = 0;
    while (pos < n) {
        int r = pcre2_match(t->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, mc);
        if (r == PCRE2_ERROR_JIT_STACKLIMIT)
            r = pcre2_match(t->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                            mc);
        size_t ms = n, me = n;
        if (r >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            ms = ov[0], me = ov[1];
        } else if (r != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(r, msg, sizeof msg);
            return c3_fail(
                C3_EINPUT,
                "prompt: the tokenizer regex failed at byte %zu (%s); shorten the prompt", pos,
                (const char *)msg);
        }
        if (ms > pos) bpe_word(t, w, (const unsigned char *)s + pos, ms - pos, out); /* gap */
        if (me > ms) {
            bpe_word(t, w, (const unsigned char *)s + ms, me - ms, out);
            pos = me;
        } else if (ms < n) { /* empty match: step one character */
            size_t k = 1;
            while (ms + k < n && ((unsigned char)s[ms + k] & 0xC0) == 0x80)
                k++;
            bpe_word(t, w, (const unsigned char *)s + ms, k, out);
            pos = ms + k;
        } else {
            pos = n;
        }
    }
    return C3_OK;
}

static bool is_word_byte(unsigned char c) {
    return c >= 0x80 || c == '_' || (unsigned)((c | 0x20) - 'a') < 26u || (unsigned)(c - '0') < 10u;
}
static bool is_space_byte(unsigned char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* The leftmost-longest added token in s[from..n) whose `normalized` flag is
 * `norm`. Returns false if none. [*ms, *me) is the span it consumes (with
 * lstrip/rstrip whitespace). */
static bool find_added(const c3_tokenizer *t, const char *s, size_t n, size_t from, bool norm,
                       size_t *ms, size_t *me, int32_t *id) {
    for (size_t p = from; p < n; p++) {
        int best = -1;
        for (int i = 0; i < t->n_added; i++) {
            const added_tok *a = &t->added[i];
            if (a->normalized != norm || a->content[0] != s[p] || a->len > n - p) continue;
            if (memcmp(s + p, a->content, a->len)) continue;
            if (a->single_word && ((p > 0 && is_word_byte((unsigned char)s[p - 1])) ||
                                   (p + a->len < n && is_word_byte((unsigned char)s[p + a->len]))))
                continue;
            if (best < 0 || a->len > t->added[best].len) best = i;
        }
        if (best >= 0) {
            const added_tok *a = &t->added[best];
            size_t b = p, e = p + a->len;
            if (a->lstrip)
                while (b > from && is_space_byte((unsigned char)s[b - 1]))
                    b--;
            if (a->rstrip)
                while (e < n && is_space_byte((unsigned char)s[e]))
                    e++;
            *ms = b, *me = e, *id = a->id;
            return true;
        }
    }
    return false;
}

typedef struct {
    bpe_work w;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    sbuf tmp;
} enc_ctx;

/* A normalised segment: split on normalized added tokens, BPE the rest. */
static int encode_normalized(const c3_tokenizer *t, enc_ctx *c, const char *s, size_t n,
                             idlist *out) {
    size_t pos = 0, ms, me;
    int32_t id;
    while (t->any_normalized_added && find_added(t, s, n, pos, true, &ms, &me, &id)) {
        C3_TRY(pretok_bpe(t, s + pos, ms - pos, &c->w, c->md, c->mc, out));
        ids_push(out, id);
        pos = me;
    }
    return pretok_bpe(t, s + pos, n - pos, &c->w, c->md, c->mc, out);
}

/* A raw segment between non-normalized added tokens. */
static int encode_segment(const c3_tokenizer *t, enc_ctx *c, const char *s, size_t n, idlist *out) {
    if (!n) return C3_OK;
    if (!t->nfc) return encode_normalized(t, c, s, n, out);
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &nfc,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (k < 0)
        return c3_fail(C3_EINPUT, "prompt: NFC normalisation failed: %s", utf8proc_errmsg(k));
    int rc = encode_normalized(t, c, (const char *)nfc, (size_t)k, out);
    free(nfc);
    return rc;
}

int tok_encode(const c3_tokenizer *t, const char *text, size_t len, int32_t **ids, int *n) {
    *ids = NULL;
    *n = 0;
    size_t bad = tok_utf8_invalid(text, len);
    if (bad < len)
        return c3_fail(C3_EINPUT,
                       "prompt: invalid UTF-8 at byte %zu (0x%02x); the prompt must be UTF-8 text",
                       bad, (unsigned char)text[bad]);
    enc_ctx c = {0};
    c.md = pcre2_match_data_create_from_pattern(t->re, NULL);
    c.mc = pcre2_match_context_create(NULL);
    if (!c.md || !c.mc) {
        pcre2_match_data_free(c.md);
        pcre2_match_context_free(c.mc);
        return c3_fail(C3_EFAIL, "tokenizer: out of memory for the regex match data");
    }
    if (t->jit) {
        c.js = pcre2_jit_stack_create(JIT_STACK_START, JIT_STACK_MAX, NULL);
        if (c.js) pcre2_jit_stack_assign(c.mc, NULL, c.js);
    }
    idlist out = {0};
    int rc = C3_OK;
    size_t pos = 0, ms, me;
    int32_t id;
    while (find_added(t, text, len, pos, false, &ms, &me, &id)) {
        if ((rc = encode_segment(t, &c, text + pos, ms - pos, &out))) goto done;
        ids_push(&out, id);
        pos = me;
    }
    rc = encode_segment(t, &c, text + pos, len - pos, &out);
done:
    free(c.w.sym);
    free(c.w.heap);
    free(c.w.mapped.p);
    free(c.tmp.p);
    pcre2_match_data_free(c.md);
    pcre2_match_context_free(c.mc);
    pcre2_jit_stack_free(c.js);
    if (rc) {
        free(out.v);
        return rc;
    }
    *ids = out.v ? out.v : xmalloc(sizeof(int32_t));
    *n = out.n;
    return C3_OK;
}
