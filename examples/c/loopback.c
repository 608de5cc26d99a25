/*
 * loopback.c — the smallest complete use of the native API: two engines in one process, one
 * registered buffer each, a WRITE from A into B and a READ back, every byte verified.
 *
 *   make examples        (or: gcc -std=c11 -Iinclude examples/c/loopback.c
 *                              -Ltarget/release -ltidewire -Wl,-rpath,$PWD/target/release)
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidewire.h"

/* Prints the failing call with the library's explanation and exits. */
static void check(tw_result rc, const char *what) {
    if (rc == TW_OK) return;
    char detail[256];
    tw_last_error_message(detail, sizeof detail);
    fprintf(stderr, "%s failed: %s (%s)\n", what, tw_result_str(rc), detail);
    exit(1);
}

static tw_engine *start_engine(void) {
    tw_config *cfg = NULL;
    tw_engine *engine = NULL;
    check(tw_config_new(&cfg), "tw_config_new");
    check(tw_config_set(cfg, "local_server_name", "127.0.0.1"), "tw_config_set");
    check(tw_engine_new(cfg, &engine), "tw_engine_new");
    tw_config_free(cfg); /* the engine keeps its own copy */
    return engine;
}

/* Submits one request, waits for it, frees the batch. */
static void transfer(const tw_engine *e, int32_t op, int32_t seg, void *local, void *remote,
                     size_t len) {
    uint64_t batch = 0;
    tw_transfer_request req = {op, seg, local, (uint64_t)(uintptr_t)remote, len};
    tw_transfer_status st;
    check(tw_batch_alloc(e, 1, &batch), "tw_batch_alloc");
    check(tw_batch_submit(e, batch, &req, 1), "tw_batch_submit");
    check(tw_batch_wait(e, batch, 10000), "tw_batch_wait");
    check(tw_batch_status(e, batch, 0, &st), "tw_batch_status");
    printf("  %s of %zu bytes: state %d, %llu bytes moved\n",
           op == TW_OPCODE_WRITE ? "WRITE" : "READ", len, (int)st.state,
           (unsigned long long)st.transferred_bytes);
    check(tw_batch_free(e, batch), "tw_batch_free");
}

int main(void) {
    const size_t len = 8u << 20; /* 8 MiB */
    printf("tidewire %s\n", tw_version());

    tw_engine *a = start_engine(), *b = start_engine();
    char b_name[64];
    check(tw_engine_segment_name(b, b_name, sizeof b_name), "tw_engine_segment_name");
    printf("engine B serves segment %s\n", b_name);

    uint8_t *src = malloc(len), *back = malloc(len), *remote = malloc(len);
    for (size_t i = 0; i < len; i++) src[i] = (uint8_t)(i * 13 + 7);
    memset(back, 0, len);
    memset(remote, 0, len);
    check(tw_memory_register(a, src, len, "cpu:0", true), "register src");
    check(tw_memory_register(a, back, len, "cpu:0", true), "register back");
    check(tw_memory_register(b, remote, len, "cpu:0", true), "register remote");

    int32_t seg = -1;
    check(tw_segment_open(a, b_name, &seg), "tw_segment_open");
    printf("A opened B as segment %d\n", (int)seg);

    transfer(a, TW_OPCODE_WRITE, seg, src, remote, len);
    transfer(a, TW_OPCODE_READ, seg, back, remote, len);

    int ok = memcmp(src, remote, len) == 0 && memcmp(src, back, len) == 0;
    printf("verify: %s\n", ok ? "every byte matches" : "MISMATCH");

    check(tw_memory_unregister(a, src), "unregister src");
    check(tw_memory_unregister(a, back), "unregister back");
    check(tw_memory_unregister(b, remote), "unregister remote");
    tw_engine_free(a);
    tw_engine_free(b);
    free(src);
    free(back);
    free(remote);
    return ok ? 0 : 1;
}
