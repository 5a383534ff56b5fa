/* safetensors.c - validated mmap reader and atomic writer. */
#include "safetensors.h"

#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20) /* 100 MB, as the reference implementation */

int64_t st_numel(const st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static int cmp_offset(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    const char *px = x->data, *py = y->data;
    return px < py ? -1 : px > py;
}
static int cmp_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

void st_close(st_file *f) {
    for (int i = 0; i < f->n; i++) free(f->t[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->t);
    if (f->map) munmap(f->map, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

#define BAD(...) (st_close(f), c3_fail(C3_EMODEL, __VA_ARGS__))

int st_parse(st_file *f, const void *buf, size_t size, const char *name) {
    memset(f, 0, sizeof *f);
    f->path = xstrdup(name);
    const unsigned char *p = buf;
    if (size < 8) return BAD("%s: truncated safetensors file (%zu bytes, need at least 8)", name, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | p[i];
    if (hlen > size - 8)
        return BAD("%s: header length %llu runs past the end of the file (%zu bytes): file truncated?",
                   name, (unsigned long long)hlen, size);
    if (hlen > ST_MAX_HEADER) return BAD("%s: header length %llu is too large", name, (unsigned long long)hlen);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)p + 8, hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return BAD("%s: header is not valid JSON: %s (byte %d)", name, jerr.text, jerr.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return BAD("%s: header is not a JSON object", name);
    }
    const unsigned char *data = p + 8 + hlen;
    size_t dsize = size - 8 - hlen;
    size_t cap = json_object_size(root);
    f->t = xcalloc(cap ? cap : 1, sizeof *f->t);
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        /* messages are formatted after json_decref(root) frees `key`: keep a copy */
        char kname[256];
        snprintf(kname, sizeof kname, "%s", key);
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                json_decref(root);
                return BAD("%s: __metadata__ is not an object", name);
            }
            size_t m = json_object_size(val);
            f->meta_keys = xcalloc(m ? m : 1, sizeof(char *));
            f->meta_vals = xcalloc(m ? m : 1, sizeof(char *));
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    char mname[256];
                    snprintf(mname, sizeof mname, "%s", mk);
                    json_decref(root);
                    return BAD("%s: __metadata__.%s is not a string", name, mname);
                }
                f->meta_keys[f->nmeta] = xstrdup(mk);
                f->meta_vals[f->nmeta++] = xstrdup(json_string_value(mv));
            }
            continue;
        }
        st_tensor *t = &f->t[f->n];
        json_t *jd = json_object_get(val, "dtype"), *js = json_object_get(val, "shape"),
               *jo = json_object_get(val, "data_offsets");
        if (!json_is_object(val) || !json_is_string(jd) || !json_is_array(js) || !json_is_array(jo) ||
            json_array_size(jo) != 2) {
            json_decref(root);
            return BAD("%s: tensor '%s' needs dtype, shape and data_offsets [begin, end]", name, kname);
        }
        if (c3_dtype_parse(json_string_value(jd), &t->dtype) != 0) {
            char msg[64];
            snprintf(msg, sizeof msg, "%s", json_string_value(jd));
            json_decref(root);
            return BAD("%s: tensor '%s' has unsupported dtype %s (supported: F32, BF16, F16, I64, I32, U8)",
                       name, kname, msg);
        }
        if (json_array_size(js) > ST_MAX_DIMS) {
            json_decref(root);
            return BAD("%s: tensor '%s' has more than %d dimensions", name, kname, ST_MAX_DIMS);
        }
        t->ndim = (int)json_array_size(js);
        uint64_t numel = 1;
        bool ok = true;
        for (int i = 0; i < t->ndim; i++) {
            json_t *d = json_array_get(js, (size_t)i);
            if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > (1ll << 40)) {
                ok = false;
                break;
            }
            t->shape[i] = json_integer_value(d);
            if (t->shape[i] && numel > (UINT64_MAX / 16) / (uint64_t)t->shape[i]) ok = false;
            numel *= (uint64_t)t->shape[i];
        }
        json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
        if (!ok || !json_is_integer(jb) || !json_is_integer(je)) {
            json_decref(root);
            return BAD("%s: tensor '%s' has a malformed shape or offsets", name, kname);
        }
        json_int_t b = json_integer_value(jb), e = json_integer_value(je);
        if (b < 0 || e < b || (uint64_t)e > dsize) {
            long long bb = b, ee = e;
            json_decref(root);
            return BAD("%s: tensor '%s' offsets [%lld, %lld] lie outside the data area (%zu bytes)", name,
                       kname, bb, ee, dsize);
        }
        uint64_t want = numel * c3_dtype_size(t->dtype);
        if ((uint64_t)(e - b) != want) {
            long long got = e - b;
            json_decref(root);
            return BAD("%s: tensor '%s' holds %lld bytes but dtype x shape needs %llu", name, kname, got,
                       (unsigned long long)want);
        }
        t->name = xstrdup(key);
        t->data = data + b;
        t->nbytes = (size_t)(e - b);
        f->n++;
    }
    json_decref(root);
    /* Overlap check: sort by offset; each non-empty tensor must start at or
     * after the furthest end of the non-empty tensors before it (comparing
     * only neighbours misses an overlap hidden behind a zero-size tensor). */
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_offset);
    int far = -1; /* the non-empty tensor reaching furthest so far */
    for (int i = 0; i < f->n; i++) {
        if (!f->t[i].nbytes) continue;
        if (far < 0) {
            far = i;
            continue;
        }
        const char *far_end = (const char *)f->t[far].data + f->t[far].nbytes;
        if ((const char *)f->t[i].data < far_end) {
            char a[256], c[256];
            snprintf(a, sizeof a, "%s", f->t[far].name);
            snprintf(c, sizeof c, "%s", f->t[i].name);
            return BAD("%s: tensors '%s' and '%s' overlap in the data area", name, a, c);
        }
        far = i; /* starts at or after far's end, so it ends further */
    }
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_name);
    return C3_OK;
}

int st_open(st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    int fd;
    size_t size;
    C3_TRY(c3_open_regular(path, C3_EMODEL, &fd, &size));
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            int e = errno;
            close(fd);
            return c3_fail(C3_EFAIL, "%s: mmap: %s", path, strerror(e));
        }
    }
    close(fd);
    int rc = st_parse(f, map ? map : "", size, path);
    if (rc != C3_OK) {
        if (map) munmap(map, size);
        return rc;
    }
    f->map = map;
    f->size = size;
    return C3_OK;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, cmp_name);
}

const char *st_meta(const st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

float *st_to_f32(const st_tensor *t) {
    size_t n = (size_t)st_numel(t);
    float *out = xmalloc(n * sizeof(float));
    c3_to_f32(out, t->data, t->dtype, n);
    return out;
}

/* ------------------------------------------------------------ prefault */

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif
#define ST_PREFAULT_MAX_THREADS 16
#define ST_PREFAULT_PIECE ((size_t)64 << 20) /* bytes one thread maps at a time */

typedef struct {
    const char *base;
    size_t size;
} st_range;

struct st_prefault {
    st_range *r; /* the mappings, page-aligned (mmap's) */
    int nr;
    int64_t bytes;
    double t0;
    int nthreads;
    pthread_t th[ST_PREFAULT_MAX_THREADS];
    int64_t next;   /* the next piece to take over all ranges, atomic */
    int64_t *first; /* [nr + 1]: piece index each range starts at */
};

/* One piece: the kernel fills the page tables (a read fault per page where
 * it cannot: an older kernel). */
static void prefault_piece(const char *p, size_t n) {
    if (madvise((void *)p, n, MADV_POPULATE_READ) == 0) return;
    long pg = sysconf(_SC_PAGESIZE);
    size_t step = pg > 0 ? (size_t)pg : 4096;
    volatile unsigned char sink = 0;
    for (size_t o = 0; o < n; o += step)
        sink ^= (unsigned char)p[o];
    (void)sink;
}

static void *prefault_main(void *arg) {
    st_prefault *pf = arg;
    int64_t total = pf->first[pf->nr];
    for (;;) {
        int64_t k = __atomic_fetch_add(&pf->next, 1, __ATOMIC_RELAXED);
        if (k >= total) break;
        int i = 0;
        while (pf->first[i + 1] <= k)
            i++;
        size_t off = (size_t)(k - pf->first[i]) * ST_PREFAULT_PIECE;
        prefault_piece(pf->r[i].base + off, C3_MIN(ST_PREFAULT_PIECE, pf->r[i].size - off));
    }
    return NULL;
}

st_prefault *st_prefault_start(const st_file *const *files, int n, int threads) {
    st_prefault *pf = xcalloc(1, sizeof *pf);
    pf->t0 = c3_now();
    pf->r = xcalloc((size_t)(n > 0 ? n : 1), sizeof *pf->r);
    pf->first = xcalloc((size_t)(n > 0 ? n : 1) + 1, sizeof *pf->first);
    for (int i = 0; i < n; i++) {
        if (!files[i] || !files[i]->map || !files[i]->size) continue;
        pf->r[pf->nr] = (st_range){files[i]->map, files[i]->size};
        pf->bytes += (int64_t)files[i]->size;
        int64_t pieces = (int64_t)((files[i]->size + ST_PREFAULT_PIECE - 1) / ST_PREFAULT_PIECE);
        pf->first[pf->nr + 1] = pf->first[pf->nr] + pieces;
        pf->nr++;
    }
    if (threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        threads = c > 0 ? (int)c : 1;
    }
    threads = (int)C3_MIN((int64_t)C3_MIN(threads, ST_PREFAULT_MAX_THREADS), pf->first[pf->nr]);
    for (int t = 0; t < threads; t++) {
        if (pthread_create(&pf->th[t], NULL, prefault_main, pf) != 0) break;
        pf->nthreads++;
    }
    if (pf->nthreads == 0) { /* nothing to map, or no thread: the loader faults as before */
        free(pf->r);
        free(pf->first);
        free(pf);
        return NULL;
    }
    return pf;
}

void st_prefault_join(st_prefault *pf, int64_t *bytes, double *seconds) {
    if (bytes) *bytes = 0;
    if (seconds) *seconds = 0;
    if (!pf) return;
    for (int t = 0; t < pf->nthreads; t++)
        pthread_join(pf->th[t], NULL);
    if (bytes) *bytes = pf->bytes;
    if (seconds) *seconds = c3_now() - pf->t0;
    free(pf->r);
    free(pf->first);
    free(pf);
}

/* ------------------------------------------------------------- writing */

int st_write(const char *path, const st_wtensor *ts, int n, const char *const *meta_kv, int nmeta,
             bool overwrite) {
    json_t *root = json_object();
    if (nmeta > 0) {
        json_t *m = json_object();
        for (int i = 0; i < nmeta; i++) json_object_set_new(m, meta_kv[2 * i], json_string(meta_kv[2 * i + 1]));
        json_object_set_new(root, "__metadata__", m);
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        json_t *shape = json_array();
        for (int d = 0; d < ts[i].ndim; d++) {
            numel *= ts[i].shape[d];
            json_array_append_new(shape, json_integer(ts[i].shape[d]));
        }
        size_t bytes = (size_t)numel * c3_dtype_size(ts[i].dtype);
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(c3_dtype_name(ts[i].dtype)));
        json_object_set_new(e, "shape", shape);
        json_t *o = json_array();
        json_array_append_new(o, json_integer((json_int_t)off));
        json_array_append_new(o, json_integer((json_int_t)(off + bytes)));
        json_object_set_new(e, "data_offsets", o);
        json_object_set_new(root, ts[i].name, e);
        off += bytes;
    }
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    size_t hlen = strlen(hdr), pad = (8 - hlen % 8) % 8;
    size_t total = 8 + hlen + pad + off;
    unsigned char *buf = xmalloc(total);
    uint64_t hl = hlen + pad;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hl >> (8 * i));
    memcpy(buf + 8, hdr, hlen);
    memset(buf + 8 + hlen, ' ', pad);
    free(hdr);
    size_t pos = 8 + hlen + pad;
    for (int i = 0; i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < ts[i].ndim; d++) numel *= ts[i].shape[d];
        size_t bytes = (size_t)numel * c3_dtype_size(ts[i].dtype);
        if (bytes) memcpy(buf + pos, ts[i].data, bytes);
        pos += bytes;
    }
    int rc = c3_write_file_atomic(path, buf, total, overwrite);
    free(buf);
    return rc;
}
