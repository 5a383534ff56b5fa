/* serve_metrics.c - the server's metrics: the pump thread turns the
 * engine's events into the monitor's state (steps, memory per rank), the SSE
 * progress events and the re-cancels; /metrics renders it all as Prometheus
 * text. */
#include "config.h"

#if COSMOS3_HAVE_MHD

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_internal.h"

const char *const stage_names[STAGES] = {"tokenize", "und", "denoise", "vae", "write", "total"};
const char *const ep_names[EPS] = {"/v1/images/generations", "/v1/models", "/health",
                                   "/metrics", "/v1/videos", "other"};

/* A Prometheus label value: backslash, quote and newline escaped. */
static void sb_label(c3_sbuf *b, const char *v) {
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            sb_printf(b, "\\%c", *v);
        else if (*v == '\n')
            sb_add(b, "\\n", 2);
        else
            sb_add(b, v, 1);
    }
}

/* ---------------------------------------------------------------- pump */

const char *const hstage_names[HSTAGES] = {"queue", "tokenize", "und",  "denoise",
                                           "vae",   "encode",   "total"};
const double hist_bounds[SERVE_HIST_BUCKETS] = {0.01, 0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                                5,    10,   30,  60,   120, 300, INFINITY};

void hist_add(histogram *h, double v) {
    int k = 0;
    while (k < SERVE_HIST_BUCKETS - 1 && v > hist_bounds[k])
        k++;
    h->n[k]++;
    h->count++;
    h->sum += v;
}

/* The item of replica r whose events carry ticket (mutex held), or NULL. */
static item *item_of(replica *r, uint64_t ticket) {
    if (!ticket) return NULL;
    for (int i = 0; i < r->nbatch; i++)
        if (r->batch[i]->ticket == ticket) return r->batch[i];
    if (r->fcur && r->fcur->ticket == ticket) return r->fcur;
    for (item *it = r->fhead; it; it = it->next)
        if (it->ticket == ticket) return it;
    return NULL;
}

void *pump_main(void *arg) {
    replica *r = arg;
    server *sv = r->sv;
    for (;;) {
        c3_event x;
        if (!events_pop(r->ev, &x, 0.2)) {
            pthread_mutex_lock(&sv->mu);
            bool stop = sv->pump_stop;
            /* a cancel can land before the engine's call resets its flag: repeat it */
            if (sv->cancel_all && r->busy && r->e) session_cancel(r->e);
            replica_check_cancel_locked(r);
            pthread_mutex_unlock(&sv->mu);
            if (stop) break;
            continue;
        }
        pthread_mutex_lock(&sv->mu);
        item *it = item_of(r, x.tag);
        job *j = it ? it->j : NULL;
        monitor_event(&r->mon, &x);
        const cosmos3_event *v = &x.ev;
        /* the request's one terminal event */
        bool terminal = x.kind == EV_ERROR || ev_is(&x, COSMOS3_EV_DONE) ||
                        ev_is(&x, COSMOS3_EV_CANCELLED) || ev_is(&x, COSMOS3_EV_FAILED);
        if (terminal) {
            if (it) it->terminal = true;
            pthread_cond_broadcast(&sv->cv);
        } else if (ev_is(&x, COSMOS3_EV_WARNING)) {
            /* the engine's warnings (the demo's limits, ...): the log, and the answer */
            fprintf(stderr, "cosmos3 serve: warning: %s\n", x.text);
            if (j) {
                bool seen = false;
                size_t k;
                json_t *w;
                json_array_foreach(j->notes, k, w) seen |= !strcmp(json_string_value(w), x.text);
                if (!seen) {
                    if (!j->notes) j->notes = json_array();
                    json_array_append_new(j->notes, json_string(x.text));
                }
            }
        } else if (ev_is(&x, COSMOS3_EV_STEP)) {
            double unc = v->uncond_s; /* the monitor's: the branch's with --cfg-parallel 2 */
            r->step = v->step;
            r->steps = v->steps;
            if (j && j->video) {
                j->step = v->step;
                j->steps = v->steps;
                j->steps_cached += v->cached;
            }
            if (j && j->stream && !j->gone) {
                sse_event(j, "progress",
                          json_pack("{s:s,s:i,s:i,s:i,s:f,s:f,s:f,s:I,s:b}", "type", "progress",
                                    "index", it->index, "step", v->step, "total", v->steps,
                                    "seconds", v->seconds, "cond_s", v->cond_s, "uncond_s", unc,
                                    "timestep", (json_int_t)v->timestep, "cached", v->cached));
                pthread_cond_broadcast(&sv->cv);
            }
        }
        if (sv->cancel_all && r->busy && r->e) session_cancel(r->e);
        replica_check_cancel_locked(r);
        pthread_mutex_unlock(&sv->mu);
    }
    return NULL;
}

/* ------------------------------------------------------------- replicas */

/* One replica's GPU memory now (cosmos3_device_memory on CUDA; the monitor's
 * view of each rank otherwise). */
static json_t *replica_memory(const replica *r, bool cuda) {
    json_t *a = json_array();
    if (!r->e) return a;
    const cosmos3_layout *p = session_layout(r->e);
    for (int k = 0; k < p->world && k < COSMOS3_MAX_RANKS; k++) {
        int64_t fr = -1, tot = -1;
        if (cuda && cosmos3_device_memory(p->ranks[k].device, &fr, &tot) != COSMOS3_OK)
            fr = tot = -1;
        json_t *o = json_pack("{s:i,s:s}", "rank", k, "device", cuda ? "cuda" : "cpu");
        if (cuda) json_object_set_new(o, "gpu", json_integer(p->ranks[k].device));
        if (r->mon.dev[k].valid)
            json_object_set_new(o, "engine_bytes",
                                json_integer(r->mon.dev[k].bytes[0] + r->mon.dev[k].bytes[1] +
                                             r->mon.dev[k].bytes[2]));
        json_object_set_new(o, "free_bytes", fr >= 0 ? json_integer(fr) : json_null());
        json_object_set_new(o, "total_bytes", tot >= 0 ? json_integer(tot) : json_null());
        json_array_append_new(a, o);
    }
    return a;
}

json_t *replicas_json_locked(server *sv) {
    json_t *a = json_array();
    bool cuda = !strcmp(sv->device, "cuda");
    for (int i = 0; i < sv->nreps; i++) {
        const replica *r = &sv->reps[i];
        json_t *jobs = json_array();
        for (int k = 0; k < r->nbatch && r->busy; k++) { /* its batch: each request */
            const item *it = r->batch[k];
            const job *j = it->j;
            json_t *o = json_pack("{s:s,s:i,s:b}", "kind", j->video ? "video" : "image", "index",
                                  it->index, "cancelled", j->cancel != 0);
            if (j->video) json_object_set_new(o, "id", json_string(j->vid));
            if (j->seed_given)
                json_object_set_new(o, "seed",
                                    json_integer((json_int_t)(j->seed + (uint64_t)it->index)));
            else if (j->video && strcmp(j->s.seed, "random"))
                json_object_set_new(o, "seed",
                                    json_integer((json_int_t)strtoll(j->s.seed, NULL, 10)));
            json_array_append_new(jobs, o);
        }
        json_t *o = json_pack("{s:i,s:s,s:s,s:i,s:o,s:i,s:i,s:i,s:I,s:I}", "replica", i, "state",
                              !r->loaded ? "loading"
                              : r->busy  ? "busy"
                                         : "idle",
                              "gpus", r->gpus[0] ? r->gpus : "", "threads", r->threads, "in_flight",
                              jobs, "step", r->busy ? r->step : 0, "steps", r->busy ? r->steps : 0,
                              "finishing", (r->fcur ? 1 : 0) + (int)r->nfin, "batches",
                              (json_int_t)r->batches, "requests", (json_int_t)r->requests);
        json_object_set_new(o, "memory", replica_memory(r, cuda));
        json_array_append_new(a, o);
    }
    return a;
}

void metrics_text(server *sv, c3_sbuf *b) {
    pthread_mutex_lock(&sv->mu);
    sb_printf(b,
              "# HELP cosmos3_ready 1 when the model is loaded and requests are taken.\n"
              "# TYPE cosmos3_ready gauge\ncosmos3_ready %d\n",
              sv->ready && !sv->draining);
    sb_printf(b, "# HELP cosmos3_instance_info This server's --instance name (in its job ids).\n"
                 "# TYPE cosmos3_instance_info gauge\ncosmos3_instance_info{name=\"");
    sb_label(b, sv->instance);
    sb_printf(b, "\"} 1\n");
    if (sv->ready) {
        sb_printf(b, "# HELP cosmos3_model_info The loaded model and its layout.\n# TYPE "
                     "cosmos3_model_info gauge\n"
                     "cosmos3_model_info{model=\"");
        sb_label(b, sv->model_id);
        const cosmos3_layout *p = session_layout(sv->e);
        sb_printf(b, "\",device=\"%s\",tp=\"%d\",cfg_parallel=\"%d\",ulysses=\"%d\"} 1\n",
                  sv->device, p->tp, p->cfg_parallel, p->ulysses);
        sb_printf(b,
                  "# HELP cosmos3_load_seconds Seconds the model took to load.\n"
                  "# TYPE cosmos3_load_seconds gauge\ncosmos3_load_seconds %.6f\n",
                  sv->load_s);
    }
    sb_printf(b, "# HELP cosmos3_requests_total HTTP requests answered, by endpoint and status.\n"
                 "# TYPE cosmos3_requests_total counter\n");
    uint64_t errors = 0;
    for (int e = 0; e < EPS; e++)
        for (int code = 0; code < HTTP_CODES; code++)
            if (sv->requests[e][code]) {
                sb_printf(b, "cosmos3_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n",
                          ep_names[e], code, (unsigned long long)sv->requests[e][code]);
                if (code >= 400) errors += sv->requests[e][code];
            }
    sb_printf(b,
              "# HELP cosmos3_errors_total HTTP requests answered with a status of 400 or more.\n"
              "# TYPE cosmos3_errors_total counter\ncosmos3_errors_total %llu\n",
              (unsigned long long)errors);
    sb_printf(
        b,
        "# HELP cosmos3_cancelled_total Generations cancelled because their client disconnected.\n"
        "# TYPE cosmos3_cancelled_total counter\ncosmos3_cancelled_total %llu\n",
        (unsigned long long)sv->cancelled);
    sb_printf(b,
              "# HELP cosmos3_connections_cut_total Connections closed for sending a request too "
              "slowly.\n# TYPE cosmos3_connections_cut_total counter\n"
              "cosmos3_connections_cut_total %llu\n",
              (unsigned long long)sv->cut);
    sb_printf(b,
              "# HELP cosmos3_images_total Images generated.\n# TYPE cosmos3_images_total counter\n"
              "cosmos3_images_total %llu\n",
              (unsigned long long)sv->images);
    sb_printf(b,
              "# HELP cosmos3_queue_length Requests waiting behind the one running.\n"
              "# TYPE cosmos3_queue_length gauge\ncosmos3_queue_length %d\n"
              "# HELP cosmos3_queue_capacity Requests that may wait (--queue).\n"
              "# TYPE cosmos3_queue_capacity gauge\ncosmos3_queue_capacity %d\n"
              "# HELP cosmos3_busy 1 while a request is running.\n# TYPE cosmos3_busy "
              "gauge\ncosmos3_busy %d\n",
              sv->queued, sv->queue_cap, server_busy_locked(sv));
    sb_printf(
        b,
        "# HELP cosmos3_request_seconds Seconds from a request's start to its answer (summary).\n"
        "# TYPE cosmos3_request_seconds summary\ncosmos3_request_seconds_sum %.6f\n"
        "cosmos3_request_seconds_count %llu\n"
        "# HELP cosmos3_queue_seconds_total Seconds requests waited in the queue.\n"
        "# TYPE cosmos3_queue_seconds_total counter\ncosmos3_queue_seconds_total %.6f\n",
        sv->job_s, (unsigned long long)sv->jobs, sv->queue_s);
    sb_printf(b, "# HELP cosmos3_stage_seconds_total Seconds spent per pipeline stage.\n"
                 "# TYPE cosmos3_stage_seconds_total counter\n");
    for (int k = 0; k < STAGES; k++)
        sb_printf(b, "cosmos3_stage_seconds_total{stage=\"%s\"} %.6f\n", stage_names[k],
                  sv->stage_s[k]);
    c3_monitor tot = {0};
    for (int i = 0; i < sv->nreps; i++) {
        const c3_monitor *m = &sv->reps[i].mon;
        tot.step_s += m->step_s;
        tot.steps_total += m->steps_total;
        tot.cond_s += m->cond_s;
        tot.uncond_s += m->uncond_s;
        if (m->last_step_s > 0) tot.last_step_s = m->last_step_s;
    }
    sb_printf(b,
              "# HELP cosmos3_step_seconds Seconds per denoising step (summary).\n"
              "# TYPE cosmos3_step_seconds summary\ncosmos3_step_seconds_sum "
              "%.6f\ncosmos3_step_seconds_count %llu\n"
              "# HELP cosmos3_branch_seconds_total Seconds per CFG branch over all steps.\n"
              "# TYPE cosmos3_branch_seconds_total counter\n"
              "cosmos3_branch_seconds_total{branch=\"cond\"} %.6f\n"
              "cosmos3_branch_seconds_total{branch=\"uncond\"} %.6f\n"
              "# HELP cosmos3_last_step_seconds Seconds of the last denoising step.\n"
              "# TYPE cosmos3_last_step_seconds gauge\ncosmos3_last_step_seconds %.6f\n",
              tot.step_s, (unsigned long long)tot.steps_total, tot.cond_s, tot.uncond_s,
              tot.last_step_s);
    /* per stage of each job, and the batches' sizes */
    sb_printf(b, "# HELP cosmos3_job_stage_seconds Seconds of each image or video per stage "
                 "(queue wait, tokenize, und, denoise, vae, encode; total: queued to answered).\n"
                 "# TYPE cosmos3_job_stage_seconds histogram\n");
    for (int k = 0; k < HSTAGES; k++) {
        uint64_t cum = 0;
        for (int q = 0; q < SERVE_HIST_BUCKETS; q++) {
            cum += sv->hist[k].n[q];
            if (isinf(hist_bounds[q]))
                sb_printf(b, "cosmos3_job_stage_seconds_bucket{stage=\"%s\",le=\"+Inf\"} %llu\n",
                          hstage_names[k], (unsigned long long)cum);
            else
                sb_printf(b, "cosmos3_job_stage_seconds_bucket{stage=\"%s\",le=\"%g\"} %llu\n",
                          hstage_names[k], hist_bounds[q], (unsigned long long)cum);
        }
        sb_printf(b,
                  "cosmos3_job_stage_seconds_sum{stage=\"%s\"} %.6f\n"
                  "cosmos3_job_stage_seconds_count{stage=\"%s\"} %llu\n",
                  hstage_names[k], sv->hist[k].sum, hstage_names[k],
                  (unsigned long long)sv->hist[k].count);
    }
    sb_printf(b, "# HELP cosmos3_batch_size Requests in each batch the engines ran.\n"
                 "# TYPE cosmos3_batch_size histogram\n");
    {
        static const int sizes[] = {1, 2, 4, 8, 16, 32, 64};
        for (size_t q = 0; q < C3_ARRAY_LEN(sizes); q++) {
            uint64_t cum = 0;
            for (int i = 0; i < sv->nreps; i++)
                for (int s = 1; s <= sizes[q] && s <= SERVE_MAX_BATCH; s++)
                    cum += sv->reps[i].batch_sizes[s];
            sb_printf(b, "cosmos3_batch_size_bucket{le=\"%d\"} %llu\n", sizes[q],
                      (unsigned long long)cum);
        }
        sb_printf(b,
                  "cosmos3_batch_size_bucket{le=\"+Inf\"} %llu\ncosmos3_batch_size_sum %.0f\n"
                  "cosmos3_batch_size_count %llu\n",
                  (unsigned long long)sv->hist_batch.count, sv->hist_batch.sum,
                  (unsigned long long)sv->hist_batch.count);
    }
    /* per replica */
    sb_printf(b,
              "# HELP cosmos3_replicas Engines serving (--replicas).\n# TYPE cosmos3_replicas "
              "gauge\ncosmos3_replicas %d\n",
              sv->nreps);
    sb_printf(b, "# HELP cosmos3_replica_busy 1 while the replica's engine runs a batch.\n"
                 "# TYPE cosmos3_replica_busy gauge\n");
    for (int i = 0; i < sv->nreps; i++)
        sb_printf(b, "cosmos3_replica_busy{replica=\"%d\"} %d\n", i, sv->reps[i].busy);
    sb_printf(b, "# HELP cosmos3_replica_in_flight Requests in the batch the replica runs now.\n"
                 "# TYPE cosmos3_replica_in_flight gauge\n");
    for (int i = 0; i < sv->nreps; i++)
        sb_printf(b, "cosmos3_replica_in_flight{replica=\"%d\"} %d\n", i,
                  sv->reps[i].busy ? sv->reps[i].nbatch : 0);
    sb_printf(b, "# HELP cosmos3_replica_step The step of the batch the replica runs (0: idle).\n"
                 "# TYPE cosmos3_replica_step gauge\n");
    for (int i = 0; i < sv->nreps; i++)
        sb_printf(b, "cosmos3_replica_step{replica=\"%d\"} %d\n", i,
                  sv->reps[i].busy ? sv->reps[i].step : 0);
    sb_printf(b, "# HELP cosmos3_replica_finishing Batches waiting for or in the replica's "
                 "decode and encode.\n# TYPE cosmos3_replica_finishing gauge\n");
    for (int i = 0; i < sv->nreps; i++)
        sb_printf(b, "cosmos3_replica_finishing{replica=\"%d\"} %d\n", i, sv->reps[i].nfin);
    sb_printf(b, "# HELP cosmos3_replica_batches_total Batches the replica ran.\n"
                 "# TYPE cosmos3_replica_batches_total counter\n");
    for (int i = 0; i < sv->nreps; i++)
        sb_printf(b, "cosmos3_replica_batches_total{replica=\"%d\"} %llu\n", i,
                  (unsigned long long)sv->reps[i].batches);
    sb_printf(b, "# HELP cosmos3_replica_requests_total Requests the replica ran (in batches).\n"
                 "# TYPE cosmos3_replica_requests_total counter\n");
    for (int i = 0; i < sv->nreps; i++)
        sb_printf(b, "cosmos3_replica_requests_total{replica=\"%d\"} %llu\n", i,
                  (unsigned long long)sv->reps[i].requests);
    sb_printf(b, "# HELP cosmos3_replica_max_batch_size The largest batch the replica ran.\n"
                 "# TYPE cosmos3_replica_max_batch_size gauge\n");
    for (int i = 0; i < sv->nreps; i++) {
        int mx = 0;
        for (int s = 1; s <= SERVE_MAX_BATCH; s++)
            if (sv->reps[i].batch_sizes[s]) mx = s;
        sb_printf(b, "cosmos3_replica_max_batch_size{replica=\"%d\"} %d\n", i, mx);
    }
    sb_printf(b, "# HELP cosmos3_replica_busy_seconds_total Seconds the replica's engine ran "
                 "batches.\n# TYPE cosmos3_replica_busy_seconds_total counter\n");
    for (int i = 0; i < sv->nreps; i++)
        sb_printf(b, "cosmos3_replica_busy_seconds_total{replica=\"%d\"} %.6f\n", i,
                  sv->reps[i].busy_s + (sv->reps[i].busy ? c3_now() - sv->reps[i].busy_since : 0));
    static const char *const kinds[3] = {"weights", "kv", "activations"};
    bool cuda = !strcmp(sv->device, "cuda");
    sb_printf(b,
              "# HELP cosmos3_memory_bytes Memory the engine holds per rank and device, by kind.\n"
              "# TYPE cosmos3_memory_bytes gauge\n");
    for (int i = 0; i < sv->nreps; i++) {
        const c3_monitor *m = &sv->reps[i].mon;
        for (int r = 0; r < COSMOS3_MAX_RANKS; r++) {
            char dev[24];
            if (m->dev[r].device >= 0 && cuda)
                snprintf(dev, sizeof dev, "cuda:%d", m->dev[r].device);
            else
                snprintf(dev, sizeof dev, "%s", sv->device[0] ? sv->device : "cpu");
            for (int k = 0; k < 3 && m->dev[r].valid; k++)
                sb_printf(b,
                          "cosmos3_memory_bytes{replica=\"%d\",rank=\"%d\",device=\"%s\","
                          "kind=\"%s\"} %lld\n",
                          i, r, dev, kinds[k], (long long)m->dev[r].bytes[k]);
        }
    }
    /* the GPUs' memory now (cosmos3_device_memory), per replica */
    sb_printf(b, "# HELP cosmos3_device_free_bytes Free memory of each replica's GPUs now.\n"
                 "# TYPE cosmos3_device_free_bytes gauge\n");
    c3_sbuf tb = {0};
    for (int i = 0; i < sv->nreps && cuda; i++) {
        json_t *mem = replica_memory(&sv->reps[i], true);
        size_t k;
        json_t *o;
        json_array_foreach(mem, k, o) {
            json_t *fr = json_object_get(o, "free_bytes");
            if (!json_is_integer(fr)) continue;
            sb_printf(
                b,
                "cosmos3_device_free_bytes{replica=\"%d\",rank=\"%d\",device=\"cuda:%lld\"} %lld\n",
                i, (int)k, (long long)json_integer_value(json_object_get(o, "gpu")),
                (long long)json_integer_value(fr));
            sb_printf(&tb,
                      "cosmos3_device_total_bytes{replica=\"%d\",rank=\"%d\",device=\"cuda:%lld\"} "
                      "%lld\n",
                      i, (int)k, (long long)json_integer_value(json_object_get(o, "gpu")),
                      (long long)json_integer_value(json_object_get(o, "total_bytes")));
        }
        json_decref(mem);
    }
    sb_printf(b, "# HELP cosmos3_device_total_bytes Total memory of each replica's GPUs.\n"
                 "# TYPE cosmos3_device_total_bytes gauge\n");
    if (tb.len) sb_add(b, tb.p, tb.len);
    free(tb.p);
    pthread_mutex_unlock(&sv->mu);
}

#endif
