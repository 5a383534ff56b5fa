/* api_tokenizer.c - cosmos3_tokenizer_* and cosmos3_tokenize, the public calls
 * over tokenizer.c and prompt.c: a checkpoint's tokenizer and the prompt
 * templates as library calls (for `cosmos3 tokenize`), without any weights. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cosmos3_tools.h"
#include "prompt.h"
#include "tokenizer.h"

struct cosmos3_tokenizer {
    c3_tokenizer *tok;
    bool default_system_prompt; /* model_index.json default_use_system_prompt */
};

static int give_err(int rc, char *err, size_t errlen) {
    if (rc && err && errlen) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}

void cosmos3_tokenize_params_init(cosmos3_tokenize_params *p) {
    memset(p, 0, sizeof *p);
    p->system_prompt = -1;
    p->templates = true;
    p->frames = 1;
    p->fps = 24;
}

static int tokenizer_open(const char *model, cosmos3_tokenizer **out) {
    char dir[4096];
    cosmos3_model_dir(model, dir, sizeof dir);
    char *mi = c3_path_join(dir, "model_index.json"), *tj = NULL, *txt = NULL;
    c3_tokenizer *tok = NULL;
    c3_model_card card;
    int rc = C3_OK;
    if (!c3_file_exists(mi)) {
        rc = c3_fail(C3_EMODEL, "%s: missing; is %s a Diffusers-format Cosmos3 folder?", mi, dir);
        goto out;
    }
    rc = ckpt_read_card(dir, &card);
    if (rc) goto out;
    tj = ckpt_tokenizer_json(dir, &card);
    ckpt_card_free(&card);
    rc = tok_load(&tok, tj);
    if (rc) goto out;
    cosmos3_tokenizer *t = xcalloc(1, sizeof *t);
    t->tok = tok;
    t->default_system_prompt = true;
    if (c3_read_file(mi, &txt, NULL) == C3_OK) {
        json_t *j = json_loads(txt, 0, NULL);
        json_t *v = j ? json_object_get(j, "default_use_system_prompt") : NULL;
        if (json_is_boolean(v)) t->default_system_prompt = json_is_true(v);
        json_decref(j);
    }
    *out = t;
out:
    free(txt);
    free(tj);
    free(mi);
    return rc;
}

int cosmos3_tokenizer_open(const char *model, cosmos3_tokenizer **out, char *err, size_t errlen) {
    if (!out)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_tokenizer_open: out is NULL"), err, errlen);
    *out = NULL;
    return give_err(tokenizer_open(model, out), err, errlen);
}

void cosmos3_tokenizer_close(cosmos3_tokenizer *t) {
    if (!t) return;
    tok_free(t->tok);
    free(t);
}

int cosmos3_tokenize(const cosmos3_tokenizer *t, const cosmos3_tokenize_params *p, const char *text,
                     size_t len, int32_t **ids, int *n, char *err, size_t errlen) {
    if (!t || !p || !text || !ids || !n)
        return give_err(c3_fail(C3_EUSAGE, "cosmos3_tokenize: NULL argument"), err, errlen);
    *ids = NULL;
    *n = 0;
    if (p->raw) return give_err(tok_encode(t->tok, text, len, ids, n), err, errlen);
    bool video = p->frames > 1;
    c3_prompt_opts po = {.system_prompt =
                             p->system_prompt < 0 ? t->default_system_prompt : p->system_prompt > 0,
                         .templates = p->templates,
                         .width = p->width ? p->width : (video ? 1280 : 1024),
                         .height = p->height ? p->height : (video ? 720 : 1024),
                         .frames = p->frames,
                         .fps = p->fps};
    /* the templates read a NUL-terminated text */
    char *s = xmalloc(len + 1);
    memcpy(s, text, len);
    s[len] = 0;
    int rc = prompt_ids(t->tok, s, p->negative, &po, ids, n);
    free(s);
    return give_err(rc, err, errlen);
}
