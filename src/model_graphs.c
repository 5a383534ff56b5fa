/* model_graphs.c - the GEN layer loop as replayable graphs (see gen_graphs
 * in model_internal.h): backends with graph ops, one rank per branch, no
 * offload, no tracing. A key names every buffer the loop reads that is not
 * the model's own; the first call with a key runs eagerly, the second
 * records, the later ones replay. COSMOS3_GRAPHS=0 turns it off. */
#include "env.h"
#include "model_internal.h"

#include <stdlib.h>

void model_graphs(c3_model *m, bool on) {
    m->gg.off = !on;
}

static void gg_forget(c3_model *m) {
    for (int i = 0; i < GEN_GRAPH_SLOTS; i++) {
        if (m->gg.slot[i].exec) m->be->graph_free(m->be, m->gg.slot[i].exec);
        memset(&m->gg.slot[i], 0, sizeof m->gg.slot[i]);
    }
}
void gg_free(c3_model *m) {
    if (m->be && c3_has(m->be, C3_CAP_GRAPHS)) gg_forget(m);
    gen_acts_free(&m->gg.buf);
    m->gg.T = m->gg.hp = m->gg.wp = 0;
    m->gg.nb = 0;
}
bool gg_enabled(const c3_model *m) {
    return c3_has(m->be, C3_CAP_GRAPHS) && m->shard.sp_size <= 1 && m->shard.tp_size <= 1 &&
           !m->offload && !model_trace_hook && !m->gg.off && c3_env()->graphs;
}
/* The buffers for grid (T, hp, wp) and nb branches: kept when they fit it,
 * else remade (and every recorded graph, which names the old ones, forgotten). */
int gg_buffers(c3_model *m, int64_t T, int64_t hp, int64_t wp, int nb) {
    gen_graphs *g = &m->gg;
    if (g->T == T && g->hp == hp && g->wp == wp && g->nb == nb) return C3_OK;
    gg_free(m);
    int rc = gen_acts_alloc(m, &g->buf, T, hp, wp, nb, nb * T * hp * wp);
    if (rc) {
        gen_acts_free(&g->buf);
        return rc;
    }
    g->T = T, g->hp = hp, g->wp = wp, g->nb = nb;
    return C3_OK;
}
/* The key of one GEN layer loop: every buffer it reads that is not the
 * model's own (each branch's UND cache of each layer and RoPE tables) and
 * their sizes. */
static uint64_t gg_key(int nb, const c3_undkv *const *kvs, const c3_tensor *cs,
                       const c3_tensor *sn) {
    uint64_t h = c3_fnv1a(&nb, sizeof nb, C3_FNV_INIT);
    for (int b = 0; b < nb; b++) {
        const c3_undkv *kv = kvs[b];
        for (int l = 0; l < kv->layers; l++) {
            h = c3_fnv1a(&kv->k[l].data, sizeof(void *), h);
            h = c3_fnv1a(&kv->v[l].data, sizeof(void *), h);
        }
        h = c3_fnv1a(&kv->L, sizeof kv->L, h);
        h = c3_fnv1a(&cs[b].data, sizeof(void *), h);
        h = c3_fnv1a(&sn[b].data, sizeof(void *), h);
        h = c3_fnv1a(cs[b].ne, sizeof cs[b].ne, h);
    }
    return h;
}
/* The slot of key: found, else the least recently used one, reset. */
static int gg_slot(c3_model *m, uint64_t key) {
    gen_graphs *g = &m->gg;
    int lru = 0;
    for (int i = 0; i < GEN_GRAPH_SLOTS; i++) {
        if (g->slot[i].state && g->slot[i].key == key) {
            g->slot[i].used = ++g->tick;
            return i;
        }
        if (g->slot[i].used < g->slot[lru].used) lru = i;
    }
    if (g->slot[lru].exec) m->be->graph_free(m->be, g->slot[lru].exec);
    memset(&g->slot[lru], 0, sizeof g->slot[lru]);
    g->slot[lru].key = key;
    g->slot[lru].used = ++g->tick;
    return lru;
}

int gg_begin(c3_model *m, int nb, const c3_undkv *const *kvs, const c3_tensor *cs,
             const c3_tensor *sn, int *slot, bool *recording, bool *replayed) {
    c3_backend *be = m->be;
    *recording = *replayed = false;
    /* W8A8 and W8A16 steps queue different ops: one graph each */
    int s = gg_slot(m, gg_key(nb, kvs, cs, sn) ^ (m->gen_w8a8 ? 0x9e3779b97f4a7c15ull : 0));
    *slot = s;
    if (m->gg.slot[s].state == 2) {
        C3_TRY(be->graph_launch(be, m->gg.slot[s].exec));
        *replayed = true;
    } else if (m->gg.slot[s].state == 1) {
        C3_TRY(be->graph_begin(be));
        *recording = true;
    }
    return C3_OK;
}

int gg_end(c3_model *m, int slot, bool *recording) {
    c3_backend *be = m->be;
    if (!*recording) {
        m->gg.slot[slot].state = 1;
        return C3_OK;
    }
    void *exec = NULL;
    *recording = false;
    C3_TRY(be->graph_end(be, &exec));
    m->gg.slot[slot].exec = exec;
    m->gg.slot[slot].state = 2;
    return be->graph_launch(be, exec);
}

void gg_abort(c3_model *m, int slot) {
    c3_backend *be = m->be;
    void *exec = NULL;
    (void)be->graph_end(be, &exec);
    if (exec) be->graph_free(be, exec);
    m->gg.slot[slot].state = 0;
}
