/* test_tokenizer.c - the Qwen3 tokenizer and prompt assembly against the
 * upstream goldens (tiny-a/golden/tokenization.json): raw encodes, every
 * pipeline case's rendered chat text and its exact id lists, decoding, invalid
 * UTF-8, truncation. All ids must match exactly. */
#include <jansson.h>
#include <time.h>

#include "prompt.h"
#include "test_util.h"
#include "tokenizer.h"

#define LOAD_TIME_LIMIT_S 2.0 /* generous: the machine is shared; typical is far lower */

static bool ids_equal(const int32_t *ids, int n, json_t *ref, const char *what, const char *id) {
    bool ok = (size_t)n == json_array_size(ref);
    for (int i = 0; ok && i < n; i++)
        ok = ids[i] == json_integer_value(json_array_get(ref, (size_t)i));
    if (!ok) {
        fprintf(stderr, "  %s %s: got %d ids, want %zu\n   got:", id, what, n,
                json_array_size(ref));
        for (int i = 0; i < n && i < 80; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n  want:");
        for (size_t i = 0; i < json_array_size(ref) && i < 80; i++)
            fprintf(stderr, " %lld", (long long)json_integer_value(json_array_get(ref, i)));
        fprintf(stderr, "\n");
    }
    return ok;
}

static void check_raw(const c3_tokenizer *tok, json_t *cases) {
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *jt = json_object_get(c, "text");
        const char *text = json_string_value(jt);
        size_t len = json_string_length(jt);
        int32_t *ids = NULL;
        int n = 0;
        int rc = tok_encode(tok, text, len, &ids, &n);
        char name[96];
        snprintf(name, sizeof name, "raw %s", json_string_value(json_object_get(c, "name")));
        T_CHECK(rc == C3_OK, "%s: %s", name, c3_errmsg());
        T_CHECK(ids_equal(ids, n, json_object_get(c, "ids"), "ids", name), "%s ids differ", name);
        /* decoding: the pieces concatenate to the golden decoded text */
        const char *dec = json_string_value(json_object_get(c, "decoded"));
        if (dec) {
            size_t cap = 16, used = 0;
            char *buf = xmalloc(cap);
            bool all = true;
            for (int k = 0; k < n; k++) {
                const char *p = tok_piece(tok, ids[k]);
                if (!p) {
                    all = false;
                    break;
                }
                size_t m = strlen(p);
                while (used + m + 1 > cap)
                    buf = xrealloc(buf, cap *= 2);
                memcpy(buf + used, p, m);
                used += m;
            }
            buf[used] = 0;
            T_CHECK(all && !strcmp(buf, dec), "%s: decoded pieces \"%s\" != \"%s\"", name, buf,
                    dec);
            free(buf);
        }
        /* tokens: the byte-level token strings map back to the same ids */
        json_t *toks = json_object_get(c, "tokens");
        size_t k;
        json_t *tk;
        int bad = 0;
        json_array_foreach(toks, k, tk) {
            if ((int)k < n && tok_id(tok, json_string_value(tk)) != ids[k]) bad++;
        }
        T_CHECK(bad == 0 && (int)json_array_size(toks) == n,
                "%s: %d token strings map to other ids", name, bad);
        free(ids);
    }
}

static void check_pipeline(const c3_tokenizer *tok, json_t *cases) {
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *id = json_string_value(json_object_get(c, "id"));
        bool res = json_is_true(json_object_get(c, "add_resolution_template"));
        bool dur = json_is_true(json_object_get(c, "add_duration_template"));
        c3_prompt_opts o = {
            .system_prompt = json_is_true(json_object_get(c, "use_system_prompt")),
            .templates = res || dur,
            .skip_duration = !dur,
            .skip_resolution = !res,
            .width = (int)json_integer_value(json_object_get(c, "width")),
            .height = (int)json_integer_value(json_object_get(c, "height")),
            .frames = (int)json_integer_value(json_object_get(c, "num_frames")),
            .fps = json_number_value(json_object_get(c, "fps")),
        };
        const char *text[2] = {
            json_string_value(json_object_get(c, "prompt")),
            json_string_value(json_object_get(c, "negative_prompt"))}; /* NULL for None */
        const char *rkey[2] = {"cond_rendered", "uncond_rendered"},
                   *ikey[2] = {"cond_ids", "uncond_ids"};
        for (int b = 0; b < 2; b++) {
            char *r = prompt_render(text[b], b == 1, &o);
            const char *want = json_string_value(json_object_get(c, rkey[b]));
            T_CHECK(want && !strcmp(r, want), "%s %s:\n got  \"%s\"\n want \"%s\"", id, rkey[b], r,
                    want);
            free(r);
            int32_t *ids = NULL;
            int n = 0;
            int rc = prompt_ids(tok, text[b], b == 1, &o, &ids, &n);
            T_CHECK(rc == C3_OK, "%s: %s", id, c3_errmsg());
            T_CHECK(ids_equal(ids, n, json_object_get(c, ikey[b]), ikey[b], id), "%s %s differ", id,
                    ikey[b]);
            free(ids);
        }
    }
}

static void check_invalid_utf8(const c3_tokenizer *tok) {
    static const struct {
        const char *s;
        size_t len, off;
    } bad[] = {
        {"abc\xff", 4, 3},          /* never valid */
        {"ok \xc0\x80", 5, 3},      /* overlong NUL */
        {"x\xed\xa0\x80y", 5, 1},   /* UTF-16 surrogate */
        {"\xe4\xb8", 2, 0},         /* truncated sequence */
        {"caf\xc3\xa9 \x80", 7, 6}, /* stray continuation byte after valid text */
        {"\xf4\x90\x80\x80", 4, 0}, /* above U+10FFFF */
    };
    for (size_t i = 0; i < C3_ARRAY_LEN(bad); i++) {
        int32_t *ids = NULL;
        int n = -1;
        int rc = tok_encode(tok, bad[i].s, bad[i].len, &ids, &n);
        char want[32];
        snprintf(want, sizeof want, "byte %zu", bad[i].off);
        T_CHECK(rc == C3_EINPUT, "invalid UTF-8 case %zu: rc %d", i, rc);
        T_CHECK(strstr(c3_errmsg(), want) != NULL, "case %zu: message \"%s\" lacks \"%s\"", i,
                c3_errmsg(), want);
        T_CHECK(ids == NULL && n == 0, "case %zu: output not cleared", i);
        T_CHECK(tok_utf8_invalid(bad[i].s, bad[i].len) == bad[i].off, "case %zu: tok_utf8_invalid",
                i);
        c3_prompt_opts o = {.system_prompt = true,
                            .templates = true,
                            .width = 64,
                            .height = 64,
                            .frames = 1,
                            .fps = 24};
        char z[16] = {0};
        memcpy(z, bad[i].s, bad[i].len);
        rc = prompt_ids(tok, z, false, &o, &ids, &n);
        T_CHECK(rc == C3_EINPUT && strstr(c3_errmsg(), want), "case %zu: prompt_ids rc %d \"%s\"",
                i, rc, c3_errmsg());
    }
    /* valid edge cases are accepted */
    T_CHECK(tok_utf8_invalid("\xf4\x8f\xbf\xbf", 4) == 4, "U+10FFFF is valid");
    T_CHECK(tok_utf8_invalid("\xef\xbb\xbf", 3) == 3, "U+FEFF is valid");
}

static void check_misc(const c3_tokenizer *tok, json_t *special) {
    T_CHECK(tok_id(tok, "<|im_end|>") ==
                json_integer_value(json_object_get(special, "eos_token_id")),
            "eos id");
    T_CHECK(tok_id(tok, "<|vision_start|>") ==
                json_integer_value(json_object_get(special, "vision_start_token_id")),
            "vision_start id");
    T_CHECK(tok_id(tok, "<|im_start|>") ==
                json_integer_value(json_object_get(special, "im_start_token_id")),
            "im_start id");
    T_CHECK(tok_id(tok, "<|endoftext|>") ==
                json_integer_value(json_object_get(special, "endoftext_token_id")),
            "endoftext id");
    T_CHECK(tok_id(tok, "no such token at all") == -1, "unknown token");
    T_CHECK(tok_piece(tok, -1) == NULL && tok_piece(tok, tok_vocab_size(tok)) == NULL,
            "piece out of range");
    T_CHECK(!strcmp(tok_piece(tok, tok_id(tok, "<|im_end|>")), "<|im_end|>"), "added token piece");

    /* truncation: 4096 template ids, then eos and vision_start */
    size_t words = 3 * C3_MAX_SEQ;
    char *longp = xmalloc(words * 2 + 1);
    for (size_t i = 0; i < words; i++)
        memcpy(longp + 2 * i, "a ", 2);
    longp[words * 2] = 0;
    c3_prompt_opts o = {.system_prompt = true, .width = 64, .height = 64, .frames = 1, .fps = 24};
    int32_t *ids = NULL;
    int n = 0;
    int rc = prompt_ids(tok, longp, false, &o, &ids, &n);
    T_CHECK(rc == C3_OK && n == C3_MAX_SEQ + 2, "truncation: rc %d n %d", rc, n);
    if (rc == C3_OK && n >= 2) {
        T_CHECK(ids[n - 2] == tok_id(tok, "<|im_end|>") &&
                    ids[n - 1] == tok_id(tok, "<|vision_start|>"),
                "truncation: tail %d %d", ids[n - 2], ids[n - 1]);
        T_CHECK(ids[0] == tok_id(tok, "<|im_start|>"), "truncation keeps the head");
    }
    free(ids);
    free(longp);

    /* NFC: a decomposed "é" encodes as the composed one */
    int32_t *a = NULL, *b = NULL;
    int na = 0, nb = 0;
    T_CHECK(tok_encode(tok, "caf\x65\xcc\x81", 6, &a, &na) == C3_OK, "nfd");
    T_CHECK(tok_encode(tok, "caf\xc3\xa9", 5, &b, &nb) == C3_OK, "nfc");
    T_CHECK(na == nb && na > 0 && !memcmp(a, b, (size_t)na * sizeof *a),
            "NFD and NFC encode alike");
    free(a);
    free(b);
    /* empty input */
    T_CHECK(tok_encode(tok, "", 0, &a, &na) == C3_OK && na == 0 && a != NULL, "empty text");
    free(a);
}

/* Write `text` to a fresh temporary file; returns its path (static buffer). */
static const char *write_temp(const char *text, size_t len) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/c3tok-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len) {
        fprintf(stderr, "FAIL: cannot write %s\n", path);
        exit(1);
    }
    close(fd);
    return path;
}

/* A small synthetic byte-level BPE file exercises the generic paths the Qwen
 * file does not: merges as "a b" strings, a bare Split pre-tokenizer, no
 * normalizer, lstrip on an added token, merge ranks deciding the result. */
static void check_synthetic(void) {
    json_t *vocab = json_object();
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) { /* GPT-2 byte alphabet; id = byte value */
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = keep ? (uint32_t)b : next++;
        char u[4] = {0};
        if (cp < 0x80)
            u[0] = (char)cp;
        else
            u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F));
        json_object_set_new(vocab, u, json_integer(b));
    }
    json_object_set_new(vocab, "ab", json_integer(256));
    json_object_set_new(vocab, "abc", json_integer(257));
    json_object_set_new(vocab, "bc", json_integer(259));
    json_t *root = json_pack(
        "{s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}], s:n, s:{s:s, s:{s:s}, s:s, s:b},"
        " s:{s:s, s:o, s:[s, s, s]}}",
        "added_tokens", "id", 258, "content", "<x>", "lstrip", 1, "rstrip", 0, "single_word", 0,
        "normalized", 0, "special", 1, "normalizer", "pre_tokenizer", "type", "Split", "pattern",
        "Regex", "\\s+|\\S+", "behavior", "Isolated", "invert", 0, "model", "type", "BPE", "vocab",
        vocab, "merges", "a b", "ab c", "b c");
    char *text = json_dumps(root, JSON_COMPACT);
    const char *path = write_temp(text, strlen(text));
    c3_tokenizer *t = NULL;
    int rc = tok_load(&t, path);
    T_CHECK(rc == C3_OK, "synthetic load: %s", c3_errmsg());
    if (rc == C3_OK) {
        static const int32_t want[] = {257, 32, 256, 258, 97, 32, 259};
        int32_t *ids = NULL;
        int n = 0;
        rc = tok_encode(t, "abc ab  <x>a bc", 15, &ids, &n); /* lstrip eats the spaces before <x> */
        bool ok = rc == C3_OK && n == (int)C3_ARRAY_LEN(want) && !memcmp(ids, want, sizeof want);
        T_CHECK(ok, "synthetic encode: rc %d n %d", rc, n);
        for (int i = 0; !ok && i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        free(ids);
        T_CHECK(tok_vocab_size(t) == 260, "synthetic vocab size %d", tok_vocab_size(t));
        T_CHECK(!strcmp(tok_piece(t, 32), " ") && !strcmp(tok_piece(t, 257), "abc"),
                "synthetic pieces");
    }
    tok_free(t);
    unlink(path);
    free(text);
    json_decref(root);
}

/* Truncated and malformed files are C3_EMODEL, not crashes. */
static void check_malformed(const char *real) {
    char *data = NULL;
    size_t len = 0;
    if (c3_read_file(real, &data, &len) != C3_OK) return;
    const size_t cuts[] = {0, 1, 100, len / 3, len / 2, len - 2};
    for (size_t i = 0; i < C3_ARRAY_LEN(cuts); i++) {
        const char *path = write_temp(data, cuts[i]);
        c3_tokenizer *t = NULL;
        int rc = tok_load(&t, path);
        T_CHECK(rc == C3_EMODEL && t == NULL, "truncated at %zu: rc %d", cuts[i], rc);
        unlink(path);
    }
    free(data);
}

int main(void) {
    t_need_fixtures("tokenizer");
    json_error_t err;
    json_t *g = json_load_file(t_path("tiny-a/golden/tokenization.json"), 0, &err);
    if (!g) {
        fprintf(stderr, "FAIL: tokenization.json: %s\n", err.text);
        return 1;
    }
    c3_tokenizer *tok = NULL;
    struct timespec c0, c1;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    double t0 = c3_now();
    int rc = tok_load(&tok, t_path("tiny-a/model/text_tokenizer/tokenizer.json"));
    double dt = c3_now() - t0;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    double cpu = (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
    if (rc) {
        fprintf(stderr, "FAIL: tok_load: %s\n", c3_errmsg());
        return 1;
    }
    fprintf(stderr, "tokenizer: loaded %d ids in %.1f ms (%.1f ms CPU)\n", tok_vocab_size(tok),
            dt * 1e3, cpu * 1e3);
    T_CHECK(dt < LOAD_TIME_LIMIT_S, "load took %.3f s", dt);

    c3_tokenizer *bad = NULL;
    T_CHECK(tok_load(&bad, "/nonexistent/tokenizer.json") == C3_EMODEL && bad == NULL,
            "missing file");

    check_raw(tok, json_object_get(g, "raw_encode"));
    check_pipeline(tok, json_object_get(g, "pipeline_cases"));
    check_invalid_utf8(tok);
    check_misc(tok, json_object_get(g, "special_ids"));
    check_synthetic();
    check_malformed(t_path("tiny-a/model/text_tokenizer/tokenizer.json"));
    T_CHECK(json_array_size(json_object_get(g, "raw_encode")) >= 14, "raw cases present");
    T_CHECK(json_array_size(json_object_get(g, "pipeline_cases")) >= 36, "pipeline cases present");

    tok_free(tok);
    json_decref(g);
    return t_done("tokenizer");
}
