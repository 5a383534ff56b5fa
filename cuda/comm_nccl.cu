/* comm_nccl.cu - NCCL communicators for ranks on distinct GPUs.
 *
 * ncclCommInitAll over the ranks' devices gives the world communicator (rank
 * r on p->devices[r]); ncclCommSplit, grouped from this one thread, cuts it
 * into the TP, Ulysses and CFG groups with plan.h's numbering (color = the
 * group, key = the rank inside it). Collectives are queued on each rank's
 * backend stream, so they are ordered after the ops that produced their
 * inputs; only the host exchange and the barrier wait for the device.
 * A failed rank aborts every communicator (NCCL kernels waiting for a peer
 * that will never come then return); reset builds them again. */
#include "cuda_internal.h"

#include <nccl.h>
#include <stdlib.h>

extern "C" {
#include "comm.h"
}

#define NC_NCOMM 4 /* world, tp, sp, cfg */

typedef struct {
    c3_comm pub;
    ncclComm_t nc;
    int device;
    cudaStream_t stream;
    float *scratch; /* device: host-exchange staging and the barrier's word */
    size_t scratch_bytes;
} nc_comm;

typedef struct {
    c3_comm_set pub;
    c3_plan plan;
    c3_backend *bes[C3_MAX_RANKS];
    nc_comm *comms; /* [world * NC_NCOMM] */
    volatile int aborted;
    bool live;      /* communicators exist */
} nc_set;

#define NCC(c) ((nc_comm *)(c))

static int nc_type(c3_dtype t, ncclDataType_t *out) {
    switch (t) {
    case C3_F32: *out = ncclFloat32; return C3_OK;
    case C3_BF16: *out = ncclBfloat16; return C3_OK;
    case C3_F16: *out = ncclFloat16; return C3_OK;
    default: return c3_fail(C3_EFAIL, "NCCL: tensors of type %s are not supported", c3_dtype_name(t));
    }
}

static size_t bytes_of(const c3_tensor *t) { return (size_t)c3_numel(t) * c3_dtype_size(t->dtype); }

static int grow(nc_comm *c, size_t bytes) {
    if (bytes <= c->scratch_bytes) return C3_OK;
    if (c->scratch) CU_CHECK(cudaFreeAsync(c->scratch, c->stream));
    c->scratch = NULL;
    c->scratch_bytes = 0;
    CU_CHECK(cudaMallocAsync((void **)&c->scratch, bytes, c->stream));
    c->scratch_bytes = bytes;
    return C3_OK;
}

static int nc_allreduce(c3_comm *cm, c3_tensor *t) {
    nc_comm *c = NCC(cm);
    ncclDataType_t dt = ncclFloat32;
    C3_TRY(nc_type(t->dtype, &dt));
    CU_CHECK(cudaSetDevice(c->device));
    NCCL_CHECK(ncclAllReduce(t->data, t->data, (size_t)c3_numel(t), dt, ncclSum, c->nc, c->stream));
    return C3_OK;
}

static int nc_allgather(c3_comm *cm, c3_tensor *out, const c3_tensor *in) {
    nc_comm *c = NCC(cm);
    if (bytes_of(out) != bytes_of(in) * (size_t)cm->size)
        return c3_fail(C3_EFAIL, "NCCL all-gather: output holds %zu bytes, need %zu", bytes_of(out),
                       bytes_of(in) * (size_t)cm->size);
    CU_CHECK(cudaSetDevice(c->device));
    NCCL_CHECK(ncclAllGather(in->data, out->data, bytes_of(in), ncclInt8, c->nc, c->stream));
    return C3_OK;
}

static int nc_alltoall(c3_comm *cm, c3_tensor *out, const c3_tensor *in) {
    nc_comm *c = NCC(cm);
    size_t b = bytes_of(in);
    if (b % (size_t)cm->size || bytes_of(out) != b)
        return c3_fail(C3_EFAIL, "NCCL all-to-all: %zu bytes do not split into %d equal chunks", b, cm->size);
    size_t chunk = b / (size_t)cm->size;
    CU_CHECK(cudaSetDevice(c->device));
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < cm->size; r++) {
        ncclResult_t a = ncclSend((const char *)in->data + (size_t)r * chunk, chunk, ncclInt8, r, c->nc, c->stream);
        ncclResult_t b2 = ncclRecv((char *)out->data + (size_t)r * chunk, chunk, ncclInt8, r, c->nc, c->stream);
        if (a != ncclSuccess || b2 != ncclSuccess) {
            (void)ncclGroupEnd();
            return c3_fail(C3_EFAIL, "NCCL all-to-all with rank %d: %s", r,
                           ncclGetErrorString(a != ncclSuccess ? a : b2));
        }
    }
    NCCL_CHECK(ncclGroupEnd());
    return C3_OK;
}

static int nc_broadcast(c3_comm *cm, c3_tensor *t, int root) {
    nc_comm *c = NCC(cm);
    CU_CHECK(cudaSetDevice(c->device));
    NCCL_CHECK(ncclBroadcast(t->data, t->data, bytes_of(t), ncclInt8, root, c->nc, c->stream));
    return C3_OK;
}

static int nc_barrier(c3_comm *cm) {
    nc_comm *c = NCC(cm);
    CU_CHECK(cudaSetDevice(c->device));
    C3_TRY(grow(c, sizeof(float)));
    NCCL_CHECK(ncclAllReduce(c->scratch, c->scratch, 1, ncclFloat32, ncclSum, c->nc, c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    return C3_OK;
}

static int nc_allgather_host(c3_comm *cm, float *out, const float *in, int64_t n) {
    nc_comm *c = NCC(cm);
    size_t b = (size_t)n * sizeof(float);
    CU_CHECK(cudaSetDevice(c->device));
    C3_TRY(grow(c, b * (size_t)(cm->size + 1)));
    float *mine = c->scratch + (size_t)cm->size * (size_t)n;
    CU_CHECK(cudaMemcpyAsync(mine, in, b, cudaMemcpyHostToDevice, c->stream));
    NCCL_CHECK(ncclAllGather(mine, c->scratch, (size_t)n, ncclFloat32, c->nc, c->stream));
    CU_CHECK(cudaMemcpyAsync(out, c->scratch, b * (size_t)cm->size, cudaMemcpyDeviceToHost, c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    return C3_OK;
}

static void nc_destroy_one(c3_comm *cm) { (void)cm; }

/* ------------------------------------------------------------------ set */

static void free_comms(nc_set *s, bool abort) {
    if (!s->comms) return;
    for (int i = 0; i < s->plan.world * NC_NCOMM; i++) {
        nc_comm *c = &s->comms[i];
        (void)cudaSetDevice(c->device);
        if (c->nc) (void)(abort ? ncclCommAbort(c->nc) : ncclCommDestroy(c->nc));
        c->nc = NULL;
        if (c->scratch) (void)cudaFree(c->scratch);
        c->scratch = NULL;
        c->scratch_bytes = 0;
    }
    (void)cudaGetLastError();
    s->live = false;
}

/* World communicators with ncclCommInitAll, then the three splits. */
static int build(nc_set *s) {
    const c3_plan *p = &s->plan;
    int W = p->world;
    ncclComm_t world[C3_MAX_RANKS];
    NCCL_CHECK(ncclCommInitAll(world, W, p->devices));
    static const char *const names[NC_NCOMM] = {"world", "tp", "sp", "cfg"};
    for (int r = 0; r < W; r++) {
        int sr = plan_sp_rank(p, r), tr = plan_tp_rank(p, r), cr = plan_cfg_rank(p, r);
        int rk[NC_NCOMM] = {r, tr, sr, cr}, sz[NC_NCOMM] = {W, p->tp, p->sp, p->cfg};
        for (int k = 0; k < NC_NCOMM; k++) {
            nc_comm *c = &s->comms[r * NC_NCOMM + k];
            c->device = p->devices[r];
            c->stream = c3_cuda_stream(s->bes[r]);
            c->pub = (c3_comm){.rank = rk[k], .size = sz[k], .name = names[k], .ctx = c,
                               .allreduce_sum = nc_allreduce, .allgather = nc_allgather, .alltoall = nc_alltoall,
                               .broadcast = nc_broadcast, .barrier = nc_barrier,
                               .allgather_host = nc_allgather_host, .destroy = nc_destroy_one};
        }
        s->comms[r * NC_NCOMM].nc = world[r];
    }
    s->live = true;
    /* split: one grouped call per kind (collective over the world) */
    for (int k = 1; k < NC_NCOMM; k++) {
        NCCL_CHECK(ncclGroupStart());
        for (int r = 0; r < W; r++) {
            int sr = plan_sp_rank(p, r), tr = plan_tp_rank(p, r), cr = plan_cfg_rank(p, r);
            int color = k == 1 ? cr * p->sp + sr : k == 2 ? cr * p->tp + tr : tr * p->sp + sr;
            int key = k == 1 ? tr : k == 2 ? sr : cr;
            ncclResult_t e = ncclCommSplit(world[r], color, key, &s->comms[r * NC_NCOMM + k].nc, NULL);
            if (e != ncclSuccess) {
                (void)ncclGroupEnd();
                return c3_fail(C3_EFAIL, "NCCL: splitting the %s groups failed on rank %d: %s", names[k], r,
                               ncclGetErrorString(e));
            }
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    return C3_OK;
}

static c3_comm *set_get(c3_comm_set *s, int rank, int which) {
    return &((nc_set *)s)->comms[rank * NC_NCOMM + which].pub;
}

static void set_abort(c3_comm_set *ps) {
    nc_set *s = (nc_set *)ps;
    s->aborted = 1;
    /* NCCL kernels waiting for the failed rank return once their
     * communicator is aborted; the ranks then see errors and stop. */
    for (int i = 0; s->live && i < s->plan.world * NC_NCOMM; i++)
        if (s->comms[i].nc) (void)ncclCommAbort(s->comms[i].nc), s->comms[i].nc = NULL;
}

static int set_reset(c3_comm_set *ps) {
    nc_set *s = (nc_set *)ps;
    if (!s->aborted) return C3_OK;
    free_comms(s, true);
    s->aborted = 0;
    return build(s);
}

static void set_destroy(c3_comm_set *ps) {
    nc_set *s = (nc_set *)ps;
    if (!s) return;
    free_comms(s, s->aborted);
    free(s->comms);
    free(s);
}

extern "C" int comm_nccl_create(const c3_plan *p, c3_backend *const *bes, c3_comm_set **out) {
    *out = NULL;
    for (int a = 0; a < p->world; a++) {
        if (!bes[a] || strcmp(bes[a]->name, "cuda") != 0)
            return c3_fail(C3_EFAIL, "NCCL communicator: rank %d has no CUDA backend", a);
        for (int b = 0; b < a; b++)
            if (p->devices[a] == p->devices[b])
                return c3_fail(C3_EUSAGE,
                               "NCCL needs one rank per GPU, but ranks %d and %d share GPU %d; the device-memory "
                               "communicator serves shared GPUs",
                               b, a, p->devices[a]);
    }
    nc_set *s = (nc_set *)xcalloc(1, sizeof *s);
    s->pub = (c3_comm_set){.kind = "nccl", .world = p->world, .get = set_get, .abort = set_abort,
                           .reset = set_reset, .destroy = set_destroy};
    s->plan = *p;
    for (int r = 0; r < p->world; r++) s->bes[r] = bes[r];
    s->comms = (nc_comm *)xcalloc((size_t)p->world * NC_NCOMM, sizeof *s->comms);
    int rc = build(s);
    if (rc) {
        free_comms(s, true);
        free(s->comms);
        free(s);
        return rc;
    }
    *out = &s->pub;
    return C3_OK;
}
