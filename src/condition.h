/* condition.h - image-to-video and video-to-video conditioning, as upstream
 * diffusers Cosmos3OmniPipeline does it (prepare_latents,
 * _preprocess_conditioning_image, _prepare_vision_segment):
 *
 *   picture --resize to cover (bilinear, antialias), centre crop, round--> one frame
 *     the conditioning clip: that frame F times            pinned: latent frame 0
 *   clip --each frame resized to the target (PIL bilinear)--> frames
 *     keep the first / last max(index) * 4 + 1, repeat the last kept one to F
 *                                                          pinned: the indexes
 *   clip --Wan2.2 encoder--> x0 [C, T, h, w]
 *   initial latents = mask * x0 + (1 - mask) * noise
 *
 * The pinned latent frames' tokens enter the GEN tower clean and carry no
 * timestep, and their velocity is zero (model_gen's c3_latent_geom.pinned),
 * so UniPC leaves them at x0; the distilled fixed-step SDE re-noises every
 * position, and denoise.c sets them back to x0 (cond_mix) after each step. */
#ifndef COSMOS3_CONDITION_H
#define COSMOS3_CONDITION_H

#include "common.h"
#include "wan_vae_encode.h"

/* Frames in memory: uint8 RGB [frames, height, width, 3], row-major. */
typedef struct {
    const uint8_t *rgb;
    int width, height, frames;
} c3_media;

typedef enum { C3_KEEP_FIRST = 0, C3_KEEP_LAST = 1 } c3_keep;

/* What a request conditions on: a picture or a clip, not both. */
typedef struct {
    const c3_media *image; /* image-to-video: one picture */
    const c3_media *video; /* video-to-video: a clip */
    const int *indexes;    /* the clip's latent frames to pin; NULL: 0 and 1 */
    int nindexes;
    c3_keep keep; /* which end of the clip is kept */
} c3_cond_input;

/* A request's conditioning, ready for the sampler. */
typedef struct {
    int T, h, w, C;  /* latent grid and channels */
    float *x0;       /* [C, T, h, w]: the encoded clip (zeros on frames that are not pinned) */
    uint8_t *pinned; /* [T]: 1 where the latent frame is given */
    int npinned;
} c3_condition;

/* Whether `in` asks for any conditioning. */
bool cond_given(const c3_cond_input *in);

/* Check a request against the output of F frames (1 + 4k) of W x H pixels,
 * `tscale` frames per latent frame (the VAE's scale_factor_temporal): the
 * refusals of upstream's check_inputs, and a clip too short for its
 * indexes. C3_EUSAGE / C3_EINPUT with a one-line message naming the fix. */
int cond_check(const c3_cond_input *in, int F, int W, int H, int tscale);

/* The conditioning clip of F frames in [-1, 1], as upstream builds it
 * before encoding: its first `nframes` frames, [3, nframes, H, W]
 * (xmalloc'd). The encoder is causal (frames from 4k + 1 on cannot change
 * latent frames <= k), so the pinned frames need only a prefix; nframes = F
 * gives the whole clip. */
int cond_pixels(const c3_cond_input *in, int F, int W, int H, int tscale, int nframes, float **out);

/* cond_check, cond_pixels for the frames the pinned latents need, the
 * encoder: fills out (free with cond_free). */
int cond_prepare(const c3_cond_input *in, c3_vae_enc *enc, int F, int W, int H, int tscale,
                 c3_condition *out);
void cond_free(c3_condition *c);

/* x [C, T, h, w] (the pure noise on entry) = mask * x0 + (1 - mask) * x. */
void cond_mix(const c3_condition *c, float *x);

/* First-last boundary to video (vLLM-Omni's tools/cosmos3_fl2v): a start
 * `a` and an end `b`, each a picture (1 frame) or a clip, become one
 * conditioning clip of F frames of W x H and its pinned latent frames:
 *   start picture: frame 0                       pins latent 0
 *   start clip:    its first 4k+1 frames          pins latents 0..k
 *   end picture:   the last 4 frames (tscale)     pins latent T-1
 *   end clip:      its last 4j+1 frames           pins latents T-1-j..T-1
 * and every frame between repeats the end's first kept frame (the filler is
 * noise after mixing, but the causal encoder sees it before the end's
 * frames). Pictures are preprocessed as upstream's i2v picture (cover,
 * centre crop, round), clip frames as its clip frames (PIL bilinear), so
 * the clip is already at W x H. Pass the result as a video with keep
 * first; *rgb (xmalloc'd) holds its frames. C3_EUSAGE when the two ends
 * overlap on the latent timeline. */
int cond_first_last(const c3_media *a, const c3_media *b, int F, int W, int H, int tscale,
                    uint8_t **rgb, c3_media *clip, int *idx, int max, int *n);

/* The two resizes, exposed for the tests. Picture: torch's
 * F.interpolate(bilinear, antialias=True, align_corners=False) on floats to
 * rw x rh, [3, rh, rw] out. Frame: PIL's Image.resize(BILINEAR) on uint8
 * (fixed-point, two passes), [rh, rw, 3] out. */
void cond_resize_aa(const uint8_t *rgb, int sw, int sh, int rw, int rh, float *out);
void cond_resize_pil(const uint8_t *rgb, int sw, int sh, int rw, int rh, uint8_t *out);

#endif
