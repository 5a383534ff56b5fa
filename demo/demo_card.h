/* demo_card.h - what the demo tests read from a demo model's card
 * (model_index.json "cosmos3"): the held-out combinations and whether the
 * card states clip scores (a model trained on clips). Header-only; the
 * tests that include it link jansson. */
#ifndef COSMOS3_TESTS_DEMO_CARD_H
#define COSMOS3_TESTS_DEMO_CARD_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "demo_world.h"

static inline int demo_card_find(const char *const *names, int n, json_t *js) {
    const char *s = json_string_value(js);
    for (int i = 0; s && i < n; i++)
        if (!strcmp(names[i], s)) return i;
    return -1;
}

/* The held-out (shape, colour, background) triples the card lists, at most
 * max of them (a malformed entry ends the list); *clips (may be NULL):
 * whether the card has "clip_scores". */
static inline int demo_card_held_out(const char *model, int held[][3], int max, bool *clips) {
    char path[4200];
    snprintf(path, sizeof path, "%s/model_index.json", model);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    json_t *c = j ? json_object_get(j, "cosmos3") : NULL;
    json_t *h = json_object_get(c, "held_out");
    if (clips) *clips = json_is_object(json_object_get(c, "clip_scores"));
    int n = 0;
    size_t i;
    json_t *x;
    if (json_is_array(h)) json_array_foreach(h, i, x) {
            if (n == max || json_array_size(x) != 3) break;
            held[n][0] = demo_card_find(demo_shape_names, DEMO_N_SHAPES, json_array_get(x, 0));
            held[n][1] = demo_card_find(demo_colour_names, DEMO_N_COLOURS, json_array_get(x, 1));
            held[n][2] = demo_card_find(demo_colour_names, DEMO_N_COLOURS, json_array_get(x, 2));
            if (held[n][0] < 0 || held[n][1] < 0 || held[n][2] < 0 || held[n][1] == held[n][2])
                break;
            n++;
        }
    json_decref(j);
    return n;
}

#endif
