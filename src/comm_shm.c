/* comm_shm.c - collectives between threads through shared host memory. */
#include "comm_shm.h"

#include <pthread.h>
#include <stdlib.h>

/* One communicator's shared state (all member ranks point at it). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, count;
    unsigned gen;
    const void **slot; /* [size] published pointers */
    int readers;       /* ranks copying from the published slots right now */
    volatile int *aborted;
} shm_shared;

typedef struct {
    c3_comm pub;
    shm_shared *sh;
} shm_comm;

struct c3_comm_group {
    int world;
    volatile int aborted;
    shm_shared *shared; /* all shared blocks */
    int nshared;
    shm_comm *comms;    /* [world * 4]: world, tp, sp, cfg per rank */
};

static int barrier(shm_shared *sh) {
    pthread_mutex_lock(&sh->mu);
    if (*sh->aborted) {
        while (sh->readers > 0) pthread_cond_wait(&sh->cv, &sh->mu); /* see below */
        pthread_mutex_unlock(&sh->mu);
        return c3_fail(C3_ECANCEL, "stopped because another rank failed");
    }
    unsigned gen = sh->gen;
    if (++sh->count == sh->size) {
        sh->count = 0;
        sh->gen++;
        pthread_cond_broadcast(&sh->cv);
    } else {
        while (gen == sh->gen && !*sh->aborted) pthread_cond_wait(&sh->cv, &sh->mu);
    }
    int ab = *sh->aborted && gen == sh->gen;
    /* Leaving early: peers may still be copying from this rank's buffers,
     * which the caller frees once we return; wait for them to finish. */
    while (ab && sh->readers > 0) pthread_cond_wait(&sh->cv, &sh->mu);
    pthread_mutex_unlock(&sh->mu);
    return ab ? c3_fail(C3_ECANCEL, "stopped because another rank failed") : C3_OK;
}

/* Bracket copies from peers' slots (between the two barriers of a
 * collective) so that an aborting rank does not free them under us. */
static int begin_read(shm_shared *sh) {
    pthread_mutex_lock(&sh->mu);
    int ab = *sh->aborted;
    if (!ab) sh->readers++;
    while (ab && sh->readers > 0) pthread_cond_wait(&sh->cv, &sh->mu); /* peers read our slot */
    pthread_mutex_unlock(&sh->mu);
    return ab ? c3_fail(C3_ECANCEL, "stopped because another rank failed") : C3_OK;
}
static void end_read(shm_shared *sh) {
    pthread_mutex_lock(&sh->mu);
    sh->readers--;
    pthread_cond_broadcast(&sh->cv);
    pthread_mutex_unlock(&sh->mu);
}

#define SH(c) (((shm_comm *)(c))->sh)

static size_t bytes_of(const c3_tensor *t) { return (size_t)c3_numel(t) * c3_dtype_size(t->dtype); }

static int shm_allreduce(c3_comm *c, c3_tensor *t) {
    shm_shared *sh = SH(c);
    if (t->dtype != C3_F32) return c3_fail(C3_EFAIL, "shm all-reduce: only F32 tensors");
    int64_t n = c3_numel(t);
    float *acc = xmalloc((size_t)n * sizeof(float));
    sh->slot[c->rank] = t->data;
    int rc = barrier(sh);
    if (rc == C3_OK) rc = begin_read(sh);
    if (rc) {
        free(acc);
        return rc;
    }
    memcpy(acc, sh->slot[0], (size_t)n * sizeof(float));
    for (int r = 1; r < c->size; r++) {
        const float *src = sh->slot[r];
        for (int64_t i = 0; i < n; i++) acc[i] += src[i];
    }
    end_read(sh);
    rc = barrier(sh); /* all have read */
    if (rc == C3_OK) memcpy(t->data, acc, (size_t)n * sizeof(float));
    free(acc);
    if (rc) return rc;
    return barrier(sh); /* nobody reuses its buffer before all have written */
}

static int shm_allgather_bytes(c3_comm *c, void *out, const void *in, size_t b) {
    shm_shared *sh = SH(c);
    sh->slot[c->rank] = in;
    C3_TRY(barrier(sh));
    C3_TRY(begin_read(sh));
    for (int r = 0; r < c->size; r++) memcpy((char *)out + (size_t)r * b, sh->slot[r], b);
    end_read(sh);
    return barrier(sh);
}

static int shm_allgather(c3_comm *c, c3_tensor *out, const c3_tensor *in) {
    if (bytes_of(out) != bytes_of(in) * (size_t)c->size)
        return c3_fail(C3_EFAIL, "shm all-gather: output holds %zu bytes, need %zu", bytes_of(out),
                       bytes_of(in) * (size_t)c->size);
    return shm_allgather_bytes(c, out->data, in->data, bytes_of(in));
}

static int shm_allgather_host(c3_comm *c, float *out, const float *in, int64_t n) {
    return shm_allgather_bytes(c, out, in, (size_t)n * sizeof(float));
}

static int shm_alltoall(c3_comm *c, c3_tensor *out, const c3_tensor *in) {
    shm_shared *sh = SH(c);
    size_t b = bytes_of(in);
    if (b % (size_t)c->size || bytes_of(out) != b)
        return c3_fail(C3_EFAIL, "shm all-to-all: %zu bytes do not split into %d equal chunks", b, c->size);
    size_t chunk = b / (size_t)c->size;
    sh->slot[c->rank] = in->data;
    C3_TRY(barrier(sh));
    C3_TRY(begin_read(sh));
    for (int r = 0; r < c->size; r++)
        memcpy((char *)out->data + (size_t)r * chunk, (const char *)sh->slot[r] + (size_t)c->rank * chunk, chunk);
    end_read(sh);
    return barrier(sh);
}

static int shm_broadcast(c3_comm *c, c3_tensor *t, int root) {
    shm_shared *sh = SH(c);
    if (c->rank == root) sh->slot[root] = t->data;
    C3_TRY(barrier(sh));
    C3_TRY(begin_read(sh));
    if (c->rank != root) memcpy(t->data, sh->slot[root], bytes_of(t));
    end_read(sh);
    return barrier(sh);
}

static int shm_barrier(c3_comm *c) { return barrier(SH(c)); }

static void shm_destroy(c3_comm *c) { (void)c; }

int comm_shm_create(const c3_plan *p, c3_comm_group **out) {
    c3_comm_group *g = xcalloc(1, sizeof *g);
    g->world = p->world;
    /* shared blocks: 1 world + cfg*sp tp-groups + cfg*tp sp-groups + tp*sp cfg-groups */
    int nblocks = 1 + p->cfg * p->sp + p->cfg * p->tp + p->tp * p->sp;
    g->shared = xcalloc((size_t)nblocks, sizeof *g->shared);
    g->comms = xcalloc((size_t)p->world * 4, sizeof *g->comms);
    int b = 0;
    shm_shared *world = &g->shared[b++];
    shm_shared *tpb = &g->shared[b];
    b += p->cfg * p->sp;
    shm_shared *spb = &g->shared[b];
    b += p->cfg * p->tp;
    shm_shared *cfb = &g->shared[b];
    g->nshared = nblocks;
    for (int i = 0; i < nblocks; i++) {
        pthread_mutex_init(&g->shared[i].mu, NULL);
        pthread_cond_init(&g->shared[i].cv, NULL);
        g->shared[i].aborted = &g->aborted;
    }
    world->size = p->world;
    for (int i = 0; i < p->cfg * p->sp; i++) tpb[i].size = p->tp;
    for (int i = 0; i < p->cfg * p->tp; i++) spb[i].size = p->sp;
    for (int i = 0; i < p->tp * p->sp; i++) cfb[i].size = p->cfg;
    for (int i = 0; i < nblocks; i++) g->shared[i].slot = xcalloc((size_t)g->shared[i].size, sizeof(void *));
    static const char *const names[4] = {"world", "tp", "sp", "cfg"};
    for (int r = 0; r < p->world; r++) {
        int s = plan_sp_rank(p, r), t = plan_tp_rank(p, r), c = plan_cfg_rank(p, r);
        shm_shared *blk[4] = {world, &tpb[c * p->sp + s], &spb[c * p->tp + t], &cfb[t * p->sp + s]};
        int rk[4] = {r, t, s, c}, sz[4] = {p->world, p->tp, p->sp, p->cfg};
        for (int k = 0; k < 4; k++) {
            shm_comm *m = &g->comms[r * 4 + k];
            m->sh = blk[k];
            m->pub = (c3_comm){.rank = rk[k], .size = sz[k], .name = names[k], .ctx = m,
                               .allreduce_sum = shm_allreduce, .allgather = shm_allgather,
                               .alltoall = shm_alltoall, .broadcast = shm_broadcast, .barrier = shm_barrier,
                               .allgather_host = shm_allgather_host, .destroy = shm_destroy};
        }
    }
    *out = g;
    return C3_OK;
}

void comm_shm_rank(c3_comm_group *g, int rank, c3_comm **world, c3_comm **tp, c3_comm **sp, c3_comm **cfg) {
    *world = &g->comms[rank * 4 + 0].pub;
    *tp = &g->comms[rank * 4 + 1].pub;
    *sp = &g->comms[rank * 4 + 2].pub;
    *cfg = &g->comms[rank * 4 + 3].pub;
}

void comm_shm_abort(c3_comm_group *g) {
    g->aborted = 1;
    for (int i = 0; i < g->nshared; i++) {
        pthread_mutex_lock(&g->shared[i].mu);
        pthread_cond_broadcast(&g->shared[i].cv);
        pthread_mutex_unlock(&g->shared[i].mu);
    }
}

void comm_shm_reset(c3_comm_group *g) {
    for (int i = 0; i < g->nshared; i++) {
        pthread_mutex_lock(&g->shared[i].mu);
        g->shared[i].count = 0;
        g->shared[i].readers = 0;
        pthread_mutex_unlock(&g->shared[i].mu);
    }
    g->aborted = 0;
}

void comm_shm_destroy(c3_comm_group *g) {
    if (!g) return;
    for (int i = 0; i < g->nshared; i++) {
        pthread_mutex_destroy(&g->shared[i].mu);
        pthread_cond_destroy(&g->shared[i].cv);
        free(g->shared[i].slot);
    }
    free(g->shared);
    free(g->comms);
    free(g);
}
