/*
 * tcp_stream.c: loopback TCP bandwidth with N parallel streams (used when iperf3 is missing,
 * and as a cross-check of it).
 *
 *   tcp_stream STREAMS SECONDS [CHUNK]      CHUNK: bytes per send/recv (default 128 KiB)
 *
 * Each stream is a sender process and a receiver process, so N streams can use 2N cores.
 * Every socket is bound to 127.0.0.1. A receiver times from its first to its last byte and
 * reports through a pipe; the result is all bytes over the longest receiver time, one JSON
 * line, GB/s with 1 GB = 1e9 B. Every process has an alarm() so nothing outlives a stuck run.
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_STREAMS 16

struct report {
    double bytes;
    double seconds;
};

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void receive_all(int listener, int out, size_t chunk) {
    struct report rep = {0, 0};
    char *buf = malloc(chunk);
    int fd = accept(listener, NULL, NULL);
    double first = 0, last = 0;
    ssize_t n;
    if (fd < 0 || !buf) _exit(1);
    while ((n = recv(fd, buf, chunk, 0)) > 0) {
        last = seconds();
        if (rep.bytes == 0) first = last;
        rep.bytes += (double)n;
    }
    rep.seconds = last - first;
    _exit(write(out, &rep, sizeof rep) == sizeof rep ? 0 : 1);
}

static void send_for(const struct sockaddr_in *to, double secs, size_t chunk) {
    char *buf = malloc(chunk);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (!buf || fd < 0 || connect(fd, (const struct sockaddr *)to, sizeof *to)) _exit(1);
    memset(buf, 0x6B, chunk);
    double end = seconds() + secs;
    while (seconds() < end) {
        for (size_t off = 0; off < chunk;) {
            ssize_t n = send(fd, buf + off, chunk - off, 0);
            if (n <= 0) _exit(1);
            off += (size_t)n;
        }
    }
    close(fd);
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s STREAMS SECONDS [CHUNK]\n", argv[0]);
        return 2;
    }
    int streams = atoi(argv[1]);
    double secs = atof(argv[2]);
    size_t chunk = argc > 3 ? strtoull(argv[3], NULL, 0) : 128 * 1024;
    if (streams < 1 || streams > MAX_STREAMS || secs <= 0 || secs > 60 || chunk == 0) return 2;

    struct sockaddr_in addr;
    socklen_t len = sizeof addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    int pipefd[2];
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) ||
        listen(listener, MAX_STREAMS) || getsockname(listener, (struct sockaddr *)&addr, &len) ||
        pipe(pipefd)) {
        perror("tcp_stream: setup");
        return 1;
    }
    unsigned limit = (unsigned)secs + 30;
    alarm(limit);
    for (int i = 0; i < 2 * streams; i++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            alarm(limit);
            if (i < streams) receive_all(listener, pipefd[1], chunk);
            close(listener);
            send_for(&addr, secs, chunk);
        }
    }
    close(listener);
    close(pipefd[1]);
    while (wait(NULL) > 0) {
    }
    double total = 0, longest = 0;
    for (int i = 0; i < streams; i++) {
        struct report rep;
        if (read(pipefd[0], &rep, sizeof rep) != sizeof rep) {
            fprintf(stderr, "tcp_stream: a receiver did not report\n");
            return 1;
        }
        total += rep.bytes;
        if (rep.seconds > longest) longest = rep.seconds;
    }
    printf("{\"streams\": %d, \"chunk\": %zu, \"seconds\": %.3f, \"bytes\": %.0f, "
           "\"gbytes_per_s\": %.3f}\n",
           streams, chunk, longest, total, longest > 0 ? total / longest / 1e9 : 0.0);
    return 0;
}
