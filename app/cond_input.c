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

static int add_frame(c3_cond_file *f, const char *path) {
    if (f->media.frames >= COND_MAX_FRAMES)
        return c3_fail(COSMOS3_EINPUT, "%s: a clip has at most %d frames", path, COND_MAX_FRAMES);
    uint8_t *rgb;
    int W, H;
    APP_TRY(png_read_rgb(path, &rgb, &W, &H));
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
    f->rgb = xrealloc(f->rgb, fb * (size_t)(f->media.frames + 1));
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

static int read_folder(const char *dir, c3_cond_file *f) {
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
    for (int i = 0; i < n && rc == COSMOS3_OK; i++)
        rc = add_frame(f, names[i]);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (rc == COSMOS3_OK && !n)
        rc = c3_fail(COSMOS3_EINPUT, "%s: no .png frames in this folder", dir);
    return rc;
}

/* A picture or clip in another format than PNG (media.c): --image takes its
 * first frame. */
static int add_media(c3_cond_file *f, const char *path, bool clip, const char *opt) {
    c3_media_limits lim = {.min_frames = 1, .max_frames = clip ? COND_MAX_FRAMES : 1};
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
    FILE *fp = fopen(path, "rb");
    unsigned char sig[8] = {0};
    bool png = fp && fread(sig, 1, 8, fp) == 8 && !memcmp(sig, "\x89PNG\r\n\x1a\n", 8);
    if (fp) fclose(fp);
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
    return cond_file_read_as(path, clip, clip ? "video" : "image", out);
}

int cond_file_read_as(const char *path, bool clip, const char *opt, c3_cond_file *out) {
    memset(out, 0, sizeof *out);
    out->hash = C3_FNV_INIT;
    struct stat st;
    int rc;
    if (clip && is_pattern(path)) {
        char p[4096];
        int first = 0;
        snprintf(p, sizeof p, path, 0);
        if (access(p, R_OK) != 0) first = 1;
        rc = COSMOS3_OK;
        for (int i = first; rc == COSMOS3_OK; i++) {
            snprintf(p, sizeof p, path, i);
            if (access(p, R_OK) != 0) break;
            rc = add_frame(out, p);
        }
        if (rc == COSMOS3_OK && !out->media.frames)
            rc = c3_fail(COSMOS3_EINPUT, "--%s %s: no frame matches the pattern (tried 0 and 1)",
                         opt, path);
    } else if (stat(path, &st) != 0) {
        rc =
            c3_fail(COSMOS3_EINPUT, "--%s %s: %s", opt, path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        rc = clip ? read_folder(path, out)
                  : c3_fail(COSMOS3_EINPUT,
                            "--image %s is a folder; give one picture, or a clip as --video", path);
    } else {
        rc = is_png_file(path) ? add_frame(out, path) : add_media(out, path, clip, opt);
    }
    if (rc) {
        cond_file_free(out);
        return rc;
    }
    out->media.rgb = out->rgb;
    return COSMOS3_OK;
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
