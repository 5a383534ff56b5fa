/* fuzz_tokload.c - libFuzzer harness for tokenizer.json loading (tok_load)
 * and encoding with what was loaded. The input is the whole file; it goes
 * through a memfd so that tok_load reads it as it reads a checkpoint's.
 * A refusal must leave a message; an accepted tokenizer must encode a few
 * texts to ids it can decode, each below tok_vocab_size. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int g_fd = -1;
static char g_path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (g_fd < 0) {
        g_fd = memfd_create("tokenizer.json", 0);
        if (g_fd < 0) abort();
        snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    }
    if (ftruncate(g_fd, 0) != 0) abort();
    if (size && pwrite(g_fd, data, size, 0) != (ssize_t)size) abort();
    c3_tokenizer *t = NULL;
    if (tok_load(&t, g_path) != C3_OK) {
        if (t || !c3_errmsg()[0]) abort();
        return 0;
    }
    static const char *const texts[] = {"a red fox", "<|im_start|>user\nhi<|im_end|>",
                                        "\xc3\xa9\xe4\xb8\xad 123 !!  \t\n x", "",
                                        "aaaaaaaaaaaaaaaa"};
    int nv = tok_vocab_size(t);
    if (nv <= 0) abort();
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids = NULL;
        int n = 0;
        if (tok_encode(t, texts[i], strlen(texts[i]), &ids, &n) != C3_OK) {
            if (!c3_errmsg()[0]) abort();
            continue;
        }
        for (int k = 0; k < n; k++)
            if (ids[k] < 0 || ids[k] >= nv || !tok_piece(t, ids[k])) abort();
        free(ids);
    }
    tok_free(t);
    return 0;
}
