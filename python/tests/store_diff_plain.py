"""Runs one call sequence of the Store methods that need no torch (put sessions and ranged
puts, the disk-tier methods on a client without a tier, replica copy/move tasks and
batch_replica_clear on two clients with segments, buffer pools, EngramStore and the NoF
register client) on one target and prints every
result as one JSON line, so test_store_differential.py compares Mooncake's wheel and tidewire
call by call::

    python store_diff_plain.py tidewire|mooncake"""

import ctypes
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main(target):
    from store_stress_base import Target

    tgt = Target(target)
    m = tgt.master()
    s = tgt.connect(m.address, m.metadata, 64 << 20)
    res = {}
    a = (ctypes.c_char * 4096)(*[bytes([i % 251]) for i in range(4096)])
    b = (ctypes.c_char * 512)(*[b"z"] * 512)
    pa, pb = ctypes.addressof(a), ctypes.addressof(b)
    try:
        s.register_buffer(pa, 4096)
        s.register_buffer(pb, 512)
        res["start"] = s.batch_put_session_start(["s1", "s2", "s3"], [4608, 100, 64])
        res["start.again"] = s.batch_put_session_start(["s1"], [4608])
        res["start.zero"] = s.batch_put_session_start(["z0"], [0])
        res["start.lens"] = s.batch_put_session_start(["x1", "x2"], [10])
        res["start.exists"] = (s.put("old", b"v"), s.batch_put_session_start(["old"], [5]))
        res["hidden"] = (s.is_exist("s1"), s.get("s1"))
        res["ranges"] = s.batch_put_from_multi_buffer_ranges(
            ["s1", "s2"], [[pa, pb], [pa]], [[4096, 512], [100]], [[0, 4096], [0]])
        res["ranges.past_end"] = s.batch_put_from_multi_buffer_ranges(
            ["s1"], [[pa]], [[100]], [[4600]])
        res["ranges.no_session"] = s.batch_put_from_multi_buffer_ranges(
            ["nosuch"], [[pa]], [[10]], [[0]])
        res["ranges.lens"] = s.batch_put_from_multi_buffer_ranges(
            ["s1"], [[pa, pb]], [[10]], [[0]])
        res["ranges.outer"] = s.batch_put_from_multi_buffer_ranges(
            ["s1", "s2"], [[pa]], [[10]], [[0]])
        res["end"] = s.batch_put_session_end(["s1", "nosuch"])
        res["end.again"] = s.batch_put_session_end(["s1"])
        res["revoke"] = s.batch_put_session_revoke(["s2", "nosuch"])
        res["after"] = (s.get("s1").hex(), s.get("s2"), s.is_exist("s2"))
        res["ranges.after_end"] = s.batch_put_from_multi_buffer_ranges(
            ["s1"], [[pa]], [[10]], [[0]])
        res["restart"] = s.batch_put_session_start(["s2"], [10])
        res["restart.end"] = s.batch_put_session_end(["s2"])
        res["empty_session"] = (s.get("s2").hex(), s.batch_put_session_revoke(["s3"]))
        res["disk.count"] = s.get_offload_rpc_read_count()
        res["init_all.again"] = s.init_all("tcp", "", 16 << 20)
        # Run-time segments (ids differ between the two: compare codes and shapes).
        seg = s.allocate_and_mount_segment(32 << 20)
        res["alloc"] = (seg["ret"], len(seg["segment_ids"]), seg["allocated_size"])
        res["alloc.zero"] = s.allocate_and_mount_segment(0)["ret"]
        res["unmount.wrong_kind"] = s.unmount_segment(seg["segment_ids"])
        res["unmount.free"] = s.unmount_and_free_segment(seg["segment_ids"])
        res["unmount.free.again"] = s.unmount_and_free_segment(seg["segment_ids"])
        res["unmount.bogus"] = (s.unmount_segment(["1-2"]), s.unmount_segment(["nonsense"]))
        path = os.path.join(os.environ.get("DIFF_TMP", "/tmp"), f"seg-{target}-{os.getpid()}")
        with open(path, "wb") as f:
            f.truncate(8 << 20)
        try:
            fs = s.mount_segment(path, 4 << 20, 4096)
            res["file"] = (fs["ret"], len(fs["segment_ids"]))
            res["file.past_end"] = s.mount_segment(path, 8 << 20, 4096)["ret"]
            res["file.unaligned"] = s.mount_segment(path, 4096, 100)["ret"]
            res["file.missing"] = s.mount_segment(path + ".none", 4096)["ret"]
            res["file.unmount"] = s.unmount_segment(fs["segment_ids"])
        finally:
            os.unlink(path)
    finally:
        s.close()
        m.stop()
    res.update(replica_cases(tgt))
    res.update(pool_cases(tgt))
    print("DIFF-RESULT " + json.dumps(res, default=list), flush=True)


def _wait(s, tid):
    """A task's final state as comparable values: (status, type, message)."""
    deadline = time.monotonic() + 30
    while True:
        r, rc = s.query_task(tid)
        if rc != 0 or r is None:
            return ("query", rc)
        if int(r.status) in (2, 3) or time.monotonic() > deadline:
            return (int(r.status), int(r.type), r.message if int(r.status) == 3 else "")
        time.sleep(0.1)


def replica_cases(tgt):
    """Copy/move tasks and batch_replica_clear, on a master with a 1 s lease and two clients
    with segments. Task ids differ between the two: only their shape is compared; replica
    lists are compared as the names "a"/"b" of the clients holding them."""
    m = tgt.master("--default_kv_lease_ttl=1000")
    a = tgt.connect(m.address, m.metadata, 32 << 20)
    b = tgt.connect(m.address, m.metadata, 32 << 20)
    ha, hb = a.get_hostname(), b.get_hostname()
    res = {}

    def endpoints(key):
        return [d.get_memory_descriptor().buffer_descriptor.transport_endpoint
                for d in a.get_replica_desc(key)]

    def where(key):
        return sorted(names.get(e, "?") for e in endpoints(key))

    def on(seg):
        c = tgt.Config()
        c.preferred_segments = [seg]
        return c

    # Replica endpoints name the clients' transfer endpoints (Mooncake's differ from the
    # segment names): learn them from one object placed on each.
    res["t.probe"] = [a.put("pa", b"a", on(ha)), a.put("pb", b"b", on(hb))]
    names = {e: n for k, n in (("pa", "a"), ("pb", "b")) for e in endpoints(k)}

    def shape(t):
        tid, rc = t
        return [isinstance(tid, tuple) and len(tid) == 2 and tid != (0, 0), rc]

    try:
        val = bytes(range(256)) * 20
        res["t.put"] = [a.put("t1", val, on(ha)), a.put("t2", val, on(ha)),
                        a.put("t3", b"c" * 100, on(ha))]
        res["t.where"] = where("t1")
        res["copy.empty"] = a.create_copy_task("t1", [])
        res["copy.nokey"] = a.create_copy_task("nokey", [hb])
        res["copy.unmounted"] = a.create_copy_task("t1", ["127.0.0.1:1"])
        res["move.nokey"] = a.create_move_task("nokey", ha, hb)
        res["move.same"] = a.create_move_task("t1", ha, ha)
        res["move.nosource"] = a.create_move_task("t1", hb, ha)
        res["move.unmounted"] = a.create_move_task("t1", ha, "127.0.0.1:1")
        res["query.none"] = a.query_task((1, 2))
        t = b.create_copy_task("t1", [hb])
        res["copy"] = shape(t)
        res["copy.done"] = _wait(b, t[0])
        res["copy.where"] = where("t1")
        t = a.create_copy_task("t1", [hb])
        res["copy.again"] = [shape(t), _wait(a, t[0]), where("t1")]
        t = a.create_move_task("t2", ha, hb)
        res["move"] = shape(t)
        res["move.done"] = _wait(a, t[0])
        res["move.where"] = [where("t2"), a.get("t2") == val, b.get("t2") == val]
        time.sleep(1.2)  # the leases of the reads above run out
        res["clear.seg"] = a.batch_replica_clear(["t1", "t3", "nokey"], hb)
        res["clear.seg.where"] = where("t1")
        res["clear.leased"] = a.batch_replica_clear(["t1"], ha)
        time.sleep(1.2)
        res["clear.last"] = a.batch_replica_clear(["t1"], ha)
        res["clear.last.gone"] = a.is_exist("t1")
        res["clear.unmounted"] = a.batch_replica_clear(["t3"], "127.0.0.1:1")
        res["clear.all"] = a.batch_replica_clear(["t3", "t2", "nokey"])
        res["clear.all.gone"] = [a.is_exist("t3"), a.is_exist("t2")]
        res["clear.empty"] = a.batch_replica_clear([])
    finally:
        a.close()
        b.close()
        m.stop()
    return res


def _outcome(fn):
    """A call's result, or its exception as (type name, message)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 (the exception is the result compared)
        return [type(e).__name__, str(e)]


def pool_cases(tgt):
    """Buffer pools (capacity from a 4 MiB local buffer, waits, view-guarded release, close),
    EngramStore (populate, lookup, remove, bad input; needs NumPy) and the NoF register client,
    through the store module of the target."""
    import importlib

    import numpy as np

    S = importlib.import_module("tidewire.store" if tgt.name == "tidewire" else "mooncake.store")
    m = tgt.master("--default_kv_lease_ttl=1000")
    s = tgt.connect(m.address, m.metadata, 32 << 20, 4 << 20)
    res = {}
    try:
        res["pool.bad"] = [_outcome(lambda: S.BufferPool(None)),
                           _outcome(lambda: S.BufferPool(s, alignment=4)),
                           _outcome(lambda: S.BufferPool(s, min_size_class=0)),
                           _outcome(lambda: S.BufferPool(s, max_bytes=-1))[0]]
        p = S.BufferPool(s)
        lease = p.acquire(1000)
        view = lease.buffer
        res["lease"] = [lease.size, len(view), view.format, view.readonly, view.ndim,
                        type(view.obj).__name__]
        res["lease.zero"] = _outcome(lambda: p.acquire(0).size)
        res["release.with_view"] = _outcome(lease.release)
        view[:5] = b"hello"
        res["put_from"] = [s.put_from("pool.k", lease.ptr, 5), s.get("pool.k").decode()]
        del view
        res["release"] = [_outcome(lease.release), _outcome(lease.release),
                          _outcome(lambda: lease.ptr), lease.size,
                          _outcome(lambda: lease.buffer)[0]]
        res["sizes"] = [_outcome(lambda: p.acquire(9 << 20)), _outcome(lambda: p.acquire(8 << 20).size)]
        big = p.acquire(6 << 20)
        res["exhausted"] = [_outcome(lambda: p.acquire(3 << 20, block=False)),
                            _outcome(lambda: p.acquire(3 << 20, timeout=0.05)),
                            _outcome(lambda: p.acquire(1, timeout=-1)),
                            _outcome(lambda: p.buffer(size=2 << 20, block=False).size)]
        res["close.active"] = _outcome(p.close)
        with p.acquire(100) as held:
            res["with"] = [held.size, type(held).__name__]
        res["with.after"] = _outcome(lambda: held.ptr)
        with p.acquire(16) as held:
            res["get_into"] = [s.get_into("pool.k", held.ptr, 16), bytes(held.buffer[:5]).decode()]
        big.release()
        p3 = S.BufferPool(s, max_bytes=1 << 20, max_regions=1, prewarm_size=10, prewarm_count=2)
        one = p3.acquire(10)
        res["regions"] = [_outcome(lambda: p3.acquire(10, block=False)),
                          _outcome(lambda: p3.acquire(5 << 20)), p3.prewarm(1, 1)]
        one.release()
        p.close()
        p3.close()
        res["closed"] = [_outcome(lambda: p.acquire(1)), _outcome(p.close)]
        res["aliases"] = [S.RegisteredBufferPool is S.BufferPool,
                          S.RegisteredBufferLease is S.BufferLease,
                          S.RegisteredBufferLeaseView is S.BufferLeaseView]
        res["ctors"] = [_outcome(S.BufferLease)[0], _outcome(S.BufferLeaseView)[0]]
        # EngramStore on the same client.
        c = S.EngramStoreConfig()
        res["engram.defaults"] = [c.table_vocab_sizes, c.embedding_dim]
        c.table_vocab_sizes, c.embedding_dim = [5, 7], 4
        e = S.EngramStore(2, c, s)
        res["engram.layout"] = [e.get_store_keys(), e.get_num_heads(), e.get_embedding_dim(),
                                e.get_table_vocab_sizes()]
        t0 = np.arange(20, dtype=np.float32).reshape(5, 4)
        t1 = -np.arange(28, dtype=np.float64).reshape(7, 4)
        res["engram.populate"] = [_outcome(lambda: e.remove_from_store()),
                                  _outcome(lambda: e.populate([t0, t1])),
                                  _outcome(lambda: e.populate([t0, t1])),
                                  _outcome(lambda: e.populate([t0])),
                                  _outcome(lambda: e.populate([np.zeros(20, np.float32), t1])),
                                  [s.get_size(k) for k in e.get_store_keys()]]
        ids = np.array([[[0, 6], [4, 0]], [[2, 3], [1, 1]]])
        res["engram.lookup"] = [e.lookup(ids).tolist(), e.lookup([[[4, 6]]]).tolist(),
                                e.lookup(np.array([[[1.7, 2.2]]])).tolist()]
        res["engram.lookup.bad"] = [_outcome(lambda: e.lookup([[[5, 0]]])),
                                    _outcome(lambda: e.lookup([[[1]]])),
                                    _outcome(lambda: e.lookup([[]])),
                                    _outcome(lambda: e.lookup(np.zeros((1, 1, 1, 2), np.int64))),
                                    _outcome(lambda: e.lookup(np.zeros((1, 1, 3), np.int64)))]
        time.sleep(1.2)  # the reads' leases (1 s) run out
        res["engram.remove"] = [_outcome(lambda: e.remove_from_store()),
                                _outcome(lambda: e.remove_from_store(force=True)),
                                s.batch_is_exist(e.get_store_keys())]
        bare = S.EngramStore(0, c)
        res["engram.no_store"] = [_outcome(lambda: bare.lookup([[[0, 0]]])),
                                  _outcome(bare.remove_from_store),
                                  _outcome(lambda: bare.populate([t0, t1]))]
        bad = []
        for sizes, dim in (([], 4), ([0], 4), ([5], 0)):
            c2 = S.EngramStoreConfig()
            c2.table_vocab_sizes, c2.embedding_dim = sizes, dim
            bad.append(_outcome(lambda: S.EngramStore(0, c2)))
        res["engram.config.bad"] = bad + [_outcome(lambda: S.EngramStore(0, c, object()))]
        n = S.MooncakeDistributedNoFRegister()
        res["nof"] = [n.real_register("nqn", 1, "127.0.0.1", 4420, 0, 1024, m.address),
                      n.real_unregister_by_endpoint("nqn", 1, "127.0.0.1", 4420, m.address),
                      _outcome(lambda: n.real_register("nqn"))[0]]
        res["func_addr"] = [S.get_alloc_func_addr() > 0, S.get_free_func_addr() > 0]
    finally:
        s.close()
        m.stop()
    return res


if __name__ == "__main__":
    main(sys.argv[1])
