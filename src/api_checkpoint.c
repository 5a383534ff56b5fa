/* api_checkpoint.c - cosmos3_checkpoint_*: a checkpoint's configs, sizes and
 * plan without its weights (for `cosmos3 info`). */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "checkpoint.h"
#include "comm.h"
#include "cosmos3_tools.h"
#include "engine.h"
#include "model.h"
#include "plan.h"
#include "request.h"
#include "tokenizer.h"
#include "wan_vae.h"

struct cosmos3_checkpoint {
    c3_ckpt ck;
};

static int give_err(int rc, char *err, size_t errlen) {
    if (rc && err && errlen) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}

int cosmos3_checkpoint_open(const cosmos3_open_params *p, cosmos3_checkpoint **out, char *err,
                            size_t errlen) {
    if (!out)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_checkpoint_open: out is NULL"), err, errlen);
    *out = NULL;
    char dir[4096];
    cosmos3_model_dir(p ? p->model : NULL, dir, sizeof dir);
    cosmos3_checkpoint *c = xcalloc(1, sizeof *c);
    int rc = ckpt_open(&c->ck, dir, true);
    if (rc) {
        free(c);
        return give_err(rc, err, errlen);
    }
    *out = c;
    return C3_OK;
}

void cosmos3_checkpoint_close(cosmos3_checkpoint *c) {
    if (!c) return;
    ckpt_close(&c->ck);
    free(c);
}

void cosmos3_checkpoint_model(const cosmos3_checkpoint *c, cosmos3_model_info *out,
                              cosmos3_checkpoint_details *d) {
    const c3_ckpt *ck = &c->ck;
    engine_model_info(ck, out);
    if (!d) return;
    const c3_tconfig *t = &ck->t;
    c3_sizes sz;
    ckpt_sizes(ck, &sz);
    memset(d, 0, sizeof *d);
    d->mlp = t->mlp_gated ? "swiglu" : "relu2";
    d->intermediate = t->inter;
    d->vocab = t->vocab;
    d->patch_dim = t->patch_dim;
    d->rms_eps = t->eps;
    d->rope_theta = t->rope_theta;
    memcpy(d->mrope, t->mrope, sizeof d->mrope);
    d->und_qk_norm = t->und_qk_norm;
    d->und_k_norm_for_gen = t->und_k_norm_for_gen;
    d->und_params = sz.und_params;
    d->gen_params = sz.gen_params;
    d->vae_params = sz.vae_params;
    d->unused_params = sz.other_params;
    d->und_bytes = sz.und_bytes;
    d->gen_bytes = sz.gen_bytes;
    d->vae_bytes = sz.vae_bytes;
    d->unused_bytes = sz.other_bytes;
    d->scheduler = ck->s.class_name;
    d->karras_sigmas = ck->s.use_karras_sigmas;
    d->fillers = (const char *const *)ck->card.fillers;
    d->nfillers = ck->card.nfillers;
    d->scores_json = ck->card.scores_json;
    d->fp8 = t->fp8;
    for (int i = 0; i < ck->ntens; i++)
        if (ck->tens[i].t->dtype == C3_F8E4M3) {
            d->fp8_tensors++;
            d->fp8_params += st_numel(ck->tens[i].t);
        }
    d->fp8 |= d->fp8_tensors > 0;
    d->fp8_policy = t->fp8 && t->fp8_policy;
    d->fp8_first = d->fp8_policy ? t->fp8_first : 0;
    d->fp8_last = d->fp8_policy ? t->fp8_last : 0;
    d->random_weights = ck->random;
    d->random_amplitude = ck->random ? ck->random_amp : 0;
}

/* gen's load without its weights: the transformer and the VAE through their
 * loaders onto the meta backend (every name, shape, dtype and scale check
 * they make, in the order gen makes them), then the tokenizer. */
static int check_load(const c3_ckpt *ck, const cosmos3_open_params *p) {
    cosmos3_settings st;
    C3_TRY(request_plan_size(ck, p, &st));
    c3_backend *be = c3_backend_meta();
    c3_model *m = NULL;
    int rc = model_load(&m, ck, be, NULL);
    model_free(m);
    if (rc == C3_OK) {
        c3_vae *v = NULL;
        rc = vae_load(&v, ck, be);
        vae_free(v);
    }
    c3_backend_destroy(be);
    if (rc) return rc;
    c3_tokenizer *tok = NULL;
    rc = tok_load(&tok, ck->tokenizer_json);
    tok_free(tok);
    return rc;
}

int cosmos3_checkpoint_check(const cosmos3_checkpoint *c, const cosmos3_open_params *p, bool deep,
                             int64_t *tensors, int64_t *values, char *err, size_t errlen) {
    if (tensors) *tensors = 0;
    if (values) *values = 0;
    if (!c || !p)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_checkpoint_check: NULL argument"), err, errlen);
    int rc = check_load(&c->ck, p);
    if (rc || !deep) return give_err(rc, err, errlen);
    int64_t nt = 0, nv = 0;
    rc = ckpt_scan(&c->ck, &nt, &nv);
    if (tensors) *tensors = nt;
    if (values) *values = nv;
    if (rc) return give_err(rc, err, errlen);
    cosmos3_engine *e = NULL;
    rc = cosmos3_open(p, &e, err, errlen);
    cosmos3_close(e);
    return rc;
}

int cosmos3_checkpoint_plan(const cosmos3_checkpoint *c, const cosmos3_open_params *p, int width,
                            int height, int frames, cosmos3_layout *out, char **text, char *err,
                            size_t errlen) {
    if (text) *text = NULL;
    if (!c || !p || !out)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_checkpoint_plan: NULL argument"), err, errlen);
    c3_plan plan;
    int rc = plan_open(&plan, &c->ck, p, width, height, frames);
    if (rc) return give_err(rc, err, errlen);
    /* under a launcher (mpirun, srun): the plan across its processes */
    c3_procs pr;
    rc = comm_procs(&pr);
    if (rc == C3_OK) rc = comm_mpi_check(&plan, &pr);
    if (rc) return give_err(rc, err, errlen);
    engine_plan_layout(&plan, out);
    if (text) *text = engine_procs_text(&plan, &pr);
    return C3_OK;
}
