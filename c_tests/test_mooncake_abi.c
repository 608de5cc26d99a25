/*
 * Mooncake C ABI (include/transfer_engine_c.h) against libtidewire: layouts, every
 * function's success and error paths, and two engines in one process moving bytes
 * over real loopback TCP.
 */
#define _POSIX_C_SOURCE 200809L

#include "transfer_engine_c.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int passed, failed;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (cond) {                                                          \
            passed++;                                                        \
        } else {                                                             \
            failed++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);  \
        }                                                                    \
    } while (0)

#define CHECK_EQ(a, b)                                                       \
    do {                                                                     \
        long long va_ = (long long)(a), vb_ = (long long)(b);                \
        if (va_ == vb_) {                                                    \
            passed++;                                                        \
        } else {                                                             \
            failed++;                                                        \
            fprintf(stderr, "FAIL %s:%d: %s == %s (%lld vs %lld)\n",         \
                    __FILE__, __LINE__, #a, #b, va_, vb_);                   \
        }                                                                    \
    } while (0)

#define MiB (1024u * 1024u)

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Polls a task until it is terminal or 10 s pass; returns its last status. */
static transfer_status_t wait_task(transfer_engine_t e, batch_id_t b, size_t task) {
    transfer_status_t st = {-1, 0};
    double deadline = now_s() + 10.0;
    while (now_s() < deadline) {
        int rc = getTransferStatus(e, b, task, &st);
        if (rc != 0) {
            st.status = -100 - rc;
            return st;
        }
        if (st.status == STATUS_COMPLETED || st.status == STATUS_FAILED) return st;
        sleep_ms(1);
    }
    return st;
}

static transfer_request_t req(int op, void *src, segment_id_t seg, void *remote, uint64_t len) {
    transfer_request_t r;
    memset(&r, 0, sizeof r);
    r.opcode = op;
    r.source = src;
    r.target_id = seg;
    r.target_offset = (uint64_t)(uintptr_t)remote;
    r.length = len;
    return r;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed * 7u) >> 3);
}

static transfer_engine_t new_engine(int auto_discover) {
    return createTransferEngine("P2PHANDSHAKE", "127.0.0.1", "127.0.0.1", 0, auto_discover);
}

static void test_layout(void) {
    CHECK_EQ(sizeof(struct transfer_request), 40);
    CHECK_EQ(offsetof(struct transfer_request, opcode), 0);
    CHECK_EQ(offsetof(struct transfer_request, source), 8);
    CHECK_EQ(offsetof(struct transfer_request, target_id), 16);
    CHECK_EQ(offsetof(struct transfer_request, target_offset), 24);
    CHECK_EQ(offsetof(struct transfer_request, length), 32);
    CHECK_EQ(sizeof(transfer_status_t), 16);
    CHECK_EQ(offsetof(transfer_status_t, transferred_bytes), 8);
    CHECK_EQ(sizeof(notify_msg_t), 16);
    CHECK_EQ(offsetof(notify_msg_t, msg), 8);
    CHECK_EQ(sizeof(buffer_entry_t), 16);
    CHECK_EQ(offsetof(buffer_entry_t, length), 8);
    CHECK_EQ(sizeof(segment_desc_t), 48);
    CHECK_EQ(offsetof(segment_desc_t, desc_), 8);
    CHECK_EQ(sizeof(nic_load_stat_t), 80);
    CHECK_EQ(offsetof(nic_load_stat_t, inflight_bytes), 64);
    CHECK_EQ(offsetof(nic_load_stat_t, ewma_bandwidth_bps), 72);
    CHECK_EQ(sizeof(segment_id_t), 4);
    CHECK_EQ(sizeof(segment_handle_t), 4);
    CHECK_EQ(sizeof(batch_id_t), 8);
    CHECK(INVALID_BATCH == UINT64_MAX);
    CHECK_EQ(LOCAL_SEGMENT, 0);
    CHECK_EQ(OPCODE_READ, 0);
    CHECK_EQ(OPCODE_WRITE, 1);
    CHECK_EQ(STATUS_WAITING, 0);
    CHECK_EQ(STATUS_PENDING, 1);
    CHECK_EQ(STATUS_INVALID, 2);
    CHECK_EQ(STATUS_CANCELED, 3);
    CHECK_EQ(STATUS_COMPLETED, 4);
    CHECK_EQ(STATUS_TIMEOUT, 5);
    CHECK_EQ(STATUS_FAILED, 6);
}

static void test_create_errors(void) {
    /* etcd on port 1 (nothing listens there) is unreachable; the rest are refused. */
    const char *bad[] = {"etcd://127.0.0.1:1", "redis://127.0.0.1:6379", "127.0.0.1:1",
                         "https://127.0.0.1:1/metadata", "consul://x", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(createTransferEngine(bad[i], "127.0.0.1", "127.0.0.1", 0, 1) == NULL);
    CHECK(createTransferEngine(NULL, "127.0.0.1", "127.0.0.1", 0, 1) == NULL);
    CHECK(createTransferEngine("P2PHANDSHAKE", NULL, "127.0.0.1", 0, 1) == NULL);
    CHECK(createTransferEngine("P2PHANDSHAKE", "127.0.0.1", NULL, 0, 1) == NULL);
    CHECK(createTransferEngine("P2PHANDSHAKE", "", "127.0.0.1", 0, 1) == NULL);
    destroyTransferEngine(NULL);
    CHECK(1); /* destroy(NULL) returned */
}

static void test_null_engine(void) {
    char buf[32];
    transfer_status_t st;
    notify_msg_t nm = {"n", "m"};
    int n = 5;
    size_t cnt = 1;
    nic_load_stat_t stats[1];
    CHECK_EQ(getLocalIpAndPort(NULL, buf, sizeof buf), -1);
    CHECK(installTransport(NULL, "tcp", NULL) == NULL);
    CHECK_EQ(uninstallTransport(NULL, "tcp"), -1);
    CHECK_EQ(openSegment(NULL, "x"), -1);
    CHECK_EQ(openSegmentNoCache(NULL, "x"), -1);
    CHECK_EQ(closeSegment(NULL, 1), -1);
    CHECK_EQ(warmupEfaSegment(NULL, "x"), -1);
    CHECK_EQ(removeLocalSegment(NULL, "x"), -1);
    CHECK_EQ(registerLocalMemory(NULL, buf, sizeof buf, "cpu:0", 1), -1);
    CHECK_EQ(unregisterLocalMemory(NULL, buf), -1);
    CHECK_EQ(registerLocalMemoryBatch(NULL, NULL, 0, "cpu:0"), -1);
    CHECK_EQ(unregisterLocalMemoryBatch(NULL, NULL, 0), -1);
    CHECK(allocateBatchID(NULL, 1) == INVALID_BATCH);
    CHECK_EQ(submitTransfer(NULL, 1, NULL, 0), 1);
    CHECK_EQ(submitTransferWithNotify(NULL, 1, NULL, 0, nm), 1);
    CHECK_EQ(getTransferStatus(NULL, 1, 0, &st), 1);
    CHECK_EQ(freeBatchID(NULL, 1), 1);
    CHECK(getNotifsFromEngine(NULL, &n) == NULL);
    CHECK_EQ(n, 0);
    CHECK_EQ(genNotifyInEngine(NULL, 1, nm), -1);
    CHECK_EQ(syncSegmentCache(NULL), -1);
    CHECK_EQ(discoverTopology(NULL), -1);
    CHECK_EQ(getNicLoadStats(NULL, stats, &cnt), -1);
    CHECK_EQ(showLinks(NULL, buf, sizeof buf, 0), -1);
    enableGracefulShutdown(NULL);
    CHECK(1);
}

/* Engine without a transport: the installation model. */
static void test_install_model(const char *peer_name) {
    unsetenv("MC_FORCE_TCP");
    transfer_engine_t c = new_engine(0);
    CHECK(c != NULL);
    if (!c) return;
    unsigned char *buf = calloc(1, 4096);
    CHECK_EQ(registerLocalMemory(c, buf, 4096, "cpu:0", 1), 0); /* recorded without transport */
    CHECK_EQ(openSegment(c, peer_name), -1);
    batch_id_t b = allocateBatchID(c, 4);
    CHECK(b != INVALID_BATCH);
    transfer_request_t r = req(OPCODE_WRITE, buf, LOCAL_SEGMENT, buf + 2048, 1024);
    CHECK_EQ(submitTransfer(c, b, &r, 1), 8); /* kNotSupportedTransport */
    CHECK_EQ(submitTransfer(c, b + 1, &r, 1), 1); /* a bad id is still an invalid argument */
    CHECK(installTransport(c, "rdma", NULL) == NULL);
    CHECK(installTransport(c, "nvlink", NULL) == NULL);
    CHECK(installTransport(c, "", NULL) == NULL);
    CHECK(installTransport(c, NULL, NULL) == NULL);
    void *bad_args[2] = {(void *)"{not json", NULL};
    CHECK(installTransport(c, "tcp", bad_args) == NULL);
    void *args[2] = {(void *)"{\"cpu:0\": [[], []]}", NULL};
    transport_t t1 = installTransport(c, "tcp", args);
    transport_t t2 = installTransport(c, "tcp", NULL);
    CHECK(t1 != NULL);
    CHECK(t1 == t2);
    segment_id_t seg = openSegment(c, peer_name);
    CHECK(seg >= 1);
    CHECK_EQ(submitTransfer(c, b, &r, 1), 0);
    transfer_status_t st = wait_task(c, b, 0);
    CHECK_EQ(st.status, STATUS_COMPLETED);
    CHECK_EQ(freeBatchID(c, b), 0);
    CHECK_EQ(uninstallTransport(c, "tcp"), 0);
    CHECK_EQ(uninstallTransport(c, NULL), -1);
    CHECK_EQ(unregisterLocalMemory(c, buf), 0);
    destroyTransferEngine(c);
    free(buf);

    /* MC_FORCE_TCP installs TCP at creation even without auto_discover. */
    setenv("MC_FORCE_TCP", "1", 1);
    transfer_engine_t d = new_engine(0);
    unsetenv("MC_FORCE_TCP");
    CHECK(d != NULL);
    if (d) {
        CHECK(openSegment(d, peer_name) >= 1);
        destroyTransferEngine(d);
    }
}

/* TW_AUTH_KEY, read when an engine is created: engines with the key move bytes; one without
 * it, or with another key, cannot open the keyed segment, and nothing is written. */
static void test_auth_key_env(void) {
    setenv("TW_AUTH_KEY", "c-test-key", 1);
    transfer_engine_t keyed = new_engine(1);
    transfer_engine_t same = new_engine(1);
    setenv("TW_AUTH_KEY", "another key", 1);
    transfer_engine_t other = new_engine(1);
    unsetenv("TW_AUTH_KEY");
    transfer_engine_t keyless = new_engine(1);
    CHECK(keyed && same && other && keyless);
    if (!keyed || !same || !other || !keyless) goto out;
    unsigned char *target = calloc(1, 4096);
    unsigned char *src = calloc(1, 4096);
    fill(src, 4096, 5);
    CHECK_EQ(registerLocalMemory(keyed, target, 4096, "cpu:0", 1), 0);
    CHECK_EQ(registerLocalMemory(same, src, 4096, "cpu:0", 1), 0);
    char name[128];
    CHECK_EQ(getLocalIpAndPort(keyed, name, sizeof name), 0);
    double t0 = now_s();
    CHECK(openSegment(keyless, name) < 0);
    CHECK(openSegment(other, name) < 0);
    CHECK(now_s() - t0 < 5.0);
    segment_id_t seg = openSegment(same, name);
    CHECK(seg >= 0);
    batch_id_t b = allocateBatchID(same, 1);
    transfer_request_t w = req(OPCODE_WRITE, src, seg, target, 4096);
    CHECK_EQ(submitTransfer(same, b, &w, 1), 0);
    CHECK_EQ(wait_task(same, b, 0).status, STATUS_COMPLETED);
    CHECK(memcmp(target, src, 4096) == 0);
    CHECK_EQ(freeBatchID(same, b), 0);
    CHECK_EQ(unregisterLocalMemory(same, src), 0);
    CHECK_EQ(unregisterLocalMemory(keyed, target), 0);
    free(target);
    free(src);
out:
    destroyTransferEngine(keyless);
    destroyTransferEngine(other);
    destroyTransferEngine(same);
    destroyTransferEngine(keyed);
}

int main(void) {
    /* Two engines in one process would use tidewire's in-process shortcut; this test is about
     * the Mooncake wire path (and needs transfers that stay in flight), so switch it off. */
    setenv("TW_SAME_HOST", "0", 1);
    test_layout();
    test_auth_key_env();
    test_create_errors();
    test_null_engine();

    /* transfer_engine_t is a macro for `void *`: one declaration per line. */
    transfer_engine_t a = new_engine(1);
    transfer_engine_t b = new_engine(1);
    CHECK(a != NULL);
    CHECK(b != NULL);
    if (!a || !b) goto done;

    /* getLocalIpAndPort: the P2P segment name, truncated like snprintf. */
    char a_name[128], b_name[128], small[6];
    memset(small, 'x', sizeof small);
    CHECK_EQ(getLocalIpAndPort(a, a_name, sizeof a_name), 0);
    CHECK_EQ(getLocalIpAndPort(b, b_name, sizeof b_name), 0);
    CHECK(strncmp(a_name, "127.0.0.1:", 10) == 0);
    CHECK(strcmp(a_name, b_name) != 0);
    CHECK_EQ(getLocalIpAndPort(a, small, 5), 0);
    CHECK(strcmp(small, "127.") == 0);
    CHECK_EQ(small[5], 'x');
    CHECK_EQ(getLocalIpAndPort(a, small, 0), 0);
    CHECK_EQ(getLocalIpAndPort(a, NULL, 8), -1);

    /* Memory registration. */
    const size_t N = 4 * MiB;
    unsigned char *src = malloc(N), *dst = calloc(1, N), *remote = calloc(1, N);
    unsigned char *unreg = calloc(1, 65536);
    fill(src, N, 1);
    CHECK_EQ(registerLocalMemory(a, src, N, "cpu:0", 1), 0);
    CHECK_EQ(registerLocalMemory(a, dst, N, "*", 1), 0);
    CHECK_EQ(registerLocalMemory(b, remote, N, "cpu:0", 1), 0);
    CHECK_EQ(registerLocalMemory(a, src + 4096, 4096, "cpu:0", 1), -7);
    CHECK_EQ(registerLocalMemory(a, unreg, 0, "cpu:0", 1), -1);
    CHECK_EQ(registerLocalMemory(a, NULL, 4096, "cpu:0", 1), -1);
    CHECK_EQ(registerLocalMemory(a, unreg, 4096, NULL, 1), -1);
    CHECK_EQ(unregisterLocalMemory(a, src + 1), -3);
    CHECK_EQ(unregisterLocalMemory(a, unreg), -3);

    /* Batch registration. */
    unsigned char *pool = calloc(1, 3 * 8192);
    buffer_entry_t ents[2] = {{pool, 8192}, {pool + 8192, 8192}};
    void *addrs[2] = {pool, pool + 8192};
    CHECK_EQ(registerLocalMemoryBatch(a, ents, 2, "cpu:0"), 0);
    CHECK_EQ(unregisterLocalMemoryBatch(a, addrs, 2), 0);
    CHECK_EQ(unregisterLocalMemoryBatch(a, addrs, 2), -3);
    buffer_entry_t overlap[2] = {{pool, 8192}, {pool + 4096, 8192}};
    CHECK_EQ(registerLocalMemoryBatch(a, overlap, 2, "cpu:0"), -7);
    buffer_entry_t zero[2] = {{pool, 8192}, {pool + 8192, 0}};
    CHECK_EQ(registerLocalMemoryBatch(a, zero, 2, "cpu:0"), -1);
    CHECK_EQ(unregisterLocalMemory(a, pool), -3); /* all or none: nothing stayed */
    CHECK_EQ(registerLocalMemoryBatch(a, NULL, 1, "cpu:0"), -1);
    CHECK_EQ(registerLocalMemoryBatch(a, ents, 2, NULL), -1);
    CHECK_EQ(registerLocalMemoryBatch(a, NULL, 0, "cpu:0"), 0);
    CHECK_EQ(unregisterLocalMemoryBatch(a, NULL, 1), -1);

    /* openSegment. */
    segment_id_t seg = openSegment(a, b_name);
    CHECK(seg >= 1);
    CHECK_EQ(openSegment(a, b_name), seg);
    char slashed[160];
    snprintf(slashed, sizeof slashed, "//%s", b_name);
    CHECK_EQ(openSegment(a, slashed), seg);
    CHECK_EQ(openSegment(a, a_name), 0);
    CHECK_EQ(openSegment(a, ""), -1);
    CHECK_EQ(openSegment(a, "/"), -1);
    CHECK_EQ(openSegment(a, NULL), -1);
    CHECK_EQ(openSegment(a, "127.0.0.1:1"), -1);
    CHECK_EQ(openSegmentNoCache(a, b_name), seg);
    CHECK_EQ(openSegmentNoCache(a, NULL), -1);
    CHECK_EQ(closeSegment(a, seg), 0); /* no-op: the id stays usable */
    CHECK_EQ(warmupEfaSegment(a, b_name), 0);
    CHECK_EQ(warmupEfaSegment(a, NULL), -1);
    CHECK_EQ(syncSegmentCache(a), 0);

    /* allocateBatchID. */
    batch_id_t batch = allocateBatchID(a, 4);
    CHECK(batch != INVALID_BATCH);
    CHECK(allocateBatchID(a, (size_t)1 << 40) == INVALID_BATCH);

    /* WRITE then READ over loopback TCP, bytes verified. */
    transfer_request_t w = req(OPCODE_WRITE, src, seg, remote, N);
    CHECK_EQ(submitTransfer(a, batch, &w, 1), 0);
    transfer_status_t st = wait_task(a, batch, 0);
    CHECK_EQ(st.status, STATUS_COMPLETED);
    CHECK_EQ(st.transferred_bytes, N);
    CHECK(memcmp(src, remote, N) == 0);
    transfer_request_t rd = req(OPCODE_READ, dst, seg, remote + 4096, N - 4096);
    CHECK_EQ(submitTransfer(a, batch, &rd, 1), 0);
    st = wait_task(a, batch, 1);
    CHECK_EQ(st.status, STATUS_COMPLETED);
    CHECK_EQ(st.transferred_bytes, N - 4096);
    CHECK(memcmp(dst, src + 4096, N - 4096) == 0);
    /* Status errors: task not yet submitted, NULL status; *status untouched. */
    transfer_status_t keep = {77, 77};
    CHECK_EQ(getTransferStatus(a, batch, 2, &keep), 1);
    CHECK_EQ(keep.status, 77);
    CHECK_EQ(getTransferStatus(a, batch, 0, NULL), 1);
    /* Capacity: 2 of 4 used. */
    transfer_request_t three[3] = {w, w, w};
    CHECK_EQ(submitTransfer(a, batch, three, 3), 2); /* kTooManyRequests */
    CHECK_EQ(submitTransfer(a, batch, NULL, 0), 0);
    CHECK_EQ(freeBatchID(a, batch), 0);
    /* Stale and double-freed ids. */
    CHECK_EQ(freeBatchID(a, batch), 1);
    CHECK_EQ(getTransferStatus(a, batch, 0, &st), 1);
    CHECK_EQ(submitTransfer(a, batch, &w, 1), 1);
    CHECK_EQ(freeBatchID(a, 0), 1);
    CHECK_EQ(freeBatchID(a, INVALID_BATCH), 1);
    CHECK_EQ(freeBatchID(a, 0x123456789ull), 1);
    CHECK_EQ(getTransferStatus(a, 0xdeadbeefull, 0, &st), 1);
    batch_id_t fresh = allocateBatchID(a, 1);
    CHECK(fresh != batch); /* a reused slot gets a new id */
    CHECK_EQ(freeBatchID(a, batch), 1);
    CHECK_EQ(freeBatchID(a, fresh), 0);

    /* Submit validation: nothing starts when one entry is bad. */
    batch = allocateBatchID(a, 8);
    transfer_request_t bad = req(OPCODE_WRITE, src, 999, remote, 64);
    CHECK_EQ(submitTransfer(a, batch, &bad, 1), 1); /* unknown target_id */
    bad = req(5, src, seg, remote, 64);
    CHECK_EQ(submitTransfer(a, batch, &bad, 1), 1); /* bad opcode */
    bad = req(OPCODE_WRITE, unreg, seg, remote, 64);
    CHECK_EQ(submitTransfer(a, batch, &bad, 1), 3); /* local range not registered */
    CHECK_EQ(submitTransfer(a, batch, NULL, 1), 1);
    transfer_request_t mixed[2] = {w, req(OPCODE_WRITE, src, 999, remote, 64)};
    CHECK_EQ(submitTransfer(a, batch, mixed, 2), 1);
    CHECK_EQ(getTransferStatus(a, batch, 0, &st), 1); /* nothing was submitted */
    /* A remote address the peer never registered fails asynchronously. */
    transfer_request_t rej = req(OPCODE_WRITE, src, seg, unreg, 4096);
    CHECK_EQ(submitTransfer(a, batch, &rej, 1), 0);
    st = wait_task(a, batch, 0);
    CHECK_EQ(st.status, STATUS_FAILED);
    CHECK(unreg[0] == 0 && memcmp(unreg, unreg + 1, 4095) == 0);
    /* Local segment: same-process copy. */
    memset(dst, 0, N);
    transfer_request_t loc = req(OPCODE_WRITE, src, LOCAL_SEGMENT, dst, 65536);
    CHECK_EQ(submitTransfer(a, batch, &loc, 1), 0);
    st = wait_task(a, batch, 1);
    CHECK_EQ(st.status, STATUS_COMPLETED);
    CHECK(memcmp(src, dst, 65536) == 0);
    CHECK_EQ(freeBatchID(a, batch), 0);

    /* freeBatchID refuses (4) only while work is in flight; the batch stays valid. */
    int saw_busy = 0;
    for (int attempt = 0; attempt < 5 && !saw_busy; attempt++) {
        batch_id_t bb = allocateBatchID(a, 1);
        CHECK_EQ(submitTransfer(a, bb, &w, 1), 0);
        int rc = freeBatchID(a, bb);
        if (rc == 4) {
            saw_busy = 1;
            CHECK_EQ(getTransferStatus(a, bb, 0, &st), 0);
            st = wait_task(a, bb, 0);
            CHECK_EQ(st.status, STATUS_COMPLETED);
            CHECK_EQ(freeBatchID(a, bb), 0);
        } else {
            CHECK_EQ(rc, 0);
        }
    }
    CHECK(saw_busy);

    /* submitTransferWithNotify: the peer gets the message after completion is observed. */
    int n = -1;
    CHECK(getNotifsFromEngine(b, &n) == NULL);
    CHECK_EQ(n, 0);
    CHECK(getNotifsFromEngine(b, NULL) == NULL);
    batch = allocateBatchID(a, 4);
    notify_msg_t nm = {"kv-ready", "layer-7"};
    transfer_request_t small_w = req(OPCODE_WRITE, src, seg, remote, 8192);
    CHECK_EQ(submitTransferWithNotify(a, batch, &small_w, 1, nm), 0);
    st = wait_task(a, batch, 0);
    CHECK_EQ(st.status, STATUS_COMPLETED);
    notify_msg_t *got = NULL;
    n = 0;
    for (int i = 0; i < 2000 && n == 0; i++) {
        got = getNotifsFromEngine(b, &n);
        if (n == 0) sleep_ms(2);
    }
    CHECK_EQ(n, 1);
    if (n == 1 && got) {
        CHECK(strcmp(got[0].name, "kv-ready") == 0);
        CHECK(strcmp(got[0].msg, "layer-7") == 0);
    }
    CHECK_EQ(freeNotifsMsgBuf(got, n), 0);
    notify_msg_t null_name = {NULL, "x"};
    CHECK_EQ(submitTransferWithNotify(a, batch, &small_w, 1, null_name), 1);
    CHECK_EQ(submitTransferWithNotify(a, batch, &small_w, 0, nm), 1);
    CHECK_EQ(submitTransferWithNotify(a, 0x42ull, &small_w, 1, nm), 1);
    transfer_request_t four[4] = {small_w, small_w, small_w, small_w};
    CHECK_EQ(submitTransferWithNotify(a, batch, four, 4, nm), 2);
    CHECK_EQ(freeBatchID(a, batch), 0);

    /* genNotifyInEngine: direct, to a peer and to ourselves. */
    notify_msg_t g1 = {"direct", "one"}, g2 = {"self", "two"};
    CHECK_EQ(genNotifyInEngine(a, (uint64_t)seg, g1), 0);
    CHECK_EQ(genNotifyInEngine(a, 999, g1), -200);
    CHECK_EQ(genNotifyInEngine(a, (uint64_t)1 << 40, g1), -200);
    notify_msg_t null_msg = {"x", NULL};
    CHECK_EQ(genNotifyInEngine(a, (uint64_t)seg, null_msg), -1);
    CHECK_EQ(genNotifyInEngine(a, LOCAL_SEGMENT, g2), 0);
    n = 0;
    got = getNotifsFromEngine(a, &n);
    CHECK_EQ(n, 1);
    if (n == 1 && got) CHECK(strcmp(got[0].name, "self") == 0 && strcmp(got[0].msg, "two") == 0);
    CHECK_EQ(freeNotifsMsgBuf(got, n), 0);
    n = 0;
    got = getNotifsFromEngine(b, &n); /* genNotify is synchronous: already queued */
    CHECK_EQ(n, 1);
    if (n == 1 && got) CHECK(strcmp(got[0].name, "direct") == 0 && strcmp(got[0].msg, "one") == 0);
    CHECK_EQ(freeNotifsMsgBuf(got, n), 0);
    CHECK_EQ(freeNotifsMsgBuf(NULL, 0), 0);
    notify_msg_t stack_msg = {NULL, NULL};
    CHECK_EQ(freeNotifsMsgBuf(&stack_msg, -1), -1);

    /* removeLocalSegment: forgets the cache entry; the next open gets a new id. */
    CHECK_EQ(removeLocalSegment(a, b_name), 0);
    bad = req(OPCODE_WRITE, src, seg, remote, 64);
    batch = allocateBatchID(a, 2);
    CHECK_EQ(submitTransfer(a, batch, &bad, 1), 1); /* the old id is gone */
    segment_id_t seg2 = openSegment(a, b_name);
    CHECK(seg2 > seg);
    CHECK_EQ(removeLocalSegment(a, "never-opened"), 0);
    CHECK_EQ(removeLocalSegment(a, ""), -1);
    CHECK_EQ(removeLocalSegment(a, NULL), -1);
    /* openSegmentNoCache after the peer registered more memory, then use the new region. */
    unsigned char *extra = calloc(1, 65536);
    CHECK_EQ(registerLocalMemory(b, extra, 65536, "cpu:0", 1), 0);
    CHECK_EQ(openSegmentNoCache(a, b_name), seg2);
    transfer_request_t ex = req(OPCODE_WRITE, src, seg2, extra, 65536);
    CHECK_EQ(submitTransfer(a, batch, &ex, 1), 0);
    st = wait_task(a, batch, 0);
    CHECK_EQ(st.status, STATUS_COMPLETED);
    CHECK(memcmp(extra, src, 65536) == 0);
    CHECK_EQ(freeBatchID(a, batch), 0);

    /* Topology, NIC stats, links, graceful shutdown. */
    CHECK_EQ(discoverTopology(a), 0);
    nic_load_stat_t stats[2];
    size_t cnt = 2;
    CHECK_EQ(getNicLoadStats(a, stats, &cnt), 0);
    CHECK_EQ(cnt, 0);
    CHECK_EQ(getNicLoadStats(a, NULL, &cnt), -1);
    CHECK_EQ(getNicLoadStats(a, stats, NULL), -1);
    char links[512];
    CHECK_EQ(showLinks(a, links, sizeof links, 1), 0);
    CHECK(links[0] == '{' && strstr(links, "\"links\":[]") != NULL);
    CHECK_EQ(showLinks(a, links, sizeof links, 0), 0);
    CHECK(strstr(links, "RDMA") != NULL);
    char tiny[8];
    CHECK_EQ(showLinks(a, tiny, sizeof tiny, 1), 0);
    CHECK_EQ(strlen(tiny), 7);
    CHECK_EQ(showLinks(a, links, 0, 1), -1);
    CHECK_EQ(showLinks(a, NULL, 16, 1), -1);
    enableGracefulShutdown(a);
    CHECK(1);

    test_install_model(b_name);

    CHECK_EQ(unregisterLocalMemory(b, extra), 0);
    CHECK_EQ(unregisterLocalMemory(a, src), 0);
    CHECK_EQ(unregisterLocalMemory(a, src), -3);
    destroyTransferEngine(a);
    destroyTransferEngine(b);
    free(src);
    free(dst);
    free(remote);
    free(unreg);
    free(pool);
    free(extra);

done:
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
