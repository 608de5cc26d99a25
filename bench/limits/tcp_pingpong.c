/*
 * tcp_pingpong.c: loopback TCP round trip, the floor under any small synchronous transfer.
 *
 *   tcp_pingpong BYTES SECONDS [MAX_SAMPLES]
 *
 * A child process echoes BYTES-sized messages; the parent sends one, waits for the whole echo,
 * and records the round trip, for SECONDS after 2000 untimed warm-up round trips. TCP_NODELAY
 * on both ends, 127.0.0.1 only, alarm() on both processes. One JSON line: p50/p99/mean/min in us.
 */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double micros(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* Move exactly n bytes; 0 on success. */
static int exact(int fd, char *buf, size_t n, int sending) {
    for (size_t done = 0; done < n;) {
        ssize_t r = sending ? send(fd, buf + done, n - done, 0) : recv(fd, buf + done, n - done, 0);
        if (r <= 0) return -1;
        done += (size_t)r;
    }
    return 0;
}

static void no_delay(int fd) {
    int on = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s BYTES SECONDS [MAX_SAMPLES]\n", argv[0]);
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0);
    double secs = atof(argv[2]);
    long max_samples = argc > 3 ? atol(argv[3]) : 2000000;
    if (size == 0 || size > (1u << 20) || secs <= 0 || secs > 60 || max_samples < 1) return 2;

    struct sockaddr_in addr;
    socklen_t len = sizeof addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) ||
        listen(listener, 1) || getsockname(listener, (struct sockaddr *)&addr, &len)) {
        perror("tcp_pingpong: setup");
        return 1;
    }
    char *msg = calloc(1, size);
    double *rtt = malloc(sizeof *rtt * (size_t)max_samples);
    if (!msg || !rtt) return 1;
    alarm((unsigned)secs + 30);

    pid_t echo = fork();
    if (echo < 0) return 1;
    if (echo == 0) {
        int fd = accept(listener, NULL, NULL);
        if (fd < 0) _exit(1);
        no_delay(fd);
        while (exact(fd, msg, size, 0) == 0 && exact(fd, msg, size, 1) == 0) {
        }
        _exit(0);
    }
    close(listener);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr)) {
        perror("tcp_pingpong: connect");
        return 1;
    }
    no_delay(fd);
    for (int i = 0; i < 2000; i++)
        if (exact(fd, msg, size, 1) || exact(fd, msg, size, 0)) return 1;

    long n = 0;
    double sum = 0, end = micros() + secs * 1e6;
    while (n < max_samples) {
        double t0 = micros();
        if (exact(fd, msg, size, 1) || exact(fd, msg, size, 0)) break;
        double t1 = micros();
        rtt[n++] = t1 - t0;
        sum += t1 - t0;
        if (t1 > end) break;
    }
    close(fd);
    waitpid(echo, NULL, 0);
    if (n == 0) return 1;
    qsort(rtt, (size_t)n, sizeof *rtt, by_value);
    printf("{\"msg_bytes\": %zu, \"samples\": %ld, \"p50_us\": %.2f, \"p99_us\": %.2f, "
           "\"mean_us\": %.2f, \"min_us\": %.2f}\n",
           size, n, rtt[n / 2], rtt[(long)((double)n * 0.99)], sum / (double)n, rtt[0]);
    return 0;
}
