/* demo_judge_cli.c - the demo world's judge (bench/demo/demo_judge.c) for the
 * serve tests, which get pictures and clips over HTTP:
 *
 *   demo_judge_cli judge FILE...     one line per file (PNG, JPEG, WebP, MP4):
 *                                    "FILE BG COLOUR SHAPE MOTION" by name
 *                                    ("-" where the judge found none; MOTION
 *                                    "-" for a picture)
 *   demo_judge_cli compare A B       "frames F bytes N worse W flips K": the
 *                                    bytes of the decoded frames that differ
 *                                    by more than one level, and by one
 *
 * Exit 0, or 1 with one line on stderr when a file cannot be decoded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demo_judge.h"
#include "demo_world.h"
#include "media.h"

static const char *name_of(const char *const *names, int n, int i) {
    return i >= 0 && i < n ? names[i] : "-";
}

static int decode(const char *path, c3_media_frames *m) {
    c3_media_limits lim = {.min_frames = 1};
    if (media_decode(path, &lim, m) != COSMOS3_OK) {
        fprintf(stderr, "demo_judge_cli: %s\n", c3_errmsg());
        return 1;
    }
    return 0;
}

static int judge(const char *path) {
    c3_media_frames m;
    if (decode(path, &m)) return 1;
    if (m.width != DEMO_SIZE || m.height != DEMO_SIZE) {
        printf("%s - - - - (%dx%d, not the demo's %dx%d)\n", path, m.width, m.height, DEMO_SIZE,
               DEMO_SIZE);
        media_frames_free(&m);
        return 0;
    }
    if (m.frames == 1) {
        demo_verdict v;
        memset(&v, -1, sizeof v);
        demo_judge(m.rgb, &v);
        printf("%s %s %s %s -\n", path, name_of(demo_colour_names, DEMO_N_COLOURS, v.bg),
               name_of(demo_colour_names, DEMO_N_COLOURS, v.colour),
               name_of(demo_shape_names, DEMO_N_SHAPES, v.shape));
    } else {
        demo_clip_verdict v;
        memset(&v, -1, sizeof v);
        demo_judge_clip(m.rgb, m.frames, NULL, &v);
        /* the motion by its phrase's last word: still, right, left, up, down */
        static const char *const motions[DEMO_N_MOTIONS] = {"still", "right", "left", "up", "down"};
        printf("%s %s %s %s %s\n", path, name_of(demo_colour_names, DEMO_N_COLOURS, v.bg),
               name_of(demo_colour_names, DEMO_N_COLOURS, v.colour),
               name_of(demo_shape_names, DEMO_N_SHAPES, v.shape),
               name_of(motions, DEMO_N_MOTIONS, v.motion));
    }
    media_frames_free(&m);
    return 0;
}

static int compare(const char *a, const char *b) {
    c3_media_frames x, y;
    if (decode(a, &x)) return 1;
    if (decode(b, &y)) {
        media_frames_free(&x);
        return 1;
    }
    int rc = 0;
    if (x.width != y.width || x.height != y.height || x.frames != y.frames) {
        fprintf(stderr, "demo_judge_cli: %s is %d frames of %dx%d, %s %d of %dx%d\n", a, x.frames,
                x.width, x.height, b, y.frames, y.width, y.height);
        rc = 1;
    } else {
        size_t n = (size_t)x.width * x.height * 3 * (size_t)x.frames, worse = 0, flips = 0;
        for (size_t k = 0; k < n; k++) {
            int d = abs((int)x.rgb[k] - (int)y.rgb[k]);
            flips += d == 1;
            worse += d > 1;
        }
        printf("frames %d bytes %zu worse %zu flips %zu\n", x.frames, n, worse, flips);
    }
    media_frames_free(&x);
    media_frames_free(&y);
    return rc;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "judge")) {
        int rc = 0;
        for (int i = 2; i < argc; i++)
            rc |= judge(argv[i]);
        return rc;
    }
    if (argc == 4 && !strcmp(argv[1], "compare")) return compare(argv[2], argv[3]);
    fprintf(stderr, "usage: demo_judge_cli judge FILE... | compare A B\n");
    return 2;
}
