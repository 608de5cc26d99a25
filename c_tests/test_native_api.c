/*
 * test_native_api.c — every tw_* function of include/tidewire.h, success and error paths, with
 * two engines in this process talking over real TCP on 127.0.0.1.
 */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)





static int has_pattern(const uint8_t *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern_byte(i, seed)) return 0;
    return 1;
}

static int all_bytes(const uint8_t *p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return 0;
    return 1;
}

/* A 127.0.0.1 port nobody listens on (bound by the kernel, then released). */
static uint16_t closed_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &alen) != 0) {
        if (fd >= 0) close(fd);
        return 1;
    }
    close(fd);
    return ntohs(a.sin_port);
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

static tw_transfer_request req(int32_t op, int32_t seg, void *local, const void *remote,
                               uint64_t len) {
    tw_transfer_request r;
    r.opcode = op;
    r.segment = seg;
    r.local_addr = local;
    r.remote_addr = (uint64_t)(uintptr_t)remote;
    r.length = len;
    return r;
}

/* Submits one request to a fresh batch and waits; returns the wait result. */
static tw_result transfer_once(const tw_engine *e, tw_transfer_request r) {
    uint64_t b = 0;
    tw_result rc = tw_batch_alloc(e, 1, &b);
    if (rc != TW_OK) return rc;
    rc = tw_batch_submit(e, b, &r, 1);
    if (rc == TW_OK) rc = tw_batch_wait(e, b, 10000);
    tw_batch_free(e, b);
    return rc;
}

/* Polls a task (bounded: `seconds`) until it leaves WAITING. */
static tw_result poll_task(const tw_engine *e, uint64_t batch, size_t task,
                           tw_transfer_status *st, double seconds) {
    double end = now_s() + seconds;
    for (;;) {
        tw_result rc = tw_batch_status(e, batch, task, st);
        if (rc != TW_OK || st->state != TW_TASK_WAITING) return rc;
        if (now_s() > end) return TW_ERR_TIMEOUT;
        sleep_ms(1);
    }
}

/* ---------------------------------------------------------------- version, codes, errors */

static void *empty_error_thread(void *arg) {
    size_t *out = arg;
    *out = tw_last_error_message(NULL, 0);
    return NULL;
}

static void test_version_and_codes(void) {
    /* Nothing has failed on this thread yet: the message is empty. */
    char buf[64];
    memset(buf, 'X', sizeof buf);
    CHECK_RC(tw_last_error_message(buf, sizeof buf), 1);
    CHECK(buf[0] == '\0', "fresh thread: empty last error");

    const char *v = tw_version();
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", TIDEWIRE_VERSION_MAJOR, TIDEWIRE_VERSION_MINOR,
             TIDEWIRE_VERSION_PATCH);
    CHECK(v != NULL && strcmp(v, want) == 0, "tw_version matches the header macros");
    CHECK(tw_version() == v, "tw_version is static");

    static const struct {
        tw_result code;
        const char *name;
    } codes[] = {
        {TW_OK, "TW_OK"},
        {TW_ERR_INVALID_ARGUMENT, "TW_ERR_INVALID_ARGUMENT"},
        {TW_ERR_NULL_ARGUMENT, "TW_ERR_NULL_ARGUMENT"},
        {TW_ERR_TOO_MANY_REQUESTS, "TW_ERR_TOO_MANY_REQUESTS"},
        {TW_ERR_ADDRESS_NOT_REGISTERED, "TW_ERR_ADDRESS_NOT_REGISTERED"},
        {TW_ERR_ADDRESS_OVERLAPPED, "TW_ERR_ADDRESS_OVERLAPPED"},
        {TW_ERR_INVALID_ID, "TW_ERR_INVALID_ID"},
        {TW_ERR_UNKNOWN_SEGMENT, "TW_ERR_UNKNOWN_SEGMENT"},
        {TW_ERR_BUSY, "TW_ERR_BUSY"},
        {TW_ERR_TIMEOUT, "TW_ERR_TIMEOUT"},
        {TW_ERR_REJECTED, "TW_ERR_REJECTED"},
        {TW_ERR_SOCKET, "TW_ERR_SOCKET"},
        {TW_ERR_PROTOCOL, "TW_ERR_PROTOCOL"},
        {TW_ERR_METADATA, "TW_ERR_METADATA"},
        {TW_ERR_UNSUPPORTED, "TW_ERR_UNSUPPORTED"},
        {TW_ERR_BUFFER_TOO_SMALL, "TW_ERR_BUFFER_TOO_SMALL"},
        {TW_ERR_SHUTDOWN, "TW_ERR_SHUTDOWN"},
        {TW_ERR_INTERNAL, "TW_ERR_INTERNAL"},
        {TW_ERR_PANIC, "TW_ERR_PANIC"},
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = tw_result_str(codes[i].code);
        char msg[96];
        snprintf(msg, sizeof msg, "tw_result_str(%d) is %s", (int)codes[i].code, codes[i].name);
        CHECK(s != NULL && strcmp(s, codes[i].name) == 0, msg);
        CHECK((int)codes[i].code == -(int)i, "codes are numbered 0, -1, -2, ... without gaps");
    }
    const tw_result unknown[] = {1, 42, -19, -1000, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++)
        CHECK(strcmp(tw_result_str(unknown[i]), "TW_ERR_UNKNOWN") == 0, "unknown code name");

    /* Make a failure with a known message, then read it back in every way. */
    tw_config *cfg = NULL;
    CHECK_RC(tw_config_new(&cfg), TW_OK);
    CHECK_RC(tw_config_set(cfg, "no_such_option", "1"), TW_ERR_INVALID_ARGUMENT);
    size_t need = tw_last_error_message(NULL, 0);
    CHECK(need > 20, "size query with NULL/0 gives the full length + 1");
    char *full = malloc(need + 8);
    memset(full, 'X', need + 8);
    CHECK_RC(tw_last_error_message(full, need), need);
    CHECK(strlen(full) == need - 1, "full copy is NUL-terminated at need - 1");
    CHECK(strstr(full, "no_such_option") != NULL, "message names the unknown key");
    CHECK(full[need] == 'X', "nothing written past len");

    char small[8];
    memset(small, 'X', sizeof small);
    CHECK_RC(tw_last_error_message(small, 5), need);
    CHECK(small[4] == '\0' && strlen(small) == 4 && strncmp(small, full, 4) == 0,
          "truncated to len - 1 characters + NUL");
    CHECK(small[5] == 'X', "truncation writes nothing past len");
    char one = 'X';
    CHECK_RC(tw_last_error_message(&one, 1), need);
    CHECK(one == '\0', "len 1 gives an empty string");
    CHECK_RC(tw_last_error_message(small, 0), need);
    CHECK(small[0] == full[0], "len 0 writes nothing");
    free(full);

    /* Per-thread: another thread has no message. */
    pthread_t t;
    size_t other = 0;
    CHECK(pthread_create(&t, NULL, empty_error_thread, &other) == 0, "thread starts");
    pthread_join(t, NULL);
    CHECK(other == 1, "last error is per thread");
    CHECK_RC(tw_last_error_message(NULL, 0), need);
    tw_config_free(cfg);
}

/* ---------------------------------------------------------------- config and engine */

static void test_config_and_engine(void) {
    CHECK_RC(tw_config_new(NULL), TW_ERR_NULL_ARGUMENT);
    tw_config *cfg = NULL;
    CHECK_RC(tw_config_new(&cfg), TW_OK);
    CHECK(cfg != NULL, "config handle written");

    CHECK_RC(tw_config_set(cfg, "tcp_lanes", "4"), TW_OK);
    CHECK_RC(tw_config_set(cfg, "tcp_proto", "1"), TW_OK);
    CHECK_RC(tw_config_set(cfg, "slice_size", "65536"), TW_OK);
    CHECK_RC(tw_config_set(cfg, "connect_timeout_ms", "1500"), TW_OK);
    CHECK_RC(tw_config_set(cfg, "io_timeout_ms", "5000"), TW_OK);
    CHECK_RC(tw_config_set(cfg, "handshake_max_len", "2097152"), TW_OK);
    CHECK_RC(tw_config_set(cfg, "local_server_name", "127.0.0.1"), TW_OK);
    CHECK_RC(tw_config_set(cfg, "bind_address", "127.0.0.1"), TW_OK);
    CHECK_RC(tw_config_set(cfg, "rpc_port", "0"), TW_OK);
    CHECK_RC(tw_config_set(cfg, "data_port", "0"), TW_OK);
    CHECK_RC(tw_config_set(cfg, "metadata", "P2PHANDSHAKE"), TW_OK);

    CHECK_RC(tw_config_set(cfg, "tcp_lane", "4"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "", "4"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "tcp_lanes", "many"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "tcp_lanes", "0"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "tcp_lanes", "17"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "tcp_proto", "3"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "rpc_port", "65536"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "rpc_port", "-1"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "slice_size", "1"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "connect_timeout_ms", "0"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "handshake_max_len", "10"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "metadata", "redis://127.0.0.1:6379"), TW_ERR_UNSUPPORTED);
    CHECK_RC(tw_config_set(cfg, "\xff\xfe", "1"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_config_set(NULL, "tcp_lanes", "2"), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, NULL, "2"), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_config_set(cfg, "tcp_lanes", NULL), TW_ERR_NULL_ARGUMENT);
    tw_config_free(NULL);

    /* Engine from a config; the config stays usable and is freed by the caller. */
    tw_engine *e1 = NULL;
    CHECK_RC(tw_engine_new(cfg, &e1), TW_OK);
    CHECK(e1 != NULL, "engine handle written");
    CHECK_RC(tw_engine_new(cfg, NULL), TW_ERR_NULL_ARGUMENT);

    uint16_t port = 0;
    CHECK_RC(tw_engine_rpc_port(e1, &port), TW_OK);
    CHECK(port != 0, "rpc port chosen by the kernel");
    CHECK_RC(tw_engine_rpc_port(e1, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_engine_rpc_port(NULL, &port), TW_ERR_NULL_ARGUMENT);

    char name[64], want[64];
    snprintf(want, sizeof want, "127.0.0.1:%u", (unsigned)port);
    CHECK_RC(tw_engine_segment_name(e1, name, sizeof name), TW_OK);
    CHECK(strcmp(name, want) == 0, "segment name is host:rpc_port");
    size_t nlen = strlen(want);
    char tight[64];
    memset(tight, '#', sizeof tight);
    CHECK_RC(tw_engine_segment_name(e1, tight, nlen), TW_ERR_BUFFER_TOO_SMALL);
    CHECK(all_bytes((const uint8_t *)tight, sizeof tight, '#'), "too small: nothing written");
    CHECK_RC(tw_engine_segment_name(e1, tight, 0), TW_ERR_BUFFER_TOO_SMALL);
    CHECK_RC(tw_engine_segment_name(e1, tight, nlen + 1), TW_OK);
    CHECK(strcmp(tight, want) == 0, "exact size fits");
    CHECK_RC(tw_engine_segment_name(e1, NULL, 64), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_engine_segment_name(NULL, name, sizeof name), TW_ERR_NULL_ARGUMENT);

    /* The same RPC port again: bind fails, nothing is written. */
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%u", (unsigned)port);
    CHECK_RC(tw_config_set(cfg, "rpc_port", portstr), TW_OK);
    tw_engine *clash = (tw_engine *)(uintptr_t)0x1;
    CHECK_RC(tw_engine_new(cfg, &clash), TW_ERR_SOCKET);
    CHECK(clash == (tw_engine *)(uintptr_t)0x1, "failed engine_new leaves the output alone");
    tw_config_free(cfg);

    /* NULL config = defaults. */
    tw_engine *e2 = NULL;
    CHECK_RC(tw_engine_new(NULL, &e2), TW_OK);
    uint16_t port2 = 0;
    CHECK_RC(tw_engine_rpc_port(e2, &port2), TW_OK);
    CHECK(port2 != 0 && port2 != port, "second engine has its own port");
    tw_engine_free(e2);
    tw_engine_free(e1);
    tw_engine_free(NULL);
}

/* ---------------------------------------------------------------- memory */

static void test_memory(tw_engine *a) {
    uint8_t *buf = aligned_alloc(4096, 64 * KiB);
    uint8_t *dst = aligned_alloc(4096, 4 * KiB);
    memset(buf, 0, 64 * KiB);
    fill_pattern(buf, 4 * KiB, 3);
    memset(dst, 0, 4 * KiB);

    CHECK_RC(tw_memory_register(a, NULL, 4096, "cpu:0", true), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_memory_register(NULL, buf, 4096, "cpu:0", true), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_memory_register(a, buf, 0, "cpu:0", true), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_memory_register(a, buf, SIZE_MAX, "cpu:0", true), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_memory_register(a, buf + 8, SIZE_MAX - 4, NULL, true), TW_ERR_INVALID_ARGUMENT);

    CHECK_RC(tw_memory_register(a, buf, 4096, "cpu:0", true), TW_OK);
    CHECK_RC(tw_memory_register(a, buf + 2048, 4096, "cpu:0", true), TW_ERR_ADDRESS_OVERLAPPED);
    CHECK_RC(tw_memory_register(a, buf + 1024, 1024, NULL, true), TW_ERR_ADDRESS_OVERLAPPED);
    CHECK_RC(tw_memory_register(a, buf, 8192, "*", true), TW_ERR_ADDRESS_OVERLAPPED);
    /* Exact re-registration is counted: it needs two unregisters. */
    CHECK_RC(tw_memory_register(a, buf, 4096, "cpu:0", true), TW_OK);
    CHECK_RC(tw_memory_register(a, dst, 4096, NULL, false), TW_OK);

    tw_transfer_request copy = req(TW_OPCODE_WRITE, TW_LOCAL_SEGMENT, buf, dst, 4096);
    CHECK_RC(transfer_once(a, copy), TW_OK);
    CHECK(has_pattern(dst, 4096, 3), "local-segment copy moved every byte");

    CHECK_RC(tw_memory_unregister(a, buf), TW_OK);
    memset(dst, 0, 4096);
    CHECK_RC(transfer_once(a, copy), TW_OK);
    CHECK(has_pattern(dst, 4096, 3), "still registered after one of two unregisters");
    CHECK_RC(tw_memory_unregister(a, buf), TW_OK);
    uint64_t b = 0;
    CHECK_RC(tw_batch_alloc(a, 1, &b), TW_OK);
    CHECK_RC(tw_batch_submit(a, b, &copy, 1), TW_ERR_ADDRESS_NOT_REGISTERED);
    CHECK_RC(tw_batch_free(a, b), TW_OK);
    CHECK_RC(tw_memory_unregister(a, buf), TW_ERR_ADDRESS_NOT_REGISTERED);
    CHECK_RC(tw_memory_unregister(a, buf + 4), TW_ERR_ADDRESS_NOT_REGISTERED);
    CHECK_RC(tw_memory_unregister(a, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_memory_unregister(NULL, buf), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_memory_unregister(a, dst), TW_OK);

    /* Batch registration: all or none. */
    tw_buffer three[3] = {{buf, 4096}, {buf + 8192, 4096}, {buf + 16384, 8192}};
    CHECK_RC(tw_memory_register_batch(a, three, 3, "cpu:0"), TW_OK);
    void *addrs[3] = {buf, buf + 8192, buf + 16384};
    CHECK_RC(tw_memory_unregister_batch(a, addrs, 3), TW_OK);
    CHECK_RC(tw_memory_unregister(a, buf + 8192), TW_ERR_ADDRESS_NOT_REGISTERED);

    tw_buffer clash[2] = {{buf + 32768, 4096}, {buf + 34816, 4096}};
    CHECK_RC(tw_memory_register_batch(a, clash, 2, NULL), TW_ERR_ADDRESS_OVERLAPPED);
    CHECK_RC(tw_memory_unregister(a, buf + 32768), TW_ERR_ADDRESS_NOT_REGISTERED);
    tw_buffer with_bad[2] = {{buf + 32768, 4096}, {buf + 40960, 0}};
    CHECK_RC(tw_memory_register_batch(a, with_bad, 2, NULL), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_memory_unregister(a, buf + 32768), TW_ERR_ADDRESS_NOT_REGISTERED);
    CHECK_RC(tw_memory_register_batch(a, NULL, 2, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_memory_register_batch(a, NULL, 0, NULL), TW_OK);
    CHECK_RC(tw_memory_register_batch(NULL, three, 3, NULL), TW_ERR_NULL_ARGUMENT);

    /* Unregister batch tries every address and reports the first error. */
    CHECK_RC(tw_memory_register_batch(a, three, 2, NULL), TW_OK);
    void *mixed[3] = {buf, buf + 100, buf + 8192};
    CHECK_RC(tw_memory_unregister_batch(a, mixed, 3), TW_ERR_ADDRESS_NOT_REGISTERED);
    CHECK_RC(tw_memory_unregister(a, buf + 8192), TW_ERR_ADDRESS_NOT_REGISTERED);
    CHECK_RC(tw_memory_unregister_batch(a, NULL, 1), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_memory_unregister_batch(a, NULL, 0), TW_OK);

    /* Shared buffers: allocated zeroed and registered; freed once; bad arguments refused. */
    void *shm = (void *)1;
    CHECK_RC(tw_memory_alloc_shared(a, 0, &shm), TW_ERR_INVALID_ARGUMENT);
    CHECK(shm == (void *)1, "a failed allocation leaves *addr_out untouched");
    CHECK_RC(tw_memory_alloc_shared(NULL, 4096, &shm), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_memory_alloc_shared(a, 4096, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_memory_alloc_shared(a, 3 * 4096 + 5, &shm), TW_OK);
    CHECK(shm != NULL && ((uint8_t *)shm)[3 * 4096 + 4] == 0, "zeroed shared memory");
    memset(shm, 0x5a, 3 * 4096 + 5);
    char loc[32];
    CHECK_RC(tw_memory_location(a, (uint8_t *)shm + 100, loc, sizeof loc), TW_OK);
    CHECK(strcmp(loc, "cpu:0") == 0, "shared buffer registered as cpu:0");
    CHECK_RC(tw_memory_register(a, shm, 4096, NULL, true), TW_ERR_ADDRESS_OVERLAPPED);
    CHECK_RC(tw_memory_free_shared(a, buf), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_memory_free_shared(a, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_memory_free_shared(a, shm), TW_OK);
    CHECK_RC(tw_memory_free_shared(a, shm), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_memory_location(a, shm, loc, sizeof loc), TW_ERR_ADDRESS_NOT_REGISTERED);
    free(buf);
    free(dst);
}

/* ---------------------------------------------------------------- segments */

static int json_has_addr(const char *json, const void *p) {
    char key[48];
    snprintf(key, sizeof key, "\"addr\":%llu", (unsigned long long)(uintptr_t)p);
    return strstr(json, key) != NULL;
}

static char *descriptor(const tw_engine *e, int32_t seg) {
    size_t need = 0;
    if (tw_segment_descriptor(e, seg, NULL, 0, &need) != TW_ERR_BUFFER_TOO_SMALL) return NULL;
    char *s = malloc(need);
    if (tw_segment_descriptor(e, seg, s, need, NULL) != TW_OK) {
        free(s);
        return NULL;
    }
    return s;
}

static void test_segments(tw_engine *a, tw_engine *b, const char *a_name, const char *b_name) {
    int32_t seg = -5;
    CHECK_RC(tw_segment_open(a, a_name, &seg), TW_OK);
    CHECK(seg == TW_LOCAL_SEGMENT, "own name opens segment 0");
    CHECK_RC(tw_segment_open(a, b_name, &seg), TW_OK);
    CHECK(seg >= 1, "peer segment id >= 1");
    int32_t again = -5;
    CHECK_RC(tw_segment_open(a, b_name, &again), TW_OK);
    CHECK(again == seg, "opening again returns the cached id");
    char slashed[80];
    snprintf(slashed, sizeof slashed, "/%s", b_name);
    CHECK_RC(tw_segment_open(a, slashed, &again), TW_OK);
    CHECK(again == seg, "a leading / is ignored");

    int32_t untouched = -5;
    CHECK_RC(tw_segment_open(a, NULL, &untouched), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_segment_open(a, b_name, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_segment_open(NULL, b_name, &untouched), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_segment_open(a, "", &untouched), TW_ERR_INVALID_ARGUMENT);

    char dead[32];
    snprintf(dead, sizeof dead, "127.0.0.1:%u", (unsigned)closed_port());
    double t0 = now_s();
    CHECK_RC(tw_segment_open(a, dead, &untouched), TW_ERR_UNKNOWN_SEGMENT);
    tw_result rc = tw_segment_open(a, "no-such-host.invalid:1", &untouched);
    CHECK(rc != TW_OK, "unresolvable host fails");
    rc = tw_segment_open(a, "not a segment name", &untouched);
    CHECK(rc != TW_OK, "garbage name fails");
    CHECK(now_s() - t0 < 5.0, "unreachable segments fail within a few seconds");
    CHECK(untouched == -5, "failed opens leave the output alone");

    /* close / refresh */
    CHECK_RC(tw_segment_close(a, seg), TW_OK);
    CHECK_RC(tw_segment_close(a, seg), TW_ERR_UNKNOWN_SEGMENT);
    CHECK_RC(tw_segment_refresh(a, seg), TW_ERR_UNKNOWN_SEGMENT);
    CHECK_RC(tw_segment_close(a, TW_LOCAL_SEGMENT), TW_OK);
    CHECK_RC(tw_segment_refresh(a, TW_LOCAL_SEGMENT), TW_OK);
    CHECK_RC(tw_segment_close(a, 999), TW_ERR_UNKNOWN_SEGMENT);
    CHECK_RC(tw_segment_close(NULL, 1), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_segment_refresh(NULL, 1), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_segment_open(a, b_name, &seg), TW_OK);
    CHECK(seg >= 1, "reopened after close");

    /* The cached descriptor only shows memory registered after a refresh. */
    uint8_t *late = malloc(4096);
    CHECK_RC(tw_memory_register(b, late, 4096, "cpu:0", true), TW_OK);
    char *before = descriptor(a, seg);
    CHECK(before != NULL && !json_has_addr(before, late), "cached descriptor is stale");
    CHECK_RC(tw_segment_refresh(a, seg), TW_OK);
    char *after = descriptor(a, seg);
    CHECK(after != NULL && json_has_addr(after, late), "refresh fetched the new buffer");
    free(before);
    free(after);
    CHECK_RC(tw_memory_unregister(b, late), TW_OK);
    free(late);

    /* Descriptor JSON: size query, too small, exact. */
    size_t need = 0;
    CHECK_RC(tw_segment_descriptor(a, TW_LOCAL_SEGMENT, NULL, 0, &need), TW_ERR_BUFFER_TOO_SMALL);
    CHECK(need > 10, "needed size reported");
    char *json = malloc(need + 4);
    memset(json, '#', need + 4);
    size_t need2 = 0;
    CHECK_RC(tw_segment_descriptor(a, TW_LOCAL_SEGMENT, json, need - 1, &need2),
             TW_ERR_BUFFER_TOO_SMALL);
    CHECK(need2 == need, "too small still reports the needed size");
    CHECK(all_bytes((const uint8_t *)json, need + 4, '#'), "too small: buffer untouched");
    CHECK_RC(tw_segment_descriptor(a, TW_LOCAL_SEGMENT, json, need, &need2), TW_OK);
    CHECK(strlen(json) == need - 1, "descriptor fills exactly needed - 1 chars");
    char quoted[80];
    snprintf(quoted, sizeof quoted, "\"name\":\"%s\"", a_name);
    CHECK(json[0] == '{' && strstr(json, quoted) && strstr(json, "\"protocol\":\"tcp\""),
          "local descriptor names this engine, protocol tcp");
    free(json);
    char *peer = descriptor(a, seg);
    snprintf(quoted, sizeof quoted, "\"name\":\"%s\"", b_name);
    CHECK(peer != NULL && strstr(peer, quoted) != NULL, "peer descriptor names the peer");
    free(peer);
    char tiny[4];
    CHECK_RC(tw_segment_descriptor(a, 999, tiny, sizeof tiny, NULL), TW_ERR_UNKNOWN_SEGMENT);
    CHECK_RC(tw_segment_descriptor(NULL, 0, tiny, sizeof tiny, NULL), TW_ERR_NULL_ARGUMENT);

    /* Probe */
    CHECK_RC(tw_engine_probe(a, b_name), TW_OK);
    CHECK_RC(tw_engine_probe(b, a_name), TW_OK);
    CHECK(tw_engine_probe(a, dead) != TW_OK, "probing a closed port fails");
    CHECK_RC(tw_engine_probe(a, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_engine_probe(NULL, b_name), TW_ERR_NULL_ARGUMENT);
}

/* ---------------------------------------------------------------- batches */

static void test_batches(tw_engine *a, tw_engine *b, int32_t seg) {
    const size_t big = 3 * MiB + 123; /* several slices plus a ragged tail */
    uint8_t *src = malloc(big), *back = malloc(big), *remote = malloc(big);
    uint8_t *hidden = malloc(4096);
    fill_pattern(src, big, 9);
    memset(back, 0, big);
    memset(remote, 0, big);
    memset(hidden, 0x5a, 4096);
    CHECK_RC(tw_memory_register(a, src, big, "cpu:0", true), TW_OK);
    CHECK_RC(tw_memory_register(a, back, big, "cpu:0", true), TW_OK);
    CHECK_RC(tw_memory_register(b, remote, big, "cpu:0", true), TW_OK);
    CHECK_RC(tw_memory_register(b, hidden, 4096, "cpu:0", false), TW_OK);

    uint64_t batch = 0;
    CHECK_RC(tw_batch_alloc(a, (size_t)1 << 25, &batch), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_batch_alloc(a, 4, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_alloc(NULL, 4, &batch), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_alloc(a, 8, &batch), TW_OK);
    CHECK(batch != 0, "batch id is nonzero");

    /* WRITE a -> b, poll the status, then READ it back. */
    tw_transfer_request w = req(TW_OPCODE_WRITE, seg, src, remote, big);
    CHECK_RC(tw_batch_submit(a, batch, &w, 1), TW_OK);
    tw_transfer_status st = {-1, -1, 0};
    CHECK_RC(poll_task(a, batch, 0, &st, 10.0), TW_OK);
    CHECK(st.state == TW_TASK_COMPLETED && st.result == TW_OK, "write task completed");
    CHECK(st.transferred_bytes == big, "transferred_bytes == length");
    CHECK(memcmp(remote, src, big) == 0, "peer holds every written byte");

    tw_transfer_request r = req(TW_OPCODE_READ, seg, back, remote, big);
    CHECK_RC(tw_batch_submit(a, batch, &r, 1), TW_OK);
    CHECK_RC(tw_batch_wait(a, batch, 10000), TW_OK);
    CHECK_RC(tw_batch_status(a, batch, 1, &st), TW_OK);
    CHECK(st.state == TW_TASK_COMPLETED && st.transferred_bytes == big, "read task completed");
    CHECK(memcmp(back, src, big) == 0, "read back every byte");

    /* Odd offsets and a short transfer inside the regions. */
    memset(back, 0, 4096);
    tw_transfer_request odd = req(TW_OPCODE_READ, seg, back + 1, remote + 777, 1001);
    CHECK_RC(tw_batch_submit(a, batch, &odd, 1), TW_OK);
    CHECK_RC(tw_batch_wait(a, batch, 10000), TW_OK);
    CHECK(memcmp(back + 1, src + 777, 1001) == 0 && back[0] == 0 && back[1002] == 0,
          "unaligned read lands exactly");

    /* Zero-length request: completes at once. */
    tw_transfer_request zero = req(TW_OPCODE_WRITE, seg, src, remote, 0);
    CHECK_RC(tw_batch_submit(a, batch, &zero, 1), TW_OK);
    CHECK_RC(tw_batch_status(a, batch, 3, &st), TW_OK);
    CHECK(st.state == TW_TASK_COMPLETED && st.transferred_bytes == 0, "zero-length completes");

    /* Status errors. */
    tw_transfer_status keep = {77, 77, 77};
    CHECK_RC(tw_batch_status(a, batch, 4, &keep), TW_ERR_INVALID_ARGUMENT);
    CHECK(keep.state == 77 && keep.result == 77 && keep.transferred_bytes == 77,
          "failed status leaves the output alone");
    CHECK_RC(tw_batch_status(a, batch, 0, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_status(NULL, batch, 0, &st), TW_ERR_NULL_ARGUMENT);

    /* Capacity: 8 in all, 4 used. */
    tw_transfer_request five[5] = {zero, zero, zero, zero, zero};
    CHECK_RC(tw_batch_submit(a, batch, five, 5), TW_ERR_TOO_MANY_REQUESTS);
    CHECK_RC(tw_batch_status(a, batch, 4, &st), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_batch_submit(a, batch, five, 4), TW_OK);
    CHECK_RC(tw_batch_submit(a, batch, five, 1), TW_ERR_TOO_MANY_REQUESTS);
    CHECK_RC(tw_batch_submit(a, batch, NULL, 0), TW_OK);
    CHECK_RC(tw_batch_wait(a, batch, 1000), TW_OK);
    CHECK_RC(tw_batch_free(a, batch), TW_OK);

    /* Validation refuses the whole submit; nothing is queued. */
    CHECK_RC(tw_batch_alloc(a, 4, &batch), TW_OK);
    tw_transfer_request bad_op = req(7, seg, src, remote, 16);
    CHECK_RC(tw_batch_submit(a, batch, &bad_op, 1), TW_ERR_INVALID_ARGUMENT);
    tw_transfer_request bad_local[2] = {req(TW_OPCODE_READ, seg, back, remote, 16),
                                        req(TW_OPCODE_READ, seg, hidden, remote, 16)};
    CHECK_RC(tw_batch_submit(a, batch, bad_local, 2), TW_ERR_ADDRESS_NOT_REGISTERED);
    tw_transfer_request straddle = req(TW_OPCODE_WRITE, seg, src + big - 8, remote, 16);
    CHECK_RC(tw_batch_submit(a, batch, &straddle, 1), TW_ERR_ADDRESS_NOT_REGISTERED);
    tw_transfer_request bad_seg = req(TW_OPCODE_READ, 77, back, remote, 16);
    CHECK_RC(tw_batch_submit(a, batch, &bad_seg, 1), TW_ERR_UNKNOWN_SEGMENT);
    tw_transfer_request null_remote = req(TW_OPCODE_READ, seg, back, NULL, 16);
    CHECK_RC(tw_batch_submit(a, batch, &null_remote, 1), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_batch_submit(a, batch, NULL, 1), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_submit(NULL, batch, &zero, 1), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_status(a, batch, 0, &st), TW_ERR_INVALID_ARGUMENT);

    /* Remote side refuses: outside registered memory, not remote-accessible, straddling. */
    memset(back, 0xee, 4096);
    memset(remote + big - 200, 0x11, 200);
    tw_transfer_request refused[4] = {
        req(TW_OPCODE_READ, seg, back, remote + big - 100, 200), /* runs past the region */
        req(TW_OPCODE_WRITE, seg, src, hidden, 16),              /* not remote-accessible */
        req(TW_OPCODE_READ, seg, back + 1024, hidden, 16),       /* not remote-accessible */
        req(TW_OPCODE_READ, seg, back + 2048, remote + big - 200, 200), /* fine */
    };
    CHECK_RC(tw_batch_submit(a, batch, refused, 4), TW_OK);
    CHECK_RC(tw_batch_wait(a, batch, 10000), TW_ERR_REJECTED);
    for (size_t i = 0; i < 3; i++) {
        CHECK_RC(tw_batch_status(a, batch, i, &st), TW_OK);
        CHECK(st.state == TW_TASK_FAILED && st.result == TW_ERR_REJECTED,
              "refused task FAILED with TW_ERR_REJECTED");
    }
    CHECK_RC(tw_batch_status(a, batch, 3, &st), TW_OK);
    CHECK(st.state == TW_TASK_COMPLETED && st.result == TW_OK, "good neighbour completed");
    CHECK(all_bytes(hidden, 4096, 0x5a), "not-remote-accessible memory untouched");
    CHECK(all_bytes(back, 1024 + 16, 0xee), "refused reads wrote nothing locally");
    CHECK(all_bytes(back + 2048, 200, 0x11), "good read landed");
    CHECK_RC(tw_batch_free(a, batch), TW_OK);

    /* Submit and wait in one call: the same outcomes, and a whole READ back. */
    CHECK_RC(tw_batch_alloc(a, 8, &batch), TW_OK);
    memset(back, 0xee, 4096);
    CHECK_RC(tw_batch_submit_and_wait(a, batch, refused, 4, 10000), TW_ERR_REJECTED);
    CHECK_RC(tw_batch_status(a, batch, 2, &st), TW_OK);
    CHECK(st.state == TW_TASK_FAILED && st.result == TW_ERR_REJECTED, "refused task failed");
    CHECK(all_bytes(back + 2048, 200, 0x11), "good read landed (submit_and_wait)");
    CHECK_RC(tw_batch_free(a, batch), TW_OK);
    CHECK_RC(tw_batch_alloc(a, 4, &batch), TW_OK);
    memset(back, 0, big);
    CHECK_RC(tw_batch_submit_and_wait(a, batch, &r, 1, 10000), TW_OK);
    CHECK(memcmp(back, remote, big) == 0, "submit_and_wait read back every byte");
    CHECK_RC(tw_batch_submit_and_wait(a, batch, NULL, 1, 0), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_submit_and_wait(NULL, batch, &r, 1, 0), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_submit_and_wait(a, batch, five, 5, 0), TW_ERR_TOO_MANY_REQUESTS);
    CHECK_RC(tw_batch_free(a, batch), TW_OK);
    CHECK_RC(tw_batch_submit_and_wait(a, batch, &r, 1, 0), TW_ERR_INVALID_ID);

    /* Ids: double free, forged, freed. */
    CHECK_RC(tw_batch_free(a, batch), TW_ERR_INVALID_ID);
    CHECK_RC(tw_batch_status(a, batch, 0, &st), TW_ERR_INVALID_ID);
    CHECK_RC(tw_batch_wait(a, batch, 0), TW_ERR_INVALID_ID);
    CHECK_RC(tw_batch_submit(a, batch, &zero, 1), TW_ERR_INVALID_ID);
    const uint64_t forged[] = {0, 1, 12345, batch + 1, batch ^ ((uint64_t)1 << 40), UINT64_MAX};
    for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
        CHECK_RC(tw_batch_free(a, forged[i]), TW_ERR_INVALID_ID);
        CHECK_RC(tw_batch_status(a, forged[i], 0, &st), TW_ERR_INVALID_ID);
        CHECK_RC(tw_batch_wait(a, forged[i], 0), TW_ERR_INVALID_ID);
    }
    CHECK_RC(tw_batch_free(NULL, batch), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_wait(NULL, batch, 0), TW_ERR_NULL_ARGUMENT);
    /* A batch id belongs to its engine. */
    uint64_t mine = 0;
    CHECK_RC(tw_batch_alloc(a, 1, &mine), TW_OK);
    CHECK_RC(tw_batch_free(b, mine), TW_ERR_INVALID_ID);
    CHECK_RC(tw_batch_free(a, mine), TW_OK);

    CHECK_RC(tw_memory_unregister(a, src), TW_OK);
    CHECK_RC(tw_memory_unregister(a, back), TW_OK);
    CHECK_RC(tw_memory_unregister(b, remote), TW_OK);
    CHECK_RC(tw_memory_unregister(b, hidden), TW_OK);
    free(src);
    free(back);
    free(remote);
    free(hidden);
}

/* A 64 MiB write, then an immediate wait(0) and free while it may still be in flight. */
static void test_busy_free(tw_engine *a, tw_engine *b, int32_t seg) {
    const size_t n = 64 * MiB;
    uint8_t *src = malloc(n), *dst = malloc(n);
    fill_pattern(src, n, 21);
    memset(dst, 0, n);
    CHECK_RC(tw_memory_register(a, src, n, "cpu:0", true), TW_OK);
    CHECK_RC(tw_memory_register(b, dst, n, "cpu:0", true), TW_OK);
    uint64_t batch = 0;
    CHECK_RC(tw_batch_alloc(a, 1, &batch), TW_OK);
    tw_transfer_request w = req(TW_OPCODE_WRITE, seg, src, dst, n);
    double t0 = now_s();
    CHECK_RC(tw_batch_submit(a, batch, &w, 1), TW_OK);
    tw_result rc = tw_batch_wait(a, batch, 0);
    CHECK(rc == TW_ERR_TIMEOUT || rc == TW_OK, "wait(0) is TIMEOUT or OK");
    rc = tw_batch_free(a, batch);
    CHECK(rc == TW_ERR_BUSY || rc == TW_OK, "free in flight is BUSY (or OK if already done)");
    if (rc == TW_ERR_BUSY) {
        tw_transfer_status st;
        CHECK_RC(tw_batch_status(a, batch, 0, &st), TW_OK);
        CHECK_RC(tw_batch_wait(a, batch, 20000), TW_OK);
        CHECK_RC(tw_batch_status(a, batch, 0, &st), TW_OK);
        CHECK(st.state == TW_TASK_COMPLETED && st.transferred_bytes == n, "64 MiB completed");
        CHECK_RC(tw_batch_free(a, batch), TW_OK);
    } else {
        printf("note: 64 MiB write finished before free\n");
    }
    CHECK_RC(tw_batch_free(a, batch), TW_ERR_INVALID_ID);
    CHECK(memcmp(src, dst, n) == 0, "64 MiB arrived intact");
    printf("note: 64 MiB write over loopback took %.3f s\n", now_s() - t0);
    CHECK_RC(tw_memory_unregister(a, src), TW_OK);
    CHECK_RC(tw_memory_unregister(b, dst), TW_OK);
    free(src);
    free(dst);
}

/* ---------------------------------------------------------------- notifications */

static void test_notify(tw_engine *a, tw_engine *b, int32_t seg) {
    tw_notification *list = (tw_notification *)(uintptr_t)0x1;
    size_t count = 99;
    CHECK_RC(tw_notify_take(b, &list, &count), TW_OK);
    CHECK(list == NULL && count == 0, "nothing received yet: NULL, 0");
    tw_notifications_free(NULL, 0);

    CHECK_RC(tw_notify_send(a, seg, "kv-ready", "layer 3"), TW_OK);
    CHECK_RC(tw_notify_send(a, seg, "second", ""), TW_OK);
    CHECK_RC(tw_notify_take(b, &list, &count), TW_OK);
    CHECK(count == 2 && list != NULL, "two notifications arrived");
    if (count == 2 && list != NULL) {
        CHECK(strcmp(list[0].name, "kv-ready") == 0 && strcmp(list[0].msg, "layer 3") == 0,
              "first notification, in order");
        CHECK(strcmp(list[1].name, "second") == 0 && list[1].msg[0] == '\0',
              "second notification with empty message");
    }
    tw_notifications_free(list, count);
    CHECK_RC(tw_notify_take(b, &list, &count), TW_OK);
    CHECK(list == NULL && count == 0, "take drains the queue");

    CHECK_RC(tw_notify_send(a, TW_LOCAL_SEGMENT, "self", "hello"), TW_OK);
    CHECK_RC(tw_notify_take(a, &list, &count), TW_OK);
    CHECK(count == 1 && strcmp(list[0].name, "self") == 0, "local notification");
    tw_notifications_free(list, count);

    CHECK_RC(tw_notify_send(a, 999, "x", "y"), TW_ERR_UNKNOWN_SEGMENT);
    CHECK_RC(tw_notify_send(a, seg, NULL, "y"), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_notify_send(a, seg, "x", NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_notify_send(NULL, seg, "x", "y"), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_notify_take(b, NULL, &count), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_notify_take(b, &list, NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_notify_take(NULL, &list, &count), TW_ERR_NULL_ARGUMENT);

    /* submit_with_notify: sent once the whole batch is observed completed. */
    uint8_t *src = malloc(65536), *dst = malloc(65536), *hidden = malloc(64);
    fill_pattern(src, 65536, 4);
    memset(dst, 0, 65536);
    CHECK_RC(tw_memory_register(a, src, 65536, NULL, true), TW_OK);
    CHECK_RC(tw_memory_register(b, dst, 65536, NULL, true), TW_OK);
    CHECK_RC(tw_memory_register(b, hidden, 64, NULL, false), TW_OK);
    uint64_t batch = 0;
    CHECK_RC(tw_batch_alloc(a, 4, &batch), TW_OK);
    tw_transfer_request w = req(TW_OPCODE_WRITE, seg, src, dst, 65536);
    CHECK_RC(tw_batch_submit_with_notify(a, batch, &w, 1, "done", "batch 1"), TW_OK);
    CHECK_RC(tw_batch_wait(a, batch, 10000), TW_OK);
    CHECK(memcmp(src, dst, 65536) == 0, "notified write arrived");
    CHECK_RC(tw_notify_take(b, &list, &count), TW_OK);
    CHECK(count == 1 && strcmp(list[0].name, "done") == 0 && strcmp(list[0].msg, "batch 1") == 0,
          "completion notification delivered once");
    tw_notifications_free(list, count);
    CHECK_RC(tw_batch_wait(a, batch, 1000), TW_OK);
    CHECK_RC(tw_notify_take(b, &list, &count), TW_OK);
    CHECK(count == 0, "no duplicate notification");
    CHECK_RC(tw_batch_free(a, batch), TW_OK);

    /* A failed batch never notifies. */
    CHECK_RC(tw_batch_alloc(a, 4, &batch), TW_OK);
    tw_transfer_request bad = req(TW_OPCODE_WRITE, seg, src, hidden, 64);
    CHECK_RC(tw_batch_submit_with_notify(a, batch, &bad, 1, "never", "sent"), TW_OK);
    CHECK_RC(tw_batch_wait(a, batch, 10000), TW_ERR_REJECTED);
    CHECK_RC(tw_notify_take(b, &list, &count), TW_OK);
    CHECK(count == 0, "failed batch sent no notification");
    tw_notifications_free(list, count);
    CHECK_RC(tw_batch_submit_with_notify(a, batch, NULL, 0, "n", "m"), TW_ERR_INVALID_ARGUMENT);
    CHECK_RC(tw_batch_submit_with_notify(a, batch, &w, 1, NULL, "m"), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_submit_with_notify(a, batch, &w, 1, "n", NULL), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_submit_with_notify(a, 424242, &w, 1, "n", "m"), TW_ERR_INVALID_ID);
    CHECK_RC(tw_batch_submit_with_notify(NULL, batch, &w, 1, "n", "m"), TW_ERR_NULL_ARGUMENT);
    CHECK_RC(tw_batch_free(a, batch), TW_OK);

    CHECK_RC(tw_memory_unregister(a, src), TW_OK);
    CHECK_RC(tw_memory_unregister(b, dst), TW_OK);
    CHECK_RC(tw_memory_unregister(b, hidden), TW_OK);
    free(src);
    free(dst);
    free(hidden);
}

/* ---------------------------------------------------------------- threads */

#define THREADS 4
#define ROUNDS 50
#define CHUNK (16 * KiB)

struct worker {
    const tw_engine *engine;
    const char *peer_name;
    int index;
    uint8_t *local;  /* 2 * CHUNK: source, then read-back */
    uint8_t *remote; /* CHUNK on the peer */
    int failures;
    char first[256];
};

static void worker_fail(struct worker *w, const char *what, tw_result rc) {
    if (w->failures++ == 0) {
        char detail[160];
        tw_last_error_message(detail, sizeof detail);
        snprintf(w->first, sizeof w->first, "thread %d: %s: %s (%s)", w->index, what,
                 tw_result_str(rc), detail);
    }
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    int32_t seg = -1;
    tw_result rc = tw_segment_open(w->engine, w->peer_name, &seg);
    if (rc != TW_OK) {
        worker_fail(w, "segment_open", rc);
        return NULL;
    }
    uint64_t batch = 0;
    if ((rc = tw_batch_alloc(w->engine, 2 * ROUNDS, &batch)) != TW_OK) {
        worker_fail(w, "batch_alloc", rc);
        return NULL;
    }
    for (int i = 0; i < ROUNDS; i++) {
        unsigned seed = (unsigned)(w->index * 1000 + i);
        size_t len = CHUNK - (size_t)i * 61; /* a different length each round */
        fill_pattern(w->local, len, seed);
        memset(w->local + CHUNK, 0, CHUNK);
        tw_transfer_request wr = req(TW_OPCODE_WRITE, seg, w->local, w->remote, len);
        tw_transfer_request rd = req(TW_OPCODE_READ, seg, w->local + CHUNK, w->remote, len);
        if ((rc = tw_batch_submit(w->engine, batch, &wr, 1)) != TW_OK ||
            (rc = tw_batch_wait(w->engine, batch, 10000)) != TW_OK) {
            worker_fail(w, "write", rc);
            break;
        }
        if ((rc = tw_batch_submit(w->engine, batch, &rd, 1)) != TW_OK ||
            (rc = tw_batch_wait(w->engine, batch, 10000)) != TW_OK) {
            worker_fail(w, "read", rc);
            break;
        }
        if (!has_pattern(w->local + CHUNK, len, seed)) {
            worker_fail(w, "bytes differ after write + read", TW_OK);
            break;
        }
    }
    tw_transfer_status st;
    if ((rc = tw_batch_status(w->engine, batch, 2 * ROUNDS - 1, &st)) != TW_OK ||
        st.state != TW_TASK_COMPLETED)
        worker_fail(w, "last task status", rc);
    if ((rc = tw_batch_free(w->engine, batch)) != TW_OK) worker_fail(w, "batch_free", rc);
    return NULL;
}

static void test_threads(tw_engine *a, tw_engine *b, const char *b_name) {
    uint8_t *local = malloc(THREADS * 2 * CHUNK), *remote = malloc(THREADS * CHUNK);
    memset(remote, 0, THREADS * CHUNK);
    CHECK_RC(tw_memory_register(a, local, THREADS * 2 * CHUNK, "cpu:0", true), TW_OK);
    CHECK_RC(tw_memory_register(b, remote, THREADS * CHUNK, "cpu:0", true), TW_OK);
    struct worker w[THREADS];
    pthread_t th[THREADS];
    double t0 = now_s();
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){a, b_name, i, local + (size_t)i * 2 * CHUNK,
                               remote + (size_t)i * CHUNK, 0, ""};
        CHECK(pthread_create(&th[i], NULL, worker_main, &w[i]) == 0, "worker starts");
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK(w[i].failures == 0, w[i].failures ? w[i].first : "worker ok");
    }
    printf("note: %d threads x %d write+read rounds took %.3f s\n", THREADS, ROUNDS, now_s() - t0);
    CHECK_RC(tw_memory_unregister(a, local), TW_OK);
    CHECK_RC(tw_memory_unregister(b, remote), TW_OK);
    free(local);
    free(remote);
}

int main(void) {
    double t0 = now_s();
    test_version_and_codes();
    test_config_and_engine();

    tw_engine *a = new_engine(), *b = new_engine();
    CHECK(a != NULL && b != NULL, "two engines start");
    if (a == NULL || b == NULL) {
        tw_engine_free(a);
        tw_engine_free(b);
        return test_footer();
    }
    char a_name[64], b_name[64];
    CHECK_RC(tw_engine_segment_name(a, a_name, sizeof a_name), TW_OK);
    CHECK_RC(tw_engine_segment_name(b, b_name, sizeof b_name), TW_OK);

    test_memory(a);
    test_segments(a, b, a_name, b_name);
    int32_t seg = -1;
    CHECK_RC(tw_segment_open(a, b_name, &seg), TW_OK);
    test_batches(a, b, seg);
    test_busy_free(a, b, seg);
    test_notify(a, b, seg);
    test_threads(a, b, b_name);

    tw_engine_free(a);
    tw_engine_free(b);
    printf("note: test_native_api took %.2f s\n", now_s() - t0);
    return test_footer();
}
