/* checkpoint.c - Diffusers folder: configs, shards, normalised tensor names. */
#include "checkpoint.h"

#include <jansson.h>

#include "checkpoint_random.h"

#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* The model card's defaults: the bounds gen holds -W/-H/--steps/-g/--shift to. */
#define CARD_MAX_SIDE 16384
#define CARD_MAX_STEPS 1000
#define CARD_MAX_GUIDANCE 100
#define CARD_MAX_SHIFT 1000

/* Largest latent_patch_size^2 x latent_channel accepted (keeps int math exact). */
#define CKPT_MAX_PATCH_DIM (1 << 20)

/* The Wan2.2 VAE geometry a vae/config.json may describe: the channel widths
 * may shrink (tiny and demo checkpoints) but the decoder must turn one latent
 * into 16 x 16 pixels and 4 frames, as the pipeline sizes the latents. The
 * bounds keep every size vae_load and the decode compute from them in int. */
#define VAE_MAX_BASE 1024        /* base_dim, decoder_base_dim (Wan2.2: 160, 256) */
#define VAE_MAX_MULT 16          /* each dim_mult entry (Wan2.2: 1, 2, 4, 4) */
#define VAE_MAX_CHANNELS 4096    /* base x dim_mult */
#define VAE_MAX_RES_BLOCKS 8     /* num_res_blocks (Wan2.2: 2) */
#define VAE_MAX_PATCH 8          /* patch_size (Wan2.2: 2) */
#define VAE_PIXELS_PER_LATENT 16 /* scale_factor_spatial */
#define VAE_FRAMES_PER_LATENT 4  /* scale_factor_temporal */
#define VAE_IMAGE_CHANNELS 3
#define VAE_UP_SPACE 2 /* an up block's spatial and temporal factors (wan_vae.c) */
#define VAE_UP_TIME 2

/* The sizes vae_load derives from the config, with its checks: the decoder
 * widths (dims[0] = base x dim_mult[-1], then base x reversed dim_mult), and
 * each upsampling block's channel repeat, which must be whole. Bounds were
 * checked before, so the products are exact in int. */
static int vae_geometry(c3_vconfig *v, const char *path) {
    int n = v->n_mult;
    v->dec_dims[0] = v->decoder_base_dim * v->dim_mult[n - 1];
    for (int i = 0; i < n; i++)
        v->dec_dims[i + 1] = v->decoder_base_dim * v->dim_mult[n - 1 - i];
    for (int u = 0; u + 1 < n; u++) { /* the last up block does not upsample */
        int ft = v->temporal_down[v->n_tdown - 1 - u] ? VAE_UP_TIME : 1;
        int64_t f = (int64_t)v->dec_dims[u + 1] * ft * VAE_UP_SPACE * VAE_UP_SPACE;
        if (f % v->dec_dims[u])
            return c3_fail(C3_EMODEL,
                           "%s: \"dim_mult\": up block %d cannot repeat its %d input channels "
                           "into %d x %d outputs evenly",
                           path, u, v->dec_dims[u], v->dec_dims[u + 1],
                           ft * VAE_UP_SPACE * VAE_UP_SPACE);
    }
    return C3_OK;
}

/* ---------------------------------------------------------------- JSON util */

/* text (len bytes) as one JSON object in *out; C3_EMODEL naming path if it
 * is not valid JSON or not an object. */
static int parse_object(const char *text, size_t len, const char *path, json_t **out) {
    json_error_t e;
    *out = NULL;
    json_t *j = json_loadb(text, len, 0, &e);
    if (!j) return c3_fail(C3_EMODEL, "%s: invalid JSON: %s (line %d)", path, e.text, e.line);
    if (!json_is_object(j)) {
        json_decref(j);
        return c3_fail(C3_EMODEL, "%s: expected a JSON object", path);
    }
    *out = j;
    return C3_OK;
}

static json_t *load_json(const char *path, int missing_code, const char *what) {
    char *text;
    size_t len;
    if (!c3_file_exists(path)) {
        c3_fail(missing_code, "%s: missing (%s); is this a Diffusers-format Cosmos3 folder?", path, what);
        return NULL;
    }
    if (c3_read_file(path, &text, &len) != C3_OK) return NULL;
    json_t *j = NULL;
    parse_object(text, len, path, &j);
    free(text);
    return j;
}

/* Typed getters: missing keys take the default; wrong types are errors. */
static int get_int(json_t *o, const char *k, int def, int *out, const char *path) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return C3_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < -(1 << 30) || json_integer_value(v) > (1 << 30))
        return c3_fail(C3_EMODEL, "%s: \"%s\" must be an integer", path, k);
    *out = (int)json_integer_value(v);
    return C3_OK;
}
static int get_num(json_t *o, const char *k, double def, double *out, const char *path) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return C3_OK;
    }
    if (!json_is_number(v)) return c3_fail(C3_EMODEL, "%s: \"%s\" must be a number", path, k);
    *out = json_number_value(v);
    return C3_OK;
}
static int get_bool(json_t *o, const char *k, bool def, bool *out, const char *path) {
    json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return C3_OK;
    }
    if (!json_is_boolean(v)) return c3_fail(C3_EMODEL, "%s: \"%s\" must be true or false", path, k);
    *out = json_is_true(v);
    return C3_OK;
}
static int in_range(int v, int lo, int hi, const char *k, const char *wan, const char *path) {
    if (v < lo || v > hi) {
        if (lo == hi)
            return c3_fail(C3_EMODEL, "%s: \"%s\" %d must be %d (the Wan2.2 VAE's)", path, k, v,
                           lo);
        return c3_fail(C3_EMODEL, "%s: \"%s\" %d must be in %d..%d (Wan2.2: %s)", path, k, v, lo,
                       hi, wan);
    }
    return C3_OK;
}
static int need_pos(int v, const char *k, const char *path) {
    if (v <= 0) return c3_fail(C3_EMODEL, "%s: \"%s\" must be a positive integer (got %d)", path, k, v);
    return C3_OK;
}

/* ------------------------------------------------------------ the configs */

/* transformer/config.json "quantization_config" (ModelOpt FP8). */
static int parse_quant(c3_tconfig *t, json_t *j, const char *path) {
    json_t *q = json_object_get(j, "quantization_config");
    if (!q || json_is_null(q)) return C3_OK;
    if (!json_is_object(q))
        return c3_fail(C3_EMODEL, "%s: \"quantization_config\" must be an object", path);
    json_t *m = json_object_get(q, "quant_method"), *a = json_object_get(q, "quant_algo");
    const char *ms = json_is_string(m) ? json_string_value(m) : "",
               *as = json_is_string(a) ? json_string_value(a) : "";
    if (strcmp(ms, "modelopt") != 0 || strcmp(as, "FP8") != 0)
        return c3_fail(
            C3_EMODEL,
            "%s: \"quantization_config\" is %s/%s; cosmos3 reads NVIDIA ModelOpt FP8 (quant_method "
            "\"modelopt\", quant_algo \"FP8\")",
            path, ms[0] ? ms : "?", as[0] ? as : "?");
    t->fp8 = true;
    json_t *p = json_object_get(json_object_get(q, "runtime"), "diffusion_step_policy");
    if (!p || json_is_null(p)) return C3_OK;
    json_t *ty = json_object_get(p, "type");
    json_t *fs = json_object_get(p, "first_steps"), *ls = json_object_get(p, "last_steps");
    json_t *fc = json_object_get(fs, "count"), *lc = json_object_get(ls, "count");
    if (!json_is_string(ty) || strcmp(json_string_value(ty), "first_last_n") != 0 ||
        !json_is_integer(fc) || !json_is_integer(lc) || json_integer_value(fc) < 0 ||
        json_integer_value(lc) < 0)
        return c3_fail(C3_EMODEL,
                       "%s: \"quantization_config.runtime.diffusion_step_policy\" must be type "
                       "\"first_last_n\" "
                       "with first_steps.count and last_steps.count",
                       path);
    t->fp8_policy = true;
    t->fp8_first = (int)json_integer_value(fc);
    t->fp8_last = (int)json_integer_value(lc);
    json_t *ov = json_object_get(p, "overlap"), *re = json_object_get(p, "reasoner");
    t->fp8_overlap_a16 = !json_is_string(ov) || strcmp(json_string_value(ov), "native") != 0;
    t->fp8_reasoner_a16 = json_is_string(re) && (!strcmp(json_string_value(re), "a16") ||
                                                 !strcmp(json_string_value(re), "high_precision"));
    return C3_OK;
}

int ckpt_parse_tconfig(c3_tconfig *t, const char *text, size_t len, const char *path) {
    memset(t, 0, sizeof *t);
    json_t *j;
    int rc = parse_object(text, len, path, &j);
    if (rc) return rc;
    double eps = 0, theta = 0, ts = 0, fps = 0;
    int margin = 0;
    bool qk_text = true;
#define G(x)                                                                                       \
    if ((rc = (x)) != C3_OK) goto out
    G(parse_quant(t, j, path));
    G(get_int(j, "hidden_size", 0, &t->hidden, path));
    G(get_int(j, "num_hidden_layers", 0, &t->layers, path));
    G(get_int(j, "num_attention_heads", 0, &t->heads, path));
    G(get_int(j, "num_key_value_heads", t->heads, &t->kv_heads, path));
    G(get_int(j, "head_dim", t->heads ? t->hidden / t->heads : 0, &t->head_dim, path));
    G(get_int(j, "intermediate_size", 0, &t->inter, path));
    G(get_int(j, "vocab_size", 0, &t->vocab, path));
    /* the weights' dtype, as transformers writes it ("torch_dtype") or newer ("dtype") */
    t->weight_dtype = -1;
    json_t *dtj = json_object_get(j, "torch_dtype");
    if (!dtj || json_is_null(dtj)) dtj = json_object_get(j, "dtype");
    if (dtj && !json_is_null(dtj)) {
        static const struct {
            const char *name;
            c3_dtype dt;
        } names[] = {{"bfloat16", C3_BF16}, {"float16", C3_F16}, {"float32", C3_F32}};
        const char *ds = json_string_value(dtj);
        if (!ds) {
            rc = c3_fail(C3_EMODEL, "%s: \"torch_dtype\" must be a string such as \"bfloat16\"",
                         path);
            goto out;
        }
        for (size_t i = 0; i < C3_ARRAY_LEN(names); i++) /* others ("auto", fp8 ...): no rule */
            if (!strcmp(ds, names[i].name)) t->weight_dtype = (int)names[i].dt;
    }
    G(need_pos(t->hidden, "hidden_size", path));
    G(need_pos(t->layers, "num_hidden_layers", path));
    G(need_pos(t->heads, "num_attention_heads", path));
    G(need_pos(t->kv_heads, "num_key_value_heads", path));
    G(need_pos(t->head_dim, "head_dim", path));
    G(need_pos(t->inter, "intermediate_size", path));
    G(need_pos(t->vocab, "vocab_size", path));
    if (t->heads % t->kv_heads) {
        rc = c3_fail(C3_EMODEL, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                     path, t->heads, t->kv_heads);
        goto out;
    }
    if (t->head_dim % 2) {
        rc = c3_fail(C3_EMODEL, "%s: head_dim %d must be even for RoPE", path, t->head_dim);
        goto out;
    }
    /* MLP kind: SwiGLU for silu, ReLU^2 for Nemotron ("relu2"). */
    json_t *act = json_object_get(j, "hidden_act");
    json_t *bt = json_object_get(j, "backbone_type");
    const char *acts = json_is_string(act) ? json_string_value(act) : "silu";
    bool nemotron = json_is_string(bt) && strstr(json_string_value(bt), "nemotron") != NULL;
    if (strcmp(acts, "silu") == 0 || strcmp(acts, "swish") == 0) {
        t->mlp_gated = true;
    } else if (strcmp(acts, "relu2") == 0 || strcmp(acts, "relu_squared") == 0) {
        t->mlp_gated = false;
    } else {
        rc = c3_fail(C3_EMODEL, "%s: hidden_act \"%s\" is not supported (silu or relu2)", path, acts);
        goto out;
    }
    t->norm_mul_fp32 = nemotron || !t->mlp_gated;
    G(get_bool(j, "qk_norm_for_text", true, &qk_text, path));
    t->und_qk_norm = qk_text;
    G(get_bool(j, "use_und_k_norm_for_gen", false, &t->und_k_norm_for_gen, path));
    G(get_num(j, "rms_norm_eps", 1e-6, &eps, path));
    t->eps = (float)eps;
    G(get_num(j, "rope_theta", 5e6, &theta, path));
    t->rope_theta = theta;
    /* mrope_section: rope_scaling.mrope_section, else rope_parameters, else
     * the Qwen3-VL default [24,20,20] scaled to head_dim/2. */
    json_t *rs = json_object_get(j, "rope_scaling");
    if (!json_is_object(rs)) rs = json_object_get(j, "rope_parameters");
    json_t *ms = json_is_object(rs) ? json_object_get(rs, "mrope_section") : NULL;
    if (ms) {
        if (!json_is_array(ms) || json_array_size(ms) != 3) {
            rc = c3_fail(C3_EMODEL, "%s: rope_scaling.mrope_section must be three integers", path);
            goto out;
        }
        for (int i = 0; i < 3; i++) {
            json_t *v = json_array_get(ms, (size_t)i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 4096) {
                rc = c3_fail(C3_EMODEL, "%s: rope_scaling.mrope_section must be three integers", path);
                goto out;
            }
            t->mrope[i] = (int)json_integer_value(v);
        }
    } else {
        int half = t->head_dim / 2;
        t->mrope[1] = t->mrope[2] = (int)((int64_t)half * 20 / 64); /* 64-bit: head_dim may be ~2^30 */
        t->mrope[0] = half - 2 * t->mrope[1];
    }
    if (t->mrope[0] + t->mrope[1] + t->mrope[2] > t->head_dim / 2) {
        rc = c3_fail(C3_EMODEL, "%s: mrope_section [%d,%d,%d] exceeds head_dim/2 = %d", path, t->mrope[0],
                     t->mrope[1], t->mrope[2], t->head_dim / 2);
        goto out;
    }
    G(get_int(j, "latent_channel", 48, &t->latent_ch, path));
    G(get_int(j, "latent_patch_size", 2, &t->patch, path));
    G(need_pos(t->latent_ch, "latent_channel", path));
    G(need_pos(t->patch, "latent_patch_size", path));
    if ((int64_t)t->patch * t->patch > CKPT_MAX_PATCH_DIM || /* int overflow below */
        (int64_t)t->patch * t->patch * t->latent_ch > CKPT_MAX_PATCH_DIM) {
        rc = c3_fail(C3_EMODEL, "%s: latent_patch_size %d and latent_channel %d are too large", path, t->patch,
                     t->latent_ch);
        goto out;
    }
    G(get_int(j, "patch_latent_dim", t->patch * t->patch * t->latent_ch, &t->patch_dim, path));
    if (t->patch_dim != t->patch * t->patch * t->latent_ch) {
        rc = c3_fail(C3_EMODEL, "%s: patch_latent_dim %d != latent_patch_size^2 x latent_channel (%d)", path,
                     t->patch_dim, t->patch * t->patch * t->latent_ch);
        goto out;
    }
    G(get_num(j, "timestep_scale", 0.001, &ts, path));
    t->timestep_scale = ts;
    G(get_num(j, "base_fps", 24, &fps, path));
    t->base_fps = fps;
    /* positive and finite, rms_norm_eps also as a float */
    const struct { const char *key; double v; } pos[] = {
        {"rms_norm_eps", t->eps}, {"rope_theta", theta}, {"timestep_scale", ts}, {"base_fps", fps}};
    for (size_t i = 0; i < C3_ARRAY_LEN(pos); i++)
        if (!(pos[i].v > 0) || !isfinite(pos[i].v)) {
            rc = c3_fail(C3_EMODEL, "%s: \"%s\" must be a positive finite number (got %g)", path, pos[i].key,
                         pos[i].v);
            goto out;
        }
    G(get_bool(j, "enable_fps_modulation", true, &t->fps_modulation, path));
    G(get_int(j, "unified_3d_mrope_temporal_modality_margin", 15000, &margin, path));
    t->temporal_margin = margin;
    /* joint sound (sound_gen): the audio_* tensors' width and the latent rate */
    G(get_bool(j, "sound_gen", false, &t->sound_gen, path));
    G(get_int(j, "sound_dim", 64, &t->sound_dim, path));
    double sfps = 25;
    G(get_num(j, "sound_latent_fps", 25, &sfps, path));
    if (t->sound_dim < 1 || !(sfps > 0) || !isfinite(sfps)) {
        rc =
            c3_fail(C3_EMODEL, "%s: \"sound_dim\" and \"sound_latent_fps\" must be positive", path);
        goto out;
    }
    t->sound_latent_fps = sfps;
#undef G
    t->config_hash = c3_fnv1a(text, len, C3_FNV_INIT);
out:
    json_decref(j);
    return rc;
}

int ckpt_parse_vconfig(c3_vconfig *v, const char *text, size_t len, const char *path) {
    memset(v, 0, sizeof *v);
    json_t *j;
    int rc = parse_object(text, len, path, &j);
    if (rc) return rc;
#define G(x)                                                                                       \
    if ((rc = (x)) != C3_OK) goto out
    G(get_int(j, "z_dim", 48, &v->z_dim, path));
    G(get_int(j, "base_dim", 160, &v->base_dim, path));
    G(get_int(j, "decoder_base_dim", v->base_dim, &v->decoder_base_dim, path));
    G(get_int(j, "num_res_blocks", 2, &v->num_res_blocks, path));
    G(get_int(j, "in_channels", 12, &v->in_channels, path));
    G(get_int(j, "out_channels", 12, &v->out_channels, path));
    G(get_int(j, "patch_size", 2, &v->patch_size, path));
    G(get_int(j, "scale_factor_spatial", 16, &v->scale_spatial, path));
    G(get_int(j, "scale_factor_temporal", 4, &v->scale_temporal, path));
    G(get_bool(j, "is_residual", true, &v->is_residual, path));
    if (!v->is_residual) {
        rc = c3_fail(C3_EMODEL,
                     "%s: \"is_residual\" false: only the Wan2.2 VAE (true) is supported", path);
        goto out;
    }
    G(need_pos(v->z_dim, "z_dim", path));
    G(need_pos(v->decoder_base_dim, "decoder_base_dim", path));
    G(need_pos(v->patch_size, "patch_size", path));
    if (v->z_dim > 64) {
        rc = c3_fail(C3_EMODEL, "%s: z_dim %d is larger than supported (64)", path, v->z_dim);
        goto out;
    }
    G(in_range(v->base_dim, 1, VAE_MAX_BASE, "base_dim", "160", path));
    G(in_range(v->decoder_base_dim, 1, VAE_MAX_BASE, "decoder_base_dim", "256", path));
    G(in_range(v->num_res_blocks, 0, VAE_MAX_RES_BLOCKS, "num_res_blocks", "2", path));
    G(in_range(v->patch_size, 1, VAE_MAX_PATCH, "patch_size", "2", path));
    int io = VAE_IMAGE_CHANNELS * v->patch_size * v->patch_size;
    if (v->in_channels != io || v->out_channels != io) {
        rc = c3_fail(C3_EMODEL,
                     "%s: \"in_channels\" %d and \"out_channels\" %d must be 3 x patch_size^2 = %d",
                     path, v->in_channels, v->out_channels, io);
        goto out;
    }
    G(in_range(v->scale_spatial, VAE_PIXELS_PER_LATENT, VAE_PIXELS_PER_LATENT,
               "scale_factor_spatial", "16", path));
    G(in_range(v->scale_temporal, VAE_FRAMES_PER_LATENT, VAE_FRAMES_PER_LATENT,
               "scale_factor_temporal", "4", path));
    json_t *dm = json_object_get(j, "dim_mult"), *td = json_object_get(j, "temperal_downsample");
    if (!json_is_array(dm) || json_array_size(dm) < 1 || json_array_size(dm) > 8) {
        rc = c3_fail(C3_EMODEL, "%s: dim_mult must be a list of 1 to 8 integers", path);
        goto out;
    }
    v->n_mult = (int)json_array_size(dm);
    for (int i = 0; i < v->n_mult; i++) {
        json_t *x = json_array_get(dm, (size_t)i);
        if (!json_is_integer(x) || json_integer_value(x) <= 0 ||
            json_integer_value(x) > VAE_MAX_MULT) {
            rc = c3_fail(C3_EMODEL, "%s: \"dim_mult\" must be a list of integers in 1..%d", path,
                         VAE_MAX_MULT);
            goto out;
        }
        v->dim_mult[i] = (int)json_integer_value(x);
        int widest = C3_MAX(v->base_dim, v->decoder_base_dim);
        if (widest * v->dim_mult[i] > VAE_MAX_CHANNELS) {
            rc =
                c3_fail(C3_EMODEL,
                        "%s: \"dim_mult\"[%d] %d x base %d is %d channels; at most %d are "
                        "supported",
                        path, i, v->dim_mult[i], widest, widest * v->dim_mult[i], VAE_MAX_CHANNELS);
            goto out;
        }
    }
    /* every up block but the last doubles the size: 2^(n-1) x patch pixels per latent */
    if ((v->patch_size << (v->n_mult - 1)) != VAE_PIXELS_PER_LATENT) {
        rc = c3_fail(C3_EMODEL,
                     "%s: \"dim_mult\" (%d blocks) with \"patch_size\" %d decode %d pixels per "
                     "latent; the Wan2.2 VAE decodes %d (4 blocks, patch 2)",
                     path, v->n_mult, v->patch_size, v->patch_size << (v->n_mult - 1),
                     VAE_PIXELS_PER_LATENT);
        goto out;
    }
    if (json_is_array(td)) {
        if (json_array_size(td) > 8) {
            rc = c3_fail(C3_EMODEL, "%s: temperal_downsample is too long", path);
            goto out;
        }
        v->n_tdown = (int)json_array_size(td);
        for (int i = 0; i < v->n_tdown; i++) v->temporal_down[i] = json_is_true(json_array_get(td, (size_t)i));
    }
    int tdowns = 0;
    for (int i = 0; i < v->n_tdown; i++)
        tdowns += v->temporal_down[i];
    if (v->n_tdown != v->n_mult - 1 || (1 << tdowns) != VAE_FRAMES_PER_LATENT) {
        rc = c3_fail(C3_EMODEL,
                     "%s: \"temperal_downsample\" must hold %d entries (one per down block), 2 "
                     "of them true (4 frames per latent), e.g. [false, true, true]",
                     path, v->n_mult - 1);
        goto out;
    }
    json_t *mean = json_object_get(j, "latents_mean"), *std = json_object_get(j, "latents_std");
    if (!json_is_array(mean) || !json_is_array(std) || (int)json_array_size(mean) != v->z_dim ||
        (int)json_array_size(std) != v->z_dim) {
        rc = c3_fail(C3_EMODEL, "%s: latents_mean and latents_std must each hold z_dim = %d numbers", path,
                     v->z_dim);
        goto out;
    }
    for (int i = 0; i < v->z_dim; i++) {
        json_t *a = json_array_get(mean, (size_t)i), *b = json_array_get(std, (size_t)i);
        /* checked as float: 1e-50 is non-zero in JSON but 0 as a float, 1e300 is inf */
        float fa = json_is_number(a) ? (float)json_number_value(a) : 0.0f; /* IEEE: out of range -> inf */
        float fb = json_is_number(b) ? (float)json_number_value(b) : 0.0f;
        if (!json_is_number(a) || !json_is_number(b) || !isfinite(fa) || !isfinite(fb) || fb == 0) {
            rc = c3_fail(C3_EMODEL, "%s: latents_mean/latents_std[%d] must be finite float numbers (std non-zero)",
                         path, i);
            goto out;
        }
        v->latents_mean[i] = fa;
        v->latents_std[i] = fb;
    }
    G(vae_geometry(v, path));
#undef G
out:
    json_decref(j);
    return rc;
}

/* A distilled checkpoint's fixed-step sampler (vLLM-Omni's checks): the
 * FlowMatch scheduler must carry fixed_step_sampler_config with sample_type
 * "sde" and a non-empty t_list of sigmas in (0, 1]. */
static int parse_fixed_step(c3_sconfig *s, json_t *j, const char *path) {
    json_t *fc = json_object_get(j, "fixed_step_sampler_config");
    if (!json_is_object(fc))
        return c3_fail(
            C3_EMODEL,
            "%s: a FlowMatchEulerDiscreteScheduler needs \"fixed_step_sampler_config\" (the "
            "distilled students' fixed-step sampler); this checkpoint has none",
            path);
    json_t *st = json_object_get(fc, "sample_type");
    if (!json_is_string(st) || strcmp(json_string_value(st), "sde") != 0)
        return c3_fail(
            C3_EMODEL,
            "%s: \"fixed_step_sampler_config.sample_type\" must be \"sde\" (the stochastic "
            "step the distilled checkpoints were trained for)",
            path);
    json_t *tl = json_object_get(fc, "t_list");
    size_t n = json_is_array(tl) ? json_array_size(tl) : 0;
    if (n == 0)
        return c3_fail(
            C3_EMODEL,
            "%s: \"fixed_step_sampler_config.t_list\" must be a non-empty list of sigmas", path);
    if (n > C3_ARRAY_LEN(s->t_list))
        return c3_fail(C3_EMODEL,
                       "%s: \"fixed_step_sampler_config.t_list\" has %zu entries (at most %zu)",
                       path, n, C3_ARRAY_LEN(s->t_list));
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(tl, i);
        double x = json_is_number(v) ? json_number_value(v) : -1;
        if (!(x > 0 && x <= 1))
            return c3_fail(
                C3_EMODEL,
                "%s: \"fixed_step_sampler_config.t_list\"[%zu] must be a sigma in (0, 1]", path, i);
        s->t_list[i] = x;
    }
    json_t *nt = json_object_get(fc, "num_train_timesteps");
    if (nt && !(json_is_number(nt) && json_number_value(nt) == s->num_train_timesteps))
        return c3_fail(
            C3_EMODEL,
            "%s: \"fixed_step_sampler_config.num_train_timesteps\" must equal the scheduler's "
            "num_train_timesteps (%d)",
            path, s->num_train_timesteps);
    bool dyn = false;
    C3_TRY(get_bool(j, "use_dynamic_shifting", false, &dyn, path));
    if (dyn)
        return c3_fail(
            C3_EMODEL,
            "%s: \"use_dynamic_shifting\" true is not supported for the fixed-step sampler (it "
            "needs a per-image mu); set it false",
            path);
    s->n_tlist = (int)n;
    s->distilled = true;
    return C3_OK;
}

static int parse_sconfig(c3_sconfig *s, json_t *j, const char *path) {
    memset(s, 0, sizeof *s);
    json_t *cn = json_object_get(j, "_class_name");
    snprintf(s->class_name, sizeof s->class_name, "%s",
             json_is_string(cn) ? json_string_value(cn) : "UniPCMultistepScheduler");
    C3_TRY(get_bool(j, "use_karras_sigmas", false, &s->use_karras_sigmas, path));
    C3_TRY(get_bool(j, "use_flow_sigmas", true, &s->use_flow_sigmas, path));
    json_t *fs = json_object_get(j, "flow_shift");
    if (!fs || json_is_null(fs)) fs = json_object_get(j, "shift");
    s->flow_shift = json_is_number(fs) ? json_number_value(fs) : 1.0;
    C3_TRY(get_num(j, "sigma_min", 0.147, &s->sigma_min, path));
    C3_TRY(get_num(j, "sigma_max", 200.0, &s->sigma_max, path));
    C3_TRY(get_int(j, "num_train_timesteps", 1000, &s->num_train_timesteps, path));
    C3_TRY(get_int(j, "solver_order", 2, &s->solver_order, path));
    if (s->num_train_timesteps <= 0)
        return c3_fail(C3_EMODEL, "%s: num_train_timesteps must be positive", path);
    if (strcmp(s->class_name, "FlowMatchEulerDiscreteScheduler") == 0)
        C3_TRY(parse_fixed_step(s, j, path));
    return C3_OK;
}

/* ------------------------------------------------------ name normalisation */

static const char *const name_map[][2] = {
    /* native cosmos-framework -> flat diffusers (CF-CONV remap tables) */
    {"self_attn.q_proj_moe_gen.", "self_attn.add_q_proj."},
    {"self_attn.k_proj_moe_gen.", "self_attn.add_k_proj."},
    {"self_attn.v_proj_moe_gen.", "self_attn.add_v_proj."},
    {"self_attn.o_proj_moe_gen.", "self_attn.to_add_out."},
    {"self_attn.q_norm_moe_gen.", "self_attn.norm_added_q."},
    {"self_attn.k_norm_moe_gen.", "self_attn.norm_added_k."},
    {"self_attn.q_proj.", "self_attn.to_q."},
    {"self_attn.k_proj.", "self_attn.to_k."},
    {"self_attn.v_proj.", "self_attn.to_v."},
    {"self_attn.o_proj.", "self_attn.to_out."},
    {"self_attn.q_norm.", "self_attn.norm_q."},
    {"self_attn.k_norm.", "self_attn.norm_k."},
    {"self_attn.to_out.0.", "self_attn.to_out."},
    {"self_attn.to_add_out.0.", "self_attn.to_add_out."},
    {"vae2llm.", "proj_in."},
    {"llm2vae.", "proj_out."},
    {"time_embedder.mlp.0.", "time_embedder.linear_1."},
    {"time_embedder.mlp.2.", "time_embedder.linear_2."},
    {"language_model.", ""},
};

void ckpt_normalize_name(const char *in, char *out, size_t outsz) {
    char buf[512];
    if (strncmp(in, "model.", 6) == 0) in += 6;
    snprintf(buf, sizeof buf, "%s", in);
    for (size_t i = 0; i < C3_ARRAY_LEN(name_map); i++) {
        char *p = strstr(buf, name_map[i][0]);
        if (!p) continue;
        /* only match at a component boundary */
        if (p != buf && p[-1] != '.') continue;
        char tmp[512];
        size_t pre = (size_t)(p - buf);
        snprintf(tmp, sizeof tmp, "%.*s%s%s", (int)pre, buf, name_map[i][1], p + strlen(name_map[i][0]));
        snprintf(buf, sizeof buf, "%s", tmp);
        break;
    }
    snprintf(out, outsz, "%s", buf);
}

static int cmp_tref(const void *a, const void *b) {
    return strcmp(((const struct c3_tref *)a)->name, ((const struct c3_tref *)b)->name);
}

const st_tensor *ckpt_find(const c3_ckpt *c, const char *name) {
    struct c3_tref key = {.name = (char *)name};
    struct c3_tref *r = bsearch(&key, c->tens, (size_t)c->ntens, sizeof key, cmp_tref);
    return r ? r->t : NULL;
}

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* ------------------------------------------------------------ dtypes */

#define DT(t) (1u << (t))
#define DT_FLOATS (DT(C3_F32) | DT(C3_BF16) | DT(C3_F16))

/* What each stored tensor may be, by name suffix; the first row that
 * matches wins ("" matches all). F8_E4M3 is checked before the table: the
 * layer weights of a ModelOpt FP8 checkpoint (their weight_scale and
 * input_scale are floats, as every other tensor). */
static const struct {
    const char *suffix;
    unsigned allowed;
} dtype_rules[] = {
    {"embed_tokens.ids", DT(C3_I32) | DT(C3_I64)}, /* the sparse embedding's token ids */
    {"", DT_FLOATS},                               /* every weight */
};

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

int ckpt_check_dtype(const c3_ckpt *c, bool transformer, const char *where, const char *name,
                     c3_dtype dt) {
    if (dt == C3_F8E4M3) { /* ModelOpt FP8: layer weights of a checkpoint that says so */
        if (transformer && c->t.fp8 && strncmp(name, "layers.", 7) == 0 &&
            ends_with(name, ".weight"))
            return C3_OK;
        return c3_fail(
            C3_EMODEL,
            "%s: tensor %s is F8_E4M3, which only the layer weights of a checkpoint with a "
            "ModelOpt FP8 quantization_config may be; re-export the checkpoint",
            where, name);
    }
    unsigned allowed = 0;
    for (size_t i = 0; i < C3_ARRAY_LEN(dtype_rules); i++)
        if (ends_with(name, dtype_rules[i].suffix)) {
            allowed = dtype_rules[i].allowed;
            break;
        }
    if (!(DT(dt) & allowed))
        return c3_fail(C3_EMODEL,
                       "%s: tensor %s is %s, which a %s cannot be; re-export the checkpoint", where,
                       name, c3_dtype_name(dt), allowed & DT_FLOATS ? "weight" : "token id list");
    /* BF16 and F16 have the same size: a relabelled file would load as noise */
    int want = transformer ? c->t.weight_dtype : -1;
    bool half = dt == C3_BF16 || dt == C3_F16, want_half = want == C3_BF16 || want == C3_F16;
    if (half && want_half && (int)dt != want)
        return c3_fail(C3_EMODEL,
                       "%s: tensor %s is %s but config.json's torch_dtype says %s; the file is "
                       "mislabelled: re-export it",
                       where, name, c3_dtype_name(dt), c3_dtype_name((c3_dtype)want));
    return C3_OK;
}

#define SCAN_CHUNK 65536 /* floats converted at a time */

static int scan_tensor(const c3_ckpt *c, bool transformer, const char *where, const char *name,
                       const st_tensor *t, float *buf, int64_t *nvalues) {
    C3_TRY(ckpt_check_dtype(c, transformer, where, name, t->dtype));
    if (!(DT(t->dtype) & DT_FLOATS)) return C3_OK;
    size_t n = (size_t)st_numel(t), es = c3_dtype_size(t->dtype);
    for (size_t i = 0; i < n; i += SCAN_CHUNK) {
        size_t k = C3_MIN((size_t)SCAN_CHUNK, n - i);
        c3_to_f32(buf, (const char *)t->data + i * es, t->dtype, k);
        size_t bad = c3_first_nonfinite(buf, k);
        if (bad < k)
            return c3_fail(
                C3_EMODEL,
                "%s: tensor %s holds %g at element %zu: the weights are damaged; re-copy "
                "the checkpoint",
                where, name, (double)buf[bad], i + bad);
    }
    *nvalues += (int64_t)n;
    return C3_OK;
}

int ckpt_scan(const c3_ckpt *c, int64_t *ntensors, int64_t *nvalues) {
    *ntensors = *nvalues = 0;
    float *buf = xmalloc(SCAN_CHUNK * sizeof *buf);
    int rc = C3_OK;
    /* random weights: every tensor is a view of the one buffer: their dtypes, the buffer once */
    if (c->random) {
        st_tensor all = {.name = "(random weights)",
                         .dtype = C3_BF16,
                         .ndim = 1,
                         .shape = {c->random_n},
                         .data = c->random_buf,
                         .nbytes = (size_t)c->random_n * sizeof *c->random_buf};
        for (int i = 0; rc == C3_OK && i < c->ntens; i++, ++*ntensors)
            rc = ckpt_check_dtype(c, true, "transformer", c->tens[i].name, c->tens[i].t->dtype);
        if (rc == C3_OK) rc = scan_tensor(c, true, "transformer", all.name, &all, buf, nvalues);
    }
    for (int i = 0; !c->random && rc == C3_OK && i < c->ntens; i++, ++*ntensors)
        rc = scan_tensor(c, true, "transformer", c->tens[i].name, c->tens[i].t, buf, nvalues);
    for (int i = 0; rc == C3_OK && c->has_vae && i < c->vae.n; i++, ++*ntensors)
        rc = scan_tensor(c, false, c->vae.path, c->vae.t[i].name, &c->vae.t[i], buf, nvalues);
    free(buf);
    return rc;
}

const st_tensor *ckpt_get(const c3_ckpt *c, const st_file *f, const char *name, int ndim,
                          const int64_t *shape) {
    const st_tensor *t = f ? st_find(f, name) : ckpt_find(c, name);
    char want[128], got[128];
    fmt_shape(want, sizeof want, ndim, shape);
    const char *where = f ? f->path : "transformer";
    if (!t) {
        c3_fail(C3_EMODEL, "%s: tensor %s is missing (expected shape %s)", where, name, want);
        return NULL;
    }
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = shape[i] < 0 || shape[i] == t->shape[i];
    if (!ok) {
        fmt_shape(got, sizeof got, t->ndim, t->shape);
        c3_fail(C3_EMODEL, "%s: tensor %s has shape %s, expected %s", where, name, got, want);
        return NULL;
    }
    if (ckpt_check_dtype(c, !f, where, name, t->dtype) != C3_OK) return NULL;
    return t;
}

/* --------------------------------------------------------------- opening */

static int add_shard(c3_ckpt *c, const char *path) {
    c->shards = xrealloc(c->shards, (size_t)(c->nshards + 1) * sizeof *c->shards);
    C3_TRY(st_open(&c->shards[c->nshards], path));
    c->nshards++;
    return C3_OK;
}

static int index_tensors(c3_ckpt *c) {
    int n = 0;
    for (int s = 0; s < c->nshards; s++) n += c->shards[s].n;
    c->tens = xcalloc((size_t)(n ? n : 1), sizeof *c->tens);
    for (int s = 0; s < c->nshards; s++)
        for (int i = 0; i < c->shards[s].n; i++) {
            char nm[512];
            ckpt_normalize_name(c->shards[s].t[i].name, nm, sizeof nm);
            c->tens[c->ntens++] = (struct c3_tref){xstrdup(nm), s, &c->shards[s].t[i]};
        }
    qsort(c->tens, (size_t)c->ntens, sizeof *c->tens, cmp_tref);
    for (int i = 1; i < c->ntens; i++)
        if (strcmp(c->tens[i].name, c->tens[i - 1].name) == 0)
            return c3_fail(C3_EMODEL, "%s/transformer: tensor %s appears twice (after name normalisation)",
                           c->dir, c->tens[i].name);
    return C3_OK;
}

/* transformer/random.json: the weights made in memory (checkpoint_random.h) */
static int open_random(c3_ckpt *c, const char *path, const char *tdir, bool shards) {
    if (shards)
        return c3_fail(C3_EMODEL,
                       "%s holds both %s and safetensors shards: remove %s to load the shards, or "
                       "the shards to make random weights",
                       tdir, CKPT_RANDOM_FILE, path);
    char *text;
    size_t len;
    if (c3_read_file(path, &text, &len) != C3_OK) return C3_EMODEL;
    double amp = 0;
    int rc = ckpt_random_parse(text, len, path, &amp);
    free(text);
    /* what it makes: the bf16 tensors of picture and clip generation, nothing else */
    if (rc == C3_OK && c->t.weight_dtype >= 0 && c->t.weight_dtype != C3_BF16)
        rc = c3_fail(C3_EMODEL,
                     "%s/config.json: its dtype is %s but %s makes bf16 weights; set \"dtype\": "
                     "\"bfloat16\"",
                     tdir, c3_dtype_name((c3_dtype)c->t.weight_dtype), path);
    else if (rc == C3_OK && c->t.fp8)
        rc = c3_fail(C3_EMODEL,
                     "%s/config.json: a quantization_config, but %s makes bf16 weights; remove it "
                     "and load with --precision fp8 to quantise them",
                     tdir, path);
    else if (rc == C3_OK && c->t.sound_gen)
        rc = c3_fail(C3_EMODEL,
                     "%s/config.json: sound_gen is true, but %s makes no sound tensors; set it "
                     "false",
                     tdir, path);
    if (rc == C3_OK) rc = ckpt_random_tensors(c, amp);
    return rc;
}

static int open_transformer(c3_ckpt *c) {
    char *tdir = c3_path_join(c->dir, "transformer");
    char *idx = c3_path_join(tdir, "diffusion_pytorch_model.safetensors.index.json");
    char *one = c3_path_join(tdir, "diffusion_pytorch_model.safetensors");
    char *rnd = c3_path_join(tdir, CKPT_RANDOM_FILE);
    int rc = C3_OK;
    if (c3_file_exists(rnd)) {
        rc = open_random(c, rnd, tdir, c3_file_exists(idx) || c3_file_exists(one));
    } else if (c3_file_exists(idx)) {
        json_t *j = load_json(idx, C3_EMODEL, "shard index");
        if (!j) {
            rc = C3_EMODEL;
            goto out;
        }
        json_t *wm = json_object_get(j, "weight_map");
        if (!json_is_object(wm)) {
            json_decref(j);
            rc = c3_fail(C3_EMODEL, "%s: no \"weight_map\" object", idx);
            goto out;
        }
        /* distinct shard file names, in first-seen order */
        const char *k;
        json_t *v;
        char **files = NULL;
        int nf = 0;
        json_object_foreach(wm, k, v) {
            if (!json_is_string(v) || strchr(json_string_value(v), '/')) {
                rc = c3_fail(C3_EMODEL, "%s: weight_map[%s] must be a file name in transformer/", idx, k);
                break;
            }
            int f = 0;
            while (f < nf && strcmp(files[f], json_string_value(v)) != 0) f++;
            if (f == nf) {
                files = xrealloc(files, (size_t)(nf + 1) * sizeof *files);
                files[nf++] = xstrdup(json_string_value(v));
            }
        }
        for (int f = 0; rc == C3_OK && f < nf; f++) {
            char *p = c3_path_join(tdir, files[f]);
            rc = add_shard(c, p);
            free(p);
        }
        if (rc == C3_OK) rc = index_tensors(c);
        /* every tensor the index names must be in its shard */
        if (rc == C3_OK) {
            json_object_foreach(wm, k, v) {
                char nm[512];
                ckpt_normalize_name(k, nm, sizeof nm);
                if (!ckpt_find(c, nm)) {
                    rc = c3_fail(C3_EMODEL, "%s: index names tensor %s but %s does not hold it", idx, k,
                                 json_string_value(v));
                    break;
                }
            }
        }
        for (int f = 0; f < nf; f++) free(files[f]);
        free(files);
        json_decref(j);
    } else if (c3_file_exists(one)) {
        rc = add_shard(c, one);
        if (rc == C3_OK) rc = index_tensors(c);
    } else {
        rc = c3_fail(C3_EMODEL, "%s: no diffusion_pytorch_model.safetensors (or its index, or %s)",
                     tdir, CKPT_RANDOM_FILE);
    }
out:
    free(tdir);
    free(idx);
    free(one);
    free(rnd);
    return rc;
}

static int read_config(const char *dir, const char *sub, char **text, size_t *len, char **path) {
    char *d = c3_path_join(dir, sub);
    *path = d;
    if (!c3_file_exists(d))
        return c3_fail(C3_EMODEL, "%s: missing; is %s a Diffusers-format Cosmos3 folder?", d, dir);
    int rc = c3_read_file(d, text, len);
    if (rc != C3_OK) return C3_EMODEL; /* the message names the file and the cause */
    return C3_OK;
}

/* ------------------------------------------------------ the model card */

const char *ckpt_share_path(const char *rel, char *buf, size_t n) {
    const char *roots[] = {COSMOS3_DATADIR, COSMOS3_SRCDIR "/share"};
    for (size_t i = 0; i < C3_ARRAY_LEN(roots); i++) {
        snprintf(buf, n, "%s/%s", roots[i], rel);
        if (c3_file_exists(buf)) return buf;
    }
    return NULL;
}

static int get_strings(json_t *o, const char *k, char ***out, int *n, const char *path) {
    json_t *v = json_object_get(o, k);
    *out = NULL;
    *n = 0;
    if (!v || json_is_null(v)) return C3_OK;
    if (!json_is_array(v))
        return c3_fail(C3_EMODEL, "%s: \"cosmos3.%s\" must be a list of strings", path, k);
    *out = xcalloc(json_array_size(v) + 1, sizeof **out);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_string(x))
            return c3_fail(C3_EMODEL, "%s: \"cosmos3.%s\" must be a list of strings", path, k);
        (*out)[(*n)++] = xstrdup(json_string_value(x));
    }
    return C3_OK;
}

static int parse_card(json_t *cj, c3_model_card *d, const char *path) {
    if (!json_is_object(cj)) return c3_fail(C3_EMODEL, "%s: \"cosmos3\" must be an object", path);
    json_t *v = json_object_get(cj, "about");
    if (json_is_string(v)) d->about = xstrdup(json_string_value(v));
    v = json_object_get(cj, "tokenizer");
    if (v && !(json_is_string(v) && !strcmp(json_string_value(v), "builtin")))
        return c3_fail(C3_EMODEL, "%s: \"cosmos3.tokenizer\" must be \"builtin\" (or absent)",
                       path);
    d->builtin_tokenizer = v != NULL;
    v = json_object_get(cj, "scores");
    if (v) d->scores_json = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
    C3_TRY(get_strings(cj, "vocabulary", &d->vocab, &d->nvocab, path));
    C3_TRY(get_strings(cj, "fillers", &d->fillers, &d->nfillers, path));
    C3_TRY(get_strings(cj, "examples", &d->examples, &d->nexamples, path));
    json_t *df = json_object_get(cj, "defaults");
    if (!df) return C3_OK;
    if (!json_is_object(df))
        return c3_fail(C3_EMODEL, "%s: \"cosmos3.defaults\" must be an object", path);
    C3_TRY(get_int(df, "width", 0, &d->width, path));
    C3_TRY(get_int(df, "height", 0, &d->height, path));
    C3_TRY(get_int(df, "steps", 0, &d->steps, path));
    C3_TRY(get_num(df, "guidance", -1, &d->guidance, path));
    C3_TRY(get_num(df, "shift", -1, &d->shift, path));
    if (d->width < 0 || d->height < 0 || d->steps < 0)
        return c3_fail(C3_EMODEL, "%s: cosmos3.defaults width, height and steps must be positive",
                       path);
    /* the checks gen makes of -W/-H/--steps, blamed on the card (0: not given) */
    const char *side[2] = {"width", "height"};
    int sv[2] = {d->width, d->height};
    for (int i = 0; i < 2; i++)
        if (sv[i] && (sv[i] % 16 || sv[i] > CARD_MAX_SIDE))
            return c3_fail(C3_EMODEL,
                           "%s: \"cosmos3.defaults.%s\" %d must be a multiple of 16 up to %d; fix "
                           "the model card",
                           path, side[i], sv[i], CARD_MAX_SIDE);
    if (d->steps > CARD_MAX_STEPS)
        return c3_fail(C3_EMODEL,
                       "%s: \"cosmos3.defaults.steps\" %d must be in 1..%d; fix the model card",
                       path, d->steps, CARD_MAX_STEPS);
    if (d->guidance != -1 && !(d->guidance >= 0 && d->guidance <= CARD_MAX_GUIDANCE))
        return c3_fail(C3_EMODEL,
                       "%s: \"cosmos3.defaults.guidance\" must be in [0, %d]; fix the model card",
                       path, CARD_MAX_GUIDANCE);
    if (d->shift != -1 && !(d->shift > 0 && d->shift <= CARD_MAX_SHIFT))
        return c3_fail(C3_EMODEL,
                       "%s: \"cosmos3.defaults.shift\" must be in (0, %d]; fix the model card",
                       path, CARD_MAX_SHIFT);
    v = json_object_get(df, "schedule");
    if (v && (!json_is_string(v) || strlen(json_string_value(v)) >= sizeof d->schedule))
        return c3_fail(C3_EMODEL, "%s: \"cosmos3.defaults.schedule\" must be a schedule name",
                       path);
    if (v) snprintf(d->schedule, sizeof d->schedule, "%s", json_string_value(v));
    v = json_object_get(df, "guidance_interval");
    if (v && json_is_null(v)) {
        d->interval = 2;
    } else if (v) {
        if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_number(json_array_get(v, 0)) ||
            !json_is_number(json_array_get(v, 1)))
            return c3_fail(C3_EMODEL,
                           "%s: \"cosmos3.defaults.guidance_interval\" must be [lo, hi] or null",
                           path);
        d->interval = 1;
        d->interval_lo = json_number_value(json_array_get(v, 0));
        d->interval_hi = json_number_value(json_array_get(v, 1));
    }
    return C3_OK;
}

int ckpt_parse_card(c3_model_card *card, const char *text, size_t len, const char *path) {
    memset(card, 0, sizeof *card);
    card->guidance = card->shift = -1;
    json_t *mi;
    int rc = parse_object(text, len, path, &mi);
    if (rc) return rc;
    json_t *cj = json_object_get(mi, "cosmos3");
    if (cj) rc = parse_card(cj, card, path);
    if (rc) ckpt_card_free(card);
    json_decref(mi);
    return rc;
}

int ckpt_read_card(const char *dir, c3_model_card *card) {
    memset(card, 0, sizeof *card);
    card->guidance = card->shift = -1;
    char *p = c3_path_join(dir, "model_index.json"), *text = NULL;
    size_t len = 0;
    int rc;
    if (!c3_file_exists(p))
        rc = c3_fail(C3_EMODEL, "%s: missing (pipeline index); is this a Diffusers-format Cosmos3 folder?", p);
    else if ((rc = c3_read_file(p, &text, &len)) == C3_OK)
        rc = ckpt_parse_card(card, text, len, p);
    free(text);
    free(p);
    return rc;
}

void ckpt_card_free(c3_model_card *card) {
    for (int i = 0; i < card->nvocab; i++)
        free(card->vocab[i]);
    for (int i = 0; i < card->nexamples; i++)
        free(card->examples[i]);
    for (int i = 0; i < card->nfillers; i++)
        free(card->fillers[i]);
    free(card->fillers);
    free(card->vocab);
    free(card->examples);
    free(card->about);
    free(card->scores_json);
    memset(card, 0, sizeof *card);
    card->guidance = card->shift = -1;
}

char *ckpt_tokenizer_json(const char *dir, const c3_model_card *card) {
    char *own = c3_path_join(dir, "text_tokenizer/tokenizer.json");
    char buf[4096];
    if (!c3_file_exists(own) && card && card->builtin_tokenizer &&
        ckpt_share_path("tokenizer/tokenizer.json", buf, sizeof buf)) {
        free(own);
        return xstrdup(buf);
    }
    return own;
}

int ckpt_open(c3_ckpt *c, const char *dir, bool need_vae) {
    memset(c, 0, sizeof *c);
    c->dir = xstrdup(dir);
    const char *base = strrchr(dir, '/');
    while (base && base[1] == 0 && base > dir) { /* trailing slash */
        const char *q = base - 1;
        while (q > dir && *q != '/') q--;
        base = q;
    }
    c->model_id = xstrdup(base && *base == '/' ? base + 1 : dir);
    size_t ml = strlen(c->model_id);
    if (ml && c->model_id[ml - 1] == '/') c->model_id[ml - 1] = 0;
    if (strcmp(c->model_id, "model") == 0 && base && base > dir) { /* DIR/NAME/model: use NAME/model */
        const char *q = base - 1;
        while (q > dir && q[-1] != '/') q--;
        free(c->model_id);
        c->model_id = xstrdup(q);
        ml = strlen(c->model_id);
        if (ml && c->model_id[ml - 1] == '/') c->model_id[ml - 1] = 0;
    }
    int rc;
    if (!c3_file_exists(dir)) {
        rc = c3_fail(C3_EMODEL,
                     "model folder %s does not exist; pass -m DIR (a Diffusers folder) or -m demo "
                     "(the built-in model)",
                     dir);
        goto fail;
    }
    /* model_index.json */
    char *p = c3_path_join(dir, "model_index.json");
    json_t *mi = load_json(p, C3_EMODEL, "pipeline index");
    if (!mi) {
        free(p);
        rc = C3_EMODEL;
        goto fail;
    }
    rc = get_bool(mi, "default_use_system_prompt", true, &c->default_system_prompt, p);
    if (rc == C3_OK) rc = get_bool(mi, "use_native_flow_schedule", false, &c->native_flow_schedule, p);
    json_decref(mi);
    free(p);
    if (rc) goto fail;
    /* transformer config */
    char *text;
    size_t len;
    rc = read_config(dir, "transformer/config.json", &text, &len, &p);
    if (rc == C3_OK) {
        rc = ckpt_parse_tconfig(&c->t, text, len, p);
        free(text);
    }
    free(p);
    if (rc) goto fail;
    /* scheduler */
    p = c3_path_join(dir, "scheduler/scheduler_config.json");
    json_t *sj = load_json(p, C3_EMODEL, "scheduler config");
    if (!sj) {
        free(p);
        rc = C3_EMODEL;
        goto fail;
    }
    rc = parse_sconfig(&c->s, sj, p);
    json_decref(sj);
    free(p);
    if (rc) goto fail;
    /* the model card, then the tokenizer (the folder's own, or the installed one) */
    rc = ckpt_read_card(dir, &c->card);
    if (rc) goto fail;
    c->tokenizer_json = ckpt_tokenizer_json(dir, &c->card);
    {
        char *slash = strrchr(c->tokenizer_json, '/');
        size_t n = slash ? (size_t)(slash - c->tokenizer_json) : 0;
        char *tdir = xmalloc(n + 1);
        memcpy(tdir, c->tokenizer_json, n);
        tdir[n] = 0;
        c->tokenizer_config = c3_path_join(n ? tdir : ".", "tokenizer_config.json");
        free(tdir);
    }
    if (!c3_file_exists(c->tokenizer_json)) {
        rc = c3_fail(C3_EMODEL, "%s: missing (the Qwen3 tokenizer); copy text_tokenizer/ from the checkpoint",
                     c->tokenizer_json);
        goto fail;
    }
    /* transformer tensors */
    rc = open_transformer(c);
    if (rc) goto fail;
    c->sparse_embed = !ckpt_find(c, "embed_tokens.weight") && ckpt_find(c, "embed_tokens.rows");
    /* VAE */
    if (need_vae) {
        rc = read_config(dir, "vae/config.json", &text, &len, &p);
        if (rc == C3_OK) {
            rc = ckpt_parse_vconfig(&c->v, text, len, p);
            free(text);
        }
        free(p);
        if (rc) goto fail;
        p = c3_path_join(dir, "vae/diffusion_pytorch_model.safetensors");
        rc = st_open(&c->vae, p);
        free(p);
        if (rc) goto fail;
        c->has_vae = true;
    }
    return C3_OK;
fail:
    ckpt_close(c);
    return rc;
}

void ckpt_close(c3_ckpt *c) {
    for (int i = 0; i < c->nshards; i++) st_close(&c->shards[i]);
    free(c->shards);
    for (int i = 0; i < c->ntens; i++) free(c->tens[i].name);
    free(c->tens);
    free(c->random_buf);
    if (c->has_vae) st_close(&c->vae);
    free(c->dir);
    free(c->model_id);
    free(c->tokenizer_json);
    free(c->tokenizer_config);
    ckpt_card_free(&c->card);
    memset(c, 0, sizeof *c);
}

void ckpt_sizes(const c3_ckpt *c, c3_sizes *s) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < c->ntens; i++) {
        const char *n = c->tens[i].name;
        const st_tensor *t = c->tens[i].t;
        int64_t p = st_numel(t), b = (int64_t)t->nbytes;
        bool gen = strstr(n, "_moe_gen") || strstr(n, "add_") || strstr(n, "norm_added") ||
                   strstr(n, "to_add_out") || strncmp(n, "proj_in", 7) == 0 ||
                   strncmp(n, "proj_out", 8) == 0 || strncmp(n, "time_embedder", 13) == 0;
        bool und = !gen && (strncmp(n, "layers.", 7) == 0 || strncmp(n, "embed_tokens", 12) == 0 ||
                            strcmp(n, "norm.weight") == 0);
        if (strncmp(n, "embed_tokens.", 13) == 0 && t->dtype != C3_I32 && t->dtype != C3_I64)
            s->embed_params += p;
        size_t nl = strlen(n);
        if (strncmp(n, "layers.", 7) == 0 &&
            (t->ndim == 2 || (nl > 6 && strcmp(n + nl - 6, "_scale") == 0))) {
            s->lin_params += t->ndim == 2 ? p : 0;
            s->lin_bytes += b;
            s->fp8_params += t->dtype == C3_F8E4M3 ? p : 0;
        }
        bool other = strncmp(n, "audio_", 6) == 0 || strncmp(n, "action_", 7) == 0 ||
                     strncmp(n, "lm_head", 7) == 0;
        if (other) {
            s->other_params += p;
            s->other_bytes += b;
        } else if (gen) {
            s->gen_params += p;
            s->gen_bytes += b;
        } else if (und) {
            s->und_params += p;
            s->und_bytes += b;
        } else {
            s->shared_params += p;
            s->shared_bytes += b;
        }
    }
    for (int u = 0, n = c->v.n_mult; c->has_vae && u < n;
         u++) { /* block u ends upsampled, but the last */
        int k = u < n - 1 ? u + 1 : n - 1;
        s->vae_per_latent = C3_MAX(s->vae_per_latent, (int64_t)c->v.dec_dims[u + 1] << (2 * k));
    }
    if (c->has_vae)
        for (int i = 0; i < c->vae.n; i++) {
            s->vae_params += st_numel(&c->vae.t[i]);
            s->vae_bytes += (int64_t)c->vae.t[i].nbytes;
            const char *vn = c->vae.t[i].name;
            if (!strncmp(vn, "encoder.", 8) || !strncmp(vn, "quant_conv.", 11)) {
                const st_tensor *vt = &c->vae.t[i];
                s->vae_enc_values += st_numel(vt);
                /* a causal conv [Cout, Cin, kt, kh, kw] also keeps its last tap */
                if (vt->ndim == 5 && vt->shape[2] > 1)
                    s->vae_enc_values += st_numel(vt) / vt->shape[2];
            }
        }
    if (c->has_vae) {
        s->vae_enc_dim = c->v.base_dim;
        s->vae_patch = c->v.patch_size > 0 ? c->v.patch_size : 1;
    }
}
