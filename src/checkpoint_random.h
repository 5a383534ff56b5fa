/* checkpoint_random.h - a transformer whose weights are made in memory when
 * the checkpoint opens (`cosmos3 mkmodel --random-transformer`, and the
 * in-memory checkpoint of `cosmos3 bench`).
 *
 * A folder whose transformer/ holds random.json instead of safetensors
 * shards:
 *
 *   {"generator": "c3_random_weight", "amplitude": 0.03}
 *
 * opens with every tensor generation reads (the flat Diffusers names and
 * shapes of transformer/config.json's geometry, bf16) pointing into one
 * buffer as large as the largest tensor, element i =
 * bf16(c3_random_weight(i, amplitude)) (weights_random.h). Nothing is read
 * from disk; the pictures are noise, but every size, the plan, the load
 * (--offload, --precision fp8 quantised on load) and every step run as
 * with a real checkpoint. A backend with fill_random (CUDA) makes each
 * resident weight where it lands instead of receiving it (model_load.c:
 * the same bits, no host copy, no transfer). The buffer (Nano: the embedding, ~1.2 GB) is
 * freed with the checkpoint. The keys: "generator" (required, the one
 * generator above), "amplitude" (optional, default 0.03, in (0, 1]).
 */
#ifndef COSMOS3_CHECKPOINT_RANDOM_H
#define COSMOS3_CHECKPOINT_RANDOM_H

#include <jansson.h>

#include "checkpoint.h"

#define CKPT_RANDOM_FILE "random.json"           /* in transformer/ */
#define CKPT_RANDOM_GENERATOR "c3_random_weight" /* the one generator there is */
#define CKPT_RANDOM_AMPLITUDE 0.03               /* weights uniform in +-this */
#define CKPT_RANDOM_MAX_AMPLITUDE 1.0

/* random.json's object for amplitude amp (a new reference). */
json_t *ckpt_random_json(double amp);
/* Parse random.json's text (path names it in messages) into *amp.
 * C3_EMODEL, one line naming the file, the problem and the fix. */
int ckpt_random_parse(const char *text, size_t len, const char *path, double *amp);
/* With c->t set (the geometry): c->shards (one st_file with no mapping),
 * c->tens (sorted) and the random buffer, as ckpt_close frees them. */
int ckpt_random_tensors(c3_ckpt *c, double amp);

#endif
