/* options.h - the one options table: parsing, --help, the man page's option
 * list, bash completion and the REPL's set/show all read it.
 *
 * Every option is one row: long name, short letter, aliases (the spellings
 * vLLM-Omni users type), type, default (as text), allowed values, metavar,
 * help, the subcommands that take it and the c3_settings field it fills.
 */
#ifndef COSMOS3_OPTIONS_H
#define COSMOS3_OPTIONS_H

#include <stdio.h>

#include "util.h"

typedef enum { OPT_STR, OPT_INT, OPT_U64, OPT_FLOAT, OPT_FLAG, OPT_ENUM, OPT_RANGE } c3_opt_type;

/* Subcommands (bit mask). */
enum {
    CMD_GEN = 1 << 0,
    CMD_TOKENIZE = 1 << 1,
    CMD_INFO = 1 << 2,
    CMD_META = 1 << 3,
    CMD_MKMODEL = 1 << 4,
    CMD_REPL = 1 << 5,
    CMD_TUI = 1 << 6,
    CMD_SERVE = 1 << 7,
    CMD_BENCH = 1 << 8,
};
#define CMD_RUN (CMD_GEN | CMD_REPL | CMD_TUI | CMD_SERVE)      /* commands that generate */
#define CMD_PLAN (CMD_RUN | CMD_INFO | CMD_BENCH)               /* commands with a layout */

typedef struct {
    const char *name;    /* long name without "--" */
    char short_name;     /* 0 if none */
    const char *aliases; /* space-separated other long names, or NULL */
    c3_opt_type type;
    const char *def;     /* default as text; NULL = unset (auto) */
    const char *values;  /* OPT_ENUM: "a|b|c" */
    const char *metavar;
    const char *help;
    unsigned cmds;
    size_t offset;       /* into c3_settings */
    bool repl;           /* settable with REPL `set` */
    cosmos3_field field; /* the cosmos3_request field it gives (COSMOS3_FIELD_NONE: none) */
} c3_option;

typedef struct {
    double lo, hi;
    bool on; /* false: "none" */
} c3_range;

/* All settings of a run. Strings are owned (xstrdup) or NULL. */
typedef struct {
    /* model and prompt */
    char *model;
    char *revision;         /* with a Hugging Face model id */
    char *model_class_name; /* checked against model_index.json */
    char model_name[256];   /* the Hugging Face id -m named ("": a folder); serve answers to it */
    char *prompt;
    char *negative;
    char *system_prompt; /* "auto", "on", "off" */
    bool templates;      /* resolution/duration sentences */
    int max_seq;         /* --max-sequence-length: ids kept of each prompt's template */
    /* size */
    int width, height, frames;
    double fps;
    /* sampling */
    int steps;
    double guidance;
    double shift;
    char *schedule;      /* native|linear|karras|flowmatch4 */
    c3_range guidance_interval;
    char *cache;            /* none|sea|fb */
    double cache_threshold; /* COSMOS3_DEFAULT: the kind's */
    int cache_max_skip, cache_warmup;
    char *seed;          /* "random" or a number */
    char *noise;         /* safetensors with `latents` */
    char *save_latents;
    bool sound;       /* --sound: the clip's sound with it */
    char *wav_format; /* s16|f32 */
    char *from; /* gen --from FILE */
    /* conditioning (image/video to video) */
    char *image;            /* a picture */
    char *video;            /* a clip: folder, pattern or file of PNG frames */
    char *condition_frames; /* "0,1": latent frame indexes */
    char *condition_keep;   /* first|last */
    char *first_last;       /* "START\nEND": first-last boundaries */
    /* output */
    char *output;
    bool overwrite;
    int crf; /* MP4/WebM constant rate factor */
    bool quiet;
    bool json;
    /* layout */
    int tp, cfg_parallel, ulysses;
    char *device;        /* auto|cpu|cuda */
    char *gpus;
    bool offload;
    int ranks_per_process; /* ranks in several processes: each one's ranks (0: world / processes) */
    bool allow_cross_host; /* a TP or Ulysses group may span hosts */
    int threads;
    char *precision; /* auto|bf16|fp8 */
    char *attention; /* bf16|fp8 */
    /* info */
    bool check;
    /* tokenize */
    bool raw;
    bool lines;
    /* bench */
    bool skip_vae;
    bool e2e;
    bool negative_flag;
    /* mkmodel */
    char *preset;
    int layers;
    bool distilled, fp8; /* mkmodel --distilled, --fp8 */
    bool random_transformer; /* mkmodel --random-transformer */
    /* serve */
    char *host;
    int port;
    char *instance;      /* serve --instance: the name in job ids, /health and /metrics */
    int queue;           /* requests waiting beyond the one running */
    int keep_videos;     /* finished /v1/videos jobs kept */
    char *store_dir;     /* --store: the job store's folder (NULL: $XDG_STATE_HOME/cosmos3) */
    int result_cache;    /* serve: image results kept for repeated requests (0: off) */
    char *api_key;       /* required Bearer token, or NULL */
    int max_cost;        /* per-request bound, in 1024x1024-pixel steps */
    int max_per_client;  /* requests in flight from one client (0: --queue + 16, >= 32) */
    char *trusted_proxy; /* a reverse proxy whose X-Forwarded-For names the client */
    bool omni;           /* vLLM-Omni's --omni: accepted */
    char *allowed_media; /* --allowed-local-media-path DIR, or NULL */
    double init_timeout; /* seconds the load may take (0: no bound) */
    int replicas;  /* serve: engines, each on its own GPU group (the CPU: its share of cores) */
    int max_batch; /* serve: requests in one batch (0: the engine's cosmos3_batch_max) */
    /* preview */
    char *preview;
    /* which options the user gave (by table index) */
    bool given[128];
} c3_settings;

extern const c3_option c3_options[];
extern const int c3_noptions;

/* Fill s with the table's defaults (frees nothing; s must be zeroed). */
void settings_defaults(c3_settings *s);
void settings_free(c3_settings *s);
void settings_copy(c3_settings *dst, const c3_settings *src);
/* Parse argv[i..] for subcommand `cmd` into s; positional arguments are
 * returned in pos (xmalloc'd array of pointers into argv). COSMOS3_EUSAGE on a
 * bad option with a one-line message naming it and the fix. */
/* An option whose metavar names two values ("START END") takes the next two
 * words; the field holds them joined by a newline. */
bool option_takes_two(const c3_option *o);
int settings_parse(c3_settings *s, unsigned cmd, int argc, char **argv, char ***pos, int *npos);
/* Set one option by long name (or alias) from text (REPL `set`, serve). */
int settings_set(c3_settings *s, const char *name, const char *value, unsigned cmd);
/* The option row by long name or alias, or NULL. */
const c3_option *option_find(const char *name);
/* The same among the rows of the subcommands cmds (one spelling can name
 * different rows: gen's --negative is --negative-prompt, tokenize's is a flag). */
const c3_option *option_find_for(const char *name, unsigned cmds);
int option_index(const c3_option *o);
/* The row that gives request field f, or NULL. */
const c3_option *option_for_field(cosmos3_field f);
/* Whether the user gave the option that fills request field f. */
bool settings_given(const c3_settings *s, cosmos3_field f);
/* Current value as text (xmalloc'd). */
char *settings_get(const c3_settings *s, const c3_option *o);
/* The commands that take option o on their command line (o->cmds less the
 * ones that only fill it internally, e.g. serve's output file). */
unsigned option_cli_cmds(const c3_option *o);
/* Usage text for a subcommand, printed to f. */
void options_usage(FILE *f, unsigned cmd);

/* Optimal string alignment distance between a[0..n) and b (99: too long). */
int c3_edit_distance(const char *a, size_t n, const char *b);
/* The word of words[] a mistyped w most likely meant: one edit away for
 * words of up to 5 letters, two for longer ones; NULL when none is that near. */
const char *c3_nearest_word(const char *w, const char *const *words, int nwords);

/* Subcommand names <-> bits. */
const char *cmd_name(unsigned cmd);
unsigned cmd_parse(const char *name);

#endif
