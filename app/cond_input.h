/* cond_input.h - the conditioning picture or clip of `gen --image/--video`
 * read from PNG files into frames in memory (condition.h's c3_media), with
 * a hash of the files for the metadata. */
#ifndef COSMOS3_COND_INPUT_H
#define COSMOS3_COND_INPUT_H

#include "condition.h"

typedef struct {
    c3_media media;
    uint8_t *rgb;  /* owned frames */
    uint64_t hash; /* FNV-1a over the files' bytes, in frame order */
} c3_cond_file;

/* A picture (clip false: one PNG) or a clip (a folder of *.png in name
 * order, a printf pattern with one %d counted from 0 or 1 until a file is
 * missing, or one PNG). C3_EINPUT with a one-line message naming the file. */
int cond_file_read(const char *path, bool clip, c3_cond_file *out);
void cond_file_free(c3_cond_file *f);

#endif
