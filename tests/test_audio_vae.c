/* test_audio_vae.c - the sound decoder (src/audio_vae.c) against the
 * diffusers goldens of tiny-a/sound (fixtures README, "Joint sound"): folded
 * weights, the decoder's internals and waveforms (dec_T4, dec_T10,
 * dec_T3_2d, and the final sound latents of both end-to-end runs), the
 * sound-length table, and configs the loader must refuse. */
#include <jansson.h>

#include "audio_vae.h"
#include "test_util.h"

/* Fixtures README tolerances: max|d| <= 1e-4 max|ref| per tensor. */
#define DEC_MAX_REL 1e-4
#define DEC_REL_L2 1e-4

static const st_file *g_gold;
static const char *g_case;
static int g_traced;

static void check(const char *what, const float *got, const float *ref, int64_t n) {
    double mr = t_max_rel(got, ref, n), l2 = t_rel_l2(got, ref, n);
    T_CHECK(mr <= DEC_MAX_REL && l2 <= DEC_REL_L2, "%s: max rel %.3g, rel L2 %.3g", what, mr, l2);
    fprintf(stderr, "  %-42s max rel %.2e  rel L2 %.2e\n", what, mr, l2);
}

static void on_trace(const char *name, const float *x, int64_t C, int64_t n) {
    char key[160];
    snprintf(key, sizeof key, "%s.trace.%s", g_case, name);
    const st_tensor *t = st_find(g_gold, key);
    T_CHECK(t != NULL, "golden trace %s missing", key);
    if (!t) return;
    T_CHECK(st_numel(t) == C * n && t->shape[1] == C, "%s: [%lld, %lld] vs golden", key,
            (long long)C, (long long)n);
    if (st_numel(t) != C * n) return;
    float *ref = st_to_f32(t);
    check(key, x, ref, C * n);
    free(ref);
    g_traced++;
}

/* Decode <c>.latents ([1, C, T] or [C, T]) and compare the waveform. */
static void decode_case(const c3_audio_vae *a, const st_file *gold, const char *c, bool traced) {
    char k[160];
    snprintf(k, sizeof k, "%s.latents", c);
    const st_tensor *lt = st_find(gold, k);
    T_CHECK(lt != NULL, "%s missing", k);
    if (!lt) return;
    const c3_aconfig *cf = avae_config(a);
    int64_t T = lt->shape[lt->ndim - 1];
    T_CHECK(lt->shape[lt->ndim - 2] == cf->latent_dim, "%s: %lld channels", k,
            (long long)lt->shape[lt->ndim - 2]);
    float *z = st_to_f32(lt);
    int64_t n = (int64_t)cf->out_channels * T * cf->hop;
    float *w = xmalloc(sizeof(float) * (size_t)n), *pre = xmalloc(sizeof(float) * (size_t)n);
    g_gold = gold;
    g_case = c;
    g_traced = 0;
    avae_trace_hook = traced ? on_trace : NULL;
    int rc = avae_decode(a, z, T, w, pre);
    avae_trace_hook = NULL;
    T_CHECK(rc == C3_OK, "%s: decode: %s", c, c3_errmsg());
    if (traced) T_CHECK(g_traced == 2 + 4 * cf->n_blocks, "%s: %d traces compared", c, g_traced);
    const char *names[2] = {"waveform", "waveform_preclamp"};
    float *outs[2] = {w, pre};
    for (int i = 0; i < 2; i++) {
        int64_t m = 0;
        snprintf(k, sizeof k, "%s.%s", c, names[i]);
        float *ref = t_golden_f32(gold, k, &m);
        T_CHECK(m == n, "%s: %lld samples, golden %lld", k, (long long)n, (long long)m);
        if (m == n) check(k, outs[i], ref, n);
        free(ref);
    }
    free(z);
    free(w);
    free(pre);
}

/* The final sound latents of an end-to-end run decode to its waveform. */
static void decode_final(const c3_audio_vae *a, const st_file *gold, const char *c) {
    char k[160];
    int64_t nz = 0, nw = 0;
    snprintf(k, sizeof k, "%s.sound_latents_final", c);
    const st_tensor *lt = st_find(gold, k);
    T_CHECK(lt != NULL, "%s missing", k);
    if (!lt) return;
    float *z = t_golden_f32(gold, k, &nz);
    snprintf(k, sizeof k, "%s.waveform", c);
    float *ref = t_golden_f32(gold, k, &nw);
    int64_t T = lt->shape[1], n = (int64_t)avae_config(a)->out_channels * T * avae_config(a)->hop;
    T_CHECK(n == nw, "%s: %lld samples, golden %lld", k, (long long)n, (long long)nw);
    float *w = xmalloc(sizeof(float) * (size_t)n);
    T_CHECK(avae_decode(a, z, T, w, NULL) == C3_OK, "%s: %s", c, c3_errmsg());
    if (n == nw) check(k, w, ref, n);
    free(z);
    free(ref);
    free(w);
}

static void weight_norm(const c3_audio_vae *a, const st_file *gold) {
    const char *layers[] = {"decoder.conv1", "decoder.block.0.conv_t1",
                            "decoder.block.0.res_unit1.conv1"};
    for (size_t i = 0; i < C3_ARRAY_LEN(layers); i++) {
        char k[160];
        snprintf(k, sizeof k, "weight_norm.%s.weight", layers[i]);
        int64_t n = 0, m = 0;
        float *ref = t_golden_f32(gold, k, &n);
        const float *w = avae_weight(a, layers[i], &m);
        T_CHECK(w && m == n, "%s: %lld elements, golden %lld", layers[i], (long long)m,
                (long long)n);
        if (w && m == n) {
            double mr = t_max_rel(w, ref, n);
            T_CHECK(mr <= 1e-6, "%s folded: max rel %.3g", layers[i], mr);
        }
        free(ref);
    }
}

/* The manifest's sound_len table, exactly; and the e2e cases' lengths. */
static void length_table(const c3_audio_vae *a) {
    json_error_t e;
    json_t *j = json_load_file(t_path("tiny-a/sound/sound_manifest.json"), 0, &e);
    T_CHECK(j != NULL, "manifest: %s", e.text);
    if (!j) return;
    json_t *cases = json_object_get(j, "cases"),
           *tab = json_object_get(json_object_get(cases, "sound_len"), "rows");
    const c3_aconfig *c = avae_config(a);
    size_t i;
    json_t *row;
    int rows = 0;
    json_array_foreach(tab, i, row) {
        int f = (int)json_integer_value(json_object_get(row, "num_frames"));
        double fps = json_number_value(json_object_get(row, "fps"));
        int64_t want = json_integer_value(json_object_get(row, "sound_len"));
        int64_t got = avae_sound_len(f, fps, c->sampling_rate, c->hop);
        T_CHECK(got == want, "sound_len %d f @ %g fps: %lld, upstream %lld", f, fps, (long long)got,
                (long long)want);
        T_CHECK(got * c->hop == json_integer_value(json_object_get(row, "waveform_samples")),
                "waveform samples %d f @ %g", f, fps);
        rows++;
    }
    T_CHECK(rows >= 12, "sound_len table: %d rows", rows);
    const char *key;
    json_t *cs;
    json_object_foreach(cases, key, cs) {
        json_t *sl = json_object_get(cs, "sound_len");
        if (!json_is_integer(sl)) continue;
        int f = (int)json_integer_value(json_object_get(cs, "num_frames"));
        double fps = json_number_value(json_object_get(cs, "fps"));
        T_CHECK(avae_sound_len(f, fps, c->sampling_rate, c->hop) == json_integer_value(sl),
                "%s sound_len", key);
        rows++;
    }
    fprintf(stderr, "  sound_len: %d rows exact\n", rows);
    T_CHECK(avae_sound_len(0, 24, 48000, 1920) == 0 && avae_sound_len(9, 0, 48000, 1920) == 0,
            "bad arguments");
    json_decref(j);
}

/* Configs the loader refuses, each with one line naming the key. */
static void bad_configs(void) {
    struct {
        const char *json, *needle;
    } cases[] = {
        {"{\"dec_strides\": [2, 4], \"dec_c_mults\": [1]}", "dec_c_mults"},
        {"{\"dec_strides\": [], \"dec_c_mults\": []}", "dec_strides"},
        {"{\"dec_type\": \"dac\", \"dec_strides\": [2], \"dec_c_mults\": [1]}", "dec_type"},
        {"{\"dec_strides\": [2, 3], \"dec_c_mults\": [1, 2], \"hop_size\": 5}", "hop_size"},
        {"{\"dec_strides\": [2], \"dec_c_mults\": [1], \"latent_mean\": 0.5}", "latent_std"},
        {"{\"dec_strides\": [2], \"dec_c_mults\": [1], \"vocoder_input_dim\": 0}",
         "vocoder_input_dim"},
        {"[1]", "JSON object"},
    };
    for (size_t i = 0; i < C3_ARRAY_LEN(cases); i++) {
        c3_aconfig c;
        int rc = avae_parse_config(cases[i].json, strlen(cases[i].json), "config.json", &c);
        T_CHECK(rc == C3_EMODEL && strstr(c3_errmsg(), cases[i].needle) &&
                    !strchr(c3_errmsg(), '\n'),
                "bad config %zu: rc %d, %s", i, rc, c3_errmsg());
        if (rc == C3_OK) avae_config_free(&c);
    }
    const char *okj = "{\"dec_strides\": [2, 3], \"dec_c_mults\": [1, 2], \"latent_mean\": [1, 2], "
                      "\"latent_std\": 3, \"vocoder_input_dim\": 2, \"sampling_rate\": 16000}";
    c3_aconfig c;
    T_CHECK(avae_parse_config(okj, strlen(okj), "config.json", &c) == C3_OK, "%s", c3_errmsg());
    T_CHECK(c.hop == 6 && c.norm && c.mean[1] == 2.0f && c.std[0] == 3.0f &&
                c.sampling_rate == 16000,
            "parsed hop %d", c.hop);
    avae_config_free(&c);
    c3_audio_vae *a = NULL;
    T_CHECK(avae_load(&a, "/nonexistent/sound_tokenizer") == C3_EMODEL && !a, "missing folder: %s",
            c3_errmsg());
}

int main(void) {
    bad_configs();
    t_need_fixtures("audio_vae");
    c3_audio_vae *a = NULL;
    if (avae_load(&a, t_path("tiny-a/sound/model/sound_tokenizer")) != C3_OK) {
        fprintf(stderr, "FAIL: load: %s\n", c3_errmsg());
        return 1;
    }
    const c3_aconfig *c = avae_config(a);
    T_CHECK(c->hop == 1920 && c->sampling_rate == 48000 && c->out_channels == 2 &&
                c->latent_dim == 64 && !c->norm,
            "config: hop %d rate %d", c->hop, c->sampling_rate);
    st_file gold;
    t_open_golden(&gold, "tiny-a/sound/sound.safetensors");
    weight_norm(a, &gold);
    decode_case(a, &gold, "dec_T4", true);
    decode_case(a, &gold, "dec_T10", false);
    decode_case(a, &gold, "dec_T3_2d", false);
    decode_final(a, &gold, "e2e_t2vs_9f_64_g7");
    decode_final(a, &gold, "e2e_t2vs_17f_48x80_fps16_g5_linear_shift5");
    length_table(a);
    st_close(&gold);
    avae_free(a);
    return t_done("audio_vae");
}
