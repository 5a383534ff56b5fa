/* safetensors.h - read (mmap, validated) and write safetensors files.
 *
 * Format: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...,
 *  "__metadata__": {str: str}}, then the data area; offsets are relative to
 * the data area. Files are mapped read-only and never copied whole: a rank
 * that needs a slice of a tensor touches only the pages of that slice.
 */
#ifndef COSMOS3_SAFETENSORS_H
#define COSMOS3_SAFETENSORS_H

#include "common.h"

#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    c3_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data; /* inside the mapping */
    size_t nbytes;
} st_tensor;

typedef struct {
    char *path;
    void *map;
    size_t size;
    st_tensor *t;
    int n;
    char **meta_keys, **meta_vals; /* __metadata__ */
    int nmeta;
} st_file;

/* Map and validate a file. On failure returns C3_EMODEL (a missing or bad
 * file is a model problem; C3_EFAIL for a system error) with a message
 * naming the file and the problem. */
int st_open(st_file *f, const char *path);
/* Parse and validate an in-memory image (used by st_open and the fuzzer).
 * `buf` must stay alive while f is used; f->map is left NULL. */
int st_parse(st_file *f, const void *buf, size_t size, const char *name);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name);
const char *st_meta(const st_file *f, const char *key);
int64_t st_numel(const st_tensor *t);
/* Copy a tensor to float (any stored dtype). */
float *st_to_f32(const st_tensor *t); /* xmalloc'd */

/* Prefaulting: bring the mappings of n files into this process's page
 * tables on `threads` threads of their own (0: the online cores, at most
 * 16), so that the loader's reads (and a driver's pageable copies) find
 * every page mapped: the kernel fills a range at a time
 * (MADV_POPULATE_READ; else one read per page). A cold page cache is read
 * from the disk by all threads at once. The files must stay open until
 * st_prefault_join; the mapped bytes are not changed. */
typedef struct st_prefault st_prefault;
/* NULL when nothing is to be done (no bytes) or no thread could start. */
st_prefault *st_prefault_start(const st_file *const *files, int n, int threads);
/* Wait for it and free it (NULL: nothing); *bytes / *seconds (may be NULL)
 * say how much was mapped and how long it took from the start. */
void st_prefault_join(st_prefault *p, int64_t *bytes, double *seconds);

/* Writing. */
typedef struct {
    const char *name;
    c3_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
} st_wtensor;
/* Write tensors (and optional metadata pairs) atomically to `path`. */
int st_write(const char *path, const st_wtensor *ts, int n, const char *const *meta_kv, int nmeta,
             bool overwrite);

#endif
