/* prompt.h - the pipeline's prompt assembly (spec section 2, steps 1-2):
 * optional duration/resolution sentences (positive and "is not" negative
 * forms), the Qwen chat template (optional system prompt), truncation at
 * max_sequence_length (at most 4096) ids, then <|im_end|> (eos) and <|vision_start|> appended. */
#ifndef COSMOS3_PROMPT_H
#define COSMOS3_PROMPT_H

#include "tokenizer.h"

#define C3_MAX_SEQ 4096

typedef struct {
    bool system_prompt;   /* add the system message */
    bool templates;       /* add the duration/resolution sentences */
    bool skip_duration;   /* with templates: leave out the duration sentence */
    bool skip_resolution; /* with templates: leave out the resolution sentence */
    int width, height;    /* pixels */
    int frames;           /* 1 = image */
    double fps;
    int max_seq; /* ids kept before the two appended (vLLM-Omni's max_sequence_length);
                    <= 0 or above C3_MAX_SEQ: C3_MAX_SEQ */
    int *full;   /* when not NULL: set to the template's id count before the cut */
} c3_prompt_opts;

/* The text after the templates for a positive (negative=false) or negative
 * prompt; xmalloc'd. */
char *prompt_with_templates(const char *text, bool negative, const c3_prompt_opts *o);
/* The rendered chat-template string; xmalloc'd. */
char *prompt_render(const char *text, bool negative, const c3_prompt_opts *o);
/* Full id list that reaches the transformer (template, truncation, eos,
 * vision_start). *ids xmalloc'd. */
int prompt_ids(const c3_tokenizer *t, const char *text, bool negative, const c3_prompt_opts *o,
               int32_t **ids, int *n);

#endif
