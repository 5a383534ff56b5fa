/* png_io.c - PNG output with text metadata (libpng), and reading it back.
 *
 * Encoding to memory (png_encode_mem) serves the server, `-o -` and the
 * output module's atomic writes; reading works on bytes in memory too.
 *
 * Writing: the image goes to "PATH.tmp.XXXXXX" in the same folder (mkstemp),
 * is flushed and fsync'ed, then renamed over PATH. Without overwrite the
 * rename refuses to replace a file that appeared meanwhile (RENAME_NOREPLACE,
 * or link+unlink where the filesystem lacks it). On any error the temporary
 * file is removed, so PATH is either the complete new image or untouched.
 *
 * libpng reports errors by longjmp; every libpng call sits in a function that
 * has its own setjmp and turns the error into a c3_fail() message.
 */
#include "png_io.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define PNG_KEY_MAX 79              /* PNG spec: keywords are 1..79 bytes */
#define PNG_ITXT_COMPRESS_MIN 1024  /* compress iTXt text longer than this */
#define PNG_READ_MAX_SIDE (1 << 16) /* refuse to decode larger images */
#define PNG_MODE_FILE 0644
/* The image data: Sub filter, zlib level 1 with Z_RLE (runs only: on a
 * 1360x768 picture 3.0x faster than the default strategy on noise, 1.25x on
 * a smooth one, and 19 % smaller there; bench/NOTES.md, session 8 super). Images of at
 * least PNG_STRIPS_MIN_BYTES are deflated in strips of rows, one thread of
 * their own each (not OpenMP's pool: frame writers call this from threads,
 * and a forked child would hang in it), and written as IDAT chunks of at
 * most PNG_IDAT_BYTES. */
#define PNG_ZLEVEL 1
#define PNG_BPP 3                        /* RGB8: the Sub filter's byte distance */
#define PNG_STRIPS_MIN_BYTES (256 << 10) /* smaller images: libpng deflates */
#define PNG_STRIPS_MAX 16
#define PNG_STRIP_MIN_ROWS 16
#define PNG_IDAT_BYTES (1 << 20)
#define PNG_ZLIB_HEADER_1 0x78 /* CMF: deflate, 32 KiB window */
#define PNG_ZLIB_HEADER_2 0x01 /* FLG: level 1, no dictionary (0x7801 % 31 == 0) */

/* --------------------------------------------------------- libpng errors */

typedef struct {
    char msg[256];
} png_errctx;

static void on_png_error(png_structp png, png_const_charp msg) {
    png_errctx *e = png_get_error_ptr(png);
    if (e) snprintf(e->msg, sizeof e->msg, "%s", msg ? msg : "libpng error");
    png_longjmp(png, 1);
}
static void on_png_warning(png_structp png, png_const_charp msg) {
    (void)png; /* the engine never prints; warnings are not errors */
    (void)msg;
}

/* ------------------------------------------------------------- text checks */

static bool is_ascii(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return false;
    return true;
}

/* Well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
static bool is_utf8(const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s;
        int n;
        uint32_t cp, min;
        if (c < 0x80) {
            s++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (s[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        s += n + 1;
    }
    return true;
}

/* A PNG keyword: 1..79 printable Latin-1 characters (we allow ASCII only), no
 * leading, trailing or double spaces. */
static int check_key(const char *key) {
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n > PNG_KEY_MAX)
        return c3_fail(COSMOS3_EINPUT, "PNG text key \"%s\" must be 1 to %d characters",
                       key ? key : "", PNG_KEY_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x20 || c > 0x7e || (c == ' ' && (i == 0 || i == n - 1 || key[i + 1] == ' ')))
            return c3_fail(
                COSMOS3_EINPUT,
                "PNG text key \"%s\" must be printable ASCII without leading, trailing or "
                "double spaces",
                key);
    }
    return COSMOS3_OK;
}

/* ----------------------------------------------------------------- writing */

/* A growing buffer that libpng writes into or reads from. */
typedef struct {
    uint8_t *data;
    size_t len, cap, pos;
} png_mem;

static void mem_write(png_structp png, png_bytep buf, png_size_t n) {
    png_mem *m = png_get_io_ptr(png);
    if (m->len + n > m->cap) {
        m->cap = C3_MAX(m->cap * 2, m->len + n + 4096);
        m->data = xrealloc(m->data, m->cap);
    }
    memcpy(m->data + m->len, buf, n);
    m->len += n;
}
static void mem_flush(png_structp png) {
    (void)png;
}
static void mem_read(png_structp png, png_bytep buf, png_size_t n) {
    png_mem *m = png_get_io_ptr(png);
    if (n > m->len - m->pos) png_error(png, "unexpected end of data");
    memcpy(buf, m->data + m->pos, n);
    m->pos += n;
}

/* --------------------------------------------- the image data in strips */

/* One strip of filtered rows, deflated on its own: raw deflate (no header),
 * ended by a sync flush (byte-aligned, not final) unless it is the last,
 * which finishes the stream; so the strips, in order, are one deflate
 * stream, and the zlib stream around them takes the adler32 combined. */
typedef struct {
    const uint8_t *rgb; /* the strip's first row of the picture */
    size_t row;         /* bytes of one picture row */
    int rows;
    uint8_t *in; /* its filtered rows, [rows, 1 + row] */
    size_t n;
    bool last;
    uint8_t *out;
    size_t len;
    uLong adler;
    int zrc; /* Z_OK, or the zlib error */
} png_strip;

/* One strip: its rows filtered (Sub) into st->in, then deflated. */
static void *deflate_strip(void *arg) {
    png_strip *st = arg;
    for (int y = 0; y < st->rows; y++) {
        const uint8_t *r = st->rgb + (size_t)y * st->row;
        uint8_t *o = st->in + (size_t)y * (st->row + 1);
        o[0] = PNG_FILTER_VALUE_SUB;
        for (size_t i = 0; i < PNG_BPP && i < st->row; i++)
            o[1 + i] = r[i];
        for (size_t i = PNG_BPP; i < st->row; i++)
            o[1 + i] = (uint8_t)(r[i] - r[i - PNG_BPP]);
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    st->adler = adler32(adler32(0L, Z_NULL, 0), st->in, (uInt)st->n);
    st->zrc = deflateInit2(&z, PNG_ZLEVEL, Z_DEFLATED, -MAX_WBITS, 8, Z_RLE);
    if (st->zrc != Z_OK) return NULL;
    size_t cap = deflateBound(&z, (uLong)st->n) + 64; /* + the sync flush's empty block */
    st->out = xmalloc(cap);
    z.next_in = (Bytef *)st->in;
    z.avail_in = (uInt)st->n;
    z.next_out = st->out;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, st->last ? Z_FINISH : Z_SYNC_FLUSH);
    bool done = st->last ? rc == Z_STREAM_END : rc == Z_OK && z.avail_in == 0 && z.avail_out > 0;
    st->zrc = done ? Z_OK : rc == Z_OK ? Z_BUF_ERROR : rc;
    st->len = cap - z.avail_out;
    deflateEnd(&z);
    return NULL;
}

/* The zlib stream of rgb [H, W, 3] as PNG image data (each row: filter byte
 * 1, Sub), deflated in strips in parallel: *out malloc'd, *n bytes. The
 * bytes differ from libpng's own deflate; what they decode to does not. */
static int deflate_rows(const uint8_t *rgb, int W, int H, uint8_t **out, size_t *n) {
    size_t row = (size_t)W * PNG_BPP, frow = row + 1;
    uint8_t *f = xmalloc(frow * (size_t)H);
    /* threads of its own, not OpenMP's pool: frame writers call this from
       threads, and a pool would hang a forked child */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int ns =
        C3_MIN(C3_MIN((int)C3_MAX(1, cores), PNG_STRIPS_MAX), C3_MAX(1, H / PNG_STRIP_MIN_ROWS));
    png_strip st[PNG_STRIPS_MAX];
    pthread_t th[PNG_STRIPS_MAX];
    bool started[PNG_STRIPS_MAX] = {false};
    for (int i = 0; i < ns; i++) {
        int y0 = (int)((int64_t)H * i / ns), y1 = (int)((int64_t)H * (i + 1) / ns);
        st[i] = (png_strip){.rgb = rgb + (size_t)y0 * row,
                            .row = row,
                            .rows = y1 - y0,
                            .in = f + (size_t)y0 * frow,
                            .n = (size_t)(y1 - y0) * frow,
                            .last = i == ns - 1};
    }
    for (int i = 1; i < ns; i++) /* a thread that cannot start: its strip runs here */
        started[i] = pthread_create(&th[i], NULL, deflate_strip, &st[i]) == 0;
    for (int i = 0; i < ns; i++)
        if (!started[i]) deflate_strip(&st[i]);
    for (int i = 1; i < ns; i++)
        if (started[i]) pthread_join(th[i], NULL);
    int rc = COSMOS3_OK;
    size_t total = 2 + 4;
    for (int i = 0; i < ns; i++) {
        if (st[i].zrc != Z_OK && rc == COSMOS3_OK)
            rc = c3_fail(COSMOS3_EFAIL, "PNG: zlib could not deflate the image data: %s",
                         st[i].zrc == Z_MEM_ERROR ? "out of memory" : zError(st[i].zrc));
        total += st[i].len;
    }
    uint8_t *z = rc == COSMOS3_OK ? xmalloc(total) : NULL;
    if (z) {
        size_t pos = 0;
        z[pos++] = PNG_ZLIB_HEADER_1;
        z[pos++] = PNG_ZLIB_HEADER_2;
        uLong ad = st[0].adler;
        for (int i = 0; i < ns; i++) {
            memcpy(z + pos, st[i].out, st[i].len);
            pos += st[i].len;
            if (i) ad = adler32_combine(ad, st[i].adler, (z_off_t)st[i].n);
        }
        for (int k = 3; k >= 0; k--)
            z[pos++] = (uint8_t)(ad >> (8 * k)); /* big-endian */
        *out = z;
        *n = pos;
    }
    for (int i = 0; i < ns; i++)
        free(st[i].out);
    free(f);
    return rc;
}

/* Encode into an open stream (fp) or into memory (mem). All libpng state
 * lives here, under setjmp. */
static int encode_with(FILE *fp, png_mem *mem, const char *path, const uint8_t *rgb, int W, int H,
                       const c3_png_text *texts, int ntexts, const uint8_t *const idat,
                       const size_t idat_len);
static int encode_png(FILE *fp, png_mem *mem, const char *path, const uint8_t *rgb, int W, int H,
                      const c3_png_text *texts, int ntexts) {
    /* the image data of a large picture, deflated in strips before libpng starts */
    uint8_t *idat = NULL;
    size_t idat_len = 0;
    if ((size_t)W * (size_t)H * PNG_BPP >= PNG_STRIPS_MIN_BYTES)
        APP_TRY(deflate_rows(rgb, W, H, &idat, &idat_len));
    int rc = encode_with(fp, mem, path, rgb, W, H, texts, ntexts, idat, idat_len);
    free(idat);
    return rc;
}
/* idat: the image data's zlib stream (deflate_rows), or NULL: libpng deflates the rows. */
static int encode_with(FILE *fp, png_mem *mem, const char *path, const uint8_t *rgb, int W, int H,
                       const c3_png_text *texts, int ntexts, const uint8_t *const idat,
                       const size_t idat_len) {
    png_errctx err = {{0}};
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, on_png_error, on_png_warning);
    if (!png)
        return c3_fail(COSMOS3_EFAIL, "%s: cannot create the PNG writer (out of memory?)", path);
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return c3_fail(COSMOS3_EFAIL, "%s: cannot create the PNG info (out of memory?)", path);
    }
    /* allocated before setjmp so a longjmp cannot leak them */
    png_text *pt = xcalloc((size_t)(ntexts > 0 ? ntexts : 1), sizeof *pt);
    png_bytep *rows = xmalloc((size_t)H * sizeof *rows);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(pt);
        free(rows);
        return c3_fail(COSMOS3_EOUTPUT, "%s: PNG encoding failed: %s", path, err.msg);
    }
    if (mem)
        png_set_write_fn(png, mem, mem_write, mem_flush);
    else
        png_init_io(png, fp);
    /* small pictures: libpng's deflate with the same settings as the strips */
    png_set_compression_level(png, PNG_ZLEVEL);
    png_set_compression_strategy(png, Z_RLE);
    png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB);
    png_set_IHDR(png, info, (png_uint_32)W, (png_uint_32)H, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    for (int i = 0; i < ntexts; i++) {
        const char *t = texts[i].text ? texts[i].text : "";
        pt[i].key = (png_charp)texts[i].key;
        pt[i].text = (png_charp)t;
        if (is_ascii(t) && !texts[i].force_itxt) {
            pt[i].compression = PNG_TEXT_COMPRESSION_NONE; /* tEXt */
            pt[i].text_length = strlen(t);
        } else {
            pt[i].compression = strlen(t) > PNG_ITXT_COMPRESS_MIN ? PNG_ITXT_COMPRESSION_zTXt
                                                                  : PNG_ITXT_COMPRESSION_NONE;
            pt[i].itxt_length = strlen(t);
            pt[i].lang = (png_charp) "";
            pt[i].lang_key = (png_charp) "";
        }
    }
    if (ntexts > 0) png_set_text(png, info, pt, ntexts);
    png_write_info(png, info); /* text chunks go before IDAT */
    if (idat) { /* the strips' stream as IDAT chunks, then IEND (no chunk follows the data) */
        for (size_t off = 0; off < idat_len; off += PNG_IDAT_BYTES)
            png_write_chunk(png, (png_const_bytep) "IDAT", idat + off,
                            C3_MIN((size_t)PNG_IDAT_BYTES, idat_len - off));
        png_write_chunk(png, (png_const_bytep) "IEND", NULL, 0);
        png_write_flush(png);
    } else {
        for (int y = 0; y < H; y++)
            rows[y] = (png_bytep)(rgb + (size_t)y * (size_t)W * 3);
        png_write_image(png, rows);
        png_write_end(png, NULL);
    }
    png_destroy_write_struct(&png, &info);
    free(pt);
    free(rows);
    return COSMOS3_OK;
}

static int check_args(const char *path, int W, int H, const c3_png_text *texts, int ntexts) {
    if (W <= 0 || H <= 0 || W > PNG_READ_MAX_SIDE || H > PNG_READ_MAX_SIDE)
        return c3_fail(COSMOS3_EINPUT, "%s: image size %dx%d is out of range (1..%d per side)",
                       path, W, H, PNG_READ_MAX_SIDE);
    if (ntexts < 0 || (ntexts > 0 && !texts))
        return c3_fail(COSMOS3_EINPUT, "%s: bad text chunk list", path);
    for (int i = 0; i < ntexts; i++) {
        APP_TRY(check_key(texts[i].key));
        if (texts[i].text && !is_utf8(texts[i].text))
            return c3_fail(COSMOS3_EINPUT, "%s: text for PNG key \"%s\" is not valid UTF-8", path,
                           texts[i].key);
    }
    return COSMOS3_OK;
}

int png_encode_mem(const uint8_t *rgb, int W, int H, const c3_png_text *texts, int ntexts,
                   uint8_t **out, size_t *n) {
    APP_TRY(check_args("PNG", W, H, texts, ntexts));
    png_mem m = {0};
    int rc = encode_png(NULL, &m, "PNG", rgb, W, H, texts, ntexts);
    if (rc) {
        free(m.data);
        return rc;
    }
    *out = m.data;
    *n = m.len;
    return COSMOS3_OK;
}

int png_write(const char *path, const uint8_t *rgb, int W, int H, const c3_png_text *texts,
              int ntexts, bool overwrite) {
    APP_TRY(check_args(path, W, H, texts, ntexts));
    if (!overwrite && c3_file_exists(path))
        return c3_fail(COSMOS3_EOUTPUT, "%s exists; use --overwrite to replace it", path);

    size_t n = strlen(path) + 16;
    char *tmp = xmalloc(n);
    snprintf(tmp, n, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int rc = c3_fail(COSMOS3_EOUTPUT, "cannot write %s: %s (is the folder there and writable?)",
                         path, strerror(errno));
        free(tmp);
        return rc;
    }
    FILE *fp = fdopen(fd, "wb");
    if (!fp) {
        int rc = c3_fail(COSMOS3_EOUTPUT, "cannot write %s: %s", path, strerror(errno));
        close(fd);
        unlink(tmp);
        free(tmp);
        return rc;
    }
    int rc = encode_png(fp, NULL, path, rgb, W, H, texts, ntexts);
    if (rc == COSMOS3_OK && (fflush(fp) != 0 || ferror(fp) || fsync(fd) != 0))
        rc = c3_fail(COSMOS3_EOUTPUT, "cannot write %s: %s", path, strerror(errno));
    if (rc == COSMOS3_OK && fchmod(fd, PNG_MODE_FILE) != 0)
        rc = c3_fail(COSMOS3_EOUTPUT, "cannot write %s: chmod: %s", path, strerror(errno));
    if (fclose(fp) != 0 && rc == COSMOS3_OK)
        rc = c3_fail(COSMOS3_EOUTPUT, "cannot write %s: %s", path, strerror(errno));
    if (rc == COSMOS3_OK && c3_place_file(tmp, path, overwrite) != 0) {
        if (errno == EEXIST)
            rc = c3_fail(COSMOS3_EOUTPUT, "%s exists; use --overwrite to replace it", path);
        else
            rc = c3_fail(COSMOS3_EOUTPUT, "cannot write %s: %s", path, strerror(errno));
    }
    if (rc != COSMOS3_OK) unlink(tmp);
    free(tmp);
    return rc;
}

/* ----------------------------------------------------------------- reading */

typedef struct {
    /* outputs, owned by the caller on success */
    uint8_t *rgb;
    int W, H;
    char **keys, **vals;
    int n;
} png_decoded;

static void free_decoded(png_decoded *d) {
    free(d->rgb);
    for (int i = 0; i < d->n; i++) {
        free(d->keys[i]);
        free(d->vals[i]);
    }
    free(d->keys);
    free(d->vals);
    memset(d, 0, sizeof *d);
}

/* Decode a whole PNG held in memory (pixels as RGB8 and every text chunk).
 * The outputs are written through a volatile pointer so they survive a
 * longjmp. */
static int decode_png(const char *path, const uint8_t *data, size_t len, png_decoded *volatile out,
                      bool want_pixels) {
    if (len < 8 || png_sig_cmp(data, 0, 8) != 0)
        return c3_fail(COSMOS3_EINPUT, "%s is not a PNG file", path);
    png_errctx err = {{0}};
    png_mem m = {.data = (uint8_t *)data, .len = len, .pos = 8};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, on_png_error, on_png_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        if (png) png_destroy_read_struct(&png, NULL, NULL);
        return c3_fail(COSMOS3_EFAIL, "%s: cannot create the PNG reader (out of memory?)", path);
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free_decoded((png_decoded *)out);
        return c3_fail(COSMOS3_EINPUT, "%s: invalid or truncated PNG: %s", path, err.msg);
    }
    png_set_read_fn(png, &m, mem_read);
    png_set_sig_bytes(png, 8);
    png_set_user_limits(png, PNG_READ_MAX_SIDE, PNG_READ_MAX_SIDE);
    int transforms = PNG_TRANSFORM_STRIP_16 | PNG_TRANSFORM_STRIP_ALPHA | PNG_TRANSFORM_PACKING |
                     PNG_TRANSFORM_EXPAND | PNG_TRANSFORM_GRAY_TO_RGB;
    png_read_png(png, info, transforms, NULL);
    if (want_pixels) {
        int W = (int)png_get_image_width(png, info), H = (int)png_get_image_height(png, info);
        int ch = png_get_channels(png, info);
        if (ch != 3 || png_get_bit_depth(png, info) != 8) {
            png_destroy_read_struct(&png, &info, NULL);
            return c3_fail(COSMOS3_EINPUT, "%s: cannot convert this PNG to 8-bit RGB (%d channels)",
                           path, ch);
        }
        png_bytepp rows = png_get_rows(png, info);
        uint8_t *rgb = xmalloc((size_t)W * (size_t)H * 3);
        for (int y = 0; y < H; y++)
            memcpy(rgb + (size_t)y * (size_t)W * 3, rows[y], (size_t)W * 3);
        out->rgb = rgb;
        out->W = W;
        out->H = H;
    }
    png_textp txt = NULL;
    int nt = png_get_text(png, info, &txt, NULL);
    if (nt > 0) {
        char **keys = xcalloc((size_t)nt, sizeof *keys), **vals = xcalloc((size_t)nt, sizeof *vals);
        for (int i = 0; i < nt; i++) {
            size_t tl = txt[i].compression >= PNG_ITXT_COMPRESSION_NONE ? txt[i].itxt_length
                                                                        : txt[i].text_length;
            keys[i] = xstrdup(txt[i].key ? txt[i].key : "");
            vals[i] = xmalloc(tl + 1);
            if (tl) memcpy(vals[i], txt[i].text, tl);
            vals[i][tl] = 0;
        }
        out->keys = keys;
        out->vals = vals;
        out->n = nt;
    }
    png_destroy_read_struct(&png, &info, NULL);
    return COSMOS3_OK;
}

static int decode_png_file(const char *path, png_decoded *d, bool want_pixels) {
    char *data;
    size_t len;
    APP_TRY(c3_read_file(path, &data, &len));
    int rc = decode_png(path, (const uint8_t *)data, len, d, want_pixels);
    free(data);
    return rc;
}

static void take_texts(png_decoded *d, char ***keys, char ***vals, int *n) {
    *keys = d->keys;
    *vals = d->vals;
    *n = d->n;
    d->keys = d->vals = NULL;
    d->n = 0;
}

int png_read_texts_mem(const uint8_t *data, size_t len, const char *name, char ***keys,
                       char ***vals, int *n) {
    png_decoded d = {0};
    APP_TRY(decode_png(name, data, len, &d, false));
    take_texts(&d, keys, vals, n);
    return COSMOS3_OK;
}

int png_read_rgb_mem(const uint8_t *data, size_t len, const char *name, uint8_t **rgb, int *W,
                     int *H) {
    png_decoded d = {0};
    APP_TRY(decode_png(name, data, len, &d, true));
    *rgb = d.rgb;
    *W = d.W;
    *H = d.H;
    d.rgb = NULL;
    free_decoded(&d);
    return COSMOS3_OK;
}

int png_read_texts(const char *path, char ***keys, char ***vals, int *n) {
    png_decoded d = {0};
    APP_TRY(decode_png_file(path, &d, false));
    take_texts(&d, keys, vals, n);
    return COSMOS3_OK;
}

int png_read_rgb(const char *path, uint8_t **rgb, int *W, int *H) {
    png_decoded d = {0};
    APP_TRY(decode_png_file(path, &d, true));
    *rgb = d.rgb;
    *W = d.W;
    *H = d.H;
    d.rgb = NULL;
    free_decoded(&d);
    return COSMOS3_OK;
}
