/* tests/perf/gso_blast.c - the "UDP blast as GSO sends received with GRO"
 * reference of tests/perf/measure.sh (issue 20): what the kernel's UDP path
 * moves between two processes on loopback when a sender hands it whole
 * batches of equal datagrams (UDP_SEGMENT, at most 64 segments and 64 KiB a
 * send) and the receiver takes them back coalesced (UDP_GRO), one system
 * call per batch each way. Plain C, no tuning beyond that.
 *
 *   gso_blast server ADDR PORT SEG TOTAL        # prints MB/s and packets/s
 *   gso_blast client ADDR PORT SEG TOTAL SERVER
 *
 * SEG is the datagram size (4112: a RoCE packet of 4096 bytes; 80: one of
 * 64), TOTAL the bytes to move. Flow control as rxe perf's UDP baseline:
 * the server sends an 8-byte credit back for every 4 sends' worth received,
 * and the client keeps at most 8 sends' worth in flight, so that the blast
 * measures moving data rather than dropping it. A credit lost (or data
 * dropped) only stalls the client for 20 ms, counted and reported.
 *
 * BLAST_BUFS=N in the environment (default 1) makes each side go round N
 * buffers of 64 KiB, one per send or receive, as N QPs with a buffer each
 * do (perftest and rxe perf give every QP its own): the cost of the memory
 * footprint alone, the reference of measure.sh's "fair" group.
 *
 * BLAST_SEND (client only) says how each send hands the kernel its bytes:
 *   one     one buffer of SEG-sized datagrams (the default);
 *   gather  as rxe-rs sends today: each datagram's payload first copied
 *           from the buffer into a packet buffer of its own (behind a
 *           12-byte header), then the packet buffers as one iovec each;
 *   parts   what sending from the registered memory would be: three
 *           iovecs a datagram, a 12-byte header, the payload straight from
 *           the buffer and a 4-byte trailer.
 * Only the client's CPU differs between them (docs/performance.md).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static int udp(const char *addr, int port) {
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0) die("socket");
    int big = 4 << 20;
    if (setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
        setsockopt(s, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    if (setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) < 0)
        setsockopt(s, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, addr, &a.sin_addr) != 1) die("address");
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0) die("bind");
    return s;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s server|client ADDR PORT SEG TOTAL [SERVER]\n", argv[0]);
        return 2;
    }
    int server = !strcmp(argv[1], "server");
    int port = atoi(argv[3]);
    size_t seg = strtoul(argv[4], 0, 10);
    unsigned long long total = strtoull(argv[5], 0, 10);
    size_t nseg = 65507 / seg;
    if (nseg > 64) nseg = 64;
    size_t send_len = nseg * seg;
    unsigned long long window = 8ull * send_len, credit_every = 4ull * send_len;
    const char *nb = getenv("BLAST_BUFS");
    size_t nbufs = nb ? strtoul(nb, 0, 10) : 1, at = 0;
    if (nbufs < 1 || nbufs > 65536) nbufs = 1;
    char *bufs = malloc(nbufs * 65536);
    if (!bufs) die("malloc");
    memset(bufs, 0x5a, nbufs * 65536);
    if (server) {
        int s = udp(argv[2], port);
        int one = 1;
        if (setsockopt(s, IPPROTO_UDP, UDP_GRO, &one, sizeof one) < 0) die("UDP_GRO");
        struct timeval tv = {.tv_sec = 1};
        unsigned long long got = 0, credited = 0, calls = 0;
        double t0 = 0, t1 = 0;
        struct sockaddr_in peer;
        while (got < total) {
            socklen_t pl = sizeof peer;
            char *buf = bufs + (at++ % nbufs) * 65536;
            ssize_t n = recvfrom(s, buf, 65536, 0, (struct sockaddr *)&peer, &pl);
            if (n < 0) {
                if (errno == EAGAIN) break; /* the rest was lost */
                die("recv");
            }
            if (!calls++) {
                t0 = now();
                setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            }
            got += n;
            t1 = now();
            if (got - credited >= credit_every || got >= total) {
                credited = got;
                sendto(s, &got, sizeof got, 0, (struct sockaddr *)&peer, pl);
            }
        }
        double secs = t1 - t0;
        printf("gso_blast seg %zu x %zu, %zu buffers: %llu bytes in %.3f s: %.1f MB/s %.3f Mpps (%llu receives)\n",
               seg, nseg, nbufs, got, secs, got / secs / 1e6, got / seg / secs / 1e6, calls);
        return got >= total ? 0 : 1;
    }
    if (argc < 7) die("client needs SERVER");
    int s = udp(argv[2], 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, argv[6], &to.sin_addr) != 1) die("server address");
    char cbuf[CMSG_SPACE(sizeof(uint16_t))] = {0};
    struct iovec iov = {.iov_base = bufs};
    struct msghdr m = {.msg_name = &to, .msg_namelen = sizeof to, .msg_iov = &iov, .msg_iovlen = 1,
                       .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_UDP;
    c->cmsg_type = UDP_SEGMENT;
    c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    *(uint16_t *)CMSG_DATA(c) = (uint16_t)seg;
    unsigned long long sent = 0, acked = 0, stalls = 0;
    const char *how = getenv("BLAST_SEND");
    int gather = how && !strcmp(how, "gather"), parts = how && !strcmp(how, "parts");
    if (how && !gather && !parts && strcmp(how, "one")) die("BLAST_SEND is one, gather or parts");
    if ((gather || parts) && seg <= 16) die("BLAST_SEND=gather|parts needs SEG > 16");
    size_t body = seg - 16; /* a datagram's payload: seg less 12 + 4 */
    struct iovec piov[3 * 64];
    char *pkt[64], head[12] = {0}, tail[4] = {0};
    for (size_t i = 0; gather && i < nseg; i++)
        if (!(pkt[i] = calloc(1, seg))) die("malloc");
    while (sent < total) {
        while (sent - acked >= window) {
            struct pollfd p = {.fd = s, .events = POLLIN};
            if (poll(&p, 1, 20) == 0) {
                acked = sent; /* a credit or data lost: go on */
                stalls++;
                break;
            }
            unsigned long long a;
            if (recv(s, &a, sizeof a, 0) == sizeof a && a > acked) acked = a;
        }
        unsigned long long left = total - sent;
        iov.iov_base = bufs + (at++ % nbufs) * 65536;
        iov.iov_len = left < send_len ? left : send_len;
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        size_t k = iov.iov_len / seg;
        if ((gather || parts) && k > 0) {
            /* whole datagrams only: the rest goes as one buffer next time */
            const char *from = iov.iov_base;
            for (size_t i = 0; i < k; i++) {
                if (gather) {
                    memcpy(pkt[i] + 12, from + i * body, body);
                    piov[i] = (struct iovec){pkt[i], seg};
                } else {
                    piov[3 * i] = (struct iovec){head, 12};
                    piov[3 * i + 1] = (struct iovec){(char *)from + i * body, body};
                    piov[3 * i + 2] = (struct iovec){tail, 4};
                }
            }
            m.msg_iov = piov;
            m.msg_iovlen = gather ? k : 3 * k;
            iov.iov_len = k * seg;
        }
        if (sendmsg(s, &m, 0) < 0) {
            if (errno == ENOBUFS || errno == EAGAIN) continue;
            die("sendmsg");
        }
        sent += iov.iov_len;
        /* take in credits that are there without waiting */
        unsigned long long a;
        while (recv(s, &a, sizeof a, MSG_DONTWAIT) == sizeof a)
            if (a > acked) acked = a;
    }
    if (stalls) fprintf(stderr, "gso_blast client: %llu stalls of 20 ms\n", stalls);
    return 0;
}
