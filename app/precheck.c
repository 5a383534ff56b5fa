/* precheck.c - the checks that need no model, run before it loads
 * (precheck.h). */
#include "precheck.h"

#include "media.h"

#include "output.h"
#include "session.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

int precheck_prompt(const char *prompt) {
    if (!prompt) return COSMOS3_OK;
    for (const unsigned char *p = (const unsigned char *)prompt; *p; p++)
        if (!isspace(*p)) return COSMOS3_OK;
    return c3_fail(COSMOS3_EUSAGE,
                   "the prompt is empty; give it some words, e.g. -p \"a red fox in the snow\"");
}

/* With --from, the file may be one its stored settings named (metadata_apply
 * looks beside the --from file too): say so, and how to point elsewhere. */
static const char *from_note(const c3_settings *s, const char *opt, char *buf, size_t n) {
    if (!s->from) return "";
    snprintf(buf, n, " (with --from %s: its settings may name this file; give --%s PATH after it)",
             s->from, opt);
    return buf;
}

/* The first bytes say a picture or clip that media.c decodes. */
static bool media_magic(const unsigned char *b, size_t n) {
    if (n >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) return true;
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff) return true;        /* JPEG */
    if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return true; /* WebP */
    if (n >= 8 && !memcmp(b + 4, "ftyp", 4)) return true;                           /* MP4, MOV */
    if (n >= 4 && b[0] == 0x1a && b[1] == 0x45 && b[2] == 0xdf && b[3] == 0xa3)
        return true; /* WebM */
    return false;
}

/* One file that must be there, readable and (media) a picture or clip. */
static int check_file(const c3_settings *s, const char *opt, const char *path, bool media) {
    char note[4400];
    struct stat st;
    if (stat(path, &st) != 0 || access(path, R_OK) != 0)
        return c3_fail(COSMOS3_EINPUT, "--%s %s: %s%s", opt, path, strerror(errno),
                       from_note(s, opt, note, sizeof note));
    if (S_ISDIR(st.st_mode))
        return c3_fail(COSMOS3_EINPUT, "--%s %s is a folder; give %s", opt, path,
                       strcmp(opt, "image") ? "a file" : "one picture, or a clip as --video");
    if (!S_ISREG(st.st_mode)) /* a FIFO would block the open */
        return c3_fail(COSMOS3_EINPUT, "--%s %s: is %s, not a regular file; give a file", opt,
                       path,
                       S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device");
    if (!media) return COSMOS3_OK;
    if (st.st_size > MEDIA_MAX_BYTES) /* files are read whole */
        return c3_fail(COSMOS3_EINPUT, "--%s %s is %lld MiB; at most %lld MiB are read", opt, path,
                       (long long)(st.st_size >> 20), (long long)(MEDIA_MAX_BYTES >> 20));
    FILE *f = fopen(path, "rb");
    if (!f)
        return c3_fail(COSMOS3_EINPUT, "--%s %s: %s%s", opt, path, strerror(errno),
                       from_note(s, opt, note, sizeof note));
    unsigned char b[16];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (!media_magic(b, n))
        return c3_fail(COSMOS3_EINPUT,
                       "--%s %s is not a picture or clip cosmos3 can read (PNG, JPEG, WebP, MP4, "
                       "WebM, MOV)",
                       opt, path);
    return COSMOS3_OK;
}

/* A clip: a folder of PNG frames, a %d pattern (frame 0 or 1 there) or one file. */
static int check_clip(const c3_settings *s, const char *opt, const char *path) {
    const char *pct = strchr(path, '%');
    if (pct) {
        char p[4096];
        for (int i = 0; i < 2; i++) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
            snprintf(p, sizeof p, path, i);
#pragma GCC diagnostic pop
            if (access(p, R_OK) == 0) return check_file(s, opt, p, true);
        }
        return c3_fail(COSMOS3_EINPUT, "--%s %s: no frame matches the pattern (tried 0 and 1)", opt,
                       path);
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return c3_fail(COSMOS3_EINPUT, "--%s %s: %s", opt, path, strerror(errno));
        closedir(d);
        return COSMOS3_OK;
    }
    return check_file(s, opt, path, true);
}

int precheck_inputs(const c3_settings *s) {
    if (s->image) APP_TRY(check_file(s, "image", s->image, true));
    if (s->video) APP_TRY(check_clip(s, "video", s->video));
    if (s->first_last) {
        char *a = xstrdup(s->first_last), *b = strchr(a, '\n');
        if (b) *b++ = 0;
        int rc = check_clip(s, "first-last", a);
        if (rc == COSMOS3_OK && b) rc = check_clip(s, "first-last", b);
        free(a);
        APP_TRY(rc);
    }
    if (s->noise) APP_TRY(check_file(s, "noise", s->noise, false));
    return COSMOS3_OK;
}

int precheck_all(const c3_settings *s) {
    APP_TRY(precheck_prompt(s->prompt));
    return precheck_inputs(s);
}

int precheck_session(const c3_settings *s) {
    APP_TRY(precheck_all(s));
    if (!s->output || !s->given[option_index(option_find("output"))]) return COSMOS3_OK;
    cosmos3_settings st;
    APP_TRY(session_check(s, NULL, false, NULL, &st));
    c3_output out;
    APP_TRY(output_plan(s, st.frames, st.width, st.height, -1, &out));
    output_free(&out);
    return COSMOS3_OK;
}
