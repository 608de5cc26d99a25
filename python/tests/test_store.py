"""tidewire.store against a real tidewire-master and client processes over loopback, in both
metadata modes: every method and error code, TransferQueue's calling pattern from three
processes, values above the 16 MiB slice, readers during upserts, a killed client, a master
restart, and bad input."""

import ctypes
import os
import random
import threading
import time

import pytest

from conftest import MBuf
from store_util import Master, Peer, connect, tq_workload, wait_until
from tidewire.store import MooncakeDistributedStore, ReplicateConfig

# Fails, not skips, without the master binary (see conftest.store_master_built).
pytestmark = pytest.mark.usefixtures("store_master_built")


@pytest.fixture(params=["p2p", "http"])
def cluster(request):
    """A master, one server process with a segment, and a client here without a segment (so
    every byte crosses a process boundary)."""
    m = Master("--default_kv_lease_ttl=500", http=request.param == "http")
    peer = Peer(m)
    s = connect(m)
    yield m, peer, s
    s.close()
    peer.close()
    m.stop()


def test_every_method(cluster):
    m, peer, s = cluster
    assert s.health_check() == 0
    host = s.get_hostname()
    assert host.startswith("127.0.0.1:") and host != peer.ready["hostname"]
    cfg = ReplicateConfig()
    cfg.with_hard_pin = True
    # Copying API.
    assert s.put("a", b"hello", cfg) == 0
    assert s.put("a", b"other", cfg) == 0, "duplicate put is a success"
    two = ReplicateConfig()
    two.replica_num = 2
    assert s.put("two", b"replicas", two) == 0, "one segment: 2 replicas is best effort"
    assert s.get("two") == b"replicas"
    assert s.get("a") == b"hello", "and keeps the old value"
    assert s.upsert("a", b"HELLO") == 0 and s.get("a") == b"HELLO"
    assert s.upsert("a", b"longer value") == 0 and s.get("a") == b"longer value"
    assert s.put_batch(["b1", "b2"], [b"x" * 10, bytearray(b"y" * 20)]) == 0
    assert s.upsert_batch(["b1", "b3"], [b"z" * 5, memoryview(b"w" * 7)]) == 0
    assert s.get_batch(["b1", "b2", "b3", "nope"]) == [b"z" * 5, b"y" * 20, b"w" * 7, b""]
    assert s.put_parts("p", b"ab", b"cd") == 0 and s.get("p") == b"abcd"
    assert s.upsert_parts("p", b"x", bytearray(b"yz")) == 0 and s.get("p") == b"xyz"
    assert s.get("nope") == b""
    assert s.get_size("p") == 3 and s.get_size("nope") == -704
    h = s.get_buffer("p")
    assert h.size() == 3 and len(h) == 3 and h.tobytes() == b"xyz" and bytes(h.view()) == b"xyz"
    assert h.ptr() != 0
    h.release()
    assert s.get_buffer("nope") is None
    # Zero-copy API.
    buf = MBuf(1 << 20)
    try:
        assert s.register_buffer(buf.addr, buf.size) == 0
        buf.put(0, b"0123456789")
        assert s.put_from("z", buf.addr, 10, cfg) == 0
        assert s.upsert_from("z", buf.addr + 1, 9) == 0
        assert s.batch_put_from(["z1", "z2"], [buf.addr, buf.addr + 2], [4, 5]) == [0, 0]
        assert s.batch_upsert_from(["z1", "z3"], [buf.addr + 5, buf.addr], [3, 2]) == [0, 0]
        out = buf.addr + 4096
        assert s.get_into("z", out, 100) == 9 and buf.get(4096, 9) == b"123456789"
        assert s.get_into("z", out, 8) == -600
        assert s.get_into("nope", out, 8) == -704
        assert s.batch_get_into(["z1", "z2", "z3", "nope"], [out, out + 16, out + 32, out + 48],
                                [16, 16, 16, 16]) == [3, 5, 2, -704]
        assert buf.get(4096, 3) == b"567" and buf.get(4096 + 16, 5) == b"23456"
        assert buf.get(4096 + 32, 2) == b"01"
        r = s.get_into_ranges([out], [["z", "z1", "nope"]], [[[0, 100], [200], [300]]],
                              [[[0, 5], [1], [0]]], [[[4, 3], [2], [1]]])
        assert r == [[[4, 3], [2], [-704]]]
        assert buf.get(4096, 4) == b"1234" and buf.get(4096 + 100, 3) == b"678"
        assert buf.get(4096 + 200, 2) == b"67"
        assert s.get_into_ranges([out], [["z"]], [[[0]]], [[[8]]], [[[5]]]) == [[[-600]]]
        # Lists of different lengths: Mooncake 0.3.13's nested answer, recorded case by case
        # (-600 in each place; a key has as many places as destination offsets).
        mismatched = [
            (([out], [["z"]], [[[0, 100]]], [[[0]]], [[[5, 5]]]), [[[-600, -600]]]),
            (([out], [["z", "z1"]], [[[0, 100], [200]]], [[[0], [0]]], [[[5, 5], [3]]]),
             [[[-600, -600], [3]]]),
            (([out], [["z", "nope"]], [[[0], [200, 300]]], [[[0], [0]]], [[[5], [3]]]),
             [[[5], [-600, -600]]]),
            (([out], [["z"]], [[[0, 100, 200]]], [[[0, 1]]], [[[5]]]), [[[-600, -600, -600]]]),
            (([out], [["z", "z1"]], [[[0, 100]]], [[[0, 0]]], [[[5, 5]]]),
             [[[-600, -600], [-600]]]),
            (([out, out], [["z", "z1"], ["z"]], [[[0], [200]]], [[[0], [0]]], [[[5], [3]]]),
             [[[-600], [-600]], [[-600]]]),
            (([out, out], [["z"]], [[[0]]], [[[0]]], [[[5]]]), [[[-600]], [[-600]]]),
        ]
        for args, want in mismatched:
            assert s.get_into_ranges(*args) == want, args
        assert s.unregister_buffer(buf.addr) == 0
        # Unregistered (but mapped) memory still works, as on Mooncake's TCP path.
        assert s.put_from("unreg", buf.addr, 10) == 0
        assert s.get_into("unreg", out, 10) == 10
    finally:
        buf.close()
    # Existence, leases, removal.
    assert s.is_exist("a") == 1 and s.is_exist("nope") == 0
    assert s.batch_is_exist(["a", "nope", "b1"]) == [1, 0, 1]
    assert s.remove("a") == -706, "a fresh read holds a lease"
    assert s.remove("a", force=True) == 0
    assert s.remove("a") == -704
    assert s.batch_remove(["b1", "b2", "nope"], force=True) == [0, 0, -704]
    time.sleep(0.6)
    assert s.batch_remove(["b3"]) == [0], "the lease ran out"
    for k in ("re@1", "re@2", "other@1"):
        assert s.upsert(k, b"v") == 0
    assert s.remove_by_regex("^re@.*", force=True) == 2
    assert s.remove_by_regex("(", force=True) == -600
    assert s.remove_all(force=True) >= 1
    assert s.is_exist("other@1") == 0
    assert "tidewire_master_segments 1" in m.metrics()


def test_transferqueue_pattern_three_processes():
    """Master + two worker processes + this process, each contributing a segment and running
    TransferQueue's 4-thread, 400-key batch pattern at the same time."""
    m = Master("-client_ttl=30", "-default_kv_lease_ttl=999999", "-default_kv_soft_pin_ttl=999999",
               "--allow_evict_soft_pinned_objects=false", "--eviction_high_watermark_ratio=1.0",
               "--eviction_ratio=0.0", http=True)
    peers = []
    s = None
    try:
        peers = [Peer(m, "tq", 256 << 20, f"w{i}-", str(i + 1)) for i in range(2)]
        s = connect(m, segment=256 << 20)
        errors = tq_workload(s, "main-", 7)
        assert errors == []
        for p in peers:
            assert p.read() == {"errors": []}
    finally:
        if s:
            s.close()
        for p in peers:
            p.close()
        m.stop()


def test_values_above_the_slice_size(cluster):
    _, _, s = cluster
    n = 40 << 20
    src = MBuf(n)
    dst = MBuf(n)
    try:
        data = random.Random(3).randbytes(n)
        src.put(0, data)
        assert s.register_buffer(src.addr, n) == 0 and s.register_buffer(dst.addr, n) == 0
        assert s.batch_upsert_from(["big"], [src.addr], [n]) == [0]
        assert s.batch_get_into(["big"], [dst.addr], [n]) == [n]
        assert dst.get(0, n) == data
        assert s.get("big") == data
        s.unregister_buffer(src.addr)
        s.unregister_buffer(dst.addr)
    finally:
        src.close()
        dst.close()


def test_readers_never_see_a_torn_value(cluster):
    """One thread upserts (same size in place, other sizes reallocated) while three threads
    read: every value read is uniform (all bytes the same) and of a written size."""
    _, _, s = cluster
    sizes = [256 << 10, 256 << 10, 1 << 20, 64 << 10]
    assert s.upsert("t", bytes(sizes[0])) == 0
    stop = threading.Event()
    bad, seen = [], [0]

    def reader():
        buf = MBuf(1 << 20)
        try:
            while not stop.is_set():
                v = s.get("t")
                if v:
                    seen[0] += 1
                    if len(v) not in sizes or v.count(v[0]) != len(v):
                        bad.append(len(v))
                r = s.get_into("t", buf.addr, buf.size)
                if r > 0:
                    head = buf.get(0, r)
                    if head.count(head[0]) != r:
                        bad.append(r)
        finally:
            buf.close()

    ts = [threading.Thread(target=reader) for _ in range(3)]
    for t in ts:
        t.start()
    try:
        for i in range(120):
            rc = s.upsert("t", bytes([i % 251]) * sizes[i % len(sizes)])
            assert rc == 0, rc
    finally:
        stop.set()
        for t in ts:
            t.join(30)
    assert bad == []
    assert seen[0] > 0


def test_killed_client_segments_are_unmounted_after_ttl():
    m = Master("--client_ttl=2", "--client_grace_sec=1")
    peer = Peer(m)
    s = connect(m)
    try:
        for i in range(10):
            assert s.upsert(f"k{i}", b"v" * 1000) == 0
        assert s.get("k0") == b"v" * 1000
        peer.kill()
        # Before the TTL the object is still listed, but its bytes are gone: a clear error.
        buf = MBuf(4096)
        try:
            r = s.get_into("k1", buf.addr, 4096)
            assert r in (-800, -704), r
        finally:
            buf.close()
        assert wait_until(lambda: s.is_exist("k0") == 0, 10), "objects outlived the client"
        assert "tidewire_master_segments 0" in m.metrics()
        assert s.upsert("k0", b"v") == -200, "no segment left"
    finally:
        s.close()
        peer.close()
        m.stop()


def test_master_restart_errors_then_recovery():
    m = Master()
    s = connect(m, segment=64 << 20)
    try:
        assert s.upsert("a", b"1") == 0
        port = m.port
        m.stop()
        t0 = time.monotonic()
        assert s.upsert("b", b"2") in (-900, -901)
        assert s.get("a") == b""
        assert s.get_size("a") in (-900, -901)
        assert s.batch_get_into(["a"], [1 << 20], [1]) in ([-900], [-901])
        assert s.health_check() == 2
        assert time.monotonic() - t0 < 10, "errors must come fast, not hang"
        m = Master(port=port)
        assert wait_until(lambda: s.upsert("b", b"2") == 0, 10), "client did not recover"
        assert s.get("b") == b"2" and s.health_check() == 0
    finally:
        s.close()
        m.stop()


def test_bad_inputs(cluster):
    _, _, s = cluster
    long_key = "k" * ((1 << 20) + 1)  # one byte over Mooncake's 1 MiB limit
    assert s.put(long_key, b"v") == -600
    assert s.put("", b"v") == -600
    assert s.put("empty", b"") == -600
    assert s.get(long_key) == b"" and s.get_size(long_key) == -600
    assert s.put_from("k", 0, 10) == -600, "NULL pointer"
    assert s.put_from("k", 8, 10) == -600, "unmapped pointer"
    assert s.put_from("k", 1 << 20, -1) == -600, "negative size"
    assert s.put_from("k", "x", 1) == -600, "not an address"
    assert s.batch_put_from(["a", "b"], [1], [1, 2]) == [-600, -600], "length mismatch"
    assert s.put_from("k", True, 1) == -600, "a bool is not an address"

    class Index:  # numpy-style integer: accepted through __index__
        def __init__(self, v):
            self.v = v

        def __index__(self):
            return self.v

    src = MBuf(4096)
    try:
        src.put(0, b"idx")
        assert s.put_from("idx", Index(src.addr), Index(3)) == 0
        assert s.get("idx") == b"idx"
    finally:
        src.close()
    assert s.upsert("k", b"abc") == 0
    assert s.get_into("k", 0, 10) == -600
    assert s.get_into("k", 8, 10) == -600, "unmapped destination"
    assert s.batch_get_into(["k"], [1 << 20], [-5]) == [-600]
    assert s.register_buffer(0, 10) == -600
    assert s.unregister_buffer(12345) < 0
    assert s.get_into_ranges([0], [["k"]], [[[0, 1]]], [[[0]]], [[[1]]]) == [[[-600, -600]]]
    assert s.get_into_ranges([0], [["k"]], [[[0]]], [[[0]]], [[[1]]]) == [[[-600]]], "NULL buffer"
    # A full segment: -200 per key, the store keeps working. Hard-pinned, so not evictable.
    pin = ReplicateConfig()
    pin.with_hard_pin = True
    big = bytes(200 << 20)
    assert s.upsert("huge", big, pin) == 0
    assert s.upsert("huge2", big) == -200
    assert s.batch_upsert_from(["x"], [1 << 40], [300 << 20]) == [-200]
    assert s.remove("huge", force=True) == 0
    assert s.upsert("huge2", big) == 0
    # Without a pin the old object is evicted to make room (watermark eviction, LRU).
    assert s.upsert("huge3", big) == 0
    assert s.is_exist("huge2") == 0 and s.is_exist("huge3") == 1
    # Not set up / closed.
    fresh = MooncakeDistributedStore()
    assert fresh.health_check() == 1
    assert fresh.put("a", b"b") < 0 and fresh.get("a") == b"" and fresh.is_exist("a") == -1


def test_setup_errors_and_dict_form():
    m = Master()
    try:
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "redis://127.0.0.1:6379", 0, 1 << 20, "tcp", "",
                       m.address) == -600
        # etcd metadata is accepted now; with no etcd listening there it is still an error.
        assert s.setup("127.0.0.1", "etcd://127.0.0.1:1", 0, 1 << 20, "tcp", "",
                       m.address) < 0
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "carrier-pigeon", "",
                       m.address) == -600
        # A master nobody listens on: an error, quickly.
        sock = __import__("socket").socket()
        sock.bind(("127.0.0.1", 0))
        dead = "127.0.0.1:%d" % sock.getsockname()[1]
        sock.close()
        t0 = time.monotonic()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", dead) == -900
        assert time.monotonic() - t0 < 10
        assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                        "global_segment_size": 1 << 20, "local_buffer_size": 1 << 20,
                        "protocol": "tcp", "master_server_address": m.address}) == 0
        assert s.upsert("d", b"dict") == 0 and s.get("d") == b"dict"
        assert s.close() == 0 and s.close() == 0
    finally:
        m.stop()


def test_lease_expired_is_reported():
    """A 1 ms lease and no hold past it (--max_read_hold_sec=0) cannot cover a 32 MiB read over
    TCP: -707, never stale bytes."""
    m = Master("--default_kv_lease_ttl=1", "--max_read_hold_sec=0")
    peer = Peer(m)
    s = connect(m)
    buf = MBuf(32 << 20)
    try:
        assert s.upsert("slow", bytes(32 << 20)) == 0
        assert s.get_into("slow", buf.addr, buf.size) == -707
    finally:
        buf.close()
        s.close()
        peer.close()
        m.stop()


def test_mooncake_store_alias():
    import sys
    import tidewire.store as tws

    saved = {k: sys.modules.get(k) for k in ("mooncake", "mooncake.store")}
    try:
        tws.install_as_mooncake()
        from mooncake.store import MooncakeDistributedStore as M, ReplicateConfig as R
        assert M is tws.MooncakeDistributedStore and R is tws.ReplicateConfig
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def test_close_waits_for_calls_in_flight(cluster):
    """close() while other threads are inside calls: they finish or get an error code, and
    nothing uses a freed handle."""
    _, _, s = cluster
    assert s.upsert("c", bytes(4 << 20)) == 0
    results, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            results.append(len(s.get("c")))

    ts = [threading.Thread(target=reader) for _ in range(3)]
    for t in ts:
        t.start()
    time.sleep(0.3)
    assert s.close() == 0
    stop.set()
    for t in ts:
        t.join(30)
    assert results and set(results) <= {0, 4 << 20}
    assert s.get("c") == b"" and s.put("c", b"x") < 0


def test_shim_package_serves_mooncake_imports():
    """With python/tidewire/shim first on PYTHONPATH, Mooncake imports load tidewire, even where
    the real mooncake wheel is installed."""
    import subprocess
    import sys

    from conftest import REPO

    shim = os.path.join(REPO, "python", "tidewire", "shim")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([shim, os.path.join(REPO, "python")]))
    code = ("from mooncake.store import MooncakeDistributedStore as M\n"
            "from mooncake.engine import TransferEngine as T\n"
            "import tidewire.store, tidewire.engine\n"
            "assert M is tidewire.store.MooncakeDistributedStore\n"
            "assert T is tidewire.engine.TransferEngine\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr


def test_get_sized_callback_contract(cluster):
    """tw_store_get_sized (behind get_batch): the callback is asked once per found key with its
    size, in key order; a NULL answer fails only that key (TW_STORE_INTERNAL_ERROR, the C API's
    number for Mooncake's -1); misses never reach it (-704); a NULL callback is -600 for the
    call."""
    from ctypes import c_char_p, c_int64

    from tidewire import _ffi
    from tidewire.mooncake_store.signatures import TW_STORE_INTERNAL_ERROR, AllocFn

    m, peer, s = cluster
    vals = {"gs/a": b"a" * 5000, "gs/b": b"b" * 7, "gs/c": bytes(range(256)) * 300}
    assert s.upsert_batch(list(vals), list(vals.values())) == 0
    keys = ["gs/a", "gs/missing", "gs/b", "gs/c"]
    karr = (c_char_p * 4)(*[k.encode() for k in keys])
    asked, bufs = [], {}

    def alloc(_ctx, i, size):
        asked.append((i, size))
        if keys[i] == "gs/b":
            return None
        bufs[i] = ctypes.create_string_buffer(size)
        return ctypes.addressof(bufs[i])

    res = (c_int64 * 4)()
    h = s._h
    assert _ffi.lib().tw_store_get_sized(h, karr, None, 4, AllocFn(alloc), None, res) == 0
    assert asked == [(0, 5000), (2, 7), (3, 76800)]
    assert list(res) == [5000, -704, TW_STORE_INTERNAL_ERROR, 76800]
    assert bufs[0].raw == vals["gs/a"] and bufs[3].raw == vals["gs/c"]
    assert _ffi.lib().tw_store_get_sized(h, karr, None, 4, AllocFn(0), None, res) == -600
    # get_batch itself: bytes straight from the store, b'' for misses.
    assert s.get_batch(keys) == [vals["gs/a"], b"", vals["gs/b"], vals["gs/c"]]


def test_copying_put_of_overlapping_views(cluster):
    """Copying puts send single-part values straight from caller memory (registered for the
    call only): values that share or overlap one buffer still go, and read back exactly."""
    m, peer, s = cluster
    buf = bytearray(random.Random(5).randbytes(4096))
    mv = memoryview(buf)
    keys = ["ov/a", "ov/b", "ov/c", "ov/d"]
    parts = [mv[0:100], mv[50:150], mv[0:100], mv[1000:4096]]
    assert s.upsert_batch(keys, parts) == 0
    assert s.get_batch(keys) == [bytes(p) for p in parts]
    assert s.put("ov/e", bytes(buf)) == 0 and s.get("ov/e") == bytes(buf)
    assert s.upsert_parts("ov/f", mv[0:10], b"xyz") == 0
    assert s.get("ov/f") == bytes(buf[:10]) + b"xyz"


def test_key_arrays_round_trip():
    """The packed key arrays the library reads: every key back, in order, at its full length
    (NUL bytes included)."""
    from tidewire.mooncake_store import arguments as st
    from tidewire.mooncake_store.native import _keys

    keys = ["a", "", "ключ-ü", b"raw-bytes", "x" * 300, "k\0a", bytearray(b"\0")]
    keys += [f"k{i}" for i in range(1000)]
    arr, lens, keep = _keys(keys)
    ptrs = ctypes.cast(arr, ctypes.POINTER(ctypes.c_void_p))
    want = [k.encode() if isinstance(k, str) else bytes(k) for k in keys]
    assert [ctypes.string_at(ptrs[i] or 0, lens[i]) for i in range(len(keys))] == want
    empty, empty_lens, _ = _keys([])
    assert len(empty) == 0 and len(empty_lens) == 0
    res, cres = st._codes(3)
    cres[1] = -704
    assert res.tolist() == [0, -704, 0]
