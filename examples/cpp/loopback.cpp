// loopback.cpp — the native C API from C++ with small RAII wrappers: every handle, registration
// and batch is released by a destructor, every error becomes an exception carrying the code and
// the library's message. Two engines in one process; WRITE then READ back, every byte verified.
#include "tidewire.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tw {

// The calling thread's last error message.
inline std::string last_error() {
    std::size_t n = tw_last_error_message(nullptr, 0);
    std::string s(n, '\0');
    tw_last_error_message(&s[0], n);
    s.resize(n - 1);
    return s;
}

class Error : public std::runtime_error {
public:
    Error(tw_result code, const std::string &what)
        : std::runtime_error(what + ": " + tw_result_str(code) + " (" + last_error() + ")"),
          code_(code) {}
    tw_result code() const { return code_; }

private:
    tw_result code_;
};

inline void check(tw_result rc, const char *what) {
    if (rc != TW_OK) throw Error(rc, what);
}

class Config {
public:
    Config() {
        tw_config *c = nullptr;
        check(tw_config_new(&c), "tw_config_new");
        cfg_.reset(c);
    }
    Config &set(const std::string &key, const std::string &value) {
        check(tw_config_set(cfg_.get(), key.c_str(), value.c_str()), ("set " + key).c_str());
        return *this;
    }
    const tw_config *get() const { return cfg_.get(); }

private:
    struct Free {
        void operator()(tw_config *c) const { tw_config_free(c); }
    };
    std::unique_ptr<tw_config, Free> cfg_;
};

class Engine {
public:
    explicit Engine(const Config &cfg) {
        tw_engine *e = nullptr;
        check(tw_engine_new(cfg.get(), &e), "tw_engine_new");
        engine_.reset(e);
    }
    std::string name() const {
        char buf[256];
        check(tw_engine_segment_name(get(), buf, sizeof buf), "tw_engine_segment_name");
        return buf;
    }
    int32_t open(const std::string &segment) const {
        int32_t id = -1;
        check(tw_segment_open(get(), segment.c_str(), &id), "tw_segment_open");
        return id;
    }
    const tw_engine *get() const { return engine_.get(); }

private:
    struct Free {
        void operator()(tw_engine *e) const { tw_engine_free(e); }
    };
    std::unique_ptr<tw_engine, Free> engine_;
};

// Registered memory for the lifetime of this object (which must not outlive the engine).
class Registration {
public:
    Registration(const Engine &e, void *addr, std::size_t len, bool remote_accessible = true)
        : engine_(&e), addr_(addr) {
        check(tw_memory_register(e.get(), addr, len, "cpu:0", remote_accessible),
              "tw_memory_register");
    }
    Registration(Registration &&o) noexcept
        : engine_(o.engine_), addr_(std::exchange(o.addr_, nullptr)) {}
    Registration(const Registration &) = delete;
    Registration &operator=(const Registration &) = delete;
    Registration &operator=(Registration &&) = delete;
    ~Registration() {
        if (addr_ != nullptr) tw_memory_unregister(engine_->get(), addr_);
    }

private:
    const Engine *engine_;
    void *addr_;
};

class Batch {
public:
    Batch(const Engine &e, std::size_t capacity) : engine_(&e) {
        check(tw_batch_alloc(e.get(), capacity, &id_), "tw_batch_alloc");
    }
    Batch(const Batch &) = delete;
    Batch &operator=(const Batch &) = delete;
    // Frees the batch; work still in flight is waited for first.
    ~Batch() {
        if (tw_batch_free(engine_->get(), id_) == TW_ERR_BUSY) {
            tw_batch_wait(engine_->get(), id_, -1);
            tw_batch_free(engine_->get(), id_);
        }
    }
    void submit(const std::vector<tw_transfer_request> &reqs) {
        check(tw_batch_submit(engine_->get(), id_, reqs.data(), reqs.size()), "tw_batch_submit");
    }
    void wait(int64_t timeout_ms) {
        check(tw_batch_wait(engine_->get(), id_, timeout_ms), "tw_batch_wait");
    }
    tw_transfer_status status(std::size_t task) const {
        tw_transfer_status st{};
        check(tw_batch_status(engine_->get(), id_, task, &st), "tw_batch_status");
        return st;
    }

private:
    const Engine *engine_;
    uint64_t id_ = 0;
};

inline tw_transfer_request request(int32_t op, int32_t segment, void *local, const void *remote,
                                   uint64_t len) {
    return tw_transfer_request{op, segment, local,
                               static_cast<uint64_t>(reinterpret_cast<uintptr_t>(remote)), len};
}

}  // namespace tw

int main() {
    try {
        tw::Config cfg;
        cfg.set("local_server_name", "127.0.0.1").set("tcp_lanes", "2");
        tw::Engine a(cfg), b(cfg);  // declared first: destroyed last
        std::printf("tidewire %s: A is %s, B is %s\n", tw_version(), a.name().c_str(),
                    b.name().c_str());

        const std::size_t len = 4u << 20;  // 4 MiB in 16 requests of 256 KiB
        const std::size_t part = len / 16;
        std::vector<uint8_t> src(len), back(len), remote(len);
        for (std::size_t i = 0; i < len; i++) src[i] = static_cast<uint8_t>(i * 29 + 1);
        tw::Registration r1(a, src.data(), len), r2(a, back.data(), len), r3(b, remote.data(), len);

        const int32_t seg = a.open(b.name());
        tw::Batch batch(a, 32);
        std::vector<tw_transfer_request> writes, reads;
        for (std::size_t off = 0; off < len; off += part) {
            writes.push_back(tw::request(TW_OPCODE_WRITE, seg, &src[off], &remote[off], part));
            reads.push_back(tw::request(TW_OPCODE_READ, seg, &back[off], &remote[off], part));
        }
        batch.submit(writes);
        batch.wait(10000);
        batch.submit(reads);
        batch.wait(10000);
        uint64_t moved = 0;
        for (std::size_t t = 0; t < writes.size() + reads.size(); t++)
            moved += batch.status(t).transferred_bytes;
        const bool ok = src == remote && src == back;
        std::printf("moved %llu bytes in %zu tasks; verify: %s\n",
                    static_cast<unsigned long long>(moved), writes.size() + reads.size(),
                    ok ? "every byte matches" : "MISMATCH");

        // Errors surface as exceptions with the code and the library's explanation.
        try {
            a.open("127.0.0.1:1");
            std::printf("unexpected: opened a closed port\n");
            return 1;
        } catch (const tw::Error &e) {
            std::printf("expected failure: %s\n", e.what());
        }
        return ok && moved == 2 * len ? 0 : 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
