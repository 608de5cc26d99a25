/*
 * test_native_scatter.c — scatter operations (tw_scatter_*) between two engines over real TCP on
 * 127.0.0.1: many small fragments, per-fragment results and callbacks, partial failures.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define FRAG 128
#define MAX_FRAGS 32768
#define GAP_FILL 0xcc





static int all_bytes(const uint8_t *p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

/* What the callback saw. */
struct tally {
    size_t n;
    unsigned *calls;     /* calls per fragment index */
    tw_result *results;  /* result passed to the callback */
    size_t out_of_range; /* indices >= n */
    size_t wrong_thread; /* calls not on the waiting/freeing thread */
    pthread_t waiter;
};

static void on_fragment(void *user, size_t fragment, tw_result result) {
    struct tally *t = user;
    if (!pthread_equal(pthread_self(), t->waiter)) t->wrong_thread++;
    if (fragment >= t->n) {
        t->out_of_range++;
        return;
    }
    t->calls[fragment]++;
    t->results[fragment] = result;
}

static void tally_init(struct tally *t, size_t n) {
    t->n = n;
    t->calls = calloc(n ? n : 1, sizeof *t->calls);
    t->results = malloc((n ? n : 1) * sizeof *t->results);
    for (size_t i = 0; i < n; i++) t->results[i] = 12345;
    t->out_of_range = 0;
    t->wrong_thread = 0;
    t->waiter = pthread_self();
}

static void tally_free(struct tally *t) {
    free(t->calls);
    free(t->results);
}

static size_t calls_not_once(const struct tally *t) {
    size_t bad = 0;
    for (size_t i = 0; i < t->n; i++) bad += t->calls[i] != 1;
    return bad + t->out_of_range;
}

struct pair {
    tw_engine *a, *b;
    int32_t seg; /* b as opened by a */
    uint8_t *remote; /* on b: MAX_FRAGS * FRAG contiguous pattern bytes */
    uint8_t *local;  /* on a: MAX_FRAGS * 2 * FRAG, fragment i at i * 2 * FRAG */
};

/*
 * READ of n fragments of 128 B: contiguous remote source, gapped local destination. Waits with
 * timeout 0 until done (bounded), then checks bytes, results and callbacks.
 */
static void scatter_read(struct pair *p, size_t n) {
    char what[96];
    memset(p->local, GAP_FILL, (size_t)MAX_FRAGS * 2 * FRAG);
    size_t *lo = malloc(n * sizeof *lo), *ro = malloc(n * sizeof *ro), *len = malloc(n * sizeof *len);
    for (size_t i = 0; i < n; i++) {
        lo[i] = i * 2 * FRAG;
        ro[i] = i * FRAG;
        len[i] = FRAG;
    }
    tw_scatter_range r = {TW_OPCODE_READ, p->seg, (uint64_t)(uintptr_t)p->remote,
                          (uint64_t)MAX_FRAGS * FRAG, p->local, (size_t)MAX_FRAGS * 2 * FRAG,
                          lo, ro, len, n};
    struct tally t;
    tally_init(&t, n);
    tw_result *results = malloc(n * sizeof *results);
    for (size_t i = 0; i < n; i++) results[i] = 12345;

    double t0 = now_s();
    uint64_t op = 0;
    CHECK_RC(tw_scatter_submit(p->a, &r, 1, on_fragment, &t, &op), TW_OK);
    free(lo); /* the arrays are read during submit only */
    free(ro);
    free(len);

    /* Poll with timeout 0: TIMEOUT may repeat until everything is done. */
    tw_result rc = TW_ERR_TIMEOUT;
    int polls = 0, timeouts = 0, others = 0;
    double deadline = now_s() + 20.0;
    while (rc == TW_ERR_TIMEOUT && now_s() < deadline) {
        rc = tw_scatter_wait(p->a, op, 0, results, n);
        polls++;
        if (rc == TW_ERR_TIMEOUT) {
            timeouts++;
            sleep_ms(1);
        } else if (rc != TW_OK) {
            others++;
        }
    }
    snprintf(what, sizeof what, "%zu fragments: wait(0) polling ends in TW_OK", n);
    CHECK_RC(rc, TW_OK);
    CHECK(others == 0, what);
    double took = now_s() - t0;

    size_t bad_bytes = 0, bad_gaps = 0, bad_results = 0, bad_cb = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *dst = p->local + i * 2 * FRAG;
        bad_bytes += memcmp(dst, p->remote + i * FRAG, FRAG) != 0;
        bad_gaps += !all_bytes(dst + FRAG, FRAG, GAP_FILL);
        bad_results += results[i] != TW_OK;
        bad_cb += t.results[i] != TW_OK;
    }
    snprintf(what, sizeof what, "%zu fragments: every byte landed at its gapped offset", n);
    CHECK(bad_bytes == 0, what);
    snprintf(what, sizeof what, "%zu fragments: gaps untouched", n);
    CHECK(bad_gaps == 0, what);
    CHECK(all_bytes(p->local + n * 2 * FRAG, (MAX_FRAGS - n) * 2 * FRAG, GAP_FILL),
          "nothing written past the last fragment");
    snprintf(what, sizeof what, "%zu fragments: results array all TW_OK", n);
    CHECK(bad_results == 0, what);
    snprintf(what, sizeof what, "%zu fragments: callback exactly once per fragment", n);
    CHECK(calls_not_once(&t) == 0, what);
    CHECK(bad_cb == 0, "callback results all TW_OK");
    CHECK(t.wrong_thread == 0, "callbacks run on the waiting thread");

    /* Waiting again is harmless and fires nothing new. */
    CHECK_RC(tw_scatter_wait(p->a, op, 0, NULL, 0), TW_OK);
    CHECK_RC(tw_scatter_wait(p->a, op, -1, results, n), TW_OK);
    CHECK_RC(tw_scatter_free(p->a, op), TW_OK);
    CHECK(calls_not_once(&t) == 0, "free fires nothing twice");
    CHECK_RC(tw_scatter_free(p->a, op), TW_ERR_INVALID_ID);
    CHECK_RC(tw_scatter_wait(p->a, op, 0, NULL, 0), TW_ERR_INVALID_ID);
    printf("note: scatter READ of %zu x %d B: %.3f s, %d polls (%d timeouts)\n", n, FRAG, took,
           polls, timeouts);
    free(results);
    tally_free(&t);
}

/* READ and WRITE with deliberate per-fragment failures over several ranges. */
static void scatter_partial(struct pair *p) {
    /* On b: [0, 8K) remote-accessible, [8K, 16K) registered but private. */
    uint8_t *mixed = aligned_alloc(4096, 16384);
    fill_pattern(mixed, 8192, 77);
    memset(mixed + 8192, 0x5a, 8192);
    CHECK_RC(tw_memory_register(p->b, mixed, 8192, "cpu:0", true), TW_OK);
    CHECK_RC(tw_memory_register(p->b, mixed + 8192, 8192, "cpu:0", false), TW_OK);
    /* On a: a read destination and a write source. */
    uint8_t *dst = malloc(8192), *src = malloc(4096), *unreg = malloc(1024);
    memset(dst, GAP_FILL, 8192);
    fill_pattern(src, 4096, 78);
    CHECK_RC(tw_memory_register(p->a, dst, 8192, NULL, true), TW_OK);
    CHECK_RC(tw_memory_register(p->a, src, 4096, NULL, true), TW_OK);

    enum { N0 = 68, N1 = 32, N2 = 4, N3 = 2, N4 = 2, TOTAL = N0 + N1 + N2 + N3 + N4 };
    size_t lo0[N0], ro0[N0], len0[N0];
    tw_result want[TOTAL];
    /* Range 0, READ from mixed + 4K over 8K: 64 fragments contiguous on both sides, so they
       travel coalesced; the second half lies in private memory, so the peer rejects the whole
       request and only fragments 32..63 may end up REJECTED. Then: remote out of bounds, local
       out of bounds, zero length, overflowing length. */
    for (size_t i = 0; i < 64; i++) {
        lo0[i] = i * FRAG;
        ro0[i] = i * FRAG;
        len0[i] = FRAG;
        want[i] = i < 32 ? TW_OK : TW_ERR_REJECTED;
    }
    lo0[64] = 0, ro0[64] = 8192, len0[64] = FRAG, want[64] = TW_ERR_INVALID_ARGUMENT;
    lo0[65] = 8192 - 64, ro0[65] = 0, len0[65] = FRAG, want[65] = TW_ERR_INVALID_ARGUMENT;
    lo0[66] = 100, ro0[66] = 100, len0[66] = 0, want[66] = TW_OK;
    lo0[67] = 0, ro0[67] = 0, len0[67] = SIZE_MAX, want[67] = TW_ERR_INVALID_ARGUMENT;

    /* Range 1, WRITE into mixed: 16 fragments to [2K, 4K) (coalesced, fine), 16 to private
       [12K, 14K) (rejected). */
    size_t lo1[N1], ro1[N1], len1[N1];
    for (size_t i = 0; i < N1; i++) {
        lo1[i] = i * FRAG;
        ro1[i] = i < 16 ? 2048 + i * FRAG : 12288 + (i - 16) * FRAG;
        len1[i] = FRAG;
        want[N0 + i] = i < 16 ? TW_OK : TW_ERR_REJECTED;
    }
    /* Range 2: a segment nobody opened. Range 3: NULL local base. Range 4: local memory that is
       not registered. */
    size_t lo2[N2] = {0, 128, 256, 384}, ro2[N2] = {0, 128, 256, 384},
           len2[N2] = {FRAG, FRAG, FRAG, FRAG};
    for (size_t i = 0; i < N2; i++) want[N0 + N1 + i] = TW_ERR_UNKNOWN_SEGMENT;
    for (size_t i = 0; i < N3; i++) want[N0 + N1 + N2 + i] = TW_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < N4; i++) want[N0 + N1 + N2 + N3 + i] = TW_ERR_ADDRESS_NOT_REGISTERED;

    const uint64_t mixed_at = (uint64_t)(uintptr_t)mixed;
    tw_scatter_range ranges[5] = {
        {TW_OPCODE_READ, p->seg, mixed_at + 4096, 8192, dst, 8192, lo0, ro0, len0, N0},
        {TW_OPCODE_WRITE, p->seg, mixed_at, 16384, src, 4096, lo1, ro1, len1, N1},
        {TW_OPCODE_READ, 999, mixed_at, 8192, dst, 8192, lo2, ro2, len2, N2},
        {TW_OPCODE_READ, p->seg, mixed_at, 8192, NULL, 8192, lo2, ro2, len2, N3},
        {TW_OPCODE_READ, p->seg, mixed_at, 8192, unreg, 1024, lo2, ro2, len2, N4},
    };
    struct tally t;
    tally_init(&t, TOTAL);
    tw_result results[TOTAL];
    for (size_t i = 0; i < TOTAL; i++) results[i] = 12345;
    uint64_t op = 0;
    CHECK_RC(tw_scatter_submit(p->a, ranges, 5, on_fragment, &t, &op), TW_OK);

    tw_result small[4];
    CHECK_RC(tw_scatter_wait(p->a, op, 0, small, 4), TW_ERR_BUFFER_TOO_SMALL);
    tw_result rc = tw_scatter_wait(p->a, op, 10000, results, TOTAL);
    CHECK_RC(rc, TW_ERR_REJECTED); /* lowest-indexed failure: fragment 32 */

    size_t mismatched = 0;
    for (size_t i = 0; i < TOTAL; i++) {
        if (results[i] != want[i]) {
            if (mismatched++ < 5)
                fprintf(stderr, "     fragment %zu: got %s, want %s\n", i, tw_result_str(results[i]),
                        tw_result_str(want[i]));
        }
    }
    CHECK(mismatched == 0, "each fragment has exactly its own result");
    CHECK(calls_not_once(&t) == 0, "callback exactly once per fragment, failures included");
    CHECK(memcmp(t.results, results, sizeof results) == 0, "callback results match the array");
    CHECK(t.wrong_thread == 0, "callbacks run on the waiting thread");

    CHECK(memcmp(dst, mixed + 4096, 4096) == 0, "coalesced neighbours of a rejected part read OK");
    CHECK(all_bytes(dst + 4096, 4096, GAP_FILL), "rejected fragments wrote nothing locally");
    CHECK(memcmp(mixed + 2048, src, 2048) == 0, "accepted write fragments landed");
    CHECK(all_bytes(mixed + 8192, 8192, 0x5a), "private memory untouched by rejected writes");
    uint8_t expect_head[2048];
    fill_pattern(expect_head, 2048, 77);
    CHECK(memcmp(mixed, expect_head, 2048) == 0, "memory outside the fragments untouched");

    CHECK_RC(tw_scatter_free(p->a, op), TW_OK);
    CHECK(calls_not_once(&t) == 0, "no callback after free");
    tally_free(&t);

    CHECK_RC(tw_memory_unregister(p->b, mixed), TW_OK);
    CHECK_RC(tw_memory_unregister(p->b, mixed + 8192), TW_OK);
    CHECK_RC(tw_memory_unregister(p->a, dst), TW_OK);
    CHECK_RC(tw_memory_unregister(p->a, src), TW_OK);
    free(mixed);
    free(dst);
    free(src);
    free(unreg);
}

/* Zero-length fragments only, an empty operation, and call-level errors. */
static void scatter_edges(struct pair *p) {
    size_t lo[3] = {0, 64, 4096}, ro[3] = {0, 1, 2}, len[3] = {0, 0, 0};
    tw_scatter_range r = {TW_OPCODE_WRITE, p->seg, (uint64_t)(uintptr_t)p->remote, 4096,
                          p->local, 8192, lo, ro, len, 3};
    struct tally t;
    tally_init(&t, 3);
    uint64_t op = 0;
    CHECK_RC(tw_scatter_submit(p->a, &r, 1, on_fragment, &t, &op), TW_OK);
    tw_result res[3] = {9, 9, 9};
    CHECK_RC(tw_scatter_wait(p->a, op, 0, res, 3), TW_OK);
    CHECK(res[0] == TW_OK && res[1] == TW_OK && res[2] == TW_OK, "zero-length fragments OK");
    CHECK(calls_not_once(&t) == 0, "zero-length fragments get their callback");
    CHECK_RC(tw_scatter_free(p->a, op), TW_OK);
    tally_free(&t);

    /* No ranges at all; no callback. */
    CHECK_RC(tw_scatter_submit(p->a, NULL, 0, NULL, NULL, &op), TW_OK);
    CHECK_RC(tw_scatter_wait(p->a, op, 1000, NULL, 0), TW_OK);
    CHECK_RC(tw_scatter_free(p->a, op), TW_OK);

    uint64_t keep = 777;
    CHECK_RC(tw_scatter_submit(NULL, &r, 1, NULL, NULL, &keep), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_scatter_submit(p->a, &r, 1, NULL, NULL, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_scatter_submit(p->a, NULL, 1, NULL, NULL, &keep), TW_ERR_NULL_ARGUMENT);
    tw_scatter_range no_arrays = r;
    no_arrays.lengths = NULL;
    CHECK_RC(tw_scatter_submit(p->a, &no_arrays, 1, NULL, NULL, &keep), TW_ERR_NULL_ARGUMENT);
    tw_scatter_range bad_op = r;
    bad_op.opcode = 2;
    CHECK_RC(tw_scatter_submit(p->a, &bad_op, 1, NULL, NULL, &keep), TW_ERR_INVALID_ARGUMENT);
    CHECK(keep == 777, "failed submit leaves the id output alone");

    const uint64_t forged[] = {0, 1, 99999, UINT64_MAX};
    for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
        CHECK_RC(tw_scatter_wait(p->a, forged[i], 0, NULL, 0), TW_ERR_INVALID_ID);
        CHECK_RC(tw_scatter_free(p->a, forged[i]), TW_ERR_INVALID_ID);
    }
    CHECK_RC(tw_scatter_wait(NULL, 1, 0, NULL, 0), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_scatter_free(NULL, 1), TW_ERR_NULL_ARGUMENT);
}

/* Free without waiting: it waits for physical completion and fires every callback first. */
static void scatter_free_waits(struct pair *p) {
    const size_t n = 4096;
    memset(p->local, GAP_FILL, (size_t)MAX_FRAGS * 2 * FRAG);
    size_t *lo = malloc(n * sizeof *lo), *ro = malloc(n * sizeof *ro), *len = malloc(n * sizeof *len);
    for (size_t i = 0; i < n; i++) {
        lo[i] = (n - 1 - i) * 2 * FRAG; /* reversed order, still gapped */
        ro[i] = i * FRAG;
        len[i] = FRAG;
    }
    tw_scatter_range r = {TW_OPCODE_READ, p->seg, (uint64_t)(uintptr_t)p->remote,
                          (uint64_t)MAX_FRAGS * FRAG, p->local, (size_t)MAX_FRAGS * 2 * FRAG,
                          lo, ro, len, n};
    struct tally t;
    tally_init(&t, n);
    uint64_t op = 0;
    CHECK_RC(tw_scatter_submit(p->a, &r, 1, on_fragment, &t, &op), TW_OK);
    CHECK_RC(tw_scatter_free(p->a, op), TW_OK);
    CHECK(calls_not_once(&t) == 0, "free fired every callback exactly once");
    CHECK(t.wrong_thread == 0, "callbacks run on the freeing thread");
    size_t bad = 0, failed = 0;
    for (size_t i = 0; i < n; i++) {
        bad += memcmp(p->local + (n - 1 - i) * 2 * FRAG, p->remote + i * FRAG, FRAG) != 0;
        failed += t.results[i] != TW_OK;
    }
    CHECK(failed == 0, "every fragment succeeded");
    CHECK(bad == 0, "after free every byte is in place");
    CHECK_RC(tw_scatter_wait(p->a, op, 0, NULL, 0), TW_ERR_INVALID_ID);
    free(lo);
    free(ro);
    free(len);
    tally_free(&t);
}

static tw_engine *new_engine(void) {
    tw_config *cfg = NULL;
    tw_engine *e = NULL;
    if (tw_config_new(&cfg) != TW_OK) return NULL;
    if (tw_config_set(cfg, "connect_timeout_ms", "1000") != TW_OK ||
        tw_config_set(cfg, "io_timeout_ms", "10000") != TW_OK || tw_engine_new(cfg, &e) != TW_OK)
        e = NULL;
    tw_config_free(cfg);
    return e;
}

int main(void) {
    double t0 = now_s();
    struct pair p;
    p.a = new_engine();
    p.b = new_engine();
    CHECK(p.a != NULL && p.b != NULL, "two engines start");
    if (p.a == NULL || p.b == NULL) {
        tw_engine_free(p.a);
        tw_engine_free(p.b);
        return test_footer();
    }
    char b_name[64];
    CHECK_RC(tw_engine_segment_name(p.b, b_name, sizeof b_name), TW_OK);
    p.seg = -1;
    CHECK_RC(tw_segment_open(p.a, b_name, &p.seg), TW_OK);

    const size_t remote_len = (size_t)MAX_FRAGS * FRAG, local_len = 2 * remote_len;
    p.remote = malloc(remote_len);
    p.local = malloc(local_len);
    fill_pattern(p.remote, remote_len, 1);
    CHECK_RC(tw_memory_register(p.b, p.remote, remote_len, "cpu:0", true), TW_OK);
    CHECK_RC(tw_memory_register(p.a, p.local, local_len, "cpu:0", true), TW_OK);

    scatter_read(&p, 1);
    scatter_read(&p, 4096);
    scatter_read(&p, MAX_FRAGS);
    scatter_partial(&p);
    scatter_edges(&p);
    scatter_free_waits(&p);

    CHECK_RC(tw_memory_unregister(p.a, p.local), TW_OK);
    CHECK_RC(tw_memory_unregister(p.b, p.remote), TW_OK);
    tw_engine_free(p.a);
    tw_engine_free(p.b);
    free(p.local);
    free(p.remote);
    printf("note: test_native_scatter took %.2f s\n", now_s() - t0);
    return test_footer();
}
