/* comm_shm.c - collectives between CPU rank threads through shared host
 * memory (comm.h's c3_comm_set): the world and its TP, Ulysses and CFG
 * groups, one rendezvous each (rendezvous.h). */
#include "comm.h"

#include <stdlib.h>

#include "rendezvous.h"

typedef struct {
    c3_comm pub;
    c3_rdv *sh;
} shm_comm;

typedef struct {
    c3_comm_set pub;
    c3_rdv_set set;
    shm_comm *comms; /* [world * RDV_NCOMM]: world, tp, sp, cfg per rank */
} shm_set;

#define SH(c) (((shm_comm *)(c))->sh)

static size_t bytes_of(const c3_tensor *t) { return (size_t)c3_numel(t) * c3_dtype_size(t->dtype); }

static int shm_allreduce(c3_comm *c, c3_tensor *t) {
    c3_rdv *sh = SH(c);
    if (t->dtype != C3_F32) return c3_fail(C3_EFAIL, "shm all-reduce: only F32 tensors");
    int64_t n = c3_numel(t);
    float *acc = xmalloc((size_t)n * sizeof(float));
    sh->slot[c->rank] = t->data;
    int rc = rdv_barrier(sh);
    if (rc == C3_OK) rc = rdv_begin_read(sh);
    if (rc) {
        free(acc);
        return rc;
    }
    memcpy(acc, sh->slot[0], (size_t)n * sizeof(float));
    for (int r = 1; r < c->size; r++) {
        const float *src = sh->slot[r];
        for (int64_t i = 0; i < n; i++) acc[i] += src[i];
    }
    rdv_end_read(sh);
    rc = rdv_barrier(sh); /* all have read */
    if (rc == C3_OK) memcpy(t->data, acc, (size_t)n * sizeof(float));
    free(acc);
    if (rc) return rc;
    return rdv_barrier(sh); /* nobody reuses its buffer before all have written */
}

static int shm_allgather(c3_comm *c, c3_tensor *out, const c3_tensor *in) {
    if (bytes_of(out) != bytes_of(in) * (size_t)c->size)
        return c3_fail(C3_EFAIL, "shm all-gather: output holds %zu bytes, need %zu", bytes_of(out),
                       bytes_of(in) * (size_t)c->size);
    return rdv_allgather_bytes(SH(c), c->rank, out->data, in->data, bytes_of(in));
}

static int shm_allgather_host(c3_comm *c, float *out, const float *in, int64_t n) {
    return rdv_allgather_bytes(SH(c), c->rank, out, in, (size_t)n * sizeof(float));
}

static int shm_alltoall(c3_comm *c, c3_tensor *out, const c3_tensor *in) {
    c3_rdv *sh = SH(c);
    size_t b = bytes_of(in);
    if (b % (size_t)c->size || bytes_of(out) != b)
        return c3_fail(C3_EFAIL, "shm all-to-all: %zu bytes do not split into %d equal chunks", b, c->size);
    size_t chunk = b / (size_t)c->size;
    sh->slot[c->rank] = in->data;
    C3_TRY(rdv_barrier(sh));
    C3_TRY(rdv_begin_read(sh));
    for (int r = 0; r < c->size; r++)
        memcpy((char *)out->data + (size_t)r * chunk, (const char *)sh->slot[r] + (size_t)c->rank * chunk, chunk);
    rdv_end_read(sh);
    return rdv_barrier(sh);
}

static int shm_broadcast(c3_comm *c, c3_tensor *t, int root) {
    c3_rdv *sh = SH(c);
    if (c->rank == root) sh->slot[root] = t->data;
    C3_TRY(rdv_barrier(sh));
    C3_TRY(rdv_begin_read(sh));
    if (c->rank != root) memcpy(t->data, sh->slot[root], bytes_of(t));
    rdv_end_read(sh);
    return rdv_barrier(sh);
}

static int shm_barrier(c3_comm *c) {
    return rdv_barrier(SH(c));
}

static void shm_destroy(c3_comm *c) { (void)c; }

static c3_comm *shm_get(c3_comm_set *s, int rank, int which) {
    return &((shm_set *)s)->comms[rank * RDV_NCOMM + which].pub;
}

static void shm_abort(c3_comm_set *s) {
    rdv_set_abort(&((shm_set *)s)->set);
}

static int shm_reset(c3_comm_set *s) {
    rdv_set_reset(&((shm_set *)s)->set);
    return C3_OK;
}

static void shm_set_destroy(c3_comm_set *s) {
    shm_set *g = (shm_set *)s;
    if (!g) return;
    rdv_set_free(&g->set);
    free(g->comms);
    free(g);
}

int comm_shm_create(const c3_plan *p, c3_comm_set **out) {
    shm_set *g = xcalloc(1, sizeof *g);
    g->pub = (c3_comm_set){.kind = "shm",
                           .world = p->world,
                           .get = shm_get,
                           .abort = shm_abort,
                           .reset = shm_reset,
                           .destroy = shm_set_destroy};
    rdv_set_init(&g->set, p);
    g->comms = xcalloc((size_t)p->world * RDV_NCOMM, sizeof *g->comms);
    static const char *const names[RDV_NCOMM] = {"world", "tp", "sp", "cfg"};
    for (int r = 0; r < p->world; r++) {
        c3_rdv *blk[RDV_NCOMM];
        int rk[RDV_NCOMM], sz[RDV_NCOMM];
        rdv_set_rank(&g->set, p, r, blk, rk, sz);
        for (int k = 0; k < RDV_NCOMM; k++) {
            shm_comm *m = &g->comms[r * RDV_NCOMM + k];
            m->sh = blk[k];
            m->pub = (c3_comm){.rank = rk[k],
                               .size = sz[k],
                               .name = names[k],
                               .ctx = m,
                               .allreduce_sum = shm_allreduce,
                               .allgather = shm_allgather,
                               .alltoall = shm_alltoall,
                               .broadcast = shm_broadcast,
                               .barrier = shm_barrier,
                               .allgather_host = shm_allgather_host,
                               .destroy = shm_destroy};
        }
    }
    *out = &g->pub;
    return C3_OK;
}
