/* test_reanchor.c - image-to-video on a distilled checkpoint re-anchors the
 * pinned latent frames to the clean x0 after every fixed-step SDE step, as
 * upstream's Cosmos3DistilledVisionLoopSchedulerStep does (the scheduler's
 * step re-noises every position, then latents = mask * x0 + (1 - mask) *
 * latents), on the CPU with a random `mkmodel --distilled` checkpoint:
 *   - the pinned frame of the final latents equals x0 (the conditioning
 *     picture through the VAE encoder, as cond_prepare gives it) exactly;
 *   - without the re-anchoring (the test hook), the pinned frame ends
 *     elsewhere and the other frames differ too (they attend to it);
 *   - the seed's re-noising stream is drawn for the pinned positions as
 *     well: a --noise run whose step_noise differs from the seed's stream
 *     only on the pinned frame gives the same latents as the seed's run;
 *   - guidance and steps other than the checkpoint's are refused (the one
 *     line upstream gives) with the picture given too.
 * No fixtures needed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "checkpoint.h"
#include "condition.h"
#include "cosmos3.h"
#include "denoise.h"
#include "mkmodel.h"
#include "rng.h"
#include "test_util.h"
#include "wan_vae_encode.h"

enum { W = 64, H = 64, F = 5 }; /* latents [1, 48, 2, 4, 4]: frame 0 pinned */

static uint8_t picture[H * W * 3];

static int run(cosmos3_engine *e, uint64_t seed, const float *noise, const float *step_noise,
               size_t n, int steps, double guidance, float **lat, int shape[5], char *err) {
    cosmos3_frames img = {.rgb = picture, .width = W, .height = H, .frames = 1};
    cosmos3_request rq;
    cosmos3_request_init(&rq);
    rq.prompt = "a red circle";
    rq.width = W;
    rq.height = H;
    rq.frames = F;
    rq.seed = seed;
    rq.image = &img;
    rq.want_latents = true;
    if (steps) rq.steps = steps;
    if (guidance > 0) rq.guidance = guidance;
    if (noise) {
        rq.noise = noise;
        rq.noise_len = n;
        rq.step_noise = step_noise;
        rq.step_noise_len = step_noise ? 4 * n : 0;
    }
    cosmos3_result *r = NULL;
    int rc = cosmos3_generate(e, &rq, &r, err, 1024);
    if (rc == COSMOS3_OK) {
        size_t m = 1;
        for (int i = 0; i < 5; i++)
            m *= (size_t)(shape[i] = r->latent_shape[i]);
        *lat = xmalloc(m * sizeof(float));
        memcpy(*lat, r->latents, m * sizeof(float));
    }
    cosmos3_result_free(r);
    return rc;
}

int main(void) {
    char dir[] = "/tmp/cosmos3-reanchor.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char model[256];
    snprintf(model, sizeof model, "%s/d", dir);
    char tokdir[4096];
    c3_mkmodel_opts mo = {.preset = "tiny",
                          .seed = 7,
                          .out_dir = model,
                          .tokenizer_dir = ckpt_share_path("tokenizer", tokdir, sizeof tokdir),
                          .distilled = true};
    int rc = mkmodel_write(&mo);
    T_CHECK(rc == C3_OK, "mkmodel --distilled: %s", c3_errmsg());
    if (rc) return t_done("reanchor");
    for (int y = 0; y < H; y++) /* a picture with structure: a gradient and a square */
        for (int x = 0; x < W; x++) {
            uint8_t *p = picture + (y * W + x) * 3;
            bool sq = x > 20 && x < 44 && y > 16 && y < 40;
            p[0] = sq ? 230 : (uint8_t)(x * 4), p[1] = (uint8_t)(y * 4), p[2] = sq ? 20 : 128;
        }

    /* x0: the picture through the encoder, as the engine prepares it */
    c3_ckpt ck;
    rc = ckpt_open(&ck, model, true);
    T_CHECK(rc == C3_OK, "ckpt_open: %s", c3_errmsg());
    if (rc) return t_done("reanchor");
    c3_backend *be = c3_backend_cpu();
    c3_vae_enc *venc = NULL;
    c3_condition cd = {0};
    c3_media media = {.rgb = picture, .width = W, .height = H, .frames = 1};
    c3_cond_input ci = {.image = &media};
    rc = vae_enc_load(&venc, &ck, be);
    if (rc == C3_OK) rc = cond_prepare(&ci, venc, F, W, H, ck.v.scale_temporal, &cd);
    T_CHECK(rc == C3_OK && cd.T == 2 && cd.pinned[0] && !cd.pinned[1], "cond_prepare: %s",
            c3_errmsg());
    vae_enc_free(venc);
    ckpt_close(&ck);
    c3_backend_destroy(be);
    if (rc) return t_done("reanchor");

    cosmos3_open_params op;
    cosmos3_open_params_init(&op);
    op.model = model;
    op.device = "cpu";
    char err[1024];
    cosmos3_engine *e = NULL;
    rc = cosmos3_open(&op, &e, err, sizeof err);
    T_CHECK(rc == COSMOS3_OK, "open: %s", err);
    if (rc) return t_done("reanchor");

    float *a = NULL, *b = NULL, *c = NULL;
    int sa[5], sb[5], sc[5];
    rc = run(e, 11, NULL, NULL, 0, 0, 0, &a, sa, err);
    T_CHECK(rc == COSMOS3_OK, "anchored run: %s", err);
    c3_denoise_reanchor = false;
    int rc2 = run(e, 11, NULL, NULL, 0, 0, 0, &b, sb, err);
    c3_denoise_reanchor = true;
    T_CHECK(rc2 == COSMOS3_OK, "run without the anchoring: %s", err);
    if (rc == COSMOS3_OK && rc2 == COSMOS3_OK) {
        int C = sa[1], T = sa[2];
        int64_t hw = (int64_t)sa[3] * sa[4], n = (int64_t)C * T * hw;
        T_CHECK(T == 2 && C == cd.C && sa[3] == cd.h && sa[4] == cd.w,
                "latents [1, %d, %d, %d, %d]", C, T, sa[3], sa[4]);
        int64_t pin_off = 0, pin_diff = 0, free_diff = 0;
        double free_max = 0;
        for (int ch = 0; ch < C; ch++)
            for (int t = 0; t < T; t++)
                for (int64_t k = 0; k < hw; k++) {
                    int64_t i = ((int64_t)ch * T + t) * hw + k;
                    if (t == 0) {
                        pin_off += a[i] != cd.x0[i]; /* bit-exact: x0 copied back */
                        pin_diff += b[i] != cd.x0[i];
                    } else {
                        free_diff += a[i] != b[i];
                        double d = a[i] - b[i];
                        free_max = d > free_max ? d : -d > free_max ? -d : free_max;
                    }
                }
        fprintf(stderr,
                "reanchor: pinned frame: %lld of %lld values off x0 anchored, %lld without; free "
                "frame: %lld values differ (max %.3g)\n",
                (long long)pin_off, (long long)(n / T), (long long)pin_diff, (long long)free_diff,
                free_max);
        T_CHECK(pin_off == 0, "%lld values of the pinned frame differ from x0", (long long)pin_off);
        T_CHECK(pin_diff > n / T / 2, "without the anchoring the pinned frame still equals x0");
        T_CHECK(free_diff > n / T / 2 && free_max > 1e-3,
                "the free frame does not change with the anchoring (%lld differ, max %.3g)",
                (long long)free_diff, free_max);

        /* the re-noising stream covers the pinned positions too: the seed's
         * draws with the pinned frame's replaced give the same result */
        float *noise = xmalloc((size_t)n * sizeof(float)),
              *steps = xmalloc((size_t)n * 4 * sizeof(float));
        rng_normal(11, 0, noise, n);
        for (int i = 0; i < 4; i++)
            rng_normal(11, (uint64_t)(i + 1) * (uint64_t)n, steps + (size_t)i * (size_t)n, n);
        rc = run(e, 99, noise, steps, (size_t)n, 0, 0, &c, sc, err);
        T_CHECK(rc == COSMOS3_OK && !memcmp(c, a, (size_t)n * sizeof(float)),
                "--noise with the seed's initial and step draws differs from the seed's run: %s",
                rc ? err : "");
        free(c);
        c = NULL;
        for (int i = 0; i < 4; i++)
            for (int ch = 0; ch < C; ch++)
                for (int64_t k = 0; k < hw; k++)
                    steps[(size_t)i * (size_t)n + (size_t)(ch * T * hw + k)] = 5.0f; /* t = 0 */
        rc = run(e, 99, noise, steps, (size_t)n, 0, 0, &c, sc, err);
        T_CHECK(rc == COSMOS3_OK && !memcmp(c, a, (size_t)n * sizeof(float)),
                "other draws on the pinned frame changed the result: %s", rc ? err : "");
        free(noise);
        free(steps);
    }
    /* the refusals stay with a picture given */
    float *d = NULL;
    int sd[5];
    rc = run(e, 1, NULL, NULL, 0, 0, 7.0, &d, sd, err);
    T_CHECK(rc == COSMOS3_EUSAGE && strstr(err, "guidance") && !strchr(err, '\n'),
            "guidance 7 with a picture: %d %s", rc, err);
    rc = run(e, 1, NULL, NULL, 0, 6, 0, &d, sd, err);
    T_CHECK(rc == COSMOS3_EUSAGE && strstr(err, "steps") && !strchr(err, '\n'),
            "steps 6 with a picture: %d %s", rc, err);
    free(d);
    free(a);
    free(b);
    free(c);
    cond_free(&cd);
    cosmos3_close(e);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "reanchor: could not remove %s\n", dir);
    return t_done("reanchor");
}
