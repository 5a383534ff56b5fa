/* test_badinput.c - the safetensors reader and the checkpoint loader on bad
 * input built in a temporary folder: each case must fail with the documented
 * code (C3_EMODEL for a model problem) and a one-line message that names the
 * file and the problem. The checkpoint-folder cases copy tiny-a's small files
 * and symlink its shards, then break one thing at a time (skipped without
 * fixtures). Runs under ASan/UBSan in CI: everything is freed. */
/* _GNU_SOURCE (set by meson) provides nftw. */
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "cosmos3.h"
#include "test_util.h"
#include "tokenizer.h"

static char tmpdir[256];

/* ------------------------------------------------------------ helpers */

static void write_bytes(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(buf, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "FAIL: cannot write %s\n", path);
        exit(1);
    }
}

/* A safetensors image: u64 header length (hlen_override if nonzero), the
 * header text, then `data` zero bytes. xmalloc'd, size in *len. */
static unsigned char *st_image(const char *header, uint64_t hlen_override, size_t data, size_t *len) {
    size_t h = strlen(header);
    *len = 8 + h + data;
    unsigned char *b = xcalloc(*len ? *len : 1, 1);
    uint64_t hl = hlen_override ? hlen_override : h;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hl >> (8 * i));
    memcpy(b + 8, header, h);
    return b;
}

static bool one_line(const char *m) { return m[0] && !strchr(m, '\n'); }

/* Write `img` to tmpdir/name, open it; expect `code` and the message to
 * contain the path and every substring given (NULL-terminated). The same
 * image through st_parse must give the same verdict. */
static void expect_st(const char *name, const void *img, size_t len, int code, ...) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    write_bytes(path, img, len);
    st_file f;
    int rc = st_open(&f, path);
    const char *msg = c3_errmsg();
    T_CHECK(rc == code, "%s: st_open returned %d, want %d (%s)", name, rc, code, msg);
    if (rc == C3_OK) {
        st_close(&f);
        return;
    }
    fprintf(stderr, "  %-22s -> %d: %s\n", name, rc, msg);
    T_CHECK(one_line(msg), "%s: message is not one line: '%s'", name, msg);
    T_CHECK(strstr(msg, path) != NULL, "%s: message does not name the file: %s", name, msg);
    va_list ap;
    va_start(ap, code);
    for (const char *s; (s = va_arg(ap, const char *));)
        T_CHECK(strstr(msg, s) != NULL, "%s: message lacks '%s': %s", name, s, msg);
    va_end(ap);
    rc = st_parse(&f, img, len, name);
    T_CHECK(rc == code, "%s: st_parse returned %d, want %d", name, rc, code);
    if (rc == C3_OK) st_close(&f);
    T_CHECK(strstr(c3_errmsg(), name) != NULL, "%s: st_parse message does not name it: %s", name, c3_errmsg());
}

static void expect_st_header(const char *name, const char *header, size_t data, int code, const char *s1,
                             const char *s2) {
    size_t len;
    unsigned char *img = st_image(header, 0, data, &len);
    expect_st(name, img, len, code, s1, s2, (const char *)NULL);
    free(img);
}

/* ------------------------------------------------------------ safetensors */

static void test_safetensors(void) {
    /* control: a valid image opens and reads back */
    {
        size_t len;
        unsigned char *img = st_image("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                      "\"__metadata__\":{\"format\":\"pt\"}}",
                                      0, 8, &len);
        float two[2] = {1.5f, -2.0f};
        memcpy(img + len - 8, two, 8);
        char path[512];
        snprintf(path, sizeof path, "%s/good.safetensors", tmpdir);
        write_bytes(path, img, len);
        st_file f;
        T_CHECK(st_open(&f, path) == C3_OK, "valid file rejected: %s", c3_errmsg());
        const st_tensor *t = st_find(&f, "a");
        T_CHECK(t && t->dtype == C3_F32 && t->ndim == 1 && t->shape[0] == 2, "tensor a");
        T_CHECK(t && memcmp(t->data, two, 8) == 0, "tensor a data");
        T_CHECK(st_meta(&f, "format") && strcmp(st_meta(&f, "format"), "pt") == 0, "metadata");
        /* ckpt_get on a file: missing tensor and wrong shape */
        const int64_t want2[1] = {2}, want3[1] = {3}, want22[2] = {2, 2};
        T_CHECK(ckpt_get(NULL, &f, "a", 1, want2) == t, "ckpt_get a [2]");
        T_CHECK(ckpt_get(NULL, &f, "b", 1, want2) == NULL, "ckpt_get of a missing tensor");
        T_CHECK(strstr(c3_errmsg(), "tensor b is missing") && strstr(c3_errmsg(), path) &&
                    strstr(c3_errmsg(), "[2]") && one_line(c3_errmsg()),
                "missing-tensor message: %s", c3_errmsg());
        T_CHECK(ckpt_get(NULL, &f, "a", 1, want3) == NULL, "ckpt_get with a wrong shape");
        T_CHECK(strstr(c3_errmsg(), "tensor a has shape [2], expected [3]") && strstr(c3_errmsg(), path),
                "wrong-shape message: %s", c3_errmsg());
        T_CHECK(ckpt_get(NULL, &f, "a", 2, want22) == NULL, "ckpt_get with a wrong rank");
        T_CHECK(strstr(c3_errmsg(), "expected [2, 2]"), "wrong-rank message: %s", c3_errmsg());
        st_close(&f);
        free(img);
    }
    /* control: zero-size tensors anywhere, touching neighbours: valid */
    {
        size_t len;
        unsigned char *img = st_image("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                                      "\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
                                      "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[8,16]}}",
                                      0, 16, &len);
        expect_st("zero.safetensors", img, len, C3_OK, (const char *)NULL);
        free(img);
    }
    /* missing file */
    {
        char path[512];
        snprintf(path, sizeof path, "%s/absent.safetensors", tmpdir);
        st_file f;
        int rc = st_open(&f, path);
        T_CHECK(rc == C3_EMODEL, "missing file: %d (%s)", rc, c3_errmsg());
        T_CHECK(strstr(c3_errmsg(), path) && strstr(c3_errmsg(), "No such file"), "message: %s", c3_errmsg());
    }
    /* truncated: empty and shorter than the length prefix */
    expect_st("empty.safetensors", "", 0, C3_EMODEL, "truncated", (const char *)NULL);
    expect_st("short.safetensors", "\x10\0\0", 3, C3_EMODEL, "truncated", (const char *)NULL);
    /* a valid file cut in the data area */
    {
        size_t len;
        unsigned char *img = st_image("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 0, 16, &len);
        expect_st("cut.safetensors", img, len - 5, C3_EMODEL, "'a'", "outside the data area", (const char *)NULL);
        /* cut inside the header */
        expect_st("cuthdr.safetensors", img, 20, C3_EMODEL, "runs past the end", (const char *)NULL);
        free(img);
    }
    /* header length beyond the file, including a length that overflows size_t arithmetic */
    {
        size_t len;
        unsigned char *img = st_image("{}", 1000, 0, &len);
        expect_st("hlen.safetensors", img, len, C3_EMODEL, "header length 1000", "runs past the end",
                  (const char *)NULL);
        free(img);
        img = st_image("{}", UINT64_MAX, 0, &len);
        expect_st("hlenmax.safetensors", img, len, C3_EMODEL, "runs past the end", (const char *)NULL);
        free(img);
    }
    expect_st_header("json.safetensors", "{\"a\": {\"dtype\": \"F32\",", 0, C3_EMODEL, "not valid JSON", NULL);
    expect_st_header("array.safetensors", "[1, 2]", 0, C3_EMODEL, "not a JSON object", NULL);
    expect_st_header("dup.safetensors",
                     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                     2, C3_EMODEL, "not valid JSON", "duplicate");
    expect_st_header("range.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}", 16,
                     C3_EMODEL, "'w'", "outside the data area");
    expect_st_header("neg.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[-4,-4]}}", 16,
                     C3_EMODEL, "'w'", "outside the data area");
    expect_st_header("backwards.safetensors", "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}",
                     16, C3_EMODEL, "'w'", "outside the data area");
    expect_st_header("overlap.safetensors",
                     "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                     "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                     16, C3_EMODEL, "'x' and 'y' overlap", NULL);
    /* an overlap hidden behind a zero-size tensor between the two */
    expect_st_header("overlap0.safetensors",
                     "{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
                     "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}",
                     16, C3_EMODEL, "'a' and 'b' overlap", NULL);
    /* a long tensor covering two later ones */
    expect_st_header("overlap2.safetensors",
                     "{\"a\":{\"dtype\":\"U8\",\"shape\":[12],\"data_offsets\":[0,12]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[12,14]},"
                     "\"c\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[13,15]}}",
                     16, C3_EMODEL, "'b' and 'c' overlap", NULL);
    expect_st_header("dtype.safetensors", "{\"w\":{\"dtype\":\"F8_E5M2\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4,
                     C3_EMODEL, "'w'", "unsupported dtype F8_E5M2");
    expect_st_header("bytes.safetensors", "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[0,8]}}", 8,
                     C3_EMODEL, "'w' holds 8 bytes", "needs 12");
    expect_st_header("nooffsets.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, C3_EMODEL, "'w'",
                     "data_offsets");
    expect_st_header("notobj.safetensors", "{\"w\":[1,2,3]}", 4, C3_EMODEL, "'w'", "needs dtype");
    expect_st_header("shape.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
                     C3_EMODEL, "'w'", "malformed shape");
    expect_st_header("shapestr.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"4\"],\"data_offsets\":[0,16]}}",
                     16, C3_EMODEL, "'w'", "malformed shape");
    expect_st_header("huge.safetensors",
                     "{\"w\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,4]}}", 4,
                     C3_EMODEL, "'w'", NULL);
    expect_st_header("dims.safetensors",
                     "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, C3_EMODEL,
                     "'w'", "more than 8 dimensions");
    expect_st_header("meta.safetensors", "{\"__metadata__\":{\"format\":3}}", 0, C3_EMODEL, "__metadata__.format",
                     "not a string");
    expect_st_header("metaobj.safetensors", "{\"__metadata__\":[]}", 0, C3_EMODEL, "__metadata__", "not an object");
}

/* ------------------------------------------------------------ config parsers */

#define TCONF_BASE "\"hidden_size\":64,\"num_hidden_layers\":1,\"num_attention_heads\":2,\"intermediate_size\":8,\"vocab_size\":10"
#define VCONF_BASE "\"z_dim\":2,\"dim_mult\":[1,2,4,4],\"temperal_downsample\":[false,true,true]"
#define VCONF_LAT ",\"latents_mean\":[0,1],\"latents_std\":[1,2]"

static void expect_tconfig(const char *json, int code, const char *sub) {
    c3_tconfig t;
    int rc = ckpt_parse_tconfig(&t, json, strlen(json), "x/transformer/config.json");
    const char *msg = c3_errmsg();
    T_CHECK(rc == code, "tconfig %s: returned %d, want %d (%s)", json, rc, code, msg);
    if (rc == C3_OK) return;
    fprintf(stderr, "  tconfig -> %d: %s\n", rc, msg);
    T_CHECK(one_line(msg) && strstr(msg, "x/transformer/config.json") && (!sub || strstr(msg, sub)),
            "tconfig message: %s (want '%s')", msg, sub ? sub : "");
}

static void expect_vconfig(const char *json, int code, const char *sub) {
    c3_vconfig v;
    int rc = ckpt_parse_vconfig(&v, json, strlen(json), "x/vae/config.json");
    const char *msg = c3_errmsg();
    T_CHECK(rc == code, "vconfig %s: returned %d, want %d (%s)", json, rc, code, msg);
    if (rc == C3_OK) return;
    fprintf(stderr, "  vconfig -> %d: %s\n", rc, msg);
    T_CHECK(one_line(msg) && strstr(msg, "x/vae/config.json") && (!sub || strstr(msg, sub)),
            "vconfig message: %s (want '%s')", msg, sub ? sub : "");
}

static void test_config_parsers(void) {
    expect_tconfig("{" TCONF_BASE "}", C3_OK, NULL);
    expect_tconfig("{" TCONF_BASE ",\"num_key_value_heads\":0}", C3_EMODEL, "num_key_value_heads");
    expect_tconfig("{" TCONF_BASE ",\"hidden_act\":\"gelu\"}", C3_EMODEL, "hidden_act");
    expect_tconfig("{" TCONF_BASE ",\"head_dim\":7}", C3_EMODEL, "even");
    expect_tconfig("{" TCONF_BASE ",\"rope_scaling\":{\"mrope_section\":[8,8,8]}}", C3_EMODEL, "exceeds");
    expect_tconfig("{" TCONF_BASE ",\"patch_latent_dim\":5}", C3_EMODEL, "patch_latent_dim");
    /* found by review/fuzzing: int overflow in latent_patch_size^2 x latent_channel */
    expect_tconfig("{" TCONF_BASE ",\"latent_patch_size\":1073741824}", C3_EMODEL, "too large");
    expect_tconfig("{" TCONF_BASE ",\"latent_channel\":1073741824,\"latent_patch_size\":2}", C3_EMODEL,
                   "too large");
    /* non-positive or non-finite (as float) numbers */
    expect_tconfig("{" TCONF_BASE ",\"rms_norm_eps\":0}", C3_EMODEL, "rms_norm_eps");
    expect_tconfig("{" TCONF_BASE ",\"rms_norm_eps\":1e-50}", C3_EMODEL, "rms_norm_eps");
    expect_tconfig("{" TCONF_BASE ",\"rms_norm_eps\":1e300}", C3_EMODEL, "rms_norm_eps");
    expect_tconfig("{" TCONF_BASE ",\"rope_theta\":-1}", C3_EMODEL, "rope_theta");
    expect_tconfig("{" TCONF_BASE ",\"base_fps\":0}", C3_EMODEL, "base_fps");
    /* found by fuzzing: the default mrope split overflowed int for a huge head_dim */
    expect_tconfig("{" TCONF_BASE ",\"head_dim\":328888888}", C3_OK, NULL);
    expect_tconfig("[]", C3_EMODEL, "JSON object");
    expect_tconfig("", C3_EMODEL, "invalid JSON");

    expect_vconfig("{" VCONF_BASE ",\"latents_mean\":[0,1],\"latents_std\":[1,2]}", C3_OK, NULL);
    expect_vconfig("{" VCONF_BASE ",\"latents_mean\":[0,1],\"latents_std\":[1,0]}", C3_EMODEL, "latents_std[1]");
    /* found by fuzzing: a std that is non-zero in JSON but 0 (or inf) as a float */
    expect_vconfig("{" VCONF_BASE ",\"latents_mean\":[0,1],\"latents_std\":[1e-50,1]}", C3_EMODEL,
                   "latents_std[0]");
    expect_vconfig("{" VCONF_BASE ",\"latents_mean\":[1e300,1],\"latents_std\":[1,1]}", C3_EMODEL,
                   "latents_mean/latents_std[0]");
    expect_vconfig("{" VCONF_BASE ",\"latents_mean\":[0],\"latents_std\":[1,2]}", C3_EMODEL, "z_dim = 2");
    expect_vconfig("{\"z_dim\":2,\"dim_mult\":[],\"latents_mean\":[0,1],\"latents_std\":[1,2]}", C3_EMODEL,
                   "dim_mult");
    expect_vconfig("{\"z_dim\":65,\"dim_mult\":[1]}", C3_EMODEL, "z_dim 65");
    /* the hardening audit's D2: each number against the Wan2.2 geometry and int overflow, naming
     * the key */
    expect_vconfig("{" VCONF_BASE VCONF_LAT ",\"patch_size\":65536}", C3_EMODEL,
                   "\"patch_size\" 65536");
    expect_vconfig("{" VCONF_BASE VCONF_LAT ",\"num_res_blocks\":-2}", C3_EMODEL,
                   "\"num_res_blocks\" -2");
    expect_vconfig("{" VCONF_BASE VCONF_LAT ",\"num_res_blocks\":1073741824}", C3_EMODEL,
                   "\"num_res_blocks\"");
    expect_vconfig("{" VCONF_BASE VCONF_LAT ",\"decoder_base_dim\":1073741824}", C3_EMODEL,
                   "\"decoder_base_dim\"");
    expect_vconfig("{" VCONF_BASE VCONF_LAT ",\"base_dim\":0,\"decoder_base_dim\":8}", C3_EMODEL,
                   "\"base_dim\" 0");
    expect_vconfig(
        "{\"z_dim\":2,\"decoder_base_dim\":1000,\"dim_mult\":[16,16,16,16],\"temperal_downsample\":"
        "[false,true,true]" VCONF_LAT "}",
        C3_EMODEL, "\"dim_mult\"[0] 16");
    expect_vconfig(
        "{\"z_dim\":2,\"dim_mult\":[1,2,64,4],\"temperal_downsample\":[false,true,true]" VCONF_LAT
        "}",
        C3_EMODEL, "\"dim_mult\" must be a list of integers in 1..16");
    expect_vconfig("{\"z_dim\":2,\"dim_mult\":[1,2,4],\"temperal_downsample\":[true,true]" VCONF_LAT
                   "}",
                   C3_EMODEL, "8 pixels per latent");
    expect_vconfig("{" VCONF_BASE VCONF_LAT ",\"patch_size\":4}", C3_EMODEL, "in_channels");
    expect_vconfig(
        "{\"z_dim\":2,\"dim_mult\":[1,2,4,4],\"temperal_downsample\":[true,true,true]" VCONF_LAT
        "}",
        C3_EMODEL, "temperal_downsample");
    expect_vconfig("{\"z_dim\":2,\"dim_mult\":[1,2,4,4]" VCONF_LAT "}", C3_EMODEL,
                   "temperal_downsample");
    expect_vconfig("{" VCONF_BASE VCONF_LAT ",\"scale_factor_spatial\":8}", C3_EMODEL,
                   "\"scale_factor_spatial\" 8");
    expect_vconfig("{" VCONF_BASE VCONF_LAT ",\"scale_factor_temporal\":1}", C3_EMODEL,
                   "\"scale_factor_temporal\"");
    expect_vconfig("{" VCONF_BASE VCONF_LAT ",\"is_residual\":false}", C3_EMODEL, "is_residual");
    /* vae_load's widths, computed by the parser: Wan2.2's decoder is 1024, 1024, 1024, 512, 256 */
    c3_vconfig v;
    const char *wan = "{" VCONF_BASE VCONF_LAT ",\"decoder_base_dim\":256,\"base_dim\":160}";
    T_CHECK(ckpt_parse_vconfig(&v, wan, strlen(wan), "x") == C3_OK && v.dec_dims[0] == 1024 &&
                v.dec_dims[1] == 1024 && v.dec_dims[2] == 1024 && v.dec_dims[3] == 512 &&
                v.dec_dims[4] == 256,
            "Wan2.2 decoder widths: %s", c3_errmsg());
    /* an up block whose channels cannot repeat evenly: 3 -> 2 x 4 (2D up) is not a whole multiple
     */
    expect_vconfig(
        "{\"z_dim\":2,\"decoder_base_dim\":1,\"dim_mult\":[1,2,3,3],\"temperal_downsample\":"
        "[false,true,true]" VCONF_LAT "}",
        C3_EMODEL, "cannot repeat");
}

/* ------------------------------------------------------------ files */

static int count_tmp(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -c '\\.tmp\\.'", dir);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p && fscanf(p, "%d", &n) != 1) n = -1;
    if (p) pclose(p);
    return n;
}

static void test_files(void) {
    char dir[512], victim[600], out[600], fifo[600], loop[600], buf[64] = {0};
    snprintf(dir, sizeof dir, "%s/files", tmpdir);
    mkdir(dir, 0755);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(out, sizeof out, "%s/out.st", dir);
    write_bytes(victim, "important", 9);
    /* audit D14: the output is a planted symlink to another file */
    T_CHECK(symlink(victim, out) == 0, "symlink");
    T_CHECK(c3_write_file_atomic(out, "new", 3, false) == C3_EOUTPUT &&
                strstr(c3_errmsg(), "already exists"),
            "no overwrite: refused (%s)", c3_errmsg());
    T_CHECK(c3_write_file_atomic(out, "new", 3, true) == C3_OK, "overwrite: %s", c3_errmsg());
    FILE *f = fopen(victim, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    struct stat st;
    T_CHECK(n == 9 && !memcmp(buf, "important", 9), "the symlink's target is untouched: '%s'", buf);
    T_CHECK(lstat(out, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0644,
            "the output is a new regular file, mode 644 (mode %o)", (unsigned)st.st_mode & 0777);
    T_CHECK(count_tmp(dir) == 0, "no temporary file left");
    /* a name that appears between the check and the rename is not replaced */
    unlink(out);
    T_CHECK(c3_write_file_atomic(out, "abc", 3, false) == C3_OK, "fresh write: %s", c3_errmsg());
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s.tmp.x", out);
    write_bytes(tmp, "x", 1);
    T_CHECK(c3_place_file(tmp, out, false) == -1 && errno == EEXIST,
            "RENAME_NOREPLACE refuses an existing name");
    unlink(tmp);
    /* audit D8: a FIFO does not block, a loop is named */
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(loop, sizeof loop, "%s/loop", dir);
    T_CHECK(mkfifo(fifo, 0644) == 0 && symlink("loop", loop) == 0, "mkfifo, symlink");
    char *data = NULL;
    double t0 = c3_now();
    T_CHECK(c3_read_file(fifo, &data, NULL) == C3_EINPUT && strstr(c3_errmsg(), "is a FIFO"),
            "FIFO: %s", c3_errmsg());
    T_CHECK(c3_now() - t0 < 1.0, "a FIFO is refused at once");
    T_CHECK(c3_file_exists(loop) && c3_read_file(loop, &data, NULL) == C3_EINPUT &&
                strstr(c3_errmsg(), "a loop of symbolic links"),
            "loop: %s", c3_errmsg());
    st_file sf;
    T_CHECK(st_open(&sf, fifo) == C3_EMODEL && strstr(c3_errmsg(), "is a FIFO"), "st_open FIFO: %s",
            c3_errmsg());
    T_CHECK(st_open(&sf, dir) == C3_EMODEL && strstr(c3_errmsg(), "is a folder"),
            "st_open folder: %s", c3_errmsg());
    free(data);
    /* finiteness by the bits */
    float x[4] = {1, -2, 0, 3};
    T_CHECK(c3_first_nonfinite(x, 4) == 4, "finite");
    x[2] = NAN;
    T_CHECK(c3_first_nonfinite(x, 4) == 2, "NaN at 2");
    x[2] = 0, x[3] = -INFINITY;
    T_CHECK(c3_first_nonfinite(x, 4) == 3, "-Inf at 3");
}

/* ------------------------------------------------------------ tokenizer.json */

/* tok_load of `json` must fail with C3_EMODEL naming `sub`, quickly (the
 * loader is linear in its input: a huge id must not become a huge table). */
static void expect_tok(const char *label, const char *json, const char *sub) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", tmpdir, label);
    write_bytes(path, json, strlen(json));
    c3_tokenizer *t = NULL;
    double t0 = c3_now();
    int rc = tok_load(&t, path);
    double dt = c3_now() - t0;
    const char *msg = c3_errmsg();
    fprintf(stderr, "  tokenizer %-14s -> %d in %.3f s: %s\n", label, rc, dt, msg);
    T_CHECK(rc == C3_EMODEL && !t, "%s: returned %d (%s)", label, rc, msg);
    T_CHECK(one_line(msg) && strstr(msg, path) && strstr(msg, sub), "%s: message %s (want '%s')",
            label, msg, sub);
    T_CHECK(dt < 1.0, "%s: %.2f s to refuse %zu bytes", label, dt, strlen(json));
    tok_free(t);
}

/* A valid byte-level vocabulary (ids 0..255) as JSON members, for the cases
 * that must get past the vocab: "\u0100":0,... in the GPT-2 byte alphabet. */
static char *byte_vocab(void) {
    char *b = xmalloc(256 * 16), *o = b;
    unsigned next = 256;
    for (int c = 0; c < 256; c++) {
        bool keep = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
        unsigned cp = keep ? (unsigned)c : next++;
        o += sprintf(o, "%s\"\\u%04x\":%d", c ? "," : "", cp, c);
    }
    return b;
}

static void test_tokenizer_files(void) {
    /* audit D3: a 62-byte file with an id near 2^30 allocated and touched 8 GiB */
    expect_tok("huge_id",
               "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":1073741822},\"merges\":[]}}",
               "out of range for the vocabulary");
    /* D15: an empty string segment (UB in sb_add under UBSan), repeated keys (a leak under LSan) */
    expect_tok("empty_segment", "{\"model\":{\"vocab\":{\"\\u0041\":0}}}",
               "model.vocab or model.merges missing");
    expect_tok("repeated_key", "{\"normalizer\":{\"type\":\"NFC\"},\"normalizer\":null}",
               "appears twice");
    expect_tok("repeated_vocab", "{\"model\":{\"vocab\":{},\"vocab\":{}}}", "appears twice");
    /* found by fuzz_tokload: an empty merge string (memchr of NULL) */
    char *v = byte_vocab();
    size_t jn = strlen(v) + 512;
    char *j = xmalloc(jn);
    snprintf(j, jn, "{\"model\":{\"type\":\"BPE\",\"vocab\":{%s},\"merges\":[\"\"]}}", v);
    expect_tok("empty_merge", j, "a merge string must be");
    /* found by fuzz_tokload (session 5): " " splits into two empty halves (pointer
     * arithmetic on a NULL arena under UBSan) */
    snprintf(j, jn, "{\"model\":{\"type\":\"BPE\",\"vocab\":{%s},\"merges\":[\" \"]}}", v);
    expect_tok("empty_halves", j, "a merge half is empty");
    snprintf(j, jn, "{\"model\":{\"type\":\"BPE\",\"vocab\":{%s},\"merges\":[[\"a\",\"\"]]}}", v);
    expect_tok("empty_half", j, "a merge half is empty");
    /* an added token beyond the vocabulary the file declares (256 + 1 entries) */
    snprintf(j, jn,
             "{\"added_tokens\":[{\"id\":300,\"content\":\"<x>\"}],\"pre_tokenizer\":{\"type\":"
             "\"Split\","
             "\"pattern\":{\"Regex\":\"\\\\S+\"},\"behavior\":\"Isolated\"},\"model\":{\"type\":"
             "\"BPE\",\"vocab\":{%s},"
             "\"merges\":[]}}",
             v);
    expect_tok("beyond_vocab", j,
               "beyond the vocabulary the file declares (256 entries in model.vocab + 1");
    /* the same file with the added token right after the vocabulary loads */
    char *at = strstr(j, "300");
    memcpy(at, "256", 3);
    char path[512];
    snprintf(path, sizeof path, "%s/dense.json", tmpdir);
    write_bytes(path, j, strlen(j));
    c3_tokenizer *t = NULL;
    T_CHECK(tok_load(&t, path) == C3_OK && tok_vocab_size(t) == 257, "a dense vocabulary loads: %s",
            c3_errmsg());
    tok_free(t);
    free(j);
    free(v);
}

/* A vocabulary crafted so that every string shares its low 14 bits of
 * FNV-1a (the tokenizer's old, unkeyed hash): 6,000 entries in one probe
 * chain of the 16,384-slot table, 18 M probes to load. With the per-process
 * key the inserts probe about 1.8 slots each (linear probing at 38% full);
 * the bound is 4 per entry. */
static void test_tokenizer_collisions(void) {
    const char *src = getenv("COSMOS3_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/tokload/regress_collide.json",
             src ? src : ".");
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    T_CHECK(root != NULL, "%s: %s", path, je.text);
    if (!root) return;
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    const char *k;
    json_t *v;
    int n = 0, crafted = 0, colliding = 0;
    const char *probe_word = NULL;
    json_int_t probe_id = -1;
    json_object_foreach(vocab, k, v) {
        n++;
        if (json_integer_value(v) < 256) continue;
        crafted++;
        colliding += (c3_fnv1a(k, strlen(k), C3_FNV_INIT) & 0x3fff) == 0;
        probe_word = k, probe_id = json_integer_value(v);
    }
    T_CHECK(n == 6256 && crafted == 6000 && colliding == crafted,
            "the crafted vocabulary: %d entries, %d crafted, %d colliding under FNV-1a", n, crafted,
            colliding);
    c3_tokenizer *t = NULL;
    double t0 = c3_now();
    int rc = tok_load(&t, path);
    double dt = c3_now() - t0;
    T_CHECK(rc == C3_OK, "the colliding vocabulary does not load: %s", c3_errmsg());
    if (rc == C3_OK) {
        int64_t probes = tok_load_probes(t);
        fprintf(stderr, "  tokenizer colliding      -> %d entries, %lld probes in %.4f s\n", n,
                (long long)probes, dt);
        T_CHECK(tok_vocab_size(t) == n, "vocab size %d, want %d", tok_vocab_size(t), n);
        T_CHECK(probes >= n && probes <= 4 * (int64_t)n,
                "%lld probes to insert %d entries (linear: at most %d)", (long long)probes, n,
                4 * n);
        T_CHECK(probe_word && tok_id(t, probe_word) == probe_id, "lookup of '%s': %d, want %lld",
                probe_word ? probe_word : "?", probe_word ? tok_id(t, probe_word) : -1,
                (long long)probe_id);
        T_CHECK(tok_id(t, "zzzzzzz") == -1, "an absent word is found");
    }
    tok_free(t);
    json_decref(root);
}

/* ------------------------------------------------------------ noise files */

/* A one-tensor safetensors file at tmpdir/label.st. */
static void noise_file(const char *label, const char *name, c3_dtype dt, int ndim,
                       const int64_t *shape, const void *data, char *path, size_t pn) {
    snprintf(path, pn, "%s/%s.st", tmpdir, label);
    st_wtensor wt = {.name = name, .dtype = dt, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++)
        wt.shape[i] = shape[i];
    T_CHECK(st_write(path, &wt, 1, NULL, 0, true) == C3_OK, "writing %s: %s", path, c3_errmsg());
}

/* cosmos3_latents_read / cosmos3_step_noise_read: a shape the request's size
 * does not fit is COSMOS3_EUSAGE naming both shapes (the CLI adds -W/-H/
 * --frames only then); a dtype other than F32 is COSMOS3_EINPUT naming it and
 * F32; a NaN/Inf is COSMOS3_EINPUT naming the tensor and the first bad
 * element by its index. */
static void test_noise_files(void) {
    const int want[5] = {1, 48, 2, 3, 4};
    const int64_t sh[5] = {1, 48, 2, 3, 4}, sh6[6] = {2, 1, 48, 2, 3, 4};
    enum { N = 48 * 2 * 3 * 4 };
    static float f[2 * N];
    static uint16_t h[N];
    static int64_t i64[N];
    static uint8_t u8[N];
    for (int i = 0; i < 2 * N; i++)
        f[i] = (float)(i % 7) - 3.0f;
    char path[600], err[1024];
    float *out = NULL;
    size_t n = 0;
    noise_file("good", "latents", C3_F32, 5, sh, f, path, sizeof path);
    int rc = cosmos3_latents_read(path, want, &out, &n, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK && n == N && out && out[5] == f[5], "good noise: %d %s", rc, err);
    free(out);
    /* the step draws of the same file: absent is fine */
    rc = cosmos3_step_noise_read(path, 2, want, &out, &n, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK && !out && n == 0, "no step_noise: %d %s", rc, err);
    const int other[5] = {1, 48, 2, 4, 4};
    rc = cosmos3_latents_read(path, other, &out, &n, err, sizeof err);
    T_CHECK(rc == COSMOS3_EUSAGE && !out && strstr(err, "it has [1, 48, 2, 3, 4]") &&
                strstr(err, "needs a tensor 'latents' of shape [1, 48, 2, 4, 4]") && one_line(err),
            "a shape mismatch: %d %s", rc, err);
    struct {
        const char *dt_name;
        c3_dtype dt;
        const void *data;
    } bad[] = {{"BF16", C3_BF16, h}, {"F16", C3_F16, h}, {"I64", C3_I64, i64}, {"U8", C3_U8, u8}};
    for (size_t k = 0; k < C3_ARRAY_LEN(bad); k++) {
        noise_file(bad[k].dt_name, "latents", bad[k].dt, 5, sh, bad[k].data, path, sizeof path);
        rc = cosmos3_latents_read(path, want, &out, &n, err, sizeof err);
        char is[64];
        snprintf(is, sizeof is, "tensor 'latents' is %s; it must be F32", bad[k].dt_name);
        T_CHECK(rc == COSMOS3_EINPUT && !out && strstr(err, is) && !strstr(err, "shape") &&
                    one_line(err),
                "%s noise: %d %s", bad[k].dt_name, rc, err);
    }
    /* NaN at [0, 1, 0, 2, 3] = element ((1 * 2 + 0) * 3 + 2) * 4 + 3 = 35 */
    f[35] = NAN;
    noise_file("nan", "latents", C3_F32, 5, sh, f, path, sizeof path);
    rc = cosmos3_latents_read(path, want, &out, &n, err, sizeof err);
    T_CHECK(rc == COSMOS3_EINPUT && !out &&
                strstr(err, "tensor 'latents' holds nan at [0, 1, 0, 2, 3] (element 35)"),
            "NaN noise: %d %s", rc, err);
    f[35] = 0;
    /* step_noise: the same rules, its own name and shape */
    f[N + 4] = INFINITY; /* [1, 0, 0, 0, 1, 0]: step 1, element 4 of it */
    noise_file("step_inf", "step_noise", C3_F32, 6, sh6, f, path, sizeof path);
    rc = cosmos3_step_noise_read(path, 2, want, &out, &n, err, sizeof err);
    T_CHECK(rc == COSMOS3_EINPUT && !out &&
                strstr(err, "tensor 'step_noise' holds inf at [1, 0, 0, 0, 1, 0]"),
            "Inf step noise: %d %s", rc, err);
    rc = cosmos3_step_noise_read(path, 3, want, &out, &n, err, sizeof err);
    T_CHECK(rc == COSMOS3_EUSAGE && !out && strstr(err, "of shape [3, 1, 48, 2, 3, 4]"),
            "step noise for 3 steps: %d %s", rc, err);
    f[N + 4] = 0;
    noise_file("step_ok", "step_noise", C3_F32, 6, sh6, f, path, sizeof path);
    rc = cosmos3_step_noise_read(path, 2, want, &out, &n, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK && n == 2 * N && out && out[N + 5] == f[N + 5], "step noise: %d %s",
            rc, err);
    free(out);
    noise_file("step_bf16", "step_noise", C3_BF16, 6, sh6, i64, path, sizeof path);
    rc = cosmos3_step_noise_read(path, 2, want, &out, &n, err, sizeof err);
    T_CHECK(rc == COSMOS3_EINPUT && !out && strstr(err, "'step_noise' is BF16; it must be F32"),
            "BF16 step noise: %d %s", rc, err);
}

/* ------------------------------------------------------------ checkpoint folder */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}
static void rm_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void copy_file(const char *src, const char *dst) {
    char *data;
    size_t len;
    if (c3_read_file(src, &data, &len) != C3_OK) {
        fprintf(stderr, "FAIL: %s\n", c3_errmsg());
        exit(1);
    }
    write_bytes(dst, data, len);
    free(data);
}

static const char *const small_files[] = {
    "model_index.json",
    "transformer/config.json",
    "transformer/diffusion_pytorch_model.safetensors.index.json",
    "scheduler/scheduler_config.json",
    "text_tokenizer/tokenizer_config.json",
    "vae/config.json",
};
static const char *const big_files[] = {
    "text_tokenizer/tokenizer.json",
    "transformer/diffusion_pytorch_model-00001-of-00003.safetensors",
    "transformer/diffusion_pytorch_model-00002-of-00003.safetensors",
    "transformer/diffusion_pytorch_model-00003-of-00003.safetensors",
    "vae/diffusion_pytorch_model.safetensors",
};

/* tmpdir/ckpt: a fresh copy of tiny-a (small files copied, big ones linked). */
static char ckdir[512];
static void make_ckpt(const char *src) {
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", tmpdir);
    rm_tree(ckdir);
    const char *subs[] = {"", "/transformer", "/scheduler", "/text_tokenizer", "/vae"};
    for (size_t i = 0; i < C3_ARRAY_LEN(subs); i++) {
        char d[600];
        snprintf(d, sizeof d, "%s%s", ckdir, subs[i]);
        if (mkdir(d, 0755) != 0) {
            fprintf(stderr, "FAIL: mkdir %s\n", d);
            exit(1);
        }
    }
    for (size_t i = 0; i < C3_ARRAY_LEN(small_files); i++) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", src, small_files[i]);
        snprintf(b, sizeof b, "%s/%s", ckdir, small_files[i]);
        copy_file(a, b);
    }
    for (size_t i = 0; i < C3_ARRAY_LEN(big_files); i++) {
        char a[1024], b[1024];
        snprintf(a, sizeof a, "%s/%s", src, big_files[i]);
        snprintf(b, sizeof b, "%s/%s", ckdir, big_files[i]);
        if (symlink(a, b) != 0) {
            fprintf(stderr, "FAIL: symlink %s\n", b);
            exit(1);
        }
    }
}

static const char *ck(const char *rel) {
    static char bufs[4][1024];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, 1024, "%s/%s", ckdir, rel);
    return b;
}

/* Replace text `old` by `new` in a copied file (must occur). */
static void edit_file(const char *rel, const char *old, const char *new) {
    char *data;
    size_t len;
    if (c3_read_file(ck(rel), &data, &len) != C3_OK) exit(1);
    char *p = strstr(data, old);
    if (!p) {
        fprintf(stderr, "FAIL: '%s' not in %s\n", old, rel);
        exit(1);
    }
    size_t ol = strlen(old), nl = strlen(new);
    char *out = xmalloc(len - ol + nl + 1);
    memcpy(out, data, (size_t)(p - data));
    memcpy(out + (p - data), new, nl);
    memcpy(out + (p - data) + nl, p + ol, len - (size_t)(p - data) - ol + 1);
    write_bytes(ck(rel), out, len - ol + nl);
    free(out);
    free(data);
}

/* Open the folder; expect `code` and a one-line message holding every
 * substring (NULL-terminated). */
static void expect_ckpt(const char *label, bool need_vae, int code, ...) {
    c3_ckpt c;
    int rc = ckpt_open(&c, ckdir, need_vae);
    const char *msg = c3_errmsg();
    T_CHECK(rc == code, "%s: ckpt_open returned %d, want %d (%s)", label, rc, code, msg);
    if (rc == C3_OK) {
        ckpt_close(&c);
        return;
    }
    fprintf(stderr, "  %-30s -> %d: %s\n", label, rc, msg);
    T_CHECK(one_line(msg), "%s: message is not one line: '%s'", label, msg);
    va_list ap;
    va_start(ap, code);
    for (const char *s; (s = va_arg(ap, const char *));)
        T_CHECK(strstr(msg, s) != NULL, "%s: message lacks '%s': %s", label, s, msg);
    va_end(ap);
}

#define END (const char *)NULL
#define SHARD1 "transformer/diffusion_pytorch_model-00001-of-00003.safetensors"

static void test_checkpoint(const char *fx) {
    char src[1024];
    snprintf(src, sizeof src, "%s/tiny-a/model", fx);

    /* control: the copy opens, and ckpt_get finds real tensors */
    make_ckpt(src);
    {
        c3_ckpt c;
        int rc = ckpt_open(&c, ckdir, true);
        T_CHECK(rc == C3_OK, "the copied checkpoint does not open: %s", c3_errmsg());
        if (rc == C3_OK) {
            const int64_t emb[2] = {c.t.vocab, c.t.hidden}, bad[2] = {c.t.vocab + 1, c.t.hidden};
            T_CHECK(ckpt_get(&c, NULL, "embed_tokens.weight", 2, emb) != NULL, "embed_tokens: %s", c3_errmsg());
            T_CHECK(ckpt_get(&c, NULL, "embed_tokens.weight", 2, bad) == NULL, "wrong shape accepted");
            T_CHECK(strstr(c3_errmsg(), "transformer") && strstr(c3_errmsg(), "embed_tokens.weight has shape"),
                    "wrong-shape message: %s", c3_errmsg());
            T_CHECK(ckpt_get(&c, NULL, "layers.0.no_such.weight", 2, emb) == NULL, "missing tensor found");
            T_CHECK(strstr(c3_errmsg(), "layers.0.no_such.weight is missing"), "missing message: %s", c3_errmsg());
            ckpt_close(&c);
        }
    }

    /* the folder itself */
    {
        char saved[512];
        snprintf(saved, sizeof saved, "%s", ckdir);
        snprintf(ckdir, sizeof ckdir, "%s/no_such_model", tmpdir);
        expect_ckpt("absent folder", true, C3_EMODEL, "no_such_model", "does not exist", END);
        snprintf(ckdir, sizeof ckdir, "%s", saved);
    }
    /* model_index.json */
    unlink(ck("model_index.json"));
    expect_ckpt("no model_index.json", true, C3_EMODEL, ck("model_index.json"), "missing", END);
    make_ckpt(src);
    write_bytes(ck("model_index.json"), "{\"_class_name\": ", 16);
    expect_ckpt("bad model_index.json", true, C3_EMODEL, ck("model_index.json"), "invalid JSON", END);
    make_ckpt(src);
    edit_file("model_index.json", "\"default_use_system_prompt\": true", "\"default_use_system_prompt\": \"yes\"");
    expect_ckpt("model_index type", true, C3_EMODEL, ck("model_index.json"), "default_use_system_prompt", END);
    /* the "cosmos3" model card (the demo model's keys): wrong types are one-line errors */
    static const char *const cards[][2] = {
        {"5", "\"cosmos3\" must be an object"},
        {"{\"tokenizer\": \"other\"}", "cosmos3.tokenizer"},
        {"{\"vocabulary\": \"a b\"}", "cosmos3.vocabulary"},
        {"{\"examples\": [1]}", "cosmos3.examples"},
        {"{\"defaults\": 3}", "cosmos3.defaults"},
        {"{\"defaults\": {\"guidance\": \"high\"}}", "\"guidance\" must be a number"},
        {"{\"defaults\": {\"steps\": -2}}", "must be positive"},
        {"{\"defaults\": {\"schedule\": 7}}", "cosmos3.defaults.schedule"},
        {"{\"defaults\": {\"guidance_interval\": [1]}}", "guidance_interval"},
    };
    for (size_t i = 0; i < C3_ARRAY_LEN(cards); i++) {
        char with[256];
        snprintf(with, sizeof with, "\"_class_name\": \"Cosmos3OmniPipeline\", \"cosmos3\": %s,", cards[i][0]);
        make_ckpt(src);
        edit_file("model_index.json", "\"_class_name\": \"Cosmos3OmniPipeline\",", with);
        expect_ckpt(cards[i][0], true, C3_EMODEL, ck("model_index.json"), cards[i][1], END);
    }
    /* a good card is read as written */
    make_ckpt(src);
    edit_file("model_index.json", "\"_class_name\": \"Cosmos3OmniPipeline\",",
              "\"_class_name\": \"Cosmos3OmniPipeline\", \"cosmos3\": {\"defaults\": {\"width\": 64, \"height\": 48, "
              "\"steps\": 9, \"guidance\": 2.5, \"guidance_interval\": null, \"schedule\": \"karras\"}, "
              "\"vocabulary\": [\"a\", \"b\"], \"examples\": [\"a b\"]},");
    {
        c3_ckpt c;
        int rc = ckpt_open(&c, ckdir, false);
        T_CHECK(rc == C3_OK, "good card: %s", c3_errmsg());
        if (rc == C3_OK) {
            const c3_model_card *k = &c.card;
            T_CHECK(k->width == 64 && k->height == 48 && k->steps == 9 && k->guidance == 2.5 && k->interval == 2 &&
                        !strcmp(k->schedule, "karras") && k->shift < 0 && k->nvocab == 2 && k->nexamples == 1 &&
                        !k->builtin_tokenizer,
                    "card read as %dx%d, %d steps, guidance %g, interval %d, schedule %s, %d words", k->width,
                    k->height, k->steps, k->guidance, k->interval, k->schedule, k->nvocab);
            ckpt_close(&c);
        }
    }

    /* transformer/config.json */
    make_ckpt(src);
    unlink(ck("transformer/config.json"));
    expect_ckpt("no transformer config", true, C3_EMODEL, ck("transformer/config.json"), "missing", END);
    make_ckpt(src);
    write_bytes(ck("transformer/config.json"), "{\"hidden_size\": 64,,}", 21);
    expect_ckpt("bad transformer config", true, C3_EMODEL, ck("transformer/config.json"), "invalid JSON", END);
    make_ckpt(src);
    edit_file("transformer/config.json", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
    expect_ckpt("heads % kv_heads", true, C3_EMODEL, ck("transformer/config.json"), "num_key_value_heads 3", END);
    make_ckpt(src);
    edit_file("transformer/config.json", "\"hidden_size\": 64", "\"hidden_size\": \"64\"");
    expect_ckpt("hidden_size type", true, C3_EMODEL, ck("transformer/config.json"), "hidden_size", "integer", END);

    /* scheduler */
    make_ckpt(src);
    unlink(ck("scheduler/scheduler_config.json"));
    expect_ckpt("no scheduler config", true, C3_EMODEL, ck("scheduler/scheduler_config.json"), "missing", END);
    make_ckpt(src);
    edit_file("scheduler/scheduler_config.json", "\"sigma_max\": 200.0", "\"sigma_max\": \"big\"");
    expect_ckpt("scheduler sigma_max type", true, C3_EMODEL, ck("scheduler/scheduler_config.json"), "sigma_max",
                END);

    /* tokenizer.json */
    make_ckpt(src);
    unlink(ck("text_tokenizer/tokenizer.json"));
    expect_ckpt("no tokenizer.json", true, C3_EMODEL, ck("text_tokenizer/tokenizer.json"), "missing", END);

    /* shards and their index */
    make_ckpt(src);
    unlink(ck(SHARD1));
    expect_ckpt("missing shard", true, C3_EMODEL, ck(SHARD1), END);
    make_ckpt(src);
    write_bytes(ck("transformer/diffusion_pytorch_model.safetensors.index.json"), "{\"metadata\": {}}", 16);
    expect_ckpt("index without weight_map", true, C3_EMODEL, "weight_map", END);
    make_ckpt(src);
    edit_file("transformer/diffusion_pytorch_model.safetensors.index.json", "\"weight_map\": {",
              "\"weight_map\": {\"layers.0.ghost.weight\": \"diffusion_pytorch_model-00003-of-00003.safetensors\", ");
    expect_ckpt("index names an absent tensor", true, C3_EMODEL, "layers.0.ghost.weight", "does not hold it", END);
    make_ckpt(src);
    edit_file("transformer/diffusion_pytorch_model.safetensors.index.json", "\"weight_map\": {",
              "\"weight_map\": {\"x\": \"../vae/diffusion_pytorch_model.safetensors\", ");
    expect_ckpt("index escapes transformer/", true, C3_EMODEL, "weight_map[x]", END);
    /* a truncated shard: first 4096 bytes of shard 1 */
    make_ckpt(src);
    {
        char *data;
        size_t len;
        T_CHECK(c3_read_file(ck(SHARD1), &data, &len) == C3_OK, "read shard");
        unlink(ck(SHARD1));
        write_bytes(ck(SHARD1), data, C3_MIN(len, (size_t)4096));
        free(data);
        expect_ckpt("truncated shard", true, C3_EMODEL, ck(SHARD1), END);
    }
    /* no index and no single file */
    make_ckpt(src);
    unlink(ck("transformer/diffusion_pytorch_model.safetensors.index.json"));
    expect_ckpt("no weights", true, C3_EMODEL, "transformer", "diffusion_pytorch_model.safetensors", END);

    /* VAE */
    make_ckpt(src);
    unlink(ck("vae/config.json"));
    expect_ckpt("no vae config", true, C3_EMODEL, ck("vae/config.json"), "missing", END);
    expect_ckpt("no vae config, not needed", false, C3_OK, END);
    make_ckpt(src);
    edit_file("vae/config.json", "\"latents_mean\": [", "\"latents_mean\": [0.5, ");
    expect_ckpt("latents_mean length", true, C3_EMODEL, ck("vae/config.json"), "latents_mean", END);
    make_ckpt(src);
    unlink(ck("vae/diffusion_pytorch_model.safetensors"));
    expect_ckpt("no vae weights", true, C3_EMODEL, ck("vae/diffusion_pytorch_model.safetensors"), END);

    rm_tree(ckdir);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/cosmos3-badinput.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_safetensors();
    test_config_parsers();
    test_tokenizer_files();
    test_tokenizer_collisions();
    test_noise_files();
    test_files();
    const char *fx = t_fixtures();
    if (fx) test_checkpoint(fx);
    else fprintf(stderr, "badinput: fixtures not found; checkpoint-folder cases skipped\n");
    rm_tree(tmpdir);
    return t_done("badinput");
}
