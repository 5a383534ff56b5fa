/* test_boot.c - what processes exchange beside MPI / NCCL, on the CPU with
 * threads standing in for processes:
 * - the unique-id exchange without MPI (comm_boot.c) with a stand-in id:
 *   process 0 hands 128 bytes over MASTER_ADDR:MASTER_PORT to three others,
 *   who start before it listens and get every byte; a process whose process
 *   0 never comes fails within its timeout naming the fix; bad addresses are
 *   refused;
 * - the processes' watch (comm_watch.c): a process that ends without a
 *   goodbye is named on process 0 at once, one that says goodbye is not;
 *   process 0's cancel flag reaches it and the others once, their events
 *   reach it;
 * - two processes given the same GPU (stand-in ids) refused, ranks of one
 *   process sharing one allowed; TP / Ulysses groups across (stand-in)
 *   hosts refused unless allowed. */
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "comm.h"
#include "test_util.h"

/* ------------------------------------------------------------- the watch */

enum { WP = 3 }; /* processes */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool has;
    char addr[128];
} share_box;

static int share_fn(void *buf, size_t n, void *ud) { /* MPI_Bcast's stand-in */
    share_box *b = ((void **)ud)[0];
    int rank = *(int *)((void **)ud)[1];
    pthread_mutex_lock(&b->mu);
    if (rank == 0) {
        memcpy(b->addr, buf, n);
        b->has = true;
        pthread_cond_broadcast(&b->cv);
    } else {
        while (!b->has)
            pthread_cond_wait(&b->cv, &b->mu);
        memcpy(buf, b->addr, n);
    }
    pthread_mutex_unlock(&b->mu);
    return C3_OK;
}

typedef struct {
    int rank, rc;
    share_box *box;
    c3_watch *w;
    volatile int lost, cancels, events, last_from;
    char line[256];
    volatile int cancel_flag;
} wproc;

static void on_lost(void *ud, int proc, const char *line) {
    wproc *p = ud;
    snprintf(p->line, sizeof p->line, "%s", line);
    p->lost = proc + 1;
}
static void on_cancel(void *ud) {
    ((wproc *)ud)->cancels++;
}
static void on_event(void *ud, int from, const void *buf, size_t n) {
    wproc *p = ud;
    if (n == 5 && !memcmp(buf, "event", 5)) p->events++;
    p->last_from = from;
}

static void *wopen_main(void *arg) {
    wproc *p = arg;
    void *ud[2] = {p->box, &p->rank};
    p->rc = watch_open(&p->w, p->rank, WP, 20, share_fn, ud);
    return NULL;
}

static bool wait_for(volatile int *v, int want, double s) {
    double t0 = c3_now();
    while (*v < want && c3_now() - t0 < s) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return *v >= want;
}

static void test_watch(void) {
    share_box box = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    wproc ps[WP];
    pthread_t th[WP];
    for (int r = WP - 1; r >= 0; r--) { /* the others first: they wait for process 0 */
        ps[r] = (wproc){.rank = r, .box = &box};
        pthread_create(&th[r], NULL, wopen_main, &ps[r]);
    }
    for (int r = 0; r < WP; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < WP; r++)
        T_CHECK(ps[r].rc == C3_OK && ps[r].w, "watch_open on process %d: %s", r, c3_errmsg());
    if (t_failures) return;
    static char hosts[WP][64] = {"nodeA", "nodeA", "nodeB"};
    for (int r = 0; r < WP; r++) {
        c3_watch_fns fns = {.lost = on_lost,
                            .cancel = on_cancel,
                            .event = on_event,
                            .ud = &ps[r],
                            .cancel_flag = r == 0 ? &ps[0].cancel_flag : NULL};
        watch_set(ps[r].w, &fns, hosts);
    }
    /* another process's events reach process 0 */
    watch_event(ps[2].w, "event", 5);
    T_CHECK(wait_for(&ps[0].events, 1, 5) && ps[0].last_from == 2, "no event on process 0");
    /* process 0's cancel flag reaches every other process */
    ps[0].cancel_flag = 1;
    T_CHECK(wait_for(&ps[1].cancels, 1, 5) && wait_for(&ps[2].cancels, 1, 5),
            "the cancel did not reach the others (%d, %d)", ps[1].cancels, ps[2].cancels);
    T_CHECK(wait_for(&ps[0].cancels, 1, 5) && ps[0].cancels == 1,
            "process 0's own collectives were not stopped once (%d)", ps[0].cancels);
    /* process 1 says goodbye: no loss */
    watch_close(ps[1].w, true);
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    T_CHECK(!ps[0].lost && !watch_lost(ps[0].w, NULL), "a goodbye was taken for a loss: %s",
            ps[0].line);
    /* process 2 ends without one (as a killed process's socket closes) */
    double t0 = c3_now();
    watch_close(ps[2].w, false);
    T_CHECK(wait_for(&ps[0].lost, 3, 5), "process 0 did not see process 2 end");
    T_CHECK(c3_now() - t0 < 5, "the loss took %.1f s", c3_now() - t0);
    int proc = -1;
    const char *line = watch_lost(ps[0].w, &proc);
    T_CHECK(line && proc == 2 && strstr(line, "process 2 (host nodeB) ended mid-run"),
            "the loss line: %s (process %d)", line ? line : "(none)", proc);
    T_CHECK(!strchr(line ? line : "", '\n'), "the loss is not one line");
    watch_close(ps[0].w, true);
}

/* ------------------------------------------------- GPUs and hosts checks */

static const char *const g_hosts4[] = {"nodeA", "nodeA", "nodeB", "nodeB"};
static const char *host4(int proc) {
    return proc >= 0 && proc < 4 ? g_hosts4[proc] : "?";
}

static void test_devices(void) {
    char ids[4][C3_GPU_ID] = {"0000:18:00.0 GPU-aa", "0000:2a:00.0 GPU-bb", "0000:18:00.0 GPU-cc",
                              "0000:2a:00.0 GPU-dd"};
    /* one rank per process, each its own GPU (the same bus ids on two hosts) */
    T_CHECK(comm_devices_check(4, 1, (const char(*)[C3_GPU_ID])ids, host4) == C3_OK,
            "distinct GPUs refused: %s", c3_errmsg());
    /* processes 0 and 1 (host nodeA) given the same GPU */
    snprintf(ids[1], C3_GPU_ID, "%s", ids[0]);
    T_CHECK(comm_devices_check(4, 1, (const char(*)[C3_GPU_ID])ids, host4) == C3_EUSAGE &&
                strstr(c3_errmsg(), "ranks 0 (process 0) and 1 (process 1) on host nodeA are "
                                    "both given GPU 0000:18:00.0 GPU-aa") &&
                strstr(c3_errmsg(), "CUDA_VISIBLE_DEVICES"),
            "the same GPU in two processes: %s", c3_errmsg());
    /* two ranks of one process on one GPU: allowed (the device communicator) */
    T_CHECK(comm_devices_check(4, 2, (const char(*)[C3_GPU_ID])ids, host4) == C3_OK,
            "two ranks of one process sharing a GPU refused: %s", c3_errmsg());
    /* unknown ids are not compared */
    char unk[2][C3_GPU_ID] = {"?", "?"};
    T_CHECK(comm_devices_check(2, 1, (const char(*)[C3_GPU_ID])unk, host4) == C3_OK,
            "unknown ids refused");
}

static void test_hosts(void) {
    c3_plan p = {.tp = 2, .cfg = 2, .sp = 1, .world = 4};
    /* one rank per process, two processes per host: TP inside, CFG across */
    T_CHECK(comm_hosts_check(&p, 1, 4, host4) == C3_OK, "TP inside hosts refused: %s",
            c3_errmsg());
    /* TP across hosts: ranks 0, 1 on processes 0, 2 with two ranks each */
    p = (c3_plan){.tp = 2, .cfg = 1, .sp = 2, .world = 4};
    T_CHECK(comm_hosts_check(&p, 1, 4, host4) == C3_EUSAGE &&
                strstr(c3_errmsg(), "the --tp group of ranks 0 and 2 would span hosts nodeA and "
                                    "nodeB") &&
                strstr(c3_errmsg(), "--allow-cross-host"),
            "TP across hosts: %s", c3_errmsg());
    p.cross_host = true;
    T_CHECK(comm_hosts_check(&p, 1, 4, host4) == C3_OK, "--allow-cross-host refused");
    /* Ulysses across hosts */
    p = (c3_plan){.tp = 1, .cfg = 1, .sp = 4, .world = 4};
    T_CHECK(comm_hosts_check(&p, 1, 4, host4) == C3_EUSAGE &&
                strstr(c3_errmsg(), "the --ulysses group of ranks 0 and 2"),
            "Ulysses across hosts: %s", c3_errmsg());
}

enum { ID = 128, WORLD = 4 };

typedef struct {
    int rank, port, rc;
    unsigned char id[ID];
    char err[512];
} peer;

static void *peer_main(void *arg) {
    peer *p = arg;
    if (p->rank == 0) { /* the others are already trying */
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    p->rc = comm_boot_exchange("127.0.0.1", p->port, p->rank, WORLD, p->id, ID, 20);
    if (p->rc) snprintf(p->err, sizeof p->err, "%s", c3_errmsg());
    return NULL;
}

/* A port nobody listens on now (the kernel's pick, released). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    if (fd == -1 || bind(fd, (struct sockaddr *)&a, sizeof a) ||
        getsockname(fd, (struct sockaddr *)&a, &n))
        return -1;
    close(fd);
    return ntohs(a.sin_port);
}

int main(void) {
    int port = free_port();
    T_CHECK(port > 0, "no free port");
    peer ps[WORLD];
    pthread_t th[WORLD];
    for (int r = 0; r < WORLD; r++) {
        ps[r] = (peer){.rank = r, .port = port};
        for (int i = 0; i < ID; i++) /* the stand-in id on process 0; zeros elsewhere */
            ps[r].id[i] = r == 0 ? (unsigned char)(i * 7 + 3) : 0;
    }
    for (int r = WORLD - 1; r >= 0; r--)
        pthread_create(&th[r], NULL, peer_main, &ps[r]);
    for (int r = 0; r < WORLD; r++)
        pthread_join(th[r], NULL);
    for (int r = 0; r < WORLD; r++) {
        T_CHECK(ps[r].rc == C3_OK, "rank %d: %s", r, ps[r].err);
        T_CHECK(!memcmp(ps[r].id, ps[0].id, ID), "rank %d got another id", r);
    }
    T_CHECK(ps[0].id[5] == 38, "process 0's id changed");

    /* process 0 never comes: the timeout, one line naming what failed */
    unsigned char id[ID] = {0};
    double t0 = c3_now();
    int rc = comm_boot_exchange("127.0.0.1", free_port(), 1, 2, id, ID, 1.0);
    double dt = c3_now() - t0;
    T_CHECK(rc != C3_OK && strstr(c3_errmsg(), "cannot reach process 0"), "no process 0: %s",
            c3_errmsg());
    T_CHECK(dt < 10, "no process 0: failed after %.1f s", dt);
    /* bad input: refused before any socket */
    T_CHECK(comm_boot_exchange("", 29500, 1, 2, id, ID, 1) == C3_EUSAGE, "empty address accepted");
    T_CHECK(comm_boot_exchange("127.0.0.1", 70000, 1, 2, id, ID, 1) == C3_EUSAGE,
            "port 70000 accepted");
    /* one process: nothing to exchange */
    T_CHECK(comm_boot_exchange(NULL, 0, 0, 1, id, ID, 1) == C3_OK, "a world of 1 failed");
    test_watch();
    test_devices();
    test_hosts();
    return t_done("boot");
}
