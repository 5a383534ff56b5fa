/* test_backends.c - one forward of the same checkpoint on the CUDA backend
 * (bf16) and on the CPU backend (fp32): UND K/V of every layer and the GEN
 * velocity, held to relative L2 <= 2e-2 (the one-forward bf16 bound;
 * upstream's own bf16 forward is ~0.9 % off its fp32 goldens). Checkpoints:
 * tiny-a (fixtures) and $COSMOS3_NANO2 (a `mkmodel --preset nano --layers 2`
 * folder) when set. Skips (77) without a GPU. */
#include "model.h"
#include "rng.h"
#include "test_util.h"

#define ONE_FORWARD_TOL 2e-2

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
    c3_backend_destroy(cpu);
    c3_backend_destroy(gpu);
    return t_done("backends");
}
