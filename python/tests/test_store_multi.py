"""Mooncake's multi-buffer calls (``batch_put_from_multi_buffers`` /
``batch_get_into_multi_buffers``, as vLLM's MooncakeStoreConnector and SGLang's HiCache call
them) and the full ``ReplicateConfig``, against a real tidewire-master with the segment in
another process (every byte crosses processes): 128 keys of 64-256 KiB in 1-4 pieces, bad
input, and values read back in pieces while they are being upserted."""

import os
import random
import threading

import pytest

from conftest import MBuf
from store_util import Master, Peer, connect
from tidewire.store import (
    MooncakeDistributedStore,
    ObjectDataType,
    ReplicateConfig,
    SoftPinAction,
)

# Fails, not skips, without the master binary (see conftest.store_master_built).
pytestmark = pytest.mark.usefixtures("store_master_built")

SLOT = 260 << 10  # a key's room in the test buffers: up to 256 KiB plus gaps between pieces


@pytest.fixture(scope="module")
def cluster():
    """A master, a server process holding the only segment, and a client here without one."""
    m = Master("--default_kv_lease_ttl=300")
    peer = Peer(m, "server", 192 << 20)
    s = connect(m)
    yield m, peer, s
    s.close()
    peer.close()
    m.stop()


def split(rnd, base, length, gap):
    """1-4 pieces covering ``length`` bytes from ``base``, ``gap`` bytes apart:
    (ptrs, sizes)."""
    cuts = sorted({rnd.randint(1, length - 1) for _ in range(rnd.randint(0, 3))})
    ptrs, sizes, at = [], [], 0
    for i, c in enumerate(cuts + [length]):
        ptrs.append(base + at + i * gap)
        sizes.append(c - at)
        at = c
    return ptrs, sizes


def gather(buf, ptrs, sizes):
    return b"".join(buf.get(p - buf.addr, n) for p, n in zip(ptrs, sizes))


def test_round_trip_128_keys_in_pieces(cluster):
    _, peer, s = cluster
    rnd = random.Random(21)
    n = 128
    src, dst = MBuf(n * SLOT), MBuf(n * SLOT)
    try:
        assert s.register_buffer(src.addr, src.size) == 0  # dst stays unregistered
        keys = [f"mb/{i}" for i in range(n)]
        want, all_ptrs, all_sizes = [], [], []
        for i in range(n):
            length = rnd.randint(64 << 10, 256 << 10)
            ptrs, sizes = split(rnd, src.addr + i * SLOT, length, 1024)
            value = rnd.randbytes(length)
            at = 0
            for p, z in zip(ptrs, sizes):
                src.put(p - src.addr, value[at:at + z])
                at += z
            want.append(value)
            all_ptrs.append(ptrs)
            all_sizes.append(sizes)
        cfg = ReplicateConfig()
        cfg.preferred_segment = peer.ready["hostname"]  # vLLM sets it; the peer's segment
        cfg.group_ids = [f"g{i % 4}" for i in range(n)]  # SGLang/vLLM group semantics
        cfg.session_ids = ["s"] * n
        assert s.batch_put_from_multi_buffers(keys, all_ptrs, all_sizes, cfg) == [0] * n
        assert s.batch_is_exist(keys) == [1] * n
        # Read back split at other points.
        gets = [split(rnd, dst.addr + i * SLOT, len(want[i]), 512) for i in range(n)]
        got = s.batch_get_into_multi_buffers(keys, [g[0] for g in gets], [g[1] for g in gets])
        assert got == [len(w) for w in want]
        for i in range(n):
            assert gather(dst, *gets[i]) == want[i], i
        # The value is the concatenation: the plain calls see it whole.
        assert s.get_batch(keys[:8]) == want[:8]
        assert s.get_size(keys[0]) == len(want[0])
        # Pieces with more room than the value: the value's size; the rest untouched.
        dst.put(0, b"\xee" * (300 << 10))
        r = s.batch_get_into_multi_buffers([keys[1]], [[dst.addr, dst.addr + 100]],
                                           [[100, 300 << 10]], prefer_alloc_in_same_node=True)
        assert r == [len(want[1])]
        assert dst.get(0, 100) + dst.get(100, len(want[1]) - 100) == want[1]
        assert dst.get(len(want[1]), 16) == b"\xee" * 16
        # Create-only: a second put keeps the first value.
        assert s.batch_put_from_multi_buffers([keys[2]], [[src.addr]], [[10]]) == [0]
        assert s.get(keys[2]) == want[2]
        assert s.batch_remove(keys, force=True) == [0] * n
        s.unregister_buffer(src.addr)
    finally:
        src.close()
        dst.close()


def test_bad_input(cluster):
    _, _, s = cluster
    buf = MBuf(1 << 20)
    try:
        buf.put(0, b"0123456789")
        a = buf.addr
        put, get = s.batch_put_from_multi_buffers, s.batch_get_into_multi_buffers
        # Outer lengths that differ: every key gets -600, as in Mooncake.
        assert put(["a", "b"], [[a]], [[1], [1]]) == [-600, -600]
        assert get(["a", "b"], [[a], [a]], [[1]]) == [-600, -600]
        assert put([], [], []) == [] and get([], [], []) == []
        # A key's own bad pieces fail that key only.
        r = put(["ok", "inner", "null", "none", "zeros", "unmapped", "notint", "neg", "skip"],
                [[a, a + 5], [a, a], [a, 0], [], [a, 0], [a, 4096], [a, "x"], [a], [a, 0, a + 3]],
                [[5, 5], [1], [5, 5], [], [0, 0], [5, 5], [5, 5], [-1], [3, 0, 7]])
        assert r == [0, -600, -600, -600, -600, -600, -600, -600, 0]
        assert s.get("ok") == b"0123456789" and s.get("skip") == b"0123456789"
        assert s.is_exist("null") == 0
        # Reads: too little room, NULL and unmapped destinations fail their key; misses -704.
        out = a + 4096
        r = get(["ok", "ok", "ok", "ok", "missing", "ok", "ok"],
                [[out, out + 8], [out, 0], [out, 4096], [], [out], [out, out + 100], [out]],
                [[5, 4], [5, 5], [5, 5], [], [10], [4, 6], [10, 1]])
        assert r == [-600, -600, -600, -600, -704, 10, -600]
        assert buf.get(4096, 4) + buf.get(4096 + 100, 6) == b"0123456789"
        # Keys are checked as everywhere: TypeError for a non-str key, -600 for an empty one.
        with pytest.raises(TypeError):
            put([1], [[a]], [[1]])
        with pytest.raises(TypeError):
            get("ok", [[a]], [[1]])
        assert put([""], [[a]], [[1]]) == [-600] and get([""], [[out]], [[10]]) == [-600]
        # Not set up.
        fresh = MooncakeDistributedStore()
        assert fresh.batch_put_from_multi_buffers(["a"], [[a]], [[1]]) == [-1]
        assert fresh.batch_get_into_multi_buffers(["a"], [[a]], [[1]]) == [-1]
    finally:
        buf.close()


def test_replicate_config_fields(cluster):
    _, peer, s = cluster
    cfg = ReplicateConfig()
    defaults = {
        "replica_num": 1, "nof_replica_num": 0, "dfs_replica_num": 0,
        "soft_pin_action": SoftPinAction.PRESERVE, "soft_pin_ttl_ms": None,
        "with_soft_pin": False, "with_hard_pin": False, "preferred_segments": [],
        "preferred_segment": "", "preferred_nof_segments": [],
        "prefer_alloc_in_same_node": False, "data_type": ObjectDataType.UNKNOWN,
        "group_ids": None, "session_ids": None,
    }
    for name, value in defaults.items():
        assert getattr(cfg, name) == value, name
    assert hasattr(ReplicateConfig(), "group_ids") and hasattr(ReplicateConfig(), "session_ids")
    assert "PRESERVE" in repr(cfg)
    buf = MBuf(4096)
    try:
        buf.put(0, b"abcdef")
        # prefer_alloc_in_same_node: only the multi-buffer put takes it (replica_num 1).
        same = ReplicateConfig()
        same.prefer_alloc_in_same_node = True
        assert s.put("p1", b"x", same) == -600
        assert s.put_from("p1", buf.addr, 3, same) == -600
        assert s.batch_upsert_from(["p1"], [buf.addr], [3], same) == [-600]
        assert s.put_batch(["p1"], [b"x"], same) == -600
        assert s.batch_put_from_multi_buffers(["p1"], [[buf.addr]], [[3]], same) == [0]
        two = ReplicateConfig()
        two.prefer_alloc_in_same_node = True
        two.replica_num = 2
        assert s.batch_put_from_multi_buffers(["p2"], [[buf.addr]], [[3]], two) == [-600]
        # Soft pin: ENABLE (with or without a TTL) works; a TTL without ENABLE is refused.
        soft = ReplicateConfig()
        soft.soft_pin_action = SoftPinAction.ENABLE
        soft.soft_pin_ttl_ms = 60_000
        assert s.put("soft", b"v", soft) == 0
        assert s.batch_put_from_multi_buffers(["soft2"], [[buf.addr]], [[2]], soft) == [0]
        ttl_only = ReplicateConfig()
        ttl_only.soft_pin_ttl_ms = 1000
        assert s.put("ttl", b"v", ttl_only) == -600
        assert s.batch_put_from_multi_buffers(["ttl"], [[buf.addr]], [[2]], ttl_only) == [-600]
        off = ReplicateConfig()
        off.soft_pin_action = SoftPinAction.DISABLE
        off.data_type = ObjectDataType.KVCACHE
        off.nof_replica_num = 0
        off.preferred_segments = [peer.ready["hostname"]]
        assert s.put("off", b"v", off) == 0 and s.get("off") == b"v"
        assert s.batch_remove(["p1", "soft", "soft2", "off"], force=True) == [0, 0, 0, 0]
    finally:
        buf.close()


def test_pieces_never_torn_under_upserts(cluster):
    """One thread upserts a key (same size in place, other sizes reallocated) while three
    threads read it into three pieces: every value read is uniform and of a written size."""
    _, _, s = cluster
    sizes = [256 << 10, 256 << 10, 1 << 20, 64 << 10]
    src = MBuf(1 << 20)
    try:
        assert s.upsert_from("torn", src.addr, sizes[0]) == 0
        stop = threading.Event()
        bad, seen = [], [0]

        def reader(t):
            buf = MBuf((1 << 20) + 4096)
            try:
                cut = 1000 + 777 * t
                ptrs = [buf.addr, buf.addr + cut, buf.addr + cut + 100_000]
                room = [cut, 100_000, buf.size - cut - 100_000]
                while not stop.is_set():
                    r = s.batch_get_into_multi_buffers(["torn"], [ptrs], [room])[0]
                    if r > 0:
                        seen[0] += 1
                        v = buf.get(0, r)
                        if r not in sizes or v.count(v[0]) != r:
                            bad.append(r)
            finally:
                buf.close()

        ts = [threading.Thread(target=reader, args=(t,)) for t in range(3)]
        for t in ts:
            t.start()
        try:
            for i in range(120):
                n = sizes[i % len(sizes)]
                src.put(0, bytes([i % 251]) * n)
                assert s.upsert_from("torn", src.addr, n) == 0
        finally:
            stop.set()
            for t in ts:
                t.join(30)
        assert bad == []
        assert seen[0] > 0
    finally:
        src.close()


def test_shim_exports_the_config_enums():
    """``from mooncake.store import SoftPinAction, ObjectDataType`` works through the shim."""
    import subprocess
    import sys

    from conftest import REPO

    shim = os.path.join(REPO, "python", "tidewire", "shim")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([shim, os.path.join(REPO, "python")]))
    code = ("from mooncake.store import SoftPinAction, ObjectDataType, ReplicateConfig as R\n"
            "from mooncake.store import MooncakeDistributedStore as M\n"
            "assert SoftPinAction.ENABLE == 1 and ObjectDataType.KVCACHE == 1\n"
            "assert R().soft_pin_action == SoftPinAction.PRESERVE\n"
            "assert M.batch_put_from_multi_buffers and M.batch_get_into_multi_buffers\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
