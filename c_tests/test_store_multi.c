/*
 * test_store_multi.c — values in several pieces through the C API (tw_store_put_multi,
 * tw_store_get_into_multi) against a real tidewire-master (store_master.h) with two clients, so
 * the bytes cross engines: 128 keys of 64-256 KiB in 1-4 pieces each, written from registered
 * memory and read back into unregistered memory split at other points; create-only vs upsert;
 * and bad arguments: counts that do not add up, NULL arrays, NULL, empty and unmapped pieces,
 * too little room, misses, bad keys.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "common.h"
#include "store_master.h"

enum { N = 128, SLOT = 260 << 10, MAXP = 4 };

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(uint64_t below) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (rng_state * 0x2545F4914F6CDD1Dull) % below;
}

/* Splits `len` bytes at `base` into 1-4 pieces, `gap` bytes apart; returns how many. */
static size_t split(unsigned char *base, uint64_t len, uint64_t gap, const void **ptrs,
                    uint64_t *sizes) {
    size_t n = 1 + (size_t)rnd(MAXP);
    uint64_t cuts[MAXP];
    for (size_t i = 0; i + 1 < n; i++) cuts[i] = 1 + rnd(len - 1);
    for (size_t i = 1; i + 1 < n; i++) /* insertion sort */
        for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
            uint64_t t = cuts[j];
            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
    cuts[n - 1] = len;
    uint64_t at = 0;
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (cuts[i] == at) continue; /* a repeated cut: one piece fewer */
        ptrs[out] = base + at + out * gap;
        sizes[out] = cuts[i] - at;
        at = cuts[i];
        out++;
    }
    return out;
}

/* The bytes of `n` pieces, concatenated, equal `want`. */
static int pieces_equal(const void *const *ptrs, const uint64_t *sizes, size_t n,
                        const unsigned char *want) {
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(ptrs[i], want + at, sizes[i]) != 0) return 0;
        at += sizes[i];
    }
    return 1;
}

int main(void) {
    char master[64];
    if (start_master(master, sizeof master) != 0) {
        fprintf(stderr, "cannot start tidewire-master\n");
        return 1;
    }
    tw_store *server = NULL, *client = NULL;
    CHECK_RC(tw_store_setup("127.0.0.1", "P2PHANDSHAKE", 160u << 20, 16u << 20, "tcp", NULL,
                            master, &server), TW_STORE_OK);
    CHECK_RC(tw_store_setup("127.0.0.1", NULL, 0, 16u << 20, "tcp", NULL, master, &client),
             TW_STORE_OK);
    if (!server || !client) {
        stop_master();
        return test_footer();
    }

    /* 128 keys in 1-4 pieces from registered memory. */
    unsigned char *src = malloc((size_t)N * SLOT), *dst = malloc((size_t)N * SLOT);
    unsigned char *want = malloc((size_t)N * SLOT);
    CHECK_RC(tw_store_register_buffer(client, src, (uint64_t)N * SLOT), TW_STORE_OK);
    static char names[N][16];
    const char *keys[N];
    uint64_t lens[N];
    size_t counts[N], gcounts[N], np = 0, gp = 0;
    const void *ptrs[N * MAXP];
    void *gptrs[N * MAXP];
    uint64_t sizes[N * MAXP], gsizes[N * MAXP];
    int32_t codes[N];
    int64_t got[N];
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "m%zu", i);
        keys[i] = names[i];
        lens[i] = (64u << 10) + rnd(192u << 10) + 1;
        counts[i] = split(src + i * SLOT, lens[i], 1024, ptrs + np, sizes + np);
        uint64_t at = 0;
        for (size_t j = 0; j < counts[i]; j++) {
            fill_pattern((uint8_t *)ptrs[np + j], sizes[np + j], (unsigned)(i * 5 + j));
            memcpy(want + i * SLOT + at, ptrs[np + j], sizes[np + j]);
            at += sizes[np + j];
        }
        np += counts[i];
        const void *tmp[MAXP];
        gcounts[i] = split(dst + i * SLOT, lens[i], 512, tmp, gsizes + gp);
        for (size_t j = 0; j < gcounts[i]; j++) gptrs[gp + j] = (void *)tmp[j];
        gp += gcounts[i];
    }
    tw_store_replicate_config cfg = {1, false, false, NULL};
    CHECK_RC(tw_store_put_multi(client, keys, NULL, counts, N, ptrs, sizes, np, 0, &cfg, codes),
             TW_STORE_OK);
    int all_ok = 1;
    for (size_t i = 0; i < N; i++) all_ok &= codes[i] == 0;
    CHECK(all_ok, "put_multi: 0 for every key");
    /* `dst` is not registered: the call registers it for its duration. */
    CHECK_RC(tw_store_get_into_multi(client, keys, NULL, gcounts, N, gptrs, gsizes, gp, got),
             TW_STORE_OK);
    int sizes_ok = 1, bytes_ok = 1;
    gp = 0;
    for (size_t i = 0; i < N; i++) {
        sizes_ok &= got[i] == (int64_t)lens[i];
        bytes_ok &= pieces_equal((const void *const *)(gptrs + gp), gsizes + gp, gcounts[i],
                                 want + i * SLOT);
        gp += gcounts[i];
    }
    CHECK(sizes_ok, "get_into_multi: the value's size per key");
    CHECK(bytes_ok, "get_into_multi: every byte, split at other points");
    /* The segment owner reads its own memory (memcpy), into one piece per key. */
    void *one[1] = {dst};
    uint64_t room[1] = {SLOT};
    size_t c1[1] = {1};
    CHECK_RC(tw_store_get_into_multi(server, keys + 5, NULL, c1, 1, one, room, 1, got),
             TW_STORE_OK);
    CHECK(got[0] == (int64_t)lens[5] && memcmp(dst, want + 5 * SLOT, lens[5]) == 0,
          "owner reads into one piece");

    /* Create-only keeps the old value; upsert replaces it. Zero-size pieces are skipped. */
    const char *k0[1] = {"m0"};
    const void *p2[3] = {"abc", NULL, "defg"};
    uint64_t s2[3] = {3, 0, 4};
    size_t c3[1] = {3};
    CHECK_RC(tw_store_put_multi(client, k0, NULL, c3, 1, p2, s2, 3, 0, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == 0 && tw_store_get_size(client, "m0", 2) == (int64_t)lens[0],
          "create-only put keeps the old value");
    CHECK_RC(tw_store_put_multi(client, k0, NULL, c3, 1, p2, s2, 3, 1, NULL, codes), TW_STORE_OK);
    char back[16];
    memset(back, '.', sizeof back);
    void *bp[2] = {back, back + 2};
    uint64_t bs[2] = {2, 14};
    size_t c2[1] = {2};
    CHECK_RC(tw_store_get_into_multi(client, k0, NULL, c2, 1, bp, bs, 2, got), TW_STORE_OK);
    CHECK(got[0] == 7 && memcmp(back, "abcdefg.", 8) == 0,
          "upsert in pieces; room past the value left untouched");

    /* Bad pieces fail their own key. */
    const char *bk[6] = {"b-null", "b-none", "b-zero", "b-unmapped", "", "b-ok"};
    const void *bpp[6] = {src, NULL, src, src, (const void *)4096, src};
    uint64_t bss[6] = {10, 10, 0, 10, 10, 10};
    size_t bc[6] = {2, 0, 1, 2, 0, 1};
    int32_t bcodes[6];
    CHECK_RC(tw_store_put_multi(client, bk, NULL, bc, 6, bpp, bss, 6, 1, NULL, bcodes),
             TW_STORE_OK);
    CHECK(bcodes[0] == TW_STORE_INVALID_PARAMS, "a NULL piece with a size is -600");
    CHECK(bcodes[1] == TW_STORE_INVALID_PARAMS, "no pieces is -600");
    CHECK(bcodes[2] == TW_STORE_INVALID_PARAMS, "0 bytes in all is -600");
    CHECK(bcodes[3] == TW_STORE_INVALID_PARAMS, "an unmapped piece is -600");
    CHECK(bcodes[4] == TW_STORE_INVALID_PARAMS, "an empty key is -600");
    CHECK(bcodes[5] == 0, "the good key of the batch is written");
    const char *gk[5] = {"m1", "m1", "m1", "missing", "m1"};
    void *gpp[5] = {dst, NULL, (void *)4096, dst, dst};
    uint64_t gss[5] = {SLOT, SLOT, SLOT, SLOT, 100};
    size_t gc[5] = {1, 1, 1, 1, 1};
    int64_t ggot[5];
    CHECK_RC(tw_store_get_into_multi(client, gk, NULL, gc, 5, gpp, gss, 5, ggot), TW_STORE_OK);
    CHECK(ggot[0] == (int64_t)lens[1], "a good piece reads");
    CHECK(ggot[1] == TW_STORE_INVALID_PARAMS, "a NULL destination is -600");
    CHECK(ggot[2] == TW_STORE_INVALID_PARAMS, "an unmapped destination is -600");
    CHECK(ggot[3] == TW_STORE_OBJECT_NOT_FOUND, "a miss is -704");
    CHECK(ggot[4] == TW_STORE_INVALID_PARAMS, "too little room is -600");

    /* Unusable arguments: the call fails and writes no result. */
    codes[0] = 12345;
    CHECK_RC(tw_store_put_multi(client, k0, NULL, c3, 1, p2, s2, 2, 1, NULL, codes),
             TW_STORE_INVALID_PARAMS);
    CHECK(codes[0] == 12345, "counts that do not add up: no result written");
    CHECK_RC(tw_store_get_into_multi(client, k0, NULL, c1, 1, bp, bs, 2, got),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_put_multi(client, k0, NULL, NULL, 1, p2, s2, 3, 1, NULL, codes),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_put_multi(client, k0, NULL, c3, 1, NULL, s2, 3, 1, NULL, codes),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_get_into_multi(client, k0, NULL, c2, 1, bp, NULL, 2, got),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_get_into_multi(client, k0, NULL, c2, 1, bp, bs, 2, NULL),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_put_multi(NULL, k0, NULL, c3, 1, p2, s2, 3, 1, NULL, codes),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_get_into_multi(NULL, k0, NULL, c2, 1, bp, bs, 2, got),
             TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_put_multi(client, NULL, NULL, NULL, 0, NULL, NULL, 0, 0, NULL, NULL),
             TW_STORE_OK);
    CHECK_RC(tw_store_get_into_multi(client, NULL, NULL, NULL, 0, NULL, NULL, 0, NULL),
             TW_STORE_OK);

    CHECK_RC(tw_store_unregister_buffer(client, src), TW_STORE_OK);
    tw_store_free(client);
    tw_store_free(server);
    stop_master();
    free(src);
    free(dst);
    free(want);
    return test_footer();
}
