/* serve_form.h - the parts of a multipart/form-data body (libmicrohttpd's
 * post processor hands them over in pieces): each text field in one growing
 * buffer, kept up to a cap and marked oversized past it (linear in the body,
 * whatever its size); one file part up to a larger cap. The values become a
 * JSON object of strings once the body is read, so a UTF-8 sequence split
 * across two pieces is whole. */
#ifndef COSMOS3_SERVE_FORM_H
#define COSMOS3_SERVE_FORM_H

#include <jansson.h>
#include <microhttpd.h>

#include "strbuf.h"

#define FORM_MAX_FIELDS 32 /* text fields of one form */

typedef struct {
    char key[64];
    c3_sbuf value;
    bool oversized;
} form_field;

typedef struct {
    size_t text_cap, file_cap; /* bytes kept of a text field, of the file part */
    form_field fields[FORM_MAX_FIELDS];
    int nfields;
    bool too_many, long_key; /* more fields than FORM_MAX_FIELDS, a name over 63 bytes */
    c3_sbuf file;
    bool has_file, bad_file, file_oversized;
    char file_key[64];
} form_ctx;

/* The post processor's callback (cls: a form_ctx with its caps set). */
enum MHD_Result form_piece(void *cls, enum MHD_ValueKind kind, const char *key,
                           const char *filename, const char *content_type,
                           const char *transfer_encoding, const char *data, uint64_t off,
                           size_t size);
/* The text fields as a JSON object of strings (*out), or false with a
 * one-line reason in err naming the field (oversized, not UTF-8, too many). */
bool form_fields_json(const form_ctx *f, json_t **out, char *param, size_t nparam, char *err,
                      size_t nerr);
void form_free(form_ctx *f);

#endif
