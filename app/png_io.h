/* png_io.h - PNG output with metadata (libpng) and reading it back.
 * Writes go to a temporary name in the same folder and are renamed, so a file
 * is either complete or absent; an existing file is kept unless overwrite. */
#ifndef COSMOS3_PNG_IO_H
#define COSMOS3_PNG_IO_H

#include "util.h"

typedef struct {
    const char *key;   /* e.g. "parameters", "cosmos3" */
    const char *text;  /* UTF-8; written as tEXt when Latin-1-safe ASCII, else iTXt */
    bool force_itxt;
} c3_png_text;

/* rgb: [H, W, 3] uint8. */
int png_write(const char *path, const uint8_t *rgb, int W, int H, const c3_png_text *texts, int ntexts,
              bool overwrite);
/* Encode rgb [H, W, 3] with its texts into memory: *out malloc'd, *n bytes.
 * Nothing touches the disk (the server's answers). */
int png_encode_mem(const uint8_t *rgb, int W, int H, const c3_png_text *texts, int ntexts,
                   uint8_t **out, size_t *n);
/* Read the text chunks (tEXt, zTXt, iTXt) of a PNG: parallel xmalloc'd arrays. */
int png_read_texts(const char *path, char ***keys, char ***vals, int *n);
/* Read pixels (RGB8); xmalloc'd. */
int png_read_rgb(const char *path, uint8_t **rgb, int *W, int *H);
/* The same two from a PNG held in memory (name is for messages). */
int png_read_texts_mem(const uint8_t *data, size_t len, const char *name, char ***keys,
                       char ***vals, int *n);
int png_read_rgb_mem(const uint8_t *data, size_t len, const char *name, uint8_t **rgb, int *W,
                     int *H);
/* The same with a bound on width x height, checked in the IHDR before
 * anything is inflated (COSMOS3_EINPUT naming the size; max_pixels 0:
 * 16384^2). Every allocation fails softly (COSMOS3_EINPUT). */
int png_read_rgb_max(const char *path, int64_t max_pixels, uint8_t **rgb, int *W, int *H);
int png_read_rgb_mem_max(const uint8_t *data, size_t len, const char *name, int64_t max_pixels,
                         uint8_t **rgb, int *W, int *H);

#endif
