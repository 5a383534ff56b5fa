/* wan_vae_cl.h - what the Wan2.2 VAE decoder (wan_vae.c) shares with its
 * channels-last path (wan_vae_cl.c): the decoder's context (struct c3_vae)
 * and layer types, the profiling and trace helpers, and the channels-last
 * decode's two calls, which vae_decode runs as its chunk walk on backends
 * with C3_CAP_VAE_CL. The encoder (wan_vae_encode.c) does not include it. */
#ifndef COSMOS3_WAN_VAE_CL_H
#define COSMOS3_WAN_VAE_CL_H

#include "wan_vae.h"
#include "wan_vae_internal.h"

/* Link names with the module prefix; wan_vae.c defines them under the short names. */
#define prof_begin vae_prof_begin
#define prof_end vae_prof_end
#define act4 vae_act4
#define view vae_view
#define trace vae_trace
#define cl_chunk vae_cl_chunk
#define cl_prepare vae_cl_prepare

/* Frames of causal history kept per temporal conv (diffusers CACHE_T). */
enum { VAE_CACHE_T = 2 };
/* Spatial upsampling factor of every up block that upsamples (DupUp3D factor_s). */
enum { VAE_UP_S = 2 };
/* Temporal factor of an upsample3d block. */
enum { VAE_UP_T = 2 };
/* Output image channels promised by wan_vae.h. */
enum { VAE_IMG_CH = 3 };
enum { NAME_MAX_LEN = 160 };

typedef enum { UP_NONE, UP_2D, UP_3D } up_mode;

typedef struct {
    int cin, cout, nres;
    vres *res;
    up_mode mode;
    vconv time_conv, resample; /* resample: the 3x3 conv after nearest 2x */
    int ft, fs, repeats;       /* DupUp3D shortcut factors */
} vup;

struct c3_vae {
    c3_backend *be;
    c3_vconfig cfg;
    int z_dim, patch, dec_out, img_ch;
    vconv post_quant, conv_in, conv_out;
    vres mid[2];
    vattn attn;
    vup *up;
    int nup;
    c3_tensor norm_out; /* [C] */
    vconv **convs;      /* every conv, for history resets */
    int nconvs;
    bool cl;     /* decode in padded channels-last layout (backend vcl_* ops) */
    int cl_tcap; /* most frames a chunk has at any level (staging size) */
    /* one-frame decodes replayed as a recorded graph (backends with graph
     * ops): input and output buffers kept for one latent size; the first
     * decode of a size runs eagerly, the second records, later ones replay */
    struct {
        int h, w, state; /* state: 0 none, 1 seen once, 2 recorded */
        c3_tensor z, img;
        void *exec;
    } g;
};

/* Profiling (vae_prof set): wait for the device before and after an op and add
 * the wall time between to its kind, so the op's device work is counted. */
int prof_begin(c3_backend *be, double *t0);
int prof_end(c3_backend *be, int k, double t0, int rc);
/* In a function with rc, v and an out label: rc = call (timed into kind k), out on failure. */
#define PROF_TRY(k, call)                                                                          \
    do {                                                                                           \
        double t0_ = 0;                                                                            \
        if ((rc = prof_begin(v->be, &t0_))) goto out;                                              \
        if ((rc = prof_end(v->be, (k), t0_, (call)))) goto out;                                    \
    } while (0)

/* An activation [a, b, c, d] in the backend's activation type. */
int act4(c3_vae *v, c3_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d);
/* A view of ndim int64_t sizes, off elements into t. */
c3_tensor view(const c3_tensor *t, int64_t off, int ndim, ...);
/* Hand a layer's output to vae_trace_hook (tests) when set. */
void trace(const char *name, int chunk, const c3_tensor *t);

/* The channels-last decode's state across chunks: pq [CACHE_T + T, h, w,
 * z_dim], post_quant_conv of every latent frame behind CACHE_T zero frames. */
typedef struct {
    c3_vae *v;
    c3_tensor pq;
    int h, w;
    int64_t Ho, Wo;
} cl_walk;

/* Before the chunks: zr [z_dim, T, h, w] raw latents -> cw->pq (cw's v, h,
 * w, Ho, Wo set by the caller). */
int cl_prepare(cl_walk *cw, const float *zr, int T);
/* Chunk t (a vae_walk body): latent frame t -> img [C, Tc, Ho, Wo] F32,
 * unpatchified and clamped. */
int cl_chunk(void *ud, int t, bool first, bool keep, c3_tensor *img);

#endif
