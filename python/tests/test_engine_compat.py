"""tidewire.engine.TransferEngine: Mooncake's Python methods and return conventions, over real
loopback TCP between two engines in this process."""

import inspect
import json
import time

import pytest

import tidewire.engine as twe
from conftest import new_te, pattern
from tidewire.engine import TransferEngine, TransferNotify, TransferOpcode

MiB = 1 << 20


# ------------------------------------------------------------------------------------------
# module surface
# ------------------------------------------------------------------------------------------
def test_module_attributes():
    assert int(TransferOpcode.Read) == 0 and int(TransferOpcode.Write) == 1
    assert twe.Read is TransferOpcode.Read and twe.Write is TransferOpcode.Write
    assert TransferEngine.TransferOpcode is TransferOpcode
    assert twe.SUPPORT_CUDA is False and twe.SUPPORT_EFA is False
    n = TransferNotify("a", "b")
    assert (n.name, n.msg) == ("a", "b")
    n.name, n.msg = "c", "d"
    assert n == TransferNotify("c", "d")
    assert (TransferNotify().name, TransferNotify().msg) == ("", "")


# Positional names and defaults of mooncake.engine.TransferEngine (from its docstrings).
MOONCAKE_SIGNATURES = {
    "initialize": "local_hostname metadata_server protocol device_name",
    "initialize_ext": "local_hostname metadata_server protocol device_name metadata_type",
    "get_rpc_port": "",
    "allocate_managed_buffer": "length",
    "free_managed_buffer": "buffer_addr length",
    "transfer_sync_write": "target_hostname buffer peer_buffer_address length transport_hint=''",
    "transfer_sync_read": "target_hostname buffer peer_buffer_address length transport_hint=''",
    "transfer_sync": "target_hostname buffer peer_buffer_address length opcode notify=None "
                     "transport_hint=''",
    "batch_transfer_sync_write": "target_hostname buffers peer_buffer_addresses lengths "
                                 "transport_hint=''",
    "batch_transfer_sync_read": "target_hostname buffers peer_buffer_addresses lengths "
                                "transport_hint=''",
    "batch_transfer_sync": "target_hostname buffers peer_buffer_addresses lengths opcode "
                           "notify=None transport_hint=''",
    "batch_transfer_async_write": "target_hostname buffers peer_buffer_addresses lengths "
                                  "transport_hint=''",
    "batch_transfer_async_read": "target_hostname buffers peer_buffer_addresses lengths "
                                 "transport_hint=''",
    "batch_transfer_async": "target_hostname buffers peer_buffer_addresses lengths opcode "
                            "transport_hint=''",
    "get_batch_transfer_status": "batch_ids",
    "transfer_submit_write": "target_hostname buffer peer_buffer_address length "
                             "transport_hint=''",
    "transfer_check_status": "batch_id",
    "register_memory": "buffer_addr capacity location='*'",
    "unregister_memory": "buffer_addr",
    "batch_register_memory": "buffer_addresses capacities location='*'",
    "batch_unregister_memory": "buffer_addresses",
    "get_first_buffer_address": "segment_name",
    "write_bytes_to_buffer": "dest_address src_ptr length",
    "read_bytes_from_buffer": "source_address length",
    "get_notifies": "",
    "send_probe": "peer_server_name",
    "get_local_topology": "device_name=None",
    "warmup_efa_segment": "segment_name",
    "get_engine": "",
    "get_engine_ptr": "",
}


@pytest.mark.parametrize("name", sorted(MOONCAKE_SIGNATURES))
def test_method_signatures_match_mooncake(name):
    sig = inspect.signature(getattr(TransferEngine, name))
    got = []
    for p in list(sig.parameters.values())[1:]:
        got.append(p.name if p.default is inspect.Parameter.empty
                   else f"{p.name}={p.default!r}")
    assert " ".join(got) == MOONCAKE_SIGNATURES[name]


# ------------------------------------------------------------------------------------------
# initialize
# ------------------------------------------------------------------------------------------
def test_p2p_segment_name_is_host_and_rpc_port():
    te = TransferEngine()
    try:
        assert te.get_rpc_port() == -1 and te.get_engine_ptr() == 0
        assert te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "") == 0
        port = te.get_rpc_port()
        assert 0 < port < 65536
        assert te.get_segment_name() == f"127.0.0.1:{port}"
        assert te.get_engine_ptr() != 0
    finally:
        te.close()


def test_port_in_local_hostname_is_ignored_in_p2p_mode():
    te = TransferEngine()
    try:
        assert te.initialize("127.0.0.1:9999", "P2PHANDSHAKE", "tcp", "") == 0
        assert te.get_segment_name() == f"127.0.0.1:{te.get_rpc_port()}"
    finally:
        te.close()


def test_rdma_protocol_runs_over_tcp(te_pair):
    a, b = te_pair
    te = TransferEngine()
    try:
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "rdma", "mlx5_0") == 0
        src = te.allocate_managed_buffer(4096)
        dst = b.allocate_managed_buffer(4096)
        te.write_bytes_to_buffer(src, b"over tcp", 8)
        assert te.transfer_sync_write(b.get_segment_name(), src, dst, 8) == 0
        assert b.read_bytes_from_buffer(dst, 8) == b"over tcp"
    finally:
        te.close()


@pytest.mark.parametrize("metadata", ["redis://127.0.0.1:6379", "consul://127.0.0.1:1",
                                      "https://127.0.0.1:1/metadata"])
def test_unsupported_metadata_returns_minus_one(metadata):
    te = TransferEngine()
    assert te.initialize("127.0.0.1", metadata, "tcp", "") == -1
    assert te.get_rpc_port() == -1


def test_initialize_ext_builds_the_connection_string():
    te = TransferEngine()
    try:
        # etcd on port 1 (nothing listens there): unreachable, so -1
        assert te.initialize_ext("127.0.0.1", "127.0.0.1:1", "tcp", "", "etcd") == -1
        assert te.initialize_ext("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "", "http") == 0
        assert te.get_rpc_port() > 0
    finally:
        te.close()


def test_xgmi_is_rejected_and_bad_types_raise():
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "xgmi", "") == -1
    with pytest.raises(TypeError):
        te.initialize(None, "P2PHANDSHAKE", "tcp", "")


def test_reinitialize_replaces_the_engine():
    te = new_te()
    try:
        first = te.get_segment_name()
        assert te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "") == 0
        assert te.get_segment_name() != first
    finally:
        te.close()


def test_uninitialized_engine_fails_cleanly():
    te = TransferEngine()
    assert te.register_memory(4096, 4096) == -1
    assert te.transfer_sync_read("127.0.0.1:1", 4096, 4096, 8) == -1
    assert te.batch_transfer_async_write("127.0.0.1:1", [4096], [4096], [8]) == 0
    assert te.transfer_check_status(12345) == -1
    assert te.get_batch_transfer_status([12345]) == -1
    assert te.get_notifies() == []
    assert te.allocate_managed_buffer(4096) == 0
    assert te.send_probe("127.0.0.1:1") < 0


def test_transfer_timeout_env(monkeypatch):
    from tidewire.mooncake_engine import conventions

    monkeypatch.delenv("MC_TRANSFER_TIMEOUT", raising=False)
    assert conventions._transfer_timeout_s() == 30
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "2")
    assert conventions._transfer_timeout_s() == 2
    # The engine's floor for MC_TRANSFER_TIMEOUT (engine/config: at least 1 s).
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "0")
    assert conventions._transfer_timeout_s() == 1
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "45")
    assert conventions._transfer_timeout_s() == 45
    assert TransferEngine()._timeout_ns == 45 * 10**9
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "soon")
    assert conventions._transfer_timeout_s() == 30


# ------------------------------------------------------------------------------------------
# transfers
# ------------------------------------------------------------------------------------------
def test_sync_write_then_read_round_trip(te_pair, mbuf):
    a, b = te_pair
    la, rb = mbuf(2 * MiB), mbuf(2 * MiB)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    data = pattern(MiB + 4099, seed=3)
    la.put(0, data)
    assert a.transfer_sync_write(tgt, la.addr, rb.addr + 5, len(data)) == 0
    assert rb.get(5, len(data)) == data
    assert rb.get(0, 5) == bytes(5)
    assert a.transfer_sync_read(tgt, la.addr + MiB + 8192, rb.addr + 5, 4096) == 0
    assert la.get(MiB + 8192, 4096) == data[:4096]
    # transfer_sync with an enum or a plain int opcode.
    la.put(0, b"opcode!")
    assert a.transfer_sync(tgt, la.addr, rb.addr, 7, TransferOpcode.Write) == 0
    assert rb.get(0, 7) == b"opcode!"
    assert a.transfer_sync(tgt, la.addr + 100, rb.addr, 7, 0) == 0
    assert la.get(100, 7) == b"opcode!"
    assert a.transfer_sync(tgt, la.addr, rb.addr, 7, 5) == -1


def test_batch_sync_many_entries(te_pair, mbuf):
    a, b = te_pair
    la, rb = mbuf(MiB), mbuf(MiB)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    src = pattern(256 * 100, seed=9)
    rb.put(0, src)
    n = 100
    # READ: contiguous remote fragments into strided local slots.
    assert a.batch_transfer_sync_read(tgt, [la.addr + i * 512 for i in range(n)],
                                      [rb.addr + i * 256 for i in range(n)], [256] * n) == 0
    for i in range(n):
        assert la.get(i * 512, 256) == src[i * 256:(i + 1) * 256]
        assert la.get(i * 512 + 256, 256) == bytes(256)
    # WRITE back to another area with batch_transfer_sync (opcode form).
    assert a.batch_transfer_sync(tgt, [la.addr + i * 512 for i in range(n)],
                                 [rb.addr + 512 * 1024 + i * 256 for i in range(n)], [256] * n,
                                 TransferOpcode.Write) == 0
    assert rb.get(512 * 1024, 256 * n) == src
    assert a.batch_transfer_sync_write(tgt, [], [], []) == 0


def test_batch_sync_length_mismatch_and_bad_elements(te_pair, mbuf):
    a, b = te_pair
    la, rb = mbuf(65536), mbuf(65536)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    assert a.batch_transfer_sync_read(tgt, [la.addr, la.addr + 8], [rb.addr], [8, 8]) == -1
    assert a.batch_transfer_sync_read(tgt, [la.addr], [rb.addr], []) == -1
    assert a.batch_transfer_sync_read(tgt, [la.addr], [rb.addr], [-8]) == -1
    assert a.batch_transfer_sync_read(tgt, [None], [rb.addr], [8]) == -1
    assert a.batch_transfer_async_read(tgt, [la.addr], [rb.addr, rb.addr], [8]) == 0


def test_single_request_batches_take_either_path_alike(te_pair, mbuf):
    """A batch of one request in plain ints goes the single-request way, anything else through
    the packed array; both move the bytes and refuse the same bad input."""
    a, b = te_pair
    la, rb = mbuf(65536), mbuf(65536)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    src = pattern(4096, seed=3)
    rb.put(0, src)

    class Addr:  # an int-like that is not an int (as numpy integers are)
        def __init__(self, v):
            self.v = v

        def __index__(self):
            return self.v

    assert a.batch_transfer_sync_read(tgt, [la.addr], [rb.addr], [4096]) == 0
    assert la.get(0, 4096) == src
    assert a.batch_transfer_sync_read(tgt, [Addr(la.addr + 4096)], [rb.addr], [4096]) == 0
    assert la.get(4096, 4096) == src
    la.put(0, b"one request")
    assert a.batch_transfer_sync_write(tgt, [la.addr], [rb.addr + 8192], [11]) == 0
    assert rb.get(8192, 11) == b"one request"
    for local, remote, length in ((la.addr, rb.addr + rb.size, 8), (la.addr, 1 << 64, 8),
                                  (la.addr, rb.addr, 1 << 64), (la.addr, rb.addr, -1),
                                  (-1, rb.addr, 8), (Addr(la.addr), rb.addr + rb.size, 8),
                                  (la.addr, rb.addr, 8.0)):
        assert a.batch_transfer_sync_write(tgt, [local], [remote], [length]) == -1, (
            local, remote, length)
    assert a.batch_transfer_sync_read("127.0.0.1:1", [la.addr], [rb.addr], [8]) == -1


def test_local_segment_by_own_name(te_pair, mbuf):
    a, _ = te_pair
    la = mbuf(65536)
    assert a.register_memory(la.addr, la.size) == 0
    la.put(0, b"self copy")
    assert a.transfer_sync_write(a.get_segment_name(), la.addr, la.addr + 4096, 9) == 0
    assert la.get(4096, 9) == b"self copy"


def test_failures_return_minus_one(te_pair, mbuf):
    a, b = te_pair
    la, rb, unreg = mbuf(65536), mbuf(65536), mbuf(65536)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    # Out of the peer's registered range (just past the end, and far away).
    assert a.transfer_sync_read(tgt, la.addr, rb.addr + rb.size - 4, 8) == -1
    assert a.transfer_sync_write(tgt, la.addr, rb.addr + rb.size, 8) == -1
    assert a.transfer_sync_read(tgt, la.addr, 4096, 8) == -1
    # Unregistered local memory.
    assert a.transfer_sync_read(tgt, unreg.addr, rb.addr, 8) == -1
    assert a.transfer_sync_write(tgt, 0, rb.addr, 8) == -1
    assert a.transfer_sync_write(tgt, None, rb.addr, 8) == -1
    # Unknown or malformed segments.
    assert a.transfer_sync_read("127.0.0.1:1", la.addr, rb.addr, 8) == -1
    assert a.transfer_sync_read("", la.addr, rb.addr, 8) == -1
    assert a.transfer_sync_read("no-port-here", la.addr, rb.addr, 8) == -1
    assert a.batch_transfer_sync_read("127.0.0.1:1", [la.addr], [rb.addr], [8]) == -1
    assert a.transfer_submit_write("127.0.0.1:1", la.addr, rb.addr, 8) == 0
    with pytest.raises(TypeError):
        a.transfer_sync_read(None, la.addr, rb.addr, 8)
    # The engine still works afterwards.
    la.put(0, b"still ok")
    assert a.transfer_sync_write(tgt, la.addr, rb.addr, 8) == 0
    assert rb.get(0, 8) == b"still ok"


def test_zero_length_transfer_completes(te_pair, mbuf):
    a, b = te_pair
    la, rb = mbuf(4096), mbuf(4096)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    assert a.transfer_sync_read(b.get_segment_name(), la.addr, rb.addr, 0) == 0


# ------------------------------------------------------------------------------------------
# async + status
# ------------------------------------------------------------------------------------------
def test_async_batches_and_blocking_status(te_pair, mbuf):
    a, b = te_pair
    la, rb = mbuf(MiB), mbuf(MiB)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    data = pattern(8192, seed=1)
    la.put(0, data)
    ids = [a.batch_transfer_async_write(tgt, [la.addr + i * 1024], [rb.addr + i * 1024], [1024])
           for i in range(8)]
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert len(set(ids)) == 8
    assert a.get_batch_transfer_status(ids) == 0
    assert rb.get(0, 8192) == data
    # Freed by the status call: the ids are stale now.
    assert a.get_batch_transfer_status(ids[:1]) == -1
    assert a.transfer_check_status(ids[0]) == -1
    bid = a.batch_transfer_async(tgt, [la.addr + 65536], [rb.addr], [4096], TransferOpcode.Read)
    assert bid > 0 and a.get_batch_transfer_status([bid]) == 0
    assert la.get(65536, 4096) == data[:4096]
    bid = a.batch_transfer_async_read(tgt, [la.addr + 131072], [rb.addr + 1024], [1024])
    assert bid > 0 and a.get_batch_transfer_status([bid]) == 0
    assert la.get(131072, 1024) == data[1024:2048]


def test_async_failure_reports_minus_one_and_frees_the_rest(te_pair, mbuf):
    a, b = te_pair
    la, rb = mbuf(65536), mbuf(65536)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    bad = a.batch_transfer_async_read(tgt, [la.addr], [rb.addr + rb.size], [64])
    good = a.batch_transfer_async_read(tgt, [la.addr + 64], [rb.addr], [64])
    assert bad > 0 and good > 0
    assert a.get_batch_transfer_status([bad, good]) == -1
    # Both were freed (the good one after the failure).
    deadline = time.monotonic() + 5
    while a._orphans and time.monotonic() < deadline:
        a._reap()
        time.sleep(0.01)
    assert a.transfer_check_status(good) == -1
    assert a.transfer_check_status(bad) == -1


def test_submit_write_and_check_status(te_pair, mbuf):
    a, b = te_pair
    la, rb = mbuf(MiB), mbuf(MiB)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    data = pattern(MiB, seed=5)
    la.put(0, data)
    bid = a.transfer_submit_write(tgt, la.addr, rb.addr, MiB)
    assert bid > 0
    seen = set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        r = a.transfer_check_status(bid)
        seen.add(r)
        if r != 0:
            break
        time.sleep(0.0005)
    assert r == 1, seen
    assert rb.get(0, MiB) == data
    assert a.transfer_check_status(bid) == -1  # freed on the terminal answer
    bad = a.transfer_submit_write(tgt, la.addr, rb.addr + MiB, 16)
    assert bad > 0
    deadline = time.monotonic() + 10
    while (r := a.transfer_check_status(bad)) == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert r == -1
    assert a.transfer_check_status(bad) == -1
    assert a.transfer_check_status(0) == -1
    assert a.transfer_check_status(0xDEAD_BEEF_0000_0001) == -1


# ------------------------------------------------------------------------------------------
# memory registration
# ------------------------------------------------------------------------------------------
def test_register_error_codes(te_pair, mbuf):
    a, _ = te_pair
    m = mbuf(65536)
    assert a.register_memory(m.addr, 0) == -1
    assert a.register_memory(0, 4096) == -1
    assert a.register_memory(m.addr, 32768) == 0
    assert a.register_memory(m.addr + 4096, 32768) == -7
    assert a.register_memory(m.addr + 16384, 4096) == -7
    assert a.register_memory(m.addr, 32768) == 0  # the exact range again is counted
    assert a.unregister_memory(m.addr) == 0
    assert a.unregister_memory(m.addr) == 0
    assert a.unregister_memory(m.addr) == -3
    assert a.unregister_memory(m.addr + 8) == -3
    assert a.register_memory(m.addr, 65536, "cpu:0") == 0
    assert a.unregister_memory(m.addr) == 0
    with pytest.raises(TypeError):
        a.register_memory(m.addr, 4096, None)


def test_batch_register(te_pair, mbuf):
    a, _ = te_pair
    m = mbuf(65536)
    addrs = [m.addr, m.addr + 16384, m.addr + 32768]
    assert a.batch_register_memory(addrs, [4096] * 3) == 0
    assert a.register_memory(m.addr + 1024, 8) == -7
    assert a.batch_unregister_memory(addrs) == 0
    assert a.batch_unregister_memory(addrs) == -3
    assert a.batch_register_memory(addrs, [4096] * 2) == -1
    assert a.batch_register_memory([m.addr, m.addr + 100], [4096, 4096]) == -7
    assert a.batch_register_memory([m.addr], [0]) == -1
    # All or none: nothing of the failed batches stayed registered.
    assert a.register_memory(m.addr, 65536) == 0
    assert a.unregister_memory(m.addr) == 0
    assert a.batch_register_memory([], []) == 0
    assert a.batch_unregister_memory([]) == 0


def test_managed_buffers_and_bytes_helpers(te_pair):
    a, b = te_pair
    src = a.allocate_managed_buffer(3 * 4096 + 5)
    dst = b.allocate_managed_buffer(MiB)
    assert src and dst and src % 4096 == 0
    assert a.allocate_managed_buffer(0) == 0
    assert a.register_memory(src, 16) == -7  # already registered by the allocation
    assert a.write_bytes_to_buffer(src, b"managed bytes", 13) == 0
    assert a.write_bytes_to_buffer(src + 13, "+str", 4) == 0
    assert a.write_bytes_to_buffer(src, b"short", 99) == -1
    assert a.read_bytes_from_buffer(src, 17) == b"managed bytes+str"
    assert a.read_bytes_from_buffer(src, 0) == b""
    assert a.transfer_sync_write(b.get_segment_name(), src, dst + 100, 17) == 0
    assert b.read_bytes_from_buffer(dst + 100, 17) == b"managed bytes+str"
    assert a.free_managed_buffer(src, 3 * 4096 + 5) == 0
    assert a.free_managed_buffer(src, 3 * 4096 + 5) == -1
    assert a.unregister_memory(src) == -3


# ------------------------------------------------------------------------------------------
# segments, notifications, misc
# ------------------------------------------------------------------------------------------
def test_first_buffer_address_and_probe(te_pair, mbuf):
    a, b = te_pair
    rb = mbuf(8192)
    tgt = b.get_segment_name()
    assert a.send_probe(tgt) == 0
    assert a.send_probe("127.0.0.1:1") == -102
    assert a.get_first_buffer_address("127.0.0.1:1") == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    assert a.get_first_buffer_address(tgt) == rb.addr
    assert a.warmup_efa_segment(tgt) == 0


def test_first_buffer_address_refreshes_a_stale_cache(te_pair, mbuf):
    a, b = te_pair
    rb = mbuf(8192)
    tgt = b.get_segment_name()
    assert a.get_first_buffer_address(tgt) == 0  # opened while b has no buffer
    assert b.register_memory(rb.addr, rb.size) == 0
    assert a.get_first_buffer_address(tgt) == rb.addr


def test_notifications(te_pair, mbuf):
    a, b = te_pair
    la, rb = mbuf(65536), mbuf(65536)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    assert b.get_notifies() == []
    la.put(0, b"payload")
    assert a.transfer_sync(tgt, la.addr, rb.addr, 7, TransferOpcode.Write,
                           TransferNotify("kv-ready", "layer=3")) == 0
    assert rb.get(0, 7) == b"payload"  # the data is there when the notify is
    got = b.get_notifies()
    assert [(n.name, n.msg) for n in got] == [("kv-ready", "layer=3")]
    assert all(isinstance(n, TransferNotify) for n in got)
    assert b.get_notifies() == []
    assert a.batch_transfer_sync(tgt, [la.addr, la.addr + 8], [rb.addr + 64, rb.addr + 72],
                                 [8, 8], TransferOpcode.Write,
                                 TransferNotify("batch", "ünïcode ✓")) == 0
    assert [(n.name, n.msg) for n in b.get_notifies()] == [("batch", "ünïcode ✓")]
    # A failed transfer never sends its notify; an empty batch with a notify is refused.
    assert a.transfer_sync(tgt, la.addr, rb.addr + rb.size, 8, TransferOpcode.Write,
                           TransferNotify("never", "sent")) == -1
    assert a.batch_transfer_sync(tgt, [], [], [], TransferOpcode.Write,
                                 TransferNotify("x", "y")) == -1
    time.sleep(0.05)
    assert b.get_notifies() == []


def test_local_topology_is_mooncake_json():
    te = TransferEngine()
    topo = json.loads(te.get_local_topology())
    assert "cpu:0" in topo
    assert all(v == [[], []] for v in topo.values())
    assert te.get_local_topology("mlx5_0") == te.get_local_topology()


def test_segment_ids_are_cached_per_name(te_pair, mbuf):
    a, b = te_pair
    la, rb = mbuf(4096), mbuf(4096)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    assert a.transfer_sync_read(tgt, la.addr, rb.addr, 8) == 0
    assert a._segs == {tgt: 1}
    assert a.transfer_sync_read(tgt, la.addr, rb.addr, 8) == 0
    assert a._segs == {tgt: 1}


def test_concurrent_sync_calls_from_threads(te_pair, mbuf):
    import threading
    a, b = te_pair
    la, rb = mbuf(MiB), mbuf(MiB)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    errors = []

    def worker(k):
        base = k * 65536
        for i in range(40):
            data = pattern(1024, seed=k * 100 + i)
            la.put(base, data)
            if a.transfer_sync_write(tgt, la.addr + base, rb.addr + base, 1024) != 0:
                errors.append((k, i, "write"))
                return
            if a.batch_transfer_sync_read(tgt, [la.addr + base + 4096], [rb.addr + base],
                                          [1024]) != 0 or la.get(base + 4096, 1024) != data:
                errors.append((k, i, "read"))
                return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)


def test_mooncake_codes_come_from_the_library_table():
    """The Python package reports the same Mooncake error.h numbers as the Mooncake C API
    (one table, in the library): a timeout is a socket error (-102), a rejected range an
    unregistered address (-3)."""
    from tidewire import _ffi
    from tidewire.engine import mooncake_code

    assert mooncake_code(0) == 0
    assert mooncake_code(_ffi.TW_ERR_TIMEOUT) == -102
    assert mooncake_code(_ffi.TW_ERR_SOCKET) == -102
    assert mooncake_code(_ffi.TW_ERR_REJECTED) == -3
    assert mooncake_code(_ffi.TW_ERR_UNKNOWN_SEGMENT) == -200
    assert mooncake_code(_ffi.TW_ERR_BUSY) == -4
    assert mooncake_code(_ffi.TW_ERR_UNSUPPORTED) == -303
    assert mooncake_code(_ffi.TW_ERR_INTERNAL) == -202
    assert mooncake_code(-9999) == -1 and mooncake_code(12) == -1
