// header_cxx.cpp — include/tidewire.h compiled as C++, included twice in one translation unit
// (the include guard and `extern "C"` must hold), with the public layouts checked at compile
// time and a few calls linked against the C symbols.
#include "tidewire.h"
#include "tidewire.h"

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>

static_assert(sizeof(tw_transfer_request) == 32, "tw_transfer_request is 32 bytes");
static_assert(sizeof(tw_transfer_status) == 16, "tw_transfer_status is 16 bytes");
static_assert(sizeof(tw_scatter_range) == 72, "tw_scatter_range is 72 bytes");
static_assert(sizeof(tw_buffer) == 2 * sizeof(void *), "tw_buffer is two words");
static_assert(offsetof(tw_transfer_request, local_addr) == 8, "request layout");
static_assert(offsetof(tw_transfer_request, remote_addr) == 16, "request layout");
static_assert(offsetof(tw_transfer_request, length) == 24, "request layout");
static_assert(offsetof(tw_transfer_status, transferred_bytes) == 8, "status layout");
static_assert(offsetof(tw_scatter_range, fragment_count) == 64, "scatter range layout");
static_assert(std::is_standard_layout<tw_transfer_request>::value, "POD request");
static_assert(std::is_trivially_copyable<tw_transfer_status>::value, "POD status");
static_assert(std::is_same<tw_result, int32_t>::value, "tw_result is int32_t");
static_assert(TW_OK == 0 && TW_ERR_PANIC == -18, "result numbering");
static_assert(TW_TASK_WAITING == 0 && TW_TASK_COMPLETED == 4 && TW_TASK_FAILED == 6,
              "Mooncake task states");
static_assert(TW_OPCODE_READ == 0 && TW_OPCODE_WRITE == 1, "Mooncake opcodes");

namespace {
int fragments_seen = 0;
void on_fragment(void *, size_t, tw_result) { ++fragments_seen; }
// A C++ function with C-compatible signature converts to the C callback type.
const tw_fragment_callback callback = &on_fragment;
}  // namespace

int main() {
    int failed = 0;
    const char *v = tw_version();
    char want[32];
    std::snprintf(want, sizeof want, "%d.%d.%d", TIDEWIRE_VERSION_MAJOR, TIDEWIRE_VERSION_MINOR,
                  TIDEWIRE_VERSION_PATCH);
    if (v == nullptr || std::strcmp(v, want) != 0) {
        std::fprintf(stderr, "FAIL: tw_version %s != %s\n", v ? v : "(null)", want);
        ++failed;
    }
    if (std::strcmp(tw_result_str(TW_ERR_TIMEOUT), "TW_ERR_TIMEOUT") != 0) {
        std::fprintf(stderr, "FAIL: tw_result_str\n");
        ++failed;
    }
    tw_config *cfg = nullptr;
    if (tw_config_new(&cfg) != TW_OK || tw_config_set(cfg, "tcp_lanes", "1") != TW_OK) {
        std::fprintf(stderr, "FAIL: config from C++\n");
        ++failed;
    }
    tw_config_free(cfg);
    (void)callback;
    std::printf("%d passed, %d failed\n", 3 - failed, failed);
    return failed == 0 ? 0 : 1;
}
