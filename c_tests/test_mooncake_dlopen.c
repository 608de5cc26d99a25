/*
 * Loads the Mooncake-compatible library at run time, the way a plugin would:
 * dlopen("libtransfer_engine.so"), resolve all 27 functions, then create an engine,
 * register memory, move bytes and destroy it through the resolved pointers.
 *
 * Library path: $TIDEWIRE_MOONCAKE_LIB, else the directory of $TIDEWIRE_LIB plus
 * "/libtransfer_engine.so".
 */
#define _POSIX_C_SOURCE 200809L

#include "transfer_engine_c.h"

#include <dlfcn.h>
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

static const char *const NAMES[] = {
    "createTransferEngine", "discoverTopology", "getLocalIpAndPort", "installTransport",
    "uninstallTransport", "openSegment", "openSegmentNoCache", "closeSegment",
    "warmupEfaSegment", "removeLocalSegment", "destroyTransferEngine", "registerLocalMemory",
    "unregisterLocalMemory", "registerLocalMemoryBatch", "unregisterLocalMemoryBatch",
    "allocateBatchID", "submitTransfer", "submitTransferWithNotify", "getNotifsFromEngine",
    "freeNotifsMsgBuf", "genNotifyInEngine", "getTransferStatus", "freeBatchID",
    "syncSegmentCache", "getNicLoadStats", "enableGracefulShutdown", "showLinks",
};
#define NUM_NAMES (sizeof NAMES / sizeof NAMES[0])

/* Typed pointers for the calls we make, copied from dlsym's void * with memcpy
 * (ISO C has no object-to-function pointer conversion). */
typedef transfer_engine_t (*create_fn)(const char *, const char *, const char *, uint64_t, int);
typedef void (*destroy_fn)(transfer_engine_t);
typedef int (*ipport_fn)(transfer_engine_t, char *, size_t);
typedef int (*reg_fn)(transfer_engine_t, void *, size_t, const char *, int);
typedef int (*unreg_fn)(transfer_engine_t, void *);
typedef batch_id_t (*alloc_fn)(transfer_engine_t, size_t);
typedef int (*submit_fn)(transfer_engine_t, batch_id_t, struct transfer_request *, size_t);
typedef int (*status_fn)(transfer_engine_t, batch_id_t, size_t, struct transfer_status *);
typedef int (*free_fn)(transfer_engine_t, batch_id_t);
typedef segment_id_t (*open_fn)(transfer_engine_t, const char *);

#define LOAD(var, type, name)                                                \
    do {                                                                     \
        void *sym_ = dlsym(lib, name);                                       \
        CHECK(sym_ != NULL);                                                 \
        if (!sym_) goto done;                                                \
        memcpy(&(var), &sym_, sizeof(var));                                  \
    } while (0)

static char *library_path(void) {
    const char *direct = getenv("TIDEWIRE_MOONCAKE_LIB");
    if (direct && *direct) return strdup(direct);
    const char *tw = getenv("TIDEWIRE_LIB");
    if (!tw || !*tw) return NULL;
    const char *slash = strrchr(tw, '/');
    size_t dir_len = slash ? (size_t)(slash - tw) : 1;
    const char *dir = slash ? tw : ".";
    const char *file = "/libtransfer_engine.so";
    char *p = malloc(dir_len + strlen(file) + 1);
    if (!p) return NULL;
    memcpy(p, dir, dir_len);
    strcpy(p + dir_len, file);
    return p;
}

int main(void) {
    char *path = library_path();
    CHECK(path != NULL);
    if (!path) {
        fprintf(stderr, "set TIDEWIRE_MOONCAKE_LIB or TIDEWIRE_LIB\n");
        printf("%d passed, %d failed\n", passed, failed);
        return 1;
    }
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    CHECK(lib != NULL);
    free(path);
    if (!lib) goto done;

    for (size_t i = 0; i < NUM_NAMES; i++) {
        void *sym = dlsym(lib, NAMES[i]);
        if (!sym) fprintf(stderr, "missing symbol %s\n", NAMES[i]);
        CHECK(sym != NULL);
    }
    CHECK(NUM_NAMES == 27);

    create_fn create;
    destroy_fn destroy;
    ipport_fn ipport;
    reg_fn reg;
    unreg_fn unreg;
    alloc_fn alloc;
    submit_fn submit;
    status_fn status;
    free_fn freeb;
    open_fn open_seg;
    LOAD(create, create_fn, "createTransferEngine");
    LOAD(destroy, destroy_fn, "destroyTransferEngine");
    LOAD(ipport, ipport_fn, "getLocalIpAndPort");
    LOAD(reg, reg_fn, "registerLocalMemory");
    LOAD(unreg, unreg_fn, "unregisterLocalMemory");
    LOAD(alloc, alloc_fn, "allocateBatchID");
    LOAD(submit, submit_fn, "submitTransfer");
    LOAD(status, status_fn, "getTransferStatus");
    LOAD(freeb, free_fn, "freeBatchID");
    LOAD(open_seg, open_fn, "openSegment");

    CHECK(create("redis://127.0.0.1:6379", "127.0.0.1", "127.0.0.1", 0, 1) == NULL);
    transfer_engine_t e = create("P2PHANDSHAKE", "127.0.0.1", "127.0.0.1", 0, 1);
    CHECK(e != NULL);
    if (e) {
        char name[128];
        CHECK(ipport(e, name, sizeof name) == 0);
        CHECK(strncmp(name, "127.0.0.1:", 10) == 0);
        CHECK(open_seg(e, name) == LOCAL_SEGMENT);
        size_t n = 1 << 16;
        unsigned char *buf = malloc(2 * n);
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 7);
        memset(buf + n, 0, n);
        CHECK(reg(e, buf, 2 * n, "cpu:0", 1) == 0);
        CHECK(reg(e, buf + 1, 16, "cpu:0", 1) == -7);
        batch_id_t b = alloc(e, 1);
        CHECK(b != INVALID_BATCH);
        struct transfer_request r;
        memset(&r, 0, sizeof r);
        r.opcode = OPCODE_WRITE;
        r.source = buf;
        r.target_id = LOCAL_SEGMENT;
        r.target_offset = (uint64_t)(uintptr_t)(buf + n);
        r.length = n;
        CHECK(submit(e, b, &r, 1) == 0);
        struct transfer_status st = {-1, 0};
        for (int i = 0; i < 5000; i++) {
            if (status(e, b, 0, &st) != 0 || st.status != STATUS_WAITING) break;
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
        CHECK(st.status == STATUS_COMPLETED);
        CHECK(memcmp(buf, buf + n, n) == 0);
        CHECK(freeb(e, b) == 0);
        CHECK(freeb(e, b) == 1);
        CHECK(unreg(e, buf) == 0);
        destroy(e);
        free(buf);
    }
    destroy(NULL);

done:
    if (lib) dlclose(lib);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
