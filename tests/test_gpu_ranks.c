/* test_gpu_ranks.c - GPU ranks and layerwise offload.
 *
 * Everywhere: the communicator choice (world 1: none; CPU ranks: shared
 * memory; CUDA ranks on distinct GPUs: NCCL; CUDA ranks sharing a GPU: the
 * device-memory communicator), the plan's memory split between ranks that
 * share a device, and --offload being a no-op on the CPU backend.
 * With a GPU (else exit 77 after the checks above): every layout with
 * world <= 8 as ranks sharing GPU 0 (--gpus 0,0,..) on a `mkmodel --preset
 * tiny` checkpoint (8 KV heads) at 80x48 (ulysses 4 pads 6 GEN tokens to 8),
 * each equal to world 1 on CUDA within bf16 rounding (rel L2 <= 2e-2), and
 * --offload bit-identical to resident. With $COSMOS3_NANO2 (a 2-layer nano
 * checkpoint, made by bench/gpu.sh) it also measures the offload's
 * host->device rate on real layer sizes. */
#include "comm.h"
#include "events.h"
#include "mkmodel.h"
#include "model.h"
#include "plan.h"
#include "test_engine.h"

/* bf16 ranks vs bf16 world 1 (reduction order and Ulysses padding differ). */
/* Latents after three CFG-5 steps in bf16: the fixtures README's multi-step
 * bf16 bound (six steps <= 6e-2). Measured on the H200: Ulysses and CFG
 * layouts bit-identical to world 1; every TP layout 2.46e-2 (the same for tp
 * 2, 4 and 8: the row-parallel products round once from fp32 instead of in
 * cuBLASLt's bf16 epilogue, and the random tiny model amplifies it). */
#define LAYOUT_TOL 6e-2

static char tmpd[64];

static void check_choice(void) {
    int distinct[4] = {0, 1, 2, 3}, shared[4] = {0, 0, 0, 0}, mixed[3] = {0, 1, 0}, cpu[4] = {-1, -1, -1, -1};
    T_CHECK(comm_choose(true, 1, distinct) == C3_COMM_NONE, "one rank needs no communicator");
    T_CHECK(comm_choose(false, 1, cpu) == C3_COMM_NONE, "one CPU rank needs no communicator");
    T_CHECK(comm_choose(false, 4, cpu) == C3_COMM_SHM, "CPU ranks use shared memory");
    T_CHECK(comm_choose(true, 4, distinct) == C3_COMM_NCCL, "distinct GPUs use NCCL");
    T_CHECK(comm_choose(true, 2, distinct) == C3_COMM_NCCL, "distinct GPUs use NCCL (2)");
    T_CHECK(comm_choose(true, 4, shared) == C3_COMM_DEVICE, "ranks sharing GPU 0 use device memory");
    T_CHECK(comm_choose(true, 3, mixed) == C3_COMM_DEVICE, "any shared GPU forces device memory");
    T_CHECK(strstr(comm_kind_name(C3_COMM_NCCL), "NCCL") != NULL, "kind name: %s", comm_kind_name(C3_COMM_NCCL));
}


typedef struct {
    const char *device; /* "cpu" or "cuda" */
    int tp, cfg, sp;
    bool offload;
    const char *size;   /* "WxH" or NULL for 80x48 */
    int steps;          /* 0: 3 */
} layout;

/* The weights an --offload run streamed (rank 0, host -> device). */
typedef struct {
    int64_t h2d_bytes;
    double h2d_seconds, h2d_gbps;
} streamed;

/* One generation; the final latents (or NULL), the result's offload numbers
 * and the plan's communicator kind. */
static float *run(const char *model, const layout *L, int64_t *n, streamed *res_out,
                  c3_comm_kind *kind, bool *offloaded) {
    char gpus[160];
    cosmos3_open_params op;
    t_engine_open_params(&op, model, L->device, L->tp, L->cfg, L->sp, NULL);
    cosmos3_request rq;
    t_engine_request(&rq);
    if (L->size) {
        sscanf(L->size, "%dx%d", &rq.width, &rq.height);
        op.plan_width = rq.width;
        op.plan_height = rq.height;
    }
    if (L->steps) rq.steps = L->steps;
    int world = L->tp * L->cfg * L->sp;
    if (!strcmp(L->device, "cuda")) { /* every rank on GPU 0 */
        gpus[0] = 0;
        for (int r = 0; r < world; r++) strcat(gpus, r ? ",0" : "0");
        op.gpus = gpus;
    }
    op.offload = L->offload;
    cosmos3_engine *e = NULL;
    float *x = NULL;
    char err[1024];
    int rc = cosmos3_open(&op, &e, err, sizeof err);
    if (rc == C3_OK) {
        cosmos3_layout p;
        cosmos3_layout_get(e, &p);
        int devices[C3_MAX_RANKS];
        for (int i = 0; i < p.world; i++)
            devices[i] = p.ranks[i].device;
        if (kind) *kind = comm_choose(!strcmp(p.device, "cuda"), p.world, devices);
        cosmos3_result *r = NULL;
        rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
        if (r && res_out)
            *res_out = (streamed){r->h2d_bytes, r->h2d_seconds,
                                  r->h2d_seconds > 0 ? (double)r->h2d_bytes / r->h2d_seconds / 1e9
                                                     : 0};
        if (offloaded) *offloaded = r && r->h2d_bytes > 0;
        if (rc == C3_OK) x = t_result_latents(r, n);
        cosmos3_result_free(r);
        cosmos3_close(e);
    }
    if (rc) c3_fail(rc, "%s", err);
    if (rc) fprintf(stderr, "  %s tp %d cfg %d sp %d%s: %s\n", L->device, L->tp, L->cfg, L->sp,
                    L->offload ? " offload" : "", c3_errmsg());
    return x;
}

/* --offload on the CPU: accepted, changes nothing. */
static void check_cpu_offload(const char *model) {
    int64_t n0 = 0, n1 = 0;
    bool off = true;
    layout a = {.device = "cpu", .tp = 1, .cfg = 1, .sp = 1, .steps = 1};
    layout b = a;
    b.offload = true;
    float *x0 = run(model, &a, &n0, NULL, NULL, NULL);
    float *x1 = run(model, &b, &n1, NULL, NULL, &off);
    T_CHECK(x0 && x1 && n0 == n1 && !memcmp(x0, x1, (size_t)n0 * sizeof(float)),
            "--offload on the CPU gives the resident latents bit for bit");
    T_CHECK(!off, "no host->device stream on the CPU");
    free(x0);
    free(x1);
}

static void gpu_layouts(const char *model, int kv_heads) {
    int64_t n1 = 0;
    layout one = {.device = "cuda", .tp = 1, .cfg = 1, .sp = 1};
    float *ref = run(model, &one, &n1, NULL, NULL, NULL);
    T_CHECK(ref != NULL, "world 1 on CUDA");
    if (!ref) return;
    static const int tps[] = {1, 2, 4, 8}, cfgs[] = {1, 2}, sps[] = {1, 2, 4};
    double worst = 0;
    int count = 0;
    for (size_t a = 0; a < C3_ARRAY_LEN(tps); a++)
        for (size_t b = 0; b < C3_ARRAY_LEN(cfgs); b++)
            for (size_t c = 0; c < C3_ARRAY_LEN(sps); c++) {
                layout L = {.device = "cuda", .tp = tps[a], .cfg = cfgs[b], .sp = sps[c]};
                int world = L.tp * L.cfg * L.sp;
                if (world == 1 || world > 8 || kv_heads % L.tp || (kv_heads / L.tp) % L.sp) continue;
                int64_t n = 0;
                c3_comm_kind kind = C3_COMM_NONE;
                double t0 = c3_now();
                float *x = run(model, &L, &n, NULL, &kind, NULL);
                double rel = x && n == n1 ? t_rel_l2(x, ref, n) : 1e9;
                printf("layout tp %d cfg %d ulysses %d (world %d on GPU 0, %s): rel L2 vs world 1 %.3e (%.1f s)\n",
                       L.tp, L.cfg, L.sp, world, comm_kind_name(kind), rel, c3_now() - t0);
                fflush(stdout);
                T_CHECK(kind == C3_COMM_DEVICE, "tp %d cfg %d sp %d: ranks sharing GPU 0 use device memory", L.tp,
                        L.cfg, L.sp);
                T_CHECK(rel <= LAYOUT_TOL, "tp %d cfg %d sp %d: rel L2 %.3e > %.0e", L.tp, L.cfg, L.sp, rel,
                        LAYOUT_TOL);
                if (rel > worst) worst = rel;
                count++;
                free(x);
            }
    printf("layouts: %d, worst rel L2 vs world 1 %.3e (tolerance %.0e)\n", count, worst, LAYOUT_TOL);
    /* offload: bit-identical to resident, alone and with shared-GPU TP ranks */
    static const int off_tp[] = {1, 2};
    for (size_t i = 0; i < C3_ARRAY_LEN(off_tp); i++) {
        layout R = {.device = "cuda", .tp = off_tp[i], .cfg = 1, .sp = 1};
        layout O = R;
        O.offload = true;
        int64_t nr = 0, no = 0;
        streamed res = {0};
        float *xr = off_tp[i] == 1 ? ref : run(model, &R, &nr, NULL, NULL, NULL);
        if (off_tp[i] == 1) nr = n1;
        float *xo = run(model, &O, &no, &res, NULL, NULL);
        bool same = xr && xo && nr == no && !memcmp(xr, xo, (size_t)no * sizeof(float));
        double rel = xr && xo && nr == no ? t_rel_l2(xo, xr, no) : 1e9;
        printf("offload tp %d: %s resident (rel L2 %.3e); %lld bytes streamed in %.3f ms, %.2f GB/s\n", off_tp[i],
               same ? "bit-identical to" : "DIFFERS from", rel, (long long)res.h2d_bytes, res.h2d_seconds * 1e3,
               res.h2d_gbps);
        T_CHECK(same, "offload tp %d equals resident bit for bit (rel L2 %.3e)", off_tp[i], rel);
        T_CHECK(res.h2d_bytes > 0 && res.h2d_gbps > 0, "offload tp %d streamed weights", off_tp[i]);
        if (xr != ref) free(xr);
        free(xo);
    }
    free(ref);
}

/* Host->device rate on 2 nano layers (~390 MB per tower layer), through the
 * model API (UND + GEN forwards; no VAE), resident vs offloaded. */
static void nano_rate(const char *dir) {
    c3_ckpt ck;
    c3_backend *be = NULL;
    c3_model *res = NULL, *off = NULL;
    if (ckpt_open(&ck, dir, false) != C3_OK) {
        T_CHECK(0, "nano checkpoint %s: %s", dir, c3_errmsg());
        return;
    }
    int rc = c3_backend_cuda(0, &be);
    c3_shard sh = {.tp_size = 1, .sp_size = 1};
    if (rc == C3_OK) rc = model_load(&res, &ck, be, &sh);
    sh.offload = true;
    if (rc == C3_OK) rc = model_load(&off, &ck, be, &sh);
    T_CHECK(rc == C3_OK, "nano load: %s", c3_errmsg());
    T_CHECK(rc || model_offloaded(off), "nano model is offloaded");
    enum { NANO_L = 64, NANO_STEPS = 3 };
    int32_t ids[NANO_L];
    for (int i = 0; i < NANO_L; i++) ids[i] = 100 + 7 * i;
    const c3_tconfig *c = &ck.t;
    c3_latent_geom g = {.T = 1, .h = 32, .w = 32, .fps = 24}; /* 512x512: 256 GEN tokens */
    int64_t n = (int64_t)c->latent_ch * g.T * g.h * g.w;
    float *lat = xmalloc(sizeof(float) * (size_t)n), *v0 = xmalloc(sizeof(float) * (size_t)n),
          *v1 = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) lat[i] = (float)((i * 37 % 101) - 50) / 50.0f;
    double t_res = 0, t_off = 0;
    c3_undkv kr = {0}, ko = {0};
    if (rc == C3_OK) rc = model_und(res, ids, NANO_L, &kr);
    if (rc == C3_OK) rc = model_und(off, ids, NANO_L, &ko);
    for (int s = 0; s < NANO_STEPS && rc == C3_OK; s++) {
        double a = c3_now();
        rc = model_gen(res, &kr, lat, &g, 900 - 100 * s, v0);
        double b = c3_now();
        if (rc == C3_OK) rc = model_gen(off, &ko, lat, &g, 900 - 100 * s, v1);
        if (s > 0) { /* the first call warms plans up */
            t_res += b - a;
            t_off += c3_now() - b;
        }
    }
    T_CHECK(rc == C3_OK, "nano forwards: %s", c3_errmsg());
    bool same = rc == C3_OK && !memcmp(v0, v1, sizeof(float) * (size_t)n);
    int64_t bytes = 0;
    double sec = 0;
    model_offload_stats(off, &bytes, &sec);
    double gbps = sec > 0 ? (double)bytes / sec / 1e9 : 0;
    printf("nano 2 layers, UND %d tokens + %d GEN forwards of 256 tokens: resident %.1f ms/forward, offload %.1f "
           "ms/forward; offload %s resident; H2D %.2f GB in %.1f ms of copies = %.2f GB/s\n",
           NANO_L, NANO_STEPS, t_res * 1e3 / (NANO_STEPS - 1), t_off * 1e3 / (NANO_STEPS - 1),
           same ? "bit-identical to" : "DIFFERS from", (double)bytes / 1e9, sec * 1e3, gbps);
    T_CHECK(same, "nano offload equals resident bit for bit");
    T_CHECK(gbps > 1.0, "nano offload rate %.2f GB/s", gbps);
    undkv_free(&kr);
    undkv_free(&ko);
    free(lat);
    free(v0);
    free(v1);
    model_free(res);
    model_free(off);
    if (be) c3_backend_destroy(be);
    ckpt_close(&ck);
}

int main(void) {
    check_choice();
    snprintf(tmpd, sizeof tmpd, "/tmp/c3_gpur_XXXXXX");
    if (!mkdtemp(tmpd)) return 1;
    char tiny[128];
    int rc = t_make_tiny8(tmpd, tiny, sizeof tiny);
    T_CHECK(rc == C3_OK, "mkmodel: %s", c3_errmsg());
    if (rc == C3_OK) check_cpu_offload(tiny);
    bool gpu = c3_gpu_count() > 0;
    if (gpu && rc == C3_OK) {
        const c3_mkmodel_preset *pr = mkmodel_preset("tiny");
        gpu_layouts(tiny, pr ? pr->kv_heads : 8);
        const char *nano = getenv("COSMOS3_NANO2");
        if (nano && *nano) nano_rate(nano);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpd);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpd);
    int st = t_done("gpu_ranks");
    if (st == 0 && !gpu) {
        fprintf(stderr, "gpu_ranks: no GPU: the CPU checks passed, the GPU layouts were skipped\n");
        return T_SKIP;
    }
    return st;
}
