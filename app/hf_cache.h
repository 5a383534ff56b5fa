/* hf_cache.h - a Hugging Face model id (`org/name`, as vLLM-Omni's launch
 * line names a model) found in the local Hugging Face cache as
 * `huggingface-cli download` leaves it; nothing is fetched.
 *
 *   $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
 *   $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub:
 *     models--org--name/refs/REVISION   (a file holding the commit)
 *     models--org--name/snapshots/COMMIT/  (the checkpoint folder)
 *
 * And the launch line's checks: --model-class-name against the checkpoint's
 * model_index.json.
 */
#ifndef COSMOS3_HF_CACHE_H
#define COSMOS3_HF_CACHE_H

#include <stdbool.h>
#include <stddef.h>

/* `org/name` (one slash, letters, digits, '-', '_', '.') that is not a
 * folder here: a model id to look up. */
bool hf_is_model_id(const char *m);

/* The snapshot folder of model id at revision (NULL: "main"; a branch or
 * tag under refs/, or a commit) into out. COSMOS3_EMODEL with one line
 * naming the cache searched and the `huggingface-cli download` command. */
int hf_resolve(const char *id, const char *revision, char *out, size_t n);

/* --model-class-name NAME against DIR/model_index.json's _class_name:
 * equal, or vLLM-Omni's name for it ("Diffusers" before "Pipeline":
 * Cosmos3OmniDiffusersPipeline for Cosmos3OmniPipeline). COSMOS3_EMODEL. */
int hf_check_class(const char *dir, const char *name);

#endif
