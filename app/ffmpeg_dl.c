/* ffmpeg_dl.c - FFmpeg's libraries on first use (see ffmpeg_dl.h). The
 * libraries are the major versions the headers were built against (their
 * ABI), found as the dynamic linker finds any library. */
#include "config.h"

#if COSMOS3_HAVE_FFMPEG
#define C3_FFMPEG_DL_IMPL
#include "ffmpeg_dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "util.h"

c3_ffmpeg c3_ff;

/* the libraries, dependencies first; each function is looked up in all */
static const char *const ff_libs[] = {
    "libavutil.so." AV_STRINGIFY(LIBAVUTIL_VERSION_MAJOR),
    "libswresample.so." AV_STRINGIFY(LIBSWRESAMPLE_VERSION_MAJOR),
    "libswscale.so." AV_STRINGIFY(LIBSWSCALE_VERSION_MAJOR),
    "libavcodec.so." AV_STRINGIFY(LIBAVCODEC_VERSION_MAJOR),
    "libavformat.so." AV_STRINGIFY(LIBAVFORMAT_VERSION_MAJOR),
};
#define FF_NLIBS (sizeof ff_libs / sizeof ff_libs[0])

static pthread_once_t ff_once = PTHREAD_ONCE_INIT;
static char ff_error[512]; /* "" once loaded */

static void *ff_sym(void *const *h, const char *name) {
    for (size_t i = 0; i < FF_NLIBS; i++) {
        void *p = dlsym(h[i], name);
        if (p) return p;
    }
    return NULL;
}

static void ff_init(void) {
    void *h[FF_NLIBS] = {0};
    for (size_t i = 0; i < FF_NLIBS; i++) {
        /* RTLD_NOW: a missing symbol fails here, not in the middle of a write */
        h[i] = dlopen(ff_libs[i], RTLD_NOW | RTLD_LOCAL);
        if (!h[i]) {
            const char *e = dlerror();
            snprintf(ff_error, sizeof ff_error, "%s", e ? e : ff_libs[i]);
            return;
        }
    }
    void *p;
#define C3_FF_LOOKUP(name)                                                                         \
    if (!(p = ff_sym(h, #name))) {                                                                 \
        snprintf(ff_error, sizeof ff_error, "%s has no %s", ff_libs[FF_NLIBS - 1], #name);         \
        return;                                                                                    \
    }                                                                                              \
    c3_ff.name = (__typeof__(c3_ff.name))p;
    C3_FFMPEG_FUNCTIONS(C3_FF_LOOKUP)
#undef C3_FF_LOOKUP
    /* the handles stay open for the process's life: c3_ff points into them */
    c3_ff.av_log_set_level(AV_LOG_QUIET); /* their errors come back as values */
}

int ffmpeg_load(void) {
    pthread_once(&ff_once, ff_init);
    if (!ff_error[0]) return COSMOS3_OK;
    return c3_fail(COSMOS3_EUSAGE,
                   "video and WebP files need FFmpeg's libraries, which could not be loaded (%s); "
                   "install libavformat%d libavcodec%d libswscale%d libswresample%d, or use .png "
                   "or .jpg",
                   ff_error, LIBAVFORMAT_VERSION_MAJOR, LIBAVCODEC_VERSION_MAJOR,
                   LIBSWSCALE_VERSION_MAJOR, LIBSWRESAMPLE_VERSION_MAJOR);
}
#endif
