/* mkmodel.c - random-weight Cosmos3 checkpoints in the Diffusers layout.
 * See mkmodel.h for the presets, the initialisation and the guarantees. */
#include "mkmodel.h"

#include "checkpoint.h"
#include "checkpoint_random.h"
#include "cosmos3_tools.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "scheduler.h"

/* ------------------------------------------------------------- constants */

/* Shared by every Cosmos3 variant (spec 1.1). */
#define COSMOS3_LATENT_CH 48
#define COSMOS3_PATCH 2
#define COSMOS3_TIME_FREQ_DIM 256 /* sinusoidal timestep features (cos | sin) */
#define COSMOS3_TIMESTEP_SCALE 0.001
#define COSMOS3_BASE_FPS 24
#define COSMOS3_TEMPORAL_MARGIN 15000
#define COSMOS3_SOUND_DIM 64
#define COSMOS3_ACTION_DIM 64
#define COSMOS3_EMBODIMENT_DOMAINS 32
#define COSMOS3_SOUND_FPS 25.0
#define QWEN3_VOCAB 151936
#define DIFFUSERS_VERSION "0.40.0.dev0"

/* Init (fixtures README). */
#define INIT_NORM_STD 0.1
#define INIT_BIAS_STD 0.1

/* Wan2.2 VAE (AutoencoderKLWan); channel bases per geometry. */
#define WAN_Z_DIM 48
#define WAN_IO_CHANNELS 12 /* 3 colours x patch 2 x 2 */
#define WAN_PATCH 2
#define WAN_NUM_RES_BLOCKS 2
#define WAN_FULL_BASE 160
#define WAN_FULL_DECODER_BASE 256
#define WAN_TINY_BASE 8
#define WAN_TINY_DECODER_BASE 8
#define WAN_DEMO_BASE 16
#define WAN_CONV_K 3
static const int wan_dim_mult[] = {1, 2, 4, 4};
static const bool wan_temporal_down[] = {false, true, true};

/* Published Wan2.2-TI2V-5B per-channel latent statistics (vae/config.json). */
static const double wan22_latents_mean[WAN_Z_DIM] = {
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174,  0.1838,  0.1557,  -0.1382, 0.0542,
    0.2813,  0.0891,  0.1570,  -0.0098, 0.0375,  -0.1825, -0.2246, -0.1207, -0.0698, 0.5109,
    0.2665,  -0.2108, -0.2158, 0.2502,  -0.2055, -0.0322, 0.1109,  0.1567,  -0.0729, 0.0899,
    -0.2799, -0.1230, -0.0313, -0.1649, 0.0117,  0.0723,  -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152,  0.1957,  0.1433,  -0.2944, 0.3573,  -0.0548, -0.1681, -0.0667,
};
static const double wan22_latents_std[WAN_Z_DIM] = {
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
    0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
    0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
};

/* Writing. */
#define SHARD_BYTES_DEFAULT 5000000000LL /* save_pretrained(max_shard_size="5GB") */
#define GEN_CHUNK (1 << 18)              /* elements per independently seeded chunk */
#define GEN_BATCH 32                     /* chunks generated in parallel per write */
#define IO_ASYNC_MIN (1 << 20)           /* smaller writes are done synchronously */
#define DISK_MARGIN (64LL << 20)         /* free space kept beyond the estimate */
#define ST_ALIGN 8                       /* safetensors header padding */

/* ---------------------------------------------------------------- presets */

/* clang-format off */
static const c3_mkmodel_preset presets[] = {
    {.name = "tiny", .about = "2-layer test model (hidden 128), tiny VAE; ~40 MB",
     .hidden = 128, .layers = 2, .heads = 8, .kv_heads = 8, .head_dim = 16, .inter = 256,
     .vocab = QWEN3_VOCAB, .gated = true, .nemotron = false, .eps = 1e-6, .theta = 5e6,
     .mrope = {4, 2, 2}, .vae_base = WAN_TINY_BASE, .vae_decoder_base = WAN_TINY_DECODER_BASE,
     .system_prompt = true, .native_schedule = false},
    {.name = "demo", .about = "the built-in demo's geometry (hidden 256, 4 layers, VAE base 16); ~90 MB",
     .hidden = 256, .layers = 4, .heads = 8, .kv_heads = 4, .head_dim = 32, .inter = 768,
     .vocab = QWEN3_VOCAB, .gated = true, .nemotron = false, .eps = 1e-6, .theta = 5e6,
     .mrope = {8, 4, 4}, .vae_base = WAN_DEMO_BASE, .vae_decoder_base = WAN_DEMO_BASE,
     .system_prompt = true, .native_schedule = false},
    {.name = "nano", .about = "Cosmos3-Nano geometry (Qwen3-VL-8B towers); ~32 GB",
     .hidden = 4096, .layers = 36, .heads = 32, .kv_heads = 8, .head_dim = 128, .inter = 12288,
     .vocab = QWEN3_VOCAB, .gated = true, .nemotron = false, .eps = 1e-6, .theta = 5e6,
     .mrope = {24, 20, 20}, .vae_base = WAN_FULL_BASE, .vae_decoder_base = WAN_FULL_DECODER_BASE,
     .system_prompt = true, .native_schedule = false},
    {.name = "super", .about = "Cosmos3-Super geometry (Qwen3-VL-32B towers); ~128 GB",
     .hidden = 5120, .layers = 64, .heads = 64, .kv_heads = 8, .head_dim = 128, .inter = 25600,
     .vocab = QWEN3_VOCAB, .gated = true, .nemotron = false, .eps = 1e-6, .theta = 5e6,
     .mrope = {24, 20, 20}, .vae_base = WAN_FULL_BASE, .vae_decoder_base = WAN_FULL_DECODER_BASE,
     .system_prompt = true, .native_schedule = false},
    {.name = "edge", .about = "Cosmos3-Edge geometry (Nemotron dense, ReLU^2), Qwen3 vocab; ~9 GB",
     .hidden = 2048, .layers = 28, .heads = 16, .kv_heads = 8, .head_dim = 128, .inter = 9216,
     .vocab = QWEN3_VOCAB, .gated = false, .nemotron = true, .eps = 1e-5, .theta = 1e8,
     .mrope = {24, 20, 20}, .vae_base = WAN_FULL_BASE, .vae_decoder_base = WAN_FULL_DECODER_BASE,
     .system_prompt = false, .native_schedule = true},
};
/* clang-format on */

const c3_mkmodel_preset *mkmodel_presets(int *n) {
    if (n) *n = (int)C3_ARRAY_LEN(presets);
    return presets;
}

const c3_mkmodel_preset *mkmodel_preset(const char *name) {
    for (size_t i = 0; name && i < C3_ARRAY_LEN(presets); i++)
        if (strcmp(presets[i].name, name) == 0) return &presets[i];
    return NULL;
}

/* ----------------------------------------------------- random generator */

/* xoshiro256** (Blackman & Vigna), seeded through splitmix64. */
typedef struct {
    uint64_t s[4];
} rng256;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static inline uint64_t rng_next(rng256 *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return out;
}
static void rng_seed(rng256 *r, uint64_t key) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&key);
}
/* uniform in (0, 1] */
static inline double rng_u01(rng256 *r) { return (double)((rng_next(r) >> 11) + 1) * 0x1.0p-53; }

/* Ziggurat normal sampler (Marsaglia & Tsang 2000) with 256 layers of equal
 * area ZIG_V under f(x) = exp(-x^2/2); ZIG_R is where the tail starts.
 * zig_x[0] = V/f(R) (the base strip as a rectangle), zig_x[1] = R, then
 * f(x[i+1]) = V/x[i] + f(x[i]); zig_x[256] = 0. */
#define ZIG_N 256
#define ZIG_R 3.6541528853610088
#define ZIG_V 0.00492867323399
static double zig_x[ZIG_N + 1], zig_f[ZIG_N + 1];

/* Fast path tables: a 32-bit draw gives the layer (8 bits), the sign (1) and
 * a 23-bit position j in the layer; x = j * zig_w[i], and j < zig_k[i] means
 * x is inside the layer's core (accepted without any float test). */
#define ZIG_LAYER_BITS 8
#define ZIG_POS_BITS 23
static float zig_w[ZIG_N];
static uint32_t zig_k[ZIG_N];

static void zig_init(void) { /* called once, before any parallel region */
    static bool ready;
    if (ready) return;
    zig_x[0] = ZIG_V / exp(-0.5 * ZIG_R * ZIG_R);
    zig_x[1] = ZIG_R;
    for (int i = 1; i < ZIG_N - 1; i++)
        zig_x[i + 1] = sqrt(-2.0 * log(ZIG_V / zig_x[i] + exp(-0.5 * zig_x[i] * zig_x[i])));
    zig_x[ZIG_N] = 0.0;
    for (int i = 0; i <= ZIG_N; i++) zig_f[i] = exp(-0.5 * zig_x[i] * zig_x[i]);
    const double scale = (double)(1u << ZIG_POS_BITS);
    for (int i = 0; i < ZIG_N; i++) {
        zig_w[i] = (float)(zig_x[i] / scale);
        zig_k[i] = (uint32_t)(zig_x[i + 1] / zig_x[i] * scale);
    }
    ready = true;
}

/* A standard normal, double precision throughout (the slow path). */
static double rng_normal(rng256 *r) {
    for (;;) {
        uint64_t b = rng_next(r);
        int i = (int)(b & (ZIG_N - 1));
        double sign = (b >> ZIG_LAYER_BITS) & 1 ? -1.0 : 1.0;
        double x = (double)(b >> 11) * 0x1.0p-53 * zig_x[i];
        if (x < zig_x[i + 1]) return sign * x; /* inside the layer's core */
        if (i == 0) {                          /* the tail beyond R */
            double a, c;
            do {
                a = -log(rng_u01(r)) / ZIG_R;
                c = -log(rng_u01(r));
            } while (c + c < a * a);
            return sign * (ZIG_R + a);
        }
        double y = zig_f[i] + rng_u01(r) * (zig_f[i + 1] - zig_f[i]); /* the wedge */
        if (y < exp(-0.5 * x * x)) return sign * x;
    }
}

/* The rare cases of zig_normal32: the tail, or a point in a wedge. On a wedge
 * rejection it returns a fresh sample from the slow sampler: the accepted
 * ziggurat points are exactly normal, so the mixture is too. */
__attribute__((noinline)) static float zig_rare(rng256 *r, uint32_t i, bool neg, float x) {
    double xd = (double)x;
    if (i == 0) { /* the tail beyond R */
        double a, c;
        do {
            a = -log(rng_u01(r)) / ZIG_R;
            c = -log(rng_u01(r));
        } while (c + c < a * a);
        xd = ZIG_R + a;
    } else if (zig_f[i] + rng_u01(r) * (zig_f[i + 1] - zig_f[i]) >= exp(-0.5 * xd * xd)) {
        return (float)rng_normal(r);
    }
    return (float)(neg ? -xd : xd);
}

/* A standard normal from 32 random bits; ~98.5% of calls end at the integer
 * compare. */
static inline float zig_normal32(rng256 *r, uint32_t v) {
    uint32_t i = v & (ZIG_N - 1), j = v >> (ZIG_LAYER_BITS + 1);
    float x = (float)j * zig_w[i];
    if (__builtin_expect(j < zig_k[i], 1)) { /* sign bit set without a branch */
        uint32_t u;
        memcpy(&u, &x, 4);
        u |= (v << (31 - ZIG_LAYER_BITS)) & 0x80000000u;
        memcpy(&x, &u, 4);
        return x;
    }
    return zig_rare(r, i, (v >> ZIG_LAYER_BITS) & 1, x);
}

/* ------------------------------------------------------------ the plan */

typedef struct {
    char name[112];
    c3_dtype dtype;
    int ndim;
    int64_t shape[5];
    double mean, std;
    float qscale;    /* F8_E4M3: the dequantisation scale the codes are written for */
    int file;        /* shard index (transformer) */
    int64_t nbytes;
} mk_tensor;

typedef struct {
    mk_tensor *t;
    int n, cap;
} mk_list;

static int64_t tnumel(const mk_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static mk_tensor *add(mk_list *l, c3_dtype dt, double mean, double std, int ndim, const int64_t *shape,
                      const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static mk_tensor *add(mk_list *l, c3_dtype dt, double mean, double std, int ndim, const int64_t *shape,
                      const char *fmt, ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->t = xrealloc(l->t, (size_t)l->cap * sizeof *l->t);
    }
    mk_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->dtype = dt;
    t->mean = mean;
    t->std = std;
    t->ndim = ndim;
    if (ndim) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->nbytes = tnumel(t) * (int64_t)c3_dtype_size(dt);
    return t;
}

/* Weight [out, in, k...] with fan_in = in * prod(k): N(0, 1/fan_in). */
#define SHAPE(...) ((const int64_t[]){__VA_ARGS__}), (int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))
static mk_tensor *add_w(mk_list *l, c3_dtype dt, const int64_t *shape, int ndim, const char *name) {
    int64_t fan_in = 1;
    for (int i = 1; i < ndim; i++) fan_in *= shape[i];
    return add(l, dt, 0.0, 1.0 / sqrt((double)fan_in), ndim, shape, "%s", name);
}
static void add_norm(mk_list *l, c3_dtype dt, const int64_t *shape, int ndim, const char *name) {
    add(l, dt, 1.0, INIT_NORM_STD, ndim, shape, "%s", name);
}
static void add_bias(mk_list *l, c3_dtype dt, int64_t n, const char *name) {
    add(l, dt, 0.0, INIT_BIAS_STD, 1, (const int64_t[]){n}, "%s", name);
}

typedef struct {
    const c3_mkmodel_preset *p;
    int layers, vocab;
    int vae_base, vae_decoder_base;
    bool fp8, distilled;
} mk_geom;

/* --fp8 (NVIDIA ModelOpt's layout): each layer weight as E4M3 codes of its
 * N(0, 1/fan_in) values, with weight_scale = FP8_W_SIGMAS sigma / 448 (the
 * max |W| of a large Gaussian tensor is about 5 to 6 sigma; ModelOpt takes
 * the true max) and a fixed input_scale (a calibrated one needs data; the
 * towers' normed inputs stay well inside 448 input_scale). */
#define FP8_W_SIGMAS 6.0
#define FP8_INPUT_SCALE (16.0f / 448.0f)

/* A layer weight: bf16, or with --fp8 its codes plus the two scales. */
static void add_layer_w(mk_list *l, const mk_geom *g, const int64_t *shape, int ndim,
                        const char *name) {
    if (!g->fp8) {
        add_w(l, C3_BF16, shape, ndim, name);
        return;
    }
    mk_tensor *t = add_w(l, C3_F8E4M3, shape, ndim, name);
    t->qscale = (float)(FP8_W_SIGMAS * t->std / 448.0);
    char base[112];
    size_t L = strlen(name);
    snprintf(base, sizeof base, "%.*s", (int)(L > 7 ? L - 7 : L), name); /* less ".weight" */
    add(l, C3_F32, t->qscale, 0.0, 0, NULL, "%s.weight_scale", base);
    add(l, C3_F32, FP8_INPUT_SCALE, 0.0, 0, NULL, "%s.input_scale", base);
}

/* Transformer tensors in the flat diffusers layout (spec section 5). Not
 * written: lm_head, audio_* and action_* (never read by generation). */
static void plan_transformer(mk_list *l, const mk_geom *g) {
    const c3_mkmodel_preset *p = g->p;
    const c3_dtype B = C3_BF16;
    const int64_t D = p->hidden, I = p->inter, hd = p->head_dim, Q = (int64_t)p->heads * hd,
                  KV = (int64_t)p->kv_heads * hd, P = COSMOS3_PATCH * COSMOS3_PATCH * COSMOS3_LATENT_CH;
    char n[112];
    add(l, B, 0.0, 1.0, 2, (const int64_t[]){g->vocab, D}, "embed_tokens.weight");
    for (int i = 0; i < g->layers; i++) {
        static const char *const tower[2] = {"", "_moe_gen"};
        for (int t = 0; t < 2; t++) {
            snprintf(n, sizeof n, "layers.%d.input_layernorm%s.weight", i, tower[t]);
            add_norm(l, B, SHAPE(D), n);
            snprintf(n, sizeof n, "layers.%d.post_attention_layernorm%s.weight", i, tower[t]);
            add_norm(l, B, SHAPE(D), n);
            const char *mlp = t ? "mlp_moe_gen" : "mlp";
            if (p->gated) {
                snprintf(n, sizeof n, "layers.%d.%s.gate_proj.weight", i, mlp);
                add_layer_w(l, g, SHAPE(I, D), n);
            }
            snprintf(n, sizeof n, "layers.%d.%s.up_proj.weight", i, mlp);
            add_layer_w(l, g, SHAPE(I, D), n);
            snprintf(n, sizeof n, "layers.%d.%s.down_proj.weight", i, mlp);
            add_layer_w(l, g, SHAPE(D, I), n);
        }
        /* UND attention */
        static const char *const und[4] = {"to_q", "to_k", "to_v", "to_out"};
        static const char *const gen[4] = {"add_q_proj", "add_k_proj", "add_v_proj", "to_add_out"};
        for (int t = 0; t < 2; t++) {
            const char *const *nm = t ? gen : und;
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, nm[0]);
            add_layer_w(l, g, SHAPE(Q, D), n);
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, nm[1]);
            add_layer_w(l, g, SHAPE(KV, D), n);
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, nm[2]);
            add_layer_w(l, g, SHAPE(KV, D), n);
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, nm[3]);
            add_layer_w(l, g, SHAPE(D, Q), n);
        }
        if (p->nemotron) { /* no UND QK-norm; GEN sees k_norm_und_for_gen(K_und) */
            snprintf(n, sizeof n, "layers.%d.self_attn.k_norm_und_for_gen.weight", i);
            add_norm(l, B, SHAPE(hd), n);
        } else {
            snprintf(n, sizeof n, "layers.%d.self_attn.norm_q.weight", i);
            add_norm(l, B, SHAPE(hd), n);
            snprintf(n, sizeof n, "layers.%d.self_attn.norm_k.weight", i);
            add_norm(l, B, SHAPE(hd), n);
        }
        snprintf(n, sizeof n, "layers.%d.self_attn.norm_added_q.weight", i);
        add_norm(l, B, SHAPE(hd), n);
        snprintf(n, sizeof n, "layers.%d.self_attn.norm_added_k.weight", i);
        add_norm(l, B, SHAPE(hd), n);
    }
    add_norm(l, B, SHAPE(D), "norm.weight");
    add_norm(l, B, SHAPE(D), "norm_moe_gen.weight");
    add_w(l, B, SHAPE(D, P), "proj_in.weight");
    add_bias(l, B, D, "proj_in.bias");
    add_w(l, B, SHAPE(P, D), "proj_out.weight");
    add_bias(l, B, P, "proj_out.bias");
    add_w(l, B, SHAPE(D, COSMOS3_TIME_FREQ_DIM), "time_embedder.linear_1.weight");
    add_bias(l, B, D, "time_embedder.linear_1.bias");
    add_w(l, B, SHAPE(D, D), "time_embedder.linear_2.weight");
    add_bias(l, B, D, "time_embedder.linear_2.bias");
}

/* ---- VAE (AutoencoderKLWan, Wan2.2 residual variant), float32 ---- */

static void vae_conv3(mk_list *l, const char *pfx, int64_t out, int64_t in, int64_t kt, int64_t ks) {
    char n[112];
    snprintf(n, sizeof n, "%s.weight", pfx);
    add_w(l, C3_F32, SHAPE(out, in, kt, ks, ks), n);
    snprintf(n, sizeof n, "%s.bias", pfx);
    add_bias(l, C3_F32, out, n);
}
static void vae_conv2(mk_list *l, const char *pfx, int64_t out, int64_t in, int64_t k) {
    char n[112];
    snprintf(n, sizeof n, "%s.weight", pfx);
    add_w(l, C3_F32, SHAPE(out, in, k, k), n);
    snprintf(n, sizeof n, "%s.bias", pfx);
    add_bias(l, C3_F32, out, n);
}
static void vae_gamma(mk_list *l, const char *pfx, int64_t c, bool spatial_only) {
    char n[112];
    snprintf(n, sizeof n, "%s.gamma", pfx);
    if (spatial_only)
        add_norm(l, C3_F32, SHAPE(c, 1, 1), n);
    else
        add_norm(l, C3_F32, SHAPE(c, 1, 1, 1), n);
}
/* Residual block: RMS -> SiLU -> conv3^3 -> RMS -> SiLU -> conv3^3 (+ 1^3 shortcut). */
static void vae_resnet(mk_list *l, const char *pfx, int64_t in, int64_t out) {
    char n[112];
    snprintf(n, sizeof n, "%s.norm1", pfx);
    vae_gamma(l, n, in, false);
    snprintf(n, sizeof n, "%s.conv1", pfx);
    vae_conv3(l, n, out, in, WAN_CONV_K, WAN_CONV_K);
    snprintf(n, sizeof n, "%s.norm2", pfx);
    vae_gamma(l, n, out, false);
    snprintf(n, sizeof n, "%s.conv2", pfx);
    vae_conv3(l, n, out, out, WAN_CONV_K, WAN_CONV_K);
    if (in != out) {
        snprintf(n, sizeof n, "%s.conv_shortcut", pfx);
        vae_conv3(l, n, out, in, 1, 1);
    }
}
/* Mid block: resnet, single-head spatial attention (1x1 convs), resnet. */
static void vae_mid(mk_list *l, const char *pfx, int64_t c) {
    char n[112];
    snprintf(n, sizeof n, "%s.mid_block.resnets.0", pfx);
    vae_resnet(l, n, c, c);
    snprintf(n, sizeof n, "%s.mid_block.attentions.0.norm", pfx);
    vae_gamma(l, n, c, true);
    snprintf(n, sizeof n, "%s.mid_block.attentions.0.to_qkv", pfx);
    vae_conv2(l, n, 3 * c, c, 1);
    snprintf(n, sizeof n, "%s.mid_block.attentions.0.proj", pfx);
    vae_conv2(l, n, c, c, 1);
    snprintf(n, sizeof n, "%s.mid_block.resnets.1", pfx);
    vae_resnet(l, n, c, c);
}

static void plan_vae(mk_list *l, int64_t base, int64_t dbase) {
    const int nm = (int)C3_ARRAY_LEN(wan_dim_mult), nres = WAN_NUM_RES_BLOCKS;
    const int64_t z = WAN_Z_DIM;
    char n[112];
    /* encoder: channels base * [1, dim_mult...] */
    int64_t ed[8];
    ed[0] = base;
    for (int i = 0; i < nm; i++) ed[i + 1] = base * wan_dim_mult[i];
    vae_conv3(l, "encoder.conv_in", ed[0], WAN_IO_CHANNELS, WAN_CONV_K, WAN_CONV_K);
    for (int i = 0; i < nm; i++) {
        for (int r = 0; r < nres; r++) {
            snprintf(n, sizeof n, "encoder.down_blocks.%d.resnets.%d", i, r);
            vae_resnet(l, n, r ? ed[i + 1] : ed[i], ed[i + 1]);
        }
        if (i != nm - 1) { /* downsample: stride-2 3x3 conv, plus a stride-2 time conv */
            snprintf(n, sizeof n, "encoder.down_blocks.%d.downsampler.resample.1", i);
            vae_conv2(l, n, ed[i + 1], ed[i + 1], WAN_CONV_K);
            if (wan_temporal_down[i]) {
                snprintf(n, sizeof n, "encoder.down_blocks.%d.downsampler.time_conv", i);
                vae_conv3(l, n, ed[i + 1], ed[i + 1], WAN_CONV_K, 1);
            }
        }
    }
    vae_mid(l, "encoder", ed[nm]);
    vae_gamma(l, "encoder.norm_out", ed[nm], false);
    vae_conv3(l, "encoder.conv_out", 2 * z, ed[nm], WAN_CONV_K, WAN_CONV_K);
    vae_conv3(l, "quant_conv", 2 * z, 2 * z, 1, 1);
    vae_conv3(l, "post_quant_conv", z, z, 1, 1);
    /* decoder: channels dbase * [dim_mult[-1], reversed(dim_mult)...] */
    int64_t dd[8];
    dd[0] = dbase * wan_dim_mult[nm - 1];
    for (int i = 0; i < nm; i++) dd[i + 1] = dbase * wan_dim_mult[nm - 1 - i];
    vae_conv3(l, "decoder.conv_in", dd[0], z, WAN_CONV_K, WAN_CONV_K);
    vae_mid(l, "decoder", dd[0]);
    for (int i = 0; i < nm; i++) {
        for (int r = 0; r < nres + 1; r++) {
            snprintf(n, sizeof n, "decoder.up_blocks.%d.resnets.%d", i, r);
            vae_resnet(l, n, r ? dd[i + 1] : dd[i], dd[i + 1]);
        }
        if (i != nm - 1) { /* upsample: 3x3 conv after nearest 2x; time conv to 2x channels */
            snprintf(n, sizeof n, "decoder.up_blocks.%d.upsampler.resample.1", i);
            vae_conv2(l, n, dd[i + 1], dd[i + 1], WAN_CONV_K);
            if (wan_temporal_down[nm - 2 - i]) {
                snprintf(n, sizeof n, "decoder.up_blocks.%d.upsampler.time_conv", i);
                vae_conv3(l, n, 2 * dd[i + 1], dd[i + 1], WAN_CONV_K, 1);
            }
        }
    }
    vae_gamma(l, "decoder.norm_out", dd[nm], false);
    vae_conv3(l, "decoder.conv_out", WAN_IO_CHANNELS, dd[nm], WAN_CONV_K, WAN_CONV_K);
}

/* Greedy sharding in plan order, as huggingface_hub splits a state dict. */
static int assign_shards(mk_list *l, int64_t max_bytes) {
    int shard = 0;
    int64_t cur = 0;
    for (int i = 0; i < l->n; i++) {
        if (cur > 0 && cur + l->t[i].nbytes > max_bytes) {
            shard++;
            cur = 0;
        }
        l->t[i].file = shard;
        cur += l->t[i].nbytes;
    }
    return l->n ? shard + 1 : 0;
}

static int resolve(const c3_mkmodel_opts *o, mk_geom *g) {
    memset(g, 0, sizeof *g);
    if (!o || !o->preset)
        return c3_fail(C3_EUSAGE, "mkmodel: no preset given (tiny, demo, nano, super or edge)");
    g->p = mkmodel_preset(o->preset);
    if (!g->p)
        return c3_fail(C3_EUSAGE,
                       "mkmodel: unknown preset \"%s\" (choose tiny, demo, nano, super or edge)",
                       o->preset);
    if (o->layers < 0) return c3_fail(C3_EUSAGE, "mkmodel: --layers must be positive (got %d)", o->layers);
    if (o->vocab < 0) return c3_fail(C3_EUSAGE, "mkmodel: vocab must be positive (got %d)", o->vocab);
    if (o->shard_bytes < 0) return c3_fail(C3_EUSAGE, "mkmodel: shard size must be positive");
    if (o->vae < MKMODEL_VAE_PRESET || o->vae > MKMODEL_VAE_FULL)
        return c3_fail(C3_EUSAGE, "mkmodel: vae choice %d is not preset (0), tiny (1) or full (2)", o->vae);
    if (o->random_transformer && o->fp8)
        return c3_fail(
            C3_EUSAGE,
            "mkmodel: --fp8 writes FP8 weights and --random-transformer writes none; drop "
            "--fp8 and load with --precision fp8 (quantised on load) instead");
    g->layers = o->layers ? o->layers : g->p->layers;
    g->fp8 = o->fp8;
    g->distilled = o->distilled;
    g->vocab = o->vocab ? o->vocab : g->p->vocab;
    g->vae_base = o->vae == MKMODEL_VAE_TINY   ? WAN_TINY_BASE
                  : o->vae == MKMODEL_VAE_FULL ? WAN_FULL_BASE
                                               : g->p->vae_base;
    g->vae_decoder_base = o->vae == MKMODEL_VAE_TINY   ? WAN_TINY_DECODER_BASE
                          : o->vae == MKMODEL_VAE_FULL ? WAN_FULL_DECODER_BASE
                                                       : g->p->vae_decoder_base;
    return C3_OK;
}

static void plan_all(const mk_geom *g, int64_t shard_bytes, mk_list *tr, mk_list *va, int *nshards) {
    plan_transformer(tr, g);
    plan_vae(va, g->vae_base, g->vae_decoder_base);
    *nshards = assign_shards(tr, shard_bytes > 0 ? shard_bytes : SHARD_BYTES_DEFAULT);
}

int mkmodel_size(const c3_mkmodel_opts *o, c3_mkmodel_size *s) {
    mk_geom g;
    C3_TRY(resolve(o, &g));
    mk_list tr = {0}, va = {0};
    memset(s, 0, sizeof *s);
    plan_all(&g, o->shard_bytes, &tr, &va, &s->shards);
    for (int i = 0; i < tr.n; i++) {
        s->transformer_params += tnumel(&tr.t[i]);
        s->transformer_bytes += tr.t[i].nbytes;
    }
    for (int i = 0; i < va.n; i++) {
        s->vae_params += tnumel(&va.t[i]);
        s->vae_bytes += va.t[i].nbytes;
    }
    s->transformer_tensors = tr.n;
    s->vae_tensors = va.n;
    free(tr.t);
    free(va.t);
    return C3_OK;
}

/* ------------------------------------------------------------ writing */

/* A write running on its own thread while the next batch is generated. */
typedef struct {
    int fd;
    const char *data;
    size_t len;
    int err; /* errno of a failed write, else 0 */
} mk_io;

typedef struct {
    const c3_mkmodel_opts *o;
    int64_t done, total;
    void *buf[2]; /* double buffer: GEN_BATCH * GEN_CHUNK elements of the widest dtype */
    int cur;
    pthread_t th;
    bool busy;
    mk_io io;
    const char *io_path;
} mk_writer;

static uint64_t chunk_key(uint64_t seed, const char *name, int64_t chunk) {
    uint64_t h = c3_fnv1a(name, strlen(name), C3_FNV_INIT);
    uint64_t k = seed ^ 0x6a09e667f3bcc909ull;
    (void)splitmix64(&k);
    return k ^ (h * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)chunk * 0xd1b54a32d192ed03ull);
}

static void fill_chunk(void *dst, c3_dtype dt, int64_t n, double mean, double std, float qscale,
                       uint64_t key) {
    rng256 r;
    rng_seed(&r, key);
    const float m = (float)mean, sd = (float)std;
    int64_t i = 0;
    if (dt == C3_F8E4M3) {
        uint8_t *p = dst;
        for (; i < n; i++)
            p[i] = c3_f32_to_e4m3((m + sd * zig_normal32(&r, (uint32_t)rng_next(&r))) / qscale);
    } else if (dt == C3_BF16) {
        uint16_t *p = dst;
        for (; i + 1 < n; i += 2) {
            uint64_t b = rng_next(&r);
            float z0 = zig_normal32(&r, (uint32_t)b), z1 = zig_normal32(&r, (uint32_t)(b >> 32));
            p[i] = c3_f32_to_bf16(m + sd * z0);
            p[i + 1] = c3_f32_to_bf16(m + sd * z1);
        }
        if (i < n) p[i] = c3_f32_to_bf16(m + sd * zig_normal32(&r, (uint32_t)rng_next(&r)));
    } else {
        float *p = dst;
        for (; i + 1 < n; i += 2) {
            uint64_t b = rng_next(&r);
            float z0 = zig_normal32(&r, (uint32_t)b), z1 = zig_normal32(&r, (uint32_t)(b >> 32));
            p[i] = m + sd * z0;
            p[i + 1] = m + sd * z1;
        }
        if (i < n) p[i] = m + sd * zig_normal32(&r, (uint32_t)rng_next(&r));
    }
}

static void io_run(mk_io *io) {
    const char *p = io->data;
    size_t len = io->len;
    io->err = 0;
    while (len) {
        ssize_t n = write(io->fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            io->err = errno;
            return;
        }
        p += n;
        len -= (size_t)n;
    }
}
static void *io_thread(void *arg) {
    io_run(arg);
    return NULL;
}

/* Finish the write in flight (if any); its error becomes this thread's. */
static int io_wait(mk_writer *w) {
    if (!w->busy) return C3_OK;
    pthread_join(w->th, NULL);
    w->busy = false;
    if (w->io.err) return c3_fail(C3_EOUTPUT, "cannot write %s: %s", w->io_path, strerror(w->io.err));
    w->done += (int64_t)w->io.len;
    if (w->o->progress) w->o->progress(w->o->progress_user, w->done, w->total);
    return C3_OK;
}

/* Queue `data` for writing after the write in flight. Large blocks go to a
 * thread (data must stay untouched until the next io_wait); small ones, or
 * when no thread can be started, are written here. */
static int io_write(mk_writer *w, int fd, const void *data, size_t len, const char *path) {
    C3_TRY(io_wait(w));
    w->io = (mk_io){.fd = fd, .data = data, .len = len};
    w->io_path = path;
    if (len >= IO_ASYNC_MIN && pthread_create(&w->th, NULL, io_thread, &w->io) == 0) {
        w->busy = true;
        return C3_OK;
    }
    io_run(&w->io);
    if (w->io.err) return c3_fail(C3_EOUTPUT, "cannot write %s: %s", path, strerror(w->io.err));
    w->done += (int64_t)len;
    if (w->o->progress) w->o->progress(w->o->progress_user, w->done, w->total);
    return C3_OK;
}

static int write_tensor_data(mk_writer *w, int fd, const mk_tensor *t, const char *path) {
    const int64_t numel = tnumel(t), nchunks = (numel + GEN_CHUNK - 1) / GEN_CHUNK;
    const size_t esz = c3_dtype_size(t->dtype);
    for (int64_t c0 = 0; c0 < nchunks; c0 += GEN_BATCH) {
        const int64_t cb = C3_MIN((int64_t)GEN_BATCH, nchunks - c0);
        const int64_t first = c0 * GEN_CHUNK, count = C3_MIN(cb * GEN_CHUNK, numel - first);
        char *buf = w->buf[w->cur]; /* not the one being written */
#pragma omp parallel for schedule(dynamic, 1) if (cb > 1)
        for (int64_t k = 0; k < cb; k++) {
            int64_t start = (c0 + k) * GEN_CHUNK, n = C3_MIN((int64_t)GEN_CHUNK, numel - start);
            fill_chunk(buf + (size_t)(k * GEN_CHUNK) * esz, t->dtype, n, t->mean, t->std, t->qscale,
                       chunk_key(w->o->seed, t->name, c0 + k));
        }
        C3_TRY(io_write(w, fd, buf, (size_t)count * esz, path));
        w->cur ^= 1;
    }
    return C3_OK;
}

/* One safetensors file holding tensors ts[i] with ts[i].file == file (or all
 * when file < 0), streamed: header first, then each tensor chunk by chunk. */
static int write_safetensors(mk_writer *w, const char *path, const mk_list *l, int file) {
    json_t *root = json_object();
    json_t *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(root, "__metadata__", meta);
    int64_t off = 0;
    for (int i = 0; i < l->n; i++) {
        const mk_tensor *t = &l->t[i];
        if (file >= 0 && t->file != file) continue;
        json_t *e = json_object(), *sh = json_array(), *of = json_array();
        json_object_set_new(e, "dtype", json_string(c3_dtype_name(t->dtype)));
        for (int d = 0; d < t->ndim; d++) json_array_append_new(sh, json_integer(t->shape[d]));
        json_object_set_new(e, "shape", sh);
        json_array_append_new(of, json_integer(off));
        json_array_append_new(of, json_integer(off + t->nbytes));
        json_object_set_new(e, "data_offsets", of);
        json_object_set_new(root, t->name, e);
        off += t->nbytes;
    }
    char *hdr = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    size_t hlen = strlen(hdr), pad = (ST_ALIGN - hlen % ST_ALIGN) % ST_ALIGN;
    unsigned char *head = xmalloc(8 + hlen + pad);
    uint64_t hl = hlen + pad;
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)(hl >> (8 * i));
    memcpy(head + 8, hdr, hlen);
    memset(head + 8 + hlen, ' ', pad);
    free(hdr);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(head);
        return c3_fail(C3_EOUTPUT, "cannot create %s: %s", path, strerror(errno));
    }
    int rc = io_write(w, fd, head, 8 + hlen + pad, path); /* small: written synchronously */
    free(head);
    for (int i = 0; rc == C3_OK && i < l->n; i++)
        if (file < 0 || l->t[i].file == file) rc = write_tensor_data(w, fd, &l->t[i], path);
    int rc2 = io_wait(w); /* always: the thread may still use fd and the buffer */
    if (rc == C3_OK) rc = rc2;
    if (close(fd) != 0 && rc == C3_OK) rc = c3_fail(C3_EOUTPUT, "cannot write %s: %s", path, strerror(errno));
    return rc;
}

/* JSON file (2-space indent, sorted keys, newline). Takes the reference. */
static int write_json(const char *dir, const char *rel, json_t *j) {
    char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
    json_decref(j);
    size_t n = strlen(text);
    text = xrealloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = 0;
    char *p = c3_path_join(dir, rel);
    int rc = c3_write_file_atomic(p, text, n + 1, false);
    free(p);
    free(text);
    return rc;
}

static json_t *pair(const char *a, const char *b) {
    json_t *x = json_array();
    json_array_append_new(x, a ? json_string(a) : json_null());
    json_array_append_new(x, b ? json_string(b) : json_null());
    return x;
}
static json_t *int3(const int *v) {
    json_t *x = json_array();
    for (int i = 0; i < 3; i++) json_array_append_new(x, json_integer(v[i]));
    return x;
}

static json_t *model_index_json(const mk_geom *g) {
    json_t *j = json_object();
    json_object_set_new(j, "_class_name", json_string("Cosmos3OmniPipeline"));
    json_object_set_new(j, "_diffusers_version", json_string(DIFFUSERS_VERSION));
    json_object_set_new(j, "default_use_system_prompt", json_boolean(g->p->system_prompt));
    json_object_set_new(j, "enable_safety_checker", json_false());
    json_object_set_new(j, "safety_checker", pair(NULL, NULL));
    json_object_set_new(j, "scheduler", pair("diffusers", "UniPCMultistepScheduler"));
    json_object_set_new(j, "sound_tokenizer", pair(NULL, NULL));
    json_object_set_new(j, "text_tokenizer", pair("transformers", "Qwen2TokenizerFast"));
    json_object_set_new(j, "transformer", pair("diffusers", "Cosmos3OmniTransformer"));
    json_object_set_new(j, "use_native_flow_schedule", json_boolean(g->p->native_schedule));
    json_object_set_new(j, "vae", pair("diffusers", "AutoencoderKLWan"));
    return j;
}

/* ModelOpt's quantization_config: FP8 with the published step policy (first
 * and last 3 steps W8A16, the reasoner W8A16); the distilled checkpoints
 * carry no policy (every step FP8 x FP8). */
static json_t *quant_json(const mk_geom *g) {
    json_t *q = json_object();
    json_object_set_new(q, "quant_method", json_string("modelopt"));
    json_object_set_new(q, "quant_algo", json_string("FP8"));
    json_t *pr = json_object();
    json_object_set_new(pr, "name", json_string("cosmos3 mkmodel"));
    json_object_set_new(q, "producer", pr);
    if (!g->distilled) {
        json_t *p = json_object(), *sc = json_array(), *f = json_object(), *l = json_object();
        json_object_set_new(p, "schema_version", json_integer(1));
        json_object_set_new(p, "type", json_string("first_last_n"));
        json_object_set_new(p, "index_space", json_string("denoising_loop_iteration"));
        json_array_append_new(sc, json_string("transformer"));
        json_object_set_new(p, "scope", sc);
        json_object_set_new(p, "default_mode", json_string("native"));
        json_object_set_new(f, "count", json_integer(3));
        json_object_set_new(f, "mode", json_string("a16"));
        json_object_set_new(l, "count", json_integer(3));
        json_object_set_new(l, "mode", json_string("a16"));
        json_object_set_new(p, "first_steps", f);
        json_object_set_new(p, "last_steps", l);
        json_object_set_new(p, "overlap", json_string("a16"));
        json_object_set_new(p, "reasoner", json_string("a16"));
        json_t *rt = json_object();
        json_object_set_new(rt, "diffusion_step_policy", p);
        json_object_set_new(q, "runtime", rt);
    }
    return q;
}

static json_t *transformer_json(const mk_geom *g, uint64_t seed) {
    const c3_mkmodel_preset *p = g->p;
    json_t *j = json_object();
    char note[512];
    snprintf(note, sizeof note,
             "random weights from cosmos3 mkmodel (preset %s, seed %llu); lm_head, sound and action "
             "tensors are not written%s",
             p->name, (unsigned long long)seed,
             p->nemotron ? "; vocab_size is Qwen3's 151936, not Edge's 131072, because only the Qwen3 "
                           "tokenizer is shipped"
                         : "");
    json_object_set_new(j, "_class_name", json_string("Cosmos3OmniTransformer"));
    json_object_set_new(j, "_diffusers_version", json_string(DIFFUSERS_VERSION));
    json_object_set_new(j, "_cosmos3_note", json_string(note));
    json_object_set_new(j, "action_dim", json_integer(COSMOS3_ACTION_DIM));
    json_object_set_new(j, "action_gen", json_false());
    json_object_set_new(j, "attention_bias", json_false());
    json_object_set_new(j, "attention_dropout", json_real(0.0));
    if (p->nemotron) json_object_set_new(j, "backbone_type", json_string("cosmos3_edge_nemotron_dense"));
    json_object_set_new(j, "base_fps", json_integer(COSMOS3_BASE_FPS));
    json_object_set_new(j, "dtype", json_string("bfloat16"));
    json_object_set_new(j, "enable_fps_modulation", json_true());
    json_object_set_new(j, "head_dim", json_integer(p->head_dim));
    json_object_set_new(j, "hidden_act", json_string(p->gated ? "silu" : "relu2"));
    json_object_set_new(j, "hidden_size", json_integer(p->hidden));
    json_object_set_new(j, "intermediate_size", json_integer(p->inter));
    json_object_set_new(j, "joint_attn_implementation", json_string("two_way"));
    json_object_set_new(j, "latent_channel", json_integer(COSMOS3_LATENT_CH));
    json_object_set_new(j, "latent_patch_size", json_integer(COSMOS3_PATCH));
    json_object_set_new(j, "model_type", json_string(p->nemotron ? "nemotron3_dense_vl_text" : "qwen3_vl_text"));
    json_object_set_new(j, "num_attention_heads", json_integer(p->heads));
    json_object_set_new(j, "num_embodiment_domains", json_integer(COSMOS3_EMBODIMENT_DOMAINS));
    json_object_set_new(j, "num_hidden_layers", json_integer(g->layers));
    json_object_set_new(j, "num_key_value_heads", json_integer(p->kv_heads));
    json_object_set_new(j, "patch_latent_dim", json_integer(COSMOS3_PATCH * COSMOS3_PATCH * COSMOS3_LATENT_CH));
    json_object_set_new(j, "position_embedding_type", json_string("unified_3d_mrope"));
    json_object_set_new(j, "qk_norm", json_false());
    json_object_set_new(j, "qk_norm_for_diffusion", json_true());
    json_object_set_new(j, "qk_norm_for_text", json_boolean(!p->nemotron));
    json_object_set_new(j, "rms_norm_eps", json_real(p->eps));
    json_t *rs = json_object();
    json_object_set_new(rs, "mrope_interleaved", json_true());
    json_object_set_new(rs, "mrope_section", int3(p->mrope));
    json_object_set_new(rs, "rope_type", json_string("default"));
    json_object_set_new(j, "rope_scaling", rs);
    json_object_set_new(j, "rope_theta", json_real(p->theta));
    json_object_set_new(j, "sound_dim", json_integer(COSMOS3_SOUND_DIM));
    json_object_set_new(j, "sound_gen", json_false());
    json_object_set_new(j, "sound_latent_fps", json_real(COSMOS3_SOUND_FPS));
    json_object_set_new(j, "timestep_scale", json_real(COSMOS3_TIMESTEP_SCALE));
    json_object_set_new(j, "unified_3d_mrope_reset_spatial_ids", json_true());
    json_object_set_new(j, "unified_3d_mrope_temporal_modality_margin", json_integer(COSMOS3_TEMPORAL_MARGIN));
    json_object_set_new(j, "use_moe", json_true());
    json_object_set_new(j, "use_und_k_norm_for_gen", json_boolean(p->nemotron));
    json_object_set_new(j, "video_temporal_causal", json_false());
    json_object_set_new(j, "vocab_size", json_integer(g->vocab));
    if (g->fp8) json_object_set_new(j, "quantization_config", quant_json(g));
    return j;
}

static json_t *vae_json(const mk_geom *g) {
    json_t *j = json_object(), *dm = json_array(), *td = json_array(), *mean = json_array(), *std = json_array();
    for (size_t i = 0; i < C3_ARRAY_LEN(wan_dim_mult); i++) json_array_append_new(dm, json_integer(wan_dim_mult[i]));
    for (size_t i = 0; i < C3_ARRAY_LEN(wan_temporal_down); i++)
        json_array_append_new(td, json_boolean(wan_temporal_down[i]));
    for (int i = 0; i < WAN_Z_DIM; i++) {
        json_array_append_new(mean, json_real(wan22_latents_mean[i]));
        json_array_append_new(std, json_real(wan22_latents_std[i]));
    }
    json_object_set_new(j, "_class_name", json_string("AutoencoderKLWan"));
    json_object_set_new(j, "_diffusers_version", json_string(DIFFUSERS_VERSION));
    json_object_set_new(j, "attn_scales", json_array());
    json_object_set_new(j, "base_dim", json_integer(g->vae_base));
    json_object_set_new(j, "decoder_base_dim", json_integer(g->vae_decoder_base));
    json_object_set_new(j, "dim_mult", dm);
    json_object_set_new(j, "dropout", json_real(0.0));
    json_object_set_new(j, "in_channels", json_integer(WAN_IO_CHANNELS));
    json_object_set_new(j, "is_residual", json_true());
    json_object_set_new(j, "latents_mean", mean);
    json_object_set_new(j, "latents_std", std);
    json_object_set_new(j, "num_res_blocks", json_integer(WAN_NUM_RES_BLOCKS));
    json_object_set_new(j, "out_channels", json_integer(WAN_IO_CHANNELS));
    json_object_set_new(j, "patch_size", json_integer(WAN_PATCH));
    json_object_set_new(j, "scale_factor_spatial", json_integer(C3_WAN_SCALE_SPATIAL));
    json_object_set_new(j, "scale_factor_temporal", json_integer(C3_WAN_SCALE_TEMPORAL));
    json_object_set_new(j, "temperal_downsample", td);
    json_object_set_new(j, "z_dim", json_integer(WAN_Z_DIM));
    return j;
}

/* UniPC as the base checkpoints configure it (fixtures README). */
static json_t *scheduler_json(void) {
    json_t *j = json_object();
    json_object_set_new(j, "_class_name", json_string("UniPCMultistepScheduler"));
    json_object_set_new(j, "_diffusers_version", json_string(DIFFUSERS_VERSION));
    json_object_set_new(j, "beta_end", json_real(0.02));
    json_object_set_new(j, "beta_schedule", json_string("linear"));
    json_object_set_new(j, "beta_start", json_real(0.0001));
    json_object_set_new(j, "disable_corrector", json_array());
    json_object_set_new(j, "dynamic_thresholding_ratio", json_real(0.995));
    json_object_set_new(j, "final_sigmas_type", json_string("zero"));
    json_object_set_new(j, "flow_shift", json_real(1.0));
    json_object_set_new(j, "lower_order_final", json_true());
    json_object_set_new(j, "num_train_timesteps", json_integer(1000));
    json_object_set_new(j, "predict_x0", json_true());
    json_object_set_new(j, "prediction_type", json_string("flow_prediction"));
    json_object_set_new(j, "rescale_betas_zero_snr", json_false());
    json_object_set_new(j, "sample_max_value", json_real(1.0));
    json_object_set_new(j, "shift_terminal", json_null());
    json_object_set_new(j, "sigma_max", json_real(200.0));
    json_object_set_new(j, "sigma_min", json_real(0.147));
    json_object_set_new(j, "solver_order", json_integer(2));
    json_object_set_new(j, "solver_p", json_null());
    json_object_set_new(j, "solver_type", json_string("bh2"));
    json_object_set_new(j, "steps_offset", json_integer(0));
    json_object_set_new(j, "thresholding", json_false());
    json_object_set_new(j, "time_shift_type", json_string("exponential"));
    json_object_set_new(j, "timestep_spacing", json_string("linspace"));
    json_object_set_new(j, "trained_betas", json_null());
    json_object_set_new(j, "use_beta_sigmas", json_false());
    json_object_set_new(j, "use_dynamic_shifting", json_false());
    json_object_set_new(j, "use_exponential_sigmas", json_false());
    json_object_set_new(j, "use_flow_sigmas", json_true());
    json_object_set_new(j, "use_karras_sigmas", json_true());
    return j;
}

/* The distilled students' scheduler (Cosmos3-Super-*-4Step): FlowMatch Euler
 * with the fixed-step SDE sampler config. */
static json_t *distilled_scheduler_json(void) {
    json_t *j = json_object();
    json_object_set_new(j, "_class_name", json_string("FlowMatchEulerDiscreteScheduler"));
    json_object_set_new(j, "_diffusers_version", json_string(DIFFUSERS_VERSION));
    json_t *fc = json_object(), *tl = json_array();
    json_object_set_new(fc, "num_train_timesteps", json_integer(1000));
    json_object_set_new(fc, "sample_type", json_string("sde"));
    for (int i = 0; i < C3_TLIST4_N; i++)
        json_array_append_new(tl, json_real(c3_tlist4[i]));
    json_object_set_new(fc, "t_list", tl);
    json_object_set_new(j, "fixed_step_sampler_config", fc);
    json_object_set_new(j, "invert_sigmas", json_false());
    json_object_set_new(j, "num_train_timesteps", json_integer(1000));
    json_object_set_new(j, "shift", json_real(1.0));
    json_object_set_new(j, "shift_terminal", json_null());
    json_object_set_new(j, "stochastic_sampling", json_true());
    json_object_set_new(j, "use_beta_sigmas", json_false());
    json_object_set_new(j, "use_dynamic_shifting", json_false());
    json_object_set_new(j, "use_exponential_sigmas", json_false());
    json_object_set_new(j, "use_karras_sigmas", json_false());
    return j;
}

static void shard_name(char *buf, size_t n, int k, int nshards) {
    if (nshards == 1)
        snprintf(buf, n, "diffusion_pytorch_model.safetensors");
    else
        snprintf(buf, n, "diffusion_pytorch_model-%05d-of-%05d.safetensors", k + 1, nshards);
}

static int write_index(const char *tdir, const mk_list *l, int nshards) {
    json_t *j = json_object(), *meta = json_object(), *wm = json_object();
    int64_t total = 0;
    char fn[96];
    for (int i = 0; i < l->n; i++) {
        total += l->t[i].nbytes;
        shard_name(fn, sizeof fn, l->t[i].file, nshards);
        json_object_set_new(wm, l->t[i].name, json_string(fn));
    }
    json_object_set_new(meta, "total_size", json_integer(total));
    json_object_set_new(j, "metadata", meta);
    json_object_set_new(j, "weight_map", wm);
    return write_json(tdir, "diffusion_pytorch_model.safetensors.index.json", j);
}

/* Copy tokenizer.json (required) and tokenizer_config.json (if present). */
static int copy_tokenizer(const char *src_dir, const char *dst_dir) {
    char *src = xstrdup(src_dir), *p = c3_path_join(src, "tokenizer.json");
    if (!c3_file_exists(p)) { /* a checkpoint folder: use its text_tokenizer/ */
        free(p);
        char *sub = c3_path_join(src_dir, "text_tokenizer");
        p = c3_path_join(sub, "tokenizer.json");
        if (!c3_file_exists(p)) {
            free(sub);
            free(p);
            free(src);
            return c3_fail(C3_EINPUT,
                           "%s holds no tokenizer.json (nor text_tokenizer/tokenizer.json); pass the Qwen3 "
                           "tokenizer folder of a Cosmos3 checkpoint",
                           src_dir);
        }
        free(src);
        src = sub;
    }
    free(p);
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json"};
    int rc = C3_OK;
    for (size_t i = 0; rc == C3_OK && i < C3_ARRAY_LEN(files); i++) {
        char *from = c3_path_join(src, files[i]), *to = c3_path_join(dst_dir, files[i]);
        if (i == 0 || c3_file_exists(from)) {
            char *data;
            size_t len;
            rc = c3_read_file(from, &data, &len);
            if (rc != C3_OK) {
                rc = C3_EINPUT; /* the message names the file and the cause */
            } else {
                rc = c3_write_file_atomic(to, data, len, false);
                free(data);
            }
        }
        free(from);
        free(to);
    }
    free(src);
    return rc;
}

/* An existing out_dir may be replaced only if it is an empty folder or a
 * checkpoint (holds model_index.json). */
static bool replaceable(const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return false;
    char *mi = c3_path_join(dir, "model_index.json");
    bool ok = c3_file_exists(mi);
    free(mi);
    if (ok) return true;
    DIR *d = opendir(dir);
    if (!d) return false;
    struct dirent *e;
    ok = true;
    while (ok && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) ok = false;
    closedir(d);
    return ok;
}

static char *parent_of(const char *path) {
    char *p = xstrdup(path);
    char *s = strrchr(p, '/');
    if (!s) {
        free(p);
        return xstrdup(".");
    }
    if (s == p) s[1] = 0;
    else *s = 0;
    return p;
}

static int write_tree(const c3_mkmodel_opts *o, const mk_geom *g, const char *root, mk_list *tr, mk_list *va,
                      int nshards, int64_t total) {
    char *tdir = c3_path_join(root, "transformer"), *vdir = c3_path_join(root, "vae"),
         *sdir = c3_path_join(root, "scheduler"), *kdir = c3_path_join(root, "text_tokenizer");
    mk_writer w = {.o = o, .total = total};
    int rc = C3_OK;
    const char *dirs[] = {root, tdir, vdir, sdir, kdir};
    for (size_t i = 0; rc == C3_OK && i < C3_ARRAY_LEN(dirs); i++)
        if (mkdir(dirs[i], 0755) != 0)
            rc = c3_fail(C3_EOUTPUT, "cannot create folder %s: %s", dirs[i], strerror(errno));
    if (rc == C3_OK) rc = copy_tokenizer(o->tokenizer_dir, kdir);
    if (rc == C3_OK) rc = write_json(root, "model_index.json", model_index_json(g));
    if (rc == C3_OK) rc = write_json(tdir, "config.json", transformer_json(g, o->seed));
    if (rc == C3_OK) rc = write_json(vdir, "config.json", vae_json(g));
    if (rc == C3_OK)
        rc = write_json(sdir, "scheduler_config.json",
                        o->distilled ? distilled_scheduler_json() : scheduler_json());
    if (rc == C3_OK) {
        w.buf[0] = xmalloc((size_t)GEN_BATCH * GEN_CHUNK * sizeof(float));
        w.buf[1] = xmalloc((size_t)GEN_BATCH * GEN_CHUNK * sizeof(float));
        zig_init();
    }
    if (rc == C3_OK && o->random_transformer) { /* the weights made on open: no shards */
        rc = write_json(tdir, CKPT_RANDOM_FILE, ckpt_random_json(CKPT_RANDOM_AMPLITUDE));
        nshards = 0;
    }
    for (int k = 0; rc == C3_OK && k < nshards; k++) {
        char fn[96];
        shard_name(fn, sizeof fn, k, nshards);
        char *p = c3_path_join(tdir, fn);
        rc = write_safetensors(&w, p, tr, k);
        free(p);
    }
    if (rc == C3_OK && nshards > 1) rc = write_index(tdir, tr, nshards);
    if (rc == C3_OK) {
        char *p = c3_path_join(vdir, "diffusion_pytorch_model.safetensors");
        rc = write_safetensors(&w, p, va, -1);
        free(p);
    }
    free(w.buf[0]);
    free(w.buf[1]);
    free(tdir);
    free(vdir);
    free(sdir);
    free(kdir);
    return rc;
}

int mkmodel_write(const c3_mkmodel_opts *o) {
    mk_geom g;
    C3_TRY(resolve(o, &g));
    if (!o->out_dir || !*o->out_dir) return c3_fail(C3_EUSAGE, "mkmodel: no output folder given");
    if (!o->tokenizer_dir || !*o->tokenizer_dir)
        return c3_fail(C3_EUSAGE,
                       "mkmodel: no tokenizer folder given; pass the text_tokenizer/ folder of a Cosmos3 "
                       "checkpoint (it holds tokenizer.json)");
    /* the folder name without trailing slashes */
    char *out = xstrdup(o->out_dir);
    for (size_t n = strlen(out); n > 1 && out[n - 1] == '/'; n--) out[n - 1] = 0;
    bool exists = c3_file_exists(out);
    if (exists && !o->overwrite) {
        int rc = c3_fail(C3_EOUTPUT, "%s exists; use --overwrite to replace it", out);
        free(out);
        return rc;
    }
    if (exists && !replaceable(out)) {
        int rc = c3_fail(C3_EOUTPUT,
                         "%s exists and is not a checkpoint folder (no model_index.json); refusing to replace "
                         "it, choose another folder",
                         out);
        free(out);
        return rc;
    }
    char *parent = parent_of(out);
    int rc = c3_mkdir_p(parent);
    mk_list tr = {0}, va = {0};
    int nshards = 0;
    plan_all(&g, o->shard_bytes, &tr, &va, &nshards);
    int64_t total = 0;
    for (int i = 0; i < tr.n && !o->random_transformer; i++)
        total += tr.t[i].nbytes;
    for (int i = 0; i < va.n; i++) total += va.t[i].nbytes;
    struct statvfs vfs;
    if (rc == C3_OK && statvfs(parent, &vfs) == 0) {
        double avail = (double)vfs.f_bavail * (double)vfs.f_frsize, need = (double)(total + DISK_MARGIN);
        if (avail < need)
            rc = c3_fail(C3_EOUTPUT, "not enough disk space in %s: need %.2f GB, %.2f GB free", parent,
                         need / 1e9, avail / 1e9);
    }
    size_t tn = strlen(out) + 48;
    char *tmp = xmalloc(tn), *old = xmalloc(tn);
    snprintf(tmp, tn, "%s.tmp.%ld", out, (long)getpid());
    snprintf(old, tn, "%s.old.%ld", out, (long)getpid());
    if (rc == C3_OK && c3_file_exists(tmp))
        c3_rm_tree(tmp); /* leftover of an earlier crash of this pid */
    if (rc == C3_OK) rc = write_tree(o, &g, tmp, &tr, &va, nshards, total);
    if (rc == C3_OK) {
        if (exists) { /* move the old one aside, the new one in, then delete the old */
            if (rename(out, old) != 0) {
                rc = c3_fail(C3_EOUTPUT, "cannot replace %s: %s", out, strerror(errno));
            } else if (rename(tmp, out) != 0) {
                rc = c3_fail(C3_EOUTPUT, "cannot replace %s: %s", out, strerror(errno));
                rename(old, out);
            } else {
                c3_rm_tree(old);
            }
        } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_NOREPLACE) != 0) {
            if (errno == EEXIST || errno == ENOTEMPTY)
                rc = c3_fail(C3_EOUTPUT, "%s exists; use --overwrite to replace it", out);
            else if ((errno == EINVAL || errno == ENOSYS) && !c3_file_exists(out) && rename(tmp, out) == 0)
                rc = C3_OK; /* filesystem without RENAME_NOREPLACE */
            else
                rc = c3_fail(C3_EOUTPUT, "cannot create %s: %s", out, strerror(errno));
        }
    }
    if (rc != C3_OK) c3_rm_tree(tmp);
    free(tmp);
    free(old);
    free(parent);
    free(out);
    free(tr.t);
    free(va.t);
    return rc;
}

/* ------------------------------------------------------ the public call */

void cosmos3_mkmodel_params_init(cosmos3_mkmodel_params *p) {
    memset(p, 0, sizeof *p);
    p->preset = "tiny";
}

static int mkmodel_call(const cosmos3_mkmodel_params *p) {
    if (!p->out_dir) return c3_fail(C3_EUSAGE, "mkmodel: give the folder to write (out_dir)");
    if (p->layers < 0 || p->layers > 1024) return c3_fail(C3_EUSAGE, "--layers %d must be in 0..1024", p->layers);
    c3_mkmodel_opts o = {.preset = p->preset,
                         .layers = p->layers,
                         .seed = p->seed,
                         .out_dir = p->out_dir,
                         .tokenizer_dir = p->tokenizer_dir,
                         .overwrite = p->overwrite,
                         .shard_bytes = p->shard_bytes,
                         .vocab = p->vocab,
                         .distilled = p->distilled,
                         .fp8 = p->fp8,
                         .random_transformer = p->random_transformer,
                         .progress = p->progress,
                         .progress_user = p->progress_user};
    char tdir[4096], tj[4096];
    if (!o.tokenizer_dir && ckpt_share_path("tokenizer/tokenizer.json", tj, sizeof tj)) {
        snprintf(tdir, sizeof tdir, "%.*s", (int)(strlen(tj) - strlen("/tokenizer.json")), tj);
        o.tokenizer_dir = tdir;
    }
    if (!o.tokenizer_dir)
        return c3_fail(C3_EMODEL, "the Qwen3 tokenizer files are missing (share/tokenizer); reinstall cosmos3");
    return mkmodel_write(&o);
}

int cosmos3_mkmodel(const cosmos3_mkmodel_params *p, char *err, size_t errlen) {
    int rc = p ? mkmodel_call(p) : c3_fail(C3_EUSAGE, "cosmos3_mkmodel: params is NULL");
    if (rc && err && errlen) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}
