/* fuzz_st_parse.c - libFuzzer harness for the safetensors header parser.
 *
 * st_parse() validates an untrusted file image: length prefix, JSON header,
 * dtypes, shapes, offsets inside the data area, no overlaps. When it accepts
 * an image, every tensor must lie inside the buffer; reading each one's bytes
 * lets ASan prove it; no two non-empty tensors may overlap. Build: tests/fuzz/run.sh or meson -Dfuzz=true. */
#include <stdint.h>
#include <stdlib.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_file f;
    if (st_parse(&f, data, size, "fuzz.safetensors") != C3_OK) {
        const char *m = c3_errmsg();
        if (!m[0]) abort(); /* a failure always records its message */
        return 0;
    }
    const uint8_t *lo = data, *hi = data + size;
    volatile uint8_t sink = 0;
    for (int i = 0; i < f.n; i++) {
        const st_tensor *t = &f.t[i];
        const uint8_t *p = t->data;
        if (t->nbytes && (p < lo || p + t->nbytes > hi)) abort();
        if ((uint64_t)st_numel(t) * c3_dtype_size(t->dtype) != t->nbytes) abort();
        for (size_t k = 0; k < t->nbytes; k += 64) sink ^= p[k];
        if (t->nbytes) sink ^= p[t->nbytes - 1];
        if (st_find(&f, t->name) != t) abort(); /* names are unique and sorted */
    }
    /* no two non-empty tensors share a byte */
    for (int i = 0; i < f.n; i++)
        for (int j = i + 1; j < f.n; j++) {
            const uint8_t *a = f.t[i].data, *b = f.t[j].data;
            if (f.t[i].nbytes && f.t[j].nbytes && a < b + f.t[j].nbytes && b < a + f.t[i].nbytes) abort();
        }
    for (int i = 0; i < f.nmeta; i++)
        if (!st_meta(&f, f.meta_keys[i])) abort();
    (void)sink;
    st_close(&f);
    return 0;
}
