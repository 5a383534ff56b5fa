/* serve_form.c - multipart/form-data parts into per-field buffers (see
 * serve_form.h). */
#include "serve_form.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static form_field *field_of(form_ctx *f, const char *key) {
    for (int i = 0; i < f->nfields; i++)
        if (!strcmp(f->fields[i].key, key)) return &f->fields[i];
    if (f->nfields == FORM_MAX_FIELDS) {
        f->too_many = true;
        return NULL;
    }
    if (strlen(key) >= sizeof f->fields[0].key) {
        f->long_key = true;
        return NULL;
    }
    form_field *x = &f->fields[f->nfields++];
    snprintf(x->key, sizeof x->key, "%s", key);
    return x;
}

enum MHD_Result form_piece(void *cls, enum MHD_ValueKind kind, const char *key,
                           const char *filename, const char *content_type,
                           const char *transfer_encoding, const char *data, uint64_t off,
                           size_t size) {
    (void)kind;
    (void)content_type;
    (void)transfer_encoding;
    form_ctx *f = cls;
    if (!key) return MHD_YES;
    if (filename) {
        if (f->has_file && strcmp(f->file_key, key)) f->bad_file = true;
        f->has_file = true;
        snprintf(f->file_key, sizeof f->file_key, "%s", key);
        if (f->file_oversized || f->file.len + size > f->file_cap)
            f->file_oversized = true;
        else
            sb_add(&f->file, data, size);
        return MHD_YES;
    }
    form_field *x = field_of(f, key);
    if (!x) return MHD_YES;
    if (off == 0 && x->value.len) { /* the same name again: the last one counts */
        x->value.len = 0;
        x->value.p[0] = 0;
        x->oversized = false;
    }
    if (x->oversized || x->value.len + size > f->text_cap)
        x->oversized = true;
    else
        sb_add(&x->value, data, size);
    return MHD_YES;
}

bool form_fields_json(const form_ctx *f, json_t **out, char *param, size_t nparam, char *err,
                      size_t nerr) {
    *out = NULL;
    param[0] = 0;
    if (f->too_many) {
        snprintf(err, nerr, "the form has more than %d fields", FORM_MAX_FIELDS);
        return false;
    }
    if (f->long_key) {
        snprintf(err, nerr, "a form field's name is longer than %zu bytes",
                 sizeof f->fields[0].key - 1);
        return false;
    }
    json_t *o = json_object();
    for (int i = 0; i < f->nfields; i++) {
        const form_field *x = &f->fields[i];
        json_t *name = json_string(x->key); /* jansson takes UTF-8 names only */
        if (!name) {
            param[0] = 0;
            snprintf(err, nerr, "a form field's name is not UTF-8 text");
            json_decref(o);
            return false;
        }
        json_decref(name);
        snprintf(param, nparam, "%s", x->key);
        if (x->oversized) {
            snprintf(err, nerr, "%.60s: at most %zu bytes in a form field", x->key, f->text_cap);
            json_decref(o);
            return false;
        }
        json_t *v = json_stringn(x->value.p ? x->value.p : "", x->value.len);
        if (!v) {
            snprintf(err, nerr, "%.60s: not UTF-8 text", x->key);
            json_decref(o);
            return false;
        }
        json_object_set_new(o, x->key, v);
    }
    param[0] = 0;
    *out = o;
    return true;
}

void form_free(form_ctx *f) {
    for (int i = 0; i < f->nfields; i++)
        free(f->fields[i].value.p);
    free(f->file.p);
    memset(f, 0, sizeof *f);
}
