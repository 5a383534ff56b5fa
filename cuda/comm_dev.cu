/* comm_dev.cu - collectives between rank threads whose tensors live in device
 * memory, for ranks that share a GPU (NCCL refuses two ranks on one device)
 * and for any mix of devices.
 *
 * Every collective is a "pull" in three phases:
 *   1. each rank records a ready event on its stream after the work that
 *      produced its buffer, publishes the buffer, and meets the others at a
 *      host barrier;
 *   2. each rank makes its stream wait for the peers' ready events and copies
 *      what it needs from their buffers into its own (cudaMemcpyPeerAsync on
 *      its stream), records a read event, and meets the others again;
 *   3. each rank makes its stream wait for the peers' read events before any
 *      later op may overwrite or free the buffer they read.
 * Nothing waits on the host for the device; a stream only ever waits for an
 * event that has already been recorded, so a failed rank cannot leave work
 * hanging on the device. All-reduce sums the gathered copies in rank order in
 * fp32 (one rounding), so every rank gets bit-identical results.
 * The host barriers, the slots and the abort are comm_shm's (rendezvous.h):
 * an aborting rank also waits for the peers' read events. */
#include "cuda_internal.h"

#include <stdlib.h>

extern "C" {
#include "comm.h"
#include "rendezvous.h"
}

#define DEV_NCOMM RDV_NCOMM

/* One communicator's device side, beside its rendezvous (rdv->ud points here). */
typedef struct {
    c3_rdv *rdv;        /* the slots hold the published buffers */
    cudaEvent_t *ready; /* [size] each member's ready event */
    cudaEvent_t *read;  /* [size] each member's read event */
    int *dev;           /* [size] each member's device */
} dev_shared;

typedef struct {
    c3_comm pub;
    dev_shared *sh;
    int device;
    cudaStream_t stream;
    c3_backend *be;
    cudaEvent_t ev_ready, ev_read;
    void *stage; /* all-reduce gather space on this rank's device */
    size_t stage_bytes;
} dev_comm;

typedef struct {
    c3_comm_set pub;
    c3_rdv_set set;
    dev_shared *shared; /* [set.n], beside set.r */
    dev_comm *comms;    /* [world * DEV_NCOMM] */
} dev_set;

#define DC(c) ((dev_comm *)(c))

static size_t bytes_of(const c3_tensor *t) { return (size_t)c3_numel(t) * c3_dtype_size(t->dtype); }

/* An aborting rank leaves only after the peers' copies from its buffers are
 * done (its caller frees them once we return): after the host readers, the
 * read events (rendezvous drain, mu held). */
static void drain_reads(c3_rdv *r) {
    dev_shared *sh = (dev_shared *)r->ud;
    for (int k = 0; k < r->size; k++)
        (void)cudaEventSynchronize(sh->read[k]);
    (void)cudaGetLastError();
}

/* Phase 1: buffer p is ready once this rank's queued work is done. */
static int publish(dev_comm *c, const void *p) {
    CU_CHECK(cudaSetDevice(c->device));
    CU_CHECK(cudaEventRecord(c->ev_ready, c->stream));
    c->sh->rdv->slot[c->pub.rank] = p;
    return rdv_barrier(c->sh->rdv);
}

/* Phase 2 copy: n bytes at offset `src_off` of member r's buffer -> dst. */
static int pull_from(dev_comm *c, int r, void *dst, size_t src_off, size_t n) {
    dev_shared *sh = c->sh;
    if (n == 0) return C3_OK;
    if (r != c->pub.rank) CU_CHECK(cudaStreamWaitEvent(c->stream, sh->ready[r], 0));
    const char *src = (const char *)sh->rdv->slot[r] + src_off;
    CU_CHECK(cudaMemcpyPeerAsync(dst, c->device, src, sh->dev[r], n, c->stream));
    return C3_OK;
}

/* End of phase 2 and phase 3. `rc` is the status of this rank's copies. */
static int finish(dev_comm *c, int rc) {
    dev_shared *sh = c->sh;
    if (rc == C3_OK && cudaEventRecord(c->ev_read, c->stream) != cudaSuccess)
        rc = c3_fail(C3_EFAIL, "device comm %s: cannot record an event: %s", c->pub.name,
                     cudaGetErrorString(cudaGetLastError()));
    rdv_end_read(sh->rdv);
    int rb = rdv_barrier(sh->rdv);
    if (rc) return rc;
    C3_TRY(rb);
    for (int r = 0; r < sh->rdv->size; r++)
        if (r != c->pub.rank) CU_CHECK(cudaStreamWaitEvent(c->stream, sh->read[r], 0));
    return C3_OK;
}

/* ------------------------------------------------------------ collectives */

/* out[i] = sum over ranks r (in order) of stage[r * n + i], rounded once. */
__global__ void k_sum_ranks(void *out, int ot, const void *stage, int st, int size, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float acc = cu_ld(stage, st, i);
        for (int r = 1; r < size; r++) acc += cu_ld(stage, st, (int64_t)r * n + i);
        cu_st(out, ot, i, acc);
    }
}

static int grow_stage(dev_comm *c, size_t bytes) {
    if (bytes <= c->stage_bytes) return C3_OK;
    if (c->stage) CU_CHECK(cudaFreeAsync(c->stage, c->stream));
    c->stage = NULL;
    c->stage_bytes = 0;
    CU_CHECK(cudaMallocAsync(&c->stage, bytes, c->stream));
    c->stage_bytes = bytes;
    return C3_OK;
}

static int dev_allreduce(c3_comm *cm, c3_tensor *t) {
    dev_comm *c = DC(cm);
    if (!cu_float_type(t->dtype))
        return c3_fail(C3_EFAIL, "device all-reduce: type %s; expected F32, BF16 or F16", c3_dtype_name(t->dtype));
    size_t b = bytes_of(t);
    int64_t n = c3_numel(t);
    CU_CHECK(cudaSetDevice(c->device));
    C3_TRY(grow_stage(c, b * (size_t)cm->size));
    C3_TRY(publish(c, t->data));
    C3_TRY(rdv_begin_read(c->sh->rdv));
    int rc = C3_OK;
    for (int r = 0; r < cm->size && rc == C3_OK; r++) rc = pull_from(c, r, (char *)c->stage + (size_t)r * b, 0, b);
    C3_TRY(finish(c, rc));
    if (n == 0) return C3_OK;
    k_sum_ranks<<<cu_grid(c->be, n), CU_THREADS, 0, c->stream>>>(t->data, t->dtype, c->stage, t->dtype,
                                                                 cm->size, n);
    CU_CHECK_LAUNCH();
    return C3_OK;
}

static int dev_allgather(c3_comm *cm, c3_tensor *out, const c3_tensor *in) {
    dev_comm *c = DC(cm);
    size_t b = bytes_of(in);
    if (bytes_of(out) != b * (size_t)cm->size)
        return c3_fail(C3_EFAIL, "device all-gather: output holds %zu bytes, need %zu", bytes_of(out),
                       b * (size_t)cm->size);
    C3_TRY(publish(c, in->data));
    C3_TRY(rdv_begin_read(c->sh->rdv));
    int rc = C3_OK;
    for (int r = 0; r < cm->size && rc == C3_OK; r++) rc = pull_from(c, r, (char *)out->data + (size_t)r * b, 0, b);
    return finish(c, rc);
}

static int dev_alltoall(c3_comm *cm, c3_tensor *out, const c3_tensor *in) {
    dev_comm *c = DC(cm);
    size_t b = bytes_of(in);
    if (b % (size_t)cm->size || bytes_of(out) != b)
        return c3_fail(C3_EFAIL, "device all-to-all: %zu bytes do not split into %d equal chunks", b, cm->size);
    if (out->data == in->data) return c3_fail(C3_EFAIL, "device all-to-all: in and out must differ");
    size_t chunk = b / (size_t)cm->size;
    C3_TRY(publish(c, in->data));
    C3_TRY(rdv_begin_read(c->sh->rdv));
    int rc = C3_OK;
    for (int r = 0; r < cm->size && rc == C3_OK; r++)
        rc = pull_from(c, r, (char *)out->data + (size_t)r * chunk, (size_t)cm->rank * chunk, chunk);
    return finish(c, rc);
}

static int dev_broadcast(c3_comm *cm, c3_tensor *t, int root) {
    dev_comm *c = DC(cm);
    if (root < 0 || root >= cm->size) return c3_fail(C3_EFAIL, "device broadcast: root %d of %d", root, cm->size);
    C3_TRY(publish(c, t->data));
    C3_TRY(rdv_begin_read(c->sh->rdv));
    int rc = cm->rank == root ? C3_OK : pull_from(c, root, t->data, 0, bytes_of(t));
    return finish(c, rc);
}

static int dev_barrier(c3_comm *cm) {
    dev_comm *c = DC(cm);
    CU_CHECK(cudaSetDevice(c->device));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    return rdv_barrier(c->sh->rdv);
}

/* Host buffers: plain copies between the threads (no device work). */
static int dev_allgather_host(c3_comm *cm, float *out, const float *in, int64_t n) {
    return rdv_allgather_bytes(DC(cm)->sh->rdv, cm->rank, out, in, (size_t)n * sizeof(float));
}

static void dev_destroy(c3_comm *cm) { (void)cm; }

/* ------------------------------------------------------------------ set */

static c3_comm *set_get(c3_comm_set *s, int rank, int which) {
    dev_set *d = (dev_set *)s;
    return &d->comms[rank * DEV_NCOMM + which].pub;
}

static void set_abort(c3_comm_set *s) {
    rdv_set_abort(&((dev_set *)s)->set);
}

static int set_reset(c3_comm_set *s) {
    rdv_set_reset(&((dev_set *)s)->set);
    return C3_OK;
}

static void set_destroy(c3_comm_set *s) {
    dev_set *d = (dev_set *)s;
    if (!d) return;
    if (d->comms)
        for (int i = 0; i < d->pub.world * DEV_NCOMM; i++) {
            dev_comm *c = &d->comms[i];
            if (!c->sh) continue;
            (void)cudaSetDevice(c->device);
            if (c->stream) (void)cudaStreamSynchronize(c->stream);
            if (c->stage) (void)cudaFree(c->stage);
            if (c->ev_ready) (void)cudaEventDestroy(c->ev_ready);
            if (c->ev_read) (void)cudaEventDestroy(c->ev_read);
        }
    (void)cudaGetLastError();
    for (int i = 0; d->shared && i < d->set.n; i++) {
        free(d->shared[i].ready);
        free(d->shared[i].read);
        free(d->shared[i].dev);
    }
    rdv_set_free(&d->set);
    free(d->shared);
    free(d->comms);
    free(d);
}

/* Peer access between every pair of distinct devices of the run (faster
 * copies where the hardware allows; copies work without it too). */
static void enable_peers(const c3_plan *p) {
    for (int a = 0; a < p->world; a++)
        for (int b = 0; b < p->world; b++) {
            int da = p->devices[a], db = p->devices[b], ok = 0;
            if (da == db) continue;
            if (cudaDeviceCanAccessPeer(&ok, da, db) != cudaSuccess || !ok || cudaSetDevice(da) != cudaSuccess)
                continue;
            (void)cudaDeviceEnablePeerAccess(db, 0); /* already enabled is fine */
            /* stream-ordered allocations (the backends' pools) need their own grant */
            cudaMemPool_t pool;
            if (cudaDeviceGetDefaultMemPool(&pool, db) == cudaSuccess) {
                cudaMemAccessDesc acc = {};
                acc.location.type = cudaMemLocationTypeDevice;
                acc.location.id = da;
                acc.flags = cudaMemAccessFlagsProtReadWrite;
                (void)cudaMemPoolSetAccess(pool, &acc, 1);
            }
        }
    (void)cudaGetLastError();
}

static int init_comm(dev_comm *m, c3_backend *be) {
    m->be = be;
    m->device = be->device;
    m->stream = c3_cuda_stream(be);
    CU_CHECK(cudaSetDevice(m->device));
    CU_CHECK(cudaEventCreateWithFlags(&m->ev_ready, cudaEventDisableTiming));
    CU_CHECK(cudaEventCreateWithFlags(&m->ev_read, cudaEventDisableTiming));
    return C3_OK;
}

extern "C" int comm_dev_create(const c3_plan *p, c3_backend *const *bes, c3_comm_set **out) {
    *out = NULL;
    for (int r = 0; r < p->world; r++)
        if (!bes[r] || strcmp(bes[r]->name, "cuda") != 0)
            return c3_fail(C3_EFAIL, "device communicator: rank %d has no CUDA backend", r);
    dev_set *d = (dev_set *)xcalloc(1, sizeof *d);
    d->pub = (c3_comm_set){.kind = "device", .world = p->world, .get = set_get, .abort = set_abort,
                           .reset = set_reset, .destroy = set_destroy};
    rdv_set_init(&d->set, p);
    d->shared = (dev_shared *)xcalloc((size_t)d->set.n, sizeof *d->shared);
    d->comms = (dev_comm *)xcalloc((size_t)p->world * DEV_NCOMM, sizeof *d->comms);
    for (int i = 0; i < d->set.n; i++) {
        dev_shared *sh = &d->shared[i];
        c3_rdv *rv = &d->set.r[i];
        sh->rdv = rv;
        rv->drain = drain_reads;
        rv->ud = sh;
        sh->ready = (cudaEvent_t *)xcalloc((size_t)rv->size, sizeof(cudaEvent_t));
        sh->read = (cudaEvent_t *)xcalloc((size_t)rv->size, sizeof(cudaEvent_t));
        sh->dev = (int *)xcalloc((size_t)rv->size, sizeof(int));
    }
    enable_peers(p);
    static const char *const names[DEV_NCOMM] = {"world", "tp", "sp", "cfg"};
    int rc = C3_OK;
    for (int r = 0; r < p->world && rc == C3_OK; r++) {
        c3_rdv *rv[DEV_NCOMM];
        int rk[DEV_NCOMM], sz[DEV_NCOMM];
        rdv_set_rank(&d->set, p, r, rv, rk, sz);
        for (int k = 0; k < DEV_NCOMM && rc == C3_OK; k++) {
            dev_comm *m = &d->comms[r * DEV_NCOMM + k];
            dev_shared *blk = &d->shared[rv[k] - d->set.r];
            m->sh = blk;
            m->pub = (c3_comm){.rank = rk[k], .size = sz[k], .name = names[k], .ctx = m,
                               .allreduce_sum = dev_allreduce, .allgather = dev_allgather,
                               .alltoall = dev_alltoall, .broadcast = dev_broadcast, .barrier = dev_barrier,
                               .allgather_host = dev_allgather_host, .destroy = dev_destroy};
            rc = init_comm(m, bes[r]);
            if (rc == C3_OK) {
                blk->ready[rk[k]] = m->ev_ready;
                blk->read[rk[k]] = m->ev_read;
                blk->dev[rk[k]] = m->device;
            }
        }
    }
    if (rc) {
        set_destroy(&d->pub);
        return rc;
    }
    *out = &d->pub;
    return C3_OK;
}
