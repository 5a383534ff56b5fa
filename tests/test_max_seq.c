/* test_max_seq.c - the request's max_sequence_length cuts each prompt's
 * chat-template ids as vLLM-Omni does (issue 36, item 3): the first N ids
 * of the template, then <|im_end|> and <|vision_start|>, with a warning.
 *
 * On the demo model: a long prompt A and B, A cut at a word, share their
 * first N template ids (N: the longest common prefix). With
 * max_sequence_length N, A and B give the same latents (within 1e-6
 * relative L2), A's UND length is N + 2 and a warning names the cut; without
 * it A gives other latents than B and no warning. The tokenizer's ids with
 * the cut are checked against the uncut ones too. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cosmos3.h"
#include "cosmos3_tools.h"
#include "test_engine.h"
#include "test_util.h"

#define TOL 1e-6

static const char *const prompt_a =
    "a red circle on a blue background at the top, a bright and sharp red circle";
static const char *const prompt_b = "a red circle on a blue background";

typedef struct {
    float *x;
    int64_t n;
    int L_cond, L_uncond;
    bool warned;
} run_out;

static run_out run(cosmos3_engine *e, const char *prompt, int max_seq) {
    run_out o = {0};
    cosmos3_request rq;
    cosmos3_request_init(&rq);
    rq.prompt = prompt;
    rq.negative_prompt = "";
    rq.width = rq.height = 64;
    rq.steps = 4;
    rq.guidance = 4;
    rq.guidance_interval = 0;
    rq.seed = 9;
    rq.want_latents = true;
    rq.max_sequence_length = max_seq;
    cosmos3_result *r = NULL;
    char err[1024];
    int rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "\"%s\" max_sequence_length %d: %s", prompt, max_seq, err);
    if (rc == COSMOS3_OK) {
        o.x = t_result_latents(r, &o.n);
        o.L_cond = r->L_cond;
        o.L_uncond = r->L_uncond;
        for (int i = 0; i < r->nwarnings; i++)
            if (strstr(r->warnings[i], "max_sequence_length") &&
                strstr(r->warnings[i], "positive prompt"))
                o.warned = true;
    }
    cosmos3_result_free(r);
    return o;
}

static double rel_l2(const run_out *a, const run_out *b) {
    if (!a->x || !b->x || a->n != b->n) return INFINITY;
    double d = 0, s = 0;
    for (int64_t k = 0; k < a->n; k++) {
        d += ((double)a->x[k] - b->x[k]) * ((double)a->x[k] - b->x[k]);
        s += (double)b->x[k] * b->x[k];
    }
    return s > 0 ? sqrt(d / s) : sqrt(d);
}

int main(void) {
    const char *src = getenv("COSMOS3_SRCDIR");
    char demo[4096];
    snprintf(demo, sizeof demo, "%s/share/models/demo", src ? src : ".");
    char err[1024];

    /* the template ids as the engine builds them for this request (64x64
     * image, templates on, the checkpoint's system prompt) */
    cosmos3_tokenizer *tok = NULL;
    int rc = cosmos3_tokenizer_open(demo, &tok, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "tokenizer %s: %s", demo, err);
    if (rc) return t_done("max_seq");
    cosmos3_tokenize_params tp;
    cosmos3_tokenize_params_init(&tp);
    tp.templates = true;
    tp.width = tp.height = 64;
    tp.frames = 1;
    int32_t *ia = NULL, *ib = NULL;
    int na = 0, nb = 0;
    rc = cosmos3_tokenize(tok, &tp, prompt_a, strlen(prompt_a), &ia, &na, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "tokenize A: %s", err);
    rc |= cosmos3_tokenize(tok, &tp, prompt_b, strlen(prompt_b), &ib, &nb, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "tokenize B: %s", err);
    cosmos3_tokenizer_close(tok);
    if (rc) return t_done("max_seq");
    int N = 0; /* the common prefix of the two templates' ids (before the two appended) */
    while (N < na - 2 && N < nb - 2 && ia[N] == ib[N])
        N++;
    fprintf(stderr, "A: %d ids, B: %d ids, common prefix %d\n", na, nb, N);
    T_CHECK(N > 4 && N < nb - 2 && N < na - 2, "common prefix %d of %d and %d ids", N, na, nb);
    free(ia);
    free(ib);

    cosmos3_open_params op;
    cosmos3_open_params_init(&op);
    op.model = demo;
    op.device = "cpu";
    cosmos3_engine *e = NULL;
    rc = cosmos3_open(&op, &e, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "cosmos3_open %s: %s", demo, err);
    if (rc) return t_done("max_seq");

    /* a negative value is refused, naming the field */
    {
        cosmos3_request rq;
        cosmos3_request_init(&rq);
        rq.prompt = prompt_b;
        rq.max_sequence_length = -5;
        cosmos3_settings s;
        cosmos3_error er;
        rc = cosmos3_request_check(e, &rq, &s, &er);
        T_CHECK(rc == COSMOS3_EUSAGE && er.field == COSMOS3_FIELD_MAX_SEQUENCE_LENGTH,
                "max_sequence_length -5: status %d field %d (%s)", rc, (int)er.field, er.message);
    }

    run_out a_cut = run(e, prompt_a, N), b_cut = run(e, prompt_b, N), a_all = run(e, prompt_a, 0),
            b_all = run(e, prompt_b, 0), a_big = run(e, prompt_a, 100000);
    T_CHECK(a_cut.L_cond == N + 2, "A cut at %d: UND length %d, want %d", N, a_cut.L_cond, N + 2);
    T_CHECK(b_cut.L_cond == N + 2, "B cut at %d: UND length %d, want %d", N, b_cut.L_cond, N + 2);
    T_CHECK(a_all.L_cond == na, "A uncut: UND length %d, want %d", a_all.L_cond, na);
    T_CHECK(a_big.L_cond == na, "A with max_sequence_length 100000: UND length %d, want %d",
            a_big.L_cond, na);
    T_CHECK(a_cut.L_uncond <= N + 2, "the negative prompt cut too: %d ids", a_cut.L_uncond);
    T_CHECK(a_cut.warned && b_cut.warned, "a warning names the cut (A %d, B %d)", a_cut.warned,
            b_cut.warned);
    T_CHECK(!a_all.warned && !a_big.warned, "no cut, no warning (%d, %d)", a_all.warned,
            a_big.warned);
    double same = rel_l2(&a_cut, &b_cut), differ = rel_l2(&a_all, &b_all),
           big = rel_l2(&a_big, &a_all);
    fprintf(stderr, "rel L2: A vs B cut at %d %.3g, uncut %.3g; A 100000 vs A %.3g\n", N, same,
            differ, big);
    T_CHECK(same <= TOL, "A and B cut at %d tokens: rel L2 %.3g (want <= %g)", N, same, TOL);
    T_CHECK(differ > 1e-3, "A and B uncut: rel L2 %.3g, the prompts should differ", differ);
    T_CHECK(big <= TOL, "max_sequence_length above the prompt: rel L2 %.3g vs none", big);
    run_out *all[] = {&a_cut, &b_cut, &a_all, &b_all, &a_big};
    for (size_t i = 0; i < C3_ARRAY_LEN(all); i++)
        free(all[i]->x);
    cosmos3_close(e);
    return t_done("max_seq");
}
