/* metadata.h - the settings a result was made with, as the texts stored in
 * an output file: the A1111 "parameters" line (read by image viewers and
 * web UIs) and the "cosmos3" JSON object (read back by `cosmos3 meta`). */
#ifndef COSMOS3_METADATA_H
#define COSMOS3_METADATA_H

#include "cosmos3.h"

/* What the application knows beyond the result: the settings as given. */
typedef struct {
    const char *system_prompt; /* "auto", "on", "off" (NULL: from the result) */
    const char *noise;         /* the noise file used, or NULL */
    /* the conditioning input (gen --image / --video), or NULL */
    const char *image, *video;
    const char *condition_frames, *condition_keep; /* video only */
    uint64_t condition_hash;                       /* FNV-1a of its files */
} c3_meta_extra;

/* The A1111 text; no "Seed:" when the initial noise was given (the seed did
 * not make the picture). malloc'd. */
char *metadata_parameters(const cosmos3_result *r);
/* The "cosmos3" object as compact JSON; malloc'd. */
char *metadata_json(const cosmos3_result *r, const c3_meta_extra *x);

#endif
