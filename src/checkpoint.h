/* checkpoint.h - a Diffusers-format Cosmos3 folder: configs and tensors.
 *
 *   DIR/model_index.json
 *   DIR/transformer/config.json + *.safetensors (one file, or shards + index),
 *                    or random.json: the weights made in memory (checkpoint_random.h)
 *   DIR/vae/config.json + diffusion_pytorch_model.safetensors
 *   DIR/scheduler/scheduler_config.json
 *   DIR/text_tokenizer/tokenizer.json (+ tokenizer_config.json)
 *
 * Every size is read from the configs and checked against the safetensors
 * headers; nothing is hard-coded from a particular checkpoint. Tensor names
 * are normalised at load (spec section 5): a leading "model." is stripped and
 * native cosmos-framework names are mapped to the flat diffusers ones.
 */
#ifndef COSMOS3_CHECKPOINT_H
#define COSMOS3_CHECKPOINT_H

#include "safetensors.h"

/* Transformer geometry (transformer/config.json). */
typedef struct {
    int hidden;       /* hidden_size D */
    int layers;       /* num_hidden_layers (per tower) */
    int heads;        /* num_attention_heads Hq */
    int kv_heads;     /* num_key_value_heads Hkv */
    int head_dim;     /* head_dim (128 on the real models) */
    int inter;        /* intermediate_size I */
    int vocab;        /* vocab_size */
    bool mlp_gated;   /* SwiGLU (gate/up/down); false: ReLU^2 (up/down) */
    bool und_qk_norm; /* qk_norm_for_text: UND per-head RMSNorm on q,k */
    bool und_k_norm_for_gen; /* use_und_k_norm_for_gen (Edge) */
    bool norm_mul_fp32;      /* Nemotron RMSNorm: multiply by w in fp32 */
    float eps;               /* rms_norm_eps */
    double rope_theta;
    int mrope[3];            /* mrope_section (T, H, W) in frequency pairs */
    int latent_ch;           /* latent_channel (48) */
    int patch;               /* latent_patch_size (2) */
    int patch_dim;           /* patch_latent_dim = patch^2 * latent_ch */
    double timestep_scale;   /* 0.001 */
    double base_fps;         /* 24 */
    bool fps_modulation;
    int temporal_margin;     /* unified_3d_mrope_temporal_modality_margin */
    uint64_t config_hash;    /* FNV-1a of config.json bytes */
    /* quantization_config (NVIDIA ModelOpt FP8: quant_method "modelopt",
     * quant_algo "FP8") and its runtime.diffusion_step_policy ("first_last_n"):
     * the first fp8_first and the last fp8_last denoising steps run W8A16
     * (overlap: a16 when they overlap), the others FP8 x FP8; reasoner "a16":
     * the UND tower W8A16. No policy: every step FP8 x FP8. */
    bool fp8;
    bool fp8_policy;
    int fp8_first, fp8_last;
    bool fp8_overlap_a16, fp8_reasoner_a16;
    int weight_dtype; /* "torch_dtype"/"dtype": C3_BF16, C3_F16, C3_F32, or -1 if not given */
    /* joint sound: sound_gen (the checkpoint was trained with it), sound_dim
     * (the sound latent width, audio_proj_in's input), sound_latent_fps (25) */
    bool sound_gen;
    int sound_dim;
    double sound_latent_fps;
} c3_tconfig;

/* Wan2.2 VAE (vae/config.json). */
typedef struct {
    int z_dim;            /* 48 */
    int base_dim;         /* encoder base */
    int decoder_base_dim; /* decoder base (256 real, 8 tiny) */
    int dim_mult[8];
    int n_mult;
    int num_res_blocks;
    bool temporal_down[8]; /* temperal_downsample */
    int n_tdown;
    int in_channels, out_channels, patch_size;
    int scale_spatial, scale_temporal; /* scale_factor_*: pixels / frames per latent */
    bool is_residual;
    float latents_mean[64], latents_std[64];
    /* computed by ckpt_parse_vconfig for vae_load: the decoder's widths,
     * conv_in's output then each up block's (n_mult + 1 entries) */
    int dec_dims[9];
} c3_vconfig;

/* The Wan2.2 VAE's compression (scale_factor_spatial / _temporal), for what
 * is made or checked before a model is known; a loaded model's own
 * vae/config.json says its factors (c3_vconfig). */
#define C3_WAN_SCALE_SPATIAL 16
#define C3_WAN_SCALE_TEMPORAL 4

/* Scheduler (scheduler/scheduler_config.json). */
typedef struct {
    char class_name[64];   /* UniPCMultistepScheduler, FlowMatchEulerDiscreteScheduler */
    bool use_karras_sigmas;
    bool use_flow_sigmas;
    double flow_shift;
    double sigma_min, sigma_max;
    int num_train_timesteps;
    int solver_order;
    /* a distilled checkpoint: FlowMatchEulerDiscreteScheduler with
     * fixed_step_sampler_config {sample_type "sde", t_list, num_train_timesteps};
     * flow_shift holds the scheduler's "shift" */
    bool distilled;
    int n_tlist;
    double t_list[64]; /* C3_MAX_TLIST */
} c3_sconfig;

/* The optional "cosmos3" object of model_index.json: what a checkpoint says
 * about itself beyond Diffusers. The built-in demo model carries it; any
 * checkpoint may. Every key is optional:
 *   "about": "one line",           "tokenizer": "builtin" (the Qwen3 files
 *   installed with cosmos3, when the folder has no text_tokenizer/),
 *   "defaults": {"width", "height", "steps", "guidance", "shift", "schedule",
 *                "guidance_interval": [lo, hi] or null (off)},
 *   "vocabulary": ["words", ...],  "examples": ["prompts", ...],
 *   "fillers": ["an", ...] (words it was not trained on that change nothing
 *   it draws: no vocabulary warning for them),
 *   "scores": {...} (shown by info, not read otherwise). */
typedef struct {
    char *about;
    bool builtin_tokenizer;
    int width, height, steps; /* 0: none given */
    double guidance, shift;   /* < 0: none given */
    char schedule[16];        /* "": none given */
    int interval;             /* 0: none given, 1: [lo, hi], 2: null (CFG on every step) */
    double interval_lo, interval_hi;
    char **vocab;
    int nvocab;
    char **fillers; /* words outside the vocabulary that change nothing it draws ("an") */
    int nfillers;
    char **examples;
    int nexamples;
    char *scores_json; /* the "scores" object as compact JSON, or NULL */
} c3_model_card;

typedef struct c3_ckpt {
    char *dir;
    char *model_id;            /* folder basename */
    bool default_system_prompt;
    bool native_flow_schedule;
    c3_tconfig t;
    c3_vconfig v;
    c3_sconfig s;
    bool has_vae;
    /* transformer tensors, over all shards, names normalised */
    st_file *shards;
    int nshards;
    struct c3_tref { char *name; int shard; const st_tensor *t; } *tens;
    int ntens;
    /* transformer/random.json (checkpoint_random.h): every tensor above made
     * in memory on open, pointing into random_buf [random_n] bf16, element
     * i = bf16(c3_random_weight(i, random_amp)); freed by ckpt_close */
    bool random;
    double random_amp;
    uint16_t *random_buf;
    int64_t random_n;
    st_file vae;
    c3_model_card card; /* model_index.json "cosmos3" */
    /* sparse embedding (embed_tokens.rows [n, D] + embed_tokens.ids [n]) instead of
     * embed_tokens.weight */
    bool sparse_embed;
    char *tokenizer_json;      /* path */
    char *tokenizer_config;    /* path (may not exist) */
    void *user;                /* for the caller */
} c3_ckpt;

/* Open DIR: parse every config and map every shard. Errors: C3_EMODEL with a
 * message naming the file and the problem. `need_vae` false skips vae/. */
int ckpt_open(c3_ckpt *c, const char *dir, bool need_vae);
void ckpt_close(c3_ckpt *c);

/* Read DIR/model_index.json's "cosmos3" object into card (zeroed, then
 * filled; absent keys stay "none given"). C3_EMODEL on a wrong type. */
int ckpt_read_card(const char *dir, c3_model_card *card);
/* The same from model_index.json's text (path names it in messages). */
int ckpt_parse_card(c3_model_card *card, const char *text, size_t len, const char *path);
void ckpt_card_free(c3_model_card *card);
/* The tokenizer.json a folder uses: DIR/text_tokenizer/tokenizer.json, or the
 * installed Qwen3 copy when the card says "builtin" and the folder has none.
 * Returns a new string (the first path when neither exists). */
char *ckpt_tokenizer_json(const char *dir, const c3_model_card *card);
/* An installed resource: DATADIR/rel (the cosmos3 data folder), else the
 * source tree's share/rel. buf, or NULL when neither exists. */
const char *ckpt_share_path(const char *rel, char *buf, size_t n);

/* Parse only the transformer config (for info/plan before mapping). */
int ckpt_parse_tconfig(c3_tconfig *t, const char *json_text, size_t len, const char *path);
int ckpt_parse_vconfig(c3_vconfig *v, const char *json_text, size_t len, const char *path);

/* A transformer tensor by normalised name, or NULL. */
const st_tensor *ckpt_find(const c3_ckpt *c, const char *name);
/* A tensor that must exist with exactly this shape (ndim dims, -1 = any).
 * On failure records "transformer tensor NAME: expected [a, b], found [c, d]"
 * (or "missing") and returns NULL. */
/* Whether a stored tensor may have dtype dt (the table in checkpoint.c: ints
 * only for token ids, floats for weights, and a transformer's 16-bit floats
 * must be the config's "torch_dtype": BF16 and F16 are the same size, so a
 * relabelled file would load as noise). C3_EMODEL naming the tensor if not.
 * `where`: "transformer" or the VAE file. ckpt_get applies it. */
int ckpt_check_dtype(const c3_ckpt *c, bool transformer, const char *where, const char *name,
                     c3_dtype dt);
/* info --check: every stored tensor of the transformer and the VAE against
 * the dtype table, and every float in it for NaN/Inf (read through the
 * mapping in chunks). C3_EMODEL naming the first bad tensor and element.
 * *ntensors, *nvalues: what was scanned. */
int ckpt_scan(const c3_ckpt *c, int64_t *ntensors, int64_t *nvalues);
const st_tensor *ckpt_get(const c3_ckpt *c, const st_file *f, const char *name, int ndim,
                          const int64_t *shape);
/* Normalise a checkpoint tensor name into out (spec section 5). */
void ckpt_normalize_name(const char *in, char *out, size_t outsz);

/* Parameter counts / bytes as stored. */
typedef struct {
    int64_t und_params, gen_params, shared_params, vae_params, other_params;
    int64_t embed_params; /* of und_params: the token embedding (its stored rows) */
    int64_t und_bytes, gen_bytes, shared_bytes, vae_bytes, other_bytes;
    /* of und + gen: the layers' linear weights (2-D layers.* tensors, the
     * ones FP8 may hold) and their ModelOpt scales (layers.*_scale): values
     * and stored bytes; fp8_params of lin_params are stored as F8_E4M3 */
    int64_t lin_params, lin_bytes, fp8_params;
    /* the VAE decoder's largest activation, in values per latent pixel and
     * frame: max over up blocks of channels x (its upsampling so far)^2 */
    int64_t vae_per_latent;
    /* of the VAE: the values the encoder holds (encoder.*, quant_conv.*, plus
       the last-tap copy of each causal conv), its first stage's channels and
       the patch size (for the plan's encoder bytes) */
    int64_t vae_enc_values;
    int vae_enc_dim, vae_patch;
} c3_sizes;
void ckpt_sizes(const c3_ckpt *c, c3_sizes *s);

#endif
