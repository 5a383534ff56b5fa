/* wan_vae_internal.h - what the Wan2.2 VAE decoder (wan_vae.c) shares with
 * its encoder (wan_vae_encode.c): the layer types and their functions, and
 * the time-chunk walk both run (vae_walk_chunks).
 *
 * A c3_vae is also the context the layers run in: its backend and the list
 * of every conv loaded through it (reset_history clears their causal
 * histories). The encoder keeps its layers in a context of its own
 * (vae_context), so encoding and decoding never share a history. */
#ifndef COSMOS3_WAN_VAE_INTERNAL_H
#define COSMOS3_WAN_VAE_INTERNAL_H

#include "wan_vae.h"

/* Link names with the module prefix; wan_vae.c defines them under the short names. */
#define load_conv vae_load_conv
#define load_res vae_load_res
#define load_attn vae_load_attn
#define free_conv vae_free_conv
#define free_res vae_free_res
#define conv_fwd vae_conv_fwd
#define res_fwd vae_res_fwd
#define attn_fwd vae_attn_fwd
#define reset_history vae_reset_history
#define add_shortcut vae_add_shortcut
#define block_fwd vae_block_fwd
#define mid_fwd vae_mid_fwd
#define head_fwd vae_head_fwd

/* A (causal) 3-D conv with its history. */
typedef struct {
    c3_tensor w, b;  /* [Cout, Cin, kt, kh, kw], [Cout] */
    c3_tensor wlast; /* [Cout, Cin, 1, kh, kw]: the last temporal tap (kt > 1) */
    int cin, cout, kt, kh, kw, pad;
    c3_tensor hist; /* [kt - 1, Cin, H*W] time-major, while live; on the decoder's
                       channels-last path [kt - 1 + T, H + 2, W + 2, Cin]: history, then chunk */
    bool hist_live;
    c3_tensor wcl; /* the decoder's channels-last path: the weight reordered by vcl_weight */
} vconv;

/* Residual block: RMS norm, SiLU, causal 3x3x3 conv, twice, plus the shortcut. */
typedef struct {
    c3_tensor g1, g2; /* norm gammas [Cin], [Cout] */
    vconv conv1, conv2, shortcut;
    bool has_shortcut;
} vres;

/* Mid-block attention: one head over the positions of each frame. */
typedef struct {
    c3_tensor gamma;        /* [C] */
    c3_tensor wqkv, bqkv;   /* [3C, C], [3C] */
    c3_tensor wproj, bproj; /* [C, C], [C] */
    int dim;
} vattn;

/* An empty context on `be` (no weights); vae_free releases it. */
c3_vae *vae_context(c3_backend *be);

/* Load "<prefix>.weight/.bias" of ck->vae into c (registered with v).
 * twod: stored as Conv2d [Cout, Cin, kh, kw]. */
int load_conv(c3_vae *v, const c3_ckpt *ck, vconv *c, const char *prefix, int cin, int cout, int kt,
              int kh, int kw, bool twod);
int load_res(c3_vae *v, const c3_ckpt *ck, vres *r, const char *prefix, int cin, int cout);
int load_attn(c3_vae *v, const c3_ckpt *ck, vattn *a, const char *prefix, int dim);
void free_conv(vconv *c);
void free_res(vres *r);

/* y = conv(x), x [Cin, T, H, W], stride 1, spatial padding kh / 2. A temporal
 * conv reads [history, x] (zeros before the first call) and, when keep,
 * leaves the last kt - 1 frames of that sequence as the next history. */
int conv_fwd(c3_vae *v, vconv *cv, const c3_tensor *x, c3_tensor *y, bool keep);
int res_fwd(c3_vae *v, vres *r, const c3_tensor *x, c3_tensor *y, bool keep);
int attn_fwd(c3_vae *v, vattn *at, const c3_tensor *x, c3_tensor *y);
/* Drop the history of every conv loaded through v. */
void reset_history(c3_vae *v);
/* y += sc, a block's shortcut of the same size; what names the block in the error. */
int add_shortcut(c3_vae *v, const char *what, c3_tensor *y, const c3_tensor *sc);
/* An up or down block's own parts (block_fwd): the resampler of its
 * ResBlocks' output a -> y and the shortcut of the block's input x -> y, each
 * NULL where the block has none (the decoder's upsampler and DupUp3D, the
 * encoder's downsampler and AvgDown3D). */
typedef struct {
    const char *what; /* names the block in its errors */
    int (*resample)(void *ud, const c3_tensor *a, c3_tensor *y);
    int (*shortcut)(void *ud, const c3_tensor *x, c3_tensor *y);
    void *ud;
} vblock;

/* The blocks the decoder and the encoder share, x [C, T, H, W] -> y: an up
 * or down block (its n >= 1 ResBlocks in a row, then k's resampler, plus k's
 * shortcut of x); the middle block (ResBlock, attention, ResBlock); the
 * output head (RMS norm and SiLU of x in place, then conv_out). */
int block_fwd(c3_vae *v, vres *res, int n, const vblock *k, const c3_tensor *x, c3_tensor *y,
              bool keep);
int mid_fwd(c3_vae *v, vres mid[2], vattn *at, const c3_tensor *x, c3_tensor *y, bool keep);
int head_fwd(c3_vae *v, const c3_tensor *gamma, vconv *conv, c3_tensor *x, c3_tensor *y, bool keep);

/* The forward chain of a chunk: run call, which writes b from a; b becomes a.
 * Needs rc, a, b and an out label in scope. */
#define VAE_STEP(call)                                                                             \
    do {                                                                                           \
        if ((rc = (call))) goto out;                                                               \
        c3_free(&a);                                                                               \
        a = b;                                                                                     \
        b = (c3_tensor){0};                                                                        \
    } while (0)

/* The time-chunk walk the decoder and the encoder share. Chunk c of n
 * (first: c == 0; keep: a later chunk follows, so every causal conv keeps
 * its history) is made on the device by body as y [Cy, tc, ...] with plane
 * elements per frame and channel; the walker downloads it and writes its
 * channels [0, C) at frames [t0, t0 + tc) of out [C, T, plane] (t0: the
 * frames so far), as (y - shift[ch]) * scale[ch] where scale is given, else
 * as they are. Unscaled walks of several chunks on backends with pinned host
 * memory go through two pinned staging buffers, the copy into out on a thread
 * of its own while the next chunk runs: out holds every frame when the walk
 * returns (not yet when on_chunk is called). After each chunk on_chunk(on_ud,
 * c, n), when given, may stop the walk with its status. The walk must fill
 * all T frames. */
typedef struct {
    const char *what; /* names the walk in its errors: "VAE decode" */
    int n;
    int64_t Cy, C, T, plane;
    float *out;
    const float *shift, *scale; /* [C] or NULL */
    int (*body)(void *ud, int c, bool first, bool keep, c3_tensor *y);
    void *ud;
    int (*on_chunk)(void *ud, int c, int n);
    void *on_ud;
} vae_walk;
int vae_walk_chunks(c3_backend *be, const vae_walk *w);

#endif
