/*
 * batch_submit.c — cost of the Mooncake C API batch path: allocateBatchID + submitTransfer of
 * N requests of SIZE bytes (default 16,384 x 4 KiB) to a target engine in a child process over
 * loopback TCP. Only the two calls are timed, by the wall clock and by the calling thread's CPU
 * clock (the transfers start during the submit, and on a small or shared machine their threads
 * take the CPU from the submitter: the CPU time is the steadier number). The transfers are then
 * waited for, every byte of the target verified (WRITE), and the batch freed. Prints ns/request
 * per repetition and the medians.
 *
 *   make bench-submit                      (builds and runs it)
 *   batch_submit [REQUESTS [SIZE [REPS [PER_CALL]]]]
 *     PER_CALL: requests per submitTransfer call (default: all in one call)
 *   BATCH_SUBMIT_TIME_ONLY=1: skip the waits (for instruction counting under callgrind, which
 *     serialises every thread and would make the waits long).
 */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "transfer_engine_c.h"

static double clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* CPU time of the calling thread: what the two calls cost, whatever else the machine runs. */
static double cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

static void die(const char *what) {
    fprintf(stderr, "batch_submit: %s failed\n", what);
    exit(1);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Child: an engine with one registered buffer; sends its segment name and the buffer address
 * up `out`, then lives until the parent closes `in`. */
static void run_target(size_t bytes, int out, int in) {
    transfer_engine_t t = createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "127.0.0.1", 0, 1);
    if (!t) die("target engine");
    unsigned char *mem = calloc(1, bytes);
    if (!mem || registerLocalMemory(t, mem, bytes, "cpu:0", 1) != 0) die("target memory");
    char msg[160] = {0};
    if (getLocalIpAndPort(t, msg, 128) != 0) die("getLocalIpAndPort");
    uint64_t addr = (uint64_t)(uintptr_t)mem;
    memcpy(msg + 128, &addr, sizeof addr);
    if (write(out, msg, sizeof msg) != (ssize_t)sizeof msg) die("write to parent");
    char c;
    while (read(in, &c, 1) > 0) {
        /* The parent asks for a check: reply 1 when the pattern of round `c` is in place. */
        unsigned char ok = 1;
        for (size_t i = 0; i < bytes && ok; i++) ok = mem[i] == (unsigned char)(i * 7 + c);
        if (write(out, &ok, 1) != 1) die("reply");
    }
    destroyTransferEngine(t);
    _exit(0);
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 16384;
    size_t size = argc > 2 ? strtoull(argv[2], NULL, 10) : 4096;
    int reps = argc > 3 ? atoi(argv[3]) : 9;
    size_t per_call = argc > 4 ? strtoull(argv[4], NULL, 10) : n;
    int time_only = getenv("BATCH_SUBMIT_TIME_ONLY") != NULL;
    if (n == 0 || size == 0 || reps <= 0 || per_call == 0) die("arguments");
    size_t bytes = n * size;

    int up[2], down[2];
    if (pipe(up) || pipe(down)) die("pipe");
    pid_t child = fork();
    if (child < 0) die("fork");
    if (child == 0) {
        close(up[0]);
        close(down[1]);
        run_target(bytes, up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    char msg[160];
    if (read(up[0], msg, sizeof msg) != (ssize_t)sizeof msg) die("read target name");
    uint64_t remote;
    memcpy(&remote, msg + 128, sizeof remote);

    transfer_engine_t e = createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "127.0.0.1", 0, 1);
    if (!e) die("engine");
    unsigned char *local = malloc(bytes);
    if (!local || registerLocalMemory(e, local, bytes, "cpu:0", 1) != 0) die("local memory");
    segment_id_t seg = openSegment(e, msg);
    if (seg < 0) die("openSegment");

    struct transfer_request *reqs = calloc(n, sizeof *reqs);
    double *ns = calloc((size_t)reps, sizeof *ns), *cpu = calloc((size_t)reps, sizeof *cpu);
    if (!reqs || !ns || !cpu) die("calloc");
    for (size_t i = 0; i < n; i++) {
        reqs[i].opcode = OPCODE_WRITE;
        reqs[i].source = local + i * size;
        reqs[i].target_id = seg;
        reqs[i].target_offset = remote + i * size;
        reqs[i].length = size;
    }
    int failures = 0;
    for (int r = 0; r < reps; r++) {
        for (size_t i = 0; i < bytes; i++) local[i] = (unsigned char)(i * 7 + r);
        double c0 = cpu_ns(), t0 = now_ns();
        batch_id_t b = allocateBatchID(e, n);
        if (b == INVALID_BATCH) die("allocateBatchID");
        for (size_t off = 0; off < n; off += per_call) {
            size_t k = n - off < per_call ? n - off : per_call;
            if (submitTransfer(e, b, reqs + off, k) != 0) die("submitTransfer");
        }
        double t1 = now_ns(), c1 = cpu_ns();
        ns[r] = (t1 - t0) / (double)n;
        cpu[r] = (c1 - c0) / (double)n;
        if (time_only) {
            printf("rep %d: %.1f ns/request (%.1f ns CPU)\n", r, ns[r], cpu[r]);
            while (freeBatchID(e, b) != 0) usleep(1000);
            continue;
        }
        /* Wait for every task, then check the bytes on the target. */
        for (size_t i = 0; i < n; i++) {
            transfer_status_t st;
            for (;;) {
                if (getTransferStatus(e, b, i, &st) != 0) die("getTransferStatus");
                if (st.status != STATUS_WAITING) break;
                usleep(100);
            }
            if (st.status != STATUS_COMPLETED || st.transferred_bytes != size) failures++;
        }
        if (freeBatchID(e, b) != 0) die("freeBatchID");
        char round = (char)r;
        unsigned char ok = 0;
        if (write(down[1], &round, 1) != 1 || read(up[0], &ok, 1) != 1) die("verify round");
        if (!ok) failures++;
        printf("rep %d: %.1f ns/request (%.1f ns CPU; %.2f ms for %zu requests), verified %s\n", r,
               ns[r], cpu[r], (t1 - t0) / 1e6, n, ok ? "ok" : "MISMATCH");
    }
    qsort(ns, (size_t)reps, sizeof *ns, cmp_double);
    qsort(cpu, (size_t)reps, sizeof *cpu, cmp_double);
    printf("allocateBatchID + submitTransfer, %zu x %zu B, %zu per call, %d reps: wall median %.1f "
           "ns/request (min %.1f, max %.1f); thread CPU median %.1f ns/request (min %.1f)\n",
           n, size, per_call, reps, ns[reps / 2], ns[0], ns[reps - 1], cpu[reps / 2], cpu[0]);
    close(down[1]);
    int status = 0;
    waitpid(child, &status, 0);
    destroyTransferEngine(e);
    free(reqs);
    free(ns);
    free(cpu);
    free(local);
    if (failures) fprintf(stderr, "batch_submit: %d failures\n", failures);
    return failures ? 1 : 0;
}
