/*
 * NIXL's Mooncake backend pattern on the Mooncake C API, between two engines in two processes.
 *
 * The plugin creates its engine with createTransferEngine("P2PHANDSHAKE", ip, "", 0, true),
 * registers with registerLocalMemory(addr, len, "*", 1), allocates a batch of 1024 per post,
 * posts with submitTransfer or submitTransferWithNotify, polls getTransferStatus per task until
 * it reads COMPLETED or FAILED, calls freeBatchID at once (ignoring its result), and drains
 * notifications with getNotifsFromEngine/freeNotifsMsgBuf; genNotifyInEngine sends its own.
 * A lost notification hangs a NIXL target, which waits for an exact count.
 *
 * Both processes run the same program at the same time (both sides post at once). Each phase:
 *   1. 2,000 posts of 4 KiB with a notification, polled to COMPLETED and freed at once: every
 *      freeBatchID returns 0 and every notification arrives exactly once, its bytes already in
 *      place when it is taken.
 *   2. A sweep, 4 KiB to 64 MiB per descriptor, 1 to 1,024 descriptors a post, with and without
 *      a notification (genNotifyInEngine after the ones without): WRITE, then READ back, every
 *      byte compared.
 *   3. Eight posts in flight together, polled and freed afterwards.
 *   4. More descriptors than the batch holds: 2 (too many requests), nothing sent.
 * Between phases the two sides meet (a pipe each way): each tells the other how many
 * notifications it sent, and waits until it has received exactly as many from the other.
 *
 * Runs on the same-host path by default and on TCP with TW_SAME_HOST=0 (the Makefile runs both).
 */
#define _POSIX_C_SOURCE 200809L

#include "transfer_engine_c.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KiB ((uint64_t)1024)
#define MiB (1024 * KiB)
#define AREA (64 * MiB)
/* Source, landing area (written by the peer) and read-back area. */
#define REGION (3 * AREA)
#define ROUNDS 2000
#define SLOT (4 * KiB)
#define BATCH_SIZE 1024
#define IN_FLIGHT 8
#define IN_FLIGHT_DESCS 64
#define IN_FLIGHT_LEN (64 * KiB)
/* Notification names by phase; the message carries the post's number. */
#define PHASES 4

static int passed, failed;
static const char *side = "?";

#define CHECK(cond, ...)                                            \
    do {                                                            \
        if (cond) {                                                 \
            passed++;                                               \
        } else {                                                    \
            failed++;                                               \
            fprintf(stderr, "FAIL [%s] %s:%d: ", side, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                           \
            fputc('\n', stderr);                                    \
        }                                                           \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint8_t pattern(uint64_t i, unsigned seed) {
    return (uint8_t)((i * 131u) ^ (i >> 11) ^ (seed * 2654435761u >> 7));
}

static void fill(uint8_t *p, uint64_t n, unsigned seed) {
    for (uint64_t i = 0; i < n; i++) p[i] = pattern(i, seed);
}

/* Offset of the first wrong byte, or n when every byte matches. */
static uint64_t first_wrong(const uint8_t *p, uint64_t n, unsigned seed) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != pattern(i, seed)) return i;
    return n;
}

/* ---------------------------------------------------------------- the two sides meet */

static int to_peer = -1, from_peer = -1;

static void send_u64(uint64_t v) {
    if (write(to_peer, &v, sizeof v) != (ssize_t)sizeof v) {
        fprintf(stderr, "[%s] pipe to the peer broke\n", side);
        exit(3);
    }
}

static uint64_t recv_u64(void) {
    uint64_t v;
    if (read(from_peer, &v, sizeof v) != (ssize_t)sizeof v) {
        fprintf(stderr, "[%s] pipe from the peer broke\n", side);
        exit(3);
    }
    return v;
}

/* ---------------------------------------------------------------- notification collector */

static transfer_engine_t engine;
static uint8_t *region;
static atomic_int stop_collector;
static atomic_ulong received[PHASES];
static atomic_ulong duplicates, malformed, bytes_wrong;
/* One flag per post number and phase (post numbers stay below ROUNDS in every phase). */
static atomic_uchar seen[PHASES][ROUNDS];

/* The landing area's layout of each phase, so a notification's bytes are checked when taken. */
static void check_landed(int phase, unsigned post) {
    const uint8_t *land = region + AREA;
    if (phase == 0) {
        uint64_t at = first_wrong(land + (uint64_t)post * SLOT, SLOT, 1000u + post);
        if (at != SLOT) atomic_fetch_add(&bytes_wrong, 1);
    } else if (phase == 2) {
        for (unsigned d = 0; d < IN_FLIGHT_DESCS; d++) {
            uint64_t off = ((uint64_t)post * IN_FLIGHT_DESCS + d) * IN_FLIGHT_LEN;
            if (first_wrong(land + off, IN_FLIGHT_LEN, 5000u + post * 97u + d) != IN_FLIGHT_LEN)
                atomic_fetch_add(&bytes_wrong, 1);
        }
    }
    /* Phase 1 (the sweep) is checked by reading the bytes back on the sender. */
}

static void take_one(const notify_msg_t *m) {
    int phase;
    unsigned post;
    if (m->name == NULL || m->msg == NULL || sscanf(m->name, "nixl-phase-%d", &phase) != 1 ||
        phase < 0 || phase >= PHASES || sscanf(m->msg, "post %u", &post) != 1 || post >= ROUNDS) {
        atomic_fetch_add(&malformed, 1);
        return;
    }
    if (atomic_exchange(&seen[phase][post], 1)) {
        atomic_fetch_add(&duplicates, 1);
        return;
    }
    check_landed(phase, post);
    atomic_fetch_add(&received[phase], 1);
}

static void *collector(void *arg) {
    (void)arg;
    while (!atomic_load(&stop_collector)) {
        int n = 0;
        notify_msg_t *list = getNotifsFromEngine(engine, &n);
        for (int i = 0; i < n; i++) take_one(&list[i]);
        if (list != NULL) freeNotifsMsgBuf(list, n);
        if (n == 0) {
            struct timespec ts = {0, 50 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* Tells the peer how many notifications this side sent in `phase`, and waits (at most 20 s)
 * until exactly as many as the peer says it sent have arrived here. */
static void meet(int phase, uint64_t sent) {
    send_u64(sent);
    uint64_t expect = recv_u64();
    double deadline = now_s() + 20.0;
    while (atomic_load(&received[phase]) < expect && now_s() < deadline) {
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
    /* A moment more, so a duplicate sent after the last expected one is seen too. */
    struct timespec settle = {0, 20 * 1000 * 1000};
    nanosleep(&settle, NULL);
    CHECK(atomic_load(&received[phase]) == expect,
          "phase %d: received %lu notifications, the peer sent %lu", phase,
          (unsigned long)atomic_load(&received[phase]), (unsigned long)expect);
    /* Both sides have checked their landing areas before either writes the next phase's. */
    send_u64(0xACC);
    CHECK(recv_u64() == 0xACC, "phase %d: the peer did not finish the phase", phase);
}

/* ---------------------------------------------------------------- posting, as the plugin does */

static transfer_request_t request(int op, uint64_t local_off, segment_id_t seg, uint64_t remote,
                                  uint64_t len) {
    transfer_request_t r;
    memset(&r, 0, sizeof r);
    r.opcode = op;
    r.source = region + local_off;
    r.target_id = seg;
    r.target_offset = remote;
    r.length = len;
    return r;
}

/* Polls every task of a post until each reads COMPLETED or FAILED (at most 30 s). Returns the
 * number that completed. */
static size_t poll_post(batch_id_t b, size_t tasks) {
    size_t completed = 0;
    for (size_t t = 0; t < tasks; t++) {
        transfer_status_t st = {-1, 0};
        double deadline = now_s() + 30.0;
        for (;;) {
            int rc = getTransferStatus(engine, b, t, &st);
            if (rc != 0) {
                CHECK(0, "getTransferStatus(task %zu) returned %d", t, rc);
                break;
            }
            if (st.status == STATUS_COMPLETED || st.status == STATUS_FAILED) break;
            if (now_s() > deadline) {
                CHECK(0, "task %zu still waiting after 30 s", t);
                break;
            }
        }
        if (st.status == STATUS_COMPLETED) completed++;
    }
    return completed;
}

/* One post: allocate, submit (with a notification when `note` is set), poll, free at once. */
static int post(transfer_request_t *reqs, size_t n, const char *name, const char *note) {
    batch_id_t b = allocateBatchID(engine, BATCH_SIZE);
    if (b == INVALID_BATCH) {
        CHECK(0, "allocateBatchID failed");
        return 0;
    }
    int rc;
    if (note != NULL) {
        notify_msg_t nm = {(char *)name, (char *)note};
        rc = submitTransferWithNotify(engine, b, reqs, n, nm);
    } else {
        rc = submitTransfer(engine, b, reqs, n);
    }
    CHECK(rc == 0, "submit of %zu descriptors returned %d", n, rc);
    size_t done = rc == 0 ? poll_post(b, n) : 0;
    CHECK(rc != 0 || done == n, "%zu of %zu tasks completed", done, n);
    int freed = freeBatchID(engine, b);
    CHECK(freed == 0, "freeBatchID right after the last COMPLETED returned %d", freed);
    return rc == 0 && done == n;
}

/* ---------------------------------------------------------------- the phases */

static void phase_small_posts(segment_id_t peer, uint64_t peer_land) {
    char note[32];
    double t0 = now_s();
    for (unsigned i = 0; i < ROUNDS; i++) {
        uint64_t off = (uint64_t)i * SLOT;
        fill(region + off, SLOT, 1000u + i);
        transfer_request_t r = request(OPCODE_WRITE, off, peer, peer_land + off, SLOT);
        snprintf(note, sizeof note, "post %u", i);
        post(&r, 1, "nixl-phase-0", note);
    }
    double dt = now_s() - t0;
    printf("[%s] phase 0: %d posts of 4 KiB with a notification, %.1f us each\n", side, ROUNDS,
           dt / ROUNDS * 1e6);
    meet(0, ROUNDS);
}

static void phase_sweep(segment_id_t peer, uint64_t peer_land) {
    static const uint64_t sizes[] = {4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 64 * MiB};
    static const size_t descs[] = {1, 16, 256, 1024};
    static transfer_request_t reqs[BATCH_SIZE];
    unsigned posts = 0, notes = 0;
    char note[32];
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        for (size_t d = 0; d < sizeof descs / sizeof descs[0]; d++) {
            uint64_t len = sizes[s];
            size_t n = descs[d];
            if (len * n > AREA) continue;
            unsigned seed = 3000u + posts;
            fill(region, len * n, seed);
            memset(region + 2 * AREA, 0, len * n);
            /* Descriptors in reverse order, so adjacent ranges are not simply one block. */
            for (size_t k = 0; k < n; k++) {
                uint64_t off = (uint64_t)(n - 1 - k) * len;
                reqs[k] = request(OPCODE_WRITE, off, peer, peer_land + off, len);
            }
            snprintf(note, sizeof note, "post %u", posts);
            int with_note = posts % 2 == 0;
            int ok = post(reqs, n, "nixl-phase-1", with_note ? note : NULL);
            if (ok && !with_note) {
                notify_msg_t nm = {"nixl-phase-1", note};
                int rc = genNotifyInEngine(engine, (uint64_t)peer, nm);
                CHECK(rc == 0, "genNotifyInEngine returned %d", rc);
            }
            notes++;
            for (size_t k = 0; k < n; k++) {
                uint64_t off = (uint64_t)k * len;
                reqs[k] = request(OPCODE_READ, 2 * AREA + off, peer, peer_land + off, len);
            }
            ok = post(reqs, n, NULL, NULL);
            uint64_t at = first_wrong(region + 2 * AREA, len * n, seed);
            CHECK(ok && at == len * n, "%zu x %llu B: byte %llu read back wrong", n,
                  (unsigned long long)len, (unsigned long long)at);
            posts++;
        }
    }
    printf("[%s] phase 1: %u posts written and read back (4 KiB to 64 MiB, 1 to 1024 "
           "descriptors)\n", side, posts);
    meet(1, notes);
}

static void phase_in_flight(segment_id_t peer, uint64_t peer_land) {
    static transfer_request_t reqs[IN_FLIGHT][IN_FLIGHT_DESCS];
    batch_id_t ids[IN_FLIGHT];
    char note[32];
    for (unsigned b = 0; b < IN_FLIGHT; b++) {
        for (unsigned d = 0; d < IN_FLIGHT_DESCS; d++) {
            uint64_t off = ((uint64_t)b * IN_FLIGHT_DESCS + d) * IN_FLIGHT_LEN;
            fill(region + off, IN_FLIGHT_LEN, 5000u + b * 97u + d);
            reqs[b][d] = request(OPCODE_WRITE, off, peer, peer_land + off, IN_FLIGHT_LEN);
        }
    }
    for (unsigned b = 0; b < IN_FLIGHT; b++) {
        ids[b] = allocateBatchID(engine, BATCH_SIZE);
        snprintf(note, sizeof note, "post %u", b);
        notify_msg_t nm = {"nixl-phase-2", note};
        int rc = submitTransferWithNotify(engine, ids[b], reqs[b], IN_FLIGHT_DESCS, nm);
        CHECK(rc == 0, "in-flight post %u returned %d", b, rc);
    }
    /* Polled newest first, so the posts finish in an order other than they were made. */
    for (int b = IN_FLIGHT - 1; b >= 0; b--) {
        size_t done = poll_post(ids[b], IN_FLIGHT_DESCS);
        CHECK(done == IN_FLIGHT_DESCS, "in-flight post %d: %zu completed", b, done);
        int freed = freeBatchID(engine, ids[b]);
        CHECK(freed == 0, "freeBatchID of in-flight post %d returned %d", b, freed);
    }
    printf("[%s] phase 2: %d posts of %d x 64 KiB in flight together\n", side, IN_FLIGHT,
           IN_FLIGHT_DESCS);
    meet(2, IN_FLIGHT);
}

static void phase_too_many(segment_id_t peer, uint64_t peer_land) {
    static transfer_request_t reqs[BATCH_SIZE + 1];
    for (size_t k = 0; k <= BATCH_SIZE; k++)
        reqs[k] = request(OPCODE_WRITE, k * 64, peer, peer_land + k * 64, 64);
    batch_id_t b = allocateBatchID(engine, BATCH_SIZE);
    notify_msg_t nm = {"nixl-phase-3", "post 0"};
    CHECK(submitTransfer(engine, b, reqs, BATCH_SIZE + 1) == 2, "over-full submit is not 2");
    CHECK(submitTransferWithNotify(engine, b, reqs, BATCH_SIZE + 1, nm) == 2,
          "over-full submit with a notification is not 2");
    transfer_status_t st;
    CHECK(getTransferStatus(engine, b, 0, &st) == 1, "a refused submit left a task behind");
    CHECK(freeBatchID(engine, b) == 0, "freeing the untouched batch failed");
    CHECK(freeBatchID(engine, b) == 1, "a double free is not 1");
    printf("[%s] phase 3: %d descriptors into a batch of %d refused with 2\n", side,
           BATCH_SIZE + 1, BATCH_SIZE);
    meet(3, 0);
}

/* ---------------------------------------------------------------- one side */

static int run_side(const char *name) {
    side = name;
    engine = createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "", 0, 1);
    if (engine == NULL) {
        fprintf(stderr, "[%s] createTransferEngine failed\n", side);
        return 2;
    }
    region = aligned_alloc(4096, REGION);
    if (region == NULL) return 2;
    memset(region, 0, REGION);
    CHECK(registerLocalMemory(engine, region, REGION, "*", 1) == 0, "registerLocalMemory");
    char me[128] = {0}, them[128] = {0};
    CHECK(getLocalIpAndPort(engine, me, sizeof me) == 0, "getLocalIpAndPort");
    if (write(to_peer, me, sizeof me) != (ssize_t)sizeof me ||
        read(from_peer, them, sizeof them) != (ssize_t)sizeof them)
        return 3;
    send_u64((uint64_t)(uintptr_t)(region + AREA));
    uint64_t peer_land = recv_u64();
    segment_id_t peer = openSegment(engine, them);
    CHECK(peer >= 0, "openSegment(%s) returned %d", them, (int)peer);
    if (peer < 0) return 1;

    pthread_t th;
    pthread_create(&th, NULL, collector, NULL);
    phase_small_posts(peer, peer_land);
    phase_sweep(peer, peer_land);
    phase_in_flight(peer, peer_land);
    phase_too_many(peer, peer_land);
    atomic_store(&stop_collector, 1);
    pthread_join(th, NULL);

    CHECK(atomic_load(&duplicates) == 0, "%lu notifications arrived twice",
          (unsigned long)atomic_load(&duplicates));
    CHECK(atomic_load(&malformed) == 0, "%lu notifications were not ours",
          (unsigned long)atomic_load(&malformed));
    CHECK(atomic_load(&bytes_wrong) == 0,
          "%lu notifications arrived before their bytes were in place",
          (unsigned long)atomic_load(&bytes_wrong));
    CHECK(unregisterLocalMemory(engine, region) == 0, "unregisterLocalMemory");
    destroyTransferEngine(engine);
    free(region);
    printf("[%s] %d passed, %d failed\n", side, passed, failed);
    return failed == 0 ? 0 : 1;
}

int main(void) {
    int a_to_b[2], b_to_a[2];
    if (pipe(a_to_b) != 0 || pipe(b_to_a) != 0) return 2;
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 2;
    if (child == 0) {
        to_peer = b_to_a[1];
        from_peer = a_to_b[0];
        int rc = run_side("B");
        fflush(stdout);
        _exit(rc);
    }
    to_peer = a_to_b[1];
    from_peer = b_to_a[0];
    int rc = run_side("A");
    int status = 0;
    waitpid(child, &status, 0);
    int child_rc = WIFEXITED(status) ? WEXITSTATUS(status) : 99;
    if (child_rc != 0) fprintf(stderr, "side B exited with %d\n", child_rc);
    printf("%s\n", rc == 0 && child_rc == 0 ? "nixl pattern: every byte and notification counted once"
                                            : "nixl pattern: FAILED");
    return rc == 0 && child_rc == 0 ? 0 : 1;
}
