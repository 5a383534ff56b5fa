/* test_png.c - PNG writer/reader: pixel and text round trips, chunk types,
 * refusal to overwrite, unwritable folders, libpng errors as values, large
 * pictures (deflated in parallel strips) byte for byte with a valid zlib
 * stream, and no temporary file left behind. */
#include <sys/stat.h>
#include <zlib.h>

#include "png_io.h"
#include "test_util.h"

#define W_IMG 37
#define H_IMG 23
#define LONG_REPEAT 200 /* long enough to be written as compressed iTXt */

/* Find a chunk of `type` whose data starts with "key\0"; return its data
 * (after the key's NUL) and length, or NULL. */
static const unsigned char *find_chunk(const unsigned char *buf, size_t n, const char *type,
                                       const char *key, size_t *len) {
    size_t pos = 8, kl = strlen(key);
    while (pos + 12 <= n) {
        size_t cl = ((size_t)buf[pos] << 24) | ((size_t)buf[pos + 1] << 16) |
                    ((size_t)buf[pos + 2] << 8) | buf[pos + 3];
        if (pos + 12 + cl > n) return NULL;
        const unsigned char *d = buf + pos + 8;
        if (memcmp(buf + pos + 4, type, 4) == 0 && cl > kl && memcmp(d, key, kl) == 0 &&
            d[kl] == 0) {
            *len = cl - kl - 1;
            return d + kl + 1;
        }
        pos += 12 + cl;
    }
    return NULL;
}

static const char *lookup(char **keys, char **vals, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(keys[i], key) == 0) return vals[i];
    return NULL;
}

int main(void) {
    char dir[] = "/tmp/c3_test_png_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char path[512], path2[512];
    snprintf(path, sizeof path, "%s/out.png", dir);

    /* an image with every byte value and no symmetry */
    uint8_t *rgb = malloc(W_IMG * H_IMG * 3), *rgb2 = malloc(W_IMG * H_IMG * 3);
    uint32_t s = 12345;
    for (int i = 0; i < W_IMG * H_IMG * 3; i++) {
        s = s * 1664525u + 1013904223u;
        rgb[i] = (uint8_t)(i < 256 ? (uint32_t)i : s >> 24);
        rgb2[i] = (uint8_t)(255 - rgb[i]);
    }
    const char *fox =
        "Ein Fuchs \xe2\x80\x94 \xe7\x8b\x90 \xf0\x9f\xa6\x8a"; /* Ein Fuchs — 狐 🦊 */
    char *longtxt = malloc(strlen(fox) * LONG_REPEAT + 1);
    longtxt[0] = 0;
    for (int i = 0; i < LONG_REPEAT; i++)
        strcat(longtxt, fox);
    const char *params =
        "a red fox\nNegative prompt: blurry\nSteps: 6, CFG scale: 7, Seed: 42, Size: 64x64";
    c3_png_text texts[] = {
        {"parameters", params, false},   {"cosmos3", fox, false}, {"long", longtxt, false},
        {"forced", "plain ascii", true}, {"empty", "", false},
    };
    int nt = (int)C3_ARRAY_LEN(texts);

    /* 1. write, read pixels and texts back */
    T_CHECK(png_write(path, rgb, W_IMG, H_IMG, texts, nt, false) == C3_OK, "%s", c3_errmsg());
    uint8_t *back = NULL;
    int W = 0, H = 0;
    T_CHECK(png_read_rgb(path, &back, &W, &H) == C3_OK, "%s", c3_errmsg());
    T_CHECK(W == W_IMG && H == H_IMG, "size %dx%d", W, H);
    if (back && W == W_IMG && H == H_IMG)
        T_CHECK(memcmp(back, rgb, W_IMG * H_IMG * 3) == 0, "pixels differ after round trip");
    free(back);
    char **keys = NULL, **vals = NULL;
    int n = 0;
    T_CHECK(png_read_texts(path, &keys, &vals, &n) == C3_OK, "%s", c3_errmsg());
    T_CHECK(n == nt, "read %d text chunks, wrote %d", n, nt);
    for (int i = 0; i < nt; i++) {
        const char *v = lookup(keys, vals, n, texts[i].key);
        T_CHECK(v && strcmp(v, texts[i].text) == 0, "text %s: got \"%.40s\"", texts[i].key,
                v ? v : "(none)");
    }
    for (int i = 0; i < n; i++) {
        free(keys[i]);
        free(vals[i]);
    }
    free(keys);
    free(vals);

    /* 2. chunk types: tEXt for ASCII, iTXt (uncompressed / compressed) otherwise */
    char *file;
    size_t flen, cl;
    T_CHECK(c3_read_file(path, &file, &flen) == C3_OK, "%s", c3_errmsg());
    const unsigned char *buf = (const unsigned char *)file, *d;
    d = find_chunk(buf, flen, "tEXt", "parameters", &cl);
    T_CHECK(d && cl == strlen(params) && memcmp(d, params, cl) == 0, "parameters is a tEXt chunk");
    d = find_chunk(buf, flen, "iTXt", "cosmos3", &cl);
    /* iTXt data after the key: flag, method, lang\0, translated key\0, text */
    T_CHECK(d && cl >= 4 && d[0] == 0 && d[2] == 0 && d[3] == 0 && cl - 4 == strlen(fox) &&
                memcmp(d + 4, fox, cl - 4) == 0,
            "cosmos3 is an uncompressed iTXt chunk holding the UTF-8 bytes");
    d = find_chunk(buf, flen, "iTXt", "long", &cl);
    T_CHECK(d && d[0] == 1 && cl < strlen(longtxt) / 4,
            "long text is a compressed iTXt chunk (%zu bytes)", cl);
    T_CHECK(find_chunk(buf, flen, "iTXt", "forced", &cl) != NULL, "force_itxt gives iTXt");
    T_CHECK(!find_chunk(buf, flen, "tEXt", "cosmos3", &cl), "non-ASCII text not in tEXt");
    /* text chunks come before the image data */
    const char *idat = memmem(file, flen, "IDAT", 4), *itxt = memmem(file, flen, "iTXt", 4);
    T_CHECK(idat && itxt && itxt < idat, "text chunks precede IDAT");
    free(file);

    /* 3. refuse to overwrite; the old file stays */
    T_CHECK(png_write(path, rgb2, W_IMG, H_IMG, NULL, 0, false) == C3_EOUTPUT, "overwrite refused");
    T_CHECK(strstr(c3_errmsg(), "exists") && strstr(c3_errmsg(), "--overwrite"), "message: %s",
            c3_errmsg());
    T_CHECK(png_read_rgb(path, &back, &W, &H) == C3_OK && memcmp(back, rgb, W_IMG * H_IMG * 3) == 0,
            "refused write left the old image intact");
    free(back);
    T_CHECK(png_write(path, rgb2, W_IMG, H_IMG, NULL, 0, true) == C3_OK, "%s", c3_errmsg());
    T_CHECK(png_read_rgb(path, &back, &W, &H) == C3_OK &&
                memcmp(back, rgb2, W_IMG * H_IMG * 3) == 0,
            "overwrite replaced the image");
    free(back);
    T_CHECK(png_read_texts(path, &keys, &vals, &n) == C3_OK && n == 0, "no texts: %d", n);
    free(keys);
    free(vals);

    /* 4. unwritable targets */
    T_CHECK(png_write("/nonexistent-c3-folder/x.png", rgb, W_IMG, H_IMG, NULL, 0, false) ==
                C3_EOUTPUT,
            "missing folder");
    T_CHECK(strstr(c3_errmsg(), "/nonexistent-c3-folder/x.png") != NULL,
            "message names the path: %s", c3_errmsg());
    if (geteuid() != 0) { /* root can write into a read-only folder */
        char ro[300];
        snprintf(ro, sizeof ro, "%s/ro", dir);
        mkdir(ro, 0555);
        snprintf(path2, sizeof path2, "%s/x.png", ro);
        T_CHECK(png_write(path2, rgb, W_IMG, H_IMG, NULL, 0, false) == C3_EOUTPUT,
                "read-only folder");
        rmdir(ro);
    }
    /* rename onto a folder fails after the temp file was written */
    snprintf(path2, sizeof path2, "%s/adir.png", dir);
    mkdir(path2, 0755);
    T_CHECK(png_write(path2, rgb, W_IMG, H_IMG, NULL, 0, true) == C3_EOUTPUT,
            "rename over a folder fails");
    rmdir(path2);

    /* 5. bad arguments */
    c3_png_text badkey = {"bad key ", "x", false}, badutf = {"k", "\xc3\x28", false};
    snprintf(path2, sizeof path2, "%s/bad.png", dir);
    T_CHECK(png_write(path2, rgb, W_IMG, H_IMG, &badkey, 1, false) == C3_EINPUT,
            "bad key rejected");
    T_CHECK(png_write(path2, rgb, W_IMG, H_IMG, &badutf, 1, false) == C3_EINPUT,
            "bad UTF-8 rejected");
    T_CHECK(png_write(path2, rgb, 0, H_IMG, NULL, 0, false) == C3_EINPUT, "zero width rejected");
    T_CHECK(!c3_file_exists(path2), "nothing written for bad arguments");

    /* 6. reading broken files gives errors, not aborts */
    T_CHECK(png_read_rgb("/nonexistent-c3-folder/x.png", &back, &W, &H) == C3_EINPUT,
            "missing file");
    snprintf(path2, sizeof path2, "%s/not.png", dir);
    T_CHECK(c3_write_file_atomic(path2, "hello, not a png", 16, false) == C3_OK, "%s", c3_errmsg());
    T_CHECK(png_read_texts(path2, &keys, &vals, &n) == C3_EINPUT, "not a PNG: %s", c3_errmsg());
    T_CHECK(c3_read_file(path, &file, &flen) == C3_OK, "%s", c3_errmsg());
    snprintf(path2, sizeof path2, "%s/trunc.png", dir);
    T_CHECK(c3_write_file_atomic(path2, file, flen / 2, true) == C3_OK, "%s", c3_errmsg());
    free(file);
    T_CHECK(png_read_rgb(path2, &back, &W, &H) == C3_EINPUT, "truncated PNG rejected");
    T_CHECK(strstr(c3_errmsg(), "trunc.png") != NULL, "message names the file: %s", c3_errmsg());

    /* 8. large pictures (their image data deflated in strips, in parallel):
     * an exact round trip of every byte, to a file and in memory, for noise,
     * a smooth and a flat picture; the texts still precede the data; and the
     * IDAT chunks hold one zlib stream whose adler32 checks (zlib's own
     * uncompress) and which inflates to the Sub-filtered rows */
    {
        const int sizes[][2] = {{1360, 768}, {1001, 333}, {300, 200}, {4096, 17}};
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            int bw = sizes[k][0], bh = sizes[k][1];
            size_t nb = (size_t)bw * bh * 3;
            uint8_t *big = malloc(nb), *bk = NULL;
            for (int pic = 0; pic < 3; pic++) {
                for (size_t i = 0; i < nb; i++) {
                    s = s * 1664525u + 1013904223u;
                    size_t x = i / 3 % (size_t)bw, y = i / 3 / (size_t)bw;
                    big[i] = pic == 0   ? (uint8_t)(s >> 24)
                             : pic == 1 ? (uint8_t)((x * 255 / bw + y * 64 / bh + (s >> 30)) & 255)
                                        : (uint8_t)(x < (size_t)bw / 2 ? 40 : 200 + i % 3);
                }
                snprintf(path2, sizeof path2, "%s/big.png", dir);
                T_CHECK(png_write(path2, big, bw, bh, texts, 2, true) == C3_OK, "%s", c3_errmsg());
                int bw2 = 0, bh2 = 0;
                T_CHECK(png_read_rgb(path2, &bk, &bw2, &bh2) == C3_OK, "%dx%d: %s", bw, bh,
                        c3_errmsg());
                T_CHECK(bw2 == bw && bh2 == bh && memcmp(bk, big, nb) == 0,
                        "%dx%d picture %d: pixels differ after the round trip", bw, bh, pic);
                free(bk);
                bk = NULL;
                T_CHECK(png_read_texts(path2, &keys, &vals, &n) == C3_OK && n == 2 &&
                            strcmp(lookup(keys, vals, n, "parameters"), params) == 0,
                        "%dx%d: texts", bw, bh);
                for (int i = 0; i < n; i++)
                    free(keys[i]), free(vals[i]);
                free(keys), free(vals);
                T_CHECK(c3_read_file(path2, &file, &flen) == C3_OK, "%s", c3_errmsg());
                const unsigned char *fb = (const unsigned char *)file;
                /* the IDAT chunks, concatenated: one zlib stream of the filtered rows */
                size_t pos = 8, zl = 0, first_idat = 0, last_text = 0;
                unsigned char *zs = malloc(flen);
                while (pos + 12 <= flen) {
                    size_t cl = ((size_t)fb[pos] << 24) | ((size_t)fb[pos + 1] << 16) |
                                ((size_t)fb[pos + 2] << 8) | fb[pos + 3];
                    if (!memcmp(fb + pos + 4, "IDAT", 4)) {
                        if (!first_idat) first_idat = pos;
                        memcpy(zs + zl, fb + pos + 8, cl);
                        zl += cl;
                    }
                    if (!memcmp(fb + pos + 4, "tEXt", 4) || !memcmp(fb + pos + 4, "iTXt", 4))
                        last_text = pos;
                    pos += 12 + cl;
                }
                T_CHECK(first_idat && last_text < first_idat, "%dx%d: texts before IDAT", bw, bh);
                uLongf rl = (uLongf)(nb + (size_t)bh);
                unsigned char *rows = malloc(rl);
                int zr = uncompress(rows, &rl, zs, (uLong)zl);
                T_CHECK(zr == Z_OK && rl == nb + (size_t)bh,
                        "%dx%d: IDAT is not one zlib stream (%d)", bw, bh, zr);
                bool sub = zr == Z_OK;
                for (int y = 0; sub && y < bh; y++) {
                    const unsigned char *r = rows + (size_t)y * (3 * (size_t)bw + 1);
                    if (r[0] != 1) sub = false; /* Sub */
                    for (int i = 0; sub && i < 3 * bw; i++)
                        sub = (uint8_t)(r[1 + i] + (i >= 3 ? big[(size_t)y * 3 * bw + i - 3]
                                                           : 0)) == big[(size_t)y * 3 * bw + i];
                }
                T_CHECK(sub, "%dx%d picture %d: the rows are not Sub-filtered as written", bw, bh,
                        pic);
                free(rows);
                free(zs);
                free(file);
                /* in memory: the same bytes as the file */
                uint8_t *mb = NULL;
                size_t ml = 0;
                T_CHECK(png_encode_mem(big, bw, bh, texts, 2, &mb, &ml) == C3_OK, "%s",
                        c3_errmsg());
                T_CHECK(png_read_rgb_mem(mb, ml, "mem", &bk, &bw2, &bh2) == C3_OK && bw2 == bw &&
                            bh2 == bh && memcmp(bk, big, nb) == 0,
                        "%dx%d picture %d: in-memory round trip", bw, bh, pic);
                T_CHECK(ml == flen, "%dx%d: memory and file encodings differ in size", bw, bh);
                free(bk);
                bk = NULL;
                free(mb);
            }
            free(big);
        }
        unlink(path2);
    }

    /* 7. no temporary file left behind by any of the above */
    T_CHECK(t_count_entries(dir, ".tmp") == 0, "temporary files left in %s", dir);

    unlink(path);
    snprintf(path2, sizeof path2, "%s/not.png", dir);
    unlink(path2);
    snprintf(path2, sizeof path2, "%s/trunc.png", dir);
    unlink(path2);
    rmdir(dir);
    free(rgb);
    free(rgb2);
    free(longtxt);
    return t_done("png");
}
