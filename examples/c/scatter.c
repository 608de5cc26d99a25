/*
 * scatter.c — gathers 1024 scattered 4 KiB blocks of a peer's buffer into one contiguous local
 * buffer with a single scatter operation (think: KV-cache pages), counting completions with the
 * per-fragment callback.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tidewire.h"

#define BLOCKS 1024
#define BLOCK 4096

static void check(tw_result rc, const char *what) {
    if (rc == TW_OK) return;
    char detail[256];
    tw_last_error_message(detail, sizeof detail);
    fprintf(stderr, "%s failed: %s (%s)\n", what, tw_result_str(rc), detail);
    exit(1);
}

struct progress {
    size_t ok, failed;
};

/* Runs on the thread that calls tw_scatter_wait, once per fragment. */
static void on_block(void *user, size_t fragment, tw_result result) {
    struct progress *p = user;
    (void)fragment;
    if (result == TW_OK)
        p->ok++;
    else
        p->failed++;
}

int main(void) {
    tw_engine *local = NULL, *peer = NULL;
    check(tw_engine_new(NULL, &local), "tw_engine_new");
    check(tw_engine_new(NULL, &peer), "tw_engine_new");
    char peer_name[64];
    check(tw_engine_segment_name(peer, peer_name, sizeof peer_name), "segment name");

    /* The peer's pool holds 4 * BLOCKS blocks; we want every fourth one, in reverse. */
    const size_t pool_len = (size_t)4 * BLOCKS * BLOCK, out_len = (size_t)BLOCKS * BLOCK;
    uint8_t *pool = malloc(pool_len), *out = malloc(out_len);
    for (size_t i = 0; i < pool_len; i++) pool[i] = (uint8_t)(i / BLOCK);
    memset(out, 0, out_len);
    check(tw_memory_register(peer, pool, pool_len, "cpu:0", true), "register pool");
    check(tw_memory_register(local, out, out_len, "cpu:0", true), "register out");

    int32_t seg = -1;
    check(tw_segment_open(local, peer_name, &seg), "tw_segment_open");

    size_t *local_off = malloc(BLOCKS * sizeof(size_t)), *remote_off = malloc(BLOCKS * sizeof(size_t)),
           *lengths = malloc(BLOCKS * sizeof(size_t));
    for (size_t i = 0; i < BLOCKS; i++) {
        local_off[i] = i * BLOCK;
        remote_off[i] = (BLOCKS - 1 - i) * 4 * BLOCK;
        lengths[i] = BLOCK;
    }
    tw_scatter_range range = {TW_OPCODE_READ, seg,       (uint64_t)(uintptr_t)pool,
                              pool_len,       out,       out_len,
                              local_off,      remote_off, lengths,
                              BLOCKS};
    struct progress prog = {0, 0};
    uint64_t op = 0;
    check(tw_scatter_submit(local, &range, 1, on_block, &prog, &op), "tw_scatter_submit");
    free(local_off); /* read during submit only */
    free(remote_off);
    free(lengths);
    check(tw_scatter_wait(local, op, 10000, NULL, 0), "tw_scatter_wait");
    check(tw_scatter_free(local, op), "tw_scatter_free");
    printf("%zu blocks arrived, %zu failed\n", prog.ok, prog.failed);

    size_t wrong = 0;
    for (size_t i = 0; i < BLOCKS; i++) {
        uint8_t want = (uint8_t)((BLOCKS - 1 - i) * 4);
        for (size_t j = 0; j < BLOCK; j++) wrong += out[i * BLOCK + j] != want;
    }
    printf("verify: %s\n", wrong == 0 ? "every byte matches" : "MISMATCH");

    check(tw_memory_unregister(local, out), "unregister out");
    check(tw_memory_unregister(peer, pool), "unregister pool");
    tw_engine_free(local);
    tw_engine_free(peer);
    free(pool);
    free(out);
    return wrong == 0 && prog.ok == BLOCKS ? 0 : 1;
}
