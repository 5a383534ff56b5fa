/* comm_boot.c - the one exchange processes need before NCCL can connect
 * them when no MPI launched them (torchrun-style RANK / WORLD_SIZE /
 * MASTER_ADDR / MASTER_PORT): process 0 listens on MASTER_ADDR:MASTER_PORT
 * and hands its n bytes (ncclGetUniqueId's id) to every other process,
 * which connects (retrying while process 0 starts) and reads them. Not a
 * collective library: one message, one way, then NCCL does the work. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"

/* Read or write exactly n bytes before the deadline. */
static int io_all(int fd, void *buf, size_t n, bool wr, double deadline) {
    char *p = buf;
    while (n) {
        struct pollfd pf = {.fd = fd, .events = wr ? POLLOUT : POLLIN};
        int ms = (int)((deadline - c3_now()) * 1000);
        if (ms <= 0)
            return c3_fail(C3_EFAIL, "rendezvous: timed out %s", wr ? "sending" : "receiving");
        int pr = poll(&pf, 1, ms);
        if (pr == -1 && errno == EINTR) continue;
        C3_SYS(pr);
        if (pr == 0) continue;
        ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
        if (k == -1 && (errno == EINTR || errno == EAGAIN)) continue;
        C3_SYS(k);
        if (k == 0) return c3_fail(C3_EFAIL, "rendezvous: the peer closed the connection");
        p += k;
        n -= (size_t)k;
    }
    return C3_OK;
}

static int serve_id(int lfd, int size, const void *buf, size_t n, double deadline) {
    for (int served = 1; served < size;) {
        struct pollfd pf = {.fd = lfd, .events = POLLIN};
        int ms = (int)((deadline - c3_now()) * 1000);
        if (ms <= 0)
            return c3_fail(C3_EFAIL,
                           "rendezvous: %d of %d processes connected before the timeout; start "
                           "every process with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE",
                           served, size);
        int pr = poll(&pf, 1, ms);
        if (pr == -1 && errno == EINTR) continue;
        C3_SYS(pr);
        if (pr == 0) continue;
        int fd = accept(lfd, NULL, NULL);
        if (fd == -1 && errno == EINTR) continue;
        C3_SYS(fd);
        int32_t peer = -1;
        int rc = io_all(fd, &peer, sizeof peer, false, deadline);
        if (rc == C3_OK && (peer < 1 || peer >= size))
            rc = c3_fail(C3_EUSAGE, "rendezvous: a process says it is rank %d of %d", peer, size);
        if (rc == C3_OK) rc = io_all(fd, (void *)buf, n, true, deadline);
        close(fd);
        C3_TRY(rc);
        served++;
    }
    return C3_OK;
}

static int fetch_id(const struct addrinfo *ai, int rank, void *buf, size_t n, double deadline) {
    for (;;) { /* process 0 may not listen yet: retry until the deadline */
        int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        C3_SYS(fd);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            int32_t me = rank;
            int rc = io_all(fd, &me, sizeof me, true, deadline);
            if (rc == C3_OK) rc = io_all(fd, buf, n, false, deadline);
            close(fd);
            return rc;
        }
        int err = errno;
        close(fd);
        if (c3_now() > deadline)
            return c3_fail(C3_EFAIL, "rendezvous: cannot reach process 0: %s", strerror(err));
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int comm_boot_exchange(const char *addr, int port, int rank, int size, void *buf, size_t n,
                       double timeout) {
    if (size <= 1) return C3_OK;
    if (!addr || !*addr || port <= 0 || port > 65535)
        return c3_fail(C3_EUSAGE,
                       "rendezvous: MASTER_ADDR and MASTER_PORT (1-65535) must name process 0");
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    if (rank == 0) hints.ai_flags = AI_PASSIVE;
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(addr, ps, &hints, &ai);
    if (g) return c3_fail(C3_EUSAGE, "rendezvous: MASTER_ADDR %s: %s", addr, gai_strerror(g));
    double deadline = c3_now() + timeout;
    int rc;
    if (rank == 0) {
        int lfd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol), one = 1;
        if (lfd == -1) {
            freeaddrinfo(ai);
            return c3_fail(C3_EFAIL, "rendezvous: socket: %s", strerror(errno));
        }
        rc = setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == -1 ||
                     bind(lfd, ai->ai_addr, ai->ai_addrlen) == -1 || listen(lfd, size) == -1
                 ? c3_fail(C3_EFAIL, "rendezvous: cannot listen on %s:%d: %s", addr, port,
                           strerror(errno))
                 : serve_id(lfd, size, buf, n, deadline);
        close(lfd);
    } else {
        rc = fetch_id(ai, rank, buf, n, deadline);
    }
    freeaddrinfo(ai);
    return rc;
}
