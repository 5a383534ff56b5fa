/* cond_input.h - the conditioning picture or clip of `gen --image/--video`
 * read from PNG files (or any picture or clip media.c decodes) into frames
 * in memory, with a hash of the files for the metadata; the --condition-frames
 * list. */
#ifndef COSMOS3_COND_INPUT_H
#define COSMOS3_COND_INPUT_H

#include "cosmos3.h"
#include "util.h"

typedef struct {
    cosmos3_frames media;
    uint8_t *rgb;  /* owned frames */
    uint64_t hash; /* FNV-1a over the files' bytes, in frame order */
} c3_cond_file;

/* A picture (clip false: one PNG) or a clip (a folder of *.png in name
 * order, a printf pattern with one %d counted from 0 or 1 until a file is
 * missing, or one PNG). COSMOS3_EINPUT with a one-line message naming the file. */
int cond_file_read(const char *path, bool clip, c3_cond_file *out);
/* What the conditioning of a request uses: the output's size (a picture
 * larger than media_cond_pixels of it is refused before it is decoded) and
 * frames (a clip's frames past them are not decoded; keep_last keeps its
 * last ones). Zeros: the defaults (4096^2, 4097 frames). */
typedef struct {
    int width, height, frames;
    bool keep_last;
} c3_cond_use;
int cond_file_read_for(const char *path, bool clip, const c3_cond_use *use, c3_cond_file *out);
/* Before the model loads: each conditioning input given (first_last is
 * "START\nEND") is readable and no larger than an output of W x H can use;
 * only a clip's first frame is decoded. */
int cond_precheck(const char *image, const char *video, const char *first_last, int W, int H);
/* The same, its messages naming option opt ("first-last"), not --video/--image. */
int cond_file_read_as(const char *path, bool clip, const char *opt, c3_cond_file *out);
/* Both: the use's bounds and messages naming option opt. */
int cond_file_read_use_as(const char *path, bool clip, const c3_cond_use *use, const char *opt,
                          c3_cond_file *out);
void cond_file_free(c3_cond_file *f);

/* Parse latent frame indexes "0,1,2" (spaces allowed) into idx[max].
 * COSMOS3_EUSAGE naming the bad part. */
int cond_parse_frames(const char *text, int *idx, int max, int *n);

#endif
