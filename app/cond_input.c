/* cond_input.c - conditioning pictures and clips from PNG files, and from
 * any picture or clip app/media.c decodes (JPEG, WebP, MP4, WebM, MOV,
 * animated WebP). */
#include "cond_input.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "media.h"
#include "png_io.h"

/* The most frames a clip may have (a 4097-frame video needs far fewer). */
enum { COND_MAX_FRAMES = 4097 };

/* The bounds of one read: the picture's pixels and the frames kept. */
typedef struct {
    int64_t max_pixels;
    int max_frames;
    bool keep_last;
} cond_bounds;

static cond_bounds bounds_of(const c3_cond_use *use, bool clip) {
    cond_bounds b = {.max_pixels = MEDIA_MAX_PIXELS, .max_frames = clip ? COND_MAX_FRAMES : 1};
    if (use && use->width > 0 && use->height > 0)
        b.max_pixels = media_cond_pixels(use->width, use->height);
    if (clip && use && use->frames > 0 && use->frames < COND_MAX_FRAMES)
        b.max_frames = use->frames;
    b.keep_last = clip && use && use->keep_last;
    return b;
}

static int add_frame(c3_cond_file *f, const char *path, const cond_bounds *b) {
    if (f->media.frames >= COND_MAX_FRAMES)
        return c3_fail(COSMOS3_EINPUT, "%s: a clip has at most %d frames", path, COND_MAX_FRAMES);
    uint8_t *rgb;
    int W, H;
    APP_TRY(png_read_rgb_max(path, b->max_pixels, &rgb, &W, &H));
    if (f->media.frames && (W != f->media.width || H != f->media.height)) {
        free(rgb);
        return c3_fail(COSMOS3_EINPUT,
                       "%s is %dx%d; the clip's first frame is %dx%d (all frames need one size)",
                       path, W, H, f->media.width, f->media.height);
    }
    char *bytes;
    size_t len;
    if (c3_read_file(path, &bytes, &len) == COSMOS3_OK) {
        f->hash = c3_fnv1a(bytes, len, f->hash);
        free(bytes);
    }
    size_t fb = (size_t)W * H * 3;
    if (fb * (size_t)(f->media.frames + 1) > (size_t)MEDIA_MAX_BYTES) {
        free(rgb);
        return c3_fail(COSMOS3_EINPUT,
                       "%s: the clip's frames pass %lld MiB at %dx%d; give fewer or smaller "
                       "frames",
                       path, MEDIA_MAX_BYTES >> 20, W, H);
    }
    uint8_t *grown = realloc(f->rgb, fb * (size_t)(f->media.frames + 1));
    if (!grown) {
        free(rgb);
        return c3_fail(COSMOS3_EINPUT, "%s: out of memory for %d frames of %dx%d", path,
                       f->media.frames + 1, W, H);
    }
    f->rgb = grown;
    memcpy(f->rgb + fb * (size_t)f->media.frames, rgb, fb);
    free(rgb);
    f->media.width = W;
    f->media.height = H;
    f->media.frames++;
    return COSMOS3_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* keep_last: drop the frames before the last max_frames. */
static void keep_tail(c3_cond_file *f, const cond_bounds *b) {
    if (!b->keep_last || f->media.frames <= b->max_frames) return;
    size_t fb = (size_t)f->media.width * f->media.height * 3;
    int drop = f->media.frames - b->max_frames;
    memmove(f->rgb, f->rgb + fb * (size_t)drop, fb * (size_t)b->max_frames);
    f->media.frames = b->max_frames;
}

/* Enough frames (keep_last reads on, within COND_MAX_FRAMES and the bytes). */
static bool frames_full(const c3_cond_file *f, const cond_bounds *b) {
    return !b->keep_last && f->media.frames >= b->max_frames;
}

static int read_folder(const char *dir, c3_cond_file *f, const cond_bounds *b) {
    DIR *d = opendir(dir);
    if (!d) return c3_fail(COSMOS3_EINPUT, "%s: %s", dir, strerror(errno));
    char **names = NULL;
    int n = 0, rc = COSMOS3_OK;
    for (struct dirent *e; (e = readdir(d));) {
        size_t L = strlen(e->d_name);
        if (L > 4 && !strcasecmp(e->d_name + L - 4, ".png") && e->d_name[0] != '.') {
            names = xrealloc(names, sizeof *names * (size_t)(n + 1));
            names[n++] = c3_path_join(dir, e->d_name);
        }
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 0; i < n && rc == COSMOS3_OK && !frames_full(f, b); i++)
        rc = add_frame(f, names[i], b);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (rc == COSMOS3_OK && !n)
        rc = c3_fail(COSMOS3_EINPUT, "%s: no .png frames in this folder", dir);
    return rc;
}

/* A picture or clip in another format than PNG (media.c): --image takes its
 * first frame (b's max_frames). */
static int add_media(c3_cond_file *f, const char *path, const cond_bounds *b, const char *opt) {
    c3_media_limits lim = {.min_frames = 1,
                           .max_frames = b->max_frames,
                           .max_pixels = b->max_pixels,
                           .keep_last = b->keep_last};
    c3_media_frames m;
    int rc = media_decode(path, &lim, &m);
    if (rc) return c3_context(rc, "--%s", opt);
    char *bytes;
    size_t len;
    if (c3_read_file(path, &bytes, &len) == COSMOS3_OK) {
        f->hash = c3_fnv1a(bytes, len, f->hash);
        free(bytes);
    }
    f->rgb = m.rgb;
    f->media.width = m.width;
    f->media.height = m.height;
    f->media.frames = m.frames;
    return COSMOS3_OK;
}

static bool is_png_file(const char *path) {
    int fd;
    if (c3_open_regular(path, COSMOS3_EINPUT, &fd, NULL) != COSMOS3_OK) return false;
    unsigned char sig[8] = {0};
    bool png = read(fd, sig, 8) == 8 && !memcmp(sig, "\x89PNG\r\n\x1a\n", 8);
    close(fd);
    return png;
}

/* One %d (or %0Nd) conversion and nothing else: a frame pattern. */
static bool is_pattern(const char *p) {
    const char *pct = strchr(p, '%');
    if (!pct) return false;
    const char *q = pct + 1;
    while (*q >= '0' && *q <= '9')
        q++;
    return *q == 'd' && !strchr(q, '%');
}

int cond_file_read(const char *path, bool clip, c3_cond_file *out) {
    return cond_file_read_for(path, clip, NULL, out);
}

int cond_file_read_as(const char *path, bool clip, const char *opt, c3_cond_file *out) {
    return cond_file_read_use_as(path, clip, NULL, opt, out);
}

int cond_file_read_for(const char *path, bool clip, const c3_cond_use *use, c3_cond_file *out) {
    return cond_file_read_use_as(path, clip, use, clip ? "video" : "image", out);
}

int cond_file_read_use_as(const char *path, bool clip, const c3_cond_use *use, const char *opt,
                          c3_cond_file *out) {
    memset(out, 0, sizeof *out);
    cond_bounds b = bounds_of(use, clip);
    out->hash = C3_FNV_INIT;
    struct stat st;
    int rc;
    if (clip && is_pattern(path)) {
        char p[4096];
        int first = 0;
        snprintf(p, sizeof p, path, 0);
        if (access(p, R_OK) != 0) first = 1;
        rc = COSMOS3_OK;
        for (int i = first; rc == COSMOS3_OK && !frames_full(out, &b); i++) {
            snprintf(p, sizeof p, path, i);
            if (access(p, R_OK) != 0) break;
            rc = add_frame(out, p, &b);
        }
        if (rc == COSMOS3_OK && !out->media.frames)
            rc = c3_fail(COSMOS3_EINPUT, "--%s %s: no frame matches the pattern (tried 0 and 1)",
                         opt, path);
    } else if (stat(path, &st) != 0) {
        rc =
            c3_fail(COSMOS3_EINPUT, "--%s %s: %s", opt, path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        rc = clip ? read_folder(path, out, &b)
                  : c3_fail(COSMOS3_EINPUT,
                            "--image %s is a folder; give one picture, or a clip as --video", path);
    } else if (!S_ISREG(st.st_mode)) { /* a FIFO would block the open */
        rc = c3_fail(COSMOS3_EINPUT, "--%s %s: is %s, not a regular file; give a file",
                     clip ? "video" : "image", path,
                     S_ISFIFO(st.st_mode)   ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "a device");
    } else if (st.st_size > MEDIA_MAX_BYTES) { /* files are read whole */
        rc = c3_fail(COSMOS3_EINPUT, "--%s %s is %lld MiB; at most %lld MiB are read",
                     clip ? "video" : "image", path, (long long)(st.st_size >> 20),
                     MEDIA_MAX_BYTES >> 20);
    } else {
        rc = is_png_file(path) ? add_frame(out, path, &b) : add_media(out, path, &b, opt);
    }
    if (rc) {
        cond_file_free(out);
        return rc;
    }
    keep_tail(out, &b);
    out->media.rgb = out->rgb;
    return COSMOS3_OK;
}

int cond_precheck(const char *image, const char *video, const char *first_last, int W, int H) {
    c3_cond_use one = {W, H, 1, false};
    c3_cond_file f;
    int rc = COSMOS3_OK;
    if (image || video) {
        rc = cond_file_read_for(image ? image : video, video && !image, &one, &f);
        if (rc == COSMOS3_OK) cond_file_free(&f);
    }
    if (rc == COSMOS3_OK && first_last) { /* "START\nEND" */
        char *a = xstrdup(first_last), *b = strchr(a, '\n');
        if (b) *b++ = 0;
        rc = cond_file_read_for(a, true, &one, &f);
        if (rc == COSMOS3_OK) cond_file_free(&f);
        if (rc == COSMOS3_OK && b && (rc = cond_file_read_for(b, true, &one, &f)) == COSMOS3_OK)
            cond_file_free(&f);
        free(a);
    }
    return rc;
}

void cond_file_free(c3_cond_file *f) {
    free(f->rgb);
    memset(f, 0, sizeof *f);
}

int cond_parse_frames(const char *text, int *idx, int max, int *n) {
    *n = 0;
    const char *p = text ? text : "";
    for (;;) {
        while (*p == ' ')
            p++;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 1 << 20)
            return c3_fail(COSMOS3_EUSAGE,
                           "condition frames '%s': expected latent frame indexes such as 0,1",
                           text);
        if (*n >= max)
            return c3_fail(COSMOS3_EUSAGE, "condition frames '%s': at most %d indexes", text, max);
        idx[(*n)++] = (int)v;
        p = end;
        while (*p == ' ')
            p++;
        if (!*p) return COSMOS3_OK;
        if (*p++ != ',')
            return c3_fail(COSMOS3_EUSAGE,
                           "condition frames '%s': expected latent frame indexes such as 0,1",
                           text);
    }
}
