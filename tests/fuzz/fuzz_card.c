/* fuzz_card.c - libFuzzer harness for the "cosmos3" model card of
 * model_index.json (the demo model's defaults, vocabulary, examples). An
 * accepted card must hold what the settings code relies on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    c3_model_card k;
    if (ckpt_parse_card(&k, (const char *)data, size, "fuzz/model_index.json") != C3_OK) {
        if (!c3_errmsg()[0]) abort();
        if (k.vocab || k.examples || k.about || k.scores_json) abort(); /* nothing half-kept */
        return 0;
    }
    if (k.width < 0 || k.height < 0 || k.steps < 0 || k.interval < 0 || k.interval > 2) abort();
    if (memchr(k.schedule, 0, sizeof k.schedule) == NULL) abort();
    for (int i = 0; i < k.nvocab; i++)
        if (!k.vocab[i]) abort();
    for (int i = 0; i < k.nexamples; i++)
        if (!k.examples[i]) abort();
    ckpt_card_free(&k);
    return 0;
}
