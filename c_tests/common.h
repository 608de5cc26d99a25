/*
 * common.h — tiny check macros shared by the C test programs.
 *
 *   CHECK(cond, msg)     counts a pass when cond holds, otherwise prints file:line, msg and the
 *                        calling thread's last tidewire error.
 *   CHECK_RC(expr, code) evaluates expr once and compares the result code with code.
 *   test_footer()        prints exactly "N passed, M failed" and returns the exit status.
 *   now_s(), sleep_ms(), pattern_byte(), fill_pattern(): small helpers (need _POSIX_C_SOURCE).
 *
 * The counters are plain ints: use the macros from the main thread only (worker threads report
 * back through their own structs).
 *
 * A program that loads the library with dlopen defines COMMON_LAST_ERROR(buf, len) and
 * COMMON_RESULT_STR(code) before including this file, so nothing here needs link-time symbols.
 */
#ifndef TW_C_TESTS_COMMON_H
#define TW_C_TESTS_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tidewire.h"

#ifndef COMMON_LAST_ERROR
#define COMMON_LAST_ERROR(buf, len) tw_last_error_message((buf), (len))
#endif
#ifndef COMMON_RESULT_STR
#define COMMON_RESULT_STR(code) tw_result_str(code)
#endif

static int common_passed;
static int common_failed;

static void common_fail(const char *file, int line, const char *what) {
    char detail[512];
    detail[0] = '\0';
    COMMON_LAST_ERROR(detail, sizeof detail);
    common_failed++;
    fprintf(stderr, "FAIL %s:%d: %s\n     last error: %s\n", file, line, what,
            detail[0] ? detail : "(none)");
}

#define CHECK(cond, msg)                              \
    do {                                              \
        if (cond) {                                   \
            common_passed++;                          \
        } else {                                      \
            common_fail(__FILE__, __LINE__, (msg));   \
        }                                             \
    } while (0)

#define CHECK_RC(expr, code)                                                              \
    do {                                                                                  \
        const long common_got_ = (long)(expr);                                           \
        const long common_want_ = (long)(code);                                          \
        if (common_got_ == common_want_) {                                               \
            common_passed++;                                                             \
        } else {                                                                         \
            char common_msg_[768];                                                       \
            snprintf(common_msg_, sizeof common_msg_, "%s returned %ld (%s), expected %ld (%s)", \
                     #expr, common_got_, COMMON_RESULT_STR((tw_result)common_got_),      \
                     common_want_, COMMON_RESULT_STR((tw_result)common_want_));          \
            common_fail(__FILE__, __LINE__, common_msg_);                                \
        }                                                                                 \
    } while (0)

/* Prints the summary line and returns the process exit status (0 when nothing failed). */
static int test_footer(void) {
    printf("%d passed, %d failed\n", common_passed, common_failed);
    fflush(stdout);
    return common_failed == 0 ? 0 : 1;
}

/* Shared helpers of the native test programs (static inline: unused ones cost nothing). */

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A deterministic byte pattern: byte i of pattern `seed`. */
static inline uint8_t pattern_byte(size_t i, unsigned seed) {
    return (uint8_t)(i * 31u + seed * 7u + 11u);
}

static inline void fill_pattern(uint8_t *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = pattern_byte(i, seed);
}

#endif /* TW_C_TESTS_COMMON_H */
