/*
 * test_store_sessions.c — get sessions and replica descriptors through the C API
 * (tw_store_get_session_start / _ranges / _end, tw_store_get_replicas) against a real
 * tidewire-master (store_master.h) with two clients, so the bytes cross engines: 16 keys read
 * layer by layer in ranges, a session that keeps the version it looked up while the key is
 * upserted, bad fragments, keys without a session, and bad arguments.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "common.h"
#include "store_master.h"

enum { N = 16, LEN = 64 << 10, LAYERS = 4 };

static void put(tw_store *s, const char *key, const unsigned char *v, uint64_t len) {
    const char *k[1] = {key};
    const void *p[1] = {v};
    uint64_t z[1] = {len};
    int32_t code = -1;
    CHECK_RC(tw_store_put(s, k, NULL, p, z, 1, 1, 0, NULL, &code), TW_STORE_OK);
    CHECK(code == 0, "put");
}

int main(void) {
    char master[64];
    if (start_master(master, sizeof master) != 0) {
        fprintf(stderr, "cannot start tidewire-master\n");
        return 1;
    }
    tw_store *server = NULL, *client = NULL;
    CHECK_RC(tw_store_setup("127.0.0.1", "P2PHANDSHAKE", 64u << 20, 16u << 20, "tcp", NULL,
                            master, &server), TW_STORE_OK);
    CHECK_RC(tw_store_setup("127.0.0.1", NULL, 0, 16u << 20, "tcp", NULL, master, &client),
             TW_STORE_OK);
    if (!server || !client) {
        stop_master();
        return test_footer();
    }
    unsigned char *want = malloc((size_t)N * LEN), *dst = calloc(N, LEN);
    char names[N][16];
    const char *keys[N + 1];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "cs/%d", i);
        keys[i] = names[i];
        fill_pattern(want + (size_t)i * LEN, LEN, (unsigned)i + 1);
        put(server, keys[i], want + (size_t)i * LEN, LEN);
    }
    keys[N] = "cs/missing";

    int32_t codes[N + 1];
    CHECK_RC(tw_store_get_session_start(client, keys, NULL, N + 1, codes), TW_STORE_OK);
    int started = 1;
    for (int i = 0; i < N; i++) started &= codes[i] == 0;
    CHECK(started && codes[N] == TW_STORE_OBJECT_NOT_FOUND, "session start: 0 per key, -704");

    /* Layer by layer: one fragment per key per layer. */
    size_t counts[N];
    void *ptrs[N];
    uint64_t sizes[N], offs[N];
    int64_t got[N];
    const uint64_t part = LEN / LAYERS;
    int layers_ok = 1;
    for (int layer = 0; layer < LAYERS; layer++) {
        for (int i = 0; i < N; i++) {
            counts[i] = 1;
            ptrs[i] = dst + (size_t)i * LEN + layer * part;
            sizes[i] = part;
            offs[i] = layer * part;
        }
        CHECK_RC(tw_store_get_session_ranges(client, keys, NULL, counts, N, ptrs, sizes, offs, N,
                                             got), TW_STORE_OK);
        for (int i = 0; i < N; i++) layers_ok &= got[i] == (int64_t)part;
    }
    CHECK(layers_ok, "session ranges: every layer's bytes per key");
    CHECK(memcmp(dst, want, (size_t)N * LEN) == 0, "session ranges: every byte");

    /* The session keeps the version it looked up while the key is upserted. */
    unsigned char *other = malloc(LEN);
    fill_pattern(other, LEN, 99);
    put(server, keys[0], other, LEN);
    memset(dst, 0, LEN);
    size_t one[1] = {1};
    void *whole[1] = {dst};
    uint64_t len[1] = {LEN}, zero[1] = {0};
    CHECK_RC(tw_store_get_session_ranges(client, keys, NULL, one, 1, whole, len, zero, 1, got),
             TW_STORE_OK);
    CHECK(got[0] == LEN && memcmp(dst, want, LEN) == 0, "a session reads the version it held");

    /* Bad fragments fail their key; a count mismatch or NULL array fails the call. */
    uint64_t past[1] = {LEN - 1}, two[1] = {2};
    CHECK_RC(tw_store_get_session_ranges(client, keys + 1, NULL, one, 1, whole, two, past, 1,
                                         got), TW_STORE_OK);
    CHECK(got[0] == TW_STORE_INVALID_PARAMS, "a fragment past the end is -600");
    CHECK_RC(tw_store_get_session_ranges(client, keys + N, NULL, one, 1, whole, len, zero, 1,
                                         got), TW_STORE_OK);
    CHECK(got[0] == TW_STORE_INVALID_PARAMS, "a key without a session is -600");
    CHECK_RC(tw_store_get_session_ranges(client, keys, NULL, one, 1, whole, len, zero, 2, got),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_get_session_ranges(client, keys, NULL, one, 1, NULL, len, zero, 1, got),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_get_session_start(NULL, keys, NULL, 1, codes), TW_STORE_INVALID_PARAMS);

    CHECK_RC(tw_store_get_session_end(client, keys, NULL, N + 1), TW_STORE_OK);
    CHECK_RC(tw_store_get_session_ranges(client, keys, NULL, one, 1, whole, len, zero, 1, got),
             TW_STORE_OK);
    CHECK(got[0] == TW_STORE_INVALID_PARAMS, "after the end, ranges are -600");
    CHECK_RC(tw_store_get_session_end(client, keys, NULL, 1), TW_STORE_OK);

    /* Replica descriptors: the owner's endpoint, the size; misses are -704. */
    tw_store_replica reps[2 * TW_STORE_MAX_REPLICAS];
    int64_t nrep[2];
    const char *rk[2] = {keys[3], keys[N]};
    CHECK_RC(tw_store_get_replicas(client, rk, NULL, 2, reps, nrep), TW_STORE_OK);
    char host[512];
    CHECK_RC(tw_store_hostname(server, host, sizeof host), TW_STORE_OK);
    CHECK(nrep[0] == 1 && strcmp(reps[0].endpoint, host) == 0 && reps[0].size == LEN &&
              reps[0].addr != 0,
          "replicas: one, on the owner's segment, of the value's size");
    CHECK(nrep[1] == TW_STORE_OBJECT_NOT_FOUND, "replicas of a missing key: -704");
    CHECK_RC(tw_store_get_replicas(client, rk, NULL, 2, NULL, nrep), TW_STORE_INVALID_PARAMS);

    tw_store_free(client);
    tw_store_free(server);
    stop_master();
    free(want);
    free(dst);
    free(other);
    return test_footer();
}
