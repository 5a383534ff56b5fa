/* output.c - where a result goes: format by extension, destination checks
 * before the model loads, atomic writes, cleanup on signals (output.h). */
#include "output.h"
#include "wav.h"

#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "png_io.h"

#define OUT_MODE_FILE 0644
#define OUT_MODE_DIR 0755
#define OUT_FRAME_FMT "frame_%04d.png"

/* ------------------------------------------------- what is in flight */

/* One write at a time per process (gen, the REPL's worker); the server
 * encodes in memory. The signal handler only reads these. */
static struct {
    char tmp_file[4200];
    volatile sig_atomic_t has_tmp_file;
    char tmp_dir[4200];
    volatile sig_atomic_t has_tmp_dir;
    char **dir_files; /* full paths that may exist inside tmp_dir */
    volatile sig_atomic_t ndir_files;
    char **placed; /* pattern frames already renamed into place */
    volatile sig_atomic_t nplaced;
    volatile sig_atomic_t aborting; /* output_abort ran: frame writers stop */
    int place; /* PLACE_*: the single file's placing against a cancel (atomic) */
} g_fly;

/* output_write_file's file and a second Ctrl-C, which any thread may take
 * (a terminal signals the process): the writer moves WRITING -> PLACING
 * before its rename and to PLACED after it; the handler moves WRITING ->
 * CANCELLED before it removes anything. Whichever comes first wins, so a
 * cancel never leaves the new file in place and a placed file is never
 * reported as cancelled (issue 38, N9). */
enum { PLACE_WRITING, PLACE_PLACING, PLACE_PLACED, PLACE_CANCELLED };

bool output_committed(void) {
    int s = __atomic_load_n(&g_fly.place, __ATOMIC_SEQ_CST);
    return s == PLACE_PLACING || s == PLACE_PLACED;
}

bool output_cancel_claim(void) {
    int s = PLACE_WRITING;
    if (__atomic_compare_exchange_n(&g_fly.place, &s, PLACE_CANCELLED, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST))
        return true;
    return s == PLACE_CANCELLED;
}

void output_abort(void) {
    __atomic_store_n(&g_fly.aborting, 1, __ATOMIC_SEQ_CST); /* before any unlink */
    if (g_fly.has_tmp_file) unlink(g_fly.tmp_file);
    for (int i = 0; i < g_fly.ndir_files; i++)
        unlink(g_fly.dir_files[i]);
    if (g_fly.has_tmp_dir) rmdir(g_fly.tmp_dir);
    for (int i = 0; i < g_fly.nplaced; i++)
        unlink(g_fly.placed[i]);
    g_fly.has_tmp_file = g_fly.has_tmp_dir = 0;
    g_fly.ndir_files = g_fly.nplaced = 0;
}

static void on_term_signal(int sig) {
    output_abort();
    signal(sig, SIG_DFL);
    raise(sig);
}

void output_signals_install(void) {
    struct sigaction sa = {.sa_handler = on_term_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigemptyset(&ign.sa_mask);
    sigaction(SIGXFSZ, &ign, NULL); /* write() fails with EFBIG instead, and is cleaned up */
}

/* ---------------------------------------------------------- messages */

static const char *io_hint(int e) {
    switch (e) {
    case ENOSPC:
        return " (ENOSPC: the disk is full; free some space or pick another -o)";
    case EDQUOT:
        return " (EDQUOT: the disk quota is used up; free some space or pick another -o)";
    case EFBIG:
        return " (EFBIG: the file size limit was reached; see ulimit -f)";
    case EACCES:
    case EPERM:
    case EROFS:
        return " (is the folder writable?)";
    case ENOENT:
        return " (is the folder there?)";
    default:
        return "";
    }
}

static int io_fail(const char *path, int e) {
    return c3_fail(COSMOS3_EOUTPUT, "cannot write %s: %s%s", path, strerror(e), io_hint(e));
}

static int write_all(int fd, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* part(path) of a path without its trailing slashes, xmalloc'd: dirname (the
 * folder, "." for a bare name) or basename (the last name). */
static char *path_part(const char *path, char *(*part)(char *)) {
    char *t = xstrdup(path);
    size_t L = strlen(t);
    while (L > 1 && t[L - 1] == '/')
        t[--L] = 0;
    char *r = xstrdup(part(t));
    free(t);
    return r;
}

static char *dir_of(const char *path) {
    return path_part(path, dirname);
}

static char *base_of(const char *path) {
    return path_part(path, basename);
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* best effort: the rename is durable where the filesystem allows */
        close(fd);
    }
}

/* ------------------------------------------------------ atomic files */

int output_write_file(const char *path, const void *data, size_t n, bool overwrite) {
    if (!overwrite && c3_file_exists(path))
        return c3_fail(COSMOS3_EOUTPUT, "%s already exists; use --overwrite or another -o", path);
    if (snprintf(g_fly.tmp_file, sizeof g_fly.tmp_file, "%s.tmp.XXXXXX", path) >=
        (int)sizeof g_fly.tmp_file)
        return c3_fail(COSMOS3_EOUTPUT, "%s: the path is too long", path);
    g_fly.has_tmp_file = 1;
    int fd = mkstemp(g_fly.tmp_file); /* O_CREAT | O_EXCL, mode 0600 */
    if (fd < 0) {
        g_fly.has_tmp_file = 0;
        return io_fail(path, errno);
    }
    int rc = COSMOS3_OK;
    if (write_all(fd, data, n) != 0 || fsync(fd) != 0 || fchmod(fd, OUT_MODE_FILE) != 0)
        rc = io_fail(path, errno);
    if (close(fd) != 0 && rc == COSMOS3_OK) rc = io_fail(path, errno);
    /* the rename and the bookkeeping as one step for the signals: a signal
       lands before it (nothing placed) or after it (committed: a second
       Ctrl-C no longer cancels a run whose file is complete); a second
       Ctrl-C taken by another thread meets the PLACE_ claim instead */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int e = 0, s = PLACE_WRITING;
    bool go =
        rc == COSMOS3_OK && (__atomic_compare_exchange_n(&g_fly.place, &s, PLACE_PLACING, false,
                                                         __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) ||
                             s == PLACE_PLACED); /* s == PLACE_CANCELLED: the handler is exiting */
    if (go && c3_place_file(g_fly.tmp_file, path, overwrite) != 0) e = errno;
    if (go)
        __atomic_store_n(&g_fly.place, e && s != PLACE_PLACED ? PLACE_WRITING : PLACE_PLACED,
                         __ATOMIC_SEQ_CST);
    if (rc == COSMOS3_OK && !go) rc = c3_fail(COSMOS3_ECANCEL, "cancelled");
    g_fly.has_tmp_file = 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e == EEXIST)
        rc = c3_fail(COSMOS3_EOUTPUT, "%s already exists; use --overwrite or another -o", path);
    else if (e)
        rc = io_fail(path, e);
    if (rc != COSMOS3_OK) unlink(g_fly.tmp_file);
    if (rc == COSMOS3_OK) {
        char *d = dir_of(path);
        fsync_dir(d);
        free(d);
    }
    return rc;
}

/* A file inside a fresh temporary folder: plain O_EXCL create, fsync. */
static int write_new(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, OUT_MODE_FILE);
    if (fd < 0) return io_fail(path, errno);
    int rc = COSMOS3_OK;
    if (write_all(fd, data, n) != 0 || fsync(fd) != 0) rc = io_fail(path, errno);
    if (close(fd) != 0 && rc == COSMOS3_OK) rc = io_fail(path, errno);
    return rc;
}

/* -------------------------------------------------------------- plan */

#define OUT_MAX_FIELD 32 /* digits of a pattern's %0Nd: a file name holds 255 bytes */

/* One %0Nd conversion in the last path component. */
static bool pattern_ok(const char *p) {
    const char *pct = strchr(p, '%');
    if (!pct || strchr(pct, '/')) return false;
    const char *q = pct + 1;
    while (*q >= '0' && *q <= '9')
        q++;
    return *q == 'd' && !strchr(q, '%');
}

/* The sound a frame folder holds beside its frames (--sound). */
#define OUT_SOUND_NAME "sound.wav"

static bool is_frame_name(const char *n) {
    int k = 0;
    if (!strcmp(n, OUT_SOUND_NAME)) return true; /* ours: replaced with the frames */
    if (strncmp(n, "frame_", 6)) return false;
    for (n += 6; *n >= '0' && *n <= '9'; n++)
        k++;
    return k >= 4 && !strcmp(n, ".png");
}

/* A folder that a video folder may replace: absent, empty or only frames.
 * *frames: how many frame files it holds. */
static int folder_state(const char *dir, int *frames, bool *other) {
    *frames = 0;
    *other = false;
    DIR *d = opendir(dir);
    if (!d) return c3_fail(COSMOS3_EOUTPUT, "cannot read the folder %s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (is_frame_name(e->d_name))
            (*frames)++;
        else
            *other = true;
    }
    closedir(d);
    return COSMOS3_OK;
}

/* The nearest folder that exists at or above dir (xmalloc'd). */
static char *existing_ancestor(const char *dir) {
    char *d = xstrdup(dir);
    struct stat st;
    while (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
        char *up = dir_of(d);
        if (!strcmp(up, d)) {
            free(up);
            break;
        }
        free(d);
        d = up;
    }
    return d;
}

static int64_t estimate_bytes(const c3_output *o) {
    int64_t px = (int64_t)o->width * o->height, F = o->frames;
    if (o->kind == OUT_FOLDER || o->kind == OUT_PATTERN || o->fmt == MEDIA_PNG)
        return px * 3 * F + 4096 * F;
    if (media_format_is_video(o->fmt))
        return px * F * 3 / 8 + 65536; /* ~3 bits per pixel: generous at CRF 18 */
    return px * 3 / 2 + 65536;         /* JPEG, WebP at quality 95 */
}

/* The folder is writable and has room for the output. */
static int check_room(const c3_output *o, const char *dir) {
    char *d = existing_ancestor(dir);
    int rc = COSMOS3_OK;
    struct stat st;
    if (stat(d, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = c3_fail(COSMOS3_EOUTPUT, "cannot write into %s: it is not a folder", d);
    } else if (access(d, W_OK | X_OK) != 0) {
        rc = c3_fail(COSMOS3_EOUTPUT, "cannot write into %s: %s (pick a writable folder with -o)",
                     d, strerror(errno));
    } else {
        struct statvfs vs;
        int64_t need = estimate_bytes(o);
        if (statvfs(d, &vs) == 0 && (int64_t)vs.f_bavail * (int64_t)vs.f_frsize < need) {
            char a[32], b[32];
            c3_bytes_text(need, a, sizeof a);
            c3_bytes_text((int64_t)vs.f_bavail * (int64_t)vs.f_frsize, b, sizeof b);
            rc = c3_fail(COSMOS3_EOUTPUT,
                         "not enough room in %s: this output needs about %s, %s are free (ENOSPC "
                         "ahead; free some "
                         "space or pick another -o)",
                         d, a, b);
        }
    }
    free(d);
    return rc;
}

/* A file's folder must be there (a frame folder is made, a file's folder
 * is not: a typo in it should not grow a tree), then writable with room. */
static int check_file_folder(const c3_output *o, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0)
        return c3_fail(COSMOS3_EOUTPUT,
                       "cannot write %s: the folder %s does not exist; make it (mkdir -p %s) or "
                       "pick another -o",
                       o->path ? o->path : dir, dir, dir);
    if (!S_ISDIR(st.st_mode))
        return c3_fail(COSMOS3_EOUTPUT, "cannot write %s: %s is not a folder",
                       o->path ? o->path : dir, dir);
    return check_room(o, dir);
}

static bool ends_with_slash(const char *p) {
    size_t L = strlen(p);
    return L > 0 && p[L - 1] == '/';
}

/* The default file name for a seed: cosmos3-SEED.png / .mp4 / ... */
static void default_name(const c3_output *o, char *buf, size_t n) {
    const char *ext = o->fmt == MEDIA_MP4 ? "mp4" : o->fmt == MEDIA_WEBM ? "webm" : "png";
    snprintf(buf, n, "cosmos3-%llu.%s", (unsigned long long)o->seed, ext);
}

static int plan(const c3_settings *s, int frames, int width, int height, int64_t seed,
                c3_output *o);

/* NAME.tmp.XXXXXX (a file) or .NAME.tmp.XXXXXX (a frames folder) of `base`. */
static bool is_tmp_of(const char *e, const char *base) {
    size_t bl = strlen(base);
    if (e[0] == '.' && !strncmp(e + 1, base, bl))
        e += 1 + bl;
    else if (!strncmp(e, base, bl))
        e += bl;
    else
        return false;
    return !strncmp(e, ".tmp.", 5) && strlen(e + 5) == 6 && !strchr(e + 5, '/');
}

/* Remove the temporaries of `path` that a killed run (SIGKILL, a power cut)
 * left: untouched for OUT_STALE_S, since a run writes its temporary from
 * the first byte to the rename without a pause that long. A frames folder
 * holds only files; nothing is followed. Failures are ignored (a stale
 * temporary is harmless). */
#define OUT_STALE_S 600
static void clean_stale(const char *path) {
    char *d = dir_of(path), *b = base_of(path);
    DIR *dir = opendir(d);
    time_t now = time(NULL);
    for (struct dirent *e; dir && (e = readdir(dir));) {
        struct stat st;
        if (!is_tmp_of(e->d_name, b)) continue;
        char *full = c3_path_join(d, e->d_name);
        if (lstat(full, &st) == 0 && now - st.st_mtime > OUT_STALE_S) {
            if (S_ISDIR(st.st_mode)) {
                DIR *sub = opendir(full);
                for (struct dirent *f; sub && (f = readdir(sub));) {
                    if (!strcmp(f->d_name, ".") || !strcmp(f->d_name, "..")) continue;
                    char *ff = c3_path_join(full, f->d_name);
                    (void)unlink(ff);
                    free(ff);
                }
                if (sub) closedir(sub);
                (void)rmdir(full);
            } else if (S_ISREG(st.st_mode)) {
                (void)unlink(full);
            }
        }
        free(full);
    }
    if (dir) closedir(dir);
    free(d);
    free(b);
}

int output_plan(const c3_settings *s, int frames, int width, int height, int64_t seed,
                c3_output *o) {
    int rc = plan(s, frames, width, height, seed, o);
    if (rc)
        output_free(o);
    else if (o->kind != OUT_STDOUT && s->output && *s->output)
        clean_stale(s->output);
    return rc;
}

static int plan(const c3_settings *s, int frames, int width, int height, int64_t seed,
                c3_output *o) {
    memset(o, 0, sizeof *o);
    o->seed = seed;
    o->overwrite = s->overwrite;
    o->media.crf = s->crf;
    o->media.quality = -1;
    if (s->crf < 0 || s->crf > 63)
        return c3_fail(COSMOS3_EUSAGE,
                       "--crf %d must be in 0..51 for MP4 (H.264) or 0..63 for WebM (VP9)", s->crf);
    o->frames = frames;
    o->width = width;
    o->height = height;
    o->sound = s->sound;
    o->wav_f32 = s->wav_format && !strcmp(s->wav_format, "f32");
    bool video = frames > 1;
    const char *p = s->output && *s->output ? s->output : NULL;
    if (p && !strcmp(p, "-")) {
        o->kind = OUT_STDOUT;
        o->fmt = video ? MEDIA_MP4 : MEDIA_PNG;
        if (isatty(1))
            return c3_fail(
                COSMOS3_EUSAGE,
                "-o -: standard output is a terminal; redirect it (-o - > %s) or pipe it",
                video ? "clip.mp4" : "pic.png");
        return COSMOS3_OK;
    }
    o->kind = OUT_FILE;
    o->fmt = video ? MEDIA_MP4 : MEDIA_PNG;
    if (!p) { /* cosmos3-SEED.png / .mp4 here */
        char name[64];
        default_name(o, name, sizeof name);
        if (seed >= 0 && !o->overwrite && c3_file_exists(name))
            return c3_fail(COSMOS3_EOUTPUT, "%s already exists; use --overwrite or another -o",
                           name);
        return check_room(o, ".");
    }
    o->path = xstrdup(p);
    struct stat st;
    bool exists = stat(p, &st) == 0, isdir = exists && S_ISDIR(st.st_mode);
    char *base = base_of(p), ext[64] = "";
    const char *dot = strrchr(base, '.');
    if (dot) snprintf(ext, sizeof ext, "%s", dot);
    dot = dot ? ext : NULL;
    if (dot && !strcasecmp(dot, ".wav")) { /* the sound alone */
        free(base);
        if (!s->sound)
            return c3_fail(COSMOS3_EUSAGE,
                           "-o %s: a .wav file holds the clip's sound; add --sound (or pick .mp4, "
                           ".webm or a picture format)",
                           p);
        if (isdir)
            return c3_fail(COSMOS3_EOUTPUT, "-o %s is a folder; remove it or pick another -o", p);
        if (exists && !o->overwrite)
            return c3_fail(COSMOS3_EOUTPUT, "%s already exists; use --overwrite or another -o", p);
        o->kind = OUT_WAV;
        char *d = dir_of(p);
        int wrc = check_room(o, d);
        free(d);
        return wrc;
    }
    c3_media_format f;
    bool known = media_format_from_path(base, &f);
    free(base);
    int rc = COSMOS3_OK;
    if (strchr(p, '%')) {
        if (!pattern_ok(p))
            return c3_fail(
                COSMOS3_EUSAGE,
                "-o '%s': a frame pattern takes one %%d conversion in the file name (e.g. "
                "shots/%%04d.png)",
                p);
        errno = 0;
        long width = strtol(strchr(p, '%') + 1, NULL, 10);
        if (errno || width > OUT_MAX_FIELD)
            return c3_fail(COSMOS3_EUSAGE,
                           "-o '%.64s...': the %%d field width is more than %d digits; use e.g. "
                           "%%04d",
                           p, OUT_MAX_FIELD);
        if (!known || (video && f != MEDIA_PNG))
            return c3_fail(COSMOS3_EUSAGE,
                           "-o '%s': frames by pattern are %s (e.g. shots/%%04d.png)", p,
                           video ? "PNG" : "pictures (.png, .jpg, .jpeg, .webp)");
        if (!known || media_format_is_video(f))
            return c3_fail(COSMOS3_EUSAGE,
                           "-o '%s': a pattern names pictures (.png, .jpg, .jpeg, .webp)", p);
        o->fmt = f;
        o->kind = video ? OUT_PATTERN : OUT_FILE;
        char *d = dir_of(p);
        rc = video ? check_room(o, d) : check_file_folder(o, d); /* frames make their folder */
        free(d);
        return rc;
    }
    if (known) {
        if (video && !media_format_is_video(f)) {
            if (f == MEDIA_PNG)
                return c3_fail(COSMOS3_EUSAGE,
                               "-o %s: a video needs .mp4 or .webm, or PNG frames: a folder or a "
                               "pattern such as "
                               "frames/%%04d.png",
                               p);
            return c3_fail(COSMOS3_EUSAGE,
                           "-o %s: %s holds one picture; a video goes to .mp4 or .webm (or PNG "
                           "frames: a folder or a "
                           "pattern such as frames/%%04d.png)",
                           p, media_format_name(f));
        }
        if (isdir)
            return c3_fail(
                COSMOS3_EOUTPUT,
                "-o %s is a folder, and a %s file is meant; remove it or pick another -o", p,
                media_format_name(f));
        o->fmt = f;
        if (f == MEDIA_MP4 && s->crf > 51)
            return c3_fail(COSMOS3_EUSAGE, "--crf %d must be in 0..51 for MP4 (H.264)", s->crf);
        if (exists && !o->overwrite)
            return c3_fail(COSMOS3_EOUTPUT, "%s already exists; use --overwrite or another -o", p);
        char *d = dir_of(p);
        rc = check_file_folder(o, d);
        free(d);
        return rc;
    }
    if (isdir || ends_with_slash(p) || (video && !dot)) {
        if (!video) { /* a picture into a folder: FOLDER/cosmos3-SEED.png */
            if (exists && !isdir)
                return c3_fail(COSMOS3_EOUTPUT, "-o %s: %s is not a folder", p, p);
            o->kind = OUT_FILE;
            o->fmt = MEDIA_PNG;
            return check_file_folder(o, p);
        }
        o->kind = OUT_FOLDER;
        if (exists && !isdir)
            return c3_fail(
                COSMOS3_EOUTPUT,
                "-o %s exists and is not a folder; use --overwrite with a file name such as "
                "clip.mp4, or another -o",
                p);
        if (isdir) {
            int nf;
            bool other;
            APP_TRY(folder_state(p, &nf, &other));
            if (other)
                return c3_fail(COSMOS3_EOUTPUT,
                               "-o %s holds other files than frames; a video folder is replaced as "
                               "a whole, so pick a "
                               "new or empty folder, or a file such as clip.mp4",
                               p);
            if (nf && !o->overwrite)
                return c3_fail(COSMOS3_EOUTPUT,
                               "%s already holds frames; use --overwrite or another -o", p);
        }
        char *d = dir_of(p);
        rc = check_room(o, d);
        free(d);
        return rc;
    }
    if (!dot) { /* a picture under a name without an extension: PNG, as before */
        o->fmt = MEDIA_PNG;
        if (exists && !o->overwrite)
            return c3_fail(COSMOS3_EOUTPUT, "%s already exists; use --overwrite or another -o", p);
        char *d = dir_of(p);
        rc = check_file_folder(o, d);
        free(d);
        return rc;
    }
    return c3_fail(
        COSMOS3_EUSAGE,
        "-o %s: cosmos3 cannot write %s files; use one of %s (video frames: a folder or a "
        "pattern such as frames/%%04d.png)",
        p, dot, media_extensions());
}

void output_free(c3_output *o) {
    free(o->path);
    o->path = NULL;
}

/* ------------------------------------------------------------- write */

typedef struct {
    char **v;
    int n;
} path_list;

int output_encode(c3_media_format f, const cosmos3_result *r, const c3_media_meta *m,
                  const c3_media_opts *opts, uint8_t **out, size_t *n) {
    if (!r->rgb) return c3_fail(COSMOS3_EFAIL, "the result holds no frames");
    c3_media_opts mo = opts ? *opts : (c3_media_opts){.crf = -1, .quality = -1};
    c3_media_audio au = {r->sound, r->sound_channels, r->sound_rate, r->sound_samples};
    if (r->sound && media_format_is_video(f)) mo.audio = &au; /* AAC / Opus beside the video */
    return media_encode(f, r->rgb, r->width, r->height, r->frames, r->fps > 0 ? r->fps : 24, m, &mo,
                        out, n);
}

static void add_path(path_list *l, const char *p) {
    l->v = xrealloc(l->v, (size_t)(l->n + 1) * sizeof *l->v);
    l->v[l->n++] = xstrdup(p);
}

static int write_stdout(const uint8_t *d, size_t n) {
    if (isatty(1))
        return c3_fail(
            COSMOS3_EUSAGE,
            "-o -: standard output is a terminal; redirect it (-o - > clip.mp4) or pipe it");
    if (write_all(1, d, n) != 0) {
        int e = errno;
        return c3_fail(COSMOS3_EOUTPUT, "cannot write to standard output: %s%s", strerror(e),
                       e == EPIPE ? " (the reader went away)" : io_hint(e));
    }
    return COSMOS3_OK;
}

/* PNG bytes of frame f with its settings (every frame carries them). */
static int frame_png(const cosmos3_result *r, const c3_media_meta *m, int f, uint8_t **out,
                     size_t *n) {
    c3_png_text t[2];
    int nt = 0;
    if (m && m->parameters) t[nt++] = (c3_png_text){"parameters", m->parameters, false};
    if (m && m->json) t[nt++] = (c3_png_text){"cosmos3", m->json, true};
    return png_encode_mem(r->rgb + (size_t)f * r->width * r->height * 3, r->width, r->height, t, nt,
                          out, n);
}

static void forget_dir(void) {
    g_fly.ndir_files = 0;
    g_fly.has_tmp_dir = 0;
}

/* Remove a folder of frames (only the names given, then the folder). */
static void remove_frames(const char *dir, char **files, int n) {
    for (int i = 0; i < n; i++)
        unlink(files[i]);
    rmdir(dir);
}

/* --------------------------------------------------- frames on threads */

/* The frames of a video are encoded and written by several threads at once
 * (each frame's bytes are what one thread alone makes). pthreads, not
 * OpenMP: tests fork after a write, and libgomp's pool does not survive a
 * fork. COSMOS3_WRITE_THREADS=N sets the count (1: one after the other on
 * the calling thread, as before); by default the online cores, at most
 * OUT_WRITE_MAX_THREADS. */
#define OUT_WRITE_MAX_THREADS 16

typedef struct {
    const cosmos3_result *r;
    const c3_media_meta *m;
    char **paths;
    int next;    /* the next frame to take (atomic) */
    int stop;    /* a frame failed (atomic) */
    int fail_at; /* the lowest frame that failed (under mu) */
    int rc;
    char err[1024];
    pthread_mutex_t mu;
} frame_job;

static int write_frame(frame_job *j, int f) {
    uint8_t *png;
    size_t n;
    int rc = frame_png(j->r, j->m, f, &png, &n);
    if (rc) return rc;
    /* a signal's cleanup has begun: make no new file (and take back one made
       while it ran: output_abort may have passed its name already) */
    if (__atomic_load_n(&g_fly.aborting, __ATOMIC_SEQ_CST))
        rc = c3_fail(COSMOS3_EOUTPUT, "%s: not written (the write was aborted)", j->paths[f]);
    if (rc == COSMOS3_OK) rc = write_new(j->paths[f], png, n);
    if (__atomic_load_n(&g_fly.aborting, __ATOMIC_SEQ_CST)) unlink(j->paths[f]);
    free(png);
    return rc;
}

static void *frame_worker(void *arg) {
    frame_job *j = arg;
    while (!__atomic_load_n(&j->stop, __ATOMIC_RELAXED)) {
        int f = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (f >= j->r->frames) break;
        int rc = write_frame(j, f);
        if (rc == COSMOS3_OK) continue;
        pthread_mutex_lock(&j->mu);
        if (f < j->fail_at) {
            j->fail_at = f;
            j->rc = rc;
            snprintf(j->err, sizeof j->err, "%s", c3_errmsg());
        }
        pthread_mutex_unlock(&j->mu);
        __atomic_store_n(&j->stop, 1, __ATOMIC_RELAXED);
        break;
    }
    return NULL;
}

static int write_threads(int frames) {
    const char *v = getenv("COSMOS3_WRITE_THREADS");
    long n = v && *v ? strtol(v, NULL, 10) : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > OUT_WRITE_MAX_THREADS) n = OUT_WRITE_MAX_THREADS;
    return (int)C3_MIN(n, (long)C3_MAX(frames, 1));
}

/* Every frame of r into paths[f]; the first failure (the lowest frame)
 * is the one reported. */
static int frames_write_all(const cosmos3_result *r, const c3_media_meta *m, char **paths) {
    frame_job j = {.r = r, .m = m, .paths = paths, .fail_at = INT32_MAX};
    pthread_mutex_init(&j.mu, NULL);
    int nt = write_threads(r->frames);
    pthread_t th[OUT_WRITE_MAX_THREADS];
    int started = 0;
    /* the helpers take no signal: a handler runs on this thread, as before */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (int t = 1; t < nt; t++) {
        if (pthread_create(&th[started], NULL, frame_worker, &j) != 0) break;
        started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    frame_worker(&j); /* this thread is one of them */
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j.mu);
    return j.rc ? c3_fail(j.rc, "%s", j.err) : COSMOS3_OK;
}

/* All frames into a fresh temporary sibling of `near` (a path whose folder
 * is used). names: the file names inside. tmp_paths: their full paths. */
static int frames_to_tmp(const cosmos3_result *r, const c3_media_meta *m, const char *near,
                         char ***tmp_paths) {
    char *d = dir_of(near), *b = base_of(near);
    int rc = c3_mkdir_p(d);
    snprintf(g_fly.tmp_dir, sizeof g_fly.tmp_dir, "%s/.%s.tmp.XXXXXX", d, b);
    free(d);
    free(b);
    if (rc) return rc;
    g_fly.has_tmp_dir = 1; /* before it exists: a signal in between removes nothing else */
    if (!mkdtemp(g_fly.tmp_dir)) {
        g_fly.has_tmp_dir = 0;
        return io_fail(near, errno);
    }
    char **paths = xcalloc((size_t)r->frames, sizeof *paths);
    for (int f = 0; f < r->frames; f++) {
        char name[64];
        snprintf(name, sizeof name, OUT_FRAME_FMT, f);
        paths[f] = c3_path_join(g_fly.tmp_dir, name);
    }
    g_fly.dir_files = paths;
    g_fly.ndir_files = r->frames;
    rc = frames_write_all(r, m, paths);
    if (chmod(g_fly.tmp_dir, OUT_MODE_DIR) != 0 && rc == COSMOS3_OK)
        rc = io_fail(g_fly.tmp_dir, errno);
    if (rc) {
        remove_frames(g_fly.tmp_dir, paths, r->frames);
        forget_dir();
        for (int f = 0; f < r->frames; f++)
            free(paths[f]);
        free(paths);
        return rc;
    }
    *tmp_paths = paths;
    return COSMOS3_OK;
}

static void free_paths(char **p, int n) {
    for (int i = 0; i < n; i++)
        free(p[i]);
    free(p);
}

static int write_folder(const c3_output *o, const cosmos3_result *r, const c3_media_meta *m,
                        path_list *out) {
    char *target = xstrdup(o->path);
    size_t L = strlen(target);
    while (L > 1 && target[L - 1] == '/')
        target[--L] = 0;
    char **tmp;
    int rc0 = frames_to_tmp(r, m, target, &tmp);
    if (rc0) {
        free(target);
        return rc0;
    }
    int rc = COSMOS3_OK;
    char *sound_tmp = NULL;
    if (r->sound) { /* sound.wav beside the frames, in the same temporary folder */
        uint8_t *data = NULL;
        size_t n = 0;
        sound_tmp = c3_path_join(g_fly.tmp_dir, OUT_SOUND_NAME);
        rc = wav_encode(r->sound, r->sound_channels, r->sound_samples, r->sound_rate, o->wav_f32,
                        &data, &n);
        if (rc == COSMOS3_OK) rc = write_new(sound_tmp, data, n);
        free(data);
    }
    struct stat st;
    if (rc == COSMOS3_OK && stat(target, &st) != 0) {
        if (c3_place_file(g_fly.tmp_dir, target, false) != 0) rc = io_fail(target, errno);
    } else if (rc == COSMOS3_OK) {
        /* replace the old folder as a whole: swap, then remove the old frames */
        int nf;
        bool other;
        rc = folder_state(target, &nf, &other);
        if (rc == COSMOS3_OK && other)
            rc = c3_fail(COSMOS3_EOUTPUT,
                         "%s holds other files than frames now; nothing was replaced", target);
        if (rc == COSMOS3_OK && nf && !o->overwrite)
            rc = c3_fail(COSMOS3_EOUTPUT, "%s already holds frames; use --overwrite or another -o",
                         target);
        if (rc == COSMOS3_OK &&
            renameat2(AT_FDCWD, g_fly.tmp_dir, AT_FDCWD, target, RENAME_EXCHANGE) != 0)
            rc = io_fail(target, errno);
        if (rc == COSMOS3_OK) { /* the temporary name now holds the old frames */
            DIR *d = opendir(g_fly.tmp_dir);
            struct dirent *e;
            while (d && (e = readdir(d)))
                if (is_frame_name(e->d_name)) {
                    char *fp = c3_path_join(g_fly.tmp_dir, e->d_name);
                    unlink(fp);
                    free(fp);
                }
            if (d) closedir(d);
            rmdir(g_fly.tmp_dir);
        }
    }
    if (rc && sound_tmp) unlink(sound_tmp);
    free(sound_tmp);
    if (rc) remove_frames(g_fly.tmp_dir, tmp, r->frames);
    forget_dir();
    free_paths(tmp, r->frames);
    if (rc == COSMOS3_OK) {
        char *d = dir_of(target);
        fsync_dir(d);
        free(d);
        for (int f = 0; f < r->frames; f++) {
            char name[64];
            snprintf(name, sizeof name, OUT_FRAME_FMT, f);
            char *fp = c3_path_join(target, name);
            add_path(out, fp);
            free(fp);
        }
        if (r->sound) {
            char *fp = c3_path_join(target, OUT_SOUND_NAME);
            add_path(out, fp);
            free(fp);
        }
    }
    free(target);
    return rc;
}

static char *pattern_path(const char *pat, int k) {
    size_t n = strlen(pat) + 32;
    char *b = xmalloc(n);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(b, n, pat, k);
#pragma GCC diagnostic pop
    return b;
}

static int write_pattern(const c3_output *o, const cosmos3_result *r, const c3_media_meta *m,
                         path_list *out) {
    int F = r->frames;
    char **final = xcalloc((size_t)F, sizeof *final);
    for (int f = 0; f < F; f++)
        final[f] = pattern_path(o->path, f);
    int rc = COSMOS3_OK;
    for (int f = 0; f < F && !o->overwrite; f++)
        if (c3_file_exists(final[f])) {
            rc = c3_fail(COSMOS3_EOUTPUT, "%s already exists; use --overwrite or another -o",
                         final[f]);
            break;
        }
    char **tmp = NULL;
    if (rc == COSMOS3_OK) rc = frames_to_tmp(r, m, final[0], &tmp);
    if (rc == COSMOS3_OK) {
        g_fly.placed = final;
        for (int f = 0; f < F && rc == COSMOS3_OK; f++) {
            if (c3_place_file(tmp[f], final[f], o->overwrite) != 0)
                rc = errno == EEXIST
                         ? c3_fail(COSMOS3_EOUTPUT,
                                   "%s already exists; use --overwrite or another -o", final[f])
                         : io_fail(final[f], errno);
            else
                g_fly.nplaced = f + 1;
        }
        if (rc) /* all or nothing: take back the frames already placed */
            for (int f = 0; f < g_fly.nplaced; f++)
                unlink(final[f]);
        g_fly.nplaced = 0;
        g_fly.placed = NULL;
        remove_frames(g_fly.tmp_dir, tmp, F);
        forget_dir();
        free_paths(tmp, F);
    }
    if (rc == COSMOS3_OK) {
        char *d = dir_of(final[0]);
        fsync_dir(d);
        free(d);
        for (int f = 0; f < F; f++)
            add_path(out, final[f]);
    }
    free_paths(final, F);
    return rc;
}

int output_write(const c3_output *o, const cosmos3_result *r, const c3_media_meta *m, char ***paths,
                 int *npaths) {
    return output_write_timed(o, r, m, paths, npaths, NULL);
}

int output_write_timed(const c3_output *o, const cosmos3_result *r, const c3_media_meta *m,
                       char ***paths, int *npaths, double *t_encode) {
    path_list out = {0};
    if (t_encode) *t_encode = 0;
    *paths = NULL;
    *npaths = 0;
    int rc = COSMOS3_OK;
    if (o->kind == OUT_WAV) { /* the sound alone */
        if (!r->sound) return c3_fail(COSMOS3_EFAIL, "the result holds no sound to write");
        uint8_t *data = NULL;
        size_t n = 0;
        rc = wav_encode(r->sound, r->sound_channels, r->sound_samples, r->sound_rate, o->wav_f32,
                        &data, &n);
        if (rc == COSMOS3_OK) rc = output_write_file(o->path, data, n, o->overwrite);
        free(data);
        if (rc) return rc;
        add_path(&out, o->path);
        *paths = out.v;
        *npaths = out.n;
        return COSMOS3_OK;
    }
    if (!r->rgb) return c3_fail(COSMOS3_EFAIL, "the result holds no frames to write");
    if (o->kind == OUT_FOLDER) {
        rc = write_folder(o, r, m, &out);
    } else if (o->kind == OUT_PATTERN) {
        rc = write_pattern(o, r, m, &out);
    } else {
        uint8_t *data = NULL;
        size_t n = 0;
        double te = c3_now();
        rc = output_encode(o->fmt, r, m, &o->media, &data, &n);
        if (t_encode) *t_encode = c3_now() - te;
        if (rc == COSMOS3_OK && o->kind == OUT_STDOUT) {
            rc = write_stdout(data, n);
            if (rc == COSMOS3_OK) add_path(&out, "-");
        } else if (rc == COSMOS3_OK) {
            char *path = NULL, name[64];
            struct stat st;
            c3_output d = *o;
            d.seed = (int64_t)r->seed;
            default_name(&d, name, sizeof name);
            if (!o->path) {
                path = xstrdup(name);
            } else if (stat(o->path, &st) == 0 && S_ISDIR(st.st_mode)) {
                path = c3_path_join(o->path, name);
            } else if (ends_with_slash(o->path)) {
                rc = c3_mkdir_p(o->path);
                path = c3_path_join(o->path, name);
            } else if (strchr(o->path, '%')) { /* a picture by pattern: the first free number */
                for (int k = 0; k < 1000000; k++) {
                    free(path);
                    path = pattern_path(o->path, k);
                    if (!c3_file_exists(path)) break;
                }
            } else {
                path = xstrdup(o->path);
            }
            if (rc == COSMOS3_OK) rc = output_write_file(path, data, n, o->overwrite);
            if (rc == COSMOS3_OK) add_path(&out, path);
            free(path);
        }
        free(data);
    }
    if (rc) {
        for (int i = 0; i < out.n; i++)
            free(out.v[i]);
        free(out.v);
        return rc;
    }
    *paths = out.v;
    *npaths = out.n;
    return COSMOS3_OK;
}
