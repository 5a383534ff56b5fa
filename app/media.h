/* media.h - pictures and clips through FFmpeg's libraries (libavformat,
 * libavcodec, libswscale, libavutil) and libwebp's mux/demux.
 *
 * Encoding: frames in memory (uint8 RGB [F, H, W, 3]) to the bytes of one
 * file, in memory:
 *   MP4   H.264 (libx264) yuv420p, CRF 18 unless asked, +faststart, the fps
 *         given; settings in the `comment` (A1111 text) and `description`
 *         (cosmos3 JSON) tags
 *   WebM  VP9 (libvpx-vp9) yuv420p, constant quality; the same two tags
 *   JPEG  one picture, quality 95; settings in an XMP packet (APP1)
 *   WebP  one picture (FFmpeg's libwebp encoder), quality 95; the same XMP
 *         packet in the WebP "XMP " chunk (libwebpmux)
 *   PNG   one picture (libpng, png_io.c); `parameters` + iTXt `cosmos3`
 * Decoding: a picture (PNG, JPEG, WebP) or a clip (MP4, WebM, MOV, animated
 * WebP, a folder or a glob of PNG frames in name order) from a file or from
 * memory, to RGB frames with the clip's own fps (0 for a picture). Every
 * FFmpeg call is checked through AV_TRY, which turns the library's error
 * code into one line naming the file and the call.
 */
#ifndef COSMOS3_MEDIA_H
#define COSMOS3_MEDIA_H

#include "util.h"

typedef enum {
    MEDIA_PNG,
    MEDIA_JPEG,
    MEDIA_WEBP,
    MEDIA_MP4,
    MEDIA_WEBM,
    MEDIA_NFORMATS
} c3_media_format;

/* "png", "jpeg", ... */
const char *media_format_name(c3_media_format f);
/* The format a path's extension names (case-insensitive): .png .jpg .jpeg
 * .webp .mp4 .webm. false when it names none of them. */
bool media_format_from_path(const char *path, c3_media_format *f);
/* The extensions that work, for messages: ".png, .jpg, .jpeg, .webp, .mp4, .webm". */
const char *media_extensions(void);
/* True for the formats that hold many frames (MP4, WebM). */
bool media_format_is_video(c3_media_format f);

/* The settings stored with a picture or clip: the A1111 `parameters` text
 * and the cosmos3 JSON (either may be NULL). */
typedef struct {
    const char *parameters;
    const char *json;
} c3_media_meta;

/* A clip's sound: planar float PCM [channels, samples] in [-1, 1]. */
typedef struct {
    const float *pcm;
    int channels, rate;
    int64_t samples;
} c3_media_audio;

typedef struct {
    int crf;     /* MP4/WebM constant rate factor; <0: the default (18 for H.264, 24 for VP9) */
    int quality; /* JPEG/WebP 1..100; <=0: 95 */
    /* MP4/WebM: a sound stream beside the video (NULL: silent), cut to the
     * video's length: MP4 AAC (FFmpeg's native encoder), WebM Opus
     * (libopus), at 48 kHz (libswresample converts other rates) */
    const c3_media_audio *audio;
} c3_media_opts;

#define MEDIA_CRF_DEFAULT 18
#define MEDIA_QUALITY_DEFAULT 95

/* Encode rgb [frames, H, W, 3] as format f into *out (xmalloc'd, *n bytes).
 * Pictures (PNG, JPEG, WebP) take frames == 1. */
int media_encode(c3_media_format f, const uint8_t *rgb, int W, int H, int frames, double fps,
                 const c3_media_meta *meta, const c3_media_opts *opts, uint8_t **out, size_t *n);

/* Decoded frames: [frames, height, width, 3] uint8 RGB (owned). */
typedef struct {
    uint8_t *rgb;
    int width, height, frames;
    double fps; /* 0: a picture, or a frame folder without fps metadata */
} c3_media_frames;

typedef struct {
    int min_frames;     /* fewer is an error naming both counts (0: 1) */
    int max_frames;     /* more are not decoded (0: MEDIA_MAX_FRAMES) */
    int64_t max_pixels; /* width * height above this is refused before decoding (0: 4096^2) */
    int64_t max_bytes;  /* RGB bytes of all the frames decoded, kept or not (0: 1 GiB) */
    bool keep_last;     /* keep the last max_frames frames (decoding on), not the first */
} c3_media_limits;

#define MEDIA_MAX_FRAMES 4097
#define MEDIA_MAX_PIXELS (4096ll * 4096)
#define MEDIA_MAX_BYTES (1ll << 30)

/* The largest picture a conditioning input of an output of W x H can use:
 * 4x the output's side (16x its pixels), at least 1024^2 and at most
 * MEDIA_MAX_PIXELS. */
int64_t media_cond_pixels(int W, int H);

/* Decode a picture or clip: a file, a folder of PNG frames, or a glob such
 * as shots/frame_*.png. COSMOS3_EINPUT with one line for an unreadable, empty,
 * too-short or too-large input: the size is read from the header (PNG IHDR,
 * WebP VP8X, the codec's parameters) and checked against lim before any
 * pixel is decoded, and no allocation on the way aborts. */
int media_decode(const char *path, const c3_media_limits *lim, c3_media_frames *out);
/* The same from bytes in memory (name is for messages: "image_reference"). */
int media_decode_mem(const uint8_t *data, size_t n, const char *name, const c3_media_limits *lim,
                     c3_media_frames *out);
void media_frames_free(c3_media_frames *m);

/* What a media file is, without decoding every frame. */
typedef struct {
    char container[32]; /* "mp4", "webm", "png", "jpeg", "webp", "folder" ... */
    char codec[32];     /* "h264", "vp9", "png", "mjpeg", "webp" ... */
    char pix_fmt[32];   /* "yuv420p" ... ("" when unknown) */
    int width, height, frames;
    double fps, seconds;
    int64_t bytes;
    /* the sound stream of a clip ("" and 0: none) */
    char audio_codec[32]; /* "aac", "opus" */
    int audio_rate, audio_channels;
    double audio_seconds;
} c3_media_info;

int media_probe(const char *path, c3_media_info *info);

/* Read the stored settings of any format above (and of a frame folder: its
 * first frame). Each out string is xmalloc'd or NULL; COSMOS3_EINPUT when the
 * file is unreadable or not a format listed. */
int media_read_meta(const char *path, char **parameters, char **json);
int media_read_meta_mem(const uint8_t *data, size_t n, const char *name, char **parameters,
                        char **json);

/* A preview strip: the first, middle and last frames side by side (one
 * frame stays one frame). *out is xmalloc'd [H, *outW, 3]. */
void media_strip(const uint8_t *rgb, int W, int H, int frames, uint8_t **out, int *outW);

/* PSNR in dB between two uint8 buffers of n bytes (INFINITY when equal). */
double media_psnr(const uint8_t *a, const uint8_t *b, size_t n);

#endif
