/* main.c - the command line: subcommands, the one place errors are printed.
 *
 *   cosmos3 gen -p TEXT [options]     one image or video
 *   cosmos3 tokenize -m DIR TEXT      prompt ids
 *   cosmos3 info -m DIR               geometry, sizes, the parallel plan
 *   cosmos3 info FILE                 a picture's or clip's size, frames and fps
 *   cosmos3 meta FILE                 the settings stored in a picture or clip
 *   cosmos3 mkmodel --preset P -o DIR random-weight checkpoint
 *   cosmos3 help [COMMAND]
 */
#include <cblas.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench.h"
#include "cosmos3_tools.h"
#include "docs.h"
#include "hf_cache.h"
#include "events.h"
#include "metadata.h"
#include "monitor.h"
#include "cond_input.h"
#include "media.h"
#include "options.h"
#include "output.h"
#include "session.h"
#include "png_io.h"
#include "precheck.h"
#include "repl.h"
#include "serve.h"
#include "task.h"
#include "tui/tui.h"
#include "config.h"

typedef struct {
    const char *name;
    unsigned bit;
    const char *args;
    const char *summary;
    int (*run)(c3_settings *s, char **pos, int npos);
} c3_command;

static int cmd_gen(c3_settings *s, char **pos, int npos);
static int cmd_tokenize(c3_settings *s, char **pos, int npos);
static int cmd_info(c3_settings *s, char **pos, int npos);
static int cmd_meta(c3_settings *s, char **pos, int npos);
static int cmd_mkmodel(c3_settings *s, char **pos, int npos);

static const c3_command commands[] = {
    {"gen", CMD_GEN, "-p TEXT [options]", "generate an image (or a video with --frames)", cmd_gen},
    {"tokenize", CMD_TOKENIZE, "[options] TEXT|-", "print the token ids the model would see",
     cmd_tokenize},
    {"info", CMD_INFO, "[-m DIR] [--tp N] [--cfg-parallel N] [--ulysses N] [--check] | FILE",
     "print the model's geometry, sizes and the per-rank plan; or a picture's or clip's size, "
     "frames and fps",
     cmd_info},
    {"meta", CMD_META, "FILE",
     "print the settings stored in a picture or clip cosmos3 wrote (any format)", cmd_meta},
    {"mkmodel", CMD_MKMODEL, "--preset tiny|demo|edge|nano|super -o DIR",
     "write a random-weight checkpoint", cmd_mkmodel},
    {"repl", CMD_REPL, "[options]",
     "the cosmos3 > prompt: load once, generate many (also: cosmos3 alone)", repl_main},
    {"tui", CMD_TUI, "[options]",
     "the live dashboard: memory, progress, CFG branch timings, previews", tui_main},
    {"serve", CMD_SERVE, "[-m DIR] [--host ADDR] [--port N] [--queue N] [--tp N ...]",
     "the OpenAI-compatible API: POST /v1/images/generations (JSON or SSE progress), "
     "/v1/videos (jobs, /sync), /v1/models, /health, /metrics",
     serve_main},
    {"bench", CMD_BENCH,
     "--preset tiny|edge|nano|super [-W PX -H PX -F N] [--steps N] [--e2e [-o FILE]] [--json]",
     "time the GEN CFG step of a preset's geometry on random weights (no checkpoint needed); "
     "--e2e: "
     "a distilled 4-step request end to end, prompt to PNG",
     cmd_bench},
};

static void usage(FILE *f) {
    fprintf(f,
            "cosmos3 %s - Cosmos3 text-to-image and text-to-video on the CPU or NVIDIA GPUs\n\n"
            "usage: cosmos3 COMMAND [options]\n\ncommands:\n",
            COSMOS3_VERSION);
    for (size_t i = 0; i < C3_ARRAY_LEN(commands); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "  %-10s %s\n", "help", "help COMMAND shows a command's options");
    fprintf(f,
            "\nexamples:\n"
            "  cosmos3 gen -p \"a red circle on a blue background, on the right\" -o circle.png\n"
            "  cosmos3 gen -m ~/Cosmos3-Nano -p \"...\" --tp 4 --cfg-parallel 2\n"
            "  cosmos3 info -m ~/Cosmos3-Nano --tp 2\n"
            "\nThe model is -m DIR, else $COSMOS3_MODEL, else the built-in demo model (-m demo).\n"
            "See man cosmos3 for everything.\n");
}

/* --version: the version, then what this build has (a missing library
 * leaves its feature out, and says which package brings it). */
static void print_version(FILE *f) {
    fprintf(f, "cosmos3 %s\n", COSMOS3_VERSION);
#if COSMOS3_HAVE_CUDA
    fprintf(f, "  CUDA backend     yes (CUDA runtime, cuBLAS/cuBLASLt, NCCL; GPU code for %s)\n",
            COSMOS3_GPU_ARCH);
#else
    fprintf(f, "  CUDA backend     no (CPU only; CUDA 13 with cuBLAS and NCCL under "
               "/usr/local/cuda at build time)\n");
#endif
#ifdef COSMOS3_HAVE_TUI
    fprintf(f, "  tui, line edit   yes (ncurses, GNU readline)\n");
#else
    fprintf(f, "  tui, line edit   no (libncurses-dev, libreadline-dev at build time)\n");
#endif
#ifdef COSMOS3_HAVE_SIXEL
    fprintf(f, "  sixel previews   yes (libsixel)\n");
#else
    fprintf(f, "  sixel previews   no (libsixel-dev at build time; previews use colour blocks)\n");
#endif
#if COSMOS3_HAVE_MHD
    fprintf(f, "  serve            yes (libmicrohttpd)\n");
#else
    fprintf(f, "  serve            no (libmicrohttpd-dev at build time)\n");
#endif
#if defined(COSMOS3_HAVE_FFMPEG) && COSMOS3_HAVE_FFMPEG
    fprintf(f, "  video files      yes (FFmpeg: MP4, WebM, JPEG, WebP)\n");
#else
    fprintf(f, "  video files      no (PNG frames; libavformat-dev libavcodec-dev libswscale-dev "
               "libavutil-dev at build "
               "time)\n");
#endif
#if COSMOS3_HAVE_MPI
    fprintf(f,
            "  processes        yes (MPI: ranks across processes and hosts via mpirun or srun)\n");
#else
    fprintf(f,
            "  processes        no (one process; libopenmpi-dev at build time for mpirun/srun)\n");
#endif
    fprintf(f, "  CPU math         %s, OpenMP\n", openblas_get_config());
}

/* The command a mistyped one most likely meant (NULL: none near). */
static const char *near_command(const char *w) {
    const char *names[C3_ARRAY_LEN(commands) + 1];
    for (size_t i = 0; i < C3_ARRAY_LEN(commands); i++)
        names[i] = commands[i].name;
    names[C3_ARRAY_LEN(commands)] = "help";
    return c3_nearest_word(w, names, (int)C3_ARRAY_LEN(commands) + 1);
}

static void command_help(FILE *f, const c3_command *c) {
    fprintf(f, "usage: cosmos3 %s %s\n\n%s\n\noptions:\n", c->name, c->args, c->summary);
    options_usage(f, c->bit);
    fprintf(f, "%-34s %s\n", "  -h, --help", "this help");
}

/* ----------------------------------------------------- OpenMP wait policy */

/* The REPL, the TUI and the server run the engine on threads of their own,
 * and with libgomp's default wait policy the idle members of an OpenMP team
 * spin for ~3 ms after every parallel region, on the cores OpenBLAS's own
 * threads need for the next matrix product: on a 2-core machine their steps
 * ran 10-25x slower than gen's (bench/repl_speed.sh prints the ratio; gen
 * escaped only because libgomp throttles the spinning when it manages more
 * threads than there are cores). A passive policy removes it and costs gen
 * nothing measurable. libgomp reads the policy once, in its constructor,
 * before main() and before anything main() could setenv() (even the
 * executable's preinit array runs before libc resets environ), so the only
 * way in is the environment of the exec: set it and exec this program again
 * (for repl, tui and serve only: ~0.1 s with the CUDA libraries to map).
 * A policy or spin count the user set is kept, and so is a run under
 * valgrind (which would not follow the exec). Returns only when no exec
 * happened; any failure just leaves the default policy. */
static void omp_wait_passive(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "vgpreload")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* no /proc: go on with the default policy (slower REPL steps, same results) */
}

/* ------------------------------------------------------------- signals */

static c3_session *volatile g_engine;
static volatile sig_atomic_t g_sigint;

static void on_sigint(int sig) {
    (void)sig;
    g_sigint++;
    /* the file is being placed or is whole: finish, exit 0 */
    if (g_sigint >= 2 && !output_cancel_claim()) return;
    if (g_sigint >= 2) { /* nothing half-written stays */
        output_abort();
        _exit(COSMOS3_ECANCEL);
    }
    if (g_engine) session_cancel(g_engine);
}

/* Ranks in several processes: a process ended mid-run. Said at once (the
 * launcher may end this process a second later), and only here. */
static volatile sig_atomic_t g_lost_said;

static void on_process_lost(const char *line, void *user) {
    (void)user;
    fprintf(stderr, "cosmos3: %s\n", line);
    fflush(stderr);
    g_lost_said = 1;
}

/* ------------------------------------------------------------------ gen */

typedef struct {
    c3_session *e;
    c3_settings *s;
    session_result r;
} gen_job;

static int gen_call(void *arg) {
    gen_job *j = arg;
    return session_generate(j->e, j->s, &j->r);
}

static void progress_line(const cosmos3_event *ev, double t_first, int cfgp, bool cache,
                          int cached) {
    double el = c3_now() - t_first;
    double per = ev->step ? el / ev->step : 0;
    double eta = per * (ev->steps - ev->step);
    fprintf(stderr, "\r\033[Kstep %d/%d  %.2f s/step  ETA %.0fs  cond %.2fs", ev->step, ev->steps,
            ev->seconds, eta, ev->cond_s);
    if (ev->uncond_s > 0 || cfgp == 2)
        fprintf(stderr, "  uncond %.2fs", ev->uncond_s);
    else
        fprintf(stderr, "  uncond -");
    if (cache) /* the step cache: this step's state, the run's count */
        fprintf(stderr, "  %s (%d cached)", ev->cached ? "cached" : "computed", cached);
    fflush(stderr);
}

/* The progress line's text for a stage or VAE event (NULL: the line stays). */
static const char *stage_text(const cosmos3_event *x, char *buf, size_t n) {
    if (x->kind == COSMOS3_EV_VAE) {
        snprintf(buf, n, "decoding (VAE): %d/%d latent frame%s", x->frame, x->frames,
                 x->frames == 1 ? "" : "s");
        return buf;
    }
    const char *st = x->stage ? x->stage : "";
    if (x->begin) {
        if (!strcmp(st, "tokenize")) return "tokenizing the prompt ...";
        if (!strcmp(st, "encode")) return "encoding the conditioning input (VAE) ...";
        if (!strcmp(st, "und")) return "reading the prompt (UND tower) ...";
        if (!strcmp(st, "vae")) return "decoding (VAE) ...";
        return NULL;
    }
    if (!strcmp(st, "vae")) return "writing ...";
    return NULL;
}

static int run_generation(c3_settings *s) {
    c3_events *ev = events_new(4096);
    c3_session *e = NULL;
    bool tty = isatty(2) && !s->quiet && !s->json;
    if (tty) { /* a terminal sees every phase on the one progress line, the load first */
        char dir[4096];
        pipeline_model_dir(s, dir, sizeof dir);
        fprintf(stderr, "\r\033[Kloading %s ...", dir);
        fflush(stderr);
    }
    /* tests only: a slow load, to Ctrl-C it */
    const char *delay = getenv("COSMOS3_TEST_LOAD_DELAY");
    if (delay && atof(delay) > 0) usleep((useconds_t)(atof(delay) * 1e6));
    cosmos3_processes_on_lost(on_process_lost, NULL); /* several processes: one is gone */
    int rc = session_open(&e, s, ev);
    if (tty) fputs("\r\033[K", stderr);
    /* Ctrl-C while loading: nothing to cancel yet, so stop here */
    if (rc == COSMOS3_OK && g_sigint) {
        session_close(e);
        rc = c3_fail(COSMOS3_ECANCEL, "cancelled while the model loaded");
    }
    if (rc) {
        events_free(ev);
        return rc;
    }
    g_engine = e;
    /* ranks in several processes: the launcher's SIGTERM (another process
     * ended) or the user's cancels on every process like Ctrl-C, so that
     * process 0 can say why in its one line; a second one ends at once */
    if (session_layout(e)->processes > 1) {
        struct sigaction sa = {.sa_handler = on_sigint};
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
    }
    gen_job j = {.e = e, .s = s};
    c3_task task;
    if (task_start(&task, gen_call, &j, ev) != COSMOS3_OK) {
        g_engine = NULL;
        session_close(e);
        events_free(ev);
        return c3_fail(COSMOS3_EFAIL, "cannot start the generation thread");
    }
    c3_monitor *mon = xmalloc(sizeof *mon);
    monitor_init(mon);
    monitor_engine(mon, session_layout(e));
    mon->t_first_step = c3_now();
    /* the terminal's one progress line: open (no newline yet), and whether it is the step line */
    bool open = false, steps_line = false;
    for (;;) {
        c3_event x;
        /* a Ctrl-C can land before engine_generate clears its cancel flag: repeat it */
        if (g_sigint) session_cancel(e);
        if (!events_pop(ev, &x, 0.2)) continue;
        if (x.kind == EV_FINISHED) break;
        if (x.kind != EV_ENGINE) continue;
        const cosmos3_event *v = &x.ev;
        /* the engine's notes and warnings, one line each on stderr (-q keeps the warnings) */
        /* the seed at the start is for the terminal: a script reads it in the last line (or --json)
         */
        bool note = v->kind == COSMOS3_EV_LOG || v->kind == COSMOS3_EV_DEVICE ||
                    v->kind == COSMOS3_EV_PLAN,
             warning = v->kind == COSMOS3_EV_WARNING;
        bool for_tty = note && !strncmp(x.text, "seed ", 5);
        if (((note && !s->quiet) || warning) && (tty || !for_tty) &&
            !(for_tty && s->noise)) { /* --noise: no seed was drawn */
            fprintf(stderr, "%s%s%s\n", open ? "\r\033[K" : "", warning ? "warning: " : "", x.text);
            open = false;
        }
        if ((v->kind == COSMOS3_EV_STAGE || v->kind == COSMOS3_EV_VAE) && tty) {
            char buf[128];
            const char *line = stage_text(v, buf, sizeof buf);
            if (line) { /* the last step line stays; a phase's line is rewritten in place */
                fprintf(stderr, "%s%s", open && steps_line ? "\n" : "\r\033[K", line);
                fflush(stderr);
                open = true;
                steps_line = false;
            }
        }
        monitor_event(mon, &x); /* the step's uncond time as drawn, the first step's start */
        if (v->kind == COSMOS3_EV_STEP && tty) {
            progress_line(v, mon->t_first_step, mon->cfg_parallel,
                          s->cache && strcmp(s->cache, "none"), mon->steps_cached);
            open = steps_line = true;
        }
    }
    rc = task_join(&task);
    if (rc == COSMOS3_OK) { /* the process's own start: launch to the first step, and to here */
        double t_proc = session_process_start();
        double first_step = j.r.out->timings.clock_first_step;
        if (first_step > 0) j.r.t_launch_first_step = first_step - t_proc;
        j.r.t_launch_total = c3_now() - t_proc;
    }
    free(mon);
    if (open)
        fputs(steps_line ? "\n" : "\r\033[K", stderr); /* a phase's line gives way to the outcome */
    g_engine = NULL;
    if (rc) {
        /* the message is the task's (task_join) */
    } else if (s->json) {
        json_t *o = json_object(), *paths = json_array();
        for (int i = 0; i < j.r.npaths; i++)
            json_array_append_new(paths, json_string(j.r.paths[i]));
        json_object_set_new(o, "paths", paths);
        json_t *res = result_json(&j.r);
        if (!s->offload) json_object_del(res, "offload");
        json_object_update(o, res);
        json_decref(res);
        json_object_set_new(o, "model", json_string(session_model(e)->id));
        const cosmos3_layout *p = session_layout(e);
        json_object_set_new(o, "layout",
                            json_pack("{s:i,s:i,s:i,s:s,s:s}", "tp", p->tp, "cfg_parallel",
                                      p->cfg_parallel, "ulysses", p->ulysses, "device",
                                      !strcmp(p->device, "cuda") ? "cuda" : "cpu", "device_note",
                                      p->device_note));
        char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        printf("%s\n", txt);
        free(txt);
        json_decref(o);
    } else if (!s->quiet) {
        char wrote[4096 + 128];
        if (result_wrote_line(&j.r, wrote, sizeof wrote)) fprintf(stderr, "%s\n", wrote);
        char line[640];
        result_phases_line(&j.r, line, sizeof line);
        fprintf(stderr, "%s\n", line);
    }
    result_free(&j.r);
    session_close(e);
    events_free(ev);
    return rc;
}

static int read_stdin(char **out) {
    size_t cap = 4096, n = 0;
    char *b = xmalloc(cap);
    size_t r;
    while ((r = fread(b + n, 1, cap - n - 1, stdin)) > 0) {
        n += r;
        if (n + 1 >= cap) b = xrealloc(b, cap *= 2);
    }
    b[n] = 0;
    const char *nul = memchr(b, 0, n);
    if (nul) {
        size_t at = (size_t)(nul - b);
        free(b);
        return c3_fail(
            COSMOS3_EINPUT,
            "the prompt on standard input holds a NUL byte at offset %zu; a prompt is text", at);
    }
    *out = b;
    return COSMOS3_OK;
}

static int cmd_gen(c3_settings *s, char **pos, int npos) {
    if (npos > 0 && !s->prompt) {
        s->prompt = xstrdup(pos[0]);
        pos++;
        npos--;
    }
    if (npos > 0)
        return c3_fail(COSMOS3_EUSAGE,
                       "gen: unexpected argument '%s'; quote the prompt: -p \"...\"", pos[0]);
    if (s->prompt && strcmp(s->prompt, "-") == 0) {
        free(s->prompt);
        s->prompt = NULL;
        APP_TRY(read_stdin(&s->prompt));
    }
    /* validate everything that needs no model before loading it, the output's
     * format and destination included */
    APP_TRY(precheck_all(s)); /* the prompt and every input file */
    cosmos3_settings st;
    APP_TRY(session_check(s, NULL, true, NULL, &st));
    c3_output out;
    APP_TRY(output_plan(s, st.frames, st.width, st.height, -1, &out));
    /* a conditioning input that cannot be read or is too large, too */
    int rc = cond_precheck(s->image, s->video, s->first_last, st.width, st.height);
    if (rc) {
        output_free(&out);
        return rc;
    }
    bool to_stdout = out.kind == OUT_STDOUT;
    output_free(&out);
    if (to_stdout && s->json)
        return c3_fail(COSMOS3_EUSAGE, "-o - and --json both write to standard output; drop one");
    return run_generation(s);
}

/* ------------------------------------------------------------- tokenize */

static int cmd_tokenize(c3_settings *s, char **pos, int npos) {
    if (npos != 1)
        return c3_fail(COSMOS3_EUSAGE, "tokenize: give exactly one TEXT (or - for standard input)");
    char *text;
    size_t len;
    if (strcmp(pos[0], "-") == 0) {
        read_stdin(&text);
        len = strlen(text);
        /* bytes kept exactly: re-read length including embedded NULs is not supported */
    } else {
        text = xstrdup(pos[0]);
        len = strlen(text);
    }
    char dir[4096], err[1024];
    pipeline_model_dir(s, dir, sizeof dir);
    cosmos3_tokenizer *tok = NULL;
    int rc = cosmos3_tokenizer_open(dir, &tok, err, sizeof err);
    if (rc) {
        free(text);
        return c3_fail(rc, "%s", err);
    }
    cosmos3_tokenize_params tp;
    cosmos3_tokenize_params_init(&tp);
    tp.raw = s->raw;
    tp.negative = s->negative_flag;
    tp.system_prompt = !strcmp(s->system_prompt, "auto") ? -1 : !strcmp(s->system_prompt, "on");
    tp.templates = s->templates;
    tp.width = s->width;
    tp.height = s->height;
    tp.frames = s->frames;
    tp.fps = s->fps;
    /* one prompt, or (--lines) one per line of the text */
    for (char *line = text, *next; rc == COSMOS3_OK && line; line = next) {
        size_t n_line = s->lines ? strcspn(line, "\n") : len;
        next = s->lines && line[n_line] ? line + n_line + 1 : NULL;
        if (s->lines && !next && n_line == 0)
            break; /* the final newline ends the text, not an empty prompt */
        line[n_line] = 0;
        int32_t *ids = NULL;
        int n = 0;
        rc = cosmos3_tokenize(tok, &tp, line, n_line, &ids, &n, err, sizeof err);
        if (rc == COSMOS3_OK) {
            for (int i = 0; i < n; i++)
                printf(i ? " %d" : "%d", ids[i]);
            printf("\n");
        } else {
            c3_fail(rc, "%s", err);
        }
        free(ids);
    }
    cosmos3_tokenizer_close(tok);
    free(text);
    return rc;
}

/* ----------------------------------------------------------------- info */

/* What a checkpoint says about itself (model_index.json "cosmos3"). */
static void print_card(const cosmos3_model_info *k, const cosmos3_checkpoint_details *d) {
    if (k->about) printf("\nabout: %s\n", k->about);
    if (k->width || k->steps || k->guidance >= 0) {
        printf("its defaults:");
        if (k->width && k->height) printf(" %dx%d,", k->width, k->height);
        if (k->steps) printf(" %d steps,", k->steps);
        if (k->guidance >= 0) printf(" guidance %g,", k->guidance);
        if (k->schedule && k->schedule[0]) printf(" schedule %s,", k->schedule);
        if (k->shift >= 0) printf(" shift %g,", k->shift);
        if (k->guidance_interval == 1)
            printf(" guidance interval %g,%g", k->guidance_lo, k->guidance_hi);
        if (k->guidance_interval == 2) printf(" guidance on every step");
        printf("\n");
    }
    if (k->nvocabulary) {
        printf("vocabulary (%d words; others draw nothing it knows):", k->nvocabulary);
        for (int i = 0; i < k->nvocabulary; i++)
            printf(i ? ", %s" : " %s", k->vocabulary[i]);
        printf("\n");
        if (d->nfillers) {
            printf("also read, changing nothing it draws:");
            for (int i = 0; i < d->nfillers; i++)
                printf(i ? ", %s" : " %s", d->fillers[i]);
            printf("\n");
        }
    }
    if (k->nexamples) {
        printf("example prompts:\n");
        for (int i = 0; i < k->nexamples; i++)
            printf("  cosmos3 gen -p \"%s\"\n", k->examples[i]);
    }
    if (d->scores_json) printf("measured scores: %s\n", d->scores_json);
}

/* cosmos3 info FILE: what a picture or clip is. */
static int info_media(const c3_settings *s, const char *path) {
    c3_media_info mi;
    APP_TRY(media_probe(path, &mi));
    char *params = NULL, *js = NULL;
    bool meta = media_read_meta(path, &params, &js) == COSMOS3_OK && (params || js);
    free(params);
    free(js);
    if (s->json) {
        json_t *o =
            json_pack("{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:f,s:f,s:I,s:b}", "file", path, "container",
                      mi.container, "codec", mi.codec, "pix_fmt", mi.pix_fmt, "width", mi.width,
                      "height", mi.height, "frames", mi.frames, "fps", mi.fps, "seconds",
                      mi.seconds, "bytes", (json_int_t)mi.bytes, "cosmos3_metadata", meta);
        json_object_set_new(o, "audio",
                            mi.audio_codec[0]
                                ? json_pack("{s:s,s:i,s:i,s:f}", "codec", mi.audio_codec, "rate",
                                            mi.audio_rate, "channels", mi.audio_channels, "seconds",
                                            mi.audio_seconds)
                                : json_null());
        char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        printf("%s\n", txt);
        free(txt);
        json_decref(o);
        return COSMOS3_OK;
    }
    printf("file: %s\n", path);
    printf("format: %s, %s%s%s\n", mi.container, mi.codec, mi.pix_fmt[0] ? " " : "", mi.pix_fmt);
    printf("size: %dx%d\n", mi.width, mi.height);
    if (mi.fps > 0)
        printf("frames: %d at %g fps (%.2f s)\n", mi.frames, mi.fps,
               mi.seconds > 0 ? mi.seconds : mi.frames / mi.fps);
    else
        printf("frames: %d\n", mi.frames);
    if (mi.audio_codec[0])
        printf("audio: %s, %d Hz, %d channel%s (%.2f s)\n", mi.audio_codec, mi.audio_rate,
               mi.audio_channels, mi.audio_channels == 1 ? "" : "s", mi.audio_seconds);
    else if (mi.fps > 0)
        printf("audio: none\n");
    if (mi.bytes) {
        char b[32];
        printf("bytes: %lld (%s)\n", (long long)mi.bytes, c3_bytes_text(mi.bytes, b, sizeof b));
    }
    printf("settings: %s\n", meta ? "stored (cosmos3 meta FILE prints them)" : "none");
    return COSMOS3_OK;
}

/* An FP8 checkpoint's weights and step policy, one line (NULL: not FP8). */
static const char *quant_text(const cosmos3_checkpoint_details *d, char *buf, size_t n) {
    if (!d->fp8) return NULL;
    char pol[96];
    if (d->fp8_policy)
        snprintf(pol, sizeof pol, "first %d / last %d steps 16-bit", d->fp8_first, d->fp8_last);
    else
        snprintf(pol, sizeof pol, "all steps fp8");
    snprintf(buf, n, "fp8 e4m3 (ModelOpt, per-tensor scales), step policy: %s", pol);
    return buf;
}

/* cosmos3 info -m DIR, on the public API: the checkpoint checked as gen's
 * load checks it (exit with gen's code and message: nothing printed), then
 * its geometry, sizes, plan and card. --check adds every stored value and
 * the whole load. A plan that does not fit is printed around and returned. */
static int cmd_info(c3_settings *s, char **pos, int npos) {
    if (npos == 1 && !s->given[option_index(option_find("model"))]) {
        char mi[4200];
        snprintf(mi, sizeof mi, "%s/model_index.json", pos[0]);
        if (!c3_file_exists(mi)) return info_media(s, pos[0]);
    }
    if (npos)
        return c3_fail(COSMOS3_EUSAGE, "info: unexpected argument '%s' (a model goes with -m DIR)",
                       pos[0]);
    cosmos3_open_params op;
    session_open_params(s, &op);
    char err[1024];
    cosmos3_checkpoint *ck = NULL;
    int rc = cosmos3_checkpoint_open(&op, &ck, err, sizeof err);
    if (rc) return c3_fail(rc, "%s", err);
    cosmos3_model_info mi;
    cosmos3_checkpoint_details d;
    cosmos3_checkpoint_model(ck, &mi, &d);
    /* the size planned for: the one given, else the model's own, else gen's default */
    bool video = s->frames > 1;
    int W = s->width ? s->width : mi.width ? mi.width : (video ? 1280 : 1024);
    int H = s->height ? s->height : mi.height ? mi.height : (video ? 720 : 1024);
    const char *size_from = s->width || s->height ? "as given"
                            : mi.width
                                ? "the model's default size; -W, -H and --frames plan another"
                                : "the default size; -W, -H and --frames plan another";
    op.plan_width = W;
    op.plan_height = H;
    op.plan_frames = s->frames;
    cosmos3_layout p;
    char *plan_text = NULL;
    char plan_err[1024] = "";
    int prc = cosmos3_checkpoint_plan(ck, &op, W, H, s->frames, &p, &plan_text, plan_err,
                                      sizeof plan_err);
    int64_t ntensors = 0, nvalues = 0;
    if (prc == COSMOS3_OK) { /* gen plans first, then loads: a plan that fails is its error */
        rc = cosmos3_checkpoint_check(ck, &op, s->check, &ntensors, &nvalues, err, sizeof err);
        if (rc) {
            free(plan_text);
            cosmos3_checkpoint_close(ck);
            return c3_fail(rc, "%s", err);
        }
    }
    int proc = 0;
    if (cosmos3_processes(&proc, NULL, NULL, 0) == COSMOS3_OK && proc != 0) {
        /* under mpirun or srun: process 0 prints the plan across the processes */
        free(plan_text);
        cosmos3_checkpoint_close(ck);
        return prc ? c3_fail(prc, "%s", plan_err) : COSMOS3_OK;
    }
    char a[32], b[32], c[32], e[32], q[160];
    const char *quant = quant_text(&d, q, sizeof q);
    if (s->json) {
        json_t *o =
            json_pack("{s:s,s:i,s:i,s:i,s:i,s:i,s:s,s:i,s:i,s:i,s:i}", "model", mi.id, "layers",
                      mi.layers, "hidden", mi.hidden, "heads", mi.heads, "kv_heads", mi.kv_heads,
                      "head_dim", mi.head_dim, "mlp", d.mlp, "intermediate", d.intermediate,
                      "vocab", d.vocab, "latent_channels", mi.latent_channels, "patch", mi.patch);
        json_object_set_new(o, "params",
                            json_pack("{s:I,s:I,s:I,s:I}", "und", (json_int_t)d.und_params, "gen",
                                      (json_int_t)d.gen_params, "vae", (json_int_t)d.vae_params,
                                      "unused", (json_int_t)d.unused_params));
        json_object_set_new(o, "bytes",
                            json_pack("{s:I,s:I,s:I,s:I}", "und", (json_int_t)d.und_bytes, "gen",
                                      (json_int_t)d.gen_bytes, "vae", (json_int_t)d.vae_bytes,
                                      "unused", (json_int_t)d.unused_bytes));
        if (d.random_weights)
            json_object_set_new(o, "random_weights",
                                json_pack("{s:s,s:f,s:s}", "generator", "c3_random_weight",
                                          "amplitude", d.random_amplitude, "made", "on load"));
        if (d.fp8) {
            json_t *qj =
                json_pack("{s:s,s:s,s:s,s:I,s:I}", "weights", "fp8_e4m3", "method", "modelopt",
                          "scales", "per-tensor", "fp8_tensors", (json_int_t)d.fp8_tensors,
                          "fp8_params", (json_int_t)d.fp8_params);
            json_object_set_new(qj, "step_policy",
                                d.fp8_policy ? json_pack("{s:i,s:i}", "first_16bit", d.fp8_first,
                                                         "last_16bit", d.fp8_last)
                                             : json_string("all_fp8"));
            json_object_set_new(o, "quantization", qj);
        }
        if (prc == COSMOS3_OK)
            json_object_set_new(o, "plan",
                                json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:I,s:I,s:I,s:I}",
                                          "width", W, "height", H, "frames", s->frames, "tp", p.tp,
                                          "cfg_parallel", p.cfg_parallel, "ulysses", p.ulysses,
                                          "world", p.world, "device", p.device, "device_note",
                                          p.device_note, "weights_per_rank", (json_int_t)p.weights,
                                          "kv_per_rank", (json_int_t)p.kv, "act_per_rank",
                                          (json_int_t)p.act, "need_per_rank", (json_int_t)p.need));
        if (s->check && prc == COSMOS3_OK)
            json_object_set_new(o, "check",
                                json_pack("{s:s,s:I,s:I}", "status", "ok", "tensors",
                                          (json_int_t)ntensors, "values", (json_int_t)nvalues));
        char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        printf("%s\n", txt);
        free(txt);
        json_decref(o);
    } else {
        printf("model: %s (%s)\n", mi.id, mi.dir);
        printf("geometry: %d layers per tower, hidden %d, %d q heads, %d KV heads, head dim %d\n",
               mi.layers, mi.hidden, mi.heads, mi.kv_heads, mi.head_dim);
        printf("mlp: %s, intermediate %d; vocab %d; rms eps %g; rope theta %g, mrope [%d,%d,%d]\n",
               strcmp(d.mlp, "swiglu") ? "ReLU^2" : "SwiGLU", d.intermediate, d.vocab, d.rms_eps,
               d.rope_theta, d.mrope[0], d.mrope[1], d.mrope[2]);
        printf("latent: %d channels, patch %d (%d per token)%s%s\n", mi.latent_channels, mi.patch,
               d.patch_dim, d.und_qk_norm ? "; UND QK-norm" : "; no UND QK-norm",
               d.und_k_norm_for_gen ? ", k_norm_und_for_gen" : "");
        c3_bytes_text(d.und_bytes, a, sizeof a);
        c3_bytes_text(d.gen_bytes, b, sizeof b);
        c3_bytes_text(d.vae_bytes, c, sizeof c);
        c3_bytes_text(d.unused_bytes, e, sizeof e);
        printf("parameters: UND %.3f M (%s), GEN %.3f M (%s), VAE %.3f M (%s), unused heads %.3f "
               "M (%s)\n",
               (double)d.und_params / 1e6, a, (double)d.gen_params / 1e6, b,
               (double)d.vae_params / 1e6, c, (double)d.unused_params / 1e6, e);
        if (quant) printf("weights: %s\n", quant);
        if (d.random_weights)
            printf("weights: random, made in memory on load (transformer/random.json: "
                   "c3_random_weight, bf16 uniform in +-%g); the pictures are noise\n",
                   d.random_amplitude);
        printf("system prompt by default: %s; scheduler: %s%s\n",
               mi.default_system_prompt ? "on" : "off", d.scheduler,
               /* its config's Karras sigmas, unless the card's schedule replaces them */
               d.karras_sigmas && !(mi.schedule && mi.schedule[0] && strcmp(mi.schedule, "karras"))
                   ? " (karras sigmas)"
                   : "");
        if (prc == COSMOS3_OK) {
            printf("%s\n", p.device_note);
            printf("plan for %dx%d, %d frame%s (%s):\n", W, H, s->frames, s->frames == 1 ? "" : "s",
                   size_from);
            fputs(plan_text ? plan_text : "", stdout);
        }
        print_card(&mi, &d);
        if (s->check && prc == COSMOS3_OK)
            printf(
                "check: ok: %lld tensors with the dtypes they must have, %lld values all finite; "
                "loads as gen loads it\n",
                (long long)ntensors, (long long)nvalues);
    }
    free(plan_text);
    cosmos3_checkpoint_close(ck);
    return prc ? c3_fail(prc, "%s", plan_err) : COSMOS3_OK;
}

/* ----------------------------------------------------------------- meta */

/* Text from a file, printed so that it cannot drive the terminal: control
 * characters (ESC, BEL, CR, ... but not newline or tab) as \xNN, and the C1
 * controls U+0080..U+009F as \u00NN. */
static void print_text(const char *t) {
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
            printf("\\x%02x", *p);
        else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            printf("\\u%04x", *++p);
        else
            putchar(*p);
    }
}

static int cmd_meta(c3_settings *s, char **pos, int npos) {
    if (npos != 1) return c3_fail(COSMOS3_EUSAGE, "meta: give one file cosmos3 wrote");
    char *js_buf, *params_buf;
    APP_TRY(metadata_read(pos[0], &js_buf, &params_buf));
    const char *js = js_buf, *params = params_buf;
    if (s->json) {
        printf("%s\n", js ? js : "{}");
    } else if (js) {
        json_t *o = json_loads(js, 0, NULL);
        json_t *st = o ? json_object_get(o, "settings") : NULL;
        if (!st) {
            print_text(params ? params : js);
            putchar('\n');
        } else {
            const char *k;
            json_t *v;
            json_t *m = json_object_get(o, "model");
            const char *id = json_string_value(json_object_get(m, "id"));
            if (m) {
                printf("model: ");
                print_text(id ? id : "?");
                putchar('\n');
            }
            json_object_foreach(st, k, v) {
                if (json_is_object(v)) { /* condition: the input file(s) and their hash */
                    const char *ck;
                    json_t *cv;
                    print_text(k);
                    printf(":");
                    json_object_foreach(v, ck, cv) {
                        putchar(' ');
                        print_text(ck);
                        for (size_t i = 0; i < (json_is_array(cv) ? json_array_size(cv) : 1); i++) {
                            json_t *e = json_is_array(cv) ? json_array_get(cv, i) : cv;
                            putchar(' ');
                            print_text(json_is_string(e) ? json_string_value(e) : "?");
                        }
                    }
                    putchar('\n');
                    continue;
                }
                if (!json_is_string(v) && !json_is_number(v) && !json_is_boolean(v)) continue;
                print_text(k);
                if (json_is_string(v)) {
                    printf(": ");
                    print_text(json_string_value(v));
                    putchar('\n');
                } else if (json_is_integer(v)) {
                    printf(": %lld\n", (long long)json_integer_value(v));
                } else if (json_is_real(v)) {
                    printf(": %g\n", json_real_value(v));
                } else {
                    printf(": %s\n", json_is_true(v) ? "on" : "off");
                }
            }
            json_t *l = json_object_get(o, "layout");
            if (l)
                printf("layout: tp %lld x cfg-parallel %lld x ulysses %lld on %s\n",
                       (long long)json_integer_value(json_object_get(l, "tp")),
                       (long long)json_integer_value(json_object_get(l, "cfg_parallel")),
                       (long long)json_integer_value(json_object_get(l, "ulysses")),
                       json_is_string(json_object_get(l, "device")) &&
                               !strcmp(json_string_value(json_object_get(l, "device")), "cuda")
                           ? "cuda"
                           : "cpu");
            /* written since session 8: the weights' precision, the GEN attention that ran */
            const char *prec = json_string_value(json_object_get(l, "precision"));
            const char *att = json_string_value(json_object_get(l, "attention"));
            if (prec && att) {
                printf("numerics: weights ");
                print_text(strcmp(prec, "auto") ? prec : "as stored");
                printf(", attention ");
                print_text(att);
                putchar('\n');
            }
            json_t *sc = json_object_get(o, "steps_cached"); /* the step cache, when on */
            if (json_is_integer(sc))
                printf("steps cached: %lld of %lld\n", (long long)json_integer_value(sc),
                       (long long)json_integer_value(json_object_get(st, "steps")));
            const char *ver = json_string_value(json_object_get(o, "version"));
            printf("version: ");
            print_text(ver ? ver : "?");
            putchar('\n');
        }
        json_decref(o);
    } else {
        print_text(params);
        putchar('\n');
    }
    free(js_buf);
    free(params_buf);
    return COSMOS3_OK;
}

/* -------------------------------------------------------------- mkmodel */

static int cmd_mkmodel(c3_settings *s, char **pos, int npos) {
    if (npos) return c3_fail(COSMOS3_EUSAGE, "mkmodel: unexpected argument '%s'", pos[0]);
    if (!s->output) return c3_fail(COSMOS3_EUSAGE, "mkmodel: give the folder to write with -o DIR");
    if (s->layers < 0 || s->layers > 1024)
        return c3_fail(COSMOS3_EUSAGE, "--layers %d must be in 0..1024", s->layers);
    uint64_t seed = 0;
    if (strcmp(s->seed, "random") != 0) {
        char *end;
        seed = strtoull(s->seed, &end, 10);
        if (*end)
            return c3_fail(COSMOS3_EUSAGE, "--seed '%s' must be a non-negative integer", s->seed);
    }
    cosmos3_mkmodel_params o;
    cosmos3_mkmodel_params_init(&o);
    o.preset = s->preset;
    o.layers = s->layers;
    o.seed = seed;
    o.out_dir = s->output;
    o.overwrite = s->overwrite;
    o.distilled = s->distilled;
    o.fp8 = s->fp8;
    o.random_transformer = s->random_transformer;
    double t0 = c3_now();
    char err[1024];
    int rc = cosmos3_mkmodel(&o, err, sizeof err);
    if (rc) return c3_fail(rc, "%s", err);
    if (!s->quiet) fprintf(stderr, "wrote %s (%s, %.1f s)\n", s->output, s->preset, c3_now() - t0);
    return COSMOS3_OK;
}

/* ----------------------------------------------------------------- main */

/* vLLM-Omni's launch line: `serve MODEL` (the model as serve's one word),
 * a Hugging Face model id (org/name, --revision) found in the local cache,
 * --model-class-name checked against the checkpoint. The same for every
 * command that opens a model (-m org/name or $COSMOS3_MODEL). */
static int model_from_launch_line(c3_settings *s, unsigned cmd, char **pos, int *npos) {
    int mi = option_index(option_find("model"));
    if (cmd == CMD_SERVE && *npos == 1 && !s->given[mi]) {
        free(s->model);
        s->model = xstrdup(pos[0]);
        s->given[mi] = true;
        *npos = 0;
    }
    const char *m = s->model ? s->model : getenv("COSMOS3_MODEL");
    if (m && hf_is_model_id(m)) {
        char dir[4096];
        APP_TRY(hf_resolve(m, s->revision, dir, sizeof dir));
        snprintf(s->model_name, sizeof s->model_name, "%s", m);
        free(s->model);
        s->model = xstrdup(dir);
    } else if (s->revision) {
        return c3_fail(COSMOS3_EUSAGE,
                       "--revision goes with a Hugging Face model id (-m org/name); %s is a folder",
                       m ? m : "the built-in model");
    }
    if (s->model_class_name) {
        char dir[4096];
        APP_TRY(hf_check_class(pipeline_model_dir(s, dir, sizeof dir), s->model_class_name));
    }
    return COSMOS3_OK;
}

static int finish(int rc) {
    if (rc && g_lost_said) return rc; /* the cause is said already */
    /* ranks in several processes: a usage error is every process's (the
     * same command line); process 0 alone says it */
    int proc = 0, procs = 1;
    bool all = rc == COSMOS3_EUSAGE && cosmos3_processes(&proc, &procs, NULL, 0) == COSMOS3_OK &&
               procs > 1;
    if (all && proc != 0 && cosmos3_processes_together(10)) return rc;
    if (rc && rc != COSMOS3_ECANCEL) fprintf(stderr, "cosmos3: %s\n", c3_errmsg());
    if (all && proc == 0) {
        fflush(stderr);
        (void)cosmos3_processes_together(10); /* said before the others end */
    }
    if (rc == COSMOS3_ECANCEL) fprintf(stderr, "cosmos3: cancelled\n");
    return rc;
}

int main(int argc, char **argv) {
    char **argv0 = argv;
    /* cosmos3 alone, or with options only: the REPL */
    static char **repl_argv; /* static: reachable until exit */
    if (argc < 2 || (argv[1][0] == '-' && strcmp(argv[1], "--help") && strcmp(argv[1], "-h") &&
                     strcmp(argv[1], "--version") && strcmp(argv[1], "-V"))) {
        repl_argv = xcalloc((size_t)argc + 2, sizeof(char *));
        repl_argv[0] = argv[0];
        repl_argv[1] = (char *)"repl";
        for (int i = 1; i < argc; i++)
            repl_argv[i + 1] = argv[i];
        for (int i = 2; i <= argc; i++) /* --tui anywhere: the dashboard */
            if (!strcmp(repl_argv[i], "--tui")) {
                repl_argv[1] = (char *)"tui";
                memmove(&repl_argv[i], &repl_argv[i + 1], (size_t)(argc - i + 1) * sizeof(char *));
                argc--;
                break;
            }
        argc++;
        argv = repl_argv;
    }
    const char *cmd = argv[1];
    /* the commands that run the engine on threads of their own */
    if (!strcmp(cmd, "repl") || !strcmp(cmd, "tui") || !strcmp(cmd, "serve"))
        omp_wait_passive(argv0);
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V") || !strcmp(cmd, "version")) {
        print_version(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "__man-options")) { /* for man/cosmos3.1 (tests/test_docs.sh) */
        docs_man_options(stdout);
        return 0;
    }
    if (!strcmp(cmd, "__man-environment")) { /* its ENVIRONMENT section, from src/env.c's table */
        docs_man_environment(stdout);
        return 0;
    }
    if (!strcmp(cmd, "__completion")) { /* share/cosmos3.bash-completion */
        const char *names[C3_ARRAY_LEN(commands)];
        for (size_t i = 0; i < C3_ARRAY_LEN(commands); i++)
            names[i] = commands[i].name;
        docs_bash_completion(stdout, names, (int)C3_ARRAY_LEN(commands));
        return 0;
    }
    if (!strcmp(cmd, "help")) {
        if (argc < 3) {
            usage(stdout);
            return 0;
        }
        for (size_t i = 0; i < C3_ARRAY_LEN(commands); i++)
            if (!strcmp(argv[2], commands[i].name)) {
                command_help(stdout, &commands[i]);
                return 0;
            }
        char names[256] = "";
        for (size_t i = 0; i < C3_ARRAY_LEN(commands); i++) {
            strncat(names, " ", sizeof names - strlen(names) - 1);
            strncat(names, commands[i].name, sizeof names - strlen(names) - 1);
        }
        const char *near = near_command(argv[2]);
        if (near)
            return finish(c3_fail(COSMOS3_EUSAGE,
                                  "help: no command '%s'; did you mean '%s'? commands:%s", argv[2],
                                  near, names));
        return finish(
            c3_fail(COSMOS3_EUSAGE, "help: no command '%s'; commands:%s", argv[2], names));
    }
    const c3_command *c = NULL;
    for (size_t i = 0; i < C3_ARRAY_LEN(commands); i++)
        if (!strcmp(cmd, commands[i].name)) c = &commands[i];
    if (!c) {
        const char *near = near_command(cmd);
        if (near)
            return finish(c3_fail(COSMOS3_EUSAGE,
                                  "unknown command '%s'; did you mean '%s'? (see cosmos3 --help)",
                                  cmd, near));
        return finish(c3_fail(COSMOS3_EUSAGE, "unknown command '%s'; see cosmos3 --help", cmd));
    }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            command_help(stdout, c);
            return 0;
        } else if (!strcmp(argv[i], "--"))
            break;
    struct sigaction sa = {.sa_handler = on_sigint};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    output_signals_install(); /* SIGTERM, SIGHUP: nothing half-written; SIGXFSZ: a write error */
    c3_settings s = {0};
    settings_defaults(&s);
    char **pos;
    int npos;
    int rc = settings_parse(&s, c->bit, argc - 2, argv + 2, &pos, &npos);
    if (rc == COSMOS3_OK) rc = model_from_launch_line(&s, c->bit, pos, &npos);
    if (rc == COSMOS3_OK) rc = c->run(&s, pos, npos);
    free(pos);
    settings_free(&s);
    free(repl_argv);
    return finish(rc);
}
