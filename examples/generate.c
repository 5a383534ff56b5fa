/* generate.c - the cosmos3 library in one page: open a model, generate one
 * picture into memory, cancel a second request from its progress callback,
 * and generate once more on the same engine.
 *
 *   cc generate.c $(pkg-config --cflags --libs cosmos3) -o generate
 *   ./generate [MODEL [OUT.ppm]]      MODEL: a checkpoint folder or "demo"
 *
 * Writes nothing unless OUT.ppm is given (a binary PPM of the picture).
 * Exit status: 0 when every step below did what it should, else 1.
 */
#include <cosmos3.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    cosmos3_engine *engine;
    int steps_seen; /* COSMOS3_EV_STEP events of the job */
    int cancel_at;  /* cancel from the callback at this step (0: never) */
    int ends;       /* DONE / CANCELLED / FAILED events: exactly one per job */
    int last_end;   /* the kind of the last one */
} progress;

static void on_event(const cosmos3_event *ev, void *user) {
    progress *p = user;
    switch (ev->kind) {
    case COSMOS3_EV_STEP:
        p->steps_seen++;
        if (p->cancel_at && ev->step == p->cancel_at) cosmos3_cancel(p->engine);
        break;
    case COSMOS3_EV_WARNING:
        fprintf(stderr, "warning: %s\n", ev->text);
        break;
    case COSMOS3_EV_DONE:
    case COSMOS3_EV_CANCELLED:
    case COSMOS3_EV_FAILED:
        p->ends++;
        p->last_end = ev->kind;
        break;
    default:
        break;
    }
}

static int write_ppm(const char *path, const cosmos3_result *r) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fprintf(f, "P6\n%d %d\n255\n", r->width, r->height);
    size_t n = (size_t)r->width * r->height * 3; /* the first frame */
    int ok = fwrite(r->rgb, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

int main(int argc, char **argv) {
    char err[512] = "";
    cosmos3_open_params op;
    cosmos3_open_params_init(&op);
    op.model = argc > 1 ? argv[1] : "demo";
    op.device = "cpu";
    cosmos3_engine *e;
    if (cosmos3_open(&op, &e, err, sizeof err) != COSMOS3_OK) {
        fprintf(stderr, "generate: %s\n", err);
        return 1;
    }
    progress p = {.engine = e};
    cosmos3_request rq;
    cosmos3_request_init(&rq); /* the model's defaults for everything else */
    rq.prompt = "a red circle on a blue background, on the right";
    rq.seed = 3;
    rq.on_event = on_event;
    rq.user = &p;

    /* 1. one picture into memory */
    cosmos3_result *r;
    int rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
    if (rc != COSMOS3_OK) {
        fprintf(stderr, "generate: %s\n", err);
        cosmos3_close(e);
        return 1;
    }
    printf("%dx%d, %d frame(s), seed %llu, %d steps (%d seen), %s, %.2f s\n", r->width, r->height,
           r->frames, (unsigned long long)r->seed, r->steps, p.steps_seen, r->model_id,
           r->timings.total);
    int bad = p.steps_seen != r->steps || p.ends != 1 || p.last_end != COSMOS3_EV_DONE;
    if (argc > 2 && write_ppm(argv[2], r) != 0) {
        fprintf(stderr, "generate: cannot write %s\n", argv[2]);
        bad = 1;
    }
    cosmos3_result_free(r);

    /* 2. a second request, cancelled from its callback at step 5 */
    p = (progress){.engine = e, .cancel_at = 5};
    rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
    printf("second request: %s after %d steps (%s)\n",
           rc == COSMOS3_ECANCEL ? "cancelled" : "not cancelled", p.steps_seen, err);
    bad |= rc != COSMOS3_ECANCEL || r != NULL || p.steps_seen != 5 || p.ends != 1 ||
           p.last_end != COSMOS3_EV_CANCELLED;

    /* 3. the engine is still usable */
    p = (progress){.engine = e};
    rc = cosmos3_generate(e, &rq, &r, err, sizeof err);
    printf("third request: %s\n", rc == COSMOS3_OK ? "done" : err);
    bad |= rc != COSMOS3_OK || p.ends != 1;
    cosmos3_result_free(r);
    cosmos3_close(e);
    return bad ? 1 : 0;
}
