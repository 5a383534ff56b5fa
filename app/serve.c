/* serve.c - `cosmos3 serve`: the OpenAI-compatible image API (see serve.h).
 *
 * Threads:
 *   main        parses, starts the HTTP daemon, waits for SIGTERM/SIGINT, drains
 *   worker      loads the engine once, then runs queued jobs one at a time
 *   pump        pops the engine's event queue: per-step SSE events, metrics,
 *               re-cancels a job whose client left
 *   connection  one libmicrohttpd thread per client: parses and validates the
 *               body, queues a job, waits for it (watching the socket: a client
 *               that goes away cancels its job) or streams its SSE bytes
 *
 * A job is shared by its connection and the worker (a reference count under
 * the server mutex). Images and videos come back from the engine in memory
 * and are encoded in memory (app/output.c: PNG, JPEG, WebP, MP4): an answer
 * never touches the disk; the one folder written is the job store (--store,
 * serve_store.c: the /v1/videos jobs and their MP4s, kept over a restart).
 * No request field ever names a file.
 *
 * This file holds the routes (connections and their deadlines, request
 * parsing, the HTTP answers, /v1/videos, the main thread); serve_jobs.c the
 * jobs and the worker, serve_metrics.c the pump and /metrics;
 * serve_internal.h what they share.
 */
#include "serve.h"
#include "output.h"

#include "config.h"

#if !COSMOS3_HAVE_MHD

int serve_main(c3_settings *s, char **pos, int npos) {
    (void)s;
    (void)pos;
    (void)npos;
    return c3_fail(COSMOS3_EFAIL,
                   "serve: this cosmos3 was built without libmicrohttpd; install it "
                   "(Debian: apt-get install libmicrohttpd-dev) and rebuild (meson setup "
                   "--reconfigure BUILD)");
}

#else

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "events.h"
#include "media.h"
#include "png_io.h"
#include "monitor.h"
#include "session.h"
#include "strbuf.h"
#include "serve_form.h"
#include "precheck.h"
#include "serve_internal.h"
#include "result_cache.h"






/* ------------------------------------------------------------ deadlines */

/* libmicrohttpd's connection timeout is an idle one, which a client that
 * trickles a byte now and then never reaches. So each connection must bring
 * a request's headers within header_deadline_s of its start (or of its
 * previous answer, for a kept-alive one) and the body within
 * body_deadline_s of the headers; the main thread shuts down the socket of a
 * connection past its deadline. It does so through a dup of the descriptor,
 * which keeps the number from being reused under it. */
typedef enum { CONN_HEADERS, CONN_BODY, CONN_BUSY } conn_phase;

typedef struct conn {
    struct conn *prev, *next;
    int fd; /* dup of the socket, or -1 (then unwatched) */
    conn_phase phase;
    double t; /* when the phase began */
    bool cut;
} conn;

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    server *sv = cls;
    conn *w = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        w = xcalloc(1, sizeof *w);
        w->fd = ci ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
        w->phase = CONN_HEADERS;
        w->t = c3_now();
        pthread_mutex_lock(&sv->mu);
        w->next = sv->watch;
        if (sv->watch) sv->watch->prev = w;
        sv->watch = w;
        sv->open_conns++;
        pthread_mutex_unlock(&sv->mu);
        *socket_context = w;
        return;
    }
    if (!w) return;
    pthread_mutex_lock(&sv->mu);
    if (w->prev)
        w->prev->next = w->next;
    else
        sv->watch = w->next;
    if (w->next) w->next->prev = w->prev;
    sv->open_conns--;
    pthread_mutex_unlock(&sv->mu);
    if (w->fd >= 0) close(w->fd);
    free(w);
    *socket_context = NULL;
}

static void conn_enter(server *sv, struct MHD_Connection *c, conn_phase phase) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn *w = ci ? ci->socket_context : NULL;
    if (!w) return;
    pthread_mutex_lock(&sv->mu);
    w->phase = phase;
    w->t = c3_now();
    pthread_mutex_unlock(&sv->mu);
}

/* Close the connections past their deadline (main thread, often). */
static void cut_slow_clients(server *sv) {
    double now = c3_now();
    pthread_mutex_lock(&sv->mu);
    for (conn *w = sv->watch; w; w = w->next) {
        double limit = w->phase == CONN_HEADERS ? sv->header_deadline_s
                       : w->phase == CONN_BODY  ? sv->body_deadline_s
                                                : -1;
        if (limit < 0 || w->cut || w->fd < 0 || now - w->t <= limit) continue;
        (void)shutdown(w->fd, SHUT_RDWR); /* fails only for a socket already closed */
        w->cut = true;
        sv->cut++;
    }
    pthread_mutex_unlock(&sv->mu);
}




/* ------------------------------------------------------------ clients */

/* The client of a request: its address, or behind the trusted proxy the
 * last X-Forwarded-For entry (the one that proxy added; earlier ones are
 * the client's own word). */
static void client_key(const server *sv, struct MHD_Connection *c, char *key, size_t n) {
    snprintf(key, n, "?");
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, key, (socklen_t)n);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, key, (socklen_t)n);
    if (!sv->trusted_proxy[0] || strcmp(key, sv->trusted_proxy) != 0) return;
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Forwarded-For");
    if (!x) return;
    const char *last = strrchr(x, ',');
    last = last ? last + 1 : x;
    while (*last == ' ' || *last == '\t')
        last++;
    size_t len = strcspn(last, " \t");
    if (len == 0 || len >= n - 4) return;
    snprintf(key, n, "xff %.*s", (int)len, last);
}

/* Count a request of client `key` in flight (mutex held): false when it
 * has per_client already. */
static bool client_enter_locked(server *sv, const char *key) {
    int i = 0;
    while (i < sv->nclients && strcmp(sv->clients[i].key, key))
        i++;
    if (i < sv->nclients && sv->clients[i].n >= sv->per_client) return false;
    if (i == sv->nclients) {
        if (sv->nclients == (int)C3_ARRAY_LEN(sv->clients)) return false;
        snprintf(sv->clients[i].key, sizeof sv->clients[i].key, "%s", key);
        sv->clients[i].n = 0;
        sv->nclients++;
    }
    sv->clients[i].n++;
    return true;
}

static void client_leave_locked(server *sv, const char *key) {
    for (int i = 0; i < sv->nclients; i++)
        if (!strcmp(sv->clients[i].key, key)) {
            if (--sv->clients[i].n <= 0) sv->clients[i] = sv->clients[--sv->nclients];
            return;
        }
}

/* ------------------------------------------------------------ requests */

typedef struct {
    int status;
    char param[64];
    char msg[1024];
} req_error;

__attribute__((format(printf, 4, 5))) static bool bad(req_error *er, int status, const char *param,
                                                      const char *fmt, ...) {
    er->status = status;
    snprintf(er->param, sizeof er->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(er->msg, sizeof er->msg, fmt, ap);
    va_end(ap);
    return false;
}

/* Set option `name` from text and check the whole request as gen would;
 * a failure names the request field. */
/* A note on what the request was changed to (vLLM-Omni's rounding) or a
 * warning, in the answer ("warnings") and the server's log. */
__attribute__((format(printf, 2, 3))) static void note(job *j, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!j->notes) j->notes = json_array();
    json_array_append_new(j->notes, json_string(msg));
    fprintf(stderr, "cosmos3 serve: warning: %s\n", msg);
}

/* A JSON object sent as a string (multipart forms carry every field as
 * text: vLLM-Omni's extra_params, image_reference, video_reference): the
 * object, new (NULL: not a string holding an object). */
static json_t *object_in_string(json_t *v) {
    if (!json_is_string(v)) return NULL;
    const char *t = json_string_value(v);
    while (*t == ' ' || *t == '\t' || *t == '\n' || *t == '\r')
        t++;
    if (*t != '{') return NULL;
    json_t *o = json_loads(t, JSON_REJECT_DUPLICATES, NULL);
    if (o && !json_is_object(o)) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static bool apply(server *sv, c3_settings *s, const char *field, const char *name,
                  const char *value, req_error *er) {
    if (settings_set(s, name, value, CMD_SERVE) != COSMOS3_OK)
        return bad(er, 400, field, "%s: %s", field, c3_errmsg());
    if (session_check(s, sv->e, false, NULL, NULL))
        return bad(er, 400, field, "%s: %s", field, c3_errmsg());
    return true;
}

static bool get_number(json_t *v, const char *field, double *out, req_error *er) {
    if (!json_is_number(v)) return bad(er, 400, field, "%s: must be a number", field);
    *out = json_number_value(v);
    if (!isfinite(*out)) return bad(er, 400, field, "%s: must be finite", field);
    return true;
}

static bool apply_number(server *sv, c3_settings *s, json_t *v, const char *field, const char *name,
                         req_error *er) {
    double x = 0;
    if (!get_number(v, field, &x, er)) return false;
    char txt[64];
    snprintf(txt, sizeof txt, "%.17g", x);
    return apply(sv, s, field, name, txt, er);
}

static bool apply_int(server *sv, c3_settings *s, json_t *v, const char *field, const char *name,
                      req_error *er) {
    if (!json_is_integer(v)) return bad(er, 400, field, "%s: must be an integer", field);
    char txt[32];
    snprintf(txt, sizeof txt, "%lld", (long long)json_integer_value(v));
    return apply(sv, s, field, name, txt, er);
}

static bool get_text(json_t *v, const char *field, size_t max, bool empty_ok, const char **out,
                     req_error *er) {
    if (!json_is_string(v)) return bad(er, 400, field, "%s: must be a string", field);
    size_t n = json_string_length(v);
    if (n > max) return bad(er, 400, field, "%s: %zu bytes; at most %zu", field, n, max);
    if (!n && !empty_ok) return bad(er, 400, field, "%s: must not be empty", field);
    *out = json_string_value(v);
    return true;
}

static bool parse_extra_object(server *sv, job *j, c3_settings *s, json_t *x, req_error *er);

/* extra_params: an object, or (a multipart form's text) a JSON string of one. */
static bool parse_extra(server *sv, job *j, c3_settings *s, json_t *x, req_error *er) {
    json_t *in = object_in_string(x);
    if (json_is_string(x) && !in)
        return bad(er, 400, "extra_params",
                   "extra_params: the text is not a JSON object (e.g. '{\"schedule\": \"linear\"}')");
    bool ok = parse_extra_object(sv, j, s, in ? in : x, er);
    json_decref(in);
    return ok;
}

static bool parse_extra_object(server *sv, job *j, c3_settings *s, json_t *x, req_error *er) {
    if (!json_is_object(x)) return bad(er, 400, "extra_params", "extra_params: must be an object");
    const char *k;
    json_t *v;
    /* vLLM-Omni's two template switches are one here: on when either is on */
    json_t *ur = json_object_get(x, "use_resolution_template"),
           *ud = json_object_get(x, "use_duration_template");
    if ((ur && !json_is_null(ur)) || (ud && !json_is_null(ud))) {
        if ((ur && !json_is_null(ur) && !json_is_boolean(ur)) ||
            (ud && !json_is_null(ud) && !json_is_boolean(ud)))
            return bad(er, 400, "extra_params.use_resolution_template",
                       "extra_params.use_resolution_template and use_duration_template: must be "
                       "true or false");
        bool on = json_is_true(ur) || json_is_true(ud);
        if (ur && ud && !json_is_null(ur) && !json_is_null(ud) && json_is_true(ur) != json_is_true(ud))
            note(j, "extra_params: use_resolution_template and use_duration_template differ; "
                    "cosmos3 appends both template sentences or neither: both on");
        if (!apply(sv, s, "extra_params.use_resolution_template", "templates", on ? "on" : "off",
                   er))
            return false;
    }
    json_object_foreach(x, k, v) {
        char field[96];
        snprintf(field, sizeof field, "extra_params.%.60s", k);
        if (json_is_null(v)) continue;
        if (!strcmp(k, "schedule")) {
            const char *t;
            if (!get_text(v, field, 32, false, &t, er) || !apply(sv, s, field, "schedule", t, er))
                return false;
        } else if (!strcmp(k, "guidance_interval")) {
            char txt[96];
            if (json_is_string(v) && !strcmp(json_string_value(v), "none")) {
                snprintf(txt, sizeof txt, "none");
            } else if (json_is_array(v) && json_array_size(v) == 2 &&
                       json_is_number(json_array_get(v, 0)) &&
                       json_is_number(json_array_get(v, 1))) {
                snprintf(txt, sizeof txt, "%.17g,%.17g", json_number_value(json_array_get(v, 0)),
                         json_number_value(json_array_get(v, 1)));
            } else {
                return bad(er, 400, field, "%s: must be [LO, HI] (e.g. [400, 1000]) or \"none\"",
                           field);
            }
            if (!apply(sv, s, field, "guidance-interval", txt, er)) return false;
        } else if (!strcmp(k, "system_prompt")) {
            const char *t = json_is_true(v) ? "on" : json_is_false(v) ? "off" : NULL;
            if (!t && !get_text(v, field, 8, false, &t, er)) return false;
            if (!apply(sv, s, field, "system-prompt", t, er)) return false;
        } else if (!strcmp(k, "templates")) {
            if (!json_is_boolean(v)) return bad(er, 400, field, "%s: must be true or false", field);
            if (!apply(sv, s, field, "templates", json_is_true(v) ? "on" : "off", er)) return false;
        } else if (!strcmp(k, "use_resolution_template") || !strcmp(k, "use_duration_template")) {
            /* above */
        } else if (!strcmp(k, "use_system_prompt")) { /* vLLM-Omni's name for system_prompt */
            if (!json_is_boolean(v)) return bad(er, 400, field, "%s: must be true or false", field);
            if (!apply(sv, s, field, "system-prompt", json_is_true(v) ? "on" : "off", er))
                return false;
        } else if (!strcmp(k, "negative_metadata_mode")) {
            /* vLLM-Omni: how its negative prompt's metadata sentences are built; cosmos3 gives
               both branches the same template sentences, so every mode draws the same here */
            const char *t;
            if (!get_text(v, field, 64, true, &t, er)) return false;
        } else if (!strcmp(k, "guardrails")) {
            /* vLLM-Omni: its optional safety models; cosmos3 ships none */
            if (!json_is_boolean(v) && !json_is_string(v))
                return bad(er, 400, field, "%s: must be true or false", field);
            if (json_is_true(v))
                note(j, "extra_params.guardrails: cosmos3 runs no guardrail models; the request "
                        "ran without them");
        } else if (!strcmp(k, "cache")) { /* the step cache: "none", "sea", "fb" */
            const char *t;
            if (!get_text(v, field, 8, false, &t, er) || !apply(sv, s, field, "cache", t, er))
                return false;
        } else if (!strcmp(k, "cache_threshold")) {
            if (!apply_number(sv, s, v, field, "cache-threshold", er)) return false;
        } else if (!strcmp(k, "cache_max_skip")) {
            if (!apply_int(sv, s, v, field, "cache-max-skip", er)) return false;
        } else if (!strcmp(k, "cache_warmup")) {
            if (!apply_int(sv, s, v, field, "cache-warmup", er)) return false;
        } else {
            return bad(er, 400, field,
                       "%s: unknown; extra_params takes schedule, guidance_interval, "
                       "system_prompt, templates, cache, cache_threshold, cache_max_skip, "
                       "cache_warmup (and vLLM-Omni's use_resolution_template, "
                       "use_duration_template, use_system_prompt, negative_metadata_mode, "
                       "guardrails)",
                       field);
        }
    }
    return true;
}

/* vLLM-Omni rounds a side to the nearest multiple of 16 and num_frames to
 * the nearest 1 + 4k: so does this server, saying so in the answer. */
static unsigned round_side(job *j, const char *field, unsigned v) {
    unsigned r = (v + 8) / 16 * 16;
    if (r < 16) r = 16;
    if (r > SERVE_MAX_SIDE) r = SERVE_MAX_SIDE;
    if (r != v) note(j, "%s: %u rounded to %u (a multiple of 16)", field, v, r);
    return r;
}

static long long round_frames(job *j, long long v) {
    long long r = (v - 1 + 2) / 4 * 4 + 1;
    if (r > 4097) r = 4097;
    if (r != v) note(j, "num_frames: %lld rounded to %lld (1 + 4k)", v, r);
    return r;
}

/* max_sequence_length (every vLLM-Omni Cosmos3 request sends it): each
 * prompt's chat-template ids are cut to that many, as there (the engine's
 * warning says so in the answer); above 4096, the engine's limit applies. */
static bool take_max_seq(server *sv, c3_settings *s, json_t *v, req_error *er) {
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_string(v)) {
        char *end;
        x = strtoll(json_string_value(v), &end, 10);
        if (end == json_string_value(v) || *end)
            return bad(er, 400, "max_sequence_length", "max_sequence_length: must be an integer");
    } else {
        return bad(er, 400, "max_sequence_length", "max_sequence_length: must be an integer");
    }
    if (x < 1 || x > 1 << 20)
        return bad(er, 400, "max_sequence_length", "max_sequence_length: must be in 1..%d", 1 << 20);
    char txt[32];
    snprintf(txt, sizeof txt, "%lld", x);
    return apply(sv, s, "max_sequence_length", "max-sequence-length", txt, er);
}

static const char *const known_fields[] = {
    "model", "prompt", "n", "size", "response_format", "negative_prompt", "guidance_scale",
    "num_inference_steps", "seed", "flow_shift", "extra_params", "stream", "user", "output_format",
    "true_cfg_scale", "max_sequence_length",
    /* sent by the OpenAI client, not used (see serve.h) */
    "quality", "style", "partial_images", "background", "moderation", "output_compression"};

/* Parse and validate a generation request into j (j->s starts as the base). */
static bool parse_request(server *sv, const char *body, size_t len, job *j, req_error *er) {
    json_error_t jerr;
    json_t *o = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return bad(er, 400, NULL, "the body is not valid JSON (line %d: %s)", jerr.line, jerr.text);
    bool ok = false;
    c3_settings *s = &j->s;
    const char *k, *t;
    json_t *v;
    if (!json_is_object(o)) {
        bad(er, 400, NULL, "the body must be a JSON object such as {\"prompt\": \"a red fox\"}");
        goto out;
    }
    json_object_foreach(o, k, v) {
        bool known = false;
        for (size_t i = 0; i < C3_ARRAY_LEN(known_fields); i++)
            known |= !strcmp(k, known_fields[i]);
        if (!known) {
            bad(er, 400, k, "%.64s: unknown field; see 'man cosmos3' (serve) for the fields taken",
                k);
            goto out;
        }
    }
#define FIELD(name) ((v = json_object_get(o, name)) != NULL && !json_is_null(v))
    if (FIELD("true_cfg_scale")) {
        bad(er, 400, "true_cfg_scale",
            "true_cfg_scale: not supported; Cosmos3 has one classifier-free guidance scale: send "
            "guidance_scale");
        goto out;
    }
    if (FIELD("model")) {
        if (!get_text(v, "model", 512, false, &t, er)) goto out;
        if (strcmp(t, sv->model_id) != 0) {
            bad(er, 400, "model",
                "model: '%.200s' is not loaded; this server runs '%s' (or omit model)", t,
                sv->model_id);
            goto out;
        }
    }
    if (!FIELD("prompt")) {
        bad(er, 400, "prompt", "prompt: required, e.g. \"prompt\": \"a red fox in the snow\"");
        goto out;
    }
    if (!get_text(v, "prompt", SERVE_MAX_PROMPT, false, &t, er)) goto out;
    if (precheck_prompt(t) != COSMOS3_OK) { /* only spaces: refused before it is queued */
        bad(er, 400, "prompt", "prompt: has no words, e.g. \"prompt\": \"a red fox in the snow\"");
        goto out;
    }
    free(s->prompt);
    s->prompt = xstrdup(t);
    if (FIELD("negative_prompt")) {
        if (!get_text(v, "negative_prompt", SERVE_MAX_PROMPT, true, &t, er) ||
            !apply(sv, s, "negative_prompt", "negative-prompt", t, er))
            goto out;
    }
    j->n = 1;
    if (FIELD("n")) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 ||
            json_integer_value(v) > SERVE_MAX_N) {
            bad(er, 400, "n", "n: must be an integer in 1..%d", SERVE_MAX_N);
            goto out;
        }
        j->n = (int)json_integer_value(v);
    }
    if (FIELD("size")) {
        if (!get_text(v, "size", 32, false, &t, er)) goto out;
        if (strcmp(t, "auto") != 0) {
            unsigned w, h;
            int used = 0;
            if (sscanf(t, "%5u%*[x]%5u%n", &w, &h, &used) != 2 || t[used] || t[0] < '0' ||
                t[0] > '9' || !strchr(t, 'x') || strchr(t, 'x')[1] < '0' ||
                strchr(t, 'x')[1] > '9') {
                bad(er, 400, "size", "size: '%.32s' is not WIDTHxHEIGHT (e.g. \"1024x1024\")", t);
                goto out;
            }
            if (!w || !h) {
                bad(er, 400, "size", "size: '%.32s' has no side of 0 pixels (e.g. \"64x64\")", t);
                goto out;
            }
            if (w > SERVE_MAX_SIDE || h > SERVE_MAX_SIDE || (int64_t)w * h > sv->max_pixels) {
                bad(er, 400, "size",
                    "size: %ux%u is larger than this server's %lld pixels (start it with larger "
                    "-W/-H to allow it)",
                    w, h, (long long)sv->max_pixels);
                goto out;
            }
            char a[16], b[16];
            snprintf(a, sizeof a, "%u", round_side(j, "size width", w));
            snprintf(b, sizeof b, "%u", round_side(j, "size height", h));
            if (!apply(sv, s, "size", "width", a, er) || !apply(sv, s, "size", "height", b, er))
                goto out;
        }
    }
    if (FIELD("max_sequence_length") && !take_max_seq(sv, s, v, er)) goto out;
    if (FIELD("response_format")) {
        if (!get_text(v, "response_format", 32, false, &t, er)) goto out;
        if (!strcmp(t, "url")) {
            bad(er, 400, "response_format",
                "response_format: 'url' is not supported (this server keeps no files); use "
                "b64_json");
            goto out;
        }
        if (!strcmp(t, "file")) {
            j->file_response = true;
        } else if (strcmp(t, "b64_json") != 0) {
            bad(er, 400, "response_format",
                "response_format: '%.32s' is not b64_json or file (the picture's bytes)", t);
            goto out;
        }
    }
    if (FIELD("output_format")) {
        if (!get_text(v, "output_format", 16, false, &t, er)) goto out;
        if (!strcmp(t, "png"))
            j->ofmt = MEDIA_PNG;
        else if (!strcmp(t, "jpeg") || !strcmp(t, "jpg"))
            j->ofmt = MEDIA_JPEG;
        else if (!strcmp(t, "webp"))
            j->ofmt = MEDIA_WEBP;
        else {
            bad(er, 400, "output_format", "output_format: '%.16s' is not png, jpeg or webp", t);
            goto out;
        }
    }
    if (FIELD("user") && !get_text(v, "user", SERVE_MAX_USER, true, &t, er)) goto out;
    if (FIELD("num_inference_steps") && !apply_int(sv, s, v, "num_inference_steps", "steps", er))
        goto out;
    if (FIELD("guidance_scale") && !apply_number(sv, s, v, "guidance_scale", "guidance", er))
        goto out;
    if (FIELD("flow_shift") && !apply_number(sv, s, v, "flow_shift", "shift", er)) goto out;
    if (FIELD("seed")) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > (json_int_t)(INT64_MAX - SERVE_MAX_N)) {
            bad(er, 400, "seed",
                "seed: must be a non-negative integer (image i of n uses seed + i)");
            goto out;
        }
        j->seed_given = true;
        j->seed = (uint64_t)json_integer_value(v);
    } else if (strcmp(s->seed, "random") != 0) { /* the server's --seed */
        j->seed_given = true;
        j->seed = strtoull(s->seed, NULL, 10);
    }
    if (FIELD("extra_params") && !parse_extra(sv, j, s, v, er)) goto out;
    if (FIELD("stream")) {
        if (!json_is_boolean(v)) {
            bad(er, 400, "stream", "stream: must be true or false");
            goto out;
        }
        j->stream = json_is_true(v);
    }
    if (j->file_response && (j->n > 1 || j->stream)) {
        bad(er, 400, "response_format",
            "response_format: 'file' answers one picture; drop n and stream, or use b64_json");
        goto out;
    }
#undef FIELD
    /* the size the answer reports */
    cosmos3_settings r = {0};
    int rc = session_check(s, sv->e, false, NULL, &r);
    s->width = r.width;
    s->height = r.height;
    /* what one request may cost: pixels x frames x steps x images */
    double cost = (double)r.width * r.height * r.frames * r.steps * j->n / SERVE_COST_UNIT;
    int frames = r.frames, steps = r.steps;
    if (rc) {
        bad(er, 400, NULL, "%s", c3_errmsg());
        goto out;
    }
    if (cost > sv->max_cost) {
        bad(er, 400, NULL,
            "this request costs %.1f (%dx%d pixels x %d frame%s x %d steps x n %d, in steps of "
            "1024x1024 pixels); this server takes at most %d (--max-cost): ask for fewer steps, "
            "images or pixels",
            cost, s->width, s->height, frames, frames == 1 ? "" : "s", steps, j->n, sv->max_cost);
        goto out;
    }
    ok = true;
out:
    json_decref(o);
    return ok;
}

/* ------------------------------------------------------------------ HTTP */

typedef struct {
    int ep;
    double t0;
    char *body;
    size_t len, cap, seen;
    bool too_big, answered;
    job *job;        /* a reference */
    char client[64]; /* counted in server.clients while in flight ("": not counted) */
} req_ctx;

static int endpoint_of(const char *url) {
    for (int i = 0; i < EP_OTHER; i++)
        if (!strcmp(url, ep_names[i])) return i;
    if (!strncmp(url, "/v1/videos/", 11)) return EP_VIDEOS;
    if (!strncmp(url, "/v1/models/", 11)) return EP_MODELS;
    return EP_OTHER;
}

static void count(server *sv, int ep, int status) {
    pthread_mutex_lock(&sv->mu);
    if (status >= 0 && status < HTTP_CODES) sv->requests[ep][status]++;
    pthread_mutex_unlock(&sv->mu);
}

/* Every answer names the instance that gave it (X-Cosmos3-Instance), so a
 * client behind a load balancer can tell which server ran its request. */
static enum MHD_Result queue_answer(server *sv, struct MHD_Connection *c, unsigned status,
                                    struct MHD_Response *resp) {
    char name[sizeof sv->instance];
    pthread_mutex_lock(&sv->mu); /* set once the port is known (serve_main) */
    memcpy(name, sv->instance, sizeof name);
    pthread_mutex_unlock(&sv->mu);
    if (name[0]) MHD_add_response_header(resp, "X-Cosmos3-Instance", name);
    return MHD_queue_response(c, status, resp);
}

static enum MHD_Result send_text(server *sv, struct MHD_Connection *c, req_ctx *r, int status,
                                 const char *type, char *text /* freed */, const char *hdr,
                                 const char *hval) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        text ? strlen(text) : 0, text ? text : (char *)"", MHD_RESPMEM_MUST_COPY);
    free(text);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (hdr) MHD_add_response_header(resp, hdr, hval);
    enum MHD_Result ok = queue_answer(sv, c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->answered = true;
    count(sv, r->ep, status);
    if (r->ep == EP_GENERATIONS)
        fprintf(stderr, "cosmos3 serve: POST %s %d %.2f s\n", ep_names[r->ep], status,
                c3_now() - r->t0);
    return ok;
}

static enum MHD_Result send_json(server *sv, struct MHD_Connection *c, req_ctx *r, int status,
                                 json_t *o) {
    char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return send_text(sv, c, r, status, "application/json", txt, NULL, NULL);
}

static enum MHD_Result send_error(server *sv, struct MHD_Connection *c, req_ctx *r, int status,
                                  const char *param, const char *msg, const char *hdr,
                                  const char *hval) {
    return send_text(sv, c, r, status, "application/json", error_body(status, param, msg), hdr,
                     hval);
}

static int retry_after_locked(server *sv) {
    double per = sv->jobs ? sv->job_s / (double)sv->jobs : 1.0;
    double s = ceil(per * (sv->queued + 1));
    return s < 1 ? 1 : s > SERVE_RETRY_MAX_S ? SERVE_RETRY_MAX_S : (int)s;
}


/* The SSE response's reader state: it holds a reference to the job. */
typedef struct {
    server *sv;
    job *j;
} sse_ctx;

/* Stream a job's SSE bytes; waits (watching the client) until there are some. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse_ctx *x = cls;
    server *sv = x->sv;
    job *j = x->j;
    static const char keepalive[] = ": waiting\n\n";
    double t_idle = c3_now();
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        if (j->sse_sent == j->sse.len && j->state != JOB_DONE &&
            c3_now() - t_idle > SERVE_SSE_KEEPALIVE_S && max >= sizeof keepalive - 1) {
            pthread_mutex_unlock(&sv->mu);
            memcpy(buf, keepalive, sizeof keepalive - 1);
            return (ssize_t)(sizeof keepalive - 1);
        }
        if (j->sse_sent < j->sse.len) {
            size_t n = C3_MIN(max, j->sse.len - j->sse_sent);
            memcpy(buf, j->sse.p + j->sse_sent, n);
            j->sse_sent += n;
            pthread_mutex_unlock(&sv->mu);
            return (ssize_t)n;
        }
        if (j->state == JOB_DONE) {
            pthread_mutex_unlock(&sv->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        cv_wait(sv, SERVE_POLL_S);
        if (j->state != JOB_DONE && j->sse_sent == j->sse.len && client_gone(j->fd)) {
            job_cancel_locked(sv, j);
            pthread_mutex_unlock(&sv->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static void sse_free(void *cls) {
    sse_ctx *x = cls;
    job_unref(x->sv, x->j);
    free(x);
}

/* A body over limit bytes: true (with the 413 sent in *out), the message
 * ending in hint. */
static bool refuse_big(server *sv, struct MHD_Connection *c, req_ctx *r, unsigned limit,
                       const char *hint, enum MHD_Result *out) {
    if (!r->too_big) return false;
    char msg[256];
    snprintf(msg, sizeof msg, "the request body is larger than %u bytes%s", limit, hint);
    *out = send_error(sv, c, r, 413, NULL, msg, NULL, NULL);
    return true;
}

/* A job can be taken only once the model is loaded and before shutdown:
 * true (with the 503 sent in *out) when it cannot. */
static bool refuse_unready(server *sv, struct MHD_Connection *c, req_ctx *r, enum MHD_Result *out) {
    char ra[16];
    pthread_mutex_lock(&sv->mu);
    bool ready = sv->ready, draining = sv->draining;
    pthread_mutex_unlock(&sv->mu);
    snprintf(ra, sizeof ra, "%d", SERVE_LOAD_RETRY_S);
    if (draining)
        *out = send_error(sv, c, r, 503, NULL, "the server is shutting down", "Retry-After", ra);
    else if (!ready)
        *out = send_error(sv, c, r, 503, NULL, "the model is still loading; retry shortly",
                          "Retry-After", ra);
    return draining || !ready;
}

/* Queue job j (new, server mutex held) behind the others for the worker.
 * false: it is in the FIFO with two references (the queue's and the
 * caller's), the mutex still held. true: refused while draining (503) or
 * with the queue full (429, Retry-After from the mean job time); the job is
 * freed, the mutex released and the answer queued into *out. */
static bool enqueue_locked(server *sv, struct MHD_Connection *c, req_ctx *r, job *j,
                           enum MHD_Result *out) {
    if (sv->draining || sv->queued >= sv->queue_cap) {
        char msg[256], ra[16];
        bool full = !sv->draining;
        int wait_s = full ? retry_after_locked(sv) : SERVE_LOAD_RETRY_S;
        int waiting = sv->queued;
        j->refs = 1;
        job_unref_locked(j);
        pthread_mutex_unlock(&sv->mu);
        snprintf(ra, sizeof ra, "%d", wait_s);
        if (!full) {
            *out =
                send_error(sv, c, r, 503, NULL, "the server is shutting down", "Retry-After", ra);
            return true;
        }
        snprintf(msg, sizeof msg,
                 "the queue is full (%d waiting behind the one running); retry after %d s", waiting,
                 wait_s);
        *out = send_error(sv, c, r, 429, NULL, msg, "Retry-After", ra);
        return true;
    }
    j->refs = 2;
    j->state = JOB_QUEUED;
    j->t_queued = c3_now();
    job_batch_key(sv, j); /* the scheduler's: which jobs may share a batch */
    if (sv->tail)
        sv->tail->next = j;
    else
        sv->head = j;
    sv->tail = j;
    sv->queued++;
    return false;
}

static uint8_t *base64_decode(const char *t, size_t n, size_t *out_n);
static enum MHD_Result send_bytes(server *sv, struct MHD_Connection *c, req_ctx *r, int status,
                                  const char *type, const uint8_t *data, size_t n,
                                  const char *disposition);

/* response_format "file": the picture itself (the answer's one image), as
 * vLLM-Omni answers it, with its name in Content-Disposition; body (the
 * JSON answer) is freed. */
static enum MHD_Result send_file_answer(server *sv, struct MHD_Connection *c, req_ctx *r, job *j,
                                        char *body) {
    json_t *o = json_loads(body, 0, NULL);
    free(body);
    json_t *item = json_array_get(json_object_get(o, "data"), 0);
    const char *b64 = json_string_value(json_object_get(item, "b64_json"));
    size_t n = 0;
    uint8_t *d = b64 ? base64_decode(b64, strlen(b64), &n) : NULL;
    char disp[128];
    const char *ext = j->ofmt == MEDIA_JPEG ? "jpg" : j->ofmt == MEDIA_WEBP ? "webp" : "png";
    snprintf(disp, sizeof disp, "attachment; filename=\"cosmos3-%lld.%s\"",
             (long long)json_integer_value(json_object_get(item, "seed")), ext);
    json_decref(o);
    if (!d) return send_error(sv, c, r, 500, NULL, "the picture could not be read back", NULL, NULL);
    enum MHD_Result ok = send_bytes(sv, c, r, 200,
                                    j->ofmt == MEDIA_JPEG   ? "image/jpeg"
                                    : j->ofmt == MEDIA_WEBP ? "image/webp"
                                                            : "image/png",
                                    d, n, disp);
    free(d);
    return ok;
}

static enum MHD_Result post_generation(server *sv, struct MHD_Connection *c, req_ctx *r) {
    char ra[16];
    enum MHD_Result refused;
    if (refuse_big(sv, c, r, SERVE_MAX_BODY, "; send a shorter prompt", &refused) ||
        refuse_unready(sv, c, r, &refused))
        return refused;
    job *j = xcalloc(1, sizeof *j);
    settings_copy(&j->s, &sv->base);
    req_error er = {0};
    if (!parse_request(sv, r->body, r->len, j, &er)) {
        settings_free(&j->s);
        free(j);
        return send_error(sv, c, r, er.status, er.param[0] ? er.param : NULL, er.msg, NULL, NULL);
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    pthread_mutex_lock(&sv->mu);
    if (enqueue_locked(sv, c, r, j, &refused)) return refused;
    /* refs: this connection and the queue (then the worker) */
    sv->conns++;
    r->job = j;
    if (j->stream) j->refs++; /* the SSE response */
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    /* no idle timeout while the job waits and runs: libmicrohttpd would
     * otherwise close a connection whose answer took longer than it */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);

    if (j->stream) {
        sse_ctx *x = xmalloc(sizeof *x);
        *x = (sse_ctx){sv, j};
        struct MHD_Response *resp = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, SERVE_SSE_BLOCK, sse_read, x, sse_free);
        if (!resp) {
            sse_free(x);
            return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION,
                                "close"); /* a stream is one answer */
        enum MHD_Result ok = queue_answer(sv, c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        r->answered = true;
        count(sv, r->ep, MHD_HTTP_OK);
        fprintf(stderr, "cosmos3 serve: POST %s 200 (stream)\n", ep_names[r->ep]);
        return ok;
    }
    /* wait for the answer, watching the client */
    pthread_mutex_lock(&sv->mu);
    while (j->state != JOB_DONE) {
        cv_wait(sv, SERVE_POLL_S);
        if (j->state != JOB_DONE && client_gone(j->fd)) {
            job_cancel_locked(sv, j);
            break;
        }
    }
    int status = j->gone ? HTTP_CLIENT_GONE : j->status;
    char *body = j->body ? xstrdup(j->body) : NULL;
    pthread_mutex_unlock(&sv->mu);
    if (status == HTTP_CLIENT_GONE) {
        free(body);
        r->answered = true;
        count(sv, r->ep, status);
        fprintf(stderr, "cosmos3 serve: POST %s: the client left after %.2f s; cancelled\n",
                ep_names[r->ep], c3_now() - r->t0);
        return MHD_NO; /* close the connection */
    }
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)SERVE_IDLE_TIMEOUT_S);
    if (status == 200 && j->file_response) /* vLLM-Omni's response_format "file" */
        return send_file_answer(sv, c, r, j, body);
    snprintf(ra, sizeof ra, "%d", SERVE_LOAD_RETRY_S);
    return send_text(sv, c, r, status, "application/json", body,
                     status == 503 ? "Retry-After" : NULL, ra);
}

/* ------------------------------------------------------- /v1/videos HTTP */

static enum MHD_Result send_bytes(server *sv, struct MHD_Connection *c, req_ctx *r, int status,
                                  const char *type, const uint8_t *data, size_t n,
                                  const char *disposition) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(n, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (disposition) MHD_add_response_header(resp, "Content-Disposition", disposition);
    enum MHD_Result ok = queue_answer(sv, c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->answered = true;
    count(sv, r->ep, status);
    return ok;
}

static int b64_value(int ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+' || ch == '-') return 62;
    if (ch == '/' || ch == '_') return 63;
    return -1;
}

/* Standard or URL-safe base64, padding optional; NULL when malformed. */
static uint8_t *base64_decode(const char *t, size_t n, size_t *out_n) {
    uint8_t *o = xmalloc(n / 4 * 3 + 3);
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (t[i] == '=') break;
        if (t[i] == '\n' || t[i] == '\r' || t[i] == ' ') continue;
        int v = b64_value((unsigned char)t[i]);
        if (v < 0) {
            free(o);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (uint8_t)(acc >> bits);
        }
    }
    *out_n = k;
    return o;
}

enum { REF_IMAGE, REF_CLIP, REF_ANY }; /* a picture, a clip, or what the file is */

/* A picture or clip of the request, held undecoded until the request's
 * size, frames and cost are known (decode_reference). REF_CLIP: a
 * video_reference; REF_IMAGE: its first frame; REF_ANY (input_reference, as
 * vLLM-Omni takes it): a clip is video-to-video, a picture image-to-video. */
typedef struct {
    uint8_t *data; /* owned (NULL: none) */
    size_t n;
    const char *field;
    int kind;
} reference;

static bool take_reference(reference *ref, const uint8_t *data, size_t n, const char *field,
                           int kind, req_error *er) {
    if (ref->data)
        return bad(er, 400, field,
                   "%s: give one of input_reference, image_reference and video_reference", field);
    ref->data = xmalloc(n ? n : 1);
    if (n) memcpy(ref->data, data, n);
    *ref = (reference){.data = ref->data, .n = n, .field = field, .kind = kind};
    return true;
}

/* Decode the reference into j->cond, late and few at a time (SERVE_DECODERS
 * under a semaphore, so that many uploads cannot decode on every connection
 * thread at once): a picture no larger than the output can use (its size
 * read from the header first), a clip's frames up to the ones the video
 * uses, and its decoded bytes within what the request's --max-cost leaves
 * (a 1024x1024 frame decoded costs one). */
static bool decode_reference(server *sv, job *j, const reference *ref, double cost_left,
                             req_error *er) {
    int64_t budget = (int64_t)(cost_left * SERVE_COST_UNIT) * 3;
    c3_media_limits lim = {.min_frames = 1,
                           .max_frames = ref->kind == REF_IMAGE ? 1 : j->s.frames,
                           .max_pixels = media_cond_pixels(j->s.width, j->s.height),
                           .max_bytes = C3_MIN(budget, (int64_t)MEDIA_MAX_BYTES)};
    if (lim.max_bytes < 3) lim.max_bytes = 3;
    c3_media_frames m;
    while (sem_wait(&sv->decoders) != 0 && errno == EINTR) {
    }
    int rc = media_decode_mem(ref->data, ref->n, ref->field, &lim, &m);
    sem_post(&sv->decoders);
    if (rc != COSMOS3_OK) {
        if (budget < MEDIA_MAX_BYTES && strstr(c3_errmsg(), "MiB of"))
            return bad(er, 400, ref->field, "%s (what --max-cost %d leaves for decoding it)",
                       c3_errmsg(), sv->max_cost);
        return bad(er, 400, ref->field, "%s", c3_errmsg());
    }
    j->cond_rgb = m.rgb;
    j->cond = (c3_cond_frames){.rgb = m.rgb,
                               .width = m.width,
                               .height = m.height,
                               .frames = m.frames,
                               .video = ref->kind == REF_CLIP || (ref->kind == REF_ANY && m.frames > 1),
                               .name = ref->field};
    return true;
}

/* A local picture or clip named by path (file:///x or /x), read only when
 * the server was started with --allowed-local-media-path DIR and its real
 * path (symlinks and '..' resolved) lies inside DIR's. */
static bool take_local(server *sv, reference *ref, const char *u, const char *field, int kind,
                       req_error *er) {
    const char *path = !strncmp(u, "file://", 7) ? u + 7 : u;
    char root[PATH_MAX], real[PATH_MAX];
    if (!realpath(sv->base.allowed_media, root))
        return bad(er, 400, field, "%s: the server's --allowed-local-media-path %s: %s", field,
                   sv->base.allowed_media, strerror(errno));
    if (!realpath(path, real))
        return bad(er, 400, field, "%s: %.512s: %s", field, path, strerror(errno));
    size_t L = strlen(root);
    bool inside = !strcmp(root, "/") ||
                  (!strncmp(real, root, L) && (real[L] == '/' || real[L] == 0));
    if (!inside)
        return bad(er, 400, field,
                   "%s: %.512s is outside the folder this server reads (--allowed-local-media-path "
                   "%s); send the file as a data URL",
                   field, path, sv->base.allowed_media);
    char *data;
    size_t n;
    if (c3_read_file(real, &data, &n) != COSMOS3_OK)
        return bad(er, 400, field, "%s: %s", field, c3_errmsg());
    bool ok = take_reference(ref, (const uint8_t *)data, n, field, kind, er);
    free(data);
    return ok;
}

static bool take_url(server *sv, reference *ref, json_t *v, const char *field, int kind, req_error *er);

/* "data:MIME;base64,DATA": a string, or {"image_url": ...} / {"video_url": ...}
 * (the URL itself a string or {"url": ...}), or (multipart forms, as
 * vLLM-Omni sends them) that object as a JSON string. */
static bool take_data_url(server *sv, reference *ref, json_t *v, const char *field, int kind,
                          req_error *er) {
    json_t *in = object_in_string(v);
    bool ok = take_url(sv, ref, in ? in : v, field, kind, er);
    json_decref(in);
    return ok;
}

static bool take_url(server *sv, reference *ref, json_t *v, const char *field, int kind, req_error *er) {
    const char *key = kind == REF_CLIP ? "video_url" : "image_url";
    if (json_is_object(v)) {
        if (json_object_get(v, "file_id"))
            return bad(er, 400, field,
                       "%s.file_id: this server keeps no files; send %s as a data URL", field, key);
        json_t *u = json_object_get(v, key);
        if (!u) u = json_object_get(v, kind == REF_CLIP ? "image_url" : "video_url");
        if (!u) u = json_object_get(v, "url");
        if (json_is_object(u)) u = json_object_get(u, "url"); /* {"image_url": {"url": ...}} */
        v = u;
    }
    if (!json_is_string(v))
        return bad(er, 400, field, "%s: must be a data URL string (or {\"%s\": \"data:...\"})",
                   field, key);
    const char *u = json_string_value(v), *comma = strchr(u, ',');
    bool remote = strstr(u, "://") && strncmp(u, "file://", 7) != 0;
    if (strncmp(u, "data:", 5) != 0 && !remote && sv->base.allowed_media)
        return take_local(sv, ref, u, field, kind, er);
    if (strncmp(u, "data:", 5) != 0 || !comma || !memmem(u, (size_t)(comma - u), ";base64", 7))
        return bad(er, 400, field,
                   "%s: not a base64 data URL; send data:image/png;base64,... (this server fetches "
                   "no URLs%s)",
                   field,
                   sv->base.allowed_media ? ""
                                          : " and reads no server paths unless started with "
                                            "--allowed-local-media-path DIR");
    size_t n;
    uint8_t *d = base64_decode(comma + 1, strlen(comma + 1), &n);
    if (!d) return bad(er, 400, field, "%s: the base64 data is malformed", field);
    bool ok = take_reference(ref, d, n, field, kind, er);
    free(d);
    return ok;
}

/* An integer, or (multipart forms) its text. */
static bool form_int(json_t *v, const char *field, long long lo, long long hi, long long *out,
                     req_error *er) {
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else if (json_is_string(v)) {
        char *end;
        errno = 0;
        *out = strtoll(json_string_value(v), &end, 10);
        if (errno || end == json_string_value(v) || *end)
            return bad(er, 400, field, "%s: must be an integer", field);
    } else {
        return bad(er, 400, field, "%s: must be an integer", field);
    }
    if (*out < lo || *out > hi)
        return bad(er, 400, field, "%s: must be in %lld..%lld", field, lo, hi);
    return true;
}

static bool form_number(json_t *v, const char *field, double *out, req_error *er) {
    if (json_is_string(v)) {
        char *end;
        errno = 0;
        *out = strtod(json_string_value(v), &end);
        if (errno || end == json_string_value(v) || *end || !isfinite(*out))
            return bad(er, 400, field, "%s: must be a number", field);
        return true;
    }
    return get_number(v, field, out, er);
}

static bool apply_form_number(server *sv, c3_settings *s, json_t *v, const char *field,
                              const char *name, req_error *er) {
    double x;
    if (!form_number(v, field, &x, er)) return false;
    char txt[64];
    snprintf(txt, sizeof txt, "%.17g", x);
    return apply(sv, s, field, name, txt, er);
}

static const char *const video_fields[] = {"model",
                                           "prompt",
                                           "negative_prompt",
                                           "size",
                                           "seconds",
                                           "width",
                                           "height",
                                           "num_frames",
                                           "fps",
                                           "num_inference_steps",
                                           "guidance_scale",
                                           "flow_shift",
                                           "seed",
                                           "user",
                                           "quality",
                                           "input_reference",
                                           "image_reference",
                                           "video_reference",
                                           "generate_sound",
                                           "extra_params",
                                           "max_sequence_length",
                                           "response_format"};

/* The fields of a /v1/videos request (JSON, or a multipart form's text
 * fields as strings with its file part in file/nfile). */
static bool parse_video_ref(server *sv, json_t *o, const uint8_t *file, size_t nfile, job *j,
                            reference *ref, req_error *er);

static bool parse_video(server *sv, json_t *o, const uint8_t *file, size_t nfile, job *j,
                        req_error *er) {
    reference ref = {0};
    bool ok = parse_video_ref(sv, o, file, nfile, j, &ref, er);
    free(ref.data);
    return ok;
}

static bool parse_video_ref(server *sv, json_t *o, const uint8_t *file, size_t nfile, job *j,
                            reference *ref, req_error *er) {
    c3_settings *s = &j->s;
    const char *k, *t;
    json_t *v;
    long long x;
    json_object_foreach(o, k, v) {
        bool known = false;
        for (size_t i = 0; i < C3_ARRAY_LEN(video_fields); i++)
            known |= !strcmp(k, video_fields[i]);
        if (!known)
            return bad(er, 400, k,
                       "%.64s: unknown field; see 'man cosmos3' (serve, /v1/videos) for the "
                       "fields taken",
                       k);
    }
#define FIELD(name) ((v = json_object_get(o, name)) != NULL && !json_is_null(v))
    if (FIELD("model")) {
        if (!get_text(v, "model", 512, false, &t, er)) return false;
        if (strcmp(t, sv->model_id) != 0)
            return bad(er, 400, "model",
                       "model: '%.200s' is not loaded; this server runs '%s' (or omit model)", t,
                       sv->model_id);
    }
    if (!FIELD("prompt"))
        return bad(er, 400, "prompt", "prompt: required, e.g. \"prompt\": \"a red fox runs\"");
    if (!get_text(v, "prompt", SERVE_MAX_PROMPT, false, &t, er)) return false;
    if (precheck_prompt(t) != COSMOS3_OK) /* only spaces: refused before it is queued */
        return bad(er, 400, "prompt", "prompt: has no words, e.g. \"prompt\": \"a red fox runs\"");
    free(s->prompt);
    s->prompt = xstrdup(t);
    if (FIELD("negative_prompt") &&
        (!get_text(v, "negative_prompt", SERVE_MAX_PROMPT, true, &t, er) ||
         !apply(sv, s, "negative_prompt", "negative-prompt", t, er)))
        return false;
    if (FIELD("user") && !get_text(v, "user", SERVE_MAX_USER, true, &t, er)) return false;
    if (FIELD("quality") && !get_text(v, "quality", 32, true, &t, er)) return false;
    if (FIELD("size")) {
        unsigned w, h;
        int used = 0;
        if (!get_text(v, "size", 32, false, &t, er)) return false;
        if (sscanf(t, "%5u%*[x]%5u%n", &w, &h, &used) != 2 || t[used] || t[0] < '0' || t[0] > '9')
            return bad(er, 400, "size", "size: '%.32s' is not WIDTHxHEIGHT (e.g. \"1280x720\")", t);
        if (!w || !h)
            return bad(er, 400, "size", "size: '%.32s' has no side of 0 pixels (e.g. \"64x64\")", t);
        char a[16], b[16];
        snprintf(a, sizeof a, "%u", round_side(j, "size width", w));
        snprintf(b, sizeof b, "%u", round_side(j, "size height", h));
        if (!apply(sv, s, "size", "width", a, er) || !apply(sv, s, "size", "height", b, er))
            return false;
    }
    char txt[32];
    if (FIELD("width")) {
        if (!form_int(v, "width", 1, SERVE_MAX_SIDE, &x, er)) return false;
        snprintf(txt, sizeof txt, "%u", round_side(j, "width", (unsigned)x));
        if (!apply(sv, s, "width", "width", txt, er)) return false;
    }
    if (FIELD("height")) {
        if (!form_int(v, "height", 1, SERVE_MAX_SIDE, &x, er)) return false;
        snprintf(txt, sizeof txt, "%u", round_side(j, "height", (unsigned)x));
        if (!apply(sv, s, "height", "height", txt, er)) return false;
    }
    if (FIELD("max_sequence_length") && !take_max_seq(sv, s, v, er)) return false;
    if (FIELD("response_format")) { /* vLLM-Omni's video answers: the job object, or the file */
        if (!get_text(v, "response_format", 32, false, &t, er)) return false;
        if (strcmp(t, "file") && strcmp(t, "b64_json") && strcmp(t, "url"))
            return bad(er, 400, "response_format",
                       "response_format: '%.32s' is not file (the MP4 from /content)", t);
    }
    if (FIELD("fps") && !apply_form_number(sv, s, v, "fps", "fps", er)) return false;
    long long frames = 0;
    if (FIELD("num_frames")) {
        if (!form_int(v, "num_frames", 1, 4097, &frames, er)) return false;
        frames = round_frames(j, frames);
    } else {
        long long sec = SERVE_VIDEO_SECONDS;
        if (FIELD("seconds") && !form_int(v, "seconds", 1, 600, &sec, er)) return false;
        frames = (long long)(sec * s->fps) / 4 * 4 + 1; /* the nearest 1 + 4k at or below */
        if (frames > 4097) frames = 4097;
    }
    snprintf(txt, sizeof txt, "%lld", frames);
    if (!apply(sv, s, "num_frames", "frames", txt, er)) return false;
    if (FIELD("num_inference_steps")) {
        if (!form_int(v, "num_inference_steps", 1, 1000, &x, er)) return false;
        snprintf(txt, sizeof txt, "%lld", x);
        if (!apply(sv, s, "num_inference_steps", "steps", txt, er)) return false;
    }
    if (FIELD("guidance_scale") && !apply_form_number(sv, s, v, "guidance_scale", "guidance", er))
        return false;
    if (FIELD("generate_sound")) { /* the clip's sound as AAC in the MP4 (vLLM-Omni's field) */
        const char *b =
            json_is_boolean(v) ? (json_is_true(v) ? "on" : "off")
            : json_is_string(v) &&
                    (!strcmp(json_string_value(v), "true") || !strcmp(json_string_value(v), "1"))
                ? "on"
            : json_is_string(v) &&
                    (!strcmp(json_string_value(v), "false") || !strcmp(json_string_value(v), "0"))
                ? "off"
                : NULL;
        if (!b) return bad(er, 400, "generate_sound", "generate_sound: must be true or false");
        if (!strcmp(b, "on") && sv->e) {
            const cosmos3_model_info *mi = session_model(sv->e);
            if (mi->sound_dim <= 0 || !mi->sound_tokenizer)
                return bad(er, 400, "generate_sound",
                           "generate_sound: this server's model (%s) makes no sound: it has no "
                           "%s",
                           sv->model_id, mi->sound_dim <= 0 ? "sound heads" : "sound_tokenizer/");
        }
        if (!apply(sv, s, "generate_sound", "sound", b, er)) return false;
    }
    if (FIELD("flow_shift") && !apply_form_number(sv, s, v, "flow_shift", "shift", er))
        return false;
    if (FIELD("seed")) {
        if (!form_int(v, "seed", 0, INT64_MAX, &x, er)) return false;
        snprintf(txt, sizeof txt, "%lld", x);
        if (!apply(sv, s, "seed", "seed", txt, er)) return false;
    }
    if (FIELD("extra_params") && !parse_extra(sv, j, s, v, er)) return false;
    /* the conditioning: kept undecoded until the request's cost is known */
    if (file && !take_reference(ref, file, nfile, "input_reference", REF_ANY, er)) return false;
    if (FIELD("input_reference") && !take_data_url(sv, ref, v, "input_reference", REF_ANY, er))
        return false;
    if (FIELD("image_reference") && !take_data_url(sv, ref, v, "image_reference", REF_IMAGE, er))
        return false;
    if (FIELD("video_reference") && !take_data_url(sv, ref, v, "video_reference", REF_CLIP, er))
        return false;
#undef FIELD
    cosmos3_settings r = {0};
    int rc = session_check(s, sv->e, false, NULL, &r);
    s->width = r.width;
    s->height = r.height;
    double cost = (double)r.width * r.height * r.frames * r.steps / SERVE_COST_UNIT;
    int steps = r.steps;
    if (rc) return bad(er, 400, NULL, "%s", c3_errmsg());
    if ((int64_t)s->width * s->height > sv->max_pixels)
        return bad(er, 400, "size",
                   "size: %dx%d is larger than this server's %lld pixels (start it with larger "
                   "-W/-H to allow it)",
                   s->width, s->height, (long long)sv->max_pixels);
    if (cost > sv->max_cost)
        return bad(er, 400, NULL,
                   "this request costs %.1f (%dx%d pixels x %lld frames x %d steps, in steps of "
                   "1024x1024 pixels); this server takes at most %d (--max-cost): ask for fewer "
                   "frames, steps or pixels",
                   cost, s->width, s->height, frames, steps, sv->max_cost);
    if (!ref->data) return true;
    /* a request that cannot run is refused now, not failed later */
    if (s->frames == 1)
        return bad(er, 400, "num_frames",
                   ref->kind == REF_CLIP ? "num_frames: a conditioning clip needs a video; ask for 1 + 4k > 1 "
                               "frames (e.g. 17)"
                             : "num_frames: a conditioning picture starts a video; ask for 1 + "
                               "4k > 1 frames (e.g. 9)");
    return decode_reference(sv, j, ref, sv->max_cost - cost, er);
}

/* The video object of GET /v1/videos/{id} (server mutex held). A finished
 * job's MP4 may be in the job store only (mp4_len says it was made). */
json_t *video_object(server *sv, job *j) {
    if (j->stored) return json_deep_copy(j->stored); /* from before a restart */
    const char *status = j->state == JOB_QUEUED    ? "queued"
                         : j->state == JOB_RUNNING ? "in_progress"
                         : j->mp4_len              ? "completed"
                                                   : "failed";
    /* per step; the last percent is the VAE decode and the MP4 */
    int progress = j->state == JOB_QUEUED ? 0
                   : j->mp4_len           ? 100
                   : j->steps > 0         ? (int)(99.0 * j->step / j->steps)
                                          : 0;
    char sec[16];
    snprintf(sec, sizeof sec, "%d", (int)ceil(j->s.frames / (j->s.fps > 0 ? j->s.fps : 24)));
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:I,s:s,s:s,s:i,s:f,s:i,s:i,s:s}", "id", j->vid,
                          "object", "video", "model", sv->model_id, "prompt",
                          j->s.prompt ? j->s.prompt : "", "status", status, "progress", progress,
                          "created_at", (json_int_t)j->created_at, "seconds", sec, "quality",
                          "default", "num_frames", j->s.frames, "fps", j->s.fps, "step", j->step,
                          "steps", j->steps ? j->steps : j->s.steps, "media_type", "video/mp4");
    json_object_set_new(o, "size", json_sprintf("%dx%d", j->s.width, j->s.height));
    if (j->s.cache && strcmp(j->s.cache, "none")) /* the step cache: the steps it skipped so far */
        json_object_set_new(o, "steps_cached", json_integer(j->steps_cached));
    json_object_set_new(o, "completed_at",
                        j->state == JOB_DONE ? json_integer((json_int_t)j->completed_at)
                                             : json_null());
    if (j->mp4_len) {
        json_object_set_new(o, "bytes", json_integer((json_int_t)j->mp4_len));
        json_object_set_new(o, "seed", json_integer((json_int_t)j->vframes_seed));
    }
    if (j->notes) json_object_set(o, "warnings", j->notes);
    /* per stage: queue wait, tokenize, und, denoise, vae, encode, batch size, replica */
    if (j->acc && j->state != JOB_QUEUED)
        json_object_set(o, "timings", json_object_get(j->acc, "timings"));
    json_object_set_new(o, "error",
                        j->state == JOB_DONE && !j->mp4_len
                            ? json_pack("{s:s,s:s}", "code", "generation_failed", "message",
                                        j->verr ? j->verr : "failed")
                            : json_null());
    return o;
}

/* The finished videos of the job store (from before this start) as jobs of
 * the list, oldest first: their objects as stored, their bytes on disk. */
static int restore_videos(server *sv) {
    store_row *rows;
    int n;
    APP_TRY(store_rows(sv->db, &rows, &n));
    job **tail = &sv->store;
    for (int i = 0; i < n; i++) {
        job *j = xcalloc(1, sizeof *j);
        j->refs = 1; /* the store's */
        j->video = true;
        j->state = JOB_DONE;
        j->fd = -1;
        snprintf(j->vid, sizeof j->vid, "%s", rows[i].id);
        j->created_at = (time_t)rows[i].created_at;
        j->completed_at = (time_t)rows[i].completed_at;
        j->mp4_len = rows[i].completed ? (size_t)rows[i].bytes : 0;
        j->verr = rows[i].error ? xstrdup(rows[i].error) : NULL;
        j->status = rows[i].completed ? 200 : 500;
        j->stored = json_incref(rows[i].object);
        *tail = j;
        tail = &j->snext;
    }
    if (n)
        fprintf(stderr, "cosmos3 serve: %d video job%s from %s\n", n, n == 1 ? "" : "s",
                store_path(sv->db));
    store_rows_free(rows, n);
    return COSMOS3_OK;
}

static job *store_find_locked(server *sv, const char *id) {
    for (job *j = sv->store; j; j = j->snext)
        if (!strcmp(j->vid, id)) return j;
    return NULL;
}

static enum MHD_Result post_video(server *sv, struct MHD_Connection *c, req_ctx *r, bool sync,
                                  bool form) {
    enum MHD_Result refused;
    if (refuse_big(sv, c, r, SERVE_MAX_VIDEO_BODY, "", &refused) ||
        refuse_unready(sv, c, r, &refused))
        return refused;
    json_t *o = NULL;
    /* text fields are capped far below the file part: a huge one is cut at
       the cap, marked, and refused once the body is read */
    form_ctx f = {.text_cap = SERVE_MAX_PROMPT, .file_cap = SERVE_MAX_VIDEO_BODY};
    req_error er = {0};
    if (form) {
        struct MHD_PostProcessor *pp = MHD_create_post_processor(c, 64 * 1024, form_piece, &f);
        if (!pp || MHD_post_process(pp, r->body ? r->body : "", r->len) != MHD_YES)
            bad(&er, 400, NULL, "the multipart/form-data body cannot be parsed");
        if (pp) MHD_destroy_post_processor(pp);
        char param[64], msg[256];
        if (f.bad_file)
            bad(&er, 400, NULL, "one file part only (input_reference)");
        else if (f.has_file && strcmp(f.file_key, "input_reference"))
            bad(&er, 400, f.file_key, "%.60s: the file part must be named input_reference",
                f.file_key);
        else if (!er.status && !form_fields_json(&f, &o, param, sizeof param, msg, sizeof msg))
            bad(&er, 400, param[0] ? param : NULL, "%s", msg);
    } else {
        json_error_t jerr;
        o = json_loadb(r->body ? r->body : "", r->len, JSON_REJECT_DUPLICATES, &jerr);
        if (!o)
            bad(&er, 400, NULL, "the body is not valid JSON (line %d: %s)", jerr.line, jerr.text);
        else if (!json_is_object(o))
            bad(&er, 400, NULL,
                "the body must be a JSON object such as {\"prompt\": \"a red fox\"}");
    }
    job *j = xcalloc(1, sizeof *j);
    settings_copy(&j->s, &sv->base);
    j->video = true;
    j->sync = sync;
    j->ofmt = MEDIA_MP4;
    bool ok = !er.status &&
              parse_video(sv, o, f.has_file ? (const uint8_t *)f.file.p : NULL, f.file.len, j, &er);
    json_decref(o);
    form_free(&f);
    if (!ok) {
        j->refs = 1; /* not shared yet */
        job_unref_locked(j);
        return send_error(sv, c, r, er.status, er.param[0] ? er.param : NULL, er.msg, NULL, NULL);
    }
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) rnd = (uint64_t)(c3_now() * 1e9);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    pthread_mutex_lock(&sv->mu);
    /* the instance's name, then 80 random bits: see --instance (routing by the name) */
    snprintf(j->vid, sizeof j->vid, "video_%s_%016llx%04llx", sv->instance, (unsigned long long)rnd,
             (unsigned long long)(sv->jobs + (uint64_t)sv->queued) & 0xffff);
    j->created_at = time(NULL);
    char vid[sizeof j->vid];
    snprintf(vid, sizeof vid, "%s", j->vid);
    if (!sync) { /* in the job store before anyone can see it */
        json_t *vo = video_object(sv, j);
        int src = store_add(sv->db, j->vid, (int64_t)j->created_at, vo);
        json_decref(vo);
        if (src) {
            pthread_mutex_unlock(&sv->mu);
            j->refs = 1; /* not shared yet */
            job_unref(sv, j);
            return send_error(sv, c, r, 500, NULL, c3_errmsg(), NULL, NULL);
        }
    }
    if (enqueue_locked(sv, c, r, j, &refused)) {
        if (!sync) store_forget(sv->db, vid);
        return refused;
    }
    /* refs: the queue (then the worker), and the store or this connection */
    if (!sync) {
        job **pp = &sv->store;
        while (*pp)
            pp = &(*pp)->snext;
        *pp = j;
        json_t *vo = video_object(sv, j);
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_unlock(&sv->mu);
        fprintf(stderr, "cosmos3 serve: POST /v1/videos 200 %s queued\n", j->vid);
        return send_json(sv, c, r, 200, vo);
    }
    sv->conns++;
    r->job = j;
    pthread_cond_broadcast(&sv->cv);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    while (j->state != JOB_DONE) {
        cv_wait(sv, SERVE_POLL_S);
        if (j->state != JOB_DONE && client_gone(j->fd)) {
            job_cancel_locked(sv, j);
            break;
        }
    }
    bool gone = j->gone;
    uint8_t *mp4 = NULL;
    size_t n = j->mp4_len;
    if (j->mp4) {
        mp4 = xmalloc(n);
        memcpy(mp4, j->mp4, n);
    }
    int status = j->status ? j->status : 500;
    char *body = j->body ? xstrdup(j->body) : NULL;
    pthread_mutex_unlock(&sv->mu);
    if (gone) {
        free(mp4);
        free(body);
        r->answered = true;
        count(sv, r->ep, HTTP_CLIENT_GONE);
        return MHD_NO;
    }
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)SERVE_IDLE_TIMEOUT_S);
    if (!mp4) return send_text(sv, c, r, status, "application/json", body, NULL, NULL);
    free(body);
    enum MHD_Result res =
        send_bytes(sv, c, r, 200, "video/mp4", mp4, n, "inline; filename=\"video.mp4\"");
    free(mp4);
    fprintf(stderr, "cosmos3 serve: POST /v1/videos/sync 200 %.2f s\n", c3_now() - r->t0);
    return res;
}

/* /v1/videos, /v1/videos/sync, /v1/videos/{id}, /v1/videos/{id}/content */
static enum MHD_Result videos_route(server *sv, struct MHD_Connection *c, req_ctx *r,
                                    const char *url, const char *method, bool form) {
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST"),
         del = !strcmp(method, "DELETE");
    const char *rest = url + strlen("/v1/videos");
    if (!*rest || !strcmp(rest, "/")) {
        if (post) return post_video(sv, c, r, false, form);
        if (!get)
            return send_error(sv, c, r, 405, NULL, "use POST (create) or GET (list)",
                              MHD_HTTP_HEADER_ALLOW, "GET, HEAD, POST");
        pthread_mutex_lock(&sv->mu);
        json_t *data = json_array();
        for (job *j = sv->store; j; j = j->snext) /* newest first */
            json_array_insert_new(data, 0, video_object(sv, j));
        size_t n = json_array_size(data);
        json_t *o = json_pack("{s:s,s:o,s:b}", "object", "list", "data", data, "has_more", 0);
        json_object_set(o, "first_id",
                        n ? json_object_get(json_array_get(data, 0), "id") : json_null());
        json_object_set(o, "last_id",
                        n ? json_object_get(json_array_get(data, n - 1), "id") : json_null());
        pthread_mutex_unlock(&sv->mu);
        return send_json(sv, c, r, 200, o);
    }
    if (!strcmp(rest, "/sync")) {
        if (!post)
            return send_error(sv, c, r, 405, NULL, "use POST", MHD_HTTP_HEADER_ALLOW, "POST");
        return post_video(sv, c, r, true, form);
    }
    char id[128];
    const char *slash = strchr(rest + 1, '/');
    size_t idn = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
    snprintf(id, sizeof id, "%.*s", (int)C3_MIN(idn, sizeof id - 1), rest + 1);
    bool content = slash && !strcmp(slash, "/content");
    if (slash && !content) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "no such endpoint: %.100s; a video has /v1/videos/ID and /v1/videos/ID/content",
                 url);
        return send_error(sv, c, r, 404, NULL, msg, NULL, NULL);
    }
    if (!(get || (del && !content)))
        return send_error(sv, c, r, 405, NULL, content ? "use GET" : "use GET or DELETE",
                          MHD_HTTP_HEADER_ALLOW, content ? "GET, HEAD" : "GET, HEAD, DELETE");
    pthread_mutex_lock(&sv->mu);
    job *j = store_find_locked(sv, id);
    if (!j) {
        char name[sizeof sv->instance];
        memcpy(name, sv->instance, sizeof name);
        pthread_mutex_unlock(&sv->mu);
        char msg[400];
        size_t in = strlen(name);
        const char *other = !strncmp(id, "video_", 6) ? id + 6 : NULL,
                   *end = other ? strchr(other, '_') : NULL;
        if (end && ((size_t)(end - other) != in || strncmp(other, name, in)))
            snprintf(msg, sizeof msg,
                     "no video '%.100s' here: its id names instance '%.*s' and this is '%s'; send "
                     "its requests to that instance (a load balancer routes them by that name)",
                     id, (int)C3_MIN((size_t)(end - other), 64), other, name);
        else
            snprintf(
                msg, sizeof msg,
                "no video '%.100s' (unknown, deleted, or dropped: this server keeps the last %d)",
                id, sv->keep_videos);
        return send_error(sv, c, r, 404, "video_id", msg, NULL, NULL);
    }
    if (del) { /* cancel it if it has not finished, and forget it */
        job_cancel_locked(sv, j);
        job **pp = &sv->store;
        while (*pp != j)
            pp = &(*pp)->snext;
        *pp = j->snext;
        job_unref_locked(j); /* the store's reference */
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_unlock(&sv->mu);
        if (store_forget(sv->db, id))
            return send_error(sv, c, r, 500, "video_id", c3_errmsg(), NULL, NULL);
        fprintf(stderr, "cosmos3 serve: DELETE /v1/videos/%s\n", id);
        return send_json(
            sv, c, r, 200,
            json_pack("{s:s,s:s,s:b}", "id", id, "object", "video.deleted", "deleted", 1));
    }
    if (!content) {
        json_t *o = video_object(sv, j);
        pthread_mutex_unlock(&sv->mu);
        return send_json(sv, c, r, 200, o);
    }
    if (!j->mp4_len) {
        char msg[400];
        if (j->state == JOB_DONE) /* it failed: it never completes */
            snprintf(msg, sizeof msg, "%s failed: %.200s; it has no content", j->vid,
                     j->verr ? j->verr : "no video was made");
        else
            snprintf(msg, sizeof msg,
                     "%s is %s; poll GET /v1/videos/%s until its status is completed", j->vid,
                     j->state == JOB_QUEUED ? "queued" : "in progress", j->vid);
        pthread_mutex_unlock(&sv->mu);
        return send_error(sv, c, r, 409, "video_id", msg, NULL, NULL);
    }
    size_t n = j->mp4_len;
    uint8_t *mp4 = NULL;
    if (j->mp4) {
        mp4 = xmalloc(n);
        memcpy(mp4, j->mp4, n);
    }
    pthread_mutex_unlock(&sv->mu);
    if (!mp4 && store_content(sv->db, id, &mp4, &n)) { /* the job store's file */
        char msg[300];
        snprintf(msg, sizeof msg, "%.200s (deleted or dropped meanwhile)", c3_errmsg());
        return send_error(sv, c, r, 404, "video_id", msg, NULL, NULL);
    }
    char disp[160];
    snprintf(disp, sizeof disp, "inline; filename=\"%s.mp4\"", id);
    enum MHD_Result res = send_bytes(sv, c, r, 200, "video/mp4", mp4, n, disp);
    free(mp4);
    return res;
}

/* multipart/form-data (the OpenAI client's input_reference upload). */
static bool form_body(struct MHD_Connection *c) {
    const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    while (t && (*t == ' ' || *t == '\t'))
        t++;
    return t && !strncasecmp(t, "multipart/form-data", 19);
}

/* The OpenAI client's way: "Authorization: Bearer KEY" (compared in
 * constant time). */
static bool authorized(const server *sv, struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ')
        h++;
    size_t n = strlen(h), k = strlen(sv->api_key);
    unsigned char d = n != k;
    for (size_t i = 0; i < k; i++)
        d |= (unsigned char)(sv->api_key[i] ^ (i < n ? h[i] : 0));
    return d == 0;
}

/* Content-Type application/json, with or without parameters. A form or
 * text/plain body is what a web page may send without asking (a CORS
 * "simple request"): refused. */
static bool json_body(struct MHD_Connection *c) {
    const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!t) return false;
    while (*t == ' ' || *t == '\t')
        t++;
    static const char want[] = "application/json";
    if (strncasecmp(t, want, sizeof want - 1) != 0) return false;
    t += sizeof want - 1;
    return !*t || *t == ';' || *t == ' ' || *t == '\t';
}

/* MHD's unescaping, with a decoded NUL (%00) kept visible as 0x7f: the
 * route must not see a path cut short ("ID%00/content" is not "ID"). */
static size_t unescape_url(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls;
    (void)c;
    size_t n = MHD_http_unescape(s);
    for (size_t i = 0; i < n; i++)
        if (s[i] == 0) s[i] = 0x7f;
    return n;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    (void)version;
    server *sv = cls;
    req_ctx *r = *con_cls;
    if (!r) {
        r = xcalloc(1, sizeof *r);
        r->ep = endpoint_of(url);
        r->t0 = c3_now();
        *con_cls = r;
        conn_enter(sv, c, CONN_BODY);
        /* busy is an answer: too many connections, or too many requests of
           this client at once, get 503/429 with Retry-After (not a reset) */
        char key[64], ra[16];
        client_key(sv, c, key, sizeof key);
        pthread_mutex_lock(&sv->mu);
        bool full = sv->open_conns > SERVE_MAX_CONNECTIONS, /* /health is never counted */
             admitted = !full && (r->ep == EP_HEALTH || client_enter_locked(sv, key));
        if (admitted && r->ep != EP_HEALTH)
            snprintf(r->client, sizeof r->client, "%s", key);
        else if (!admitted)
            sv->busy++;
        pthread_mutex_unlock(&sv->mu);
        snprintf(ra, sizeof ra, "%d", SERVE_BUSY_RETRY_S);
        if (full)
            return send_error(sv, c, r, 503, NULL,
                              "this server has too many connections open; retry after the "
                              "Retry-After seconds",
                              "Retry-After", ra);
        if (!admitted) {
            char msg[200];
            snprintf(msg, sizeof msg,
                     "this client has %d requests in flight, the most this server takes at once "
                     "(--max-per-client); retry after the Retry-After seconds",
                     sv->per_client);
            return send_error(sv, c, r, 429, NULL, msg, "Retry-After", ra);
        }
        if (strchr(url, 0x7f))
            return send_error(sv, c, r, 400, NULL,
                              "the path holds a NUL or DEL byte (%00 or %7F); send the plain path",
                              NULL, NULL);
        if (sv->api_key && r->ep != EP_HEALTH && !authorized(sv, c))
            return send_error(sv, c, r, 401, NULL,
                              "this server needs an API key: send 'Authorization: Bearer KEY' "
                              "(the key given to serve by --api-key or COSMOS3_API_KEY)",
                              "WWW-Authenticate", "Bearer");
        if (r->ep == EP_GENERATIONS && !strcmp(method, "POST") && !json_body(c))
            return send_error(sv, c, r, 415, NULL,
                              "the body must be JSON sent with 'Content-Type: application/json'",
                              NULL, NULL);
        /* /v1/videos also takes a multipart form (the input_reference upload) */
        if (r->ep == EP_VIDEOS && !strcmp(method, "POST") && !json_body(c) && !form_body(c))
            return send_error(sv, c, r, 415, NULL,
                              "the body must be JSON ('Content-Type: application/json') or a "
                              "multipart/form-data form",
                              NULL, NULL);
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned limit = r->ep == EP_VIDEOS ? SERVE_MAX_VIDEO_BODY : SERVE_MAX_BODY;
        if (cl && strtoull(cl, NULL, 10) > limit) {
            r->too_big = true;
            char msg[128];
            snprintf(msg, sizeof msg, "the request body is larger than %u bytes%s", limit,
                     r->ep == EP_VIDEOS ? "" : "; send a shorter prompt");
            return send_error(sv, c, r, 413, NULL, msg, NULL, NULL);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->too_big && !r->answered) {
            if (r->len + *upload_size >
                (r->ep == EP_VIDEOS ? SERVE_MAX_VIDEO_BODY : SERVE_MAX_BODY)) {
                r->too_big = true;
                free(r->body);
                r->body = NULL;
                r->len = r->cap = 0;
            } else {
                if (r->len + *upload_size + 1 > r->cap) { /* doubling: linear in the body */
                    r->cap = C3_MAX(r->cap * 2, r->len + *upload_size + 1);
                    r->body = xrealloc(r->body, r->cap);
                }
                memcpy(r->body + r->len, upload, *upload_size);
                r->len += *upload_size;
                r->body[r->len] = 0;
            }
        }
        r->seen += *upload_size;
        *upload_size = 0;
        return r->seen > (r->ep == EP_VIDEOS ? SERVE_MAX_VIDEO_BODY : SERVE_MAX_DISCARD) ? MHD_NO
                                                                                         : MHD_YES;
    }
    if (r->answered) return MHD_YES;
    conn_enter(sv, c, CONN_BUSY);
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (r->ep == EP_GENERATIONS) {
        if (!post)
            return send_error(sv, c, r, 405, NULL, "use POST", MHD_HTTP_HEADER_ALLOW, "POST");
        return post_generation(sv, c, r);
    }
    if (r->ep == EP_VIDEOS) return videos_route(sv, c, r, url, method, form_body(c));
    if (r->ep == EP_OTHER) {
        char msg[320];
        snprintf(msg, sizeof msg,
                 "no such endpoint: %.100s; this server answers POST /v1/images/generations, "
                 "/v1/videos (POST, GET; /v1/videos/ID, ID/content, DELETE ID; POST "
                 "/v1/videos/sync), GET /v1/models, /health, /metrics",
                 url);
        return send_error(sv, c, r, 404, NULL, msg, NULL, NULL);
    }
    if (!get) return send_error(sv, c, r, 405, NULL, "use GET", MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    char name[sizeof sv->instance];
    pthread_mutex_lock(&sv->mu);
    bool ready = sv->ready, draining = sv->draining;
    memcpy(name, sv->instance, sizeof name);
    pthread_mutex_unlock(&sv->mu);
    char ra[16];
    snprintf(ra, sizeof ra, "%d", SERVE_LOAD_RETRY_S);
    if (r->ep == EP_HEALTH) {
        char why[512];
        if (!cosmos3_processes_healthy(why, sizeof why)) /* under mpirun / srun: one is gone */
            return send_json(sv, c, r, 503,
                             json_pack("{s:s,s:s,s:s}", "status", "unhealthy", "error", why,
                                       "instance", name));
        if (draining || !ready) {
            json_t *h = json_pack("{s:s,s:s}", "status", draining ? "shutting down" : "loading",
                                  "instance", name);
            char *txt = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
            json_decref(h);
            return send_text(sv, c, r, 503, "application/json", txt, "Retry-After", ra);
        }
        pthread_mutex_lock(&sv->mu); /* per replica: busy or idle, its batch, step, memory */
        json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:o}", "status", "ok", "model", sv->model_id,
                              "instance", name, "queue_depth", sv->queued, "replicas",
                              replicas_json_locked(sv));
        pthread_mutex_unlock(&sv->mu);
        return send_json(sv, c, r, 200, o);
    }
    if (r->ep == EP_MODELS) {
        if (!ready)
            return send_error(sv, c, r, 503, NULL, "the model is still loading", "Retry-After", ra);
        if (strcmp(url, "/v1/models") != 0) { /* GET /v1/models/{id} */
            const char *id = url + strlen("/v1/models/");
            if (strcmp(id, sv->model_id) != 0) {
                char msg[800];
                snprintf(msg, sizeof msg, "model '%.200s' is not loaded; this server runs '%s'", id,
                         sv->model_id);
                return send_error(sv, c, r, 404, "model", msg, NULL, NULL);
            }
            return send_json(sv, c, r, 200,
                             json_pack("{s:s,s:s,s:I,s:s}", "id", sv->model_id, "object", "model",
                                       "created", (json_int_t)sv->created, "owned_by", "cosmos3"));
        }
        return send_json(sv, c, r, 200,
                         json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list", "data", "id",
                                   sv->model_id, "object", "model", "created",
                                   (json_int_t)sv->created, "owned_by", "cosmos3"));
    }
    c3_sbuf b = {0};
    metrics_text(sv, &b);
    return send_text(sv, c, r, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, NULL, NULL);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)toe;
    server *sv = cls;
    req_ctx *r = *con_cls;
    conn_enter(sv, c, CONN_HEADERS); /* a kept-alive connection: the next request */
    if (!r) return;
    if (r->client[0]) {
        pthread_mutex_lock(&sv->mu);
        client_leave_locked(sv, r->client);
        pthread_mutex_unlock(&sv->mu);
    }
    if (r->job) {
        pthread_mutex_lock(&sv->mu);
        if (r->job->state != JOB_DONE)
            job_cancel_locked(sv, r->job); /* the client left mid-stream */
        sv->conns--;
        job_unref_locked(r->job);
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_unlock(&sv->mu);
    }
    free(r->body);
    free(r);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    server *sv = cls;
    pthread_mutex_lock(&sv->mu);
    vsnprintf(sv->mhd_log, sizeof sv->mhd_log, fmt, ap);
    size_t n = strlen(sv->mhd_log);
    while (n && (sv->mhd_log[n - 1] == '\n' || sv->mhd_log[n - 1] == '.'))
        sv->mhd_log[--n] = 0;
    pthread_mutex_unlock(&sv->mu);
}

/* --------------------------------------------------------------- main */

static bool is_loopback(const struct sockaddr_storage *ss) {
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
    return false;
}

/* --instance: 1 to SERVE_MAX_INSTANCE of [a-z0-9-] (never '_', which ends
 * the name inside a job id: video_NAME_HEX). */
static bool instance_ok(const char *n) {
    size_t len = strlen(n);
    if (len < 1 || len > SERVE_MAX_INSTANCE) return false;
    for (; *n; n++)
        if (!((*n >= 'a' && *n <= 'z') || (*n >= '0' && *n <= '9') || *n == '-')) return false;
    return true;
}

/* The default instance name: the host name in [a-z0-9-] (upper case
 * lowered, anything else a '-', at most 42 characters), '-', the port. */
static void instance_default(int port, char *out, size_t n) {
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    char name[64];
    size_t k = 0;
    for (const char *h = host; *h && k < 42; h++) {
        char ch = (char)tolower((unsigned char)*h);
        bool keep = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
        if (keep || (k && name[k - 1] != '-')) name[k++] = keep ? ch : '-';
    }
    while (k && name[k - 1] == '-')
        k--;
    name[k] = 0;
    char full[80];
    snprintf(full, sizeof full, "%s-%d", k ? name : "cosmos3", port);
    snprintf(out, n, "%.48s", full); /* 42 + '-' + at most 5 digits */
}

/* SIGTERM/SIGINT: refuse new work, answer the waiting requests 503, let the
 * one running finish (a second signal, or SERVE_GRACE_S, cancels it). */
static void drain(server *sv, const sigset_t *sigs) {
    pthread_mutex_lock(&sv->mu);
    sv->draining = true;
    queue_refuse_all_locked(sv);
    pthread_mutex_unlock(&sv->mu);
    double t0 = c3_now();
    bool cancelled = false;
    for (;;) {
        pthread_mutex_lock(&sv->mu);
        bool busy = server_busy_locked(sv) || !sv->load_done;
        pthread_mutex_unlock(&sv->mu);
        if (!busy) break;
        struct timespec ts = {0, 100 * 1000 * 1000};
        int sig = sigtimedwait(sigs, NULL, &ts);
        cut_slow_clients(sv);
        if (!cancelled && (sig > 0 || c3_now() - t0 > SERVE_GRACE_S)) {
            pthread_mutex_lock(&sv->mu);
            sv->cancel_all = true;
            server_cancel_locked(sv);
            pthread_mutex_unlock(&sv->mu);
            cancelled = true;
            fprintf(stderr, "cosmos3 serve: cancelling the request in flight\n");
        }
    }
    pthread_mutex_lock(&sv->mu);
    sv->stopping = true;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
}

int serve_main(c3_settings *s, char **pos, int npos) {
    if (npos)
        return c3_fail(COSMOS3_EUSAGE,
                       "serve: unexpected argument '%s'; prompts come in the requests", pos[0]);
    if (s->port < 0 || s->port > 65535)
        return c3_fail(COSMOS3_EUSAGE, "--port %d must be in 0..65535 (0: any free port)", s->port);
    if (s->queue < 0 || s->queue > SERVE_MAX_QUEUE)
        return c3_fail(COSMOS3_EUSAGE, "--queue %d must be in 0..%d", s->queue, SERVE_MAX_QUEUE);
    if (s->frames != 1)
        return c3_fail(COSMOS3_EUSAGE, "serve answers image requests; drop --frames");
    if (s->given[option_index(option_find("output"))])
        return c3_fail(COSMOS3_EUSAGE,
                       "serve: --output is not used (images go back in the answers); drop it");
    if (s->max_cost < 1)
        return c3_fail(COSMOS3_EUSAGE, "--max-cost %d must be at least 1 (one 1024x1024 step)",
                       s->max_cost);
    if (s->max_per_client < 0 || s->max_per_client > SERVE_MAX_CONNECTIONS)
        return c3_fail(COSMOS3_EUSAGE, "--max-per-client %d must be in 0..%d (0: --queue + 16)",
                       s->max_per_client, SERVE_MAX_CONNECTIONS);
    char proxy[64] = "";
    if (s->trusted_proxy) {
        struct in_addr a4;
        struct in6_addr a6;
        if (inet_pton(AF_INET, s->trusted_proxy, &a4) == 1)
            inet_ntop(AF_INET, &a4, proxy, sizeof proxy);
        else if (inet_pton(AF_INET6, s->trusted_proxy, &a6) == 1)
            inet_ntop(AF_INET6, &a6, proxy, sizeof proxy);
        else
            return c3_fail(COSMOS3_EUSAGE,
                           "--trusted-proxy '%.100s' is not an IP address; give the proxy's "
                           "address as it connects here (e.g. 127.0.0.1)",
                           s->trusted_proxy);
    }
    if (!(s->init_timeout >= 0))
        return c3_fail(COSMOS3_EUSAGE, "--init-timeout %g must be 0 (no bound) or more seconds",
                       s->init_timeout);
    /* ranks in several processes (mpirun, srun): process 0 listens and
     * forwards each request; the others only follow it (session_open) */
    int prank = 0, psize = 1;
    char perr[1024];
    if (cosmos3_processes(&prank, &psize, perr, sizeof perr))
        return c3_fail(COSMOS3_ERESOURCE, "%s", perr);
    if (prank != 0) {
        c3_events *ev = events_new(64);
        c3_session *e = NULL;
        int rc = session_open(&e, s, ev); /* follows process 0 until it closes; then exits */
        session_close(e);
        events_free(ev);
        return rc;
    }
    const char *env_key = getenv("COSMOS3_API_KEY");
    if (!s->api_key && env_key) s->api_key = xstrdup(env_key);
    if (s->api_key) {
        const char *from =
            s->given[option_index(option_find("api-key"))] ? "--api-key" : "COSMOS3_API_KEY";
        if (!s->api_key[0])
            return c3_fail(COSMOS3_EUSAGE,
                           "%s is empty; give a key (e.g. from 'openssl rand -hex 32')", from);
        for (const char *k = s->api_key; *k; k++)
            if (*k <= ' ' || *k > '~')
                return c3_fail(COSMOS3_EUSAGE,
                               "%s holds a space or a character outside printable ASCII; a key "
                               "is a token such as one from 'openssl rand -hex 32'",
                               from);
    }
    if (s->instance && !instance_ok(s->instance))
        return c3_fail(COSMOS3_EUSAGE,
                       "--instance '%.64s': use 1 to %d of a-z, 0-9 and '-' (the name goes into "
                       "every job id, video_NAME_..., for a load balancer to route by)",
                       s->instance, SERVE_MAX_INSTANCE);
    if (s->result_cache < 0 || s->result_cache > 100000)
        return c3_fail(COSMOS3_EUSAGE, "--result-cache %d must be in 0..100000 (0: off)",
                       s->result_cache);
    cosmos3_settings st;
    APP_TRY(session_check(s, NULL, false, NULL, &st));
    int64_t max_pixels = (int64_t)st.width * st.height;
    int rc = COSMOS3_OK;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *ai;
    char portstr[8];
    snprintf(portstr, sizeof portstr, "%d", s->port);
    int g = getaddrinfo(s->host, portstr, &hints, &ai);
    if (g)
        return c3_fail(COSMOS3_EUSAGE,
                       "--host %s: %s; give an address such as 127.0.0.1 or 0.0.0.0", s->host,
                       gai_strerror(g));
    struct sockaddr_storage ss = {0};
    memcpy(&ss, ai->ai_addr, C3_MIN((size_t)ai->ai_addrlen, sizeof ss));
    freeaddrinfo(ai);
    if (!is_loopback(&ss) && !s->api_key)
        return c3_fail(COSMOS3_EUSAGE,
                       "--host %s is reachable from other hosts: give clients a key with "
                       "--api-key KEY or COSMOS3_API_KEY (they send 'Authorization: Bearer KEY')",
                       s->host);

    /* the job store: a restart keeps the finished videos (checked before
       the listener and the load: a store that cannot be used stops here) */
    char store_dir[4096];
    store_default_dir(s->store_dir, store_dir, sizeof store_dir);
    c3_store *db = NULL;
    APP_TRY(store_open(&db, store_dir, s->keep_videos, SERVE_VIDEO_BYTES));

    server *sv = xcalloc(1, sizeof *sv);
    sv->db = db;
    rc = replicas_plan(sv, s); /* the GPU groups, before any weight loads */
    if (rc) {
        replicas_free(sv);
        store_close(db);
        free(sv);
        return rc;
    }
    pthread_mutex_init(&sv->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&sv->cv, &ca);
    pthread_condattr_destroy(&ca);
    settings_copy(&sv->base, s);
    sv->queue_cap = s->queue;
    sv->keep_videos = s->keep_videos;
    sv->rcache = result_cache_new(s->result_cache);
    sv->max_pixels = max_pixels;
    sv->api_key = sv->base.api_key;
    sv->max_cost = s->max_cost;
    sv->per_client = s->max_per_client > 0 ? s->max_per_client
                                           : C3_MAX(s->queue + 16, SERVE_PER_CLIENT_MIN);
    snprintf(sv->trusted_proxy, sizeof sv->trusted_proxy, "%s", proxy);
    sem_init(&sv->decoders, 0, SERVE_DECODERS);
    sv->header_deadline_s = SERVE_HEADER_DEADLINE_S;
    sv->body_deadline_s = SERVE_BODY_DEADLINE_S;
    /* tests only: shorter deadlines */
    const char *dl = getenv("COSMOS3_TEST_SERVE_DEADLINE");
    if (dl && atof(dl) > 0) {
        sv->header_deadline_s = atof(dl);
        sv->body_deadline_s = 2 * atof(dl);
    }
    /* signals are taken by sigtimedwait in this thread; every thread started
     * below inherits the blocked mask */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_pipe;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGPIPE, &ign, &old_pipe);
    struct MHD_Daemon *d = NULL;
    rc = restore_videos(sv);
    if (rc) goto out;
    for (int i = 0; i < sv->nreps; i++) {
        replica *rp = &sv->reps[i];
        if (pthread_create(&rp->pump, NULL, pump_main, rp) != 0) {
            rc = c3_fail(COSMOS3_EFAIL, "serve: cannot start the event thread");
            goto out;
        }
        rp->have_pump = true;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG |
                     (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    /* the sockets themselves: a hard bound per address (twice the requests
       it may have in flight; none behind a proxy, whose address every
       client shares) and in all, above the counts that get a busy answer */
    unsigned per_ip = sv->trusted_proxy[0] ? 0u : 2u * (unsigned)sv->per_client;
    d = MHD_start_daemon(flags, (uint16_t)s->port, NULL, NULL, on_request, sv, MHD_OPTION_SOCK_ADDR,
                         (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)(SERVE_MAX_CONNECTIONS + SERVE_CONN_SPARE),
                         MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)SERVE_IDLE_TIMEOUT_S, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
                         sv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, sv,
                         MHD_OPTION_UNESCAPE_CALLBACK, unescape_url, NULL,
                         MHD_OPTION_EXTERNAL_LOGGER, mhd_log, sv, MHD_OPTION_END);
    if (!d) {
        rc = c3_fail(
            COSMOS3_EFAIL,
            "serve: cannot listen on %s port %d (%s); is the port in use? pick another with --port",
            s->host, s->port, sv->mhd_log[0] ? sv->mhd_log : strerror(errno));
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int port = di && di->port ? di->port : s->port;
    pthread_mutex_lock(&sv->mu);
    if (s->instance)
        snprintf(sv->instance, sizeof sv->instance, "%s", s->instance);
    else
        instance_default(port, sv->instance, sizeof sv->instance);
    pthread_mutex_unlock(&sv->mu);
    char dir[4096];
    bool v6 = strchr(s->host, ':') != NULL;
    fprintf(stderr,
            "cosmos3 serve: listening on http://%s%s%s:%d as instance %s (loading %s; /health "
            "answers 503 until ready)\n",
            v6 ? "[" : "", s->host, v6 ? "]" : "", port, sv->instance,
            pipeline_model_dir(s, dir, sizeof dir));
    if (sv->api_key)
        fprintf(stderr, "cosmos3 serve: requests need 'Authorization: Bearer KEY' (GET /health "
                        "does not)\n");
    for (int i = 0; i < sv->nreps; i++) {
        replica *rp = &sv->reps[i];
        rp->have_worker = pthread_create(&rp->worker, NULL, worker_main, rp) == 0;
        rp->have_finisher =
            rp->have_worker && pthread_create(&rp->finisher, NULL, finisher_main, rp) == 0;
        if (!rp->have_finisher) {
            rc = c3_fail(COSMOS3_EFAIL, "serve: cannot start the worker threads");
            pthread_mutex_lock(&sv->mu);
            sv->stopping = true;
            pthread_cond_broadcast(&sv->cv);
            pthread_mutex_unlock(&sv->mu);
            goto out;
        }
    }
    int sig = 0;
    bool announced = false;
    double t_load = c3_now();
    for (;;) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        int got = sigtimedwait(&sigs, NULL, &ts);
        cut_slow_clients(sv);
        if (got > 0) {
            sig = got;
            break;
        }
        pthread_mutex_lock(&sv->mu);
        bool failed = sv->load_done && sv->load_rc, ready = sv->ready, loading = !sv->load_done;
        pthread_mutex_unlock(&sv->mu);
        if (failed) break;
        if (loading && s->init_timeout > 0 && c3_now() - t_load > s->init_timeout) {
            /* the worker is inside the load and cannot be stopped there: the
               listener closes and the process exits (main), the load with it */
            MHD_stop_daemon(d);
            return c3_fail(COSMOS3_EMODEL,
                           "the model did not load within --init-timeout %g s (%s); give it "
                           "longer, or 0 for no bound",
                           s->init_timeout, dir);
        }
        if (ready && !announced) {
            const cosmos3_layout *p = session_layout(sv->e);
            char reps[64] = "";
            if (sv->nreps > 1) snprintf(reps, sizeof reps, " x %d replicas", sv->nreps);
            fprintf(stderr,
                    "cosmos3 serve: ready: %s on %s (tp %d x cfg-parallel %d x ulysses %d)%s, "
                    "loaded in %.1f s\n",
                    sv->model_id, sv->device, p->tp, p->cfg_parallel, p->ulysses, reps, sv->load_s);
            announced = true;
        }
    }
    if (sig)
        fprintf(stderr,
                "cosmos3 serve: %s: finishing the request in flight (signal again to cancel it)\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT");
    drain(sv, &sigs);
out:
    for (int i = 0; i < sv->nreps; i++)
        if (sv->reps[i].have_worker) pthread_join(sv->reps[i].worker, NULL);
    pthread_mutex_lock(&sv->mu);
    for (int i = 0; i < sv->nreps; i++)
        sv->reps[i].fin_stop = true;
    pthread_cond_broadcast(&sv->cv);
    pthread_mutex_unlock(&sv->mu);
    for (int i = 0; i < sv->nreps; i++)
        if (sv->reps[i].have_finisher) pthread_join(sv->reps[i].finisher, NULL);
    if (d) {
        /* let the last answers go out, then close every connection */
        double t0 = c3_now();
        pthread_mutex_lock(&sv->mu);
        while (sv->conns > 0 && c3_now() - t0 < SERVE_DRAIN_S)
            cv_wait(sv, SERVE_POLL_S);
        pthread_mutex_unlock(&sv->mu);
        MHD_stop_daemon(d);
    }
    pthread_mutex_lock(&sv->mu);
    sv->pump_stop = true;
    pthread_mutex_unlock(&sv->mu);
    for (int i = 0; i < sv->nreps; i++)
        if (sv->reps[i].have_pump) pthread_join(sv->reps[i].pump, NULL);
    if (rc == COSMOS3_OK && sv->load_done && sv->load_rc)
        rc = c3_fail(sv->load_rc, "%s", sv->load_err);
    if (rc == COSMOS3_OK) fprintf(stderr, "cosmos3 serve: stopped\n");
    replicas_free(sv);
    while (sv->store) { /* the videos kept */
        job *j = sv->store;
        sv->store = j->snext;
        job_unref_locked(j);
    }
    store_close(sv->db);
    result_cache_free(sv->rcache);
    settings_free(&sv->base);
    pthread_cond_destroy(&sv->cv);
    pthread_mutex_destroy(&sv->mu);
    sem_destroy(&sv->decoders);
    free(sv);
    /* signals that came during the shutdown are consumed, not re-delivered */
    struct timespec zero = {0, 0};
    while (sigtimedwait(&sigs, NULL, &zero) > 0) {
    }
    sigaction(SIGPIPE, &old_pipe, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

#endif
