/* test_attn_fp8.c - FP8 attention (--attention fp8, issue 24 item 4).
 *
 * On the CPU (what CI runs): the backend's emulation of the FP8 kernel
 * (per-head E4M3 Q, K, V, E4M3 P) against the same call in fp32 on the
 * Nano GEN attention geometry (32 q / 8 KV heads x 128, [UND | GEN] keys
 * with a padded UND tail), on two kinds of inputs: flat scores (random
 * bumps, as the lab draws) and peaked ones (a larger spread, so most
 * probabilities are small and their E4M3 rounding matters). The rel L2 must
 * lie inside [FP8_MIN, FP8_FLAT or FP8_PEAKED] (the emulation does round;
 * no worse than the measured 4.05e-2 / 7.8e-2 with margin). A causal call and a call outside the
 * GEN tower (attn_gen false) stay fp32 bit for bit, the causal one counted
 * as declined. `cosmos3 gen --attention fp9` fails naming the values. A tiny
 * random checkpoint (head_dim 16: the CPU emulates at any head_dim) runs 8
 * steps with --attention fp8 and without: the final latents within
 * MODEL_MAX of each other, and not equal (MODEL_MIN).
 *
 * COSMOS3_TEST_DEVICE=cuda adds the CUDA backend on the same bf16 inputs:
 * its FP8 kernel (Hopper) against the CPU emulation (CUDA_VS_EMU: the same
 * codes; exp2 approximation and bf16 output apart) and against fp32, and
 * its bf16 kernel against fp32 (the drift FP8 is compared with). */
#include <string.h>
#include <sys/wait.h>

#include "test_cli.h"
#include "test_util.h"

#define HQ 32
#define HKV 8
#define D 128
#define L_N 304     /* UND keys held ... */
#define L_VALID 300 /* ... and visible */
#define S 256
#define FP8_MIN 5e-3  /* the rounding happened */
#define FP8_FLAT 6e-2 /* measured 4.05e-2 on flat scores (NOTES.md, s8 attn) */
#define FP8_PEAKED                                                                                 \
    1.2e-1 /* measured 7.8e-2 on peaked ones: Q K^T rounding moves the large scores */
#define CUDA_VS_EMU 1.5e-2
#define MODEL_MIN 1e-3 /* tiny, 64x64, 8 steps: measured 4.27e-2 (NOTES.md, s8 attn) */
#define MODEL_MAX 1e-1
#define BF16_MAX 1e-2

static uint64_t t_state = 0x5eed;
static float t_rand(void) { /* a bump in [-1, 1): the sum of two uniforms, minus 1 */
    t_state = t_state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t a = (uint32_t)(t_state >> 40), b = (uint32_t)(t_state >> 16) & 0xffffff;
    return (float)a / 16777216.0f + (float)b / 16777216.0f - 1.0f;
}
/* n values times amp, rounded to bf16 (what the GPU holds) */
static float *t_fill(int64_t n, float amp) {
    float *x = xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        x[i] = c3_bf16_to_f32(c3_f32_to_bf16(amp * t_rand()));
    return x;
}

typedef struct {
    float *q, *k0, *v0, *k1, *v1;
} inputs;

/* out [S, HQ, D] of the GEN call on be; fp8 / gen set the backend's flags */
static int run(c3_backend *be, const inputs *in, bool fp8, bool gen, bool causal, float *out) {
    c3_tensor q, k0, v0, k1, v1, o;
    c3_dtype t = be->act_dtype;
    int rc = c3_alloc(be, &q, t, C3_MEM_ACT, 3, (int64_t)S, (int64_t)HQ, (int64_t)D);
    if (!rc) rc = c3_alloc(be, &o, t, C3_MEM_ACT, 3, (int64_t)S, (int64_t)HQ, (int64_t)D);
    if (!rc) rc = c3_alloc(be, &k0, t, C3_MEM_ACT, 3, (int64_t)L_N, (int64_t)HKV, (int64_t)D);
    if (!rc) rc = c3_alloc(be, &v0, t, C3_MEM_ACT, 3, (int64_t)L_N, (int64_t)HKV, (int64_t)D);
    if (!rc) rc = c3_alloc(be, &k1, t, C3_MEM_ACT, 3, (int64_t)S, (int64_t)HKV, (int64_t)D);
    if (!rc) rc = c3_alloc(be, &v1, t, C3_MEM_ACT, 3, (int64_t)S, (int64_t)HKV, (int64_t)D);
    if (rc) return rc;
    rc = be->upload(be, &q, in->q, C3_F32);
    if (!rc) rc = be->upload(be, &k0, in->k0, C3_F32);
    if (!rc) rc = be->upload(be, &v0, in->v0, C3_F32);
    if (!rc) rc = be->upload(be, &k1, in->k1, C3_F32);
    if (!rc) rc = be->upload(be, &v1, in->v1, C3_F32);
    be->attn_fp8 = fp8;
    be->attn_gen = gen;
    const float scale = 1.0f / sqrtf((float)D);
    if (!rc && causal) {
        c3_kvseg seg = {&k1, &v1, S, S};
        rc = be->attention(be, &o, &q, &seg, 1, true, scale);
    } else if (!rc) {
        c3_kvseg seg[2] = {{&k0, &v0, L_N, L_VALID}, {&k1, &v1, S, S}};
        rc = be->attention(be, &o, &q, seg, 2, false, scale);
    }
    be->attn_fp8 = be->attn_gen = false;
    if (!rc) rc = be->download(be, out, &o);
    if (!rc) rc = be->sync(be);
    c3_free(&q), c3_free(&o), c3_free(&k0), c3_free(&v0), c3_free(&k1), c3_free(&v1);
    return rc;
}

static void one_kind(const char *kind, float amp, double fp8_max, c3_backend *cuda) {
    inputs in = {t_fill((int64_t)S * HQ * D, amp), t_fill((int64_t)L_N * HKV * D, amp),
                 t_fill((int64_t)L_N * HKV * D, 1.0f), t_fill((int64_t)S * HKV * D, amp),
                 t_fill((int64_t)S * HKV * D, 1.0f)};
    const int64_t n = (int64_t)S * HQ * D;
    float *ref = xmalloc((size_t)n * sizeof(float)), *emu = xmalloc((size_t)n * sizeof(float));
    c3_backend *cpu = c3_backend_cpu();
    int rc = run(cpu, &in, false, true, false, ref);
    T_CHECK(rc == C3_OK, "%s: cpu fp32: %s", kind, c3_errmsg());
    int64_t calls0 = cpu->attn_fp8_calls;
    rc = run(cpu, &in, true, true, false, emu);
    T_CHECK(rc == C3_OK, "%s: cpu fp8: %s", kind, c3_errmsg());
    T_CHECK(cpu->attn_fp8_calls == calls0 + 1, "%s: the FP8 call was not counted", kind);
    double e = t_rel_l2(emu, ref, n);
    fprintf(stderr, "%s inputs (amp %.1f): cpu fp8 emulation vs fp32 rel L2 %.3e\n", kind, amp, e);
    T_CHECK(e > FP8_MIN && e < fp8_max, "%s: fp8 vs fp32 rel L2 %.3e outside [%.0e, %.1e]", kind, e,
            FP8_MIN, fp8_max);
    T_CHECK(c3_first_nonfinite(emu, (size_t)n) == (size_t)n, "%s: fp8 output not finite", kind);
    if (cuda) {
        float *got = xmalloc((size_t)n * sizeof(float)), *g16 = xmalloc((size_t)n * sizeof(float));
        int64_t c0 = cuda->attn_fp8_calls, d0 = cuda->attn_fp8_declined;
        rc = run(cuda, &in, true, true, false, got);
        T_CHECK(rc == C3_OK, "%s: cuda fp8: %s", kind, c3_errmsg());
        T_CHECK(cuda->attn_fp8_calls == c0 + 1 && cuda->attn_fp8_declined == d0,
                "%s: cuda ran %lld FP8 calls, declined %lld (%s)", kind,
                (long long)(cuda->attn_fp8_calls - c0), (long long)(cuda->attn_fp8_declined - d0),
                cuda->attn_fp8_why ? cuda->attn_fp8_why : "-");
        rc = run(cuda, &in, false, true, false, g16);
        T_CHECK(rc == C3_OK, "%s: cuda bf16: %s", kind, c3_errmsg());
        double ce = t_rel_l2(got, emu, n), cr = t_rel_l2(got, ref, n), br = t_rel_l2(g16, ref, n);
        fprintf(
            stderr,
            "%s: cuda fp8 vs cpu emulation %.3e, cuda fp8 vs fp32 %.3e, cuda bf16 vs fp32 %.3e\n",
            kind, ce, cr, br);
        T_CHECK(ce < CUDA_VS_EMU, "%s: cuda fp8 vs the cpu emulation rel L2 %.3e (bound %.0e)",
                kind, ce, CUDA_VS_EMU);
        T_CHECK(cr > FP8_MIN && cr < fp8_max,
                "%s: cuda fp8 vs fp32 rel L2 %.3e outside [%.0e, %.0e]", kind, cr, FP8_MIN,
                fp8_max);
        T_CHECK(br < BF16_MAX, "%s: cuda bf16 vs fp32 rel L2 %.3e (bound %.0e)", kind, br,
                BF16_MAX);
        free(got);
        free(g16);
    }
    /* outside the GEN tower, and causal: fp32 bit for bit; causal counted as declined */
    rc = run(cpu, &in, true, false, false, emu);
    T_CHECK(rc == C3_OK && memcmp(emu, ref, (size_t)n * sizeof(float)) == 0,
            "%s: attn_gen false changed the fp32 result", kind);
    int64_t dec0 = cpu->attn_fp8_declined;
    rc = run(cpu, &in, false, true, true, ref);
    T_CHECK(rc == C3_OK, "%s: causal fp32: %s", kind, c3_errmsg());
    rc = run(cpu, &in, true, true, true, emu);
    T_CHECK(rc == C3_OK && memcmp(emu, ref, (size_t)n * sizeof(float)) == 0,
            "%s: a causal call with attn_fp8 is not the fp32 one", kind);
    T_CHECK(cpu->attn_fp8_declined == dec0 + 1 && cpu->attn_fp8_why &&
                strstr(cpu->attn_fp8_why, "causal"),
            "%s: the causal call was not counted as declined (%lld)", kind,
            (long long)(cpu->attn_fp8_declined - dec0));
    c3_backend_destroy(cpu);
    free(ref);
    free(emu);
    free(in.q), free(in.k0), free(in.v0), free(in.k1), free(in.v1);
}

/* the final latents of 8 CPU steps of the tiny checkpoint `model`, --attention attn */
static float *tiny_latents(const char *bin, const char *model, const char *attn, const char *dir,
                           int64_t *n) {
    return t_gen_tiny_latents(bin, model, "--attention", attn, dir, attn, n);
}

int main(void) {
    c3_backend *cuda = NULL;
    if (t_on_cuda()) {
        int rc = c3_backend_cuda(0, &cuda);
        T_CHECK(rc == C3_OK, "COSMOS3_TEST_DEVICE=cuda: %s", c3_errmsg());
    }
    one_kind("flat", 1.5f, FP8_FLAT, cuda);
    one_kind("peaked", 4.0f, FP8_PEAKED, cuda);
    if (cuda) c3_backend_destroy(cuda);

    /* the option: a bad value is refused naming the allowed ones */
    const char *bin = getenv("COSMOS3_BIN");
    if (bin && *bin) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "'%s' gen --attention fp9 -p x -o /dev/null 2>&1", bin);
        FILE *f = popen(cmd, "r");
        char line[512] = "";
        size_t got = f ? fread(line, 1, sizeof line - 1, f) : 0;
        line[got] = 0;
        int st = f ? pclose(f) : -1;
        T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2, "gen --attention fp9 exited %d", st);
        T_CHECK(strstr(line, "bf16") && strstr(line, "fp8"), "gen --attention fp9 said: %s", line);

        char tmpd[] = "/tmp/c3attnXXXXXX", model[4200];
        T_CHECK(mkdtemp(tmpd) != NULL, "mkdtemp");
        snprintf(model, sizeof model, "%s/tiny", tmpd);
        char *mk[] = {(char *)bin, "mkmodel", "--preset", "tiny", "--seed",
                      "5",         "-o",      model,      "-q",   NULL};
        T_CHECK(t_run(mk, NULL) == 0, "mkmodel --preset tiny");
        int64_t n1 = 0, n2 = 0;
        float *a = tiny_latents(bin, model, "bf16", tmpd, &n1);
        float *b = tiny_latents(bin, model, "fp8", tmpd, &n2);
        if (a && b && n1 == n2 && n1 > 0) {
            double e = t_rel_l2(b, a, n1);
            fprintf(stderr,
                    "tiny, 8 steps on the CPU: latents --attention fp8 vs bf16 rel L2 %.3e\n", e);
            T_CHECK(e >= MODEL_MIN && e <= MODEL_MAX,
                    "tiny latents fp8 vs bf16 rel L2 %.3e outside [%.0e, %.0e]", e, MODEL_MIN,
                    MODEL_MAX);
        } else {
            T_CHECK(0, "tiny latents: %lld and %lld values", (long long)n1, (long long)n2);
        }
        free(a);
        free(b);
        T_CHECK(t_rm_tree(tmpd), "cleanup");
    }
    return t_done("attn");
}
