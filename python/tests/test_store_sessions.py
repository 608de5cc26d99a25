"""Mooncake's get sessions (``batch_get_session_start`` / ``batch_get_into_multi_buffer_ranges``
/ ``batch_get_session_end``, SGLang's layer-wise direct linker), replica descriptors
(``batch_get_replica_desc``, vLLM's tier log), ``setup``'s keyword and dict forms (SGLang,
LMCache), buffer handles used as buffers (LMCache), ``MooncakeHostMemAllocator`` and
Mooncake's edge cases, against a real tidewire-master with the only segment in another process
(every byte crosses processes)."""

import ctypes
import os
import random

import pytest

from conftest import MBuf
from store_util import Master, Peer, connect
from tidewire.store import (
    MooncakeDistributedStore,
    MooncakeHostMemAllocator,
    ReplicaDescriptor,
    ReplicateConfig,
    bind_to_numa_node,
)

# Fails, not skips, without the master binary (see conftest.store_master_built).
pytestmark = pytest.mark.usefixtures("store_master_built")

LAYERS = 4


@pytest.fixture(scope="module")
def cluster():
    """A master, a server process holding the only segment, and a client here without one."""
    m = Master("--default_kv_lease_ttl=200")
    peer = Peer(m, "server", 128 << 20)
    s = connect(m)
    yield m, peer, s
    s.close()
    peer.close()
    m.stop()


def put_values(s, buf, keys, rnd, lo=64 << 10, hi=256 << 10):
    """Writes random values of ``lo``-``hi`` bytes through ``buf``; the values."""
    vals = [rnd.randbytes(rnd.randrange(lo, hi) // LAYERS * LAYERS) for _ in keys]
    at, ptrs = 0, []
    for v in vals:
        buf.put(at, v)
        ptrs.append(buf.addr + at)
        at += len(v)
    assert s.batch_upsert_from(keys, ptrs, [len(v) for v in vals]) == [0] * len(keys)
    return vals


def test_session_reads_each_layer_of_every_key(cluster):
    _, _, s = cluster
    rnd = random.Random(5)
    keys = [f"sess/{i}" for i in range(32)]
    src, dst = MBuf(32 << 20), MBuf(32 << 20)
    try:
        vals = put_values(s, src, keys, rnd)
        assert s.batch_get_session_start(keys + ["sess/missing", ""]) == [0] * 32 + [-704, -600]
        # A layer-wise load: each layer's slice of every key lands in its own place.
        slots = [i * (256 << 10) for i in range(32)]
        for layer in range(LAYERS):
            ptrs, sizes, offs = [], [], []
            for v, slot in zip(vals, slots):
                part = len(v) // LAYERS
                # Two fragments per key per layer, the second of them empty.
                ptrs.append([dst.addr + slot + layer * part, dst.addr + slot])
                sizes.append([part, 0])
                offs.append([layer * part, 0])
            got = s.batch_get_into_multi_buffer_ranges(keys, ptrs, sizes, offs)
            assert got == [sum(z) for z in sizes]
        for v, slot in zip(vals, slots):
            assert dst.get(slot, len(v)) == v
        # Bad fragments fail their own key only.
        v0 = len(vals[0])
        got = s.batch_get_into_multi_buffer_ranges(
            keys[:4], [[dst.addr], [dst.addr], [dst.addr, dst.addr + 8], [0]],
            [[v0 + 1], [16], [8, 8], [16]], [[0], [len(vals[1]) - 8], [0, 8], [0]])
        assert got == [-600, -600, 16, -600]
        assert s.batch_get_into_multi_buffer_ranges(keys[:2], [[dst.addr]], [[1]], [[0]]) \
            == [-600, -600]  # outer lists of different lengths
        assert s.batch_get_into_multi_buffer_ranges(["sess/missing"], [[dst.addr]], [[1]],
                                                    [[0]]) == [-600]  # no session
        assert s.batch_get_session_end(keys) == 0
        assert s.batch_get_into_multi_buffer_ranges(keys[:1], [[dst.addr]], [[8]], [[0]]) \
            == [-600]  # ended
        assert s.batch_get_session_end(keys) == 0  # twice is fine
        assert s.batch_get_session_end([]) == 0
    finally:
        src.close()
        dst.close()


def test_session_keeps_the_bytes_it_looked_up(cluster):
    """An upsert during a session does not change what the session reads; a new session reads
    the new bytes; ending the session lets the old version go."""
    _, _, s = cluster
    rnd = random.Random(6)
    src, dst = MBuf(4 << 20), MBuf(4 << 20)
    try:
        old = put_values(s, src, ["sess/keep"], rnd, 1 << 20, (1 << 20) + 1)[0]
        assert s.batch_get_session_start(["sess/keep"]) == [0]
        new = put_values(s, src, ["sess/keep"], rnd, 1 << 20, (1 << 20) + 1)[0]
        assert new != old
        n = len(old)
        assert s.batch_get_into_multi_buffer_ranges(
            ["sess/keep"], [[dst.addr]], [[n]], [[0]]) == [n]
        assert dst.get(0, n) == old
        assert s.batch_get_session_start(["sess/keep"]) == [0]  # restart: the new version
        assert s.batch_get_into_multi_buffer_ranges(
            ["sess/keep"], [[dst.addr]], [[len(new)]], [[0]]) == [len(new)]
        assert dst.get(0, len(new)) == new
        assert s.batch_get_session_end(["sess/keep"]) == 0
        assert s.remove("sess/keep") in (0, -706)
    finally:
        src.close()
        dst.close()


def test_replica_descriptors(cluster):
    _, peer, s = cluster
    assert s.put("desc/a", b"x" * 5000) == 0
    d = s.batch_get_replica_desc(["desc/a", "desc/missing"])
    assert list(d) == ["desc/a"]
    (r,) = d["desc/a"]
    assert isinstance(r, ReplicaDescriptor)
    assert r.is_memory_replica() and not r.is_disk_replica() and not r.is_local_disk_replica()
    bd = r.get_memory_descriptor().buffer_descriptor
    assert bd.size == 5000
    assert bd.transport_endpoint == peer.ready["hostname"]
    assert bd.buffer_address != 0
    assert s.get_replica_desc("desc/missing") == []
    assert len(s.get_replica_desc("desc/a")) == 1
    with pytest.raises(TypeError):
        s.get_replica_desc(5)
    # The descriptor query holds nothing: the key can be removed at once.
    assert s.remove("desc/a", force=True) == 0


def test_setup_forms(cluster):
    m, peer, _ = cluster
    # The value goes to the peer's segment: this client's own goes away with its close().
    on_peer = ReplicateConfig()
    on_peer.preferred_segment = peer.ready["hostname"]
    # LMCache's dict: string values, its own spelling of the master address.
    s = MooncakeDistributedStore()
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                    "global_segment_size": "8mb", "local_buffer_size": "4 MiB",
                    "protocol": "tcp", "device_name": "", "master_server_address": m.address,
                    "tenant_id": "default", "unknown_key": "ignored"}) == 0
    assert s.put("setup/a", b"dict", on_peer) == 0 and s.get("setup/a") == b"dict"
    s.close()
    # Mooncake's keywords, as SGLang passes them.
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", m.address, None,
                   enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
                   enable_client_http_server=False, client_http_port=9300) == 0
    assert s.get("setup/a") == b"dict"
    s.close()
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "",
                                         m.address, bogus=1)
    with pytest.raises(TypeError, match="missing required"):
        MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE")
    with pytest.raises(TypeError, match="multiple values"):
        MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "",
                                         m.address, protocol="tcp")
    bad = MooncakeDistributedStore()
    assert bad.setup({"global_segment_size": "lots", "master_server_addr": m.address}) == -600
    assert "global_segment_size" in bad.last_error
    assert MooncakeDistributedStore().setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "",
                                            m.address, object()) == -600  # a shared engine


def test_buffer_handles_are_buffers(cluster):
    _, _, s = cluster
    value = bytes(range(256)) * 40
    assert s.upsert("buf/a", value) == 0
    assert s.upsert("buf/empty", b"") in (0, -600)
    (h, miss) = s.batch_get_buffer(["buf/a", "buf/missing"])
    assert miss is None
    assert len(h) == h.size() == len(value)
    mv = memoryview(h)
    assert mv.nbytes == len(value) and not mv.readonly
    assert bytes(mv[:28]) == value[:28]  # LMCache's header slice
    assert mv.cast("B")[300] == value[300]
    assert bytes(h) == value and h.tobytes() == value
    assert ctypes.string_at(h.ptr(), 16) == value[:16]
    del h
    mv.release()  # the memory goes back only now


def test_host_mem_allocator_memory_works_with_the_store(cluster):
    _, _, s = cluster
    a = MooncakeHostMemAllocator()
    p = a.alloc(1 << 20)
    assert p != 0 and p % 4096 == 0
    assert s.register_buffer(p, 1 << 20) == 0
    ctypes.memmove(p, b"hostmem" * 100, 700)
    assert s.upsert_from("alloc/a", p, 700) == 0
    ctypes.memset(p, 0, 700)
    assert s.get_into("alloc/a", p + 4096, 700) == 700
    assert ctypes.string_at(p + 4096, 700) == b"hostmem" * 100
    assert s.unregister_buffer(p) == 0
    assert a.free(p) == 0
    assert a.free(p) == -1 and a.free(12345) == -1
    assert a.alloc(0) == 0 and a.alloc(-1) == 0


def test_mooncake_edge_cases(cluster):
    _, _, s = cluster
    assert s.get_size("") == -704
    assert s.is_exist("") == 0 and s.batch_is_exist(["", "edge/none"]) == [0, 0]
    assert s.remove("") == -704 and s.batch_remove([""]) == [-704]
    cfg = ReplicateConfig()
    cfg.replica_num = 0
    assert s.put("edge/r0", b"x", cfg) == -600
    assert s.is_exist("edge/r0") == 0
    assert s.put("edge/v", b"0123456789") == 0
    buf = MBuf(4096)
    try:
        got = s.get_into_ranges([buf.addr], [["edge/v", "edge/v"]], [[[0, 10], [20]]],
                                [[[0, 5], [7]]], [[[0, 4], [2]]])
        assert got == [[[0, 4], [2]]]
        assert buf.get(10, 4) == b"5678" and buf.get(20, 2) == b"78"
    finally:
        buf.close()


def test_bind_to_numa_node():
    before = os.sched_getaffinity(0)
    try:
        assert bind_to_numa_node(0) is None
        assert os.sched_getaffinity(0)
        with pytest.raises(ValueError):
            bind_to_numa_node(4096)
    finally:
        os.sched_setaffinity(0, before)
