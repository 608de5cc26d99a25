/*
 * test_store_keys.c — Store keys are byte strings of their full length: with `key_lens`, keys
 * that differ only after a NUL byte are distinct objects in every tw_store_* call; without it
 * they are C strings. A key that is empty, NULL, longer than TW_STORE_MAX_KEY_LEN or not UTF-8
 * gets TW_STORE_INVALID_PARAMS in every call, with a message naming it; a key of exactly the
 * limit works, and so does a batch of long keys larger than one master frame.
 * tw_store_split_keys finds the keys of a NUL-joined buffer (empty ones included) and refuses
 * a count that does not match.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>

#include "common.h"
#include "store_master.h"

/* The calling thread's last error contains `what`. */
static int last_error_has(const char *what) {
    char buf[512];
    buf[0] = '\0';
    tw_last_error_message(buf, sizeof buf);
    return strstr(buf, what) != NULL;
}

/* tw_store_alloc_fn over an array of buffers of 64 bytes each. */
static void *alloc_into(void *ctx, size_t index, uint64_t size) {
    unsigned char(*bufs)[64] = ctx;
    return size <= 64 ? bufs[index] : NULL;
}

/* Every key-taking call with one key (`key`, `len`), values of `cap` bytes; each per-key result
 * (and get_size) must be `want`. */
static void every_call_gives(tw_store *c, const char *key, size_t len, long want,
                             const char *what) {
    const char *k[1] = {key};
    size_t kl[1] = {len};
    unsigned char buf[64] = {0};
    unsigned char bufs[1][64];
    const void *src[1] = {"v"};
    void *dst[1] = {buf};
    uint64_t one[1] = {1}, cap[1] = {sizeof buf}, off[1] = {0};
    int32_t codes[1] = {1};
    int64_t got[1] = {1};
    tw_store_value v[1];
    char msg[128];

    snprintf(msg, sizeof msg, "%s: put", what);
    CHECK_RC(tw_store_put(c, k, kl, src, one, 1, 0, 1, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == want, msg);
    snprintf(msg, sizeof msg, "%s: upsert", what);
    CHECK_RC(tw_store_put(c, k, kl, src, one, 1, 1, 1, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == want, msg);
    snprintf(msg, sizeof msg, "%s: get_into", what);
    CHECK_RC(tw_store_get_into(c, k, kl, dst, cap, 1, got), TW_STORE_OK);
    CHECK(got[0] == want, msg);
    snprintf(msg, sizeof msg, "%s: get_copy", what);
    CHECK_RC(tw_store_get_copy(c, k, kl, 1, v, got), TW_STORE_OK);
    CHECK(got[0] == want && v[0].data == NULL, msg);
    snprintf(msg, sizeof msg, "%s: get_sized", what);
    CHECK_RC(tw_store_get_sized(c, k, kl, 1, alloc_into, bufs, got), TW_STORE_OK);
    CHECK(got[0] == want, msg);
    snprintf(msg, sizeof msg, "%s: get_ranges", what);
    CHECK_RC(tw_store_get_ranges(c, k, kl, dst, off, one, 1, got), TW_STORE_OK);
    CHECK(got[0] == want, msg);
    snprintf(msg, sizeof msg, "%s: get_size", what);
    CHECK_RC(tw_store_get_size(c, key, len), want);
    snprintf(msg, sizeof msg, "%s: exist", what);
    CHECK_RC(tw_store_exist(c, k, kl, 1, codes), TW_STORE_OK);
    CHECK(codes[0] == want, msg);
    snprintf(msg, sizeof msg, "%s: remove", what);
    CHECK_RC(tw_store_remove(c, k, kl, 1, true, codes), TW_STORE_OK);
    CHECK(codes[0] == want, msg);
}

/* tw_store_split_keys: pointers into the buffer and lengths, and clear refusals. */
static void split_keys_cases(void) {
    const char blob[] = "ab\0\0xyz"; /* "ab", "", "xyz" */
    const char *p[4] = {0};
    size_t l[4] = {0};
    CHECK_RC(tw_store_split_keys(blob, sizeof blob - 1, 3, p, l), TW_STORE_OK);
    CHECK(p[0] == blob && l[0] == 2, "split: first key");
    CHECK(p[1] == blob + 3 && l[1] == 0, "split: empty middle key");
    CHECK(p[2] == blob + 4 && l[2] == 3, "split: last key");
    CHECK_RC(tw_store_split_keys(blob, sizeof blob - 1, 2, p, l), TW_STORE_INVALID_PARAMS);
    CHECK(last_error_has("more than 2 keys"), "split: too few slots named");
    CHECK_RC(tw_store_split_keys(blob, sizeof blob - 1, 4, p, l), TW_STORE_INVALID_PARAMS);
    CHECK(last_error_has("holds 3 keys, not 4"), "split: too many slots named");
    CHECK_RC(tw_store_split_keys(blob, 0, 1, p, l), TW_STORE_OK);
    CHECK(l[0] == 0, "split: one empty key");
    CHECK_RC(tw_store_split_keys(NULL, 0, 0, NULL, NULL), TW_STORE_OK);
    CHECK_RC(tw_store_split_keys(blob, 2, 0, p, l), TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_split_keys(NULL, 3, 1, p, l), TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_split_keys(blob, 3, 1, NULL, l), TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_split_keys(blob, SIZE_MAX, 1, p, l), TW_STORE_INVALID_PARAMS);
    CHECK_RC(tw_store_split_keys(blob, 3, SIZE_MAX / 2, p, l), TW_STORE_INVALID_PARAMS);
    CHECK(last_error_has("out of range"), "split: overflowing count named");
}

int main(void) {
    split_keys_cases();
    char master[64];
    if (start_master(master, sizeof master) != 0) {
        fprintf(stderr, "cannot start tidewire-master\n");
        return 1;
    }
    tw_store *c = NULL;
    CHECK_RC(tw_store_setup("127.0.0.1", "P2PHANDSHAKE", 128u << 20, 16u << 20, "tcp", NULL,
                            master, &c),
             TW_STORE_OK);
    if (!c) {
        stop_master();
        return test_footer();
    }

    /* Two keys that differ only after a NUL byte, and the C string before it. */
    const char *ab[2] = {"k\0a", "k\0b"};
    size_t ab_lens[2] = {3, 3};
    const void *vals[2] = {"AAAA", "BBBBBB"};
    uint64_t vlens[2] = {4, 6};
    int32_t codes[3];
    int64_t got[3];
    CHECK_RC(tw_store_put(c, ab, ab_lens, vals, vlens, 2, 0, 1, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == 0 && codes[1] == 0, "put k\\0a and k\\0b");
    CHECK_RC(tw_store_get_size(c, "k\0a", 3), 4);
    CHECK_RC(tw_store_get_size(c, "k\0b", 3), 6);
    CHECK_RC(tw_store_get_size(c, "k", 1), TW_STORE_OBJECT_NOT_FOUND);

    tw_store_value v[3];
    const char *abk[3] = {"k\0a", "k\0b", "k"};
    size_t abk_lens[3] = {3, 3, 1};
    CHECK_RC(tw_store_get_copy(c, abk, abk_lens, 3, v, got), TW_STORE_OK);
    CHECK(got[0] == 4 && memcmp(v[0].data, "AAAA", 4) == 0, "k\\0a reads its own value");
    CHECK(got[1] == 6 && memcmp(v[1].data, "BBBBBB", 6) == 0, "k\\0b reads its own value");
    CHECK(got[2] == TW_STORE_OBJECT_NOT_FOUND, "k is a miss");
    tw_store_value_release(&v[0]);
    tw_store_value_release(&v[1]);

    /* Without key_lens the same pointers are C strings: both name "k". */
    CHECK_RC(tw_store_get_copy(c, ab, NULL, 2, v, got), TW_STORE_OK);
    CHECK(got[0] == TW_STORE_OBJECT_NOT_FOUND && got[1] == TW_STORE_OBJECT_NOT_FOUND,
          "NULL key_lens: keys end at their NUL");

    /* Upserting one leaves the other alone. */
    const char *bk[1] = {"k\0b"};
    size_t bk_len[1] = {3};
    const void *cval[1] = {"C"};
    uint64_t clen[1] = {1};
    CHECK_RC(tw_store_put(c, bk, bk_len, cval, clen, 1, 1, 1, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == 0, "upsert k\\0b");
    unsigned char d0[16], d1[16];
    void *dst[2] = {d0, d1};
    uint64_t caps[2] = {sizeof d0, sizeof d1};
    CHECK_RC(tw_store_get_into(c, ab, ab_lens, dst, caps, 2, got), TW_STORE_OK);
    CHECK(got[0] == 4 && memcmp(d0, "AAAA", 4) == 0, "k\\0a unchanged by the upsert");
    CHECK(got[1] == 1 && d1[0] == 'C', "k\\0b upserted");
    unsigned char sized[2][64];
    CHECK_RC(tw_store_get_sized(c, ab, ab_lens, 2, alloc_into, sized, got), TW_STORE_OK);
    CHECK(got[0] == 4 && memcmp(sized[0], "AAAA", 4) == 0 && got[1] == 1 && sized[1][0] == 'C',
          "get_sized reads each key");
    uint64_t offs[2] = {1, 0}, lens[2] = {2, 1};
    CHECK_RC(tw_store_get_ranges(c, ab, ab_lens, dst, offs, lens, 2, got), TW_STORE_OK);
    CHECK(got[0] == 2 && memcmp(d0, "AA", 2) == 0 && got[1] == 1 && d1[0] == 'C',
          "get_ranges reads each key");

    /* Existence and removal per key. */
    CHECK_RC(tw_store_exist(c, abk, abk_lens, 3, codes), TW_STORE_OK);
    CHECK(codes[0] == 1 && codes[1] == 1 && codes[2] == 0, "exist 1, 1, 0");
    CHECK_RC(tw_store_remove(c, ab, ab_lens, 1, true, codes), TW_STORE_OK);
    CHECK(codes[0] == 0, "remove k\\0a");
    CHECK_RC(tw_store_exist(c, abk, abk_lens, 3, codes), TW_STORE_OK);
    CHECK(codes[0] == 0 && codes[1] == 1 && codes[2] == 0, "only k\\0a is gone");
    CHECK_RC(tw_store_remove(c, abk, abk_lens, 3, true, codes), TW_STORE_OK);
    CHECK(codes[0] == TW_STORE_OBJECT_NOT_FOUND && codes[1] == 0 &&
              codes[2] == TW_STORE_OBJECT_NOT_FOUND,
          "remove: -704, 0, -704");

    /* Unusable keys: the same -600 in every call, and a message naming the key. */
    every_call_gives(c, "", 0, TW_STORE_INVALID_PARAMS, "empty key");
    CHECK(last_error_has("empty"), "message: empty key");
    every_call_gives(c, NULL, 0, TW_STORE_INVALID_PARAMS, "NULL key");
    every_call_gives(c, NULL, 5, TW_STORE_INVALID_PARAMS, "NULL key with a length");
    CHECK(last_error_has("NULL"), "message: NULL key");
    every_call_gives(c, "\xff\xfe", 2, TW_STORE_INVALID_PARAMS, "invalid UTF-8");
    CHECK(last_error_has("not valid UTF-8"), "message: invalid UTF-8");
    /* Longer than the limit: refused without reading it (the pointer holds 2 bytes). */
    every_call_gives(c, "xx", (size_t)TW_STORE_MAX_KEY_LEN + 1, TW_STORE_INVALID_PARAMS,
                     "over-long key");
    CHECK(last_error_has("limit"), "message: over-long key");

    /* The longest key works in every call; one byte more does not, also as a C string. */
    char *big = malloc(TW_STORE_MAX_KEY_LEN + 2);
    memset(big, 'x', TW_STORE_MAX_KEY_LEN + 1);
    big[TW_STORE_MAX_KEY_LEN + 1] = '\0';
    const char *bigk[1] = {big};
    CHECK_RC(tw_store_put(c, bigk, NULL, cval, clen, 1, 0, 1, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == TW_STORE_INVALID_PARAMS, "over-long C-string key is -600");
    big[5] = '\0'; /* a NUL inside the longest key */
    size_t biglen[1] = {TW_STORE_MAX_KEY_LEN};
    CHECK_RC(tw_store_put(c, bigk, biglen, cval, clen, 1, 0, 1, NULL, codes), TW_STORE_OK);
    CHECK(codes[0] == 0, "put with the longest key");
    CHECK_RC(tw_store_get_size(c, big, TW_STORE_MAX_KEY_LEN), 1);
    CHECK_RC(tw_store_get_size(c, big, TW_STORE_MAX_KEY_LEN - 1), TW_STORE_OBJECT_NOT_FOUND);
    CHECK_RC(tw_store_get_copy(c, bigk, biglen, 1, v, got), TW_STORE_OK);
    CHECK(got[0] == 1 && v[0].data[0] == 'C', "get with the longest key");
    tw_store_value_release(&v[0]);
    CHECK_RC(tw_store_remove(c, bigk, biglen, 1, true, codes), TW_STORE_OK);
    CHECK(codes[0] == 0, "remove with the longest key");
    free(big);

    /* A batch of long keys larger than one master frame (32 MiB of keys): split by bytes. */
    enum { NBIG = 40, KLEN = 1 << 20 };
    char *blob = malloc((size_t)NBIG * KLEN);
    const char *bk40[NBIG];
    size_t bl40[NBIG];
    const void *bv40[NBIG];
    uint64_t bs40[NBIG];
    unsigned char out40[NBIG];
    void *bd40[NBIG];
    uint64_t bc40[NBIG];
    int32_t bcodes[NBIG];
    int64_t bgot[NBIG];
    unsigned char vbytes[NBIG];
    for (int i = 0; i < NBIG; i++) {
        char *k = blob + (size_t)i * KLEN;
        memset(k, 'k', KLEN);
        for (size_t j = 0; j < KLEN; j += 4096) k[j] = '\0';
        snprintf(k + KLEN - 8, 8, "%07d", i); /* keys differ only at their end */
        bk40[i] = k;
        bl40[i] = KLEN;
        vbytes[i] = (unsigned char)('a' + i % 26);
        bv40[i] = &vbytes[i];
        bs40[i] = 1;
        bd40[i] = &out40[i];
        bc40[i] = 1;
    }
    CHECK_RC(tw_store_put(c, bk40, bl40, bv40, bs40, NBIG, 0, 1, NULL, bcodes), TW_STORE_OK);
    int ok = 1;
    for (int i = 0; i < NBIG; i++) ok &= bcodes[i] == 0;
    CHECK(ok, "put of 40 keys of 1 MiB");
    memset(out40, 0, sizeof out40);
    CHECK_RC(tw_store_get_into(c, bk40, bl40, bd40, bc40, NBIG, bgot), TW_STORE_OK);
    ok = 1;
    for (int i = 0; i < NBIG; i++) ok &= bgot[i] == 1 && out40[i] == vbytes[i];
    CHECK(ok, "get of 40 keys of 1 MiB, each its own value");
    CHECK_RC(tw_store_exist(c, bk40, bl40, NBIG, bcodes), TW_STORE_OK);
    ok = 1;
    for (int i = 0; i < NBIG; i++) ok &= bcodes[i] == 1;
    CHECK(ok, "exist of 40 keys of 1 MiB");
    CHECK_RC(tw_store_remove(c, bk40, bl40, NBIG, true, bcodes), TW_STORE_OK);
    ok = 1;
    for (int i = 0; i < NBIG; i++) ok &= bcodes[i] == 0;
    CHECK(ok, "remove of 40 keys of 1 MiB");
    free(blob);

    tw_store_free(c);
    stop_master();
    return test_footer();
}
