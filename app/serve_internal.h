/* serve_internal.h - what the server's files share: the limits, a job, the
 * server's state, and the calls across them. serve.c holds the routes (HTTP,
 * request parsing, /v1/videos, the main thread), serve_jobs.c the jobs (the
 * worker thread, images and videos run and encoded in memory) and
 * serve_metrics.c the metrics (the event pump, /metrics). */
#ifndef COSMOS3_SERVE_INTERNAL_H
#define COSMOS3_SERVE_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <semaphore.h>
#include <time.h>

#include "events.h"
#include "media.h"
#include "monitor.h"
#include "options.h"
#include "serve_store.h"
#include "session.h"
#include "strbuf.h"

/* ------------------------------------------------------------- limits */

#define SERVE_MAX_BODY (1u << 20)     /* bytes of a request body */
#define SERVE_MAX_VIDEO_BODY (64u << 20) /* ... of a /v1/videos body (a picture or clip inside) */
#define SERVE_VIDEO_BYTES (1ll << 30)    /* MP4 bytes kept for /v1/videos/{id}/content */
#define SERVE_VIDEO_SECONDS 4     /* /v1/videos: the clip length without num_frames or seconds */
#define SERVE_MAX_REF_FRAMES 4097 /* frames decoded from a video_reference */
#define SERVE_MAX_DISCARD (16u << 20) /* an oversized chunked body is read up to this */
#define SERVE_MAX_PROMPT (32u << 10)  /* bytes of a prompt or negative prompt */
#define SERVE_MAX_N 10                /* images per request */
#define SERVE_MAX_USER 256            /* bytes of the OpenAI `user` field */
#define SERVE_MAX_SIDE 16384          /* pixels of one side (the engine's own bound) */
#define SERVE_MAX_QUEUE 4096          /* --queue bound */
#define SERVE_MAX_CONNECTIONS 256     /* connections at once, from all clients */
#define SERVE_CONN_SPARE 64           /* connections above that answered 503, not reset */
#define SERVE_PER_CLIENT_MIN 32       /* --max-per-client 0: --queue + 16, at least this */
#define SERVE_BUSY_RETRY_S 1          /* Retry-After of a 429 for too many requests at once */
#define SERVE_DECODERS 2              /* references decoded at once (the rest wait their turn) */
#define SERVE_HEADER_DEADLINE_S 30.0  /* a request's headers arrive within this (see conn) */
#define SERVE_BODY_DEADLINE_S 60.0    /* ... and its body within this after its headers */
#define SERVE_COST_UNIT 1048576.0     /* --max-cost counts steps of 1024x1024 pixels */
#define SERVE_IDLE_TIMEOUT_S 120      /* an idle keep-alive connection is closed after this */
#define SERVE_POLL_S 0.1              /* how often a waiting connection looks at its client */
#define SERVE_GRACE_S 60.0            /* SIGTERM: the request in flight may run this long */
#define SERVE_DRAIN_S 5.0             /* ... and its answer may take this long to send */
#define SERVE_LOAD_RETRY_S 5          /* Retry-After while loading or shutting down */
#define SERVE_RETRY_MAX_S 3600        /* Retry-After bound for a full queue */
#define SERVE_SSE_BLOCK 16384         /* bytes per SSE write */
#define SERVE_SSE_KEEPALIVE_S 15.0    /* an SSE comment after this long without an event */
#define SERVE_MAX_INSTANCE 48         /* characters of --instance */
#define HTTP_CLIENT_GONE 499          /* status recorded for a client that left (nginx's) */
#define HTTP_CODES 600

/* ---------------------------------------------------------------- jobs */

typedef enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

typedef struct job {
    struct job *next; /* FIFO link */
    int refs;         /* connection, worker (or queue), SSE response; under srv.mu */
    job_state state;
    bool gone;   /* the client disconnected: cancel */
    bool stream; /* answer with Server-Sent Events */
    int fd;      /* the client's socket (watched for a disconnect) */
    int n;       /* images, run in turn */
    bool seed_given;
    uint64_t seed;
    c3_settings s; /* the request's settings (server base + fields) */
    double t_queued;
    int index; /* image in progress */
    /* the answer (state JOB_DONE) */
    int status;
    char *body;
    /* SSE bytes produced and not yet sent */
    c3_sbuf sse;
    size_t sse_sent;
    c3_media_format ofmt; /* images: output_format */
    /* a video job (/v1/videos): in the store while async */
    bool video, sync;
    char vid[96]; /* video_INSTANCE_HEX (INSTANCE: SERVE_MAX_INSTANCE) */
    time_t created_at, completed_at;
    int step, steps; /* per-step progress (the pump) */
    int steps_cached; /* of them, skipped by the step cache */
    uint8_t *mp4;
    size_t mp4_len;
    char *verr;            /* why it failed */
    uint8_t *cond_rgb;     /* the decoded reference, owned */
    json_t *notes;         /* what the request was changed to, or warned of (strings), or NULL */
    bool file_response;    /* response_format "file": the picture's bytes, not JSON */
    int max_seq;           /* max_sequence_length (0: not given) */
    bool max_seq_noted;
    c3_cond_frames cond;   /* ... as the session takes it (cond.rgb NULL: none) */
    struct job *snext;     /* the store, oldest first */
    json_t *stored;        /* a job restored from the job store: its video object */
    uint64_t vframes_seed; /* the seed the video was made with */
} job;

enum { STAGE_TOKENIZE, STAGE_UND, STAGE_DENOISE, STAGE_VAE, STAGE_WRITE, STAGE_TOTAL, STAGES };
extern const char *const stage_names[STAGES];

enum { EP_GENERATIONS, EP_MODELS, EP_HEALTH, EP_METRICS, EP_VIDEOS, EP_OTHER, EPS };
extern const char *const ep_names[EPS];

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* any job or server state changed (CLOCK_MONOTONIC) */
    c3_settings base;  /* the command line: the defaults of every request */
    c3_events *ev;
    c3_session *e; /* set by the worker once loaded */
    bool load_done, ready, draining, stopping, cancel_all, pump_stop;
    int load_rc;
    char load_err[1024];
    char model_id[512];
    char device[16];
    char instance[SERVE_MAX_INSTANCE + 1]; /* --instance, or host-port */
    int cfg_parallel;
    time_t created;
    double load_s;
    int64_t max_pixels; /* the size the plan was checked for */
    /* the FIFO */
    job *head, *tail, *current;
    int queued, queue_cap;
    int conns;                                 /* connections holding a job */
    uint64_t terminal_seen, terminal_expected; /* DONE/ERROR/CANCELLED events */
    /* metrics */
    uint64_t requests[EPS][HTTP_CODES];
    uint64_t images, cancelled, jobs;
    double job_s, queue_s;
    double stage_s[STAGES];
    c3_monitor mon; /* steps and memory per rank (the pump's, under mu) */
    char mhd_log[512];
    const char *api_key; /* sv->base.api_key, or NULL: no authentication */
    int max_cost;        /* --max-cost */
    double header_deadline_s, body_deadline_s;
    struct conn *watch; /* every open connection (deadlines) */
    int open_conns;     /* connections open now */
    int per_client;     /* --max-per-client (resolved) */
    char trusted_proxy[64]; /* --trusted-proxy, as inet_ntop writes it ("": none) */
    struct {
        char key[64]; /* an address, or X-Forwarded-For's client behind the trusted proxy */
        int n;        /* its requests in flight */
    } clients[SERVE_MAX_CONNECTIONS + SERVE_CONN_SPARE];
    int nclients;
    uint64_t busy; /* requests answered 429/503 for a limit on requests at once */
    sem_t decoders; /* SERVE_DECODERS: references decoded at once */
    uint64_t cut;       /* connections closed for missing a deadline */
    /* /v1/videos: every async job, oldest first; finished ones are dropped
     * oldest first beyond keep_videos or SERVE_VIDEO_BYTES */
    job *store;
    int keep_videos;
    c3_store *db; /* the job store (--store): the async videos and their results */
    struct c3_result_cache *rcache; /* --result-cache: repeated image requests (NULL: off) */
    uint64_t videos;
} server;

/* jobs (serve_jobs.c) */
void job_unref_locked(job *j);
void job_unref(server *sv, job *j);
/* Wait on the server's condition for at most seconds (mutex held). */
void cv_wait(server *sv, double seconds);
/* Queue an SSE event on j (mutex held); data is stolen. */
void sse_event(job *j, const char *event, json_t *data);
json_t *error_object(int status, const char *param, const char *message);
char *error_body(int status, const char *param, const char *message);
void job_cancel_locked(server *sv, job *j);
bool client_gone(int fd);
/* The worker thread: loads the engine, then runs the FIFO's jobs. */
void *worker_main(void *arg);

/* The video object of GET /v1/videos/{id} (serve.c; server mutex held). */
json_t *video_object(server *sv, job *j);

/* metrics (serve_metrics.c) */
/* The pump thread: the engine's events into the monitor, SSE progress and
 * re-cancels. */
void *pump_main(void *arg);
/* /metrics: the Prometheus text (takes the mutex). */
void metrics_text(server *sv, c3_sbuf *b);

#endif
