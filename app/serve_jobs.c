/* serve_jobs.c - the server's jobs and its replicas. Each replica is one
 * engine (its GPU group, or its share of the CPU's cores) with two threads:
 * the worker loads the engine once, then takes batches from the FIFO (the
 * head job's images and those of later jobs with the same batch key, up to
 * --max-batch) and runs them with cosmos3_generate_batch, the decode left
 * for later; the finishing thread decodes each result (cosmos3_decode) and
 * encodes it in memory (a response never touches the disk) while the
 * worker's engine runs the next batch. A job's references, its SSE bytes,
 * its cancel (one request's flag: the rest of its batch runs on). */
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
    free(j->ferr);
    json_decref(j->data);
    json_decref(j->acc);
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

/* Take j out of the FIFO (mutex held): its images not yet handed to a
 * replica never run. Drops the queue's reference. */
static void queue_remove_locked(server *sv, job *j) {
    if (!j->in_queue) return;
    job **pp = &sv->head;
    while (*pp && *pp != j)
        pp = &(*pp)->next;
    if (*pp) *pp = j->next;
    sv->tail = NULL;
    for (job *q = sv->head; q; q = q->next)
        sv->tail = q;
    j->next = NULL;
    j->in_queue = false;
    if (j->waiting) sv->queued--;
    j->waiting = false;
    job_unref_locked(j); /* the queue's reference */
}

static void job_complete_locked(server *sv, job *j);

/* A job whose images are all back and none waits: its answer (mutex held). */
static void job_settle_locked(server *sv, job *j) {
    if (j->state == JOB_DONE || j->in_queue || j->finished < j->dispatched) return;
    job_complete_locked(sv, j);
}

/* Cancel j for a client that left (server mutex held). A waiting job leaves
 * the FIFO at once; a running one has its requests' cancel flag set: they
 * stop in the engine while the rest of their batch runs on. */
void job_cancel_locked(server *sv, job *j) {
    if (j->state == JOB_DONE || j->gone) return;
    j->gone = true;
    j->cancel = 1;
    sv->cancelled++;
    if (j->dispatched == 0) {
        j->state = JOB_DONE;
        j->status = HTTP_CLIENT_GONE;
    }
    queue_remove_locked(sv, j);
    job_settle_locked(sv, j);
    for (int i = 0; i < sv->nreps; i++)
        replica_check_cancel_locked(&sv->reps[i]);
    pthread_cond_broadcast(&sv->cv);
}

/* SIGTERM: every job still waiting is answered 503 (mutex held); the
 * images already on a replica finish. */
void queue_refuse_all_locked(server *sv) {
    while (sv->head) {
        job *j = sv->head;
        if (j->dispatched == 0) {
            j->state = JOB_DONE;
            j->status = 503;
            j->body = error_body(
                503, NULL, "cancelled: the server is shutting down; send the request again later");
            if (j->stream)
                sse_event(j, "error",
                          error_object(503, NULL, "cancelled: the server is shutting down"));
        } else if (!j->fail_rc) {
            j->fail_rc = COSMOS3_ECANCEL;
        }
        j->refs++; /* kept across the removal to settle it */
        queue_remove_locked(sv, j);
        job_settle_locked(sv, j);
        job_unref_locked(j);
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

/* A store write that failed after the job's answer is settled: said in the log. */
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

/* ------------------------------------------------------------ answers */

/* The job's timings (per stage, summed over its images) in its metrics. */
static void timings_add(json_t *acc, const char *name, double v) {
    json_t *t = json_object_get(acc, "timings");
    json_object_set_new(t, name, json_real(json_real_value(json_object_get(t, name)) + v));
}

/* An image job's answer, every image back (mutex held). */
static void image_complete_locked(server *sv, job *j) {
    int status = 200;
    char *body = NULL;
    const char *err = j->ferr ? j->ferr : "failed";
    json_t *acc = j->acc;
    size_t nimg = 0, k;
    json_t *v;
    json_array_foreach(j->data, k, v) nimg += !json_is_null(v);
    json_object_set_new(acc, "images", json_integer((json_int_t)nimg));
    if (j->dispatched > 0) {
        const replica *r = &sv->reps[j->replica];
        const cosmos3_layout *p = session_layout(r->e);
        json_object_set_new(acc, "layout",
                            json_pack("{s:i,s:i,s:i,s:s}", "tp", p->tp, "cfg_parallel",
                                      p->cfg_parallel, "ulysses", p->ulysses, "device",
                                      sv->device));
    }
    if (j->gone) {
        status = HTTP_CLIENT_GONE;
    } else if (j->fail_rc == COSMOS3_ECANCEL) {
        status = 503;
        body = error_body(status, NULL,
                          "cancelled: the server is shutting down; send the request again later");
    } else if (j->fail_rc) {
        status = j->fail_rc == COSMOS3_EUSAGE || j->fail_rc == COSMOS3_EINPUT ? 400 : 500;
        body = error_body(status, NULL, err);
    } else {
        json_t *o = json_pack("{s:I,s:O,s:s,s:O}", "created", (json_int_t)time(NULL), "data",
                              j->data, "output_format", media_format_name(j->ofmt), "metrics", acc);
        json_object_set_new(o, "size", json_sprintf("%dx%d", j->s.width, j->s.height));
        json_object_set(o, "timings", json_object_get(acc, "timings"));
        json_int_t tok = json_integer_value(json_object_get(acc, "input_tokens"));
        json_object_set_new(o, "usage",
                            json_pack("{s:I,s:i,s:I,s:{s:I,s:i}}", "input_tokens", tok,
                                      "output_tokens", 0, "total_tokens", tok,
                                      "input_tokens_details", "text_tokens", tok, "image_tokens",
                                      0));
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
                                   j->fail_rc == COSMOS3_ECANCEL
                                       ? "cancelled: the server is shutting down"
                                       : err));
        if (status == 200) sb_add(&j->sse, "data: [DONE]\n\n", 14);
    }
    j->status = status;
    j->body = body;
}

/* A video job's answer (mutex held): its MP4 is in j->mp4 when it worked. */
static void video_complete_locked(server *sv, job *j) {
    if (j->mp4_len && !j->fail_rc) {
        j->status = 200;
        sv->videos++;
        return;
    }
    int rc = j->fail_rc ? j->fail_rc : COSMOS3_ECANCEL;
    free(j->mp4);
    j->mp4 = NULL;
    j->mp4_len = 0;
    const char *err = rc == COSMOS3_ECANCEL ? "cancelled" : j->ferr ? j->ferr : "failed";
    j->status = rc == COSMOS3_ECANCEL && j->gone               ? HTTP_CLIENT_GONE
                : rc == COSMOS3_ECANCEL                        ? 503
                : rc == COSMOS3_EUSAGE || rc == COSMOS3_EINPUT ? 400
                                                               : 500;
    free(j->verr);
    j->verr = xstrdup(err);
    free(j->body);
    j->body = error_body(j->status, NULL, err);
    /* a cancel is a DELETE (the row is gone) or the server stopping (the job
       stays unfinished there: "the server restarted" at the next start) */
    if (!j->sync && rc != COSMOS3_ECANCEL && store_fail(sv->db, j->vid, (int64_t)time(NULL), err))
        store_warn();
}

static void job_complete_locked(server *sv, job *j) {
    if (j->video)
        video_complete_locked(sv, j);
    else
        image_complete_locked(sv, j);
    j->state = JOB_DONE;
    if (j->dispatched > 0) {
        sv->jobs++;
        sv->job_s += c3_now() - j->t_started;
        sv->queue_s += j->t_started - j->t_queued;
    }
    if (j->video) {
        j->completed_at = time(NULL);
        j->refs++; /* the trim may drop the store's reference */
        store_trim_locked(sv);
        job_unref_locked(j);
    }
    pthread_cond_broadcast(&sv->cv);
}

/* ------------------------------------------------------------- batches */

void job_batch_key(server *sv, job *j) {
    j->in_queue = true;
    j->waiting = true;
    j->key = 0;
    j->bmax = 1;
    cosmos3_request rq;
    if (sv->e && session_check(&j->s, sv->e, false, &rq, NULL) == COSMOS3_OK) {
        char err[256];
        cosmos3_engine *lib = session_library(sv->e);
        if (cosmos3_batch_key(lib, &rq, &j->key, err, sizeof err) != COSMOS3_OK) j->key = 0;
        j->bmax = C3_MAX(1, cosmos3_batch_max(lib, &rq));
    }
    /* a conditioning picture or clip is another task (the key's request had none) */
    if (j->cond.rgb)
        j->key = (j->key ^ (j->cond.video ? 0x5bd1e995u : 0x27d4eb2du)) * 0x100000001b3ull;
    if (!j->key) j->key = (uint64_t)(uintptr_t)j; /* unknown: a batch of its own */
    j->data = json_array();
    for (int i = 0; i < j->n || (j->video && i < 1); i++)
        json_array_append_new(j->data, json_null());
    j->acc = json_pack("{s:i,s:i,s:f,s:{},s:{}}", "images", 0, "steps", 0, "queue_seconds", 0.0,
                       "seconds", "timings");
    json_object_set_new(j->acc, "mem_peak_bytes", json_integer(0));
}

/* The images of the head job and of later jobs with its batch key, up to
 * the batch bound, as new items (mutex held). */
static int take_batch_locked(server *sv, replica *r, item **items) {
    job *h = sv->head;
    int cap = sv->max_batch > 0 ? C3_MIN(sv->max_batch, h->bmax) : h->bmax;
    cap = C3_MAX(1, C3_MIN(cap, SERVE_MAX_BATCH));
    double now = c3_now();
    int n = 0;
    job *q = sv->head;
    while (q && n < cap) {
        job *next = q->next;
        if (q->key == h->key && !q->gone) {
            int imgs = q->video ? 1 : q->n;
            while (q->dispatched < imgs && n < cap) {
                item *it = xcalloc(1, sizeof *it);
                it->rep = r;
                it->j = q;
                q->refs++;
                it->index = q->dispatched++;
                it->ticket = ++sv->tickets;
                it->queue_s = now - q->t_queued;
                items[n++] = it;
            }
            if (q->waiting) { /* running now: no longer counted as waiting */
                q->waiting = false;
                sv->queued--;
            }
            if (q->state == JOB_QUEUED) {
                q->state = JOB_RUNNING;
                if (q->video && !q->sync && store_running(sv->db, q->vid)) store_warn();
                q->t_started = now;
                json_object_set_new(q->acc, "queue_seconds", json_real(now - q->t_queued));
                timings_add(q->acc, "queue", now - q->t_queued);
            }
            q->replica = r->index;
            if (q->dispatched == imgs) queue_remove_locked(sv, q);
        }
        q = next;
    }
    return n;
}

/* The engine's events of one request: tagged with its ticket for the pump. */
static void on_item_event(const cosmos3_event *ev, void *user) {
    const item *it = user;
    c3_event x = {.kind = EV_ENGINE, .ev = *ev, .tag = it->ticket};
    if (ev->text) snprintf(x.text, sizeof x.text, "%s", ev->text);
    if (ev->stage) snprintf(x.stage, sizeof x.stage, "%s", ev->stage);
    events_push(it->rep->ev, &x);
}

/* Prepare each item's request (a --result-cache hit needs none), run the
 * rest as one batch with the decode deferred. */
static void run_batch(replica *r, item **items, int n) {
    server *sv = r->sv;
    const cosmos3_request *rqs[SERVE_MAX_BATCH];
    cosmos3_result *outs[SERVE_MAX_BATCH];
    int rcs[SERVE_MAX_BATCH];
    item *run[SERVE_MAX_BATCH];
    int m = 0;
    for (int i = 0; i < n; i++) {
        item *it = items[i];
        job *j = it->j;
        settings_copy(&it->s, &j->s);
        int rc = COSMOS3_OK;
        if (!j->video && j->seed_given) {
            char seedtxt[32];
            snprintf(seedtxt, sizeof seedtxt, "%llu",
                     (unsigned long long)(j->seed + (uint64_t)it->index));
            rc = settings_set(&it->s, "seed", seedtxt, CMD_SERVE);
        }
        if (rc == COSMOS3_OK && j->cancel) rc = c3_fail(COSMOS3_ECANCEL, "cancelled");
        if (rc == COSMOS3_OK && !j->video && sv->rcache) {
            it->cache_key = result_cache_key(&it->s, media_format_name(j->ofmt), j->seed_given);
            pthread_mutex_lock(&sv->mu);
            it->cached =
                result_cache_get(sv->rcache, it->cache_key, &it->cached_len, &it->cached_seed);
            pthread_mutex_unlock(&sv->mu);
            if (it->cached) continue;
        }
        if (rc == COSMOS3_OK)
            rc = session_prepare(r->e, &it->s, j->cond.rgb ? &j->cond : NULL, &it->q);
        if (rc) {
            it->rc = rc;
            snprintf(it->err, sizeof it->err, "%s", c3_errmsg());
            continue;
        }
        cosmos3_request *rq = session_req_request(it->q);
        rq->cancel = &j->cancel;
        rq->defer_decode = true;
        rq->on_event = on_item_event;
        rq->user = it;
        rqs[m] = rq;
        run[m++] = it;
    }
    if (m == 0) return;
    char *errs = xcalloc((size_t)m, sizeof run[0]->err);
    double t0 = c3_now();
    int rc =
        cosmos3_generate_batch(session_library(r->e), m, rqs, outs, rcs, errs, sizeof run[0]->err);
    double dt = c3_now() - t0;
    for (int k = 0; k < m; k++) {
        item *it = run[k];
        it->ran = true;
        it->batch = m;
        it->gen_s = dt;
        it->out = rc == COSMOS3_OK ? outs[k] : NULL;
        it->rc = rc == COSMOS3_OK ? rcs[k] : rc;
        if (it->rc) snprintf(it->err, sizeof it->err, "%s", errs + (size_t)k * sizeof it->err);
    }
    free(errs);
    pthread_mutex_lock(&sv->mu);
    r->batches++;
    r->requests += (uint64_t)m;
    r->batch_sizes[m]++;
    hist_add(&sv->hist_batch, m);
    for (int k = 0; k < m; k++)
        run[k]->j->batch_size = C3_MAX(run[k]->j->batch_size, m);
    pthread_mutex_unlock(&sv->mu);
}

/* -------------------------------------------------------- finishing */

static void item_free(item *it) {
    if (it->out) cosmos3_result_free(it->out);
    session_req_free(it->q);
    settings_free(&it->s);
    free(it->cache_key);
    free(it->cached);
    free(it);
}

/* One item back from the engine: its decode and encode (no lock), then its
 * place in the job's answer (mutex held). */
static void item_finish(replica *r, item *it) {
    server *sv = r->sv;
    job *j = it->j;
    if (it->ran && j->stream) { /* the stream has every step of it before its answer */
        pthread_mutex_lock(&sv->mu);
        double t0 = c3_now();
        while (!it->terminal && !j->gone && c3_now() - t0 < SERVE_TERMINAL_WAIT_S)
            cv_wait(sv, SERVE_POLL_S);
        pthread_mutex_unlock(&sv->mu);
    }
    int rc = it->rc;
    char err[1024];
    snprintf(err, sizeof err, "%s", it->err);
    session_result res = {0};
    uint8_t *bytes = NULL;
    size_t len = 0;
    uint64_t seed = 0;
    double t_enc = 0;
    bool cached = it->cached != NULL;
    if (cached) {
        bytes = it->cached;
        it->cached = NULL;
        len = it->cached_len;
        seed = it->cached_seed;
    } else if (rc == COSMOS3_OK) {
        cosmos3_result *out = it->out;
        it->out = NULL;
        rc = cosmos3_decode(session_library(r->e), out, err, sizeof err);
        if (rc == COSMOS3_OK) {
            rc = session_req_finish(r->e, it->q, out, &res); /* out is res's from here */
            if (rc) snprintf(err, sizeof err, "%s", c3_errmsg());
        } else {
            cosmos3_result_free(out);
        }
        if (rc == COSMOS3_OK) {
            double t = c3_now();
            c3_media_meta meta = {res.png_parameters, res.meta_json};
            c3_media_opts o = {.crf = j->s.crf, .quality = -1};
            rc = output_encode(j->video ? MEDIA_MP4 : j->ofmt, res.out, &meta, j->video ? &o : NULL,
                               &bytes, &len);
            t_enc = c3_now() - t;
            res.t_write += t_enc;
            res.t_total += t_enc;
            if (rc) snprintf(err, sizeof err, "%s", c3_errmsg());
            seed = res.out->seed;
        }
        if (rc == COSMOS3_OK && it->cache_key) {
            pthread_mutex_lock(&sv->mu);
            result_cache_put(sv->rcache, it->cache_key, bytes, len, seed);
            pthread_mutex_unlock(&sv->mu);
        }
    }
    /* an async video: whole on disk in the job store before it says completed */
    bool stored = false;
    if (rc == COSMOS3_OK && j->video && !j->sync) {
        pthread_mutex_lock(&sv->mu);
        json_t *vo = video_object(sv, j);
        pthread_mutex_unlock(&sv->mu);
        json_object_set_new(vo, "status", json_string("completed"));
        json_object_set_new(vo, "progress", json_integer(100));
        json_object_set_new(vo, "bytes", json_integer((json_int_t)len));
        json_object_set_new(vo, "seed", json_integer((json_int_t)seed));
        rc = store_complete(sv->db, j->vid, bytes, len, "mp4", (int64_t)time(NULL), vo);
        json_decref(vo);
        if (rc) snprintf(err, sizeof err, "%s", c3_errmsg());
        stored = rc == COSMOS3_OK;
    }
    json_t *rj = rc == COSMOS3_OK && !cached ? result_json(&res) : NULL;
    char *b64 = rc == COSMOS3_OK && !j->video ? base64(bytes, len) : NULL;
    pthread_mutex_lock(&sv->mu);
    j->finished++;
    if (rc == COSMOS3_OK && !j->gone) {
        json_t *acc = j->acc;
        if (rj) {
            const cosmos3_timings *t = &res.out->timings;
            json_t *rs = json_object_get(rj, "seconds"), *secs = json_object_get(acc, "seconds");
            for (int k = 0; k < STAGES; k++) {
                double x = json_real_value(json_object_get(rs, stage_names[k]));
                json_t *v = json_object_get(secs, stage_names[k]);
                json_object_set_new(secs, stage_names[k], json_real(json_real_value(v) + x));
                sv->stage_s[k] += x;
            }
            static const char *const last[] = {"steps", "guidance", "shift", "schedule"};
            for (size_t k = 0; k < C3_ARRAY_LEN(last); k++)
                json_object_set(acc, last[k], json_object_get(rj, last[k]));
            static const char *const means[] = {"step_mean", "cond_mean", "uncond_mean"};
            for (size_t k = 0; k < C3_ARRAY_LEN(means); k++)
                json_object_set(acc, means[k], json_object_get(rs, means[k]));
            json_t *peak = json_object_get(rj, "mem_peak_bytes");
            if (json_integer_value(peak) >
                json_integer_value(json_object_get(acc, "mem_peak_bytes")))
                json_object_set(acc, "mem_peak_bytes", peak);
            json_object_set_new(
                acc, "input_tokens",
                json_integer(json_integer_value(json_object_get(acc, "input_tokens")) +
                             res.out->L_cond));
            double st[HSTAGES] = {it->queue_s, t->tokenize,           t->und, t->denoise, t->vae,
                                  t_enc,       c3_now() - j->t_queued};
            for (int k = 0; k < HSTAGES; k++) {
                if (k != HS_QUEUE) timings_add(acc, hstage_names[k], st[k]);
                hist_add(&sv->hist[k], st[k]);
            }
            json_object_set_new(json_object_get(acc, "timings"), "batch_size",
                                json_integer(j->batch_size));
            json_object_set_new(json_object_get(acc, "timings"), "replica",
                                json_integer(j->replica));
        } else {
            json_object_set_new(
                acc, "result_cache_hits",
                json_integer(json_integer_value(json_object_get(acc, "result_cache_hits")) + 1));
        }
        if (j->video) {
            j->mp4 = stored ? NULL : bytes; /* stored: read back from the job store */
            j->mp4_len = len;
            j->vframes_seed = seed;
            if (!stored) bytes = NULL;
        } else {
            json_t *img = json_pack("{s:s,s:I}", "b64_json", b64, "seed", (json_int_t)seed);
            if (cached) json_object_set_new(img, "cached", json_true());
            json_array_set_new(j->data, (size_t)it->index, img);
            sv->images++;
            if (j->stream) { /* as the OpenAI images API names it (ImageGenCompletedEvent) */
                json_t *ev = json_pack("{s:s,s:i,s:s,s:I,s:I,s:s,s:s,s:s,s:I,s:O}", "type",
                                       "image_generation.completed", "index", it->index, "b64_json",
                                       b64, "created", (json_int_t)time(NULL), "created_at",
                                       (json_int_t)time(NULL), "output_format",
                                       media_format_name(j->ofmt), "quality", "auto", "background",
                                       "opaque", "seed", (json_int_t)seed, "metrics", acc);
                if (cached) json_object_set_new(ev, "cached", json_true());
                json_object_set_new(ev, "size", json_sprintf("%dx%d", j->s.width, j->s.height));
                int tok = res.out ? res.out->L_cond : 0;
                json_object_set_new(ev, "usage",
                                    json_pack("{s:i,s:i,s:i,s:{s:i,s:i}}", "input_tokens", tok,
                                              "output_tokens", 0, "total_tokens", tok,
                                              "input_tokens_details", "text_tokens", tok,
                                              "image_tokens", 0));
                sse_event(j, "image_generation.completed", ev);
            }
        }
    } else if (rc != COSMOS3_OK && !j->fail_rc) {
        /* the job fails with its first image's error; its other images stop */
        j->fail_rc = rc;
        j->ferr = xstrdup(err);
        j->cancel = 1;
        queue_remove_locked(sv, j);
    }
    job_settle_locked(sv, j);
    pthread_cond_broadcast(&sv->cv);
    job_unref_locked(j); /* the item's reference */
    pthread_mutex_unlock(&sv->mu);
    json_decref(rj);
    free(b64);
    free(bytes);
    result_free(&res);
    item_free(it);
}

void *finisher_main(void *arg) {
    replica *r = arg;
    server *sv = r->sv;
    pthread_mutex_lock(&sv->mu);
    for (;;) {
        while (!r->fhead && !r->fin_stop)
            cv_wait(sv, 1.0);
        if (!r->fhead) break;
        item *it = r->fhead;
        r->fhead = it->next;
        if (!r->fhead) r->ftail = NULL;
        it->next = NULL;
        r->fcur = it;
        bool end = it->batch_end;
        pthread_mutex_unlock(&sv->mu);
        item_finish(r, it);
        pthread_mutex_lock(&sv->mu);
        r->fcur = NULL;
        if (end) r->nfin--;
        pthread_cond_broadcast(&sv->cv);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

/* ------------------------------------------------------------- workers */

bool server_busy_locked(server *sv) {
    for (int i = 0; i < sv->nreps; i++) {
        const replica *r = &sv->reps[i];
        if (r->busy || r->fhead || r->fcur) return true;
    }
    return false;
}

void replica_check_cancel_locked(replica *r) {
    if (!r->busy || !r->e || r->nbatch == 0) return;
    for (int i = 0; i < r->nbatch; i++)
        if (!r->batch[i]->j->cancel) return;
    session_cancel(r->e);
}

void server_cancel_locked(server *sv) {
    for (int i = 0; i < sv->nreps; i++)
        if (sv->reps[i].busy && sv->reps[i].e) session_cancel(sv->reps[i].e);
}

/* Whether every replica has loaded (or one failed): the server's state then
 * (mutex held). */
static void load_settle_locked(server *sv) {
    int done = 0, ok = 0;
    for (int i = 0; i < sv->nreps; i++) {
        const replica *r = &sv->reps[i];
        done += r->loaded;
        ok += r->loaded && r->load_rc == COSMOS3_OK;
        if (r->loaded && r->load_rc && !sv->load_rc) {
            sv->load_rc = r->load_rc;
            if (sv->nreps > 1 && r->gpus[0])
                snprintf(sv->load_err, sizeof sv->load_err, "replica %d (GPUs %.64s): %.900s", i,
                         r->gpus, r->load_err);
            else if (sv->nreps > 1)
                snprintf(sv->load_err, sizeof sv->load_err, "replica %d: %.900s", i, r->load_err);
            else
                snprintf(sv->load_err, sizeof sv->load_err, "%s", r->load_err);
        }
    }
    if (sv->load_rc) {
        sv->load_done = true; /* one failed: the server stops (the others' loads end with it) */
    } else if (done == sv->nreps) {
        replica *r0 = &sv->reps[0];
        sv->e = r0->e;
        double ls = 0;
        for (int i = 0; i < sv->nreps; i++)
            ls = C3_MAX(ls, sv->reps[i].load_s);
        sv->load_s = ls;
        /* the Hugging Face id it was launched with (vLLM-Omni's clients send it as model) */
        snprintf(sv->model_id, sizeof sv->model_id, "%s",
                 sv->base.model_name[0] ? sv->base.model_name : session_model(r0->e)->id);
        const cosmos3_layout *p = session_layout(r0->e);
        snprintf(sv->device, sizeof sv->device, "%s", !strcmp(p->device, "cuda") ? "cuda" : "cpu");
        sv->cfg_parallel = p->cfg_parallel;
        sv->created = time(NULL);
        sv->load_done = true;
        sv->ready = ok == sv->nreps;
    }
    pthread_cond_broadcast(&sv->cv);
}

void *worker_main(void *arg) {
    replica *r = arg;
    server *sv = r->sv;
    c3_session *e = NULL;
    double t0 = c3_now();
    /* tests only: a slow load, to see /health answer 503 */
    const char *delay = getenv("COSMOS3_TEST_SERVE_LOAD_DELAY");
    if (delay && atof(delay) > 0) usleep((useconds_t)(atof(delay) * 1e6));
    int rc = session_open(&e, &r->s, r->ev);
    pthread_mutex_lock(&sv->mu);
    r->loaded = true;
    r->load_rc = rc;
    r->e = e;
    r->load_s = c3_now() - t0;
    if (rc) {
        snprintf(r->load_err, sizeof r->load_err, "%s", c3_errmsg());
    } else {
        monitor_engine(&r->mon, session_layout(e));
    }
    load_settle_locked(sv);
    while (!sv->ready && !sv->load_rc && !sv->stopping)
        cv_wait(sv, 1.0);
    item *items[SERVE_MAX_BATCH];
    for (;;) {
        while (sv->ready && !sv->stopping && (!sv->head || r->nfin >= SERVE_FIN_MAX))
            cv_wait(sv, 1.0);
        if (!sv->ready || !sv->head) break;
        int n = take_batch_locked(sv, r, items);
        r->busy = true;
        r->busy_since = c3_now();
        r->step = r->steps = 0;
        r->nbatch = n;
        for (int i = 0; i < n; i++)
            r->batch[i] = items[i];
        pthread_cond_broadcast(&sv->cv);
        pthread_mutex_unlock(&sv->mu);
        run_batch(r, items, n);
        pthread_mutex_lock(&sv->mu);
        r->busy = false;
        r->busy_s += c3_now() - r->busy_since;
        r->nbatch = 0;
        items[n - 1]->batch_end = true;
        for (int i = 0; i < n; i++) { /* to the finishing thread, in order */
            if (r->ftail)
                r->ftail->next = items[i];
            else
                r->fhead = items[i];
            r->ftail = items[i];
        }
        r->nfin++;
        pthread_cond_broadcast(&sv->cv);
    }
    pthread_mutex_unlock(&sv->mu);
    return NULL;
}

/* ------------------------------------------------------------- layout */

int replicas_plan(server *sv, const c3_settings *s) {
    int n = s->replicas;
    if (n < 1 || n > SERVE_MAX_REPLICAS)
        return c3_fail(COSMOS3_EUSAGE, "--replicas %d must be in 1..%d", n, SERVE_MAX_REPLICAS);
    if (s->max_batch < 0 || s->max_batch > SERVE_MAX_BATCH)
        return c3_fail(COSMOS3_EUSAGE,
                       "--max-batch %d must be in 0..%d (0: as many as the engine's memory plan "
                       "allows; 1: one request at a time)",
                       s->max_batch, SERVE_MAX_BATCH);
    int tp = C3_MAX(1, s->tp), cfg = C3_MAX(1, s->cfg_parallel), sp = C3_MAX(1, s->ulysses);
    int per = tp * cfg * sp;
    bool cuda = s->device && !strcmp(s->device, "cuda");
    if (n > 1 && (!s->device || !strcmp(s->device, "auto"))) cuda = cosmos3_device_count() > 0;
    int ids[SERVE_MAX_REPLICAS * COSMOS3_MAX_RANKS], ng = 0;
    if (n > 1 && cuda) { /* the GPUs given, else every visible one, in groups of per */
        if (s->gpus) {
            const char *p = s->gpus;
            while (*p) {
                char *end;
                errno = 0;
                long v = strtol(p, &end, 10);
                if (end == p || v < 0 || v > 4096 || errno || (*end && *end != ',') ||
                    ng == (int)C3_ARRAY_LEN(ids))
                    return c3_fail(COSMOS3_EUSAGE,
                                   "--gpus '%s' must be GPU ordinals such as 0,1,2,3", s->gpus);
                ids[ng++] = (int)v;
                p = *end ? end + 1 : end;
            }
        } else {
            ng = C3_MIN(cosmos3_device_count(), (int)C3_ARRAY_LEN(ids));
            for (int i = 0; i < ng; i++)
                ids[i] = i;
        }
        if (per * n > ng) {
            char lay[96];
            snprintf(lay, sizeof lay, "tp %d x cfg %d%s", tp, cfg, sp > 1 ? " x ulysses" : "");
            if (sp > 1) snprintf(lay + strlen(lay), sizeof lay - strlen(lay), " %d", sp);
            char fix[96];
            if (ng == 0)
                snprintf(fix, sizeof fix, "use --device cpu");
            else if (ng / per >= 1)
                snprintf(fix, sizeof fix, "use --replicas %d", ng / per);
            else
                snprintf(fix, sizeof fix,
                         "use fewer ranks per replica (--tp, --cfg-parallel, "
                         "--ulysses)");
            return c3_fail(COSMOS3_ERESOURCE, "replicas %d x (%s) = %d GPUs, found %d: %s", n, lay,
                           per * n, ng, fix);
        }
    }
    long cores = s->threads > 0 ? s->threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    sv->reps = xcalloc((size_t)n, sizeof *sv->reps);
    sv->nreps = n;
    sv->max_batch = s->max_batch;
    for (int i = 0; i < n; i++) {
        replica *r = &sv->reps[i];
        r->sv = sv;
        r->index = i;
        settings_copy(&r->s, s);
        monitor_init(&r->mon);
        r->ev = events_new(4096);
        if (n > 1 && cuda) {
            size_t w = 0;
            for (int k = 0; k < per; k++)
                w += (size_t)snprintf(r->gpus + w, sizeof r->gpus - w, "%s%d", k ? "," : "",
                                      ids[i * per + k]);
            free(r->s.gpus);
            r->s.gpus = xstrdup(r->gpus);
        } else if (cuda && s->gpus) {
            snprintf(r->gpus, sizeof r->gpus, "%s", s->gpus);
        }
        /* the CPU: replicas share the cores (each engine's threads a part) */
        r->threads = n > 1 && !cuda ? (int)C3_MAX(1, cores / n) : s->threads;
        r->s.threads = r->threads;
    }
    if (n > 1 && cuda) {
        fprintf(stderr, "cosmos3 serve: %d replicas of tp %d x cfg-parallel %d x ulysses %d:", n,
                tp, cfg, sp);
        for (int i = 0; i < n; i++)
            fprintf(stderr, "%s replica %d on GPU%s %s", i ? ";" : "", i, per > 1 ? "s" : "",
                    sv->reps[i].gpus);
        fprintf(stderr, "\n");
    } else if (n > 1) {
        fprintf(stderr,
                "cosmos3 serve: %d replicas of tp %d x cfg-parallel %d x ulysses %d on the CPU "
                "share its %ld cores: %d thread%s each\n",
                n, tp, cfg, sp, cores, sv->reps[0].threads, sv->reps[0].threads == 1 ? "" : "s");
    }
    return COSMOS3_OK;
}

void replicas_free(server *sv) {
    for (int i = 0; i < sv->nreps; i++) {
        replica *r = &sv->reps[i];
        session_close(r->e);
        events_free(r->ev);
        settings_free(&r->s);
    }
    free(sv->reps);
    sv->reps = NULL;
    sv->nreps = 0;
}

#endif
