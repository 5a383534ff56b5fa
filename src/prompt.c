/* prompt.c - prompt assembly as the Cosmos3 pipeline does it (spec section 2,
 * steps 1-2): metadata sentences, the Qwen chat template, token ids,
 * truncation, then <|im_end|> and <|vision_start|>. */
#include "prompt.h"

#include <stdio.h>
#include <stdlib.h>

static const char SYSTEM_PROMPT_IMAGE[] =
    "You are a helpful assistant who will generate images from a give prompt.";
static const char SYSTEM_PROMPT_VIDEO[] =
    "You are a helpful assistant who will generate videos from a give prompt.";

/* Qwen chat template for [system?, user] with add_generation_prompt. */
static const char IM_START[] = "<|im_start|>";
static const char IM_END[] = "<|im_end|>";
static const char VISION_START[] = "<|vision_start|>";

#define SENTENCE_MAX 256

static bool is_video(const c3_prompt_opts *o) {
    return o->frames > 1;
}

/* base with its trailing periods stripped, then ". " and the sentence; the
 * sentence alone when nothing is left of base. Frees base. */
static char *append_sentence(char *base, const char *sentence) {
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '.')
        n--;
    size_t m = strlen(sentence);
    char *r = xmalloc(n + 2 + m + 1);
    if (n) {
        memcpy(r, base, n);
        memcpy(r + n, ". ", 2);
        memcpy(r + n + 2, sentence, m + 1);
    } else {
        memcpy(r, sentence, m + 1);
    }
    free(base);
    return r;
}

char *prompt_with_templates(const char *text, bool negative, const c3_prompt_opts *o) {
    char *s = xstrdup(text ? text : "");
    if (!o->templates) return s;
    char sentence[SENTENCE_MAX];
    if (is_video(o) && !o->skip_duration) {
        double seconds = o->fps > 0 ? (double)o->frames / o->fps : 0.0;
        snprintf(sentence, sizeof sentence,
                 negative ? "The video is not %.1f seconds long and is not of %.0f FPS."
                          : "The video is %.1f seconds long and is of %.0f FPS.",
                 seconds, o->fps);
        s = append_sentence(s, sentence);
    }
    if (!o->skip_resolution) {
        snprintf(sentence, sizeof sentence, "This %s is %sof %dx%d resolution.",
                 is_video(o) ? "video" : "image", negative ? "not " : "", o->height, o->width);
        s = append_sentence(s, sentence);
    }
    return s;
}

char *prompt_render(const char *text, bool negative, const c3_prompt_opts *o) {
    char *content = prompt_with_templates(text, negative, o);
    const char *sys = is_video(o) ? SYSTEM_PROMPT_VIDEO : SYSTEM_PROMPT_IMAGE;
    size_t n = strlen(content) + strlen(sys) + 8 * sizeof IM_START + 64;
    char *r = xmalloc(n);
    int k = 0;
    if (o->system_prompt) k = snprintf(r, n, "%ssystem\n%s%s\n", IM_START, sys, IM_END);
    snprintf(r + k, n - (size_t)k, "%suser\n%s%s\n%sassistant\n", IM_START, content, IM_END,
             IM_START);
    free(content);
    return r;
}

int prompt_ids(const c3_tokenizer *t, const char *text, bool negative, const c3_prompt_opts *o,
               int32_t **ids, int *n) {
    *ids = NULL;
    *n = 0;
    if (!text) text = "";
    size_t len = strlen(text);
    size_t bad = tok_utf8_invalid(text, len);
    if (bad < len)
        return c3_fail(
            C3_EINPUT,
            "%s prompt: invalid UTF-8 at byte %zu (0x%02x); give the prompt as UTF-8 text",
            negative ? "negative" : "positive", bad, (unsigned char)text[bad]);
    int32_t eos = tok_id(t, IM_END), vision_start = tok_id(t, VISION_START);
    if (eos < 0 || vision_start < 0)
        return c3_fail(C3_EMODEL,
                       "the tokenizer has no %s token; use the checkpoint's Qwen3 tokenizer.json",
                       eos < 0 ? IM_END : VISION_START);
    char *rendered = prompt_render(text, negative, o);
    int32_t *v = NULL;
    int m = 0;
    int rc = tok_encode(t, rendered, strlen(rendered), &v, &m);
    free(rendered);
    if (rc) return rc;
    /* as vLLM-Omni: the template's ids cut to max_sequence_length before the two appended */
    int cap = o && o->max_seq > 0 && o->max_seq < C3_MAX_SEQ ? o->max_seq : C3_MAX_SEQ;
    if (o && o->full) *o->full = m;
    if (m > cap) m = cap;
    v = xrealloc(v, (size_t)(m + 2) * sizeof *v);
    v[m++] = eos;
    v[m++] = vision_start;
    *ids = v;
    *n = m;
    return C3_OK;
}
