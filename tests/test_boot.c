/* test_boot.c - the unique-id exchange without MPI (comm_boot.c), on the
 * CPU with a stand-in id: process 0 (here a thread, as each process would
 * call it) hands 128 bytes over MASTER_ADDR:MASTER_PORT to three others,
 * who start before it listens and get every byte; a process whose process 0
 * never comes fails within its timeout naming the fix; bad addresses are
 * refused. */
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#include "comm.h"
#include "test_util.h"

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
    return t_done("boot");
}
