/* fuzz_media.c - libFuzzer harness for decoding pictures and clips held in
 * memory (app/media.c: PNG through libpng, JPEG, WebP and MP4/WebM/MOV
 * through FFmpeg, animated WebP through libwebpdemux) and reading their
 * stored settings, under the bounds a request sets. A decode either fails
 * with a message and nothing kept, or gives frames within the bounds. Run
 * with a small -rss_limit_mb: a file that claims a huge picture must be
 * refused from its header, never decoded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "media.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* the first byte picks the bounds: a picture, or a clip's first or last frames */
    uint8_t sel = size ? data[0] : 0;
    c3_media_limits lim = {.min_frames = 1,
                           .max_frames = sel & 1 ? 1 : 1 + (sel >> 1) % 9,
                           .max_pixels = (sel & 2) ? 256 * 256 : 1024 * 1024,
                           .max_bytes = 32ll << 20,
                           .keep_last = (sel & 4) != 0};
    c3_media_frames m;
    int rc = media_decode_mem(data, size, "fuzz", &lim, &m);
    if (rc != COSMOS3_OK) {
        if (!c3_errmsg()[0] || m.rgb) abort();
    } else {
        if (!m.rgb || m.width < 1 || m.height < 1 || m.frames < 1 || m.frames > lim.max_frames ||
            (int64_t)m.width * m.height > lim.max_pixels)
            abort();
        volatile uint8_t x = m.rgb[(size_t)m.width * m.height * 3 * (size_t)m.frames - 1];
        (void)x;
        media_frames_free(&m);
    }
    char *p = NULL, *js = NULL;
    if (media_read_meta_mem(data, size, "fuzz", &p, &js) == COSMOS3_OK) {
        free(p);
        free(js);
    }
    return 0;
}
