/* output.c - output paths, overwrite rules, PNG frames (all or none). */
#include "output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

int output_frame_path(const c3_output *o, int f, char *buf, size_t n, char *dir, size_t dn) {
    dir[0] = 0;
    const char *out = o->output;
    if (o->frames == 1) {
        if (out && *out)
            snprintf(buf, n, "%s", out);
        else
            snprintf(buf, n, "cosmos3-%llu.png", (unsigned long long)o->seed);
        return C3_OK;
    }
    char base[2048];
    if (out && *out)
        snprintf(base, sizeof base, "%s", out);
    else
        snprintf(base, sizeof base, "cosmos3-%llu", (unsigned long long)o->seed);
    const char *pct = strchr(base, '%');
    if (pct) {
        /* one %0Nd conversion only */
        const char *q = pct + 1;
        while (*q >= '0' && *q <= '9')
            q++;
        if (*q != 'd' || strchr(q, '%'))
            return c3_fail(
                C3_EUSAGE,
                "-o '%s': a frame pattern takes one %%d conversion (e.g. shots/%%04d.png)", base);
        snprintf(buf, n, base, f);
        const char *slash = strrchr(buf, '/');
        if (slash) snprintf(dir, dn, "%.*s", (int)(slash - buf), buf);
    } else {
        size_t L = strlen(base);
        if (L > 4 && strcmp(base + L - 4, ".png") == 0)
            return c3_fail(C3_EUSAGE,
                           "-o %s: a video needs a folder or a pattern such as frames/%%04d.png",
                           base);
        snprintf(buf, n, "%s/frame_%04d.png", base, f);
        snprintf(dir, dn, "%s", base);
    }
    return C3_OK;
}

int output_check(const c3_output *o) {
    char path[4096], dir[4096];
    for (int f = 0; f < o->frames; f++) {
        C3_TRY(output_frame_path(o, f, path, sizeof path, dir, sizeof dir));
        if (!o->overwrite && c3_file_exists(path))
            return c3_fail(C3_EOUTPUT, "%s already exists; use --overwrite or another -o", path);
        /* checking the first frame is enough for a fresh folder */
        if (o->frames > 4 && f == 0 && !c3_file_exists(dir)) break;
    }
    return C3_OK;
}

int output_write_png(const c3_output *o, const cosmos3_result *r, const c3_png_text *texts,
                     int ntexts, char ***paths, int *npaths) {
    char path[4096], dir[4096];
    *paths = xcalloc((size_t)r->frames, sizeof(char *));
    *npaths = 0;
    size_t frame = (size_t)r->width * r->height * 3;
    int rc = C3_OK;
    for (int f = 0; f < r->frames && rc == C3_OK; f++) {
        rc = output_frame_path(o, f, path, sizeof path, dir, sizeof dir);
        if (rc == C3_OK && dir[0]) rc = c3_mkdir_p(dir);
        if (rc == C3_OK)
            rc = png_write(path, r->rgb + (size_t)f * frame, r->width, r->height, texts,
                           f == 0 ? ntexts : 0, o->overwrite);
        if (rc == C3_OK) (*paths)[(*npaths)++] = xstrdup(path);
    }
    if (rc) { /* nothing half-written: a video is all its frames or none */
        for (int i = 0; i < *npaths; i++) {
            unlink((*paths)[i]);
            free((*paths)[i]);
        }
        free(*paths);
        *paths = NULL;
        *npaths = 0;
    }
    return rc;
}
