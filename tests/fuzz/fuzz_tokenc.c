/* fuzz_tokenc.c - libFuzzer harness for encoding arbitrary bytes (tok_encode)
 * and for the whole prompt assembly (prompt_ids) with the installed Qwen3
 * tokenizer (share/tokenizer/tokenizer.json). Invalid UTF-8 must be refused
 * with a message; every id must decode; prompt_ids never exceeds its bound. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "prompt.h"
#include "tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static c3_tokenizer *g_tok;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tok && tok_load(&g_tok, COSMOS3_SRCDIR "/share/tokenizer/tokenizer.json") != C3_OK) {
        fprintf(stderr, "fuzz_tokenc: %s\n", c3_errmsg());
        abort();
    }
    int nv = tok_vocab_size(g_tok);
    int32_t *ids = NULL;
    int n = 0;
    bool valid = tok_utf8_invalid((const char *)data, size) == size;
    int rc = tok_encode(g_tok, (const char *)data, size, &ids, &n);
    if ((rc == C3_OK) != valid || (rc && !c3_errmsg()[0])) abort();
    for (int k = 0; k < n; k++)
        if (ids[k] < 0 || ids[k] >= nv || !tok_piece(g_tok, ids[k])) abort();
    free(ids);
    char *z = malloc(size + 1);
    if (!z) abort();
    memcpy(z, data, size);
    z[size] = 0;
    c3_prompt_opts po = {.system_prompt = size & 1,
                         .templates = (size & 4) != 0,
                         .width = 64,
                         .height = 64,
                         .frames = (size & 8) ? 5 : 1,
                         .fps = 24};
    ids = NULL;
    n = 0;
    if (prompt_ids(g_tok, z, (size & 2) != 0, &po, &ids, &n) == C3_OK) {
        if (n <= 0 || n > C3_MAX_SEQ + 2) abort();
        free(ids);
    } else if (!c3_errmsg()[0]) {
        abort();
    }
    free(z);
    return 0;
}
