/* model_offload.c - layerwise offload of the transformer's layers.
 *
 * The block weights of both towers live in pinned host memory (model_load
 * puts them there); each tower has a ring of two device slots. Layer l runs
 * from slot l % 2 while layer l + 1 is copied into the other on the copy
 * queue, ordered by events; the copies are timed for model_offload_stats. */
#include "model_internal.h"

#include <stdlib.h>

int ring_init(c3_model *m, tower_ring *g, tower_w *proto) {
    c3_backend *be = m->be;
    c3_tensor *src[TOWER_NT];
    tower_list(proto, src);
    g->t0 = xcalloc((size_t)m->c.layers, sizeof(void *));
    g->t1 = xcalloc((size_t)m->c.layers, sizeof(void *));
    g->timed = xcalloc((size_t)m->c.layers, sizeof(bool));
    g->layer_bytes = 0;
    for (int i = 0; i < TOWER_NT; i++)
        if (src[i]->data) g->layer_bytes += c3_numel(src[i]) * (int64_t)c3_dtype_size(src[i]->dtype);
    for (int s = 0; s < 2; s++) {
        c3_tensor *dst[TOWER_NT];
        g->slot[s].has_qk_norm = proto->has_qk_norm;
        g->slot[s].has_k_norm_gen = proto->has_k_norm_gen;
        tower_list(&g->slot[s], dst);
        for (int i = 0; i < TOWER_NT; i++)
            if (src[i]->data) {
                C3_TRY(
                    be->alloc(be, dst[i], src[i]->dtype, src[i]->ndim, src[i]->ne, C3_MEM_WEIGHTS));
                dst[i]->fp8 = src[i]->fp8;
            }
        tower_views(m, &g->slot[s]);
        C3_TRY(be->event_new(be, &g->ready[s], false));
        C3_TRY(be->event_new(be, &g->used[s], false));
    }
    for (int l = 0; l < m->c.layers; l++) {
        C3_TRY(be->event_new(be, &g->t0[l], true));
        C3_TRY(be->event_new(be, &g->t1[l], true));
    }
    return C3_OK;
}

void ring_free(c3_model *m, tower_ring *g) {
    c3_backend *be = m->be;
    for (int s = 0; s < 2; s++) /* copies still in flight finish before the slots go */
        if (g->ready[s]) (void)be->event_wait(be, g->ready[s], C3_Q_COMPUTE);
    (void)be->sync(be);
    for (int s = 0; s < 2; s++) {
        c3_tensor *ts[TOWER_NT];
        tower_list(&g->slot[s], ts);
        for (int i = 0; i < TOWER_NT; i++) c3_free(ts[i]);
        be->event_free(be, g->ready[s]);
        be->event_free(be, g->used[s]);
    }
    for (int l = 0; g->t0 && l < m->c.layers; l++) {
        be->event_free(be, g->t0[l]);
        be->event_free(be, g->t1[l]);
    }
    free(g->t0);
    free(g->t1);
    free(g->timed);
}

static tower_w *host_tower(c3_model *m, int tower, int l) { return tower ? &m->lw[l].gen : &m->lw[l].und; }

/* Queue the copy of layer l into its slot on the copy queue. */
static int ring_prefetch(c3_model *m, int tower, int l) {
    c3_backend *be = m->be;
    tower_ring *g = &m->ring[tower];
    int s = l % 2;
    c3_tensor *src[TOWER_NT], *dst[TOWER_NT];
    tower_list(host_tower(m, tower, l), src);
    tower_list(&g->slot[s], dst);
    C3_TRY(be->event_wait(be, g->used[s], C3_Q_COPY)); /* the slot's last layer is done */
    C3_TRY(be->event_record(be, g->t0[l], C3_Q_COPY));
    for (int i = 0; i < TOWER_NT; i++)
        if (src[i]->data) C3_TRY(be->upload_async(be, dst[i], src[i]->data));
    C3_TRY(be->event_record(be, g->t1[l], C3_Q_COPY));
    g->timed[l] = true;
    return be->event_record(be, g->ready[s], C3_Q_COPY);
}

/* Start of a forward: nothing queued so far may be overwritten by a copy. */
int ring_begin(c3_model *m, int tower) {
    if (!m->offload) return C3_OK;
    c3_backend *be = m->be;
    tower_ring *g = &m->ring[tower];
    for (int s = 0; s < 2; s++) C3_TRY(be->event_record(be, g->used[s], C3_Q_COMPUTE));
    return ring_prefetch(m, tower, 0);
}

/* The weights of layer l, ready for the compute queue; queues layer l + 1. */
int tower_acquire(c3_model *m, int tower, int l, const tower_w **w) {
    if (!m->offload) {
        *w = host_tower(m, tower, l);
        return C3_OK;
    }
    c3_backend *be = m->be;
    tower_ring *g = &m->ring[tower];
    C3_TRY(be->event_wait(be, g->ready[l % 2], C3_Q_COMPUTE));
    if (l + 1 < m->c.layers) C3_TRY(ring_prefetch(m, tower, l + 1));
    tower_w *sl = &g->slot[l % 2];
    if (m->fp8_any) { /* the slot holds layer l's codes now: its FP8 scales too */
        c3_tensor *src[TOWER_NT], *dst[TOWER_NT];
        tower_list(host_tower(m, tower, l), src);
        tower_list(sl, dst);
        for (int i = 0; i < TOWER_NT; i++)
            if (src[i]->data) dst[i]->fp8 = src[i]->fp8;
        tower_views(m, sl);
    }
    *w = sl;
    return C3_OK;
}

/* The compute queue is done with layer l's slot after the work queued so far. */
int tower_release(c3_model *m, int tower, int l) {
    if (!m->offload) return C3_OK;
    return m->be->event_record(m->be, m->ring[tower].used[l % 2], C3_Q_COMPUTE);
}

/* Add the finished copies' bytes and times to the totals. */
int ring_collect(c3_model *m, int tower) {
    if (!m->offload) return C3_OK;
    c3_backend *be = m->be;
    tower_ring *g = &m->ring[tower];
    for (int l = 0; l < m->c.layers; l++) {
        if (!g->timed[l]) continue;
        float ms = 0;
        C3_TRY(be->event_ms(be, g->t0[l], g->t1[l], &ms));
        g->timed[l] = false;
        m->h2d_bytes += g->layer_bytes;
        m->h2d_seconds += ms * 1e-3;
    }
    return C3_OK;
}

bool model_offloaded(const c3_model *m) { return m && m->offload; }

void model_offload_stats(const c3_model *m, int64_t *bytes, double *seconds) {
    *bytes = m && m->offload ? m->h2d_bytes : 0;
    *seconds = m && m->offload ? m->h2d_seconds : 0;
}
