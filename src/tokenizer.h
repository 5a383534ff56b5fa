/* tokenizer.h - Qwen3 byte-level BPE from a Hugging Face tokenizer.json.
 *
 * encode: NFC normalisation (utf8proc), added/special tokens matched first
 * (longest match, as the HF AddedVocabulary does), the pre-tokenizer Split
 * regex with Unicode classes (PCRE2), byte-level mapping, BPE merges by rank.
 */
#ifndef COSMOS3_TOKENIZER_H
#define COSMOS3_TOKENIZER_H

#include "common.h"

typedef struct c3_tokenizer c3_tokenizer;

/* Load tokenizer.json (C3_EMODEL on a missing/malformed file). */
int tok_load(c3_tokenizer **out, const char *tokenizer_json);
void tok_free(c3_tokenizer *t);
/* Encode UTF-8 text (len bytes). Invalid UTF-8 is C3_EINPUT naming the byte
 * offset. *ids is xmalloc'd. */
int tok_encode(const c3_tokenizer *t, const char *text, size_t len, int32_t **ids, int *n);
/* Id of a token string (added tokens and vocab), or -1. */
int32_t tok_id(const c3_tokenizer *t, const char *token);
/* Decoded text of one id (byte-level decoded), or NULL. Static per-tokenizer storage. */
const char *tok_piece(const c3_tokenizer *t, int32_t id);
int tok_vocab_size(const c3_tokenizer *t);
/* The hash-table slots tok_load's inserts probed (vocab and merges): about
 * 1.5 per entry with a keyed hash, whatever the file; for tests. */
int64_t tok_load_probes(const c3_tokenizer *t);
/* Offset of the first byte of s[0..len) that is not valid UTF-8 (overlong
 * forms, surrogates and code points above U+10FFFF are invalid), or len. */
size_t tok_utf8_invalid(const char *s, size_t len);

#endif
