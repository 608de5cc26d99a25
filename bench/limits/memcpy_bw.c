/*
 * memcpy_bw.c: single-thread memcpy bandwidth, the ceiling of any same-host copy.
 *
 *   memcpy_bw SIZE [SIZE ...]          env REPS (default 5), REP_SECONDS (default 0.5)
 *
 * Per size: two page-touched, 64-byte-aligned buffers; 0.2 s of warm-up that also sets how
 * many copies fill REP_SECONDS; then REPS timed repetitions. One JSON line per size with the
 * GB/s of each repetition (bytes copied per second, 1 GB = 1e9 B) and their median/min/max.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_REPS 100

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Called through a volatile pointer so the copies cannot be optimised away. */
static void *(*volatile copy)(void *, const void *, size_t) = memcpy;
static volatile unsigned char seen;

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double env_num(const char *name, double fallback, double lo, double hi) {
    const char *s = getenv(name);
    double v = s ? atof(s) : fallback;
    return v >= lo && v <= hi ? v : fallback;
}

int main(int argc, char **argv) {
    int reps = (int)env_num("REPS", 5, 1, MAX_REPS);
    double rep_s = env_num("REP_SECONDS", 0.5, 0.01, 30);
    for (int arg = 1; arg < argc; arg++) {
        size_t size = strtoull(argv[arg], NULL, 0);
        void *src = NULL, *dst = NULL;
        if (size == 0) continue;
        if (posix_memalign(&src, 64, size) || posix_memalign(&dst, 64, size)) {
            fprintf(stderr, "memcpy_bw: cannot allocate 2 x %zu bytes\n", size);
            return 1;
        }
        memset(src, 0x3C, size);
        memset(dst, 0xC3, size);

        long calls = 0;
        double t0 = seconds();
        while (seconds() - t0 < 0.2) {
            copy(dst, src, size);
            calls++;
        }
        long per_rep = (long)(rep_s / ((seconds() - t0) / (double)calls));
        if (per_rep < 1) per_rep = 1;

        double gbps[MAX_REPS];
        for (int r = 0; r < reps; r++) {
            double start = seconds();
            for (long i = 0; i < per_rep; i++) {
                copy(dst, src, size);
                seen = ((unsigned char *)dst)[(size_t)i % size];
            }
            gbps[r] = (double)size * (double)per_rep / (seconds() - start) / 1e9;
        }
        printf("{\"size\": %zu, \"iters_per_rep\": %ld, \"gbps\": [", size, per_rep);
        for (int r = 0; r < reps; r++) printf(r ? ", %.3f" : "%.3f", gbps[r]);
        qsort(gbps, (size_t)reps, sizeof gbps[0], by_value);
        printf("], \"median\": %.3f, \"min\": %.3f, \"max\": %.3f}\n", gbps[reps / 2], gbps[0],
               gbps[reps - 1]);
        fflush(stdout);
        free(src);
        free(dst);
    }
    return 0;
}
