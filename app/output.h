/* output.h - where an application puts generated frames: the paths, the
 * overwrite rules, the writing (all frames or none).
 *
 *   image: -o PATH, else cosmos3-SEED.png
 *   video: -o FOLDER (FOLDER/frame_0000.png ...) or a pattern with one %0Nd
 *          (shots/%04d.png), else the folder cosmos3-SEED
 */
#ifndef COSMOS3_OUTPUT_H
#define COSMOS3_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cosmos3.h"
#include "png_io.h"

typedef struct {
    const char *output; /* -o, or NULL */
    int frames;         /* 1: an image */
    uint64_t seed;      /* names the default path */
    bool overwrite;
} c3_output;

/* Frame f's path (dir: the folder to create, "" if none). C3_EUSAGE for a
 * bad pattern. */
int output_frame_path(const c3_output *o, int f, char *buf, size_t n, char *dir, size_t dn);
/* Before any work: C3_EOUTPUT when a file would be replaced without
 * overwrite, C3_EUSAGE for a bad path. */
int output_check(const c3_output *o);
/* Write every frame of r as PNG (texts on the first frame); on failure the
 * frames already written are removed. *paths: xmalloc'd list of *npaths. */
int output_write_png(const c3_output *o, const cosmos3_result *r, const c3_png_text *texts,
                     int ntexts, char ***paths, int *npaths);

#endif
