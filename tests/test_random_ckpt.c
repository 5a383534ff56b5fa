/* test_random_ckpt.c - a folder with transformer/random.json (`mkmodel
 * --random-transformer`): its transformer is made in memory on open.
 *  1. the folder holds random.json and no shards; ckpt_open lists exactly
 *     the tensors (names, shapes, bf16) a written `mkmodel` folder of the
 *     same preset holds, for tiny and demo; for edge (ReLU^2, Nemotron
 *     norms; one layer, not written: 200 MB) the parameters mkmodel_size
 *     counts for its shards;
 *  2. every tensor reads back through the checkpoint API as
 *     bf16(c3_random_weight(i, 0.03)) (its first 64 Ki values; the whole
 *     buffer once), the buffer is as large as the largest tensor (the
 *     embedding);
 *  3. the engine runs on it (tiny, CFG): finite latents, and a second engine
 *     gives the same latents bit for bit;
 *  3b. on a backend that makes the weights itself (fill_random, as CUDA's:
 *     here the CPU backend given a host fill_random), model_load makes them
 *     there instead of uploading from the buffer, and the UND + GEN forward
 *     equals the plain load's bit for bit;
 *  4. bad random.json (not JSON, not an object, an unknown generator, an
 *     amplitude out of range, both it and shards) or a config asking for what
 *     it does not make (float32, sound): C3_EMODEL, one line naming the file;
 *     --random-transformer with --fp8: C3_EUSAGE, nothing written.
 * The CLI (info, gen vs cosmos3 bench --e2e, serve) is test_random_ckpt.sh. */
#include <math.h>
#include <sys/stat.h>

#include "backend.h"
#include "checkpoint.h"
#include "checkpoint_random.h"
#include "model.h"
#include "test_engine.h"
#include "weights_random.h"

#define CHECK_VALUES 65536 /* values of each tensor compared with the generator */
#define EDGE_LAYERS 1
#define EDGE_VOCAB 1024

static int make(const char *preset, const char *dir, const char *tok, bool random, bool fp8) {
    bool edge = !strcmp(preset, "edge");
    c3_mkmodel_opts o = {.preset = preset,
                         .layers = edge ? EDGE_LAYERS : 0,
                         .vocab = edge ? EDGE_VOCAB : 0,
                         .seed = 3,
                         .out_dir = dir,
                         .tokenizer_dir = tok,
                         .overwrite = true,
                         .random_transformer = random,
                         .fp8 = fp8};
    return mkmodel_write(&o);
}

static bool exists_in(const char *dir, const char *rel) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    return c3_file_exists(p);
}

/* 1 + 2: the random folder of a preset against the written one */
static void check_preset(const char *base, const char *tok, const char *preset) {
    char rdir[700], wdir[700];
    bool write = strcmp(preset, "edge") != 0;
    snprintf(rdir, sizeof rdir, "%s/%s_random", base, preset);
    snprintf(wdir, sizeof wdir, "%s/%s_written", base, preset);
    T_CHECK(make(preset, rdir, tok, true, false) == C3_OK, "%s: %s", preset, c3_errmsg());
    if (write)
        T_CHECK(make(preset, wdir, tok, false, false) == C3_OK, "%s: %s", preset, c3_errmsg());
    T_CHECK(exists_in(rdir, "transformer/" CKPT_RANDOM_FILE) &&
                !exists_in(rdir, "transformer/diffusion_pytorch_model.safetensors") &&
                exists_in(rdir, "vae/diffusion_pytorch_model.safetensors") &&
                exists_in(rdir, "transformer/config.json"),
            "%s: random.json, no shards, the VAE and the configs", preset);
    c3_ckpt r, w;
    if (ckpt_open(&r, rdir, true) != C3_OK) {
        T_CHECK(false, "%s: %s", preset, c3_errmsg());
        return;
    }
    if (write && ckpt_open(&w, wdir, true) != C3_OK) {
        T_CHECK(false, "%s: %s", preset, c3_errmsg());
        ckpt_close(&r);
        return;
    }
    T_CHECK(r.random && (!write || !w.random) && fabs(r.random_amp - CKPT_RANDOM_AMPLITUDE) < 1e-12,
            "%s: random flag, amplitude %g", preset, r.random_amp);
    if (write) {
        T_CHECK(r.ntens == w.ntens, "%s: %d tensors made, %d written", preset, r.ntens, w.ntens);
    } else { /* the parameters of the shards mkmodel would write */
        c3_mkmodel_opts o = {.preset = preset, .layers = EDGE_LAYERS, .vocab = EDGE_VOCAB};
        c3_mkmodel_size s;
        int64_t params = 0;
        for (int i = 0; i < r.ntens; i++)
            params += st_numel(r.tens[i].t);
        T_CHECK(mkmodel_size(&o, &s) == C3_OK && s.transformer_params == params &&
                    s.transformer_tensors == r.ntens,
                "%s: %lld parameters in %d tensors made, mkmodel writes %lld in %d", preset,
                (long long)params, r.ntens, (long long)s.transformer_params, s.transformer_tensors);
    }
    size_t big = 0;
    for (int i = 0; i < r.ntens && (!write || i < w.ntens); i++) {
        const st_tensor *a = ckpt_get(&r, NULL, r.tens[i].name, r.tens[i].t->ndim,
                                      r.tens[i].t->shape); /* through the API's checks */
        T_CHECK(a != NULL, "%s: %s", preset, c3_errmsg());
        if (!a) continue;
        if (write) {
            const st_tensor *b = w.tens[i].t;
            bool same = !strcmp(r.tens[i].name, w.tens[i].name) && a->ndim == b->ndim &&
                        a->dtype == C3_BF16 && b->dtype == C3_BF16;
            for (int d = 0; same && d < a->ndim; d++)
                same = a->shape[d] == b->shape[d];
            T_CHECK(same, "%s: tensor %d: made %s, written %s", preset, i, r.tens[i].name,
                    w.tens[i].name);
        }
        big = C3_MAX(big, a->nbytes);
        /* 2: the values read through the API: bf16(c3_random_weight(i, 0.03)) */
        const uint16_t *v = a->data;
        int64_t n = C3_MIN(st_numel(a), (int64_t)CHECK_VALUES), bad = -1;
        for (int64_t k = 0; k < n && bad < 0; k++)
            if (v[k] != c3_f32_to_bf16(c3_random_weight(k, (float)CKPT_RANDOM_AMPLITUDE))) bad = k;
        T_CHECK(bad < 0, "%s: %s element %lld is not c3_random_weight's", preset, r.tens[i].name,
                (long long)bad);
    }
    int64_t bad = -1;
    for (int64_t k = 0; k < r.random_n && bad < 0; k++)
        if (r.random_buf[k] != c3_f32_to_bf16(c3_random_weight(k, (float)CKPT_RANDOM_AMPLITUDE)))
            bad = k;
    T_CHECK(bad < 0, "%s: buffer element %lld is not c3_random_weight's", preset, (long long)bad);
    /* the largest tensor: the embedding at the full vocabulary (edge's 1024 rows: its MLP) */
    T_CHECK(r.random_n * 2 == (int64_t)big &&
                (!write || big == ckpt_find(&r, "embed_tokens.weight")->nbytes),
            "%s: buffer %lld values, the largest tensor %zu bytes", preset, (long long)r.random_n,
            big);
    if (write) ckpt_close(&w);
    ckpt_close(&r);
}

/* 3: the engine on the tiny random folder, twice */
static float *run_engine(const char *model, int64_t *n) {
    cosmos3_open_params op;
    t_engine_open_params(&op, model, "cpu", 1, 1, 1, NULL);
    cosmos3_engine *e = NULL;
    char err[1024];
    int rc = cosmos3_open(&op, &e, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "cosmos3_open %s: %s", model, err);
    if (rc) return NULL;
    cosmos3_request rq;
    t_engine_request(&rq);
    cosmos3_result *res = NULL;
    rc = cosmos3_generate(e, &rq, &res, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "generate: %s", err);
    float *x = rc == COSMOS3_OK ? t_result_latents(res, n) : NULL;
    cosmos3_result_free(res);
    cosmos3_close(e);
    return x;
}

/* 3b: a CPU backend with a fill_random of its own: what CUDA's makes,
 * bf16(c3_random_weight(offset + i, amp)), into the F32 tensor; counted */
static int64_t fills, filled;
static int host_fill(c3_backend *be, c3_tensor *dst, int64_t offset, float amp) {
    (void)be;
    T_CHECK(dst->dtype == C3_F32, "fill_random into %s", c3_dtype_name(dst->dtype));
    float *x = dst->data;
    for (int64_t i = 0; i < c3_numel(dst); i++)
        x[i] = c3_bf16_to_f32(c3_f32_to_bf16(c3_random_weight(offset + i, amp)));
    fills++;
    filled += c3_numel(dst);
    return C3_OK;
}

/* UND over 5 ids, then one GEN forward on a 1 x 4 x 4 latent: the velocity */
static float *forward(const c3_ckpt *ck, c3_backend *be, int64_t *n) {
    c3_model *m = NULL;
    c3_shard sh = {.tp_size = 1, .sp_size = 1};
    int rc = model_load(&m, ck, be, &sh);
    T_CHECK(rc == C3_OK, "model_load: %s", c3_errmsg());
    if (rc) return NULL;
    int32_t ids[5] = {9, 151644, 872, 198, 33};
    c3_undkv kv;
    rc = model_und(m, ids, 5, &kv);
    T_CHECK(rc == C3_OK, "model_und: %s", c3_errmsg());
    c3_latent_geom g = {.T = 1, .h = 4, .w = 4, .fps = 24};
    *n = (int64_t)ck->t.latent_ch * g.T * g.h * g.w;
    float *lat = xmalloc((size_t)*n * sizeof *lat), *vel = xcalloc((size_t)*n, sizeof *vel);
    uint64_t s = 7;
    for (int64_t i = 0; i < *n; i++)
        lat[i] = t_frand(&s);
    if (rc == C3_OK) {
        rc = model_gen(m, &kv, lat, &g, 500, vel);
        T_CHECK(rc == C3_OK, "model_gen: %s", c3_errmsg());
        undkv_free(&kv);
    }
    free(lat);
    model_free(m);
    return vel;
}

static void check_fill(const char *dir) {
    c3_ckpt ck;
    if (ckpt_open(&ck, dir, false) != C3_OK) {
        T_CHECK(false, "%s", c3_errmsg());
        return;
    }
    c3_backend *plain = c3_backend_cpu(), *fill = c3_backend_cpu();
    fill->caps |= C3_CAP_RANDOM;
    fill->fill_random = host_fill;
    T_CHECK(c3_backend_check(fill) == C3_OK, "%s", c3_errmsg());
    int64_t n1 = 0, n2 = 0;
    float *a = forward(&ck, plain, &n1);
    T_CHECK(fills == 0, "the plain CPU backend was filled %lld times", (long long)fills);
    float *b = forward(&ck, fill, &n2);
    int64_t bf16 = 0; /* the values of the bf16 weights the fill may make: all but none */
    for (int i = 0; i < ck.ntens; i++)
        bf16 += st_numel(ck.tens[i].t);
    T_CHECK(fills > 0 && filled > bf16 / 2 && filled <= bf16,
            "fill_random made %lld values in %lld calls (the weights hold %lld)", (long long)filled,
            (long long)fills, (long long)bf16);
    bool finite = a != NULL;
    for (int64_t i = 0; a && i < n1; i++)
        finite &= isfinite(a[i]) != 0;
    T_CHECK(a && b && n1 == n2 && finite && memcmp(a, b, (size_t)n1 * sizeof *a) == 0,
            "the forward on weights made by fill_random differs from the uploaded ones");
    free(a);
    free(b);
    c3_backend_destroy(plain);
    c3_backend_destroy(fill);
    ckpt_close(&ck);
}

/* 4: random.json text -> C3_EMODEL naming the file, one line */
static void check_bad(const char *dir, const char *text, const char *want) {
    char p[4096];
    snprintf(p, sizeof p, "%s/transformer/" CKPT_RANDOM_FILE, dir);
    c3_write_file_atomic(p, text, strlen(text), true);
    c3_ckpt c;
    int rc = ckpt_open(&c, dir, true);
    const char *m = c3_errmsg();
    T_CHECK(rc == C3_EMODEL && strstr(m, p) && strstr(m, want) && !strchr(m, '\n'),
            "random.json %s: rc %d, '%s' (want C3_EMODEL naming %s and '%s')", text, rc, m, p,
            want);
    if (rc == C3_OK) ckpt_close(&c);
}

int main(void) {
    char base[] = "/tmp/c3_test_random_ckpt_XXXXXX";
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    const char *src = getenv("COSMOS3_SRCDIR");
    char tok[4096];
    snprintf(tok, sizeof tok, "%s/share/tokenizer", src ? src : ".");

    for (const char *const *p = (const char *const[]){"tiny", "demo", "edge", NULL}; *p; p++)
        check_preset(base, tok, *p);

    char tiny[700];
    snprintf(tiny, sizeof tiny, "%s/tiny_random", base);
    int64_t n1 = 0, n2 = 0;
    float *a = run_engine(tiny, &n1), *b = run_engine(tiny, &n2);
    if (a && b) {
        bool finite = true;
        double norm = 0;
        for (int64_t i = 0; i < n1; i++) {
            finite &= isfinite(a[i]) != 0;
            norm += (double)a[i] * a[i];
        }
        T_CHECK(n1 == n2 && n1 > 0 && finite && norm > 0, "engine: %lld latents, finite %d, |x| %g",
                (long long)n1, finite, sqrt(norm));
        T_CHECK(n1 == n2 && memcmp(a, b, (size_t)n1 * sizeof *a) == 0,
                "engine: a second engine on the folder gives other latents");
    }
    free(a);
    free(b);
    check_fill(tiny);

    char bad[700];
    snprintf(bad, sizeof bad, "%s/demo_random", base);
    check_bad(bad, "{oops", "invalid JSON");
    check_bad(bad, "[1, 2]", "expected a JSON object");
    check_bad(bad, "{\"amplitude\": 0.03}", "no \"generator\"");
    check_bad(bad, "{\"generator\": \"xorshift\"}", "unknown generator \"xorshift\"");
    check_bad(bad, "{\"generator\": \"c3_random_weight\", \"amplitude\": 0}", "must be in (0, 1]");
    check_bad(bad, "{\"generator\": \"c3_random_weight\", \"amplitude\": \"big\"}",
              "must be a number");
    /* both random.json and shards: refused, naming both ways out */
    char w[700], r[800];
    snprintf(w, sizeof w, "%s/demo_written", base);
    snprintf(r, sizeof r, "%s/transformer/" CKPT_RANDOM_FILE, w);
    c3_write_file_atomic(r, "{\"generator\": \"c3_random_weight\"}", 33, true);
    c3_ckpt c;
    int rc = ckpt_open(&c, w, true);
    T_CHECK(rc == C3_EMODEL && strstr(c3_errmsg(), "both"), "random.json beside shards: rc %d, %s",
            rc, c3_errmsg());
    if (rc == C3_OK) ckpt_close(&c);

    /* a config asking for what random.json does not make: refused naming it */
    char cfg[800];
    snprintf(cfg, sizeof cfg, "%s/transformer/config.json", bad);
    snprintf(r, sizeof r, "%s/transformer/" CKPT_RANDOM_FILE, bad);
    c3_write_file_atomic(r, "{\"generator\": \"c3_random_weight\"}", 33, true);
    char *text = NULL;
    size_t len = 0;
    T_CHECK(c3_read_file(cfg, &text, &len) == C3_OK, "%s", c3_errmsg());
    static const char *const edits[][3] = {
        {"\"dtype\": \"bfloat16\"", "\"dtype\": \"float32\"", "set \"dtype\": \"bfloat16\""},
        {"\"sound_gen\": false", "\"sound_gen\": true", "sound_gen is true"},
    };
    for (size_t k = 0; text && k < C3_ARRAY_LEN(edits); k++) {
        char *at = strstr(text, edits[k][0]);
        T_CHECK(at != NULL, "config.json lacks %s", edits[k][0]);
        if (!at) continue;
        size_t n0 = strlen(edits[k][0]), n1 = strlen(edits[k][1]);
        char *e = xmalloc(len + n1 + 1);
        size_t pre = (size_t)(at - text);
        memcpy(e, text, pre);
        memcpy(e + pre, edits[k][1], n1);
        memcpy(e + pre + n1, at + n0, len - pre - n0 + 1);
        c3_write_file_atomic(cfg, e, strlen(e), true);
        free(e);
        rc = ckpt_open(&c, bad, true);
        T_CHECK(rc == C3_EMODEL && strstr(c3_errmsg(), edits[k][2]) && strstr(c3_errmsg(), cfg),
                "config %s beside random.json: rc %d, %s", edits[k][1], rc, c3_errmsg());
        if (rc == C3_OK) ckpt_close(&c);
    }
    free(text);

    char f[700];
    snprintf(f, sizeof f, "%s/fp8", base);
    rc = make("tiny", f, tok, true, true);
    T_CHECK(rc == C3_EUSAGE && strstr(c3_errmsg(), "--precision fp8") && !c3_file_exists(f),
            "--random-transformer --fp8: rc %d, %s", rc, c3_errmsg());

    t_rm_tree(base);
    return t_done("random_ckpt");
}
