/* forward.c - a request from process 0 to the other processes of a run
 * (forward.h): packed into one buffer (the struct's numbers, then its
 * strings, noise, frames and indexes), broadcast over MPI with its length
 * first; a length of 0 says "no more requests". */
#include "forward.h"

#include <stdlib.h>
#include <string.h>

#include "comm.h"

typedef struct {
    char *p;
    size_t n, cap;
} pack_buf;

static void put(pack_buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = xrealloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

/* n elements of size sz (n = -1: NULL), their data 8-byte aligned */
static void put_arr(pack_buf *b, const void *src, int64_t n, size_t sz) {
    int64_t k = src ? n : -1;
    put(b, &k, sizeof k);
    static const char zeros[8];
    put(b, zeros, (8 - b->n % 8) % 8);
    if (k > 0) put(b, src, (size_t)k * sz);
}

static void put_str(pack_buf *b, const char *s) {
    put_arr(b, s, s ? (int64_t)strlen(s) + 1 : -1, 1);
}

static void put_frames(pack_buf *b, const cosmos3_frames *f) {
    bool has = f != NULL;
    put(b, &has, sizeof has);
    if (!has) return;
    put(b, f, sizeof *f);
    put_arr(b, f->rgb, (int64_t)f->frames * f->height * f->width * 3, 1);
}

typedef struct {
    const char *p;
    size_t n, at;
} unpack_buf;

static int get(unpack_buf *b, void *dst, size_t n) {
    if (b->at + n > b->n) return c3_fail(C3_EFAIL, "a forwarded request is cut short");
    memcpy(dst, b->p + b->at, n);
    b->at += n;
    return C3_OK;
}

/* a pointer into the buffer (it outlives the request) or NULL */
static int get_arr(unpack_buf *b, const void **out, int64_t *n, size_t sz) {
    int64_t k = -1;
    C3_TRY(get(b, &k, sizeof k));
    b->at += (8 - b->at % 8) % 8;
    *out = NULL;
    if (n) *n = k < 0 ? 0 : k;
    if (k < 0) return C3_OK;
    if (b->at > b->n || (size_t)k > (b->n - b->at) / sz)
        return c3_fail(C3_EFAIL, "a forwarded request is cut short");
    *out = b->p + b->at;
    b->at += (size_t)k * sz;
    return C3_OK;
}

static int get_frames(unpack_buf *b, cosmos3_frames *f, const cosmos3_frames **out) {
    bool has = false;
    C3_TRY(get(b, &has, sizeof has));
    *out = NULL;
    if (!has) return C3_OK;
    C3_TRY(get(b, f, sizeof *f));
    const void *rgb;
    C3_TRY(get_arr(b, &rgb, NULL, 1));
    f->rgb = rgb;
    *out = f;
    return C3_OK;
}

static int send_buf(const void *p, int64_t n) {
    C3_TRY(comm_procs_bcast(&n, sizeof n));
    return n > 0 ? comm_procs_bcast((void *)p, (size_t)n) : C3_OK;
}

int forward_send(const cosmos3_request *rq) {
    c3_procs pr;
    C3_TRY(comm_procs(&pr));
    if (pr.size <= 1 || !pr.mpi || pr.rank != 0) return C3_OK;
    pack_buf b = {0};
    cosmos3_request flat = *rq; /* the numbers; pointers follow */
    flat.prompt = flat.negative_prompt = flat.schedule = NULL;
    flat.noise = flat.step_noise = NULL;
    flat.image = flat.video = NULL;
    flat.condition_frames = NULL;
    flat.on_event = NULL;
    flat.user = NULL;
    put(&b, &flat, sizeof flat);
    put_str(&b, rq->prompt);
    put_str(&b, rq->negative_prompt);
    put_str(&b, rq->schedule);
    put_arr(&b, rq->noise, (int64_t)rq->noise_len, sizeof(float));
    put_arr(&b, rq->step_noise, (int64_t)rq->step_noise_len, sizeof(float));
    put_frames(&b, rq->image);
    put_frames(&b, rq->video);
    put_arr(&b, rq->condition_frames, rq->ncondition_frames, sizeof(int));
    int rc = send_buf(b.p, (int64_t)b.n);
    free(b.p);
    return rc;
}

int forward_stop(void) {
    c3_procs pr;
    C3_TRY(comm_procs(&pr));
    if (pr.size <= 1 || !pr.mpi || pr.rank != 0) return C3_OK;
    return send_buf(NULL, 0);
}

int forward_recv(c3_forwarded *f, bool *stop) {
    memset(f, 0, sizeof *f);
    *stop = false;
    int64_t n = 0;
    C3_TRY(comm_procs_bcast(&n, sizeof n));
    if (n <= 0) {
        *stop = true;
        return C3_OK;
    }
    f->mem = xmalloc((size_t)n);
    C3_TRY(comm_procs_bcast(f->mem, (size_t)n));
    unpack_buf b = {f->mem, (size_t)n, 0};
    cosmos3_request *rq = &f->rq;
    C3_TRY(get(&b, rq, sizeof *rq));
    const void *p = NULL;
    int64_t k = 0;
    C3_TRY(get_arr(&b, &p, NULL, 1));
    rq->prompt = p;
    C3_TRY(get_arr(&b, &p, NULL, 1));
    rq->negative_prompt = p;
    C3_TRY(get_arr(&b, &p, NULL, 1));
    rq->schedule = p;
    C3_TRY(get_arr(&b, &p, &k, sizeof(float)));
    rq->noise = p;
    rq->noise_len = (size_t)k;
    C3_TRY(get_arr(&b, &p, &k, sizeof(float)));
    rq->step_noise = p;
    rq->step_noise_len = (size_t)k;
    C3_TRY(get_frames(&b, &f->image, &rq->image));
    C3_TRY(get_frames(&b, &f->video, &rq->video));
    C3_TRY(get_arr(&b, &p, &k, sizeof(int)));
    rq->condition_frames = p;
    rq->ncondition_frames = (int)k;
    return C3_OK;
}

void forward_free(c3_forwarded *f) {
    free(f->mem);
    f->mem = NULL;
}
