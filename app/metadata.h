/* metadata.h - the settings a result was made with, as the texts stored in
 * an output file: the A1111 "parameters" line (read by image viewers and
 * web UIs) and the "cosmos3" JSON object (read back by `cosmos3 meta`). */
#ifndef COSMOS3_METADATA_H
#define COSMOS3_METADATA_H

#include "cosmos3.h"
#include "options.h"

/* What the application knows beyond the result: the settings as given. */
typedef struct {
    const char *system_prompt; /* "auto", "on", "off" (NULL: from the result) */
    const char *noise;         /* the noise file used, or NULL */
    /* the conditioning input (gen --image / --video), or NULL */
    const char *image, *video;
    const char *condition_frames, *condition_keep; /* video only */
    const char *first, *last;                      /* gen --first-last START END, or NULL */
    uint64_t condition_hash;                       /* FNV-1a of its files */
} c3_meta_extra;

/* The A1111 text; no "Seed:" when the initial noise was given (the seed did
 * not make the picture). malloc'd. */
char *metadata_parameters(const cosmos3_result *r);
/* The "cosmos3" object as compact JSON; malloc'd. */
char *metadata_json(const cosmos3_result *r, const c3_meta_extra *x);

/* The texts cosmos3 stored in a file it wrote: the "cosmos3" JSON and the
 * "parameters" line (each malloc'd, or NULL when absent). PNG today; each
 * output format's reader plugs in here, and `meta` and `gen --from` follow.
 * COSMOS3_EINPUT (with the file named) when neither is there. */
int metadata_read(const char *path, char **json, char **parameters);

/* gen --from FILE: the settings stored in FILE (metadata_read) set into s as
 * if given on the command line at that point, so options after --from win.
 * cmds: the command's bit (options it does not take are left out). */
int metadata_apply(const char *path, c3_settings *s, unsigned cmds);

#endif
