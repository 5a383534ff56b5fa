/* serve_metrics.c - the server's metrics: the pump thread turns the
 * engine's events into the monitor's state (steps, memory per rank), the SSE
 * progress events and the re-cancels; /metrics renders it all as Prometheus
 * text. */
#include "config.h"

#if COSMOS3_HAVE_MHD

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

void *pump_main(void *arg) {
    server *sv = arg;
    for (;;) {
        c3_event x;
        if (!events_pop(sv->ev, &x, 0.2)) {
            pthread_mutex_lock(&sv->mu);
            bool stop = sv->pump_stop;
            pthread_mutex_unlock(&sv->mu);
            if (stop) break;
            continue;
        }
        pthread_mutex_lock(&sv->mu);
        job *j = sv->current;
        /* a cancel can land before engine_generate resets its flag: repeat it */
        bool cancel = j && (j->gone || sv->cancel_all);
        monitor_event(&sv->mon, &x);
        const cosmos3_event *v = &x.ev;
        /* the job's one terminal event: the engine's, or a refusal before it ran */
        bool terminal = x.kind == EV_ERROR || ev_is(&x, COSMOS3_EV_DONE) ||
                        ev_is(&x, COSMOS3_EV_CANCELLED) || ev_is(&x, COSMOS3_EV_FAILED);
        if (terminal) {
            sv->terminal_seen++;
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
            if (j && j->video) {
                j->step = v->step;
                j->steps = v->steps;
                j->steps_cached += v->cached;
            }
            if (j && j->stream && !j->gone) {
                sse_event(j, "progress",
                          json_pack("{s:s,s:i,s:i,s:i,s:f,s:f,s:f,s:I,s:b}", "type", "progress",
                                    "index", j->index, "step", v->step, "total", v->steps,
                                    "seconds", v->seconds, "cond_s", v->cond_s, "uncond_s", unc,
                                    "timestep", (json_int_t)v->timestep, "cached", v->cached));
                pthread_cond_broadcast(&sv->cv);
            }
        }
        if (cancel && sv->e) session_cancel(sv->e);
        pthread_mutex_unlock(&sv->mu);
    }
    return NULL;
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
              sv->queued, sv->queue_cap, sv->current != NULL);
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
              sv->mon.step_s, (unsigned long long)sv->mon.steps_total, sv->mon.cond_s,
              sv->mon.uncond_s, sv->mon.last_step_s);
    static const char *const kinds[3] = {"weights", "kv", "activations"};
    char dev[COSMOS3_MAX_RANKS][24];
    for (int r = 0; r < COSMOS3_MAX_RANKS; r++) {
        if (sv->mon.dev[r].device >= 0 && !strcmp(sv->device, "cuda"))
            snprintf(dev[r], sizeof dev[r], "cuda:%d", sv->mon.dev[r].device);
        else
            snprintf(dev[r], sizeof dev[r], "%s", sv->device[0] ? sv->device : "cpu");
    }
    sb_printf(b,
              "# HELP cosmos3_memory_bytes Memory the engine holds per rank and device, by kind.\n"
              "# TYPE cosmos3_memory_bytes gauge\n");
    for (int r = 0; r < COSMOS3_MAX_RANKS; r++)
        for (int k = 0; k < 3 && sv->mon.dev[r].valid; k++)
            sb_printf(b, "cosmos3_memory_bytes{rank=\"%d\",device=\"%s\",kind=\"%s\"} %lld\n", r,
                      dev[r], kinds[k], (long long)sv->mon.dev[r].bytes[k]);
    sb_printf(b, "# HELP cosmos3_device_free_bytes Free memory of each rank's device.\n"
                 "# TYPE cosmos3_device_free_bytes gauge\n");
    for (int r = 0; r < COSMOS3_MAX_RANKS; r++)
        if (sv->mon.dev[r].valid && sv->mon.dev[r].dev_total > 0)
            sb_printf(b, "cosmos3_device_free_bytes{rank=\"%d\",device=\"%s\"} %lld\n", r, dev[r],
                      (long long)sv->mon.dev[r].dev_free);
    sb_printf(b, "# HELP cosmos3_device_total_bytes Total memory of each rank's device.\n"
                 "# TYPE cosmos3_device_total_bytes gauge\n");
    for (int r = 0; r < COSMOS3_MAX_RANKS; r++)
        if (sv->mon.dev[r].valid && sv->mon.dev[r].dev_total > 0)
            sb_printf(b, "cosmos3_device_total_bytes{rank=\"%d\",device=\"%s\"} %lld\n", r, dev[r],
                      (long long)sv->mon.dev[r].dev_total);
    pthread_mutex_unlock(&sv->mu);
}

#endif
