/* options.c - the options table and everything that reads it. */
#include "options.h"

#include "metadata.h"

#include <math.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#define F(field) offsetof(c3_settings, field)

/* clang-format off */
const c3_option c3_options[] = {
    /* name, short, aliases, type, default, values, metavar, help, commands, field, repl */
    {"model", 'm', NULL, OPT_STR, NULL, NULL, "DIR",
     "model folder (Diffusers layout); default $COSMOS3_MODEL, else the built-in default model",
     CMD_RUN | CMD_TOKENIZE | CMD_INFO, F(model), false, COSMOS3_FIELD_NONE},
    {"revision", 0, NULL, OPT_STR, NULL, NULL, "REV",
     "with a Hugging Face model id (-m org/name): the branch, tag or commit in the local Hugging Face "
     "cache [default: main]",
     CMD_RUN | CMD_TOKENIZE | CMD_INFO, F(revision), false, COSMOS3_FIELD_NONE},
    {"model-class-name", 0, NULL, OPT_STR, NULL, NULL, "NAME",
     "refuse a checkpoint whose model_index.json _class_name is another (vLLM-Omni's "
     "Cosmos3OmniDiffusersPipeline names Cosmos3OmniPipeline)",
     CMD_RUN | CMD_INFO, F(model_class_name), false, COSMOS3_FIELD_NONE},
    {"prompt", 'p', NULL, OPT_STR, NULL, NULL, "TEXT", "what to draw (- reads standard input)",
     CMD_GEN | CMD_BENCH | CMD_TUI, F(prompt), true, COSMOS3_FIELD_PROMPT},
    {"negative-prompt", 'n', "negative", OPT_STR, "", NULL, "TEXT", "negative prompt (the unconditional branch)",
     CMD_RUN, F(negative), true, COSMOS3_FIELD_NEGATIVE_PROMPT},
    {"system-prompt", 0, NULL, OPT_ENUM, "auto", "auto|on|off", "WHEN",
     "add the system message to the chat template (auto: the checkpoint's default_use_system_prompt)",
     CMD_RUN | CMD_TOKENIZE, F(system_prompt), true, COSMOS3_FIELD_SYSTEM_PROMPT},
    {"templates", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "append the resolution (and, for video, duration) sentences to both prompts (gen: on, --no-templates "
     "turns them off; tokenize: off unless given)",
     CMD_RUN | CMD_TOKENIZE, F(templates), true, COSMOS3_FIELD_TEMPLATES},
    {"max-sequence-length", 0, NULL, OPT_INT, "4096", NULL, "N",
     "cut each prompt's chat-template ids (system message and sentences included) to their first N, "
     "with a warning, as vLLM-Omni's max_sequence_length (4096 is also the limit)",
     CMD_RUN, F(max_seq), true, COSMOS3_FIELD_MAX_SEQUENCE_LENGTH},
    {"width", 'W', NULL, OPT_INT, NULL, NULL, "PX", "width in pixels, a multiple of 16 (image 1024, video 1280)",
     CMD_RUN | CMD_TOKENIZE | CMD_BENCH | CMD_INFO, F(width), true, COSMOS3_FIELD_WIDTH},
    {"height", 'H', NULL, OPT_INT, NULL, NULL, "PX", "height in pixels, a multiple of 16 (image 1024, video 720)",
     CMD_RUN | CMD_TOKENIZE | CMD_BENCH | CMD_INFO, F(height), true, COSMOS3_FIELD_HEIGHT},
    {"frames", 'F', "num-frames", OPT_INT, "1", NULL, "N", "frames: 1 for an image, 1 + 4k for a video (e.g. 189)",
     CMD_RUN | CMD_TOKENIZE | CMD_BENCH | CMD_INFO, F(frames), true, COSMOS3_FIELD_FRAMES},
    {"fps", 0, NULL, OPT_FLOAT, "24", NULL, "R", "video frame rate (positions and the duration sentence)",
     CMD_RUN | CMD_TOKENIZE, F(fps), true, COSMOS3_FIELD_FPS},
    {"steps", 's', "num-inference-steps", OPT_INT, NULL, NULL, "N", "denoising steps (image 50, video 35)",
     CMD_RUN | CMD_BENCH, F(steps), true, COSMOS3_FIELD_STEPS},
    {"guidance", 'g', "guidance-scale cfg-scale", OPT_FLOAT, NULL, NULL, "G",
     "classifier-free guidance scale; 1 disables the negative branch (image 7, video 6)", CMD_RUN,
     F(guidance), true, COSMOS3_FIELD_GUIDANCE},
    {"shift", 0, "flow-shift", OPT_FLOAT, NULL, NULL, "S", "flow shift of the sigma schedule (image 3, video 10)",
     CMD_RUN, F(shift), true, COSMOS3_FIELD_SHIFT},
    {"schedule", 0, NULL, OPT_ENUM, "linear", "native|linear|karras|flowmatch4", "KIND",
     "sigma schedule: linear (vLLM-Omni), native (cosmos-framework), karras (diffusers checkpoint default), "
     "flowmatch4 (distilled 4-step sampler)",
     CMD_RUN, F(schedule), true, COSMOS3_FIELD_SCHEDULE},
    {"guidance-interval", 0, NULL, OPT_RANGE, NULL, NULL, "LO,HI|none",
     "apply CFG only while LO <= t <= HI (image 400,1000; video none)", CMD_RUN,
     F(guidance_interval), true, COSMOS3_FIELD_GUIDANCE_INTERVAL},
    {"cache", 0, NULL, OPT_ENUM, "none", "none|sea|fb", "KIND",
     "step cache: skip the GEN block stack on steps whose input barely changed and add its cached residual "
     "instead; sea (SeaCache: the spectrally filtered latents' change), fb (first-block cache: the first "
     "block's residual's change); off for the distilled 4-step sampler",
     CMD_RUN, F(cache), true, COSMOS3_FIELD_NONE},
    {"cache-threshold", 0, NULL, OPT_FLOAT, NULL, NULL, "X",
     "step cache: skip while the accumulated relative L1 change stays below X (sea 0.25, fb 0.08; 0 never "
     "skips)", CMD_RUN, F(cache_threshold), true, COSMOS3_FIELD_NONE},
    {"cache-max-skip", 0, NULL, OPT_INT, "2", NULL, "N", "step cache: the most consecutive skipped steps",
     CMD_RUN, F(cache_max_skip), true, COSMOS3_FIELD_NONE},
    {"cache-warmup", 0, NULL, OPT_INT, "1", NULL, "N", "step cache: the first N steps always run",
     CMD_RUN, F(cache_warmup), true, COSMOS3_FIELD_NONE},
    {"seed", 'S', NULL, OPT_STR, "random", NULL, "N|random",
     "noise seed: the same seed with the same settings, model and device repeats a picture (random: a new one, printed); mkmodel: the weights' seed",
     CMD_RUN | CMD_MKMODEL, F(seed), true, COSMOS3_FIELD_SEED},
    {"noise", 0, NULL, OPT_STR, NULL, NULL, "FILE",
     "initial noise: tensor 'latents' [1,48,T,H/16,W/16] f32 from a safetensors file (replaces the seed)",
     CMD_GEN, F(noise), true, COSMOS3_FIELD_NOISE},
    {"save-latents", 0, NULL, OPT_STR, NULL, NULL, "FILE",
     "write the final latents as 'latents' to FILE (with --sound also the final 'sound_latents'; bench --e2e: the "
     "timed request's)", CMD_GEN | CMD_BENCH, F(save_latents), true, COSMOS3_FIELD_NONE},
    {"sound", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "generate the clip's sound with it (checkpoints with sound_tokenizer/): AAC 48 kHz stereo in .mp4, "
     "Opus in .webm, sound.wav beside PNG frames, -o x.wav the waveform alone; --noise may hold "
     "'sound_latents' [64,T_s]", CMD_RUN, F(sound), true, COSMOS3_FIELD_NONE},
    {"wav-format", 0, NULL, OPT_ENUM, "s16", "s16|f32", "FMT",
     "PCM of the WAV files sound writes: 16-bit integers or 32-bit floats", CMD_RUN, F(wav_format), true,
     COSMOS3_FIELD_NONE},
    {"from", 0, NULL, OPT_STR, NULL, NULL, "FILE",
     "run again with the settings stored in FILE (an image or video cosmos3 wrote; see meta); options after it "
     "override them", CMD_GEN, F(from), false, COSMOS3_FIELD_NONE},
    {"image", 0, NULL, OPT_STR, NULL, NULL, "FILE",
     "image-to-video: continue this picture (PNG, JPEG or WebP; of a clip, its first frame), "
     "resized to cover the size and centre-cropped; "
     "pins latent frame 0",
     CMD_GEN, F(image), true, COSMOS3_FIELD_IMAGE},
    {"video", 0, NULL, OPT_STR, NULL, NULL, "FILE|DIR",
     "video-to-video: continue this clip (MP4, WebM or MOV; animated WebP; a folder of PNG frames "
     "in name order; a pattern such as clip/%04d.png; or one picture)",
     CMD_GEN, F(video), true, COSMOS3_FIELD_VIDEO},
    {"condition-frames", 0, NULL, OPT_STR, "0,1", NULL, "I,J,..",
     "video-to-video: the latent frames taken from the clip (frame k covers clip frames up to 4k)",
     CMD_GEN, F(condition_frames), true, COSMOS3_FIELD_CONDITION_FRAMES},
    {"first-last", 0, NULL, OPT_STR, NULL, NULL, "START END",
     "first-last boundary to video: pin the first latent frames to START and the last to END, each a "
     "picture (PNG) or a clip as --video takes (its first / last 4k+1 frames)",
     CMD_GEN, F(first_last), false, COSMOS3_FIELD_NONE},
    {"condition-keep", 0, NULL, OPT_ENUM, "first", "first|last", "END",
     "video-to-video: keep the first or the last max(index)*4+1 frames of the clip", CMD_GEN,
     F(condition_keep), true, COSMOS3_FIELD_NONE},
    {"output", 'o', NULL, OPT_STR, NULL, NULL, "PATH",
     "file to write, its format by extension: .png .jpg .jpeg .webp, video .mp4 .webm (or PNG frames: a folder "
     "or a pattern with %04d); - writes it to standard output; default cosmos3-SEED.png (video: .mp4); bench "
     "--e2e: where its PNG goes (default a file in $TMPDIR, removed)",
     CMD_RUN | CMD_MKMODEL | CMD_BENCH, F(output), true, COSMOS3_FIELD_NONE},
    {"crf", 0, NULL, OPT_INT, "18", NULL, "N",
     "video quality: the constant rate factor of .mp4 (H.264, 0-51) and .webm (VP9, 0-63); lower is better and "
     "larger", CMD_GEN | CMD_REPL | CMD_TUI, F(crf), true, COSMOS3_FIELD_NONE},
    {"overwrite", 0, NULL, OPT_FLAG, NULL, NULL, NULL, "replace existing output files",
     CMD_RUN | CMD_MKMODEL, F(overwrite), true, COSMOS3_FIELD_NONE},
    {"quiet", 'q', NULL, OPT_FLAG, NULL, NULL, NULL, "no progress line", CMD_GEN | CMD_MKMODEL | CMD_BENCH,
     F(quiet), false, COSMOS3_FIELD_NONE},
    {"json", 0, NULL, OPT_FLAG, NULL, NULL, NULL, "print a one-object JSON summary on stdout",
     CMD_GEN | CMD_INFO | CMD_META | CMD_BENCH, F(json), false, COSMOS3_FIELD_NONE},
    {"tp", 0, "tensor-parallel-size", OPT_INT, "1", NULL, "N", "tensor-parallel ranks (must divide the KV heads)",
     CMD_PLAN, F(tp), false, COSMOS3_FIELD_NONE},
    {"cfg-parallel", 0, "cfg-parallel-size", OPT_INT, "1", NULL, "N",
     "1: branches in turn; 2: cond and uncond branches on separate rank groups", CMD_PLAN, F(cfg_parallel), false, COSMOS3_FIELD_NONE},
    {"ulysses", 0, "ulysses-degree", OPT_INT, "1", NULL, "N", "Ulysses sequence-parallel ranks for the GEN tower",
     CMD_PLAN, F(ulysses), false, COSMOS3_FIELD_NONE},
    {"device", 0, NULL, OPT_ENUM, "auto", "auto|cpu|cuda", "DEV", "where to run (auto: CUDA when a GPU is found)",
     CMD_PLAN, F(device), false, COSMOS3_FIELD_NONE},
    {"gpus", 0, NULL, OPT_STR, NULL, NULL, "LIST", "GPU ordinals to use, e.g. 0,1,2,3 (default: all visible)",
     CMD_PLAN, F(gpus), false, COSMOS3_FIELD_NONE},
    {"offload", 0, "enable-layerwise-offload", OPT_FLAG, NULL, NULL, NULL,
     "keep block weights in host memory and stream them layer by layer", CMD_PLAN, F(offload), false, COSMOS3_FIELD_NONE},
    {"ranks-per-process", 0, NULL, OPT_INT, "0", NULL, "N",
     "under mpirun or srun: ranks each process holds, one per GPU or thread (0: the layout's world / the processes)",
     CMD_PLAN, F(ranks_per_process), false, COSMOS3_FIELD_NONE},
    {"allow-cross-host", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "under mpirun or srun: let a --tp or --ulysses group span hosts (their exchanges run every layer)",
     CMD_PLAN, F(allow_cross_host), false, COSMOS3_FIELD_NONE},
    {"threads", 't', NULL, OPT_INT, "0", NULL, "N", "CPU threads (0: all cores)", CMD_PLAN, F(threads), false, COSMOS3_FIELD_NONE},
    {"precision", 0, NULL, OPT_ENUM, "auto", "auto|bf16|fp8", "P",
     "matrix products: auto (as the checkpoint stores its weights), bf16 (FP8 weights dequantised at load), fp8 "
     "(a bf16 checkpoint quantised to E4M3 at load)", CMD_PLAN, F(precision), false, COSMOS3_FIELD_NONE},
    {"attention", 0, NULL, OPT_ENUM, "bf16", "bf16|fp8", "KIND",
     "the GEN tower's attention: bf16, or fp8 (Q, K, P, V in E4M3 with per-head scales, fp32 accumulation; "
     "Hopper GPUs and head_dim 128, the CPU emulates it; about 4e-2 relative error, so not the default)",
     CMD_PLAN, F(attention), false, COSMOS3_FIELD_NONE},
    {"check", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "also scan every weight (dtypes, NaN/Inf) and load the model as gen does (time and memory of a load)",
     CMD_INFO, F(check), false, COSMOS3_FIELD_NONE},
    {"raw", 0, NULL, OPT_FLAG, NULL, NULL, NULL, "tokenizer only: no chat template, no appended ids",
     CMD_TOKENIZE, F(raw), false, COSMOS3_FIELD_NONE},
    {"negative", 0, NULL, OPT_FLAG, NULL, NULL, NULL, "tokenize TEXT as the negative prompt (\"is not\" templates)",
     CMD_TOKENIZE, F(negative_flag), false, COSMOS3_FIELD_NONE},
    {"lines", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "tokenize each line of TEXT (or of standard input) as its own prompt; one line of ids per prompt",
     CMD_TOKENIZE, F(lines), false, COSMOS3_FIELD_NONE},
    {"preset", 0, NULL, OPT_ENUM, "tiny", "tiny|demo|edge|nano|super", "NAME", "geometry of the random checkpoint",
     CMD_MKMODEL | CMD_BENCH, F(preset), false, COSMOS3_FIELD_NONE},
    {"layers", 0, NULL, OPT_INT, "0", NULL, "N", "layers per tower (0: the preset's)", CMD_MKMODEL | CMD_BENCH,
     F(layers), false, COSMOS3_FIELD_NONE},
    {"distilled", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "a distilled checkpoint: the 4-step students' FlowMatch scheduler with fixed_step_sampler_config",
     CMD_MKMODEL, F(distilled), false, COSMOS3_FIELD_NONE},
    {"fp8", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "FP8 layer weights in NVIDIA ModelOpt's layout: E4M3 weights, weight_scale, input_scale and the "
     "quantization_config block", CMD_MKMODEL, F(fp8), false, COSMOS3_FIELD_NONE},
    {"random-transformer", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "no transformer shards: transformer/random.json instead, and the weights are made in memory each "
     "time the folder opens (bf16, uniform in +-0.03, as cosmos3 bench makes them): Nano or Super "
     "without writing 30-125 GB; the VAE, configs and tokenizer as usual",
     CMD_MKMODEL, F(random_transformer), false, COSMOS3_FIELD_NONE},
    {"skip-vae", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "do not time the VAE decode and PNG write (they need a random VAE written to $TMPDIR first)", CMD_BENCH,
     F(skip_vae), false, COSMOS3_FIELD_NONE},
    {"e2e", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "instead of the CFG step, one distilled 4-step request end to end as gen runs it (tokenize, UND, one "
     "forward per step with the fixed-step SDE sampler, the preset's VAE decode, the PNG written to -o or "
     "$TMPDIR), after a warm-up request; prints the memory plan and every phase", CMD_BENCH, F(e2e), false, COSMOS3_FIELD_NONE},
    {"host", 0, NULL, OPT_STR, "127.0.0.1", NULL, "ADDR", "address to listen on", CMD_SERVE, F(host), false, COSMOS3_FIELD_NONE},
    {"omni", 0, NULL, OPT_FLAG, NULL, NULL, NULL,
     "accepted for vLLM-Omni's launch line (vllm serve MODEL --omni); cosmos3 serve is always the "
     "omni server", CMD_SERVE, F(omni), false, COSMOS3_FIELD_NONE},
    {"allowed-local-media-path", 0, NULL, OPT_STR, NULL, NULL, "DIR",
     "let a request name a local picture or clip (file:///... or a plain path) as a reference, only "
     "inside DIR (real paths: '..' and symlinks out of it are refused); off by default",
     CMD_SERVE, F(allowed_media), false, COSMOS3_FIELD_NONE},
    {"init-timeout", 0, NULL, OPT_FLOAT, "0", NULL, "S",
     "stop with an error when the model has not loaded in S seconds (0: no bound)", CMD_SERVE,
     F(init_timeout), false, COSMOS3_FIELD_NONE},
    {"port", 0, NULL, OPT_INT, "8000", NULL, "PORT", "port to listen on (0: any free port, printed at start)",
     CMD_SERVE, F(port), false, COSMOS3_FIELD_NONE},
    {"replicas", 0, NULL, OPT_INT, "1", NULL, "N",
     "engines serving at once, each a copy of the model on its own GPU group (--gpus, else every visible "
     "GPU, split in N groups of tp x cfg-parallel x ulysses); on the CPU they share the cores (--threads, "
     "else all cores, divided)",
     CMD_SERVE, F(replicas), false, COSMOS3_FIELD_NONE},
    {"max-batch", 0, NULL, OPT_INT, "0", NULL, "N",
     "requests of the same shape (size, frames, steps, sampler) run as one batch through the GEN tower, at "
     "most N (0: as many as the engine's memory plan allows; 1: one at a time)",
     CMD_SERVE, F(max_batch), false, COSMOS3_FIELD_NONE},
    {"instance", 0, NULL, OPT_STR, NULL, NULL, "NAME",
     "this server's name behind a load balancer: 1 to 48 of a-z, 0-9 and '-'; every /v1/videos job id "
     "carries it (video_NAME_HEX) so the balancer routes a job's requests here, and /health and /metrics "
     "name it (default: the host name and the port, e.g. gpu1-8000)",
     CMD_SERVE, F(instance), false, COSMOS3_FIELD_NONE},
    {"keep-videos", 0, NULL, OPT_INT, "32", NULL, "N",
     "finished /v1/videos jobs kept (in --store) for GET .../content (also at most 1 GiB of MP4); the oldest "
     "go first",
     CMD_SERVE, F(keep_videos), false, COSMOS3_FIELD_NONE},
    {"store", 0, NULL, OPT_STR, NULL, NULL, "DIR",
     "the folder of the /v1/videos job store (jobs.db, an SQLite database, and the finished videos in "
     "videos/): a completed video is still listed and downloadable after a restart, a job that was "
     "queued or running is failed with \"the server restarted\"; made 0700; one server per folder "
     "(default $XDG_STATE_HOME/cosmos3, else ~/.local/state/cosmos3)",
     CMD_SERVE, F(store_dir), false, COSMOS3_FIELD_NONE},
    {"result-cache", 0, NULL, OPT_INT, "0", NULL, "N",
     "answer a repeated image request (every resolved setting equal, the seed given) from the last N results "
     "(at most 256 MiB) without running, marked \"cached\": true; 0: off; never for a random seed",
     CMD_SERVE, F(result_cache), false, COSMOS3_FIELD_NONE},
    {"queue", 0, "max-queue", OPT_INT, "16", NULL, "N",
     "requests that may wait behind the one running; more are answered 429 with Retry-After", CMD_SERVE,
     F(queue), false, COSMOS3_FIELD_NONE},
    {"api-key", 0, NULL, OPT_STR, NULL, NULL, "KEY",
     "require 'Authorization: Bearer KEY' on every request but GET /health (default $COSMOS3_API_KEY); "
     "needed when --host is not a loopback address",
     CMD_SERVE, F(api_key), false, COSMOS3_FIELD_NONE},
    {"max-cost", 0, NULL, OPT_INT, "200", NULL, "N",
     "largest request: width x height x frames x steps x n, in 1024x1024-pixel steps (200: four 1024x1024 "
     "images of 50 steps); more is answered 400",
     CMD_SERVE, F(max_cost), false, COSMOS3_FIELD_NONE},
    {"max-per-client", 0, NULL, OPT_INT, "0", NULL, "N",
     "requests one client may have in flight at once (an address, or the X-Forwarded-For client behind "
     "--trusted-proxy); more are answered 429 with Retry-After, never reset (0: --queue + 16, at least 32)",
     CMD_SERVE, F(max_per_client), false, COSMOS3_FIELD_NONE},
    {"trusted-proxy", 0, NULL, OPT_STR, NULL, NULL, "ADDR",
     "the address of a reverse proxy (load balancer) in front of this server: for its connections the last "
     "X-Forwarded-For entry is the client that --max-per-client counts",
     CMD_SERVE, F(trusted_proxy), false, COSMOS3_FIELD_NONE},
    {"preview", 0, NULL, OPT_ENUM, "auto", "auto|off|sixel|blocks", "HOW", "show finished images in the terminal: auto (sixel where the terminal answers, else blocks), off, sixel or blocks (colour half-blocks; shades under NO_COLOR)",
     CMD_REPL | CMD_TUI, F(preview), true, COSMOS3_FIELD_NONE},
};
/* clang-format on */
const int c3_noptions = (int)C3_ARRAY_LEN(c3_options);
_Static_assert(C3_ARRAY_LEN(c3_options) <= C3_ARRAY_LEN(((c3_settings *)0)->given),
               "c3_settings.given has fewer slots than the options table has rows");

/* Rows a command fills internally (serve: each request's output file) but
 * refuses on its command line: not parsed there, not in its help, its man
 * page entry or its completion. */
static const struct {
    const char *name;
    unsigned cmds;
    const char *why; /* the message's reason */
} cli_refused[] = {
    {"frames", CMD_SERVE, "a request asks for its frames: num_frames in POST /v1/videos"},
    {"fps", CMD_SERVE, "a request asks for its fps: fps in POST /v1/videos"},
    {"output", CMD_SERVE, "images and videos go back in the answers"},
    {"overwrite", CMD_SERVE, "the server overwrites no file (answers go back in the responses)"},
};

/* A row the command refuses on its command line: one line saying why. */
static int refused(unsigned cmd, const c3_option *o) {
    for (size_t i = 0; i < C3_ARRAY_LEN(cli_refused); i++)
        if (!strcmp(cli_refused[i].name, o->name) && (cli_refused[i].cmds & cmd))
            return c3_fail(COSMOS3_EUSAGE, "%s: --%s is not used (%s); drop --%s", cmd_name(cmd),
                           o->name, cli_refused[i].why, o->name);
    return c3_fail(COSMOS3_EUSAGE, "%s: --%s is not taken here; see 'cosmos3 help %s'",
                   cmd_name(cmd), o->name, cmd_name(cmd));
}

unsigned option_cli_cmds(const c3_option *o) {
    unsigned c = o->cmds;
    for (size_t i = 0; i < C3_ARRAY_LEN(cli_refused); i++)
        if (!strcmp(cli_refused[i].name, o->name)) c &= ~cli_refused[i].cmds;
    return c;
}

static const char *const cmd_names[] = {"gen", "tokenize", "info", "meta", "mkmodel",
                                        "repl", "tui", "serve", "bench"};

const char *cmd_name(unsigned cmd) {
    for (unsigned i = 0; i < C3_ARRAY_LEN(cmd_names); i++)
        if (cmd == 1u << i) return cmd_names[i];
    return "?";
}
unsigned cmd_parse(const char *name) {
    for (unsigned i = 0; i < C3_ARRAY_LEN(cmd_names); i++)
        if (strcmp(name, cmd_names[i]) == 0) return 1u << i;
    return 0;
}

int option_index(const c3_option *o) { return (int)(o - c3_options); }

const c3_option *option_for_field(cosmos3_field f) {
    for (int i = 0; f != COSMOS3_FIELD_NONE && i < c3_noptions; i++)
        if (c3_options[i].field == f) return &c3_options[i];
    return NULL;
}

bool settings_given(const c3_settings *s, cosmos3_field f) {
    const c3_option *o = option_for_field(f);
    return o && s->given[option_index(o)];
}

static bool alias_match(const char *aliases, const char *name) {
    if (!aliases) return false;
    size_t n = strlen(name);
    for (const char *p = aliases; *p;) {
        const char *e = strchr(p, ' ');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

const c3_option *option_find_for(const char *name, unsigned cmds) {
    for (int i = 0; i < c3_noptions; i++)
        if ((c3_options[i].cmds & cmds) && strcmp(c3_options[i].name, name) == 0)
            return &c3_options[i];
    for (int i = 0; i < c3_noptions; i++)
        if ((c3_options[i].cmds & cmds) && alias_match(c3_options[i].aliases, name))
            return &c3_options[i];
    return NULL;
}

const c3_option *option_find(const char *name) {
    return option_find_for(name, ~0u);
}

/* Optimal string alignment distance (edits, transpositions counting one)
 * between a[0..n) and b, both short (longer words count as far apart). */
int c3_edit_distance(const char *a, size_t n, const char *b) {
    size_t m = strlen(b);
    enum { MAXW = 32 };
    if (n >= MAXW || m >= MAXW) return 99;
    int d[MAXW + 1][MAXW + 1];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int cost = tolower((unsigned char)a[i - 1]) != b[j - 1];
            int v = C3_MIN(d[i - 1][j] + 1, d[i][j - 1] + 1);
            v = C3_MIN(v, d[i - 1][j - 1] + cost);
            if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == b[j - 2] &&
                tolower((unsigned char)a[i - 2]) == b[j - 1])
                v = C3_MIN(v, d[i - 2][j - 2] + 1);
            d[i][j] = v;
        }
    return d[n][m];
}

const char *c3_nearest_word(const char *w, const char *const *words, int nwords) {
    size_t n = strlen(w);
    if (n < 2) return NULL;
    int limit = n >= 6 ? 2 : 1, best = limit + 1;
    const char *name = NULL;
    for (int i = 0; i < nwords; i++) {
        int k = c3_edit_distance(w, n, words[i]);
        if (k < best) {
            best = k;
            name = words[i];
        }
    }
    return name;
}

/* The long name (or alias) of cmd's options nearest to a mistyped one. */
static const char *near_option(const char *name, unsigned cmd) {
    const char *words[256];
    static _Thread_local char alias_buf[2048]; /* the answer can point into it */
    size_t used = 0;
    int n = 0;
    for (int i = 0; i < c3_noptions && n < 250; i++) {
        const c3_option *o = &c3_options[i];
        if (!(option_cli_cmds(o) & cmd)) continue;
        words[n++] = o->name;
        for (const char *p = o->aliases; p && *p && n < 250;) {
            size_t L = strcspn(p, " ");
            if (used + L + 1 > sizeof alias_buf) break;
            memcpy(alias_buf + used, p, L);
            alias_buf[used + L] = 0;
            words[n++] = alias_buf + used;
            used += L + 1;
            p += L;
            while (*p == ' ')
                p++;
        }
    }
    const char *w = c3_nearest_word(name, words, n);
    if (!w) return NULL;
    /* an alias names its row's long name */
    return w;
}

/* ------------------------------------------------------------- values */

static int parse_int(const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int parse_double(const char *v, double *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) return -1;
    *out = x;
    return 0;
}

static bool enum_ok(const char *values, const char *v) {
    size_t n = strlen(v);
    for (const char *p = values; *p;) {
        const char *e = strchr(p, '|');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static int set_value(c3_settings *s, const c3_option *o, const char *v) {
    void *field = (char *)s + o->offset;
    switch (o->type) {
    case OPT_STR:
    case OPT_ENUM:
        if (o->type == OPT_ENUM && !enum_ok(o->values, v))
            return c3_fail(COSMOS3_EUSAGE, "--%s: '%s' is not one of %s", o->name, v, o->values);
        free(*(char **)field);
        *(char **)field = xstrdup(v);
        break;
    case OPT_INT: {
        long long x;
        if (parse_int(v, -(1ll << 31) + 1, (1ll << 31) - 1, &x) != 0)
            return c3_fail(COSMOS3_EUSAGE, "--%s: '%s' is not an integer", o->name, v);
        *(int *)field = (int)x;
        break;
    }
    case OPT_U64: {
        long long x;
        if (parse_int(v, 0, INT64_MAX, &x) != 0)
            return c3_fail(COSMOS3_EUSAGE, "--%s: '%s' is not a non-negative integer", o->name, v);
        *(uint64_t *)field = (uint64_t)x;
        break;
    }
    case OPT_FLOAT: {
        double x;
        if (parse_double(v, &x) != 0)
            return c3_fail(COSMOS3_EUSAGE, "--%s: '%s' is not a number", o->name, v);
        *(double *)field = x;
        break;
    }
    case OPT_FLAG: {
        bool b;
        if (!v || !strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes"))
            b = true;
        else if (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no"))
            b = false;
        else
            return c3_fail(COSMOS3_EUSAGE, "--%s: '%s' is not on or off", o->name, v);
        *(bool *)field = b;
        break;
    }
    case OPT_RANGE: {
        c3_range *r = field;
        if (strcmp(v, "none") == 0 || strcmp(v, "off") == 0) {
            r->on = false;
            break;
        }
        const char *comma = strchr(v, ',');
        char a[64], b[64];
        if (!comma || (size_t)(comma - v) >= sizeof a || strlen(comma + 1) >= sizeof b)
            return c3_fail(COSMOS3_EUSAGE, "--%s: '%s' is not LO,HI (e.g. 400,1000) or none",
                           o->name, v);
        memcpy(a, v, (size_t)(comma - v));
        a[comma - v] = 0;
        strcpy(b, comma + 1);
        double lo, hi;
        if (parse_double(a, &lo) || parse_double(b, &hi) || lo > hi)
            return c3_fail(COSMOS3_EUSAGE,
                           "--%s: '%s' is not LO,HI with LO <= HI (e.g. 400,1000) or none", o->name,
                           v);
        r->lo = lo;
        r->hi = hi;
        r->on = true;
        break;
    }
    }
    s->given[option_index(o)] = true;
    return COSMOS3_OK;
}

char *settings_get(const c3_settings *s, const c3_option *o) {
    const void *field = (const char *)s + o->offset;
    char buf[256];
    switch (o->type) {
    case OPT_STR:
    case OPT_ENUM: {
        const char *v = *(char *const *)field;
        return xstrdup(v ? v : "");
    }
    case OPT_INT: snprintf(buf, sizeof buf, "%d", *(const int *)field); break;
    case OPT_U64: snprintf(buf, sizeof buf, "%llu", (unsigned long long)*(const uint64_t *)field); break;
    case OPT_FLOAT: snprintf(buf, sizeof buf, "%g", *(const double *)field); break;
    case OPT_FLAG: snprintf(buf, sizeof buf, "%s", *(const bool *)field ? "on" : "off"); break;
    case OPT_RANGE: {
        const c3_range *r = field;
        if (r->on)
            snprintf(buf, sizeof buf, "%g,%g", r->lo, r->hi);
        else
            snprintf(buf, sizeof buf, "none");
        break;
    }
    }
    return xstrdup(buf);
}

void settings_defaults(c3_settings *s) {
    for (int i = 0; i < c3_noptions; i++) {
        const c3_option *o = &c3_options[i];
        if (o->def) set_value(s, o, o->def);
        s->given[i] = false;
    }
}

void settings_free(c3_settings *s) {
    for (int i = 0; i < c3_noptions; i++) {
        const c3_option *o = &c3_options[i];
        if (o->type == OPT_STR || o->type == OPT_ENUM) {
            char **p = (char **)((char *)s + o->offset);
            free(*p);
            *p = NULL;
        }
    }
}

void settings_copy(c3_settings *dst, const c3_settings *src) {
    *dst = *src;
    for (int i = 0; i < c3_noptions; i++) {
        const c3_option *o = &c3_options[i];
        if (o->type == OPT_STR || o->type == OPT_ENUM) {
            char **p = (char **)((char *)dst + o->offset);
            if (*p) *p = xstrdup(*p);
        }
    }
}

int settings_set(c3_settings *s, const char *name, const char *value, unsigned cmd) {
    const c3_option *o = option_find_for(name, cmd);
    if (!o) return c3_fail(COSMOS3_EUSAGE, "unknown option '%s'; 'help' lists them", name);
    return set_value(s, o, value);
}

bool option_takes_two(const c3_option *o) {
    return o->type == OPT_STR && o->metavar && strchr(o->metavar, ' ');
}

int settings_parse(c3_settings *s, unsigned cmd, int argc, char **argv, char ***pos, int *npos) {
    *pos = xcalloc((size_t)argc + 1, sizeof(char *));
    *npos = 0;
    bool only_pos = false;
    char bundle[256]; /* -qo x.png: the rest of a bundle of short flags, as its own word */
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
    again:
        if (only_pos || a[0] != '-' || strcmp(a, "-") == 0) {
            (*pos)[(*npos)++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = true;
            continue;
        }
        const c3_option *o = NULL;
        const char *val = NULL;
        char name[128];
        if (a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            if (n >= sizeof name) n = sizeof name - 1;
            memcpy(name, a + 2, n);
            name[n] = 0;
            if (eq) val = eq + 1;
            o = option_find_for(name, cmd);
            if (o && !(option_cli_cmds(o) & cmd)) return refused(cmd, o);
            /* --no-FLAG */
            if (!o && strncmp(name, "no-", 3) == 0) {
                const c3_option *f = option_find_for(name + 3, cmd);
                if (f && f->type == OPT_FLAG && (option_cli_cmds(f) & cmd)) {
                    APP_TRY(set_value(s, f, "off"));
                    continue;
                }
            }
            if (!o) {
                const char *near = near_option(name, cmd);
                if (near)
                    return c3_fail(COSMOS3_EUSAGE,
                                   "%s: unknown option --%s; did you mean --%s? (see 'cosmos3 "
                                   "help %s')",
                                   cmd_name(cmd), name, near, cmd_name(cmd));
                return c3_fail(COSMOS3_EUSAGE, "%s: unknown option --%s; see 'cosmos3 help %s'",
                               cmd_name(cmd), name, cmd_name(cmd));
            }
        } else {
            for (int k = 0; k < c3_noptions; k++)
                if (c3_options[k].short_name == a[1] && (c3_options[k].cmds & cmd)) {
                    if (!(option_cli_cmds(&c3_options[k]) & cmd))
                        return refused(cmd, &c3_options[k]);
                    o = &c3_options[k];
                }
            if (!o)
                return c3_fail(COSMOS3_EUSAGE, "%s: unknown option -%c; see 'cosmos3 help %s'",
                               cmd_name(cmd), a[1], cmd_name(cmd));
            snprintf(name, sizeof name, "%s", o->name);
            if (a[2]) val = a + 2;
        }
        if (o->type == OPT_FLAG) {
            /* a short flag followed by another short option's letter: a bundle (-qo FILE) */
            if (a[1] != '-' && val && isalpha((unsigned char)val[0]) && strlen(val) < 200) {
                bool is_short = false;
                for (int k = 0; k < c3_noptions; k++)
                    is_short |= c3_options[k].short_name == val[0] && (c3_options[k].cmds & cmd);
                if (is_short) {
                    APP_TRY(set_value(s, o, NULL));
                    snprintf(bundle, sizeof bundle, "-%s", val);
                    a = bundle;
                    goto again;
                }
            }
            APP_TRY(set_value(s, o, val));
            continue;
        }
        if (!val) {
            if (i + 1 >= argc)
                return c3_fail(COSMOS3_EUSAGE, "--%s needs a value (%s)", o->name,
                               o->metavar ? o->metavar : "VALUE");
            val = argv[++i];
        }
        char *pair = NULL;
        if (option_takes_two(o)) { /* "A B": the next word is the second value */
            if (i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1]))
                return c3_fail(COSMOS3_EUSAGE, "--%s needs two values (%s)", o->name, o->metavar);
            pair = xmalloc(strlen(val) + strlen(argv[i + 1]) + 2);
            sprintf(pair, "%s\n%s", val, argv[++i]);
            val = pair;
        }
        int rc = set_value(s, o, val);
        free(pair);
        APP_TRY(rc);
        /* --from FILE: the stored settings, here, so the options after it override them */
        if (!strcmp(o->name, "from")) APP_TRY(metadata_apply(val, s, cmd));
    }
    return COSMOS3_OK;
}

void options_usage(FILE *f, unsigned cmd) {
    for (int i = 0; i < c3_noptions; i++) {
        const c3_option *o = &c3_options[i];
        if (!(option_cli_cmds(o) & cmd)) continue;
        char left[96];
        int k = 0;
        if (o->short_name)
            k = snprintf(left, sizeof left, "  -%c, --%s", o->short_name, o->name);
        else
            k = snprintf(left, sizeof left, "      --%s", o->name);
        if (o->type != OPT_FLAG && o->metavar) snprintf(left + k, sizeof left - (size_t)k, " %s", o->metavar);
        if (strlen(left) > 34) /* a long name and metavar: the help on the next line */
            fprintf(f, "%s\n%-34s %s", left, "", o->help);
        else
            fprintf(f, "%-34s %s", left, o->help);
        if (o->def && *o->def && o->type != OPT_FLAG) fprintf(f, " [default: %s]", o->def);
        if (o->aliases) {
            fputs(" (also", f);
            for (const char *p = o->aliases; *p;) {
                const char *e = strchr(p, ' ');
                int len = e ? (int)(e - p) : (int)strlen(p);
                fprintf(f, " --%.*s", len, p);
                if (!e) break;
                p = e + 1;
            }
            fputc(')', f);
        }
        fputc('\n', f);
    }
}
