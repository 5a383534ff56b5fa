/* serve_internal.h - what the server's files share: the limits, a job, the
 * server's state, and the calls across them. serve.c holds the routes (HTTP,
 * request parsing, /v1/videos, the main thread), serve_jobs.c the jobs (the
 * replicas: each a worker thread that takes batches from the queue and a
 * finishing thread that decodes and encodes them in memory) and
 * serve_metrics.c the metrics (the event pumps, /metrics, /health). */
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
#define SERVE_MAX_REPLICAS 64     /* --replicas bound */
#define SERVE_MAX_BATCH 64        /* requests in one batch at most (--max-batch bound) */
#define SERVE_FIN_MAX 2           /* batches a replica's finishing thread may have waiting */
#define SERVE_TERMINAL_WAIT_S 5.0 /* a result waits this long for its job's last event */
#define SERVE_HIST_BUCKETS 14     /* /metrics histograms: upper bounds (the last +Inf) */

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
    /* the scheduler (serve_jobs.c): images of a job are requests to the engines */
    uint64_t key;        /* cosmos3_batch_key (and the conditioning's kind) */
    int bmax;            /* cosmos3_batch_max for it */
    volatile int cancel; /* every request of the job stops (the engine's per-request flag) */
    bool in_queue;       /* in the FIFO: images not yet handed to a replica */
    bool waiting;        /* ... none yet (counted in the server's queued) */
    int dispatched;      /* images handed to replicas */
    int finished;        /* ... and back (done, failed, cancelled) */
    int fail_rc;         /* the first image's failure (0: none) */
    char *ferr;
    json_t *data;     /* per image: its data item (index order; null until done) */
    json_t *acc;      /* the job's metrics (stage seconds summed over its images) */
    double t_started; /* its first image handed to a replica */
    int replica;      /* the replica that ran its (last) image */
    int batch_size;   /* the largest batch its images ran in */
    int steps_cached; /* of them, skipped by the step cache */
    uint8_t *mp4;
    size_t mp4_len;
    char *verr;            /* why it failed */
    uint8_t *cond_rgb;     /* the decoded reference, owned */
    json_t *notes;         /* what the request was changed to, or warned of (strings), or NULL */
    bool file_response;    /* response_format "file": the picture's bytes, not JSON */
    c3_cond_frames cond;   /* ... as the session takes it (cond.rgb NULL: none) */
    struct job *snext;     /* the store, oldest first */
    json_t *stored;        /* a job restored from the job store: its video object */
    uint64_t vframes_seed; /* the seed the video was made with */
} job;

enum { STAGE_TOKENIZE, STAGE_UND, STAGE_DENOISE, STAGE_VAE, STAGE_WRITE, STAGE_TOTAL, STAGES };
extern const char *const stage_names[STAGES];

enum { EP_GENERATIONS, EP_MODELS, EP_HEALTH, EP_METRICS, EP_VIDEOS, EP_OTHER, EPS };
extern const char *const ep_names[EPS];

/* One image (or video) of a job on its way through a replica: generated
 * (in a batch), then decoded and encoded by the finishing thread. */
typedef struct item {
    struct item *next; /* the replica's finishing queue */
    struct replica *rep;
    job *j;                /* a reference */
    int index;             /* the image of j */
    uint64_t ticket;       /* its events' tag */
    c3_settings s;         /* j's settings with this image's seed */
    struct session_req *q; /* the prepared request (NULL: not run) */
    cosmos3_result *out;
    int rc;
    char err[1024];
    bool ran;       /* the engine had it: its events end with a terminal one */
    bool terminal;  /* ... which the pump has seen */
    int batch;      /* the size of the batch it ran in */
    bool batch_end; /* the last of its batch (the finishing thread's count) */
    double queue_s, gen_s;
    char *cache_key; /* --result-cache */
    uint8_t *cached; /* a hit: its bytes */
    size_t cached_len;
    uint64_t cached_seed;
} item;

/* One engine of the server on its GPU group (or share of the cores). */
typedef struct replica {
    struct server *sv;
    int index;
    c3_settings s;  /* the command line with this replica's GPUs and threads */
    char gpus[256]; /* its GPU group ("": the CPU) */
    int threads;    /* its CPU threads (0: all) */
    c3_session *e;
    c3_events *ev;  /* its engine's events */
    c3_monitor mon; /* steps and memory per rank (its pump's, under the server mutex) */
    pthread_t worker, finisher, pump;
    bool have_worker, have_finisher, have_pump;
    bool loaded, fin_stop;
    int load_rc;
    char load_err[1024];
    double load_s;
    /* in flight on the engine */
    bool busy;
    item *batch[SERVE_MAX_BATCH];
    int nbatch;
    int step, steps;
    double busy_since;
    /* generated, waiting for the finishing thread, and the one it holds */
    item *fhead, *ftail, *fcur;
    int nfin; /* batches there */
    /* counts */
    uint64_t batches, requests, batch_sizes[SERVE_MAX_BATCH + 1];
    double busy_s;
} replica;

/* Histograms for /metrics: the per-stage seconds of each job, batch sizes. */
enum { HS_QUEUE, HS_TOKENIZE, HS_UND, HS_DENOISE, HS_VAE, HS_ENCODE, HS_TOTAL, HSTAGES };
extern const char *const hstage_names[HSTAGES];
extern const double hist_bounds[SERVE_HIST_BUCKETS];
typedef struct {
    uint64_t n[SERVE_HIST_BUCKETS]; /* per bucket (not cumulative) */
    uint64_t count;
    double sum;
} histogram;
void hist_add(histogram *h, double v);

typedef struct server {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* any job or server state changed (CLOCK_MONOTONIC) */
    c3_settings base;  /* the command line: the defaults of every request */
    c3_session *e; /* replica 0's engine, once every replica loaded (requests are checked on it) */
    replica *reps;
    int nreps;
    int max_batch;    /* --max-batch (0: the engine's) */
    uint64_t tickets; /* items made */
    histogram hist[HSTAGES], hist_batch;
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
    job *head, *tail;
    int queued, queue_cap;
    int conns; /* connections holding a job */
    /* metrics */
    uint64_t requests[EPS][HTTP_CODES];
    uint64_t images, cancelled, jobs;
    double job_s, queue_s;
    double stage_s[STAGES];
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
/* SIGTERM: every waiting job answered 503 (mutex held). */
void queue_refuse_all_locked(server *sv);
bool client_gone(int fd);
/* A replica's worker thread: loads its engine, then runs batches of the
 * FIFO's jobs; its finishing thread decodes and encodes them. */
void *worker_main(void *arg);
void *finisher_main(void *arg);
/* The replicas from the command line (--replicas, --gpus, the layout,
 * --threads), checked before any weight loads: GPU groups, the CPU's
 * threads divided; the layout said on stderr. */
int replicas_plan(server *sv, const c3_settings *s);
/* Their engines closed, their queues freed (threads joined). */
void replicas_free(server *sv);
/* Whether any replica has work in flight (mutex held). */
bool server_busy_locked(server *sv);
/* Ask every replica's engine to stop what it runs (mutex held). */
void server_cancel_locked(server *sv);
/* A replica whose batch holds only cancelled requests: its engine stopped
 * (mutex held). The others' requests stop by their own flags. */
void replica_check_cancel_locked(replica *r);
/* The job's batch key and bound (before it is queued; mutex held). */
void job_batch_key(server *sv, job *j);

/* The video object of GET /v1/videos/{id} (serve.c; server mutex held). */
json_t *video_object(server *sv, job *j);

/* metrics (serve_metrics.c) */
/* A replica's pump thread: its engine's events into its monitor, SSE
 * progress and re-cancels. */
void *pump_main(void *arg);
/* /metrics: the Prometheus text (takes the mutex). */
void metrics_text(server *sv, c3_sbuf *b);
/* /health's replicas: busy or idle, job in flight, step, memory (mutex held). */
json_t *replicas_json_locked(server *sv);

#endif
