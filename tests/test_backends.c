/* test_backends.c - one forward of the same checkpoint on the CUDA backend
 * (bf16) and on the CPU backend (fp32): UND K/V of every layer and the GEN
 * velocity, held to relative L2 <= 2e-2 (the one-forward bf16 bound;
 * upstream's own bf16 forward is ~0.9 % off its fp32 goldens). Checkpoints:
 * tiny-a (fixtures) and $COSMOS3_NANO2 (a `mkmodel --preset nano --layers 2`
 * folder) when set. With that folder also FP8 (`--precision fp8`: weights
 * quantised at load, activation scales per call): the GEN velocity of one
 * forward (no CFG, so no guidance amplifies the difference) CUDA FP8 vs the
 * CPU FP8 reference <= FP8_CUDA_VS_CPU, and FP8 vs 16-bit on each backend
 * <= FP8_VS_BF16 (the quantisation's own effect, printed). Skips (77)
 * without a GPU. */
#include "model.h"
#include "rng.h"
#include "test_util.h"

#define ONE_FORWARD_TOL 2e-2
/* FP8 CUDA vs the CPU reference: the same E4M3 products (ops_check: 1.7e-3
 * on identical inputs), but CUDA's bf16 activations land on the other side
 * of an E4M3 rounding boundary for some values, each then off by a whole
 * quantum (2^-3 relative), and the layers carry it on: measured 3.8e-2 at
 * nano 2 layers on an H200 (FP8 vs 16-bit: 5.0e-2 on either backend) */
#define FP8_CUDA_VS_CPU 6e-2
#define FP8_VS_BF16 1e-1

static double compare_tensor(c3_backend *a, const c3_tensor *ta, c3_backend *b, const c3_tensor *tb) {
    int64_t n = c3_numel(ta);
    float *x = xmalloc(sizeof(float) * (size_t)n), *y = xmalloc(sizeof(float) * (size_t)n);
    double e = 1e9;
    if (c3_numel(tb) == n && a->download(a, x, ta) == C3_OK && b->download(b, y, tb) == C3_OK) e = t_rel_l2(y, x, n);
    free(x);
    free(y);
    return e;
}

static void check_model(const char *dir, c3_backend *cpu, c3_backend *gpu) {
    c3_ckpt ck;
    if (ckpt_open(&ck, dir, false) != C3_OK) {
        T_CHECK(0, "%s", c3_errmsg());
        return;
    }
    c3_model *mc = NULL, *mg = NULL;
    T_CHECK(model_load(&mc, &ck, cpu, NULL) == C3_OK, "cpu load: %s", c3_errmsg());
    T_CHECK(model_load(&mg, &ck, gpu, NULL) == C3_OK, "cuda load: %s", c3_errmsg());
    if (mc && mg) {
        const c3_tconfig *c = &ck.t;
        int L = 64;
        int32_t ids[64];
        for (int i = 0; i < L; i++) ids[i] = (int32_t)((1000 + 7919 * i) % (c->vocab - 1));
        c3_undkv kc = {0}, kg = {0};
        T_CHECK(model_und(mc, ids, L, &kc) == C3_OK, "cpu und: %s", c3_errmsg());
        T_CHECK(model_und(mg, ids, L, &kg) == C3_OK, "cuda und: %s", c3_errmsg());
        double worst_kv = 0;
        for (int l = 0; l < kc.layers && l < kg.layers; l++) {
            double ek = compare_tensor(cpu, &kc.k[l], gpu, &kg.k[l]);
            double ev = compare_tensor(cpu, &kc.v[l], gpu, &kg.v[l]);
            worst_kv = ek > worst_kv ? ek : worst_kv;
            worst_kv = ev > worst_kv ? ev : worst_kv;
        }
        T_CHECK(worst_kv <= ONE_FORWARD_TOL, "%s: UND K/V rel L2 %.3e", dir, worst_kv);
        c3_latent_geom g = {.T = 1, .h = 17, .w = 15, .fps = 24}; /* odd grid: padding on both sides */
        int64_t n = (int64_t)c->latent_ch * g.T * g.h * g.w;
        float *x = xmalloc(sizeof(float) * (size_t)n), *vc = xmalloc(sizeof(float) * (size_t)n),
              *vg = xmalloc(sizeof(float) * (size_t)n);
        rng_normal(7, 0, x, n);
        int rc1 = model_gen(mc, &kc, x, &g, 901, vc), rc2 = model_gen(mg, &kg, x, &g, 901, vg);
        T_CHECK(rc1 == C3_OK && rc2 == C3_OK, "gen: %s", c3_errmsg());
        double ev = rc1 || rc2 ? 1e9 : t_rel_l2(vg, vc, n);
        fprintf(stderr, "%s: cuda (bf16) vs cpu (fp32), one forward: UND K/V worst rel L2 %.3e, velocity %.3e\n", dir,
                worst_kv, ev);
        T_CHECK(ev <= ONE_FORWARD_TOL, "%s: velocity rel L2 %.3e > %.0e", dir, ev, ONE_FORWARD_TOL);
        free(x);
        free(vc);
        free(vg);
        undkv_free(&kc);
        undkv_free(&kg);
    }
    model_free(mc);
    model_free(mg);
    ckpt_close(&ck);
}

/* One forward (UND of fixed ids, then GEN of seeded latents at timestep 901)
 * of dir on be at precision prec: the velocity (NULL on failure). */
static float *one_forward(const char *dir, c3_backend *be, int prec, int64_t *nout) {
    c3_ckpt ck;
    if (ckpt_open(&ck, dir, false) != C3_OK) {
        T_CHECK(0, "%s", c3_errmsg());
        return NULL;
    }
    c3_shard sh = {.tp_size = 1, .sp_size = 1, .precision = prec};
    c3_model *m = NULL;
    float *v = NULL;
    T_CHECK(model_load(&m, &ck, be, &sh) == C3_OK, "load %s: %s", dir, c3_errmsg());
    if (m) {
        const c3_tconfig *c = &ck.t;
        int32_t ids[64];
        for (int i = 0; i < 64; i++)
            ids[i] = (int32_t)((1000 + 7919 * i) % (c->vocab - 1));
        c3_undkv kv = {0};
        c3_latent_geom g = {.T = 1, .h = 17, .w = 15, .fps = 24};
        int64_t n = (int64_t)c->latent_ch * g.T * g.h * g.w;
        float *x = xmalloc(sizeof(float) * (size_t)n);
        v = xmalloc(sizeof(float) * (size_t)n);
        rng_normal(7, 0, x, n);
        int rc = model_und(m, ids, 64, &kv);
        if (rc == C3_OK) rc = model_gen(m, &kv, x, &g, 901, v);
        T_CHECK(rc == C3_OK, "forward %s: %s", dir, c3_errmsg());
        if (rc) free(v), v = NULL;
        *nout = n;
        free(x);
        undkv_free(&kv);
    }
    model_free(m);
    ckpt_close(&ck);
    return v;
}

static void check_fp8(const char *dir, c3_backend *cpu, c3_backend *gpu) {
    int64_t n[4] = {0};
    float *cb = one_forward(dir, cpu, C3_PREC_AUTO, &n[0]),
          *c8 = one_forward(dir, cpu, C3_PREC_FP8, &n[1]);
    float *gb = one_forward(dir, gpu, C3_PREC_AUTO, &n[2]),
          *g8 = one_forward(dir, gpu, C3_PREC_FP8, &n[3]);
    if (cb && c8 && gb && g8 && n[0] == n[1] && n[1] == n[2] && n[2] == n[3]) {
        double e_gc = t_rel_l2(g8, c8, n[0]), e_c = t_rel_l2(c8, cb, n[0]),
               e_g = t_rel_l2(g8, gb, n[0]), e_b = t_rel_l2(gb, cb, n[0]);
        fprintf(
            stderr,
            "%s: one forward, velocity rel L2: FP8 cuda vs FP8 cpu %.3e | FP8 vs 16-bit: cpu %.3e, "
            "cuda %.3e | cuda bf16 vs cpu fp32 %.3e\n",
            dir, e_gc, e_c, e_g, e_b);
        T_CHECK(e_gc <= FP8_CUDA_VS_CPU, "%s: FP8 cuda vs cpu %.3e > %.0e", dir, e_gc,
                FP8_CUDA_VS_CPU);
        T_CHECK(e_c <= FP8_VS_BF16 && e_g <= FP8_VS_BF16, "%s: FP8 vs 16-bit %.3e / %.3e > %.0e",
                dir, e_c, e_g, FP8_VS_BF16);
        T_CHECK(e_c > 1e-4, "%s: FP8 on the cpu changes nothing (%.3e): not quantised?", dir, e_c);
    }
    free(cb), free(c8), free(gb), free(g8);
}

int main(void) {
    c3_backend *gpu = NULL;
    if (c3_backend_cuda(0, &gpu) != C3_OK) {
        fprintf(stderr, "backends: SKIP: no CUDA device (%s)\n", c3_errmsg());
        return T_SKIP;
    }
    c3_backend *cpu = c3_backend_cpu();
    const char *fx = t_fixtures();
    const char *nano = getenv("COSMOS3_NANO2");
    if (!fx && !(nano && *nano)) {
        fprintf(stderr, "backends: SKIP: neither fixtures nor COSMOS3_NANO2\n");
        return T_SKIP;
    }
    if (fx) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/tiny-a/model", fx);
        check_model(dir, cpu, gpu);
    }
    if (nano && *nano) check_model(nano, cpu, gpu);
    if (nano && *nano) check_fp8(nano, cpu, gpu);
    c3_backend_destroy(cpu);
    c3_backend_destroy(gpu);
    return t_done("backends");
}
