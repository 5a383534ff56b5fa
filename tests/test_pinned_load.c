/* test_pinned_load.c - model_load's pinned staging ring (the default; COSMOS3_PINNED_LOAD=0 off)
 * on a host-memory stand-in for a device backend: the demo model's weights
 * loaded through the ring with small buffers (many turns of it) hold the
 * same bytes as the plain upload's; every byte that needs no conversion
 * went through upload_async; every copy was waited for before model_load
 * returned; with COSMOS3_PINNED_LOAD=0 the ring is not used.
 *
 * The stand-in keeps weights in the dtype asked (bf16), copies at once
 * (upload_async is a memcpy) and counts the calls. */
#include "env.h"
#include "model_internal.h"
#include "test_util.h"

static struct {
    int64_t async_bytes, async_calls;
    int pending;    /* copy-queue timing events recorded and not yet waited for */
    int events;     /* alive */
    int host_alive; /* pinned buffers alive */
} g;

static int mk_alloc(c3_backend *be, c3_tensor *t, c3_dtype dt, int ndim, const int64_t *ne,
                    c3_memcat cat) {
    memset(t, 0, sizeof *t);
    t->be = be;
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->ne[i] = ne[i];
    size_t bytes = (size_t)c3_numel(t) * c3_dtype_size(dt);
    t->data = xcalloc(1, bytes ? bytes : 1);
    t->owned = true;
    t->cat = cat;
    return C3_OK;
}
static void mk_free(c3_backend *be, c3_tensor *t) {
    (void)be;
    if (t->owned) free(t->data);
    t->data = NULL;
    t->owned = false;
}
/* stored as dst->dtype (bf16 rounded to nearest even, as the CUDA upload) */
static int mk_upload(c3_backend *be, c3_tensor *dst, const void *src, c3_dtype st) {
    (void)be;
    size_t n = (size_t)c3_numel(dst);
    if (st == dst->dtype) {
        memcpy(dst->data, src, n * c3_dtype_size(st));
        return C3_OK;
    }
    float *f = xmalloc((n ? n : 1) * sizeof(float));
    c3_to_f32(f, src, st, n);
    for (size_t i = 0; i < n; i++) {
        if (dst->dtype == C3_F32)
            ((float *)dst->data)[i] = f[i];
        else
            ((uint16_t *)dst->data)[i] = c3_f32_to_bf16(f[i]);
    }
    free(f);
    return C3_OK;
}
static int mk_host_alloc(c3_backend *be, void **p, size_t bytes) {
    (void)be;
    *p = xmalloc(bytes);
    g.host_alive++;
    return C3_OK;
}
static void mk_host_free(c3_backend *be, void *p) {
    (void)be;
    free(p);
    g.host_alive--;
}
typedef struct {
    bool timing, recorded_copy;
} mk_event;
static int mk_event_new(c3_backend *be, void **ev, bool timing) {
    (void)be;
    mk_event *e = xcalloc(1, sizeof *e);
    e->timing = timing;
    *ev = e;
    g.events++;
    return C3_OK;
}
static void mk_event_free(c3_backend *be, void *ev) {
    (void)be;
    free(ev);
    g.events--;
}
static int mk_event_record(c3_backend *be, void *ev, int queue) {
    (void)be;
    mk_event *e = ev;
    if (e->timing && queue == C3_Q_COPY && !e->recorded_copy) {
        e->recorded_copy = true;
        g.pending++;
    }
    return C3_OK;
}
static int mk_event_wait(c3_backend *be, void *ev, int queue) {
    (void)be;
    (void)ev;
    (void)queue;
    return C3_OK;
}
static int mk_event_ms(c3_backend *be, void *a, void *b, float *ms) {
    (void)be;
    mk_event *x = a, *y = b;
    if (!x->timing || !y->timing) return c3_fail(C3_EFAIL, "event_ms on a non-timing event");
    for (mk_event *e = x;; e = y) { /* both were recorded, and are waited for now */
        if (e->recorded_copy) g.pending--;
        e->recorded_copy = false;
        if (e == y) break;
    }
    *ms = 0;
    return C3_OK;
}
static int mk_upload_async(c3_backend *be, c3_tensor *dst, const void *src) {
    (void)be;
    size_t bytes = (size_t)c3_numel(dst) * c3_dtype_size(dst->dtype);
    memcpy(dst->data, src, bytes);
    g.async_bytes += (int64_t)bytes;
    g.async_calls++;
    return C3_OK;
}

static c3_backend stand_in(void) {
    c3_backend *cpu = c3_backend_cpu();
    c3_backend b = *cpu; /* a copy of the CPU's table, then the stand-ins */
    c3_backend_destroy(cpu);
    b.destroy = NULL;
    b.name = "stand-in";
    b.weight_dtype = C3_BF16;
    b.alloc = mk_alloc;
    b.free = mk_free;
    b.upload = mk_upload;
    b.host_alloc = mk_host_alloc;
    b.host_free = mk_host_free;
    b.event_new = mk_event_new;
    b.event_free = mk_event_free;
    b.event_record = mk_event_record;
    b.event_wait = mk_event_wait;
    b.event_ms = mk_event_ms;
    b.upload_async = mk_upload_async;
    b.graph_begin = NULL;
    b.graph_free = NULL;
    b.caps = C3_CAP_PINNED | C3_CAP_EVENTS | C3_CAP_ASYNC_UPLOAD;
    return b;
}

static bool same(const c3_tensor *a, const c3_tensor *b) {
    if (a->dtype != b->dtype || c3_numel(a) != c3_numel(b)) return false;
    if (!a->data || !b->data) return a->data == b->data;
    return !memcmp(a->data, b->data, (size_t)c3_numel(a) * c3_dtype_size(a->dtype));
}

/* Every weight tensor of a and b equal; *bf16 = the bytes of those stored as bf16. */
static int differing(c3_model *a, c3_model *b, int64_t *bf16) {
    int bad = 0;
    *bf16 = 0;
    for (int l = 0; l < a->c.layers; l++)
        for (int t = 0; t < 2; t++) {
            c3_tensor *ta[TOWER_NT], *tb[TOWER_NT];
            tower_list(t ? &a->lw[l].gen : &a->lw[l].und, ta);
            tower_list(t ? &b->lw[l].gen : &b->lw[l].und, tb);
            for (int i = 0; i < TOWER_NT; i++) {
                bad += !same(ta[i], tb[i]);
                if (ta[i]->data && ta[i]->dtype == C3_BF16 && ta[i]->owned)
                    *bf16 += c3_numel(ta[i]) * 2;
            }
        }
    const c3_tensor *xa[] = {&a->embed, &a->norm_gen, &a->proj_in, &a->proj_out, &a->proj_out_b},
                    *xb[] = {&b->embed, &b->norm_gen, &b->proj_in, &b->proj_out, &b->proj_out_b};
    for (size_t i = 0; i < C3_ARRAY_LEN(xa); i++)
        bad += !same(xa[i], xb[i]);
    return bad;
}

int main(void) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/share/models/demo",
             getenv("COSMOS3_SRCDIR") ? getenv("COSMOS3_SRCDIR") : ".");
    c3_ckpt ck;
    if (ckpt_open(&ck, dir, false) != C3_OK) {
        fprintf(stderr, "FAIL: %s\n", c3_errmsg());
        return 1;
    }
    c3_backend be = stand_in();
    T_CHECK(c3_backend_check(&be) == C3_OK, "the stand-in's capabilities: %s", c3_errmsg());
    c3_backend claims = be;
    claims.caps |= C3_CAP_GRAPHS; /* without the graph ops */
    T_CHECK(c3_backend_check(&claims) == C3_EFAIL && strstr(c3_errmsg(), "graph_begin"),
            "a backend claiming graphs it lacks passed the check: %s", c3_errmsg());
    c3_model *plain = NULL, *staged = NULL;
    setenv("COSMOS3_PINNED_LOAD", "0", 1);
    c3_env_reload(); /* the settings are read once (src/env.c) */
    int rc = model_load(&plain, &ck, &be, NULL);
    T_CHECK(rc == C3_OK, "plain load: %s", c3_errmsg());
    T_CHECK(g.async_calls == 0 && g.host_alive == 0,
            "the ring ran with COSMOS3_PINNED_LOAD=0: %lld calls", (long long)g.async_calls);
    setenv("COSMOS3_PINNED_LOAD", "1", 1);
    setenv("COSMOS3_PINNED_SLOT_BYTES", "4096", 1); /* a 64x64 bf16 weight: two buffers */
    c3_env_reload();
    rc = model_load(&staged, &ck, &be, NULL);
    T_CHECK(rc == C3_OK, "staged load: %s", c3_errmsg());
    if (plain && staged) {
        int64_t bf16 = 0;
        int bad = differing(plain, staged, &bf16);
        T_CHECK(bad == 0, "%d weight tensors differ between the ring and the plain upload", bad);
        /* the fused q/k/v and gate/up go in part by part: their bytes are the towers' bf16 bytes */
        T_CHECK(g.async_bytes >= bf16 && bf16 > 0,
                "%lld bytes through the ring, the towers hold %lld bf16 bytes",
                (long long)g.async_bytes, (long long)bf16);
        T_CHECK(g.async_calls >= g.async_bytes / 4096 && g.async_calls > 2 * 4,
                "%lld copies for %lld bytes: more than 4 KiB a copy, or the ring did not turn",
                (long long)g.async_calls, (long long)g.async_bytes);
        fprintf(stderr, "ring: %lld bytes in %lld copies, towers %lld bf16 bytes\n",
                (long long)g.async_bytes, (long long)g.async_calls, (long long)bf16);
    }
    T_CHECK(g.pending == 0, "%d copies not waited for when model_load returned", g.pending);
    T_CHECK(g.host_alive == 0 && g.events == 0, "the ring left %d pinned buffers and %d events",
            g.host_alive, g.events);
    unsetenv("COSMOS3_PINNED_LOAD");
    unsetenv("COSMOS3_PINNED_SLOT_BYTES");
    c3_env_reload();
    model_free(plain);
    model_free(staged);
    ckpt_close(&ck);
    return t_done("pinned_load");
}
