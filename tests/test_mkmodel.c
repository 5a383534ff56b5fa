/* test_mkmodel.c - random checkpoints: they open with ckpt_open, hold every
 * tensor a model needs with the preset's geometry, follow the init
 * distributions, are deterministic per seed (and independent of sharding),
 * and are written atomically without clobbering anything. */
#include <sys/stat.h>

#include "checkpoint.h"
#include "mkmodel.h"
#include "test_util.h"

#define SMALL_SHARD (4LL << 20) /* forces several shards for the tiny preset */
#define EDGE_TEST_VOCAB 1024

static bool same_file(const char *a, const char *b) {
    char *x, *y;
    size_t nx, ny;
    if (c3_read_file(a, &x, &nx) != C3_OK) return false;
    if (c3_read_file(b, &y, &ny) != C3_OK) {
        free(x);
        return false;
    }
    bool same = nx == ny && memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return same;
}

/* Check a transformer tensor: present, bf16, this shape. */
static const st_tensor *need(const c3_ckpt *c, const char *name, int ndim, int64_t a, int64_t b) {
    int64_t shape[2] = {a, b};
    const st_tensor *t = ckpt_get(c, NULL, name, ndim, shape);
    T_CHECK(t != NULL, "%s", c3_errmsg());
    if (t) T_CHECK(t->dtype == C3_BF16, "%s is %s, not BF16", name, c3_dtype_name(t->dtype));
    return t;
}

/* Every tensor the model reads, with shapes from the preset; returns the count. */
static int check_geometry(const c3_ckpt *c, const c3_mkmodel_preset *p, int layers, int vocab) {
    const int64_t D = p->hidden, hd = p->head_dim, Q = p->heads * hd, KV = p->kv_heads * hd, I = p->inter;
    const int64_t P = c->t.patch_dim;
    char n[128];
    int k = 0;
    need(c, "embed_tokens.weight", 2, vocab, D), k++;
    for (int i = 0; i < layers; i++) {
        const char *norms[] = {"input_layernorm", "input_layernorm_moe_gen", "post_attention_layernorm",
                               "post_attention_layernorm_moe_gen"};
        for (int j = 0; j < 4; j++) {
            snprintf(n, sizeof n, "layers.%d.%s.weight", i, norms[j]);
            need(c, n, 1, D, 0), k++;
        }
        const char *q[] = {"to_q", "add_q_proj"}, *kk[] = {"to_k", "add_k_proj"}, *v[] = {"to_v", "add_v_proj"},
                   *o[] = {"to_out", "to_add_out"}, *mlp[] = {"mlp", "mlp_moe_gen"};
        for (int t = 0; t < 2; t++) {
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, q[t]);
            need(c, n, 2, Q, D), k++;
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, kk[t]);
            need(c, n, 2, KV, D), k++;
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, v[t]);
            need(c, n, 2, KV, D), k++;
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, o[t]);
            need(c, n, 2, D, Q), k++;
            snprintf(n, sizeof n, "layers.%d.%s.gate_proj.weight", i, mlp[t]);
            if (p->gated)
                need(c, n, 2, I, D), k++;
            else
                T_CHECK(!ckpt_find(c, n), "%s present in a ReLU^2 model", n);
            snprintf(n, sizeof n, "layers.%d.%s.up_proj.weight", i, mlp[t]);
            need(c, n, 2, I, D), k++;
            snprintf(n, sizeof n, "layers.%d.%s.down_proj.weight", i, mlp[t]);
            need(c, n, 2, D, I), k++;
        }
        const char *qk[] = {"norm_q", "norm_k"};
        for (int j = 0; j < 2; j++) {
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, qk[j]);
            if (!p->nemotron)
                need(c, n, 1, hd, 0), k++;
            else
                T_CHECK(!ckpt_find(c, n), "%s present in an Edge model", n);
        }
        snprintf(n, sizeof n, "layers.%d.self_attn.k_norm_und_for_gen.weight", i);
        if (p->nemotron)
            need(c, n, 1, hd, 0), k++;
        else
            T_CHECK(!ckpt_find(c, n), "%s present in a Qwen model", n);
        snprintf(n, sizeof n, "layers.%d.self_attn.norm_added_q.weight", i);
        need(c, n, 1, hd, 0), k++;
        snprintf(n, sizeof n, "layers.%d.self_attn.norm_added_k.weight", i);
        need(c, n, 1, hd, 0), k++;
    }
    snprintf(n, sizeof n, "layers.%d.input_layernorm.weight", layers);
    T_CHECK(!ckpt_find(c, n), "more layers than asked for");
    need(c, "norm.weight", 1, D, 0), k++;
    need(c, "norm_moe_gen.weight", 1, D, 0), k++;
    need(c, "proj_in.weight", 2, D, P), k++;
    need(c, "proj_in.bias", 1, D, 0), k++;
    need(c, "proj_out.weight", 2, P, D), k++;
    need(c, "proj_out.bias", 1, P, 0), k++;
    need(c, "time_embedder.linear_1.weight", 2, D, 256), k++;
    need(c, "time_embedder.linear_1.bias", 1, D, 0), k++;
    need(c, "time_embedder.linear_2.weight", 2, D, D), k++;
    need(c, "time_embedder.linear_2.bias", 1, D, 0), k++;
    T_CHECK(!ckpt_find(c, "lm_head.weight"), "lm_head is not written");
    return k;
}

/* Normal CDF. */
static double phi(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

/* A cut point for CDF checks: the midpoint between the bf16 value nearest x
 * and the next one up. Rounding to bf16 moves no value across it, so the
 * fraction below it estimates the unrounded CDF there without bias. */
static double bf16_midpoint(double x) {
    uint16_t b = c3_f32_to_bf16((float)x);
    float v = c3_bf16_to_f32(b);
    uint16_t up = (uint16_t)(v >= 0 ? b + 1 : b - 1); /* sign-magnitude: next toward +inf */
    return 0.5 * ((double)v + (double)c3_bf16_to_f32(up));
}

/* Sample moments and CDF of a bf16 tensor against N(mean, std^2). */
static void check_normal(const st_tensor *t, double mean, double std, bool full, const char *what) {
    if (!t) return;
    int64_t n = st_numel(t);
    float *x = st_to_f32(t);
    double s1 = 0, s2 = 0, s4 = 0;
    static const double zc[] = {-3, -2, -1, -0.5, 0.5, 1, 2, 3};
    double cut[C3_ARRAY_LEN(zc)];
    for (size_t k = 0; k < C3_ARRAY_LEN(zc); k++) cut[k] = bf16_midpoint(mean + std * zc[k]);
    int64_t below[C3_ARRAY_LEN(zc)] = {0}, tail3 = 0, tail4 = 0;
    for (int64_t i = 0; i < n; i++) {
        double z = ((double)x[i] - mean) / std;
        s1 += z, s2 += z * z, s4 += z * z * z * z;
        for (size_t k = 0; k < C3_ARRAY_LEN(zc); k++) below[k] += x[i] < cut[k];
        tail3 += fabs(z) > 3, tail4 += fabs(z) > 4;
    }
    double m = s1 / (double)n, v = s2 / (double)n - m * m, k4 = s4 / (double)n / (v * v);
    double se = 1.0 / sqrt((double)n); /* standard error of the mean of z */
    T_CHECK(fabs(m) < 5 * se, "%s: mean %.5f (%lld values)", what, m, (long long)n);
    T_CHECK(fabs(v - 1) < 5 * sqrt(2.0) * se + 0.002, "%s: variance %.5f", what, v);
    if (full) { /* big tensors: shape of the distribution, tails included */
        T_CHECK(fabs(k4 - 3) < 0.02, "%s: kurtosis %.4f (normal: 3)", what, k4);
        for (size_t k = 0; k < C3_ARRAY_LEN(zc); k++) {
            double f = (double)below[k] / (double)n, want = phi((cut[k] - mean) / std);
            T_CHECK(fabs(f - want) < 6 * sqrt(want * (1 - want) / (double)n) + 1e-5,
                    "%s: P(z < %.4f) = %.5f, normal %.5f", what, (cut[k] - mean) / std, f, want);
        }
        double p3 = (double)tail3 / (double)n, p4 = (double)tail4 / (double)n;
        T_CHECK(fabs(p3 - 2 * phi(-3)) < 2e-4, "%s: P(|z| > 3) = %.6f, normal %.6f", what, p3, 2 * phi(-3));
        T_CHECK(fabs(p4 - 2 * phi(-4)) < 2.5e-5, "%s: P(|z| > 4) = %.7f, normal %.7f", what, p4, 2 * phi(-4));
    }
    free(x);
}

static int write_model(const char *preset, int layers, uint64_t seed, const char *dir, const char *tok,
                       bool overwrite, int64_t shard, int vocab, int vae) {
    c3_mkmodel_opts o = {.preset = preset, .layers = layers, .seed = seed, .out_dir = dir,
                         .tokenizer_dir = tok, .overwrite = overwrite, .shard_bytes = shard,
                         .vocab = vocab, .vae = vae};
    return mkmodel_write(&o);
}

int main(void) {
    char base[] = "/tmp/c3_test_mkmodel_XXXXXX";
    if (!mkdtemp(base)) {
        perror("mkdtemp");
        return 1;
    }
    char tok[600], A[600], B[600], C[600], E[600], X[600], p1[700], p2[700];
    snprintf(tok, sizeof tok, "%s/tok", base);
    snprintf(A, sizeof A, "%s/a", base);
    snprintf(B, sizeof B, "%s/sub/b", base); /* parent folder created on demand */
    snprintf(C, sizeof C, "%s/c", base);
    snprintf(E, sizeof E, "%s/edge", base);
    snprintf(X, sizeof X, "%s/x", base);
    /* a stand-in tokenizer folder: ckpt_open only needs the files to exist */
    mkdir(tok, 0755);
    snprintf(p1, sizeof p1, "%s/tokenizer.json", tok);
    c3_write_file_atomic(p1, "{\"model\": {}}\n", 14, false);
    snprintf(p1, sizeof p1, "%s/tokenizer_config.json", tok);
    c3_write_file_atomic(p1, "{}\n", 3, false);

    /* 1. sizes of the presets */
    int np = 0;
    const c3_mkmodel_preset *ps = mkmodel_presets(&np);
    T_CHECK(np == 5 && mkmodel_preset("demo") && mkmodel_preset("nano") && mkmodel_preset("edge") &&
                !mkmodel_preset("mega"),
            "presets");
    for (int i = 0; i < np; i++) {
        const c3_mkmodel_preset *p = &ps[i];
        c3_mkmodel_opts o = {.preset = p->name};
        c3_mkmodel_size s;
        T_CHECK(mkmodel_size(&o, &s) == C3_OK, "%s", c3_errmsg());
        int64_t D = p->hidden, hd = p->head_dim, Q = p->heads * hd, KV = p->kv_heads * hd, I = p->inter;
        int64_t attn = 2 * Q * D + 2 * KV * D, mlp = (p->gated ? 3 : 2) * I * D;
        int64_t layer = 2 * (attn + mlp + 2 * D) + (p->nemotron ? 3 : 4) * hd;
        int64_t top = (int64_t)p->vocab * D + 2 * D + (192 * D + D) + (D * 192 + 192) + (D * 256 + D) + (D * D + D);
        int64_t want = p->layers * layer + top;
        T_CHECK(s.transformer_params == want, "%s: %lld params, expected %lld", p->name,
                (long long)s.transformer_params, (long long)want);
        T_CHECK(s.transformer_bytes == 2 * want, "%s: bf16 bytes", p->name);
        T_CHECK(s.shards == (int)((s.transformer_bytes + 4999999999LL) / 5000000000LL) ||
                    s.shards == (int)((s.transformer_bytes + 4999999999LL) / 5000000000LL) + 1,
                "%s: %d shards for %lld bytes", p->name, s.shards, (long long)s.transformer_bytes);
        fprintf(stderr, "preset %-5s: %6.2f B transformer params, %d shard(s), VAE %.3f B params (%d tensors)\n",
                p->name, (double)s.transformer_params / 1e9, s.shards, (double)s.vae_params / 1e9, s.vae_tensors);
    }
    {
        c3_mkmodel_opts o = {.preset = "nano", .layers = 2};
        c3_mkmodel_size s;
        T_CHECK(mkmodel_size(&o, &s) == C3_OK && s.transformer_params < 2000000000LL, "nano --layers 2 size");
    }

    /* 2. tiny: write, open, check configs and every tensor */
    double t0 = c3_now();
    T_CHECK(write_model("tiny", 0, 1, A, tok, false, 0, 0, 0) == C3_OK, "%s", c3_errmsg());
    double dt = c3_now() - t0;
    c3_ckpt c;
    int rc = ckpt_open(&c, A, true);
    T_CHECK(rc == C3_OK, "ckpt_open: %s", c3_errmsg());
    if (rc != C3_OK) return t_done("mkmodel");
    const c3_mkmodel_preset *tiny = mkmodel_preset("tiny");
    c3_sizes sz;
    ckpt_sizes(&c, &sz);
    fprintf(stderr, "tiny written in %.2f s (%.0f M params/s incl. VAE)\n", dt,
            (double)(sz.und_params + sz.gen_params + sz.shared_params + sz.vae_params) / dt / 1e6);
    T_CHECK(c.t.hidden == 128 && c.t.layers == 2 && c.t.heads == 8 && c.t.kv_heads == 8 && c.t.head_dim == 16 &&
                c.t.inter == 256 && c.t.vocab == 151936,
            "tiny geometry %d %d %d %d %d %d %d", c.t.hidden, c.t.layers, c.t.heads, c.t.kv_heads, c.t.head_dim,
            c.t.inter, c.t.vocab);
    T_CHECK(c.t.mlp_gated && c.t.und_qk_norm && !c.t.und_k_norm_for_gen && !c.t.norm_mul_fp32, "tiny flags");
    T_CHECK(c.t.eps == 1e-6f && c.t.rope_theta == 5e6, "eps %g theta %g", c.t.eps, c.t.rope_theta);
    T_CHECK(c.t.mrope[0] == 4 && c.t.mrope[1] == 2 && c.t.mrope[2] == 2, "mrope");
    T_CHECK(c.t.latent_ch == 48 && c.t.patch == 2 && c.t.patch_dim == 192 && c.t.timestep_scale == 0.001 &&
                c.t.base_fps == 24 && c.t.fps_modulation && c.t.temporal_margin == 15000,
            "shared Cosmos3 constants");
    T_CHECK(c.default_system_prompt && !c.native_flow_schedule, "model_index flags");
    T_CHECK(strcmp(c.s.class_name, "UniPCMultistepScheduler") == 0 && c.s.use_karras_sigmas &&
                c.s.use_flow_sigmas && c.s.sigma_min == 0.147 && c.s.sigma_max == 200 && c.s.solver_order == 2,
            "scheduler config");
    T_CHECK(c.has_vae && c.v.z_dim == 48 && c.v.base_dim == 8 && c.v.decoder_base_dim == 8 && c.v.n_mult == 4 &&
                c.v.num_res_blocks == 2 && c.v.is_residual && c.v.n_tdown == 3 && !c.v.temporal_down[0] &&
                c.v.temporal_down[2],
            "vae config");
    T_CHECK(c.v.latents_mean[0] == -0.2289f && c.v.latents_std[47] == 0.7744f, "Wan2.2 latent statistics");
    T_CHECK(c.nshards == 1, "tiny fits in one file (%d shards)", c.nshards);
    int nneed = check_geometry(&c, tiny, 2, 151936);
    T_CHECK(c.ntens == nneed, "%d transformer tensors, %d expected (no extras)", c.ntens, nneed);
    /* initialisation */
    check_normal(ckpt_find(&c, "embed_tokens.weight"), 0, 1, true, "embed_tokens");
    check_normal(ckpt_find(&c, "layers.0.mlp.down_proj.weight"), 0, 1 / sqrt(256.0), false, "down_proj");
    check_normal(ckpt_find(&c, "layers.1.self_attn.to_q.weight"), 0, 1 / sqrt(128.0), false, "to_q");
    check_normal(ckpt_find(&c, "time_embedder.linear_1.weight"), 0, 1 / 16.0, false, "time_embedder.linear_1");
    check_normal(ckpt_find(&c, "layers.0.input_layernorm.weight"), 1, 0.1, false, "input_layernorm");
    check_normal(ckpt_find(&c, "proj_out.bias"), 0, 0.1, false, "proj_out.bias");
    const st_tensor *t1 = ckpt_find(&c, "layers.0.mlp.gate_proj.weight"), *t2 = ckpt_find(&c, "layers.1.mlp.gate_proj.weight");
    T_CHECK(t1 && t2 && memcmp(t1->data, t2->data, t1->nbytes) != 0, "layers get different weights");
    /* VAE: f32, and exactly tiny-a's tensor list when the fixtures are here */
    for (int i = 0; i < c.vae.n; i++) T_CHECK(c.vae.t[i].dtype == C3_F32, "%s not F32", c.vae.t[i].name);
    const char *fx = t_fixtures();
    if (fx) {
        char vp[4096];
        snprintf(vp, sizeof vp, "%s/tiny-a/model/vae/diffusion_pytorch_model.safetensors", fx);
        st_file ref;
        if (st_open(&ref, vp) == C3_OK) {
            T_CHECK(ref.n == c.vae.n, "VAE: %d tensors, tiny-a has %d", c.vae.n, ref.n);
            for (int i = 0; i < ref.n; i++) {
                const st_tensor *r = &ref.t[i];
                T_CHECK(ckpt_get(&c, &c.vae, r->name, r->ndim, r->shape) != NULL, "VAE vs tiny-a: %s", c3_errmsg());
            }
            st_close(&ref);
        } else {
            T_CHECK(0, "cannot open %s: %s", vp, c3_errmsg());
        }
    } else {
        fprintf(stderr, "fixtures absent: VAE tensor list not compared with tiny-a\n");
    }

    /* 3. determinism: same seed, other sharding -> same tensor bytes */
    T_CHECK(write_model("tiny", 0, 1, B, tok, false, SMALL_SHARD, 0, 0) == C3_OK, "%s", c3_errmsg());
    c3_ckpt cb;
    if (ckpt_open(&cb, B, true) == C3_OK) {
        T_CHECK(cb.nshards > 1, "small shard size gives several shards (%d)", cb.nshards);
        snprintf(p1, sizeof p1, "%s/transformer/diffusion_pytorch_model.safetensors.index.json", B);
        T_CHECK(c3_file_exists(p1), "sharded checkpoint has an index");
        snprintf(p1, sizeof p1, "%s/transformer/diffusion_pytorch_model-00001-of-%05d.safetensors", B, cb.nshards);
        T_CHECK(c3_file_exists(p1), "shard naming: %s", p1);
        T_CHECK(cb.ntens == c.ntens, "same tensor count");
        int diff = 0;
        for (int i = 0; i < c.ntens; i++) {
            const st_tensor *x = c.tens[i].t, *y = ckpt_find(&cb, c.tens[i].name);
            if (!y || y->nbytes != x->nbytes || memcmp(x->data, y->data, x->nbytes) != 0) diff++;
        }
        T_CHECK(diff == 0, "%d tensors differ between equal seeds", diff);
        snprintf(p1, sizeof p1, "%s/vae/diffusion_pytorch_model.safetensors", A);
        snprintf(p2, sizeof p2, "%s/vae/diffusion_pytorch_model.safetensors", B);
        T_CHECK(same_file(p1, p2), "VAE files identical for equal seeds");
        snprintf(p1, sizeof p1, "%s/transformer/config.json", A);
        snprintf(p2, sizeof p2, "%s/transformer/config.json", B);
        T_CHECK(same_file(p1, p2), "configs identical");
        ckpt_close(&cb);
    } else {
        T_CHECK(0, "open sharded: %s", c3_errmsg());
    }
    /* another seed -> other values */
    T_CHECK(write_model("tiny", 0, 2, C, tok, false, 0, 0, 0) == C3_OK, "%s", c3_errmsg());
    c3_ckpt cc;
    if (ckpt_open(&cc, C, true) == C3_OK) {
        int same = 0;
        for (int i = 0; i < c.ntens; i++) {
            const st_tensor *x = c.tens[i].t, *y = ckpt_find(&cc, c.tens[i].name);
            if (y && y->nbytes == x->nbytes && memcmp(x->data, y->data, x->nbytes) == 0) same++;
        }
        T_CHECK(same == 0, "%d tensors equal across different seeds", same);
        ckpt_close(&cc);
    } else {
        T_CHECK(0, "open seed 2: %s", c3_errmsg());
    }
    ckpt_close(&c);

    /* 4. refusal to overwrite; overwrite of a checkpoint; never of other folders */
    snprintf(p1, sizeof p1, "%s/transformer/diffusion_pytorch_model.safetensors", A);
    struct stat st0, st1;
    stat(p1, &st0);
    T_CHECK(write_model("tiny", 0, 3, A, tok, false, 0, 0, 0) == C3_EOUTPUT, "refuses an existing folder");
    T_CHECK(strstr(c3_errmsg(), "exists") && strstr(c3_errmsg(), "--overwrite"), "message: %s", c3_errmsg());
    T_CHECK(write_model("tiny", 1, 3, A, tok, true, 0, 0, 0) == C3_OK, "overwrite: %s", c3_errmsg());
    if (ckpt_open(&c, A, true) == C3_OK) {
        T_CHECK(c.t.layers == 1, "overwritten checkpoint has 1 layer (%d)", c.t.layers);
        ckpt_close(&c);
    }
    stat(p1, &st1);
    T_CHECK(st1.st_size != st0.st_size, "files replaced");
    mkdir(X, 0755);
    snprintf(p2, sizeof p2, "%s/keep.txt", X);
    c3_write_file_atomic(p2, "precious", 8, false);
    T_CHECK(write_model("tiny", 1, 3, X, tok, true, 0, 0, 0) == C3_EOUTPUT, "non-checkpoint folder refused");
    T_CHECK(c3_file_exists(p2), "the other folder's file is kept");

    /* 5. bad options, missing tokenizer: errors, nothing written */
    snprintf(p2, sizeof p2, "%s/none", base);
    T_CHECK(write_model("mega", 0, 1, p2, tok, false, 0, 0, 0) == C3_EUSAGE, "unknown preset");
    T_CHECK(strstr(c3_errmsg(), "mega") != NULL, "message names the preset: %s", c3_errmsg());
    T_CHECK(write_model("tiny", -1, 1, p2, tok, false, 0, 0, 0) == C3_EUSAGE, "negative layers");
    T_CHECK(write_model("tiny", 0, 1, p2, base, false, 0, 0, 0) == C3_EINPUT, "no tokenizer.json: %s", c3_errmsg());
    T_CHECK(!c3_file_exists(p2), "nothing left after a failed write");
    T_CHECK(t_count_entries(base, ".tmp.") == 0 && t_count_entries(base, ".old.") == 0,
            "temporary folders left");

    /* 6. Edge layout (1 layer, small vocab, tiny VAE): ReLU^2, no UND QK-norm */
    t0 = c3_now();
    T_CHECK(write_model("edge", 1, 5, E, tok, false, 0, EDGE_TEST_VOCAB, MKMODEL_VAE_TINY) == C3_OK, "%s",
            c3_errmsg());
    dt = c3_now() - t0;
    if (ckpt_open(&c, E, true) == C3_OK) {
        const c3_mkmodel_preset *edge = mkmodel_preset("edge");
        ckpt_sizes(&c, &sz);
        fprintf(stderr, "edge 1-layer written in %.2f s (%.0f M params/s)\n", dt,
                (double)(sz.und_params + sz.gen_params + sz.shared_params) / dt / 1e6);
        T_CHECK(c.t.hidden == 2048 && c.t.heads == 16 && c.t.kv_heads == 8 && c.t.head_dim == 128 &&
                    c.t.inter == 9216 && c.t.layers == 1 && c.t.vocab == EDGE_TEST_VOCAB,
                "edge geometry");
        T_CHECK(!c.t.mlp_gated && !c.t.und_qk_norm && c.t.und_k_norm_for_gen && c.t.norm_mul_fp32, "edge flags");
        T_CHECK(c.t.eps == 1e-5f && c.t.rope_theta == 1e8, "edge eps %g theta %g", c.t.eps, c.t.rope_theta);
        T_CHECK(c.t.mrope[0] == 24 && c.t.mrope[1] == 20 && c.t.mrope[2] == 20, "edge mrope");
        T_CHECK(!c.default_system_prompt && c.native_flow_schedule, "edge model_index flags");
        nneed = check_geometry(&c, edge, 1, EDGE_TEST_VOCAB);
        T_CHECK(c.ntens == nneed, "%d edge tensors, %d expected", c.ntens, nneed);
        check_normal(ckpt_find(&c, "layers.0.mlp_moe_gen.up_proj.weight"), 0, 1 / sqrt(2048.0), true, "edge up_proj");
        ckpt_close(&c);
    } else {
        T_CHECK(0, "open edge: %s", c3_errmsg());
    }

    (void)t_rm_tree(base);
    return t_done("mkmodel");
}
