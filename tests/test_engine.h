/* test_engine.h - what the engine-level tests share: the small generation
 * every layout test runs (80x48: a 3x5 latent grid, 6 GEN tokens, so
 * ulysses 4 pads) and its tiny8 checkpoint. */
#ifndef COSMOS3_TEST_ENGINE_H
#define COSMOS3_TEST_ENGINE_H

#include "mkmodel.h"
#include "options.h"
#include "test_util.h"

static inline void t_engine_settings(c3_settings *s, const char *model, const char *out) {
    memset(s, 0, sizeof *s);
    settings_defaults(s);
    settings_set(s, "model", model, CMD_GEN);
    settings_set(s, "prompt", "A red fox jumps over a frozen creek at dawn.", CMD_GEN);
    settings_set(s, "negative-prompt", "blurry", CMD_GEN);
    settings_set(s, "width", "80", CMD_GEN);
    settings_set(s, "height", "48", CMD_GEN);
    settings_set(s, "steps", "3", CMD_GEN);
    settings_set(s, "guidance", "5", CMD_GEN);
    settings_set(s, "guidance-interval", "none", CMD_GEN);
    settings_set(s, "seed", "11", CMD_GEN);
    settings_set(s, "overwrite", "on", CMD_GEN);
    settings_set(s, "output", out, CMD_GEN);
}

/* The parallel layout: --tp, --cfg-parallel, --ulysses. */
static inline void t_engine_layout(c3_settings *s, int tp, int cfg, int sp) {
    char v[16];
    snprintf(v, sizeof v, "%d", tp);
    settings_set(s, "tp", v, CMD_GEN);
    snprintf(v, sizeof v, "%d", cfg);
    settings_set(s, "cfg-parallel", v, CMD_GEN);
    snprintf(v, sizeof v, "%d", sp);
    settings_set(s, "ulysses", v, CMD_GEN);
}

/* A `mkmodel --preset tiny` checkpoint (8 KV heads, 2 layers) in dir/tiny8,
 * with the tokenizer of the source tree; out gets its path. */
static inline int t_make_tiny8(const char *dir, char *out, size_t n) {
    const char *src = getenv("COSMOS3_SRCDIR");
    char tokdir[4096];
    snprintf(out, n, "%s/tiny8", dir);
    snprintf(tokdir, sizeof tokdir, "%s/share/tokenizer", src ? src : ".");
    c3_mkmodel_opts mo = {.preset = "tiny", .layers = 2, .seed = 5, .out_dir = out, .tokenizer_dir = tokdir};
    return mkmodel_write(&mo);
}

#endif
