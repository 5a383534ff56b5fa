/* repl.h - the `cosmos3 > ` prompt: one loaded model, many generations.
 *
 * A line is a prompt to generate with the current settings unless its first
 * word is a command (a line starting with '"' is always a prompt). Commands
 * are one table (name, arguments, help, handler, what completes after it)
 * that also drives `help` and tab completion; the TUI's input line runs the
 * same table.
 *
 * The engine runs in a worker thread (load and generate both block); the
 * frontend pumps the event queue: repl_pump() updates the state below (the
 * collection half, as nvtop separates it) and the REPL's progress line or
 * the TUI's frame draw from it.
 */
#ifndef COSMOS3_REPL_H
#define COSMOS3_REPL_H

#include <pthread.h>

#include "options.h"
#include "monitor.h"
#include "session.h"
#include "task.h"
#include "preview.h"

#define REPL_PROMPT "cosmos3 > "

typedef enum { REPL_IDLE, REPL_LOADING, REPL_RUNNING } c3_repl_job;

typedef struct c3_repl c3_repl;
/* Output of commands: level 0 normal, 1 error, 2 progress/info. */
typedef void (*c3_repl_sink)(void *ctx, int level, const char *line);

struct c3_repl {
    c3_settings s; /* what `set` changes */
    c3_events *ev;
    c3_session *e;  /* NULL until loaded */
    c3_session *e_next; /* a load in progress opens this; e stays until it is ready */
    char model_dir[4096];
    char prev_model_dir[4096]; /* the model before a load, back if the load fails */
    char *prev_model;          /* r->s.model before a load (owned) */
    /* the worker: a load or a run on a thread of its own */
    c3_task task;
    c3_repl_job job;
    int job_rc; /* its outcome, once finished */
    char job_err[1024];
    c3_settings job_s;
    session_result job_r;
    double job_t0;
    /* the run in flight (or the last one) */
    char *run_prompt;
    /* the last finished run */
    bool have_last;
    int last_rc;
    c3_settings last_s;
    session_result last_r;
    char last_err[1024];
    char *last_png;   /* latest file written (a picture, a clip or the last frame) */
    int image_serial; /* bumps on each new image */
    uint8_t *last_img; /* its preview [last_img_h, last_img_w, 3]: a video's first / middle / last
                          frames */
    int last_img_w, last_img_h;
    uint8_t *job_img; /* the same for the run in flight (set by the worker) */
    int job_img_w, job_img_h;
    /* devices per rank and the steps of the run in flight (or the last one) */
    c3_monitor mon;
    double load_seconds;
    /* history */
    char **hist;
    int nhist;
    char hist_path[4096];
    /* terminal */
    c3_term term;
    bool interactive;
    bool quiet_load_error; /* the caller reports a failed load */
    c3_repl_sink sink;
    void *sink_ctx;
    /* exit */
    bool quit;
    int status; /* status of the last failure (script exit code) */
    int run_counter;
};

/* `cosmos3 repl` (and `cosmos3` alone). */
int repl_main(c3_settings *s, char **pos, int npos);

void repl_init(c3_repl *r, const c3_settings *s);
void repl_free(c3_repl *r);
/* Run one line (a command, or a prompt that starts a generation in the
 * worker). Returns the command's status; a started generation returns COSMOS3_OK
 * and its result arrives through repl_pump. */
int repl_exec(c3_repl *r, const char *line);
/* Start loading the model (r->s.model) in the worker. */
int repl_load_start(c3_repl *r);
/* Pop one event (waiting up to timeout s), fold it into the state, and copy
 * it to *out when non-NULL. False on timeout. When the worker finishes the
 * thread is joined and the outcome reported through the sink. */
bool repl_pump(c3_repl *r, c3_event *out, double timeout);
/* Ask the job in flight to stop (generation: the model stays loaded). */
void repl_cancel(c3_repl *r);
/* Print through the sink (or stdout/stderr). */
void repl_print(c3_repl *r, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Append a line to the history (memory and file). */
void repl_history_add(c3_repl *r, const char *line);
/* The history file: $XDG_STATE_HOME/cosmos3/history, else
 * ~/.local/state/cosmos3/history. */
void repl_history_path(char *buf, size_t n);

/* Completion candidates for the word `text` that starts at byte `start` of
 * `line` (xmalloc'd NULL-terminated array of xmalloc'd strings, or NULL when
 * the word takes a file path). */
char **repl_complete(const char *line, int start, const char *text, bool *want_path);

/* The command table (for help, completion and the man page). */
typedef struct {
    const char *name;
    const char *args;
    const char *help;
    int (*run)(c3_repl *r, const char *arg);
    enum { COMPLETE_NONE, COMPLETE_OPTION, COMPLETE_OPTION_VALUE, COMPLETE_PATH, COMPLETE_COMMAND,
           COMPLETE_SEED } complete;
} c3_repl_cmd;
extern const c3_repl_cmd c3_repl_cmds[];
extern const int c3_repl_ncmds;

/* readline completion generator over repl_complete() (built with readline only;
 * shared by the REPL and the TUI's input line). */
char *repl_rl_generator(const char *text, int state);

/* Signal handlers: true when this Ctrl-C follows the last one (*last, a
 * monotonic time updated here) within a second, i.e. the user wants out. */
bool repl_second_ctrl_c(volatile double *last);

#endif
