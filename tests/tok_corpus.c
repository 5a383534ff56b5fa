/* tok_corpus.c - encode a corpus for cross-checks: stdin holds one JSON
 * string per line; stdout gets the ids of each, space-separated, one line per
 * input ("ERROR <message>" when encoding fails).
 *
 *   tok_corpus [tokenizer.json] < corpus.jsonl
 *
 * Without an argument it uses share/tokenizer/tokenizer.json of the source
 * tree. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"
#include "tokenizer.h"

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : COSMOS3_SRCDIR "/share/tokenizer/tokenizer.json";
    c3_tokenizer *tok = NULL;
    if (tok_load(&tok, path) != C3_OK) {
        fprintf(stderr, "tok_corpus: %s\n", c3_errmsg());
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long lineno = 0;
    int status = 0;
    while ((got = getline(&line, &cap, stdin)) > 0) {
        lineno++;
        json_error_t err;
        json_t *j = json_loadb(line, (size_t)got, JSON_DECODE_ANY | JSON_ALLOW_NUL, &err);
        if (!json_is_string(j)) {
            fprintf(stderr, "tok_corpus: line %ld is not a JSON string: %s\n", lineno, err.text);
            json_decref(j);
            status = 1;
            break;
        }
        int32_t *ids = NULL;
        int n = 0;
        if (tok_encode(tok, json_string_value(j), json_string_length(j), &ids, &n) != C3_OK) {
            printf("ERROR %s\n", c3_errmsg());
        } else {
            for (int i = 0; i < n; i++)
                printf(i ? " %d" : "%d", ids[i]);
            putchar('\n');
        }
        free(ids);
        json_decref(j);
    }
    free(line);
    tok_free(tok);
    return status;
}
