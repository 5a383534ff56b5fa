/* rendezvous.c - the host barrier, slots and abort of the thread communicators (rendezvous.h). */
#include "rendezvous.h"

#include <stdlib.h>
#include <string.h>

void rdv_set_init(c3_rdv_set *s, const c3_plan *p) {
    /* 1 world + cfg*sp tp-groups + cfg*tp sp-groups + tp*sp cfg-groups */
    s->n = 1 + p->cfg * p->sp + p->cfg * p->tp + p->tp * p->sp;
    s->r = xcalloc((size_t)s->n, sizeof *s->r);
    s->aborted = 0;
    c3_rdv *tpb = s->r + 1, *spb = tpb + p->cfg * p->sp, *cfb = spb + p->cfg * p->tp;
    s->r[0].size = p->world;
    for (int i = 0; i < p->cfg * p->sp; i++)
        tpb[i].size = p->tp;
    for (int i = 0; i < p->cfg * p->tp; i++)
        spb[i].size = p->sp;
    for (int i = 0; i < p->tp * p->sp; i++)
        cfb[i].size = p->cfg;
    for (int i = 0; i < s->n; i++) {
        pthread_mutex_init(&s->r[i].mu, NULL);
        pthread_cond_init(&s->r[i].cv, NULL);
        s->r[i].aborted = &s->aborted;
        s->r[i].slot = xcalloc((size_t)s->r[i].size, sizeof(void *));
    }
}

void rdv_set_rank(c3_rdv_set *s, const c3_plan *p, int r, c3_rdv *blk[RDV_NCOMM],
                  int rank[RDV_NCOMM], int size[RDV_NCOMM]) {
    c3_rdv *tpb = s->r + 1, *spb = tpb + p->cfg * p->sp, *cfb = spb + p->cfg * p->tp;
    int sp = plan_sp_rank(p, r), tp = plan_tp_rank(p, r), cf = plan_cfg_rank(p, r);
    blk[0] = s->r, blk[1] = &tpb[cf * p->sp + sp], blk[2] = &spb[cf * p->tp + tp];
    blk[3] = &cfb[tp * p->sp + sp];
    rank[0] = r, rank[1] = tp, rank[2] = sp, rank[3] = cf;
    size[0] = p->world, size[1] = p->tp, size[2] = p->sp, size[3] = p->cfg;
}

void rdv_set_abort(c3_rdv_set *s) {
    s->aborted = 1;
    for (int i = 0; i < s->n; i++) {
        pthread_mutex_lock(&s->r[i].mu);
        pthread_cond_broadcast(&s->r[i].cv);
        pthread_mutex_unlock(&s->r[i].mu);
    }
}

void rdv_set_reset(c3_rdv_set *s) {
    for (int i = 0; i < s->n; i++) {
        pthread_mutex_lock(&s->r[i].mu);
        s->r[i].count = 0;
        s->r[i].readers = 0;
        pthread_mutex_unlock(&s->r[i].mu);
    }
    s->aborted = 0;
}

void rdv_set_free(c3_rdv_set *s) {
    for (int i = 0; s->r && i < s->n; i++) {
        pthread_mutex_destroy(&s->r[i].mu);
        pthread_cond_destroy(&s->r[i].cv);
        free(s->r[i].slot);
    }
    free(s->r);
    s->r = NULL;
    s->n = 0;
}

static int cancelled(void) {
    return c3_fail(C3_ECANCEL, "stopped because another rank failed");
}

/* An aborting rank, mu held: the peers' copies from its slot finish first. */
static void drain(c3_rdv *r) {
    while (r->readers > 0)
        pthread_cond_wait(&r->cv, &r->mu);
    if (r->drain) r->drain(r);
}

int rdv_barrier(c3_rdv *r) {
    pthread_mutex_lock(&r->mu);
    if (*r->aborted) {
        drain(r);
        pthread_mutex_unlock(&r->mu);
        return cancelled();
    }
    unsigned gen = r->gen;
    if (++r->count == r->size) {
        r->count = 0;
        r->gen++;
        pthread_cond_broadcast(&r->cv);
    } else {
        while (gen == r->gen && !*r->aborted)
            pthread_cond_wait(&r->cv, &r->mu);
    }
    int ab = *r->aborted && gen == r->gen;
    if (ab) drain(r);
    pthread_mutex_unlock(&r->mu);
    return ab ? cancelled() : C3_OK;
}

int rdv_begin_read(c3_rdv *r) {
    pthread_mutex_lock(&r->mu);
    int ab = *r->aborted;
    if (!ab) r->readers++;
    if (ab) drain(r);
    pthread_mutex_unlock(&r->mu);
    return ab ? cancelled() : C3_OK;
}

void rdv_end_read(c3_rdv *r) {
    pthread_mutex_lock(&r->mu);
    r->readers--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

int rdv_allgather_bytes(c3_rdv *r, int rank, void *out, const void *in, size_t b) {
    r->slot[rank] = in;
    C3_TRY(rdv_barrier(r));
    C3_TRY(rdv_begin_read(r));
    for (int k = 0; k < r->size; k++)
        memcpy((char *)out + (size_t)k * b, r->slot[k], b);
    rdv_end_read(r);
    return rdv_barrier(r);
}
