/*
 * transfer_engine_c.h — Mooncake Transfer Engine C API, implemented by tidewire.
 *
 * This header declares the 27 functions, macros and structs of Mooncake's
 * `transfer_engine_c.h` with the same names, values, layouts and signatures, so
 * programs written against Mooncake build and run unchanged when linked to
 * libtidewire.so (or its alias libtransfer_engine.so). The comments below describe
 * what tidewire does, including the places where it is stricter than Mooncake
 * while keeping the same contract.
 *
 * Return codes come in two domains, exactly as in Mooncake:
 *  - submitTransfer, submitTransferWithNotify, getTransferStatus and freeBatchID
 *    return a POSITIVE status code (0 = OK): 1 invalid argument, 2 too many
 *    requests, 3 address not registered, 4 batch busy, 7 address overlapped,
 *    8 transport not supported/installed, 102 socket, 103 malformed reply,
 *    200 metadata, 202 internal/context.
 *  - Every other int-returning function returns 0 or a NEGATIVE code (-1 invalid
 *    argument, -3 address not registered, -7 address overlapped, -102 socket,
 *    -200 metadata, ...). openSegment returns a segment id (>= 0) or -1.
 *
 * Differences from Mooncake (the contract is the same; only misuse behaves better):
 *  - NULL handles, strings and pointers return an error instead of crashing.
 *  - Batch ids are validated entries of an engine-owned table: a bogus, stale or
 *    double-freed id returns an error instead of undefined behaviour.
 *  - freeBatchID refuses (4) only while a task is really in flight; it does not
 *    require every task to have been polled first.
 *  - An unsupported metadata scheme (redis://, https://) or an unreachable etcd makes
 *    createTransferEngine return NULL with a logged reason instead of aborting the
 *    process. Supported: "P2PHANDSHAKE", "http://" URLs (no TLS in this build, so no
 *    https://) and etcd ("etcd://h:p", a bare "h:p", lists separated by ';' or ',');
 *    etcd keys hang on a lease.
 *  - Transports: TCP, and RDMA when a verbs device is usable (libibverbs is loaded
 *    at run time); see installTransport for the exact list.
 *  - getNicLoadStats and showLinks report no RDMA NICs or links, even with RDMA
 *    installed (per-NIC statistics are not collected yet).
 *
 * Thread safety: every function that takes an engine may be called from any thread
 * at the same time, except destroyTransferEngine, which must not race with other
 * calls on the same engine. Strings passed in are copied; none is retained.
 * Panics never cross the boundary. Failure details are logged to stderr
 * (MC_LOG_LEVEL / TW_LOG_LEVEL) and kept as the thread's last error, readable with
 * tw_last_error_message() from tidewire.h.
 */

#ifndef TIDEWIRE_TRANSFER_ENGINE_C_H
#define TIDEWIRE_TRANSFER_ENGINE_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Integer types (macros, as in Mooncake, so cgo/bindgen see the plain integers). */
#define segment_handle_t int32_t
#define segment_id_t int32_t
#define batch_id_t uint64_t

/* Segment id of the engine's own memory. */
#define LOCAL_SEGMENT (0)
/* Returned by allocateBatchID on failure only. */
#define INVALID_BATCH UINT64_MAX

/* transfer_request.opcode values. READ: remote -> local; WRITE: local -> remote. */
#define OPCODE_READ (0)
#define OPCODE_WRITE (1)

/* transfer_status.status values. tidewire produces WAITING, COMPLETED and FAILED. */
#define STATUS_WAITING (0)
#define STATUS_PENDING (1)
#define STATUS_INVALID (2)
#define STATUS_CANCELED (3)
#define STATUS_COMPLETED (4)
#define STATUS_TIMEOUT (5)
#define STATUS_FAILED (6)

/* Opaque handles. */
#define transfer_engine_t void *
#define transport_t void *

/*
 * One READ or WRITE (40 bytes on LP64). `source` is local registered memory;
 * `target_offset` is the ABSOLUTE virtual address in the target process (inside
 * memory the target registered), not an offset; `target_id` comes from
 * openSegment or is LOCAL_SEGMENT.
 */
struct transfer_request {
    int opcode;
    void *source;
    segment_id_t target_id;
    uint64_t target_offset;
    uint64_t length;
};
typedef struct transfer_request transfer_request_t;

/* Status of one task (16 bytes): STATUS_* value and bytes moved so far. */
struct transfer_status {
    int status;
    uint64_t transferred_bytes;
};
typedef struct transfer_status transfer_status_t;

/*
 * A notification (16 bytes). Passed in: both strings must be non-NULL and are
 * copied. Returned by getNotifsFromEngine: both are malloc'ed and released with
 * freeNotifsMsgBuf.
 */
struct notify_msg {
    char *name;
    char *msg;
};
typedef struct notify_msg notify_msg_t;

/* A memory range for registerLocalMemoryBatch (16 bytes). */
struct buffer_entry {
    void *addr;
    size_t length;
};
typedef struct buffer_entry buffer_entry_t;

/* Kept for layout compatibility (48 bytes); no function takes it. */
struct segment_desc {
    int type;
    union {
        struct {
            void *addr;
            uint64_t size;
            const char *location;
        } rdma;
        struct {
            const char *file_path;
            const char *subsystem_name;
            const char *proto;
            const char *ip;
            uint64_t port;
        } nvmeof;
    } desc_;
};
typedef struct segment_desc segment_desc_t;

/* Per-NIC load sample (80 bytes). tidewire does not collect these yet and reports none. */
struct nic_load_stat {
    char device_name[64];
    uint64_t inflight_bytes;
    double ewma_bandwidth_bps;
};
typedef struct nic_load_stat nic_load_stat_t;

/*
 * Creates an engine and returns its handle, or NULL on failure (reason logged).
 * metadata_conn_string: "P2PHANDSHAKE", an http:// metadata URL, or etcd endpoints
 * ("etcd://h:p[;h:p...]" or a bare "h:p"); anything else (redis://, https://) returns
 * NULL, as does an unreachable etcd. local_server_name: "host[:port]";
 * in P2P mode the host is advertised and the segment name becomes "host:rpc_port"
 * (see getLocalIpAndPort). ip_or_host_name and rpc_port are accepted and unused,
 * as in Mooncake; MC_TCP_BIND_ADDRESS selects the listen address.
 * Transports: with auto_discover != 0, TCP is installed now, and RDMA too when a
 * verbs device is usable; with MC_FORCE_TCP set, TCP only. Otherwise call
 * installTransport(engine, "tcp" or "rdma", NULL). Until a transport is installed,
 * openSegment of a peer returns -1 and submitTransfer returns 8. NULL string arguments return NULL. Free with destroyTransferEngine.
 */
transfer_engine_t createTransferEngine(const char *metadata_conn_string,
                                       const char *local_server_name,
                                       const char *ip_or_host_name,
                                       uint64_t rpc_port, int auto_discover);

/*
 * Installs a transport and returns a non-NULL opaque handle (the same one when
 * called again), or NULL with the reason as the thread's last error. The names
 * accepted (this list is checked against the library by a test):
 *
 * BEGIN TRANSPORTS
 *   tcp   always
 *   rdma  when a verbs device is usable (libibverbs.so.1, or the library named by
 *         TW_IBVERBS_LIB, loaded at run time): opens every device, registers the
 *         memory already registered, publishes the devices and keys; peers without
 *         RDMA are still served over TCP. Without a usable device, or with
 *         MC_FORCE_TCP set: NULL, last error "unsupported".
 * END TRANSPORTS
 *
 * Any other name returns NULL (last error "unsupported"). args may be NULL; for
 * "tcp", if args[0] is a non-empty string it must be a JSON object (NIC priority
 * matrix, accepted and unused) or NULL is returned. NULL engine/proto → NULL.
 */
transport_t installTransport(transfer_engine_t engine, const char *proto,
                             void **args);

/* No-op as in Mooncake: returns 0 (-1 for a NULL engine or proto). */
int uninstallTransport(transfer_engine_t engine, const char *proto);

/*
 * Returns the id of segment `segment_name` (leading '/' ignored), fetching and
 * caching its descriptor on first use. The engine's own name gives 0; remote ids
 * start at 1. Returns -1 on any failure: empty or NULL name, NULL engine,
 * unreachable peer, TCP not installed yet.
 */
segment_id_t openSegment(transfer_engine_t engine, const char *segment_name);

/*
 * Like openSegment, but re-fetches the descriptor when the name is already cached
 * (use after the peer registered more memory). -1 when the re-fetch fails.
 */
segment_id_t openSegmentNoCache(transfer_engine_t engine,
                                const char *segment_name);

/* No-op as in Mooncake (the cache entry stays): 0, or -1 for a NULL engine. */
int closeSegment(transfer_engine_t engine, segment_id_t segment_id);

/* No EFA transport here: 0, or -1 for a NULL engine or name. */
int warmupEfaSegment(transfer_engine_t engine, const char *segment_name);

/*
 * Forgets the cached descriptor of `segment_name` (leading '/' ignored) in this
 * process; a later openSegment fetches it again under a new id. 0 (also when the
 * name is not cached); -1 for an empty/NULL name or NULL engine.
 */
int removeLocalSegment(transfer_engine_t engine, const char *segment_name);

/*
 * Stops the engine and frees the handle. NULL is ignored. Work still in flight
 * fails. Must be called exactly once per engine, with no other call racing on it.
 * Calling it while another thread is inside a call on the same engine, or using the
 * handle afterwards, is the caller's error (undefined behaviour: the handle is freed
 * memory). What the library guarantees: once it returns, every engine thread has been
 * joined, every task ended (FAILED for work that had not finished), no callback of
 * this engine runs any more, and no peer can read or write this process's registered
 * memory through it. Wrappers that let any thread close must count calls in and out
 * and wait for them first (the Python package does: TransferEngine.close()).
 */
void destroyTransferEngine(transfer_engine_t engine);

/*
 * Registers [addr, addr+length) so transfers (and, when remote_accessible != 0,
 * peers) may use it. location ("cpu:N", "cuda:N", "*") is recorded. Returns 0;
 * -1 for zero length, NULL addr/location/engine; -7 when the range overlaps an
 * existing registration (an exact re-registration is reference-counted).
 */
int registerLocalMemory(transfer_engine_t engine, void *addr, size_t length,
                        const char *location, int remote_accessible);

/* Unregisters the region starting at addr: 0, -3 if addr is not a region base. */
int unregisterLocalMemory(transfer_engine_t engine, void *addr);

/*
 * Registers buffer_len ranges, all or none (remote accessible): 0, -1 for a zero
 * length or NULL argument, -7 for overlaps. buffer_len 0 is a no-op returning 0.
 */
int registerLocalMemoryBatch(transfer_engine_t engine,
                             buffer_entry_t *buffer_list, size_t buffer_len,
                             const char *location);

/* Unregisters every address, then returns the first error (0 if none). */
int unregisterLocalMemoryBatch(transfer_engine_t engine, void **addr_list,
                               size_t addr_len);

/*
 * Allocates a batch that holds batch_size requests over all its submits. Returns
 * a validated id, or INVALID_BATCH for a NULL engine or a batch_size over 2^24.
 */
batch_id_t allocateBatchID(transfer_engine_t engine, size_t batch_size);

/*
 * Submits `count` requests to a batch; all are validated before any starts.
 * Returns a status code: 0; 1 for a bad/freed batch id, NULL entries, bad opcode
 * or an unknown target_id; 2 when the batch would exceed batch_size; 3 when a
 * local range is not registered; 8 when no transport is installed yet or the target
 * speaks another transport. Task ids continue across submits, from 0. A remote
 * range the peer refuses shows up later as STATUS_FAILED.
 */
int submitTransfer(transfer_engine_t engine, batch_id_t batch_id,
                   struct transfer_request *entries, size_t count);

/*
 * submitTransfer (count must be >= 1, else 1), then sends notify_msg to the
 * segment of entries[0] exactly once, when every task is done: by the
 * getTransferStatus or freeBatchID call that first finds them all COMPLETED.
 * A failed batch never sends it. NULL name/msg → 1. The strings are copied.
 */
int submitTransferWithNotify(transfer_engine_t engine, batch_id_t batch_id,
                             struct transfer_request *entries, size_t count,
                             notify_msg_t notify_msg);

/*
 * Takes every notification received so far. Returns a malloc'ed array of *size
 * entries whose strings are malloc'ed; release it with freeNotifsMsgBuf. Returns
 * NULL with *size == 0 when there is none (or for a NULL engine).
 */
notify_msg_t *getNotifsFromEngine(transfer_engine_t engine, int *size);

/* Frees an array from getNotifsFromEngine. NULL is fine. Returns 0 (-1 if size < 0). */
int freeNotifsMsgBuf(notify_msg_t *msg, int size);

/*
 * Sends a notification to the owner of segment target_id now. 0; -200 for an
 * unknown id or a rejected reply; -102 and similar for socket errors; -1 for NULL
 * arguments.
 */
int genNotifyInEngine(transfer_engine_t engine, uint64_t target_id,
                      notify_msg_t notify_msg);

/*
 * Writes the status of task `task_id` (0-based, submission order) to *status and
 * returns 0; returns 1 (and writes nothing) for a bad batch id, a task_id not yet
 * submitted or a NULL status. Cheap and lock-free: an id-table lookup and atomic
 * loads; a STATUS_WAITING answer yields the CPU once (sched_yield), so a caller
 * polling in a tight loop leaves the threads that finish the task room to run.
 */
int getTransferStatus(transfer_engine_t engine, batch_id_t batch_id,
                      size_t task_id, struct transfer_status *status);

/*
 * Frees a batch: 0; 4 while one of its tasks is still in flight (call again
 * later), never after getTransferStatus has read every task COMPLETED or FAILED;
 * 1 for an unknown, stale or already-freed id. Polling first is not required; a
 * notification not sent yet is sent here.
 */
int freeBatchID(transfer_engine_t engine, batch_id_t batch_id);

/* Re-fetches every cached remote descriptor; failures are logged. Returns 0. */
int syncSegmentCache(transfer_engine_t engine);

/*
 * No-op: RDMA devices are discovered when the engine starts (auto_discover) or by
 * installTransport("rdma"). Returns 0, or -1 for a NULL engine.
 */
int discoverTopology(transfer_engine_t engine);

/*
 * Writes "host:port" — in P2P mode the segment name peers must open — into
 * buf_out, truncating like snprintf (always NUL-terminated when buf_len > 0).
 * Returns 0; -1 for a NULL engine, or a NULL buf_out with buf_len > 0.
 */
int getLocalIpAndPort(transfer_engine_t engine, char *buf_out, size_t buf_len);

/*
 * Lists the RDMA NICs in use. *count is in/out: capacity of stats in, number of
 * NICs out; min(capacity, NICs) entries are written (inflight_bytes and
 * ewma_bandwidth_bps are 0: per-NIC load is not measured). Without the RDMA
 * transport: *count = 0, stats untouched. Returns 0; -1 if any argument is NULL.
 */
int getNicLoadStats(transfer_engine_t engine, nic_load_stat_t *stats,
                    size_t *count);

/*
 * Logs and does nothing: installing SIGTERM/SIGINT handlers from inside a library
 * takes signal handling away from the host program. Shut the engine down with
 * destroyTransferEngine from the program's own handler or exit path.
 */
void enableGracefulShutdown(transfer_engine_t engine);

/*
 * Writes a short text (json == 0) or JSON (json != 0) report of the RDMA links:
 * the NICs in use when the RDMA transport is installed, else that there are none.
 * Truncated to fit and NUL-terminated. 0; -1 for a NULL engine or buffer, or
 * buf_len == 0.
 */
int showLinks(transfer_engine_t engine, char *buf_out, size_t buf_len,
              int json);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TIDEWIRE_TRANSFER_ENGINE_C_H */
