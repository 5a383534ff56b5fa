/* output.h - the one application-side output module: where a result goes,
 * in which format, checked before the model loads, written atomically.
 *
 *   -o clip.mp4 / .webm          a video file (MP4 H.264 or WebM VP9)
 *   -o pic.png / .jpg / .jpeg / .webp   a picture (no extension: PNG)
 *   -o clip/ (or a folder)       video frames frame_0000.png ... (the folder
 *                                is made whole in a temporary sibling, then
 *                                renamed into place; --overwrite replaces it
 *                                as a whole)
 *   -o shots/%04d.png            video frames by pattern (an image: the first
 *                                free number)
 *   -o clip.wav                  --sound: the waveform alone (PCM, --wav-format)
 *   -o -                         the encoded file on standard output (PNG for
 *                                an image, MP4 for a video)
 *   (none)                       cosmos3-SEED.png, or cosmos3-SEED.mp4 for a video
 *
 * Every file is written to a temporary sibling (mkstemp), flushed, fsync'ed
 * and renamed; an existing file is kept unless --overwrite. A signal during
 * the write (SIGTERM, SIGHUP, a second Ctrl-C) removes what was in flight
 * (output_abort, async-signal-safe); SIGXFSZ is ignored so that the write
 * fails with EFBIG and is cleaned up like a full disk.
 */
#ifndef COSMOS3_OUTPUT_H
#define COSMOS3_OUTPUT_H

#include "cosmos3.h"
#include "media.h"
#include "options.h"

typedef enum {
    OUT_FILE,    /* one encoded file */
    OUT_STDOUT,  /* one encoded file on standard output */
    OUT_FOLDER,  /* PNG frames in a folder of their own */
    OUT_PATTERN, /* PNG frames named by a %0Nd pattern */
    OUT_WAV,     /* -o x.wav: the clip's sound alone (--sound) */
} c3_out_kind;

typedef struct {
    c3_out_kind kind;
    c3_media_format fmt; /* OUT_FILE, OUT_STDOUT */
    char *path;          /* as given (NULL: the default name, made with the seed) */
    bool overwrite;
    c3_media_opts media;
    int frames, width, height;
    int64_t seed; /* names the default path (-1: not known yet) */
    /* --sound: the result's sound goes into .mp4 (AAC) / .webm (Opus), a
     * frame folder's sound.wav, or -o x.wav; WAV as 16-bit or float PCM */
    bool sound, wav_f32;
} c3_output;

/* Decide the format from -o (s->output) and check the destination for a
 * result of frames x width x height (seed: -1 when not drawn yet): the
 * extension, a folder where a file is meant, an existing file without
 * --overwrite, a writable folder, room for the estimated bytes. COSMOS3_EUSAGE
 * (format) or COSMOS3_EOUTPUT with one line. */
int output_plan(const c3_settings *s, int frames, int width, int height, int64_t seed,
                c3_output *o);
void output_free(c3_output *o);

/* Write r's frames with the settings m as o says; *paths (xmalloc'd, *npaths)
 * lists what was written ("-" for standard output). All or nothing. */
int output_write(const c3_output *o, const cosmos3_result *r, const c3_media_meta *m, char ***paths,
                 int *npaths);
/* The same, with the seconds spent encoding a container in memory (0 for
 * frames, which are encoded and written on several threads together;
 * t_encode may be NULL). */
int output_write_timed(const c3_output *o, const cosmos3_result *r, const c3_media_meta *m,
                       char ***paths, int *npaths, double *t_encode);

/* Encode r's frames in memory as format f (the server, `-o -`). */
int output_encode(c3_media_format f, const cosmos3_result *r, const c3_media_meta *m,
                  const c3_media_opts *opts, uint8_t **out, size_t *n);

/* Bytes to a file: temporary sibling, fsync, rename; never replaces an
 * existing file unless overwrite. */
int output_write_file(const char *path, const void *data, size_t n, bool overwrite);

/* Remove whatever a write in flight has made (temporary files, a temporary
 * folder, frames already renamed into place). Async-signal-safe. */
void output_abort(void);
/* The last output_write_file placed its file (async-signal-safe): a second
 * Ctrl-C then lets the run finish (exit 0) instead of cancelling it. */
bool output_committed(void);
/* A second Ctrl-C's claim (async-signal-safe): true when the single file
 * output_write_file writes is not being placed nor placed, and now never
 * will be (abort and exit); false when it is (let the run finish). */
bool output_cancel_claim(void);
/* SIGTERM and SIGHUP: output_abort, then the default action (exit 128+N);
 * SIGXFSZ ignored. */
void output_signals_install(void);

#endif
