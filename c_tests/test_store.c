/*
 * test_store.c — the Store's C API (tw_store_*) against a real tidewire-master process started
 * here (store_master.h), with two clients: one contributing a segment, one without (its bytes
 * cross engines). Covers copying and zero-copy puts/gets, create-only vs upsert, ranges,
 * existence, leases, removal, error codes and bad arguments. Keys with their lengths (embedded
 * NULs, the length limit) are in test_store_keys.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "common.h"
#include "store_master.h"

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
    char host[128];
    CHECK_RC(tw_store_hostname(client, host, sizeof host), TW_STORE_OK);
    CHECK(strncmp(host, "127.0.0.1:", 10) == 0, "hostname is 127.0.0.1:port");
    CHECK_RC(tw_store_hostname(client, host, 3), TW_STORE_BUFFER_OVERFLOW);
    /* One code space with tw_result: the two codes whose Mooncake numbers are tw_result numbers
       are the TW_ERR_* codes of the same meaning; the others have their own names. */
    CHECK(TW_STORE_BUFFER_OVERFLOW == TW_ERR_BUFFER_TOO_SMALL, "BUFFER_OVERFLOW is TOO_SMALL");
    CHECK(TW_STORE_INTERNAL_ERROR == TW_ERR_INTERNAL, "INTERNAL_ERROR is TW_ERR_INTERNAL");
    CHECK(strcmp(tw_result_str(TW_STORE_OBJECT_NOT_FOUND), "TW_STORE_OBJECT_NOT_FOUND") == 0,
          "store codes are named");
    CHECK(strcmp(tw_result_str(TW_STORE_INTERNAL_ERROR), "TW_ERR_INTERNAL") == 0,
          "TW_STORE_INTERNAL_ERROR is named as TW_ERR_INTERNAL");
    CHECK_RC(tw_store_health_check(client), 0);
    CHECK_RC(tw_store_health_check(NULL), 1);

    /* Zero-copy put of three keys from registered memory. */
    enum { N = 3, LEN = 3 << 20 };
    unsigned char *src = malloc(LEN * N), *dst = malloc(LEN * N);
    for (size_t i = 0; i < (size_t)LEN * N; i++) src[i] = (unsigned char)(i * 7 + 1);
    CHECK_RC(tw_store_register_buffer(client, src, LEN * N), TW_STORE_OK);
    CHECK_RC(tw_store_register_buffer(client, dst, LEN * N), TW_STORE_OK);
    const char *keys[N] = {"c0", "c1", "c2"};
    const void *ptrs[N] = {src, src + LEN, src + 2 * LEN};
    void *dptrs[N] = {dst, dst + LEN, dst + 2 * LEN};
    uint64_t sizes[N] = {LEN, LEN, 100};
    int32_t codes[N];
    int64_t got[N];
    tw_store_replicate_config cfg = {1, true, false, NULL};
    CHECK_RC(tw_store_put(client, keys, NULL, ptrs, sizes, N, 0, 0, &cfg, codes), TW_STORE_OK);
    CHECK(codes[0] == 0 && codes[1] == 0 && codes[2] == 0, "zero-copy put of 3 keys");
    CHECK_RC(tw_store_get_into(client, keys, NULL, dptrs, sizes, N, got), TW_STORE_OK);
    CHECK(got[0] == LEN && got[1] == LEN && got[2] == 100, "bytes read per key");
    CHECK(memcmp(src, dst, (size_t)LEN * 2 + 100) == 0, "values read back intact");

    /* Create-only put keeps the old value; upsert replaces it (copying path). */
    const char *k0[1] = {"c2"};
    const void *p0[1] = {"abc"};
    uint64_t s0[1] = {3};
    CHECK_RC(tw_store_put(client, k0, NULL, p0, s0, 1, 0, 1, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == 0, "duplicate put is 0");
    CHECK_RC(tw_store_get_size(client, "c2", 2), 100);
    CHECK_RC(tw_store_put(client, k0, NULL, p0, s0, 1, 1, 1, NULL, codes), TW_STORE_OK);
    tw_store_value v[2];
    const char *k2[2] = {"c2", "missing"};
    CHECK_RC(tw_store_get_copy(client, k2, NULL, 2, v, got), TW_STORE_OK);
    CHECK(got[0] == 3 && v[0].len == 3 && memcmp(v[0].data, "abc", 3) == 0, "upserted value");
    CHECK(got[1] == TW_STORE_OBJECT_NOT_FOUND && v[1].data == NULL, "miss is -704");
    tw_store_value_release(&v[0]);
    tw_store_value_release(&v[0]);
    tw_store_value_release(NULL);

    /* Ranged reads and a too-small buffer. */
    const char *rk[2] = {"c0", "c0"};
    void *rd[2] = {dst, dst + 10};
    uint64_t ro[2] = {5, LEN - 4}, rl[2] = {10, 8};
    CHECK_RC(tw_store_get_ranges(client, rk, NULL, rd, ro, rl, 2, got), TW_STORE_OK);
    CHECK(got[0] == 10 && memcmp(dst, src + 5, 10) == 0, "range inside the object");
    CHECK(got[1] == TW_STORE_INVALID_PARAMS, "range past the end is -600");
    uint64_t small[1] = {LEN - 1};
    void *d0[1] = {dst};
    CHECK_RC(tw_store_get_into(client, keys, NULL, d0, small, 1, got), TW_STORE_OK);
    CHECK(got[0] == TW_STORE_INVALID_PARAMS, "buffer too small is -600");

    /* Existence, lease, removal. */
    int32_t ex[2];
    const char *ek[2] = {"c0", "nope"};
    CHECK_RC(tw_store_exist(client, ek, NULL, 2, ex), TW_STORE_OK);
    CHECK(ex[0] == 1 && ex[1] == 0, "exist 1/0");
    CHECK_RC(tw_store_remove(client, ek, NULL, 2, false, ex), TW_STORE_OK);
    CHECK(ex[0] == TW_STORE_OBJECT_HAS_LEASE && ex[1] == TW_STORE_OBJECT_NOT_FOUND,
          "leased -706, missing -704");
    CHECK_RC(tw_store_remove(client, ek, NULL, 1, true, ex), TW_STORE_OK);
    CHECK(ex[0] == 0, "forced removal");
    CHECK_RC(tw_store_remove_by_regex(client, "^c[12]$", true), 2);
    CHECK_RC(tw_store_remove_by_regex(client, "(", true), TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_remove_all(client, true), 0);

    /* Bad arguments: clear codes, no crash. */
    CHECK_RC(tw_store_put(NULL, keys, NULL, ptrs, sizes, 1, 0, 0, NULL, codes),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_put(client, NULL, NULL, ptrs, sizes, 1, 0, 0, NULL, codes),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_get_into(client, keys, NULL, dptrs, sizes, 1, NULL), TW_STORE_INVALID_PARAMS);
    const char *nk[1] = {NULL};
    CHECK_RC(tw_store_put(client, nk, NULL, ptrs, sizes, 1, 1, 0, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == TW_STORE_INVALID_PARAMS, "NULL key is -600");
    const void *bad[1] = {(const void *)8};
    CHECK_RC(tw_store_put(client, keys, NULL, bad, sizes, 1, 1, 0, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == TW_STORE_INVALID_PARAMS, "unmapped source is -600");
    uint64_t huge[1] = {1ull << 40};
    CHECK_RC(tw_store_put(client, keys, NULL, ptrs, huge, 1, 1, 0, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == TW_STORE_NO_AVAILABLE_HANDLE, "no segment has room: -200");
    CHECK_RC(tw_store_register_buffer(client, NULL, 10), TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_get_size(client, NULL, 0), TW_STORE_INVALID_PARAMS);
    tw_store *none = NULL;
    CHECK_RC(tw_store_setup("127.0.0.1", "redis://x:6379", 0, 0, "tcp", NULL, master, &none),
             TW_STORE_INVALID_PARAMS);
    /* etcd metadata is accepted; with no etcd listening it is still a clear error. */
    CHECK(tw_store_setup("127.0.0.1", "etcd://127.0.0.1:1", 0, 0, "tcp", NULL, master, &none) < 0,
          "unreachable etcd metadata fails setup");
    CHECK_RC(tw_store_setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "carrier-pigeon", NULL, master,
                            &none),
             TW_STORE_INVALID_PARAMS);
    CHECK(none == NULL, "no handle on failure");

    CHECK_RC(tw_store_unregister_buffer(client, src), TW_STORE_OK);
    CHECK_RC(tw_store_unregister_buffer(client, dst), TW_STORE_OK);
    tw_store_free(client);
    tw_store_free(server);
    tw_store_free(NULL);

    /* With the master gone, calls fail fast with -900. */
    tw_store *c2 = NULL;
    stop_master();
    CHECK_RC(tw_store_setup("127.0.0.1", NULL, 0, 0, "tcp", NULL, master, &c2), TW_STORE_RPC_FAIL);
    free(src);
    free(dst);
    return test_footer();
}
