/* backend.h - the operation table the model graph runs on.
 *
 * A backend owns tensors that live on one device (host memory for "cpu",
 * device memory for "cuda"). The model, VAE and sampler code call only the
 * functions below, so the same graph runs on every backend. All tensors are
 * contiguous, row-major, outermost dimension first. A view (c3_view) is a
 * window of a tensor's storage with a new shape; it owns nothing.
 *
 * Storage types: the CPU backend keeps everything in F32 (weights converted
 * once at upload). The CUDA backend keeps weights and activations in BF16 and
 * statistics in F32. Model code asks the backend which types it wants
 * (be->weight_dtype, be->act_dtype) and never touches tensor memory directly:
 * host data crosses only through upload/download.
 *
 * Every op returns C3_OK or an error status with c3_fail() recorded.
 */
#ifndef COSMOS3_BACKEND_H
#define COSMOS3_BACKEND_H

#include "common.h"

#define C3_MAX_DIMS 6

typedef struct c3_backend c3_backend;

/* Memory accounting per category (weights, kv cache, activations), in bytes,
 * maintained by the backend for the event stream and `cosmos3 info`. */
typedef enum { C3_MEM_WEIGHTS, C3_MEM_KV, C3_MEM_ACT, C3_MEM_NCAT } c3_memcat;

/* An FP8 (E4M3) linear weight [N, K]: rows [r0, r0 + rows[i]) of segment i
 * (the q, k, v or gate, up parts of a fused weight; 1 segment otherwise)
 * dequantise as code * wscale[i]. Activations entering the product are
 * quantised with xscale (the checkpoint's input_scale), or with a scale
 * taken per call from their own max |x| / 448 when xscale is 0 (weights
 * quantised at load, --precision fp8). Storage: the CPU backend holds the
 * weight dequantised in F32, the CUDA backend the E4M3 codes. */
#define C3_FP8_MAX_SEG 3
typedef struct {
    int nseg; /* 0: not an FP8 weight */
    int64_t rows[C3_FP8_MAX_SEG];
    float wscale[C3_FP8_MAX_SEG];
    float xscale;
} c3_fp8;

typedef struct {
    c3_backend *be;
    void *data;      /* device pointer (host pointer on the CPU) */
    c3_dtype dtype;  /* storage type */
    int ndim;
    int64_t ne[C3_MAX_DIMS];
    bool owned;      /* false for views */
    c3_memcat cat;   /* accounting category of owned storage */
    c3_fp8 fp8;      /* FP8 weights only (views start without) */
} c3_tensor;

static inline int64_t c3_numel(const c3_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->ne[i];
    return n;
}

/* A view of `n`-dim shape `ne` starting `offset` elements into t's storage. */
c3_tensor c3_view(const c3_tensor *t, int64_t offset, int ndim, const int64_t *ne);
/* Shorthand views: rows [r0, r0+nrows) of a tensor seen as [rows, cols]. */
c3_tensor c3_rows(const c3_tensor *t, int64_t r0, int64_t nrows);

/* One key/value segment of an attention call: k, v are [n, Hkv, D]. Keys at
 * positions >= valid are masked out (Ulysses padding); valid = n normally. */
typedef struct {
    const c3_tensor *k, *v;
    int64_t n, valid;
} c3_kvseg;

typedef enum { C3_ACT_SWIGLU, C3_ACT_RELU2 } c3_act;

/* Geometry of a channels-last VAE convolution (the vcl_* ops below). */
typedef struct {
    int T, H, W;   /* output frames and size; the input has T + kt - 1 frames of H x W */
    int cin, cout; /* channels (cin % 8 == 0, cout even) */
    int kt, ks;    /* temporal taps (1..3), spatial kernel 1 or 3 (padding ks / 2) */
    int a0;        /* first temporal tap used: 0, or kt - 1 where the history is zero */
} c3_vcl_geom;
/* Reordered weight wcl [roundup(cout, 256), kt*ks*ks, roundup(cin, 32)], zero padded. */
#define C3_VCL_COUT_ALIGN 256
#define C3_VCL_CIN_ALIGN 32
#define C3_VCL_WEIGHT_NUMEL(cout, cin, taps)                                                       \
    ((int64_t)(((cout) + C3_VCL_COUT_ALIGN - 1) / C3_VCL_COUT_ALIGN * C3_VCL_COUT_ALIGN) *         \
     (taps) * (((cin) + C3_VCL_CIN_ALIGN - 1) / C3_VCL_CIN_ALIGN * C3_VCL_CIN_ALIGN))

/* What a backend can do beyond the core ops: the bits of c3_backend.caps,
 * each naming a group of the optional ops below, all present when the bit
 * is set. The backend sets them; c3_backend_check holds them to the table
 * once, where the backend is made; callers test the bit, never pointers. */
enum {
    C3_CAP_PINNED = 1u << 0,       /* host_alloc, host_free: page-locked host memory */
    C3_CAP_EVENTS = 1u << 1,       /* event_new/free/record/wait/ms: two queues, timing */
    C3_CAP_ASYNC_UPLOAD = 1u << 2, /* upload_async on C3_Q_COPY */
    C3_CAP_GRAPHS = 1u << 3,       /* graph_begin/end/launch/free */
    C3_CAP_VAE_CL = 1u << 4,       /* the channels-last VAE ops vcl_* */
    C3_CAP_FP8 = 1u << 5,          /* quantize_e4m3: FP8 weights quantised on the device */
    C3_CAP_RANDOM = 1u << 6,       /* fill_random: random weights made on the device */
};

struct c3_backend {
    const char *name; /* "cpu" or "cuda" */
    int device;       /* GPU ordinal; -1 on the CPU */
    unsigned caps;    /* C3_CAP_* */
    c3_dtype weight_dtype, act_dtype;
    /* products with FP8 weights: true quantises the activations (W8A8, FP8 x
     * FP8); false multiplies the dequantised weights with 16-bit activations
     * (W8A16). Set by the model per tower and step (the checkpoint's policy). */
    bool fp8_act;
    /* attention in FP8 (--attention fp8): attn_fp8 is what the open asked
     * for (set once), attn_gen marks the GEN tower's attention calls (set
     * by the model around them); only calls with both run in FP8: Q, K, V
     * quantised per head to E4M3 (scale max|x| / 448), P in E4M3 (scaled by
     * 2^8), fp32 accumulation; the CPU emulates the same rounding (at any
     * head_dim). A call the backend cannot run in FP8 (CUDA: head_dim !=
     * 128, not bf16, no Hopper kernel; causal anywhere) runs in 16 bits
     * (fp32 on the CPU) and counts as declined, the first reason kept in
     * attn_fp8_why (static text). */
    bool attn_fp8, attn_gen;
    int64_t attn_fp8_calls, attn_fp8_declined;
    const char *attn_fp8_why;
    /* c3_backend_meta: tensors without storage (a load that only checks) */
    bool meta;
    void *ctx;        /* backend private state */
    int64_t mem[C3_MEM_NCAT], mem_peak;

    void (*destroy)(c3_backend *be);

    /* ---- memory ---- */
    /* Allocate a tensor of `dtype` (usually be->weight_dtype/act_dtype). */
    int (*alloc)(c3_backend *be, c3_tensor *t, c3_dtype dtype, int ndim, const int64_t *ne,
                 c3_memcat cat);
    void (*free)(c3_backend *be, c3_tensor *t);
    /* Copy numel(dst) host elements of type src_type into dst, converting. */
    int (*upload)(c3_backend *be, c3_tensor *dst, const void *src, c3_dtype src_type);
    /* Copy a tensor to host floats. */
    int (*download)(c3_backend *be, float *dst, const c3_tensor *src);
    /* dst[:] = src[:] (same numel; converts dtype). */
    int (*copy)(c3_backend *be, c3_tensor *dst, const c3_tensor *src);
    /* C3_CAP_RANDOM: dst (BF16 or F32) element i =
     * bf16(c3_random_weight(offset + i, amp)) of weights_random.h, made on
     * the device (cosmos3 bench's random checkpoint without a host copy). */
    int (*fill_random)(c3_backend *be, c3_tensor *dst, int64_t offset, float amp);
    /* C3_CAP_FP8: FP8 at load (--precision fp8): dst
     * (F8E4M3, numel(src)) = E4M3(src / s) rounded to nearest even and
     * saturated to +-448, src BF16 on the device; s = *scale when > 0, else
     * max|src| / 448 (1 when src is all zero), returned in *scale. The same
     * codes and scale as model_load.c's host loop (c3_f32_to_e4m3). */
    int (*quantize_e4m3)(c3_backend *be, c3_tensor *dst, const c3_tensor *src, float *scale);
    /* C3_CAP_PINNED: page-locked host memory (fast, asynchronous copies). */
    int (*host_alloc)(c3_backend *be, void **p, size_t bytes);
    void (*host_free)(c3_backend *be, void *p);
    /* C3_CAP_ASYNC_UPLOAD: on C3_Q_COPY, dst's bytes = host src, raw (src
     * already holds dst->dtype). */
    int (*upload_async)(c3_backend *be, c3_tensor *dst, const void *src);

    /* ---- transformer ---- */
    /* y[M,N] = (accumulate ? y : 0) + x[M,K] . w[N,K]^T + bias[N] (bias may be NULL).
     * w may be FP8 (w->fp8.nseg > 0): see c3_fp8 and fp8_act. */
    int (*linear)(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
                  const c3_tensor *bias, bool accumulate);
    /* Row RMSNorm over the last `dim` elements: y = w * x / sqrt(mean(x^2) + eps).
     * Statistics in fp32. mul_fp32 selects the Nemotron rounding (multiply in
     * fp32, then round); otherwise normalised x is rounded before the multiply
     * (Qwen). y may alias x. */
    int (*rmsnorm)(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w, int dim,
                   float eps, bool mul_fp32);
    /* In place rotate-half RoPE on x [N, H, D] with cos/sin [N, D]. */
    int (*rope)(c3_backend *be, c3_tensor *x, const c3_tensor *cos, const c3_tensor *sin);
    /* out[Sq, Hq, D] = softmax(scale * q k^T) v over the concatenated key
     * segments, GQA (head h reads kv head h / (Hq/Hkv)). causal: query i sees
     * keys j <= i + (total_keys - Sq) (only used with one segment). */
    int (*attention)(c3_backend *be, c3_tensor *out, const c3_tensor *q, const c3_kvseg *kv,
                     int nseg, bool causal, float scale);
    /* The attention inputs from the fused q/k/v product qkv [N, (Hq + 2 Hkv) D]
     * (each row: Hq query heads, Hkv key heads, Hkv value heads):
     * q [N, Hq, D] = rope(rmsnorm_D(q heads) * q_norm), k [N, Hkv, D] likewise
     * with k_norm, v [N, Hkv, D] copied. q_norm / k_norm NULL: no norm;
     * cos / sin [N, D] NULL: no rotation. The normalised head is stored in
     * q's type before the rotation, so the result equals rmsnorm then rope. */
    int (*qkv_rope)(c3_backend *be, c3_tensor *q, c3_tensor *k, c3_tensor *v, const c3_tensor *qkv,
                    const c3_tensor *q_norm, const c3_tensor *k_norm, const c3_tensor *cos,
                    const c3_tensor *sin, float eps, bool mul_fp32);
    /* out[M, I] = silu(gu[:, :I]) * gu[:, I:] (SWIGLU; gu [M, 2I], the fused
     * gate/up product: gate columns first) or relu(gu)^2 (RELU2; gu [M, I],
     * out may alias it). */
    int (*glu)(c3_backend *be, c3_tensor *out, const c3_tensor *gu, c3_act act);
    /* y += x (same numel). */
    int (*add)(c3_backend *be, c3_tensor *y, const c3_tensor *x);
    /* out[n, D] = table[ids[i], :]; ids on the host. */
    int (*embed)(c3_backend *be, c3_tensor *out, const c3_tensor *table, const int32_t *ids, int n);

    /* ---- VAE ---- */
    /* 3-D convolution, no temporal padding (the caller prepends the causal
     * cache), spatial zero padding ph, pw, stride 1:
     * x [Cin, T, H, W], w [Cout, Cin, kt, kh, kw], bias [Cout] or NULL,
     * y [Cout, T-kt+1, H+2ph-kh+1, W+2pw-kw+1]. */
    int (*conv3d)(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
                  const c3_tensor *bias, int ph, int pw);
    /* Channel RMS norm (Wan RMS_norm): x [C, N]; y[c,n] = x[c,n] / max(||x[:,n]||, 1e-12)
     * * sqrt(C) * gamma[c] (+ bias[c] if bias). y may alias x. */
    int (*chan_rmsnorm)(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *gamma,
                        const c3_tensor *bias);
    /* y = silu(x), elementwise; may alias. */
    int (*silu)(c3_backend *be, c3_tensor *y, const c3_tensor *x);
    /* y = permute(x): x has shape x->ne (ndim dims); y's dim i is x's dim perm[i]. */
    int (*permute)(c3_backend *be, c3_tensor *y, const c3_tensor *x, const int *perm);
    /* Nearest 2x spatial upsample: x [C, T, H, W] -> y [C, T, 2H, 2W]. */
    int (*upsample2x)(c3_backend *be, c3_tensor *y, const c3_tensor *x);
    /* y = a * x + b elementwise with per-channel a, b on host (len C, x [C, N]); a or b may be NULL. */
    int (*affine)(c3_backend *be, c3_tensor *y, const c3_tensor *x, const float *a, const float *b, int C);
    /* y = clamp(x, lo, hi). */
    int (*clamp)(c3_backend *be, c3_tensor *y, const c3_tensor *x, float lo, float hi);
    /* The encoder's downsampling conv: no temporal padding, zero padding
     * pad = {top, bottom, left, right}, strides stride = {st, sh, sw}:
     * x [Cin, T, H, W], w [Cout, Cin, kt, kh, kw], bias [Cout] or NULL,
     * y [Cout, (T-kt)/st+1, (H+top+bottom-kh)/sh+1, (W+left+right-kw)/sw+1]. */
    int (*conv3d_strided)(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *w,
                          const c3_tensor *bias, const int stride[3], const int pad[4]);
    /* AvgDown3D, the encoder's shortcut: x [Cin, T, H, W] with zero frames
     * put in front up to a multiple of ft; y [Cout, ceil(T/ft), H/fs, W/fs],
     * y[o, t, h, w] = the mean of the G = Cin*ft*fs*fs/Cout values
     * x[c, t*ft + a, h*fs + b, w*fs + d] whose index c*ft*fs*fs + a*fs*fs +
     * b*fs + d lies in [o*G, (o+1)*G). */
    int (*avgdown3d)(c3_backend *be, c3_tensor *y, const c3_tensor *x, int ft, int fs);

    /* channels-last decode (C3_CAP_VAE_CL; NULL where absent, e.g. cpu):
     * Activations are bf16 frames [F, H + 2, W + 2, C] with a zero border of
     * one pixel ("padded channels-last", C % 8 == 0); each op writes whole
     * frames, borders included, unless it says otherwise. wan_vae.c uses
     * these on bf16 backends; the fp32 check path keeps the ops above. */
    /* wcl = w [Cout, Cin, kt, ks, ks] reordered for vcl_conv (C3_VCL_WEIGHT_NUMEL elements). */
    int (*vcl_weight)(c3_backend *be, c3_tensor *wcl, const c3_tensor *w);
    /* y [T] = conv(x) + bias (+ res [T], same layout as y); x holds T + kt - 1 - a0 frames and
     * tap a reads frame t + a - a0; y must not alias x. */
    int (*vcl_conv)(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *wcl,
                    const c3_tensor *bias, const c3_tensor *res, const c3_vcl_geom *g);
    /* Channel RMS norm (as chan_rmsnorm, no bias) over each of N rows of C, then SiLU if silu. */
    int (*vcl_norm)(c3_backend *be, c3_tensor *y, const c3_tensor *x, const c3_tensor *gamma,
                    int64_t N, int C, bool silu);
    /* Nearest 2x: x [T, H, W, C] -> y [T, 2H, 2W, C]; interleave: x has 2C channels and
     * y 2T frames, frame 2t + s taken from channels [sC, (s+1)C) of frame t. */
    int (*vcl_upsample)(c3_backend *be, c3_tensor *y, const c3_tensor *x, int T, int H, int W,
                        int C, bool interleave);
    /* y += DupUp3D(x), interior only: x [T, H, W, Cin] -> [T ft (1 if trim), H fs, W fs, Cout]. */
    int (*vcl_dupup)(c3_backend *be, c3_tensor *y, const c3_tensor *x, int T, int H, int W, int Cin,
                     int Cout, int ft, int fs, bool trim);
    /* to_cl: x [C, T, H, W] -> y channels-last. Else x channels-last -> y [C/p^2, T, H p, W p]
     * (unpatchify, channel c p^2 + r p + q -> pixel (h p + q, w p + r)), clamped when lo < hi. */
    int (*vcl_layout)(c3_backend *be, c3_tensor *y, const c3_tensor *x, int T, int H, int W, int C,
                      int patch, bool to_cl, float lo, float hi);
    /* y[:] = 0 (any storage type). */
    int (*vcl_zero)(c3_backend *be, c3_tensor *y);

    /* ---- sync: queues, events, graphs ---- */
    /* Wait for all queued work. */
    int (*sync)(c3_backend *be);
    /* C3_CAP_EVENTS (NULL where absent, e.g. cpu): two queues, C3_Q_COMPUTE
     * (every op) and C3_Q_COPY (host->device weight streaming, layerwise
     * offload); events order them on the device, never the host. */
    /* An event; `timing` events can be timed with event_ms. */
    int (*event_new)(c3_backend *be, void **ev, bool timing);
    void (*event_free)(c3_backend *be, void *ev);
    /* Mark the point `queue` has reached. */
    int (*event_record)(c3_backend *be, void *ev, int queue);
    /* `queue` waits (on the device) until the work before ev's record is done. */
    int (*event_wait)(c3_backend *be, void *ev, int queue);
    /* Milliseconds between two recorded timing events (waits for b). */
    int (*event_ms)(c3_backend *be, void *a, void *b, float *ms);

    /* C3_CAP_GRAPHS (NULL where absent, e.g. cpu): record the ops queued
     * between graph_begin and graph_end on the compute queue (nothing runs
     * meanwhile) into a replayable graph. Every buffer an op reads or writes
     * is baked in: replay reads whatever they hold then. */
    int (*graph_begin)(c3_backend *be);
    /* End the recording; *graph is the instantiated graph (NULL on failure,
     * which also ends the recording). */
    int (*graph_end)(c3_backend *be, void **graph);
    int (*graph_launch)(c3_backend *be, void *graph);
    void (*graph_free)(c3_backend *be, void *graph);
};

/* Queues of the offload operations. */
enum { C3_Q_COMPUTE = 0, C3_Q_COPY = 1 };

/* Backends. c3_backend_cpu never fails; c3_backend_cuda fails when CUDA is
 * absent (built without it, or no device `device`). */
c3_backend *c3_backend_cpu(void);
/* Stores nothing: alloc keeps dtype and shape, upload/copy/permute/sync
 * accept and drop (src/backend_meta.c); for validating a load. */
c3_backend *c3_backend_meta(void);
int c3_backend_cuda(int device, c3_backend **out);
void c3_backend_destroy(c3_backend *be);
/* Every group be->caps claims is complete (C3_EFAIL naming the missing op). */
int c3_backend_check(const c3_backend *be);
static inline bool c3_has(const c3_backend *be, unsigned caps) {
    return (be->caps & caps) == caps;
}

/* Helpers over the table. */
int c3_alloc(c3_backend *be, c3_tensor *t, c3_dtype dtype, c3_memcat cat, int ndim, ...);
void c3_free(c3_tensor *t);

#endif
