/* bench.c - `cosmos3 bench` (see bench.h): the options, the report as text
 * or JSON; the measurement is the library's cosmos3_bench. */
#include "bench.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "png_io.h"

#define TFLOP 1e12
/* MFU's denominator: one H200's dense bf16 peak, TFLOP/s (the card the
 * targets are set on) */
#define BENCH_PEAK_TFLOPS 989.0
#define GIB (1024.0 * 1024.0 * 1024.0)

/* Both text reports' last line: the memory the backend counted. */
static void print_memory(const cosmos3_bench_result *r) {
    printf("peak memory (backend accounting): %.2f GiB (now: weights %.2f, K/V %.2f, activations "
           "%.2f GiB)",
           r->mem_peak / GIB, r->mem_weights / GIB, r->mem_kv / GIB, r->mem_act / GIB);
    if (r->dev_total > 0)
        printf("; device in use %.2f of %.2f GiB", r->dev_used / GIB, r->dev_total / GIB);
    printf("\n");
}

static void print_text(const cosmos3_bench_result *r, double t_png) {
    double tf = r->flop_step / r->step_mean / TFLOP;
    printf(
        "cosmos3 bench: preset %s, %d layers per tower, hidden %d, heads %d/%d x %d, MLP %d %s\n",
        r->preset, r->layers, r->hidden, r->heads, r->kv_heads, r->head_dim, r->intermediate,
        r->mlp_gated ? "SwiGLU" : "ReLU^2");
    printf("device: %s; GEN attention %s\n", r->device, r->attention);
    printf("size: %dx%d, %d frame%s -> latent %dx%dx%d, GEN tokens S %d; prompt ids L cond %d, "
           "uncond %d\n",
           r->width, r->height, r->frames, r->frames == 1 ? "" : "s", r->latent_t, r->latent_h,
           r->latent_w, r->gen_tokens, r->L_cond, r->L_uncond);
    printf("model FLOPs per CFG step: %.4g TFLOP (linear %.4g, attention %.4g)\n",
           r->flop_step / TFLOP, r->flop_step_linear / TFLOP, r->flop_step_attn / TFLOP);
    if (r->cfg_batch)
        printf("CFG step (cond + uncond as one batch), mean of %d: %.2f ms (min %.2f, max %.2f)\n",
               r->steps, r->step_mean * 1e3, r->step_min * 1e3, r->step_max * 1e3);
    else
        printf("CFG step (cond + uncond), mean of %d: %.2f ms (min %.2f, max %.2f; cond %.2f, "
               "uncond %.2f)\n",
               r->steps, r->step_mean * 1e3, r->step_min * 1e3, r->step_max * 1e3,
               r->cond_mean * 1e3, r->uncond_mean * 1e3);
    if (r->step_mean > 0) /* the step cache: a served step beside a computed one */
        printf("cached CFG step (--cache), mean of %d: sea %.2f ms (%.1f %% of computed), fb %.2f "
               "ms (%.1f %%)\n",
               r->steps, r->step_cached_sea * 1e3, 100 * r->step_cached_sea / r->step_mean,
               r->step_cached_fb * 1e3, 100 * r->step_cached_fb / r->step_mean);
    if (!strcmp(r->device, "cuda"))
        printf("achieved: %.4g TFLOP/s, MFU %.4f (of %.0f TFLOP/s)\n", tf,
               tf / BENCH_PEAK_TFLOPS, BENCH_PEAK_TFLOPS);
    else /* the peak is a GPU's: a fraction of it says nothing about a CPU */
        printf("achieved: %.4g TFLOP/s (no MFU on the %s: the peak it is taken of is an H200's "
               "%.0f TFLOP/s)\n",
               tf, r->device, BENCH_PEAK_TFLOPS);
    double rest = r->prof_total - r->prof_linear - r->prof_attn;
    printf("breakdown (one step, synchronised around every matrix product and attention call): "
           "total %.2f ms\n",
           r->prof_total * 1e3);
    printf("  matrix products %9.2f ms (%5.1f%%) %4d calls %8.4g TFLOP/s\n", r->prof_linear * 1e3,
           100 * r->prof_linear / r->prof_total, r->prof_n_linear,
           r->prof_linear > 0 ? r->prof_flop_linear / r->prof_linear / TFLOP : 0);
    printf("  attention       %9.2f ms (%5.1f%%) %4d calls %8.4g TFLOP/s\n", r->prof_attn * 1e3,
           100 * r->prof_attn / r->prof_total, r->prof_n_attn,
           r->prof_attn > 0 ? r->prof_flop_attn / r->prof_attn / TFLOP : 0);
    printf("  the rest        %9.2f ms (%5.1f%%)\n", rest * 1e3, 100 * rest / r->prof_total);
    if (r->dev_timed) {
        double busy = 0;
        for (int i = 0; i < COSMOS3_BENCH_NOPS; i++)
            busy += r->dev_op_ms[i];
        printf("device time by op (one step queued op by op, timing events around each op, no host "
               "syncs):\n"
               "  step %.2f ms wall, first op to last %.2f ms, inside the ops %.2f ms\n",
               r->dev_wall * 1e3, r->dev_span_ms, busy);
        for (int i = 0; i < COSMOS3_BENCH_NOPS; i++)
            if (r->dev_op_n[i])
                printf("  %-16s %9.3f ms (%5.1f%%) %4d calls\n", cosmos3_bench_op_name(i),
                       r->dev_op_ms[i], 100 * r->dev_op_ms[i] / r->dev_span_ms, r->dev_op_n[i]);
    }
    if (r->offload)
        printf(
            "offload: %.3g GB streamed host-to-device in %.3f s of copy-queue time (%.1f GB/s)\n",
            (double)r->h2d_bytes / 1e9, r->h2d_seconds,
            r->h2d_seconds > 0 ? (double)r->h2d_bytes / r->h2d_seconds / 1e9 : 0);
    printf("outside the loop: tokenize %.2f ms, load %.2f s, UND cond %.2f ms + uncond %.2f ms "
           "(%.4g TFLOP/s)",
           r->t_tokenize * 1e3, r->t_load, r->t_und_cond * 1e3, r->t_und_uncond * 1e3,
           r->flop_und / (r->t_und_cond + r->t_und_uncond) / TFLOP);
    if (r->vae)
        printf(", VAE load %.2f s, VAE decode %.2f ms (warm %.2f ms), PNG %.2f ms\n", r->t_vae_load,
               r->t_vae * 1e3, r->t_vae_warm * 1e3, t_png * 1e3);
    else
        printf(", VAE skipped\n");
    print_memory(r);
}

/* Both reports' JSON: what was run (preset, geometry, device, size) ... */
static json_t *json_head(const cosmos3_bench_result *r) {
    json_t *j = json_object(), *g = json_object();
    json_object_set_new(j, "preset", json_string(r->preset));
    json_object_set_new(g, "layers", json_integer(r->layers));
    json_object_set_new(g, "hidden", json_integer(r->hidden));
    json_object_set_new(g, "heads", json_integer(r->heads));
    json_object_set_new(g, "kv_heads", json_integer(r->kv_heads));
    json_object_set_new(g, "head_dim", json_integer(r->head_dim));
    json_object_set_new(g, "intermediate", json_integer(r->intermediate));
    json_object_set_new(j, "geometry", g);
    json_object_set_new(j, "device", json_string(r->device));
    json_object_set_new(j, "width", json_integer(r->width));
    json_object_set_new(j, "height", json_integer(r->height));
    json_object_set_new(j, "frames", json_integer(r->frames));
    json_object_set_new(j, "gen_tokens", json_integer(r->gen_tokens));
    json_object_set_new(j, "L_cond", json_integer(r->L_cond));
    return j;
}

/* ... and, last, the memory the backend counted; then j is printed and freed. */
static void json_finish(json_t *j, const cosmos3_bench_result *r) {
    json_t *mm = json_object();
    json_object_set_new(mm, "peak_bytes", json_integer(r->mem_peak));
    json_object_set_new(mm, "weights_bytes", json_integer(r->mem_weights));
    json_object_set_new(mm, "kv_bytes", json_integer(r->mem_kv));
    json_object_set_new(mm, "act_bytes", json_integer(r->mem_act));
    if (r->dev_total > 0) {
        json_object_set_new(mm, "device_used_bytes", json_integer(r->dev_used));
        json_object_set_new(mm, "device_total_bytes", json_integer(r->dev_total));
    }
    json_object_set_new(j, "memory", mm);
    char *txt = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(12));
    printf("%s\n", txt);
    free(txt);
    json_decref(j);
}

static void print_json(const cosmos3_bench_result *r, double t_png) {
    json_t *j = json_head(r), *b = json_object(), *o = json_object();
    json_object_set_new(j, "L_uncond", json_integer(r->L_uncond));
    json_object_set_new(j, "steps_timed", json_integer(r->steps));
    json_object_set_new(j, "tflop_per_step", json_real(r->flop_step / TFLOP));
    json_object_set_new(j, "tflop_per_step_linear", json_real(r->flop_step_linear / TFLOP));
    json_object_set_new(j, "tflop_per_step_attention", json_real(r->flop_step_attn / TFLOP));
    json_object_set_new(j, "step_ms", json_real(r->step_mean * 1e3));
    json_object_set_new(j, "step_ms_min", json_real(r->step_min * 1e3));
    json_object_set_new(j, "step_ms_max", json_real(r->step_max * 1e3));
    json_object_set_new(j, "cond_ms", json_real(r->cond_mean * 1e3));
    json_object_set_new(j, "uncond_ms", json_real(r->uncond_mean * 1e3));
    json_object_set_new(j, "step_cached_ms",
                        json_pack("{s:f,s:f}", "sea", r->step_cached_sea * 1e3, "fb",
                                  r->step_cached_fb * 1e3));
    double tf = r->flop_step / r->step_mean / TFLOP;
    json_object_set_new(j, "tflops", json_real(tf));
    json_object_set_new(j, "mfu", json_real(tf / BENCH_PEAK_TFLOPS));
    json_object_set_new(j, "peak_tflops", json_real(BENCH_PEAK_TFLOPS));
    json_object_set_new(b, "total_ms", json_real(r->prof_total * 1e3));
    json_object_set_new(b, "matmul_ms", json_real(r->prof_linear * 1e3));
    json_object_set_new(b, "attention_ms", json_real(r->prof_attn * 1e3));
    json_object_set_new(b, "rest_ms",
                        json_real((r->prof_total - r->prof_linear - r->prof_attn) * 1e3));
    json_object_set_new(b, "matmul_calls", json_integer(r->prof_n_linear));
    json_object_set_new(b, "attention_calls", json_integer(r->prof_n_attn));
    json_object_set_new(
        b, "matmul_tflops",
        json_real(r->prof_linear > 0 ? r->prof_flop_linear / r->prof_linear / TFLOP : 0));
    json_object_set_new(b, "attention_tflops",
                        json_real(r->prof_attn > 0 ? r->prof_flop_attn / r->prof_attn / TFLOP : 0));
    json_object_set_new(j, "breakdown", b);
    if (r->dev_timed) {
        json_t *d = json_object(), *ops = json_object();
        json_object_set_new(d, "wall_ms", json_real(r->dev_wall * 1e3));
        json_object_set_new(d, "span_ms", json_real(r->dev_span_ms));
        for (int i = 0; i < COSMOS3_BENCH_NOPS; i++) {
            if (!r->dev_op_n[i]) continue;
            json_t *o = json_object();
            json_object_set_new(o, "ms", json_real(r->dev_op_ms[i]));
            json_object_set_new(o, "calls", json_integer(r->dev_op_n[i]));
            json_object_set_new(ops, cosmos3_bench_op_name(i), o);
        }
        json_object_set_new(d, "ops", ops);
        json_object_set_new(j, "device_ops", d);
    }
    json_object_set_new(o, "tokenize_ms", json_real(r->t_tokenize * 1e3));
    json_object_set_new(o, "load_s", json_real(r->t_load));
    json_object_set_new(o, "und_cond_ms", json_real(r->t_und_cond * 1e3));
    json_object_set_new(o, "und_uncond_ms", json_real(r->t_und_uncond * 1e3));
    json_object_set_new(o, "vae", json_boolean(r->vae));
    if (r->vae) {
        json_object_set_new(o, "vae_load_s", json_real(r->t_vae_load));
        json_object_set_new(o, "vae_decode_ms", json_real(r->t_vae * 1e3));
        json_object_set_new(o, "vae_decode_warm_ms", json_real(r->t_vae_warm * 1e3));
        json_object_set_new(o, "png_ms", json_real(t_png * 1e3));
    }
    json_object_set_new(j, "outside_loop", o);
    json_object_set_new(j, "offload", json_boolean(r->offload));
    json_object_set_new(j, "cfg_batch", json_boolean(r->cfg_batch));
    json_object_set_new(j, "attention", json_string(r->attention));
    if (r->offload) {
        json_object_set_new(j, "h2d_bytes", json_integer(r->h2d_bytes));
        json_object_set_new(
            j, "h2d_gbps",
            json_real(r->h2d_seconds > 0 ? (double)r->h2d_bytes / r->h2d_seconds / 1e9 : 0));
    }
    json_finish(j, r);
}

/* --------------------------------------------------------------- e2e */

static void print_e2e_text(const cosmos3_bench_result *r, double t_png, const char *path,
                           int64_t png_bytes) {
    printf("cosmos3 bench --e2e: preset %s, %d layers per tower, hidden %d, heads %d/%d x %d, MLP "
           "%d %s\n",
           r->preset, r->layers, r->hidden, r->heads, r->kv_heads, r->head_dim, r->intermediate,
           r->mlp_gated ? "SwiGLU" : "ReLU^2");
    printf("device: %s\n", r->device);
    printf("plan (checked before the load):\n%s", r->plan_text ? r->plan_text : "");
    printf("size: %dx%d -> latent %dx%dx%d, GEN tokens S %d; prompt ids L %d\n", r->width,
           r->height, r->latent_t, r->latent_h, r->latent_w, r->gen_tokens, r->L_cond);
    printf("load: transformer %.2f s%s, VAE %.2f s, tokenizer %.2f ms\n", r->t_load,
           r->offload ? " (--offload)" : "", r->t_vae_load, r->t_tokenize * 1e3);
    printf("distilled request, %d steps (one forward each), the second after the load (the first: "
           "%.2f ms + PNG):\n",
           r->e2e_steps, r->e2e_first_total * 1e3);
    printf("  tokenize %8.2f ms\n  UND      %8.2f ms\n  steps    %8.2f ms (", r->e2e_tokenize * 1e3,
           r->e2e_und * 1e3, r->e2e_denoise * 1e3);
    for (int i = 0; i < r->e2e_steps && i < COSMOS3_BENCH_E2E_MAX_STEPS; i++)
        printf("%s%.2f", i ? ", " : "", r->e2e_step[i] * 1e3);
    printf(")\n  VAE      %8.2f ms\n  PNG      %8.2f ms (%lld bytes, %s)\n", r->e2e_vae * 1e3,
           t_png * 1e3, (long long)png_bytes, path);
    printf("  total    %8.2f ms (the request %.2f ms + the PNG write)\n",
           (r->e2e_total + t_png) * 1e3, r->e2e_total * 1e3);
    print_memory(r);
}

static void print_e2e_json(const cosmos3_bench_result *r, double t_png, const char *path,
                           int64_t png_bytes) {
    json_t *j = json_head(r), *e = json_object(), *st = json_array();
    json_object_set_new(j, "plan", json_string(r->plan_text ? r->plan_text : ""));
    json_object_set_new(j, "plan_need_bytes", json_integer(r->plan_need));
    json_object_set_new(j, "plan_weights_bytes", json_integer(r->plan_weights));
    json_object_set_new(j, "offload", json_boolean(r->offload));
    json_object_set_new(j, "load_s", json_real(r->t_load));
    json_object_set_new(j, "vae_load_s", json_real(r->t_vae_load));
    json_object_set_new(j, "tokenizer_load_ms", json_real(r->t_tokenize * 1e3));
    json_object_set_new(e, "steps", json_integer(r->e2e_steps));
    for (int i = 0; i < r->e2e_steps && i < COSMOS3_BENCH_E2E_MAX_STEPS; i++)
        json_array_append_new(st, json_real(r->e2e_step[i] * 1e3));
    json_object_set_new(e, "step_ms", st);
    json_object_set_new(e, "tokenize_ms", json_real(r->e2e_tokenize * 1e3));
    json_object_set_new(e, "und_ms", json_real(r->e2e_und * 1e3));
    json_object_set_new(e, "denoise_ms", json_real(r->e2e_denoise * 1e3));
    json_object_set_new(e, "vae_ms", json_real(r->e2e_vae * 1e3));
    json_object_set_new(e, "png_ms", json_real(t_png * 1e3));
    json_object_set_new(e, "png_bytes", json_integer(png_bytes));
    json_object_set_new(e, "png", json_string(path));
    json_object_set_new(e, "request_ms", json_real(r->e2e_total * 1e3));
    json_object_set_new(e, "request_wall_ms", json_real(r->e2e_wall * 1e3));
    json_object_set_new(e, "total_ms", json_real((r->e2e_total + t_png) * 1e3));
    json_object_set_new(e, "first_request_ms", json_real(r->e2e_first_total * 1e3));
    json_object_set_new(j, "e2e", e);
    json_finish(j, r);
}

/* The e2e request's picture written as gen writes a PNG (png_write: a
 * temporary file, fsync'ed, renamed), twice: a warm-up, then timed. */
static int e2e_png(const cosmos3_bench_result *r, const char *path, double *t, int64_t *bytes) {
    c3_png_text txt = {.key = "parameters", .text = "cosmos3 bench --e2e (random weights)"};
    for (int run = 0; run < 2; run++) {
        double t0 = c3_now();
        APP_TRY(png_write(path, r->frame_rgb, r->frame_width, r->frame_height, &txt, 1, true));
        *t = c3_now() - t0;
    }
    struct stat sb;
    *bytes = stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
    return COSMOS3_OK;
}

static int bench_e2e_report(c3_settings *s, const cosmos3_bench_result *r) {
    char tmp[4096], err[1024];
    const char *path = s->output;
    if (!path) {
        const char *td = getenv("TMPDIR");
        snprintf(tmp, sizeof tmp, "%s/cosmos3-bench-e2e.%d.png", td && *td ? td : "/tmp",
                 (int)getpid());
        path = tmp;
    }
    double t_png = 0;
    int64_t bytes = 0;
    int rc = e2e_png(r, path, &t_png, &bytes);
    if (rc == COSMOS3_OK && s->save_latents)
        rc = cosmos3_latents_write(s->save_latents, r->e2e_latents, r->e2e_latent_shape, true, err,
                                   sizeof err)
                 ? c3_fail(COSMOS3_EOUTPUT, "%s", err)
                 : COSMOS3_OK;
    if (rc == COSMOS3_OK) {
        if (s->json)
            print_e2e_json(r, t_png, path, bytes);
        else
            print_e2e_text(r, t_png, path, bytes);
        fflush(stdout);
    }
    if (!s->output) unlink(tmp);
    return rc;
}

/* ------------------------------------------------------------ command */

/* The PNG of the first frame, encoded in memory (the time a gen's write
 * spends in libpng; nothing touches the disk). */
static int time_png(const cosmos3_bench_result *r, double *t) {
    double t0 = c3_now();
    c3_png_text txt = {.key = "parameters", .text = "cosmos3 bench (random weights)"};
    uint8_t *png = NULL;
    size_t n = 0;
    APP_TRY(png_encode_mem(r->frame_rgb, r->frame_width, r->frame_height, &txt, 1, &png, &n));
    free(png);
    *t = c3_now() - t0;
    return COSMOS3_OK;
}

int cmd_bench(c3_settings *s, char **pos, int npos) {
    if (npos)
        return c3_fail(COSMOS3_EUSAGE, "bench: unexpected argument '%s'; see cosmos3 help bench",
                       pos[0]);
    if (s->tp != 1 || s->cfg_parallel != 1 || s->ulysses != 1)
        return c3_fail(COSMOS3_EUSAGE, "bench: measures one rank (tp 1, cfg-parallel 1, ulysses 1) "
                                       "for now; drop --tp/--cfg-parallel/"
                                       "--ulysses, or time layouts with cosmos3 gen");
    cosmos3_bench_params p;
    cosmos3_bench_params_init(&p);
    p.preset = s->preset;
    p.layers = s->layers;
    p.device = s->device;
    p.gpus = s->gpus;
    p.offload = s->offload;
    p.precision = s->precision;
    p.attention = s->attention;
    p.width = s->width;
    p.height = s->height;
    p.frames = s->frames;
    p.fps = s->fps;
    p.steps = s->steps;
    p.prompt = s->prompt && *s->prompt ? s->prompt : NULL;
    p.skip_vae = s->skip_vae;
    p.e2e = s->e2e;
    if (s->output && !s->e2e)
        return c3_fail(COSMOS3_EUSAGE, "bench: -o names the PNG of --e2e; add --e2e or drop -o");
    if (s->save_latents && !s->e2e)
        return c3_fail(COSMOS3_EUSAGE,
                       "bench: --save-latents writes the latents of --e2e; add --e2e or drop it");

    cosmos3_bench_result r;
    char err[1024];
    int rc = cosmos3_bench(&p, &r, err, sizeof err);
    if (rc) return c3_fail(rc, "%s", err);
    if (r.e2e) {
        rc = bench_e2e_report(s, &r);
        cosmos3_bench_result_free(&r);
        return rc;
    }
    double t_png = 0;
    if (r.vae) rc = time_png(&r, &t_png);
    if (rc == COSMOS3_OK) {
        if (s->json)
            print_json(&r, t_png);
        else
            print_text(&r, t_png);
        fflush(stdout);
    }
    cosmos3_bench_result_free(&r);
    return rc;
}
