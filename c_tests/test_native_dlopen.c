/*
 * test_native_dlopen.c — loads the library at run time (path from $TIDEWIRE_LIB), resolves the
 * native API with dlsym and runs create / register / transfer (local segment) / free. This
 * program is not linked against the library.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The library is not linked in: route common.h's diagnostics through the loaded symbols. */
static size_t (*p_last_error)(char *, size_t);
static const char *(*p_result_str)(int32_t);
#define COMMON_LAST_ERROR(buf, len) (p_last_error ? p_last_error((buf), (len)) : 0)
#define COMMON_RESULT_STR(code) (p_result_str ? p_result_str(code) : "?")
#include "common.h"

/* Every function the header declares, so a missing export is caught here too. */
static const char *const all_functions[] = {
    "tw_version", "tw_result_str", "tw_last_error_message", "tw_config_new", "tw_config_set",
    "tw_config_free", "tw_engine_new", "tw_engine_free", "tw_engine_segment_name",
    "tw_engine_rpc_port", "tw_engine_probe", "tw_memory_register", "tw_memory_unregister",
    "tw_memory_register_batch", "tw_memory_unregister_batch", "tw_segment_open",
    "tw_segment_close", "tw_segment_refresh", "tw_segment_descriptor", "tw_batch_alloc",
    "tw_batch_submit", "tw_batch_submit_with_notify", "tw_batch_status", "tw_batch_wait",
    "tw_batch_free", "tw_scatter_submit", "tw_scatter_wait", "tw_scatter_free",
    "tw_notify_send", "tw_notify_take", "tw_notifications_free",
};

struct api {
    const char *(*version)(void);
    tw_result (*config_new)(tw_config **);
    tw_result (*config_set)(tw_config *, const char *, const char *);
    void (*config_free)(tw_config *);
    tw_result (*engine_new)(const tw_config *, tw_engine **);
    void (*engine_free)(tw_engine *);
    tw_result (*segment_name)(const tw_engine *, char *, size_t);
    tw_result (*memory_register)(const tw_engine *, void *, size_t, const char *, bool);
    tw_result (*memory_unregister)(const tw_engine *, void *);
    tw_result (*segment_open)(const tw_engine *, const char *, int32_t *);
    tw_result (*batch_alloc)(const tw_engine *, size_t, uint64_t *);
    tw_result (*batch_submit)(const tw_engine *, uint64_t, const tw_transfer_request *, size_t);
    tw_result (*batch_status)(const tw_engine *, uint64_t, size_t, tw_transfer_status *);
    tw_result (*batch_wait)(const tw_engine *, uint64_t, int64_t);
    tw_result (*batch_free)(const tw_engine *, uint64_t);
};

/* ISO C has no conversion from void * to a function pointer; copy the bits instead. */
static int resolve(void *lib, const char *name, void *fn_slot, size_t slot_size) {
    void *sym = dlsym(lib, name);
    if (sym == NULL || slot_size != sizeof sym) return 0;
    memcpy(fn_slot, &sym, sizeof sym);
    return 1;
}

#define RESOLVE(lib, slot, name) resolve((lib), (name), &(slot), sizeof(slot))

int main(void) {
    const char *path = getenv("TIDEWIRE_LIB");
    if (path == NULL || path[0] == '\0') path = "target/release/libtidewire.so";

    CHECK(dlopen("/nonexistent/libtidewire.so", RTLD_NOW) == NULL, "a missing library fails");
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
    CHECK(lib != NULL, "dlopen($TIDEWIRE_LIB)");
    if (lib == NULL) return test_footer();

    size_t missing = 0;
    for (size_t i = 0; i < sizeof all_functions / sizeof all_functions[0]; i++) {
        if (dlsym(lib, all_functions[i]) == NULL) {
            fprintf(stderr, "missing export: %s\n", all_functions[i]);
            missing++;
        }
    }
    CHECK(missing == 0, "every header function is exported");
    CHECK(dlsym(lib, "tw_no_such_function") == NULL, "unknown symbol is not found");

    struct api a;
    int ok = RESOLVE(lib, p_last_error, "tw_last_error_message") &&
             RESOLVE(lib, p_result_str, "tw_result_str") &&
             RESOLVE(lib, a.version, "tw_version") && RESOLVE(lib, a.config_new, "tw_config_new") &&
             RESOLVE(lib, a.config_set, "tw_config_set") &&
             RESOLVE(lib, a.config_free, "tw_config_free") &&
             RESOLVE(lib, a.engine_new, "tw_engine_new") &&
             RESOLVE(lib, a.engine_free, "tw_engine_free") &&
             RESOLVE(lib, a.segment_name, "tw_engine_segment_name") &&
             RESOLVE(lib, a.memory_register, "tw_memory_register") &&
             RESOLVE(lib, a.memory_unregister, "tw_memory_unregister") &&
             RESOLVE(lib, a.segment_open, "tw_segment_open") &&
             RESOLVE(lib, a.batch_alloc, "tw_batch_alloc") &&
             RESOLVE(lib, a.batch_submit, "tw_batch_submit") &&
             RESOLVE(lib, a.batch_status, "tw_batch_status") &&
             RESOLVE(lib, a.batch_wait, "tw_batch_wait") &&
             RESOLVE(lib, a.batch_free, "tw_batch_free");
    CHECK(ok, "resolved the functions this program uses");
    if (!ok) return test_footer();

    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", TIDEWIRE_VERSION_MAJOR, TIDEWIRE_VERSION_MINOR,
             TIDEWIRE_VERSION_PATCH);
    CHECK(strcmp(a.version(), want) == 0, "loaded library matches the header version");
    CHECK(strcmp(p_result_str(TW_ERR_BUSY), "TW_ERR_BUSY") == 0, "tw_result_str via dlsym");

    tw_config *cfg = NULL;
    CHECK_RC(a.config_new(&cfg), TW_OK);
    CHECK_RC(a.config_set(cfg, "slice_size", "4096"), TW_OK);
    CHECK_RC(a.config_set(cfg, "bogus", "1"), TW_ERR_INVALID_ARGUMENT);
    CHECK(p_last_error(NULL, 0) > 1, "last error message through the loaded library");
    tw_engine *e = NULL;
    CHECK_RC(a.engine_new(cfg, &e), TW_OK);
    a.config_free(cfg);
    if (e == NULL) return test_footer();

    enum { N = 100000 }; /* 25 slices of 4 KiB with a ragged tail */
    uint8_t *src = malloc(N), *dst = malloc(N);
    for (size_t i = 0; i < N; i++) src[i] = (uint8_t)(i * 7 + 3);
    memset(dst, 0, N);
    CHECK_RC(a.memory_register(e, src, N, "cpu:0", true), TW_OK);
    CHECK_RC(a.memory_register(e, dst, N, NULL, false), TW_OK);

    char name[64];
    int32_t seg = -1;
    CHECK_RC(a.segment_name(e, name, sizeof name), TW_OK);
    CHECK_RC(a.segment_open(e, name, &seg), TW_OK);
    CHECK(seg == TW_LOCAL_SEGMENT, "own segment is 0");

    uint64_t batch = 0;
    CHECK_RC(a.batch_alloc(e, 2, &batch), TW_OK);
    tw_transfer_request w = {TW_OPCODE_WRITE, seg, src, (uint64_t)(uintptr_t)dst, N};
    CHECK_RC(a.batch_submit(e, batch, &w, 1), TW_OK);
    CHECK_RC(a.batch_wait(e, batch, 5000), TW_OK);
    CHECK(memcmp(src, dst, N) == 0, "local WRITE copied every byte");
    memset(src, 0, N);
    tw_transfer_request r = {TW_OPCODE_READ, seg, src, (uint64_t)(uintptr_t)dst, N};
    CHECK_RC(a.batch_submit(e, batch, &r, 1), TW_OK);
    CHECK_RC(a.batch_wait(e, batch, 5000), TW_OK);
    tw_transfer_status st = {0, 0, 0};
    CHECK_RC(a.batch_status(e, batch, 1, &st), TW_OK);
    CHECK(st.state == TW_TASK_COMPLETED && st.transferred_bytes == N, "read task complete");
    CHECK(memcmp(src, dst, N) == 0, "local READ copied every byte back");
    CHECK_RC(a.batch_submit(e, batch, &r, 1), TW_ERR_TOO_MANY_REQUESTS);
    CHECK_RC(a.batch_free(e, batch), TW_OK);
    CHECK_RC(a.batch_free(e, batch), TW_ERR_INVALID_ID);

    CHECK_RC(a.memory_unregister(e, src), TW_OK);
    CHECK_RC(a.memory_unregister(e, dst), TW_OK);
    a.engine_free(e);
    free(src);
    free(dst);

    p_last_error = NULL; /* nothing from the library is used after this */
    p_result_str = NULL;
    int closed = dlclose(lib);
    if (closed != 0) fprintf(stderr, "dlclose: %s\n", dlerror());
    CHECK(closed == 0, "dlclose after the engine is freed");
    return test_footer();
}
