/* serve_jobs.c - the server's jobs: the worker thread loads the engine once
 * and runs the FIFO's jobs one at a time, each image or video generated and
 * encoded in memory (a response never touches the disk); a job's references,
 * its SSE bytes, its cancel (see serve.c for the threads). */
#include "config.h"

#if COSMOS3_HAVE_MHD

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output.h"
#include "serve_internal.h"
#include "result_cache.h"

static char *base64(const uint8_t *d, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = xmalloc((n + 2) / 3 * 4 + 1), *w = o;
    size_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
        *w++ = tab[v >> 18];
        *w++ = tab[(v >> 12) & 63];
        *w++ = tab[(v >> 6) & 63];
        *w++ = tab[v & 63];
    }
    if (i < n) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0);
        *w++ = tab[v >> 18];
        *w++ = tab[(v >> 12) & 63];
        *w++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        *w++ = '=';
    }
    *w = 0;
    return o;
}

void job_unref_locked(job *j) {
    if (--j->refs > 0) return;
    settings_free(&j->s);
    free(j->body);
    free(j->sse.p);
    free(j->mp4);
    free(j->verr);
    free(j->cond_rgb);
    json_decref(j->notes);
    json_decref(j->stored);
    free(j);
}

void job_unref(server *sv, job *j) {
    pthread_mutex_lock(&sv->mu);
    job_unref_locked(j);
    pthread_mutex_unlock(&sv->mu);
}

void cv_wait(server *sv, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long)(seconds * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(&sv->cv, &sv->mu, &ts);
}

void sse_event(job *j, const char *event, json_t *data /* stolen */) {
    char *txt = json_dumps(data, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(data);
    if (j->sse_sent == j->sse.len) j->sse.len = j->sse_sent = 0; /* all sent: reuse the buffer */
    sb_printf(&j->sse, "event: %s\ndata: %s\n\n", event, txt ? txt : "{}");
    free(txt);
}

json_t *error_object(int status, const char *param, const char *message) {
    const char *type = status == 429   ? "rate_limit_error"
                       : status >= 500 ? "server_error"
                       : status == 404 ? "not_found_error"
                                       : "invalid_request_error";
    return json_pack("{s:{s:s,s:s,s:s?,s:n}}", "error", "message", message, "type", type, "param",
                     param, "code");
}

char *error_body(int status, const char *param, const char *message) {
    json_t *o = error_object(status, param, message);
    char *txt = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    return txt;
}

/* Cancel j for a client that left (server mutex held). A waiting job leaves
 * the FIFO at once; the running one is cancelled in the engine. */
void job_cancel_locked(server *sv, job *j) {
    if (j->state == JOB_DONE || j->gone) return;
    j->gone = true;
    sv->cancelled++;
    if (j->state == JOB_QUEUED) {
        job **pp = &sv->head;
        while (*pp && *pp != j)
            pp = &(*pp)->next;
        if (*pp) {
            *pp = j->next;
            if (sv->tail == j) {
                sv->tail = NULL;
                for (job *q = sv->head; q; q = q->next)
                    sv->tail = q;
            }
            sv->queued--;
        }
        j->state = JOB_DONE;
        j->status = HTTP_CLIENT_GONE;
        job_unref_locked(j); /* the queue's reference */
    } else if (sv->e) {
        session_cancel(sv->e);
    }
    pthread_cond_broadcast(&sv->cv);
}

/* True when the peer closed its end (or the socket broke). */
bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char c;
        ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

/* max_sequence_length shorter than the prompt's tokens: said in the answer
 * (cosmos3 reads the whole prompt; server mutex held). */
static void note_max_seq(job *j, const session_result *r) {
    if (!r->out || !j->max_seq || r->out->L_cond <= j->max_seq || j->max_seq_noted) return;
    j->max_seq_noted = true;
    char msg[256];
    snprintf(msg, sizeof msg,
             "max_sequence_length: the prompt is %d tokens, more than %d; cosmos3 read all of it",
             r->out->L_cond, j->max_seq);
    if (!j->notes) j->notes = json_array();
    json_array_append_new(j->notes, json_string(msg));
}

/* -------------------------------------------------------------- worker */

/* After a generation that ran: wait until the pump has seen the engine's
 * last event for it (the stream has every step before the answer); then,
 * when rc is COSMOS3_OK, encode its frames in memory as f (the time is
 * r->t_write, counted into r->t_total). A failure's message goes into err. */
static int encode_result(server *sv, bool ran, int rc, session_result *r, c3_media_format f,
                         const c3_media_opts *o, uint8_t **out, size_t *len, char *err,
                         size_t errlen) {
    pthread_mutex_lock(&sv->mu);
    if (ran) {
        sv->terminal_expected++;
        while (sv->terminal_seen < sv->terminal_expected)
            cv_wait(sv, SERVE_POLL_S);
    }
    pthread_mutex_unlock(&sv->mu);
    if (rc != COSMOS3_OK) return rc;
    double tw = c3_now();
    c3_media_meta m = {r->png_parameters, r->meta_json};
    rc = output_encode(f, r->out, &m, o, out, len);
    r->t_write = c3_now() - tw;
    r->t_total += r->t_write;
    if (rc) snprintf(err, errlen, "%s", c3_errmsg());
    return rc;
}

/* Run one image of job j; append its data item to `data`. The PNG is
 * encoded in memory: a response never touches the disk. */
static int run_image(server *sv, job *j, int i, json_t *data, json_t *acc) {
    c3_settings s;
    settings_copy(&s, &j->s);
    char seedtxt[32];
    int rc = COSMOS3_OK;
    if (j->seed_given) {
        snprintf(seedtxt, sizeof seedtxt, "%llu", (unsigned long long)(j->seed + (uint64_t)i));
        rc = settings_set(&s, "seed", seedtxt, CMD_SERVE);
    }
    /* --result-cache: the same settings with a given seed, answered from memory (every
     * option's value: the server's base fills what a request leaves out) */
    char *key = rc == COSMOS3_OK && sv->rcache
                    ? result_cache_key(&s, media_format_name(j->ofmt), j->seed_given)
                    : NULL;
    if (key) {
        size_t hlen = 0;
        uint64_t seed = 0;
        pthread_mutex_lock(&sv->mu);
        uint8_t *hit = result_cache_get(sv->rcache, key, &hlen, &seed);
        pthread_mutex_unlock(&sv->mu);
        if (hit) {
            char *b64 = base64(hit, hlen);
            json_t *item = json_pack("{s:s,s:I,s:b}", "b64_json", b64, "seed", (json_int_t)seed,
                                     "cached", true);
            free(b64);
            free(hit);
            free(key);
            json_object_set_new(
                acc, "result_cache_hits",
                json_integer(json_integer_value(json_object_get(acc, "result_cache_hits")) + 1));
            pthread_mutex_lock(&sv->mu);
            sv->images++;
            if (j->stream) {
                json_t *ev = json_pack("{s:s,s:i,s:s,s:I,s:I,s:s,s:I,s:b}", "type",
                                       "image_generation.completed", "index", i, "b64_json",
                                       json_string_value(json_object_get(item, "b64_json")),
                                       "created", (json_int_t)time(NULL), "created_at",
                                       (json_int_t)time(NULL), "output_format",
                                       media_format_name(j->ofmt), "seed", (json_int_t)seed,
                                       "cached", true);
                sse_event(j, "image_generation.completed", ev);
                pthread_cond_broadcast(&sv->cv);
            }
            pthread_mutex_unlock(&sv->mu);
            json_array_append_new(data, item);
            settings_free(&s);
            return COSMOS3_OK;
        }
    }
    session_result r = {0};
    bool ran = false;
    if (rc == COSMOS3_OK) {
        rc = session_generate_frames(sv->e, &s, &r);
        ran = true;
    }
    char err[1024];
    snprintf(err, sizeof err, "%s", c3_errmsg());
    uint8_t *png = NULL;
    size_t len = 0;
    rc = encode_result(sv, ran, rc, &r, j->ofmt, NULL, &png, &len, err, sizeof err);
    if (rc == COSMOS3_OK && key) {
        pthread_mutex_lock(&sv->mu);
        result_cache_put(sv->rcache, key, png, len, r.out->seed);
        pthread_mutex_unlock(&sv->mu);
    }
    free(key);
    if (rc == COSMOS3_OK) {
        char *b64 = base64(png, len);
        json_t *item = json_pack("{s:s,s:I}", "b64_json", b64, "seed", (json_int_t)r.out->seed);
        free(b64);
        /* the metrics: this image's report (result_json) added to the job's */
        json_t *rj = result_json(&r), *rs = json_object_get(rj, "seconds");
        json_t *secs = json_object_get(acc, "seconds");
        double st[STAGES];
        for (int k = 0; k < STAGES; k++) {
            st[k] = json_real_value(json_object_get(rs, stage_names[k]));
            json_t *v = json_object_get(secs, stage_names[k]);
            json_object_set_new(secs, stage_names[k], json_real(json_real_value(v) + st[k]));
        }
        static const char *const last[] = {"steps", "guidance", "shift", "schedule"};
        for (size_t k = 0; k < C3_ARRAY_LEN(last); k++)
            json_object_set(acc, last[k], json_object_get(rj, last[k]));
        static const char *const means[] = {"step_mean", "cond_mean", "uncond_mean"};
        for (size_t k = 0; k < C3_ARRAY_LEN(means); k++)
            json_object_set(acc, means[k], json_object_get(rs, means[k]));
        json_t *peak = json_object_get(rj, "mem_peak_bytes");
        if (json_integer_value(peak) > json_integer_value(json_object_get(acc, "mem_peak_bytes")))
            json_object_set(acc, "mem_peak_bytes", peak);
        json_decref(rj);
        pthread_mutex_lock(&sv->mu);
        note_max_seq(j, &r);
        sv->images++;
        for (int k = 0; k < STAGES; k++)
            sv->stage_s[k] += st[k];
        if (j->stream) { /* as the OpenAI images API names it (ImageGenCompletedEvent) */
            json_t *ev = json_pack(
                "{s:s,s:i,s:s,s:I,s:I,s:s,s:s,s:s,s:I,s:O}", "type", "image_generation.completed",
                "index", i, "b64_json", json_string_value(json_object_get(item, "b64_json")),
                "created", (json_int_t)time(NULL), "created_at", (json_int_t)time(NULL),
                "output_format", media_format_name(j->ofmt), "quality", "auto", "background",
                "opaque", "seed", (json_int_t)r.out->seed, "metrics", acc);
            json_object_set_new(ev, "size", json_sprintf("%dx%d", r.out->width, r.out->height));
            json_object_set_new(ev, "usage",
                                json_pack("{s:i,s:i,s:i,s:{s:i,s:i}}", "input_tokens",
                                          r.out->L_cond, "output_tokens", 0, "total_tokens",
                                          r.out->L_cond, "input_tokens_details", "text_tokens",
                                          r.out->L_cond, "image_tokens", 0));
            sse_event(j, "image_generation.completed", ev);
            pthread_cond_broadcast(&sv->cv);
        }
        pthread_mutex_unlock(&sv->mu);
        json_array_append_new(data, item);
    } else {
        c3_fail(rc, "%s", err);
    }
    free(png);
    result_free(&r);
    settings_free(&s);
    return rc;
}

static void run_job(server *sv, job *j) {
    double t0 = c3_now();
    json_t *data = json_array();
    json_t *acc = json_pack("{s:i,s:i,s:f,s:{}}", "images", 0, "steps", 0, "queue_seconds",
                            t0 - j->t_queued, "seconds");
    json_object_set_new(acc, "mem_peak_bytes", json_integer(0));
    int rc = COSMOS3_OK;
    for (int i = 0; i < j->n && rc == COSMOS3_OK; i++) {
        pthread_mutex_lock(&sv->mu);
        j->index = i;
        bool stop = j->gone || sv->cancel_all;
        pthread_mutex_unlock(&sv->mu);
        if (stop) {
            rc = c3_fail(COSMOS3_ECANCEL, "cancelled");
            break;
        }
        rc = run_image(sv, j, i, data, acc);
    }
    char err[1024];
    snprintf(err, sizeof err, "%s", c3_errmsg());
    const cosmos3_layout *p = session_layout(sv->e);
    json_object_set_new(acc, "images", json_integer((json_int_t)json_array_size(data)));
    json_object_set_new(acc, "layout",
                        json_pack("{s:i,s:i,s:i,s:s}", "tp", p->tp, "cfg_parallel", p->cfg_parallel,
                                  "ulysses", p->ulysses, "device", sv->device));
    pthread_mutex_lock(&sv->mu);
    int status = 200;
    char *body = NULL;
    if (rc == COSMOS3_ECANCEL && j->gone) {
        status = HTTP_CLIENT_GONE;
    } else if (rc == COSMOS3_ECANCEL) {
        status = 503;
        body = error_body(status, NULL,
                          "cancelled: the server is shutting down; send the request again later");
    } else if (rc) {
        status = rc == COSMOS3_EUSAGE || rc == COSMOS3_EINPUT ? 400 : 500;
        body = error_body(status, NULL, err);
    } else {
        json_t *o = json_pack("{s:I,s:O,s:s,s:O}", "created", (json_int_t)time(NULL), "data", data,
                              "output_format", media_format_name(j->ofmt), "metrics", acc);
        json_object_set_new(o, "size", json_sprintf("%dx%d", j->s.width, j->s.height));
        if (j->notes) json_object_set(o, "warnings", j->notes);
        body = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(o);
    }
    if (j->stream) {
        if (status == 200)
            sse_event(j, "done",
                      json_pack("{s:s,s:i,s:O}", "type", "done", "images", j->n, "metrics", acc));
        else if (status != HTTP_CLIENT_GONE)
            sse_event(j, "error",
                      error_object(status, NULL,
                                   rc == COSMOS3_ECANCEL ? "cancelled: the server is shutting down"
                                                         : err));
        if (status == 200) sb_add(&j->sse, "data: [DONE]\n\n", 14);
    }
    j->status = status;
    j->body = body;
    sv->jobs++;
    sv->job_s += c3_now() - t0;
    sv->queue_s += t0 - j->t_queued;
    pthread_mutex_unlock(&sv->mu);
    json_decref(data);
    json_decref(acc);
}

/* ------------------------------------------------------------- videos */

/* A job store call that failed where no answer can carry it: said on
 * stderr, the job goes on (it is failed at the next start at worst). */
static void store_warn(void) {
    fprintf(stderr, "cosmos3 serve: %s\n", c3_errmsg());
}

/* Drop finished videos, oldest first, beyond keep_videos or SERVE_VIDEO_BYTES
 * (server mutex held). Queued and running ones stay. */
static void store_trim_locked(server *sv) {
    for (;;) {
        int done = 0;
        int64_t bytes = 0;
        for (job *j = sv->store; j; j = j->snext)
            if (j->state == JOB_DONE) {
                done++;
                bytes += (int64_t)j->mp4_len;
            }
        if (done <= sv->keep_videos && bytes <= SERVE_VIDEO_BYTES) return;
        job **pp = &sv->store;
        while (*pp && (*pp)->state != JOB_DONE)
            pp = &(*pp)->snext;
        if (!*pp) return;
        job *old = *pp;
        *pp = old->snext;
        if (store_forget(sv->db, old->vid)) store_warn();
        job_unref_locked(old); /* the store's reference */
    }
}

/* One video job: generate, encode the MP4 in memory, keep it in the job. */
static void run_video(server *sv, job *j) {
    double t0 = c3_now();
    session_result r = {0};
    int rc = session_generate_frames_with(sv->e, &j->s, j->cond.rgb ? &j->cond : NULL, &r);
    char err[1024];
    snprintf(err, sizeof err, "%s", c3_errmsg());
    uint8_t *mp4 = NULL;
    size_t len = 0;
    c3_media_opts o = {.crf = j->s.crf, .quality = -1};
    rc = encode_result(sv, true, rc, &r, MEDIA_MP4, &o, &mp4, &len, err, sizeof err);
    bool keep = !j->sync;           /* an async job: its result goes to the job store */
    if (rc == COSMOS3_OK && keep) { /* whole on disk before the job says completed */
        pthread_mutex_lock(&sv->mu);
        note_max_seq(j, &r);
        json_t *vo = video_object(sv, j);
        pthread_mutex_unlock(&sv->mu);
        json_object_set_new(vo, "seed", json_integer((json_int_t)r.out->seed));
        rc = store_complete(sv->db, j->vid, mp4, len, "mp4", (int64_t)time(NULL), vo);
        json_decref(vo);
        if (rc) snprintf(err, sizeof err, "%s", c3_errmsg());
    }
    pthread_mutex_lock(&sv->mu);
    int status = 200;
    if (rc == COSMOS3_OK) {
        j->mp4 = keep ? NULL : mp4; /* kept: read back from the store */
        if (keep) free(mp4);
        j->mp4_len = len;
        j->vframes_seed = r.out->seed;
        note_max_seq(j, &r);
        sv->videos++;
        json_t *rj = result_json(&r), *rs = json_object_get(rj, "seconds");
        for (int k = 0; k < STAGES; k++)
            sv->stage_s[k] += json_real_value(json_object_get(rs, stage_names[k]));
        json_decref(rj);
    } else {
        free(mp4);
        status = rc == COSMOS3_ECANCEL && j->gone               ? HTTP_CLIENT_GONE
                 : rc == COSMOS3_ECANCEL                        ? 503
                 : rc == COSMOS3_EUSAGE || rc == COSMOS3_EINPUT ? 400
                                                                : 500;
        j->verr = xstrdup(rc == COSMOS3_ECANCEL ? "cancelled" : err);
        j->body = error_body(status, NULL, rc == COSMOS3_ECANCEL ? "cancelled" : err);
        /* a cancel is a DELETE (the row is gone) or the server stopping (the
           job stays unfinished there: "the server restarted" at the next start) */
        if (keep && rc != COSMOS3_ECANCEL && store_fail(sv->db, j->vid, (int64_t)time(NULL), err))
            store_warn();
    }
    j->status = status;
    sv->jobs++;
    sv->job_s += c3_now() - t0;
    sv->queue_s += t0 - j->t_queued;
    pthread_mutex_unlock(&sv->mu);
    result_free(&r);
}

void *worker_main(void *arg) {
    server *sv = arg;
    c3_session *e = NULL;
    double t0 = c3_now();
    /* tests only: a slow load, to see /health answer 503 */
    const char *delay = getenv("COSMOS3_TEST_SERVE_LOAD_DELAY");
    if (delay && atof(delay) > 0) usleep((useconds_t)(atof(delay) * 1e6));
    int rc = session_open(&e, &sv->base, sv->ev);
    pthread_mutex_lock(&sv->mu);
    sv->load_done = true;
    sv->load_rc = rc;
    if (rc) {
        snprintf(sv->load_err, sizeof sv->load_err, "%s", c3_errmsg());
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_unlock(&sv->mu);
        return NULL;
    }
    sv->e = e;
    sv->load_s = c3_now() - t0;
    /* the Hugging Face id it was launched with (vLLM-Omni's clients send it as model) */
    snprintf(sv->model_id, sizeof sv->model_id, "%s",
             sv->base.model_name[0] ? sv->base.model_name : session_model(e)->id);
    const cosmos3_layout *p = session_layout(e);
    snprintf(sv->device, sizeof sv->device, "%s", !strcmp(p->device, "cuda") ? "cuda" : "cpu");
    sv->cfg_parallel = p->cfg_parallel;
    monitor_engine(&sv->mon, p);
    sv->created = time(NULL);
    sv->ready = true;
    pthread_cond_broadcast(&sv->cv);
    for (;;) {
        while (!sv->head && !sv->stopping)
            cv_wait(sv, 1.0);
        if (!sv->head) break;
        job *j = sv->head;
        sv->head = j->next;
        if (!sv->head) sv->tail = NULL;
        sv->queued--;
        j->next = NULL;
        j->state = JOB_RUNNING;
        sv->current = j;
        pthread_mutex_unlock(&sv->mu);
        if (j->video && !j->sync && store_running(sv->db, j->vid)) store_warn();
        if (j->video)
            run_video(sv, j);
        else
            run_job(sv, j);
        pthread_mutex_lock(&sv->mu);
        j->state = JOB_DONE;
        if (j->video) {
            j->completed_at = time(NULL);
            store_trim_locked(sv);
        }
        sv->current = NULL;
        pthread_cond_broadcast(&sv->cv);
        job_unref_locked(j);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

#endif
