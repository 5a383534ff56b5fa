/* comm_watch.c - the processes' watch (comm.h's c3_watch): one TCP link
 * from each process to process 0, opened with the run. Not a collective:
 * the data of a run goes through MPI or NCCL; this link carries the few
 * things they cannot: that a process ended without saying goodbye (the
 * kernel closes a killed process's sockets at once, so process 0 learns
 * within milliseconds which process is gone, and the others that process 0
 * is), process 0's cancel to every process, and the other processes'
 * events (memory, branch timings) to process 0. One frame: a type byte,
 * a 32-bit length, the payload. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"

/* What process 0 sends every process: where it listens. */
typedef struct {
    int32_t port;
    char host[64];
} watch_addr;

enum { W_HELLO = 'H', W_BYE = 'B', W_CANCEL = 'C', W_EVENT = 'E', W_MAX = 64 << 10 };

struct c3_watch {
    int rank, size;
    int *fd;     /* [size]: process 0: each other's link; others: fd[0] */
    bool *gone;  /* [size]: that link ended (goodbye or lost) */
    int wake[2]; /* a pipe that ends the watcher thread */
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;    /* one sender at a time */
    pthread_mutex_t cb_mu; /* fns: changed only while no callback runs */
    c3_watch_fns fns;
    int cancel_seen;   /* process 0: *fns.cancel_flag when last looked at */
    volatile int lost; /* a process ended without a goodbye: its number + 1 */
    char line[256];    /* what to tell the user about it */
    char (*hosts)[64]; /* [size]: each process's host, for that line (or NULL) */
};

static int send_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k == -1 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Blocking read of exactly n bytes: -1 when the link ended first. */
static int recv_all(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n) {
        ssize_t k = recv(fd, p, n, 0);
        if (k == -1 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int send_frame(c3_watch *w, int fd, int type, const void *buf, uint32_t n) {
    if (fd < 0) return -1;
    unsigned char hdr[5] = {(unsigned char)type};
    memcpy(hdr + 1, &n, 4);
    pthread_mutex_lock(&w->mu);
    int rc = send_all(fd, hdr, sizeof hdr);
    if (rc == 0 && n) rc = send_all(fd, buf, n);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* Process p's link ended; without a goodbye it was lost: record it once and
 * tell the run. */
static void link_ended(c3_watch *w, int p, bool bye) {
    if (w->gone[p]) return;
    w->gone[p] = true;
    if (bye || w->lost) return;
    const char *host = w->hosts ? w->hosts[p] : "?";
    snprintf(w->line, sizeof w->line,
             "process %d (host %s) ended mid-run (killed or crashed); the run stopped on every "
             "process and nothing was written",
             p, host);
    __atomic_store_n(&w->lost, p + 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&w->cb_mu);
    if (w->fns.lost) w->fns.lost(w->fns.ud, p, w->line);
    pthread_mutex_unlock(&w->cb_mu);
}

/* One frame from process p's link; false when the link ended. */
static bool read_frame(c3_watch *w, int p) {
    unsigned char hdr[5];
    if (recv_all(w->fd[p], hdr, sizeof hdr)) {
        link_ended(w, p, false);
        return false;
    }
    uint32_t n;
    memcpy(&n, hdr + 1, 4);
    if (n > W_MAX) {
        link_ended(w, p, false);
        return false;
    }
    char buf[W_MAX];
    if (n && recv_all(w->fd[p], buf, n)) {
        link_ended(w, p, false);
        return false;
    }
    if (hdr[0] == W_BYE) {
        link_ended(w, p, true);
        return false;
    }
    pthread_mutex_lock(&w->cb_mu);
    if (hdr[0] == W_CANCEL && w->fns.cancel) w->fns.cancel(w->fns.ud);
    if (hdr[0] == W_EVENT && w->fns.event) w->fns.event(w->fns.ud, p, buf, n);
    pthread_mutex_unlock(&w->cb_mu);
    return true;
}

static void *watch_main(void *arg) {
    c3_watch *w = arg;
    struct pollfd pf[C3_MAX_RANKS + 1];
    int who[C3_MAX_RANKS + 1];
    for (;;) {
        int n = 0;
        pf[n] = (struct pollfd){.fd = w->wake[0], .events = POLLIN};
        who[n++] = -1;
        for (int p = 0; p < w->size; p++)
            if (p != w->rank && w->fd[p] >= 0 && !w->gone[p]) {
                pf[n] = (struct pollfd){.fd = w->fd[p], .events = POLLIN};
                who[n++] = p;
            }
        /* process 0 looks at the run's cancel flag ten times a second: a
         * signal handler only sets it, this thread tells the others */
        int k = poll(pf, (nfds_t)n, w->rank == 0 ? 100 : -1);
        if (k == -1 && errno == EINTR) continue;
        if (k == -1 || pf[0].revents) return NULL; /* closing */
        pthread_mutex_lock(&w->cb_mu);
        const volatile int *cf = w->fns.cancel_flag;
        int now = cf ? *cf : 0;
        pthread_mutex_unlock(&w->cb_mu);
        if (now && !w->cancel_seen) { /* every process stops, this one's collectives too */
            watch_cancel(w);
            pthread_mutex_lock(&w->cb_mu);
            if (w->fns.cancel) w->fns.cancel(w->fns.ud);
            pthread_mutex_unlock(&w->cb_mu);
        }
        w->cancel_seen = now;
        for (int i = 1; i < n; i++)
            if (pf[i].revents) read_frame(w, who[i]);
    }
}

static int fail_sys(const char *what) {
    return c3_fail(C3_EFAIL, "process watch: %s: %s", what, strerror(errno));
}

/* Process 0: a listener on any address, its port to every process. */
static int open_lead(c3_watch *w, double deadline, int (*share)(void *, size_t, void *), void *ud) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (lfd == -1) return fail_sys("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t al = sizeof a;
    int32_t port = -1;
    if (setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, w->size) == 0 &&
        getsockname(lfd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    int rc = port < 0 ? fail_sys("cannot listen") : C3_OK;
    watch_addr wa = {.port = port}; /* port -1 tells the others to give up too */
    gethostname(wa.host, sizeof wa.host - 1);
    int src = share(&wa, sizeof wa, ud);
    if (rc == C3_OK) rc = src;
    for (int got = 1; rc == C3_OK && got < w->size;) {
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        int ms = (int)((deadline - c3_now()) * 1000);
        if (ms <= 0) {
            rc = c3_fail(C3_EFAIL,
                         "process watch: %d of %d processes connected to process 0 in time; let "
                         "the hosts reach process 0's host over TCP (MASTER_ADDR names it)",
                         got, w->size);
            break;
        }
        int pr = poll(&pf, 1, ms);
        if (pr <= 0) continue;
        int fd = accept(lfd, NULL, NULL);
        if (fd == -1) continue;
        unsigned char hdr[5];
        int32_t peer = -1;
        if (recv_all(fd, hdr, sizeof hdr) || hdr[0] != W_HELLO ||
            recv_all(fd, &peer, sizeof peer) || peer < 1 || peer >= w->size || w->fd[peer] >= 0) {
            close(fd);
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        w->fd[peer] = fd;
        got++;
    }
    close(lfd);
    return rc;
}

/* Another process: connect to process 0 (MASTER_ADDR, else process 0's host name). */
static int open_follower(c3_watch *w, double deadline, int (*share)(void *, size_t, void *),
                         void *ud) {
    watch_addr wa = {.port = -1};
    C3_TRY(share(&wa, sizeof wa, ud));
    int32_t port = wa.port;
    if (port <= 0) return c3_fail(C3_EFAIL, "process watch: process 0 could not listen");
    const char *host = getenv("MASTER_ADDR");
    if (!host || !*host) host = wa.host;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", (int)port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(host, ps, &hints, &ai);
    char mine[64] = "";
    if (g && host == wa.host && gethostname(mine, sizeof mine - 1) == 0 && !strcmp(mine, wa.host))
        g = getaddrinfo(host = "127.0.0.1", ps, &hints, &ai); /* the same host, its name unknown */
    if (g)
        return c3_fail(C3_EUSAGE,
                       "process watch: process 0's host %s: %s; set MASTER_ADDR to an address of "
                       "process 0's host that every host reaches",
                       host, gai_strerror(g));
    int fd = -1;
    while (fd < 0) {
        fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        int err = errno;
        if (fd >= 0) close(fd);
        fd = -1;
        if (c3_now() > deadline) {
            freeaddrinfo(ai);
            return c3_fail(C3_EFAIL,
                           "process watch: cannot reach process 0 at %s:%d: %s; set MASTER_ADDR "
                           "to an address of process 0's host that every host reaches",
                           host, (int)port, strerror(err));
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    w->fd[0] = fd;
    int32_t me = w->rank;
    if (send_frame(w, fd, W_HELLO, &me, sizeof me))
        return c3_fail(C3_EFAIL, "process watch: process 0 closed the link");
    return C3_OK;
}

int watch_open(c3_watch **out, int rank, int size, double timeout,
               int (*share)(void *buf, size_t n, void *ud), void *ud) {
    *out = NULL;
    if (size <= 1) return C3_OK;
    if (size > C3_MAX_RANKS)
        return c3_fail(C3_EUSAGE, "%d processes: at most %d", size, C3_MAX_RANKS);
    c3_watch *w = xcalloc(1, sizeof *w);
    w->rank = rank;
    w->size = size;
    w->fd = xmalloc((size_t)size * sizeof *w->fd);
    w->gone = xcalloc((size_t)size, sizeof *w->gone);
    for (int p = 0; p < size; p++)
        w->fd[p] = -1;
    w->wake[0] = w->wake[1] = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->cb_mu, NULL);
    double deadline = c3_now() + timeout;
    int rc = rank == 0 ? open_lead(w, deadline, share, ud) : open_follower(w, deadline, share, ud);
    if (rc == C3_OK && pipe(w->wake)) rc = fail_sys("pipe");
    if (rc == C3_OK && pthread_create(&w->thread, NULL, watch_main, w))
        rc = c3_fail(C3_EFAIL, "process watch: cannot start its thread");
    if (rc) {
        watch_close(w, false);
        return rc;
    }
    w->started = true;
    *out = w;
    return C3_OK;
}

void watch_set(c3_watch *w, const c3_watch_fns *fns, char (*hosts)[64]) {
    if (!w) return;
    pthread_mutex_lock(&w->cb_mu);
    if (fns) w->fns = *fns;
    if (hosts) w->hosts = hosts;
    pthread_mutex_unlock(&w->cb_mu);
    /* a loss before the run listened: tell it now */
    int lost = __atomic_load_n(&w->lost, __ATOMIC_ACQUIRE);
    if (lost && fns && fns->lost) fns->lost(fns->ud, lost - 1, w->line);
}

void watch_cancel(c3_watch *w) {
    if (!w || w->rank != 0) return;
    for (int p = 1; p < w->size; p++)
        if (!w->gone[p]) (void)send_frame(w, w->fd[p], W_CANCEL, NULL, 0);
}

void watch_event(c3_watch *w, const void *buf, size_t n) {
    if (!w || w->rank == 0 || n > W_MAX || w->gone[0]) return;
    (void)send_frame(w, w->fd[0], W_EVENT, buf, (uint32_t)n);
}

const char *watch_lost(const c3_watch *w, int *proc) {
    int lost = w ? __atomic_load_n(&w->lost, __ATOMIC_ACQUIRE) : 0;
    if (proc) *proc = lost - 1;
    return lost ? w->line : NULL;
}

void watch_close(c3_watch *w, bool bye) {
    if (!w) return;
    if (w->started) { /* the watcher first: no callback after this */
        if (write(w->wake[1], "x", 1) != 1) pthread_cancel(w->thread);
        pthread_join(w->thread, NULL);
    }
    for (int p = 0; p < w->size; p++)
        if (w->fd[p] >= 0) {
            if (bye && !w->gone[p]) (void)send_frame(w, w->fd[p], W_BYE, NULL, 0);
            close(w->fd[p]);
        }
    for (int i = 0; i < 2; i++)
        if (w->wake[i] >= 0) close(w->wake[i]);
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->cb_mu);
    free(w->fd);
    free(w->gone);
    free(w);
}
