/*
 * UDP load for bench/stream_bench.py: an echo server and a closed-loop load
 * generator, in C so that the load side (one core) outruns any proxy under test.
 *
 *   udp_load echo PORT
 *       answers every datagram on 127.0.0.1:PORT to its sender (recvmmsg/sendmmsg).
 *   udp_load load PORT CLIENTS WINDOW SIZE SECONDS
 *       CLIENTS sockets connected to 127.0.0.1:PORT, each keeping WINDOW datagrams of
 *       SIZE bytes in flight: every answer sends the next one.  A socket that got no
 *       answer for 20 ms is topped up with a new window (datagrams lost under overload
 *       must not stall it).  Prints one line: "packets SECONDS_MEASURED ANSWERS LOST_REFILLS".
 *
 * Built by the benchmark with `cc -O2` into its temp dir; not part of twingress.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static int echo(int port) {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = loopback(port);
    int size = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) { perror("bind"); return 1; }
    static char bufs[BATCH][2048];
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    struct sockaddr_in peers[BATCH];
    for (;;) {
        for (int i = 0; i < BATCH; i++) {
            iov[i].iov_base = bufs[i];
            iov[i].iov_len = sizeof bufs[i];
            memset(&msgs[i], 0, sizeof msgs[i]);
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_name = &peers[i];
            msgs[i].msg_hdr.msg_namelen = sizeof peers[i];
        }
        int n = recvmmsg(fd, msgs, BATCH, MSG_WAITFORONE, NULL);
        if (n < 0) { if (errno == EINTR) continue; perror("recvmmsg"); return 1; }
        for (int i = 0; i < n; i++) iov[i].iov_len = msgs[i].msg_len;
        sendmmsg(fd, msgs, n, 0);  /* a full buffer drops answers, as the network would */
    }
}

static int load(int port, int clients, int window, int size, double seconds) {
    int ep = epoll_create1(0);
    int *fds = calloc(clients, sizeof *fds);
    long *answers = calloc(clients, sizeof *answers), *seen = calloc(clients, sizeof *seen);
    char payload[2048], buf[2048];
    memset(payload, 'u', sizeof payload);
    struct sockaddr_in a = loopback(port);
    for (int c = 0; c < clients; c++) {
        fds[c] = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        if (connect(fds[c], (struct sockaddr *)&a, sizeof a) < 0) { perror("connect"); return 1; }
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, fds[c], &ev);
        for (int w = 0; w < window; w++) send(fds[c], payload, size, 0);
    }
    double start = now(), warm = start + 1.0, end = warm + seconds, tick = start + 0.02;
    long counted = 0, refills = 0;
    struct epoll_event events[64];
    for (;;) {
        double t = now();
        if (t >= end) break;
        if (t >= tick) {
            for (int c = 0; c < clients; c++) {
                if (answers[c] == seen[c]) {  /* nothing for 20 ms: its window was lost */
                    for (int w = 0; w < window; w++) send(fds[c], payload, size, 0);
                    refills++;
                }
                seen[c] = answers[c];
            }
            tick = t + 0.02;
        }
        int n = epoll_wait(ep, events, 64, 5);
        for (int i = 0; i < n; i++) {
            int c = events[i].data.u32;
            for (;;) {
                ssize_t got = recv(fds[c], buf, sizeof buf, 0);
                if (got < 0) break;  /* EAGAIN, or ECONNREFUSED while the proxy is not there */
                answers[c]++;
                if (t >= warm) counted++;
                send(fds[c], payload, size, 0);
            }
        }
    }
    printf("packets %.3f %ld %ld\n", seconds, counted, refills);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "echo") == 0) return echo(atoi(argv[2]));
    if (argc == 7 && strcmp(argv[1], "load") == 0)
        return load(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atof(argv[6]));
    fprintf(stderr, "usage: udp_load echo PORT | udp_load load PORT CLIENTS WINDOW SIZE SECONDS\n");
    return 2;
}
