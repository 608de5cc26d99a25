"""The pieces of the pythonic API that tidewire.engine.TransferEngine is built on
(RequestArray, Batch.poll/discard, Engine.reap, register_many, ...), and the layering itself:
only tidewire._ffi, the modules of tidewire.core and tidewire.mooncake_store.native call the
library."""

import ast
import os
import sys

import pytest

import tidewire as tw
from conftest import PYDIR, pattern

MiB = 1 << 20


@pytest.fixture
def linked(pair):
    a, b = pair
    la, rb = bytearray(MiB), bytearray(pattern(MiB, seed=4))
    ra, rr = a.register(la), b.register(rb)
    seg = a.open_segment(b.name)
    yield a, b, la, rb, ra, rr, seg
    ra.close()
    rr.close()


def test_request_array_packs_like_requests(linked):
    a, b, la, rb, ra, rr, seg = linked
    n = 300
    reqs = tw.RequestArray(tw.READ, seg, [ra.addr + i * 64 for i in range(n)],
                           [rr.addr + i * 128 for i in range(n)], [64] * n)
    assert len(reqs) == n and reqs.total_bytes == 64 * n
    c = reqs.array[7]
    assert (c.opcode, c.segment, c.local_addr, c.remote_addr, c.length) == (
        0, seg.id, ra.addr + 7 * 64, rr.addr + 7 * 128, 64)
    a.transfer(reqs, timeout=10)
    for i in range(n):
        assert la[i * 64:(i + 1) * 64] == rb[i * 128:i * 128 + 64]
    mixed = tw.RequestArray(tw.WRITE, seg.id, [ra.addr, ra.addr + 10], [rr.addr, rr.addr + 50],
                            [10, 3])
    assert mixed.total_bytes == 13
    with a.batch(2) as bt:
        bt.submit(mixed)
        bt.wait(10)
    assert rb[:10] == la[:10] and rb[50:53] == la[10:13]


def test_request_array_rejects_bad_elements():
    with pytest.raises(ValueError):
        tw.RequestArray(tw.READ, 1, [1, 2], [3], [4, 5])
    with pytest.raises(OverflowError):
        tw.RequestArray(tw.READ, 1, [4096], [4096], [-1])
    with pytest.raises(TypeError):
        tw.RequestArray(tw.READ, 1, [None], [4096], [8])
    assert len(tw.RequestArray(tw.READ, 1, [], [], [])) == 0


def test_negative_segment_in_a_request_array_is_refused_by_the_library(linked):
    a, b, la, rb, ra, rr, seg = linked
    with pytest.raises(tw.UnknownSegment):
        a.transfer(tw.RequestArray(tw.READ, -5, [ra.addr], [rr.addr], [8]), timeout=5)


def test_poll_and_discard(linked):
    a, b, la, rb, ra, rr, seg = linked
    bt = a.batch(1)
    bt.submit([(tw.READ, seg, ra.addr, rr.addr, 4096)])
    for _ in range(100000):
        if bt.poll():
            break
    else:
        pytest.fail("batch never completed")
    assert la[:4096] == rb[:4096]
    bt.discard()
    bt.discard()  # idempotent
    with pytest.raises(tw.InvalidId):
        bt.status(0)
    bad = a.batch(1)
    bad.submit([(tw.READ, seg, ra.addr, rr.addr + MiB, 8)])
    with pytest.raises(tw.Rejected):
        while not bad.poll():
            pass
    bad.discard()
    assert a.parked == [] and a.reap() == 0


def test_register_many_is_all_or_nothing(pair):
    a, _ = pair
    buf = bytearray(65536)
    base = tw.buffer_address(buf)[0]
    regs = a.register_many([(base, 4096), (base + 8192, 4096)])
    assert [(r.addr, r.length) for r in regs] == [(base, 4096), (base + 8192, 4096)]
    with pytest.raises(tw.AddressOverlapped):
        a.register_many([(base + 16384, 4096), (base + 100, 8)])
    a.register(base + 16384, 4096).close()  # the failed call left nothing registered
    for r in regs:
        r.close()
    with pytest.raises(tw.AddressNotRegistered):
        a.unregister(base)
    assert a.register_many([]) == []


def test_memory_location_and_refresh(linked):
    a, b, la, rb, ra, rr, seg = linked
    assert a.memory_location(ra.addr).startswith("cpu:")
    with pytest.raises(tw.AddressNotRegistered):
        a.memory_location(ra.addr + 2 * MiB)
    extra = bytearray(4096)
    with b.register(extra) as rx:
        seg.refresh()
        a.refresh_segment(seg.id)
        addrs = {int(x["addr"]) for x in seg.descriptor()["buffers"]}
        assert rx.addr in addrs


def test_gpu_and_stream_without_a_driver_are_unsupported(linked):
    a, b, la, rb, ra, rr, seg = linked
    try:
        n = tw.gpu_devices()
    except tw.Unsupported as e:
        assert "CUDA" in e.message
        with pytest.raises(tw.Unsupported):
            a.transfer_on_stream([(tw.READ, seg, ra.addr, rr.addr, 8)], 0)
    else:
        assert n > 0  # a real GPU host: the stream path is tested by test_cuda_methods


#: The modules that call the library's functions (``tidewire._ffi`` declares them).
CALLERS = {"_ffi.py", "core/values.py", "core/buffers.py", "core/owned.py", "core/scatter.py",
           "core/engine.py", "mooncake_store/native.py"}


def test_only_ffi_and_the_core_modules_call_the_library():
    """No other module of the package names a tw_* function or reaches for the library handle
    (_ffi.lib(), ._lib, CDLL): engine.py and host.py go through the pythonic classes, store.py
    and its helpers through tidewire.mooncake_store.native."""
    pkg = os.path.join(PYDIR, "tidewire")
    seen = set()
    for root, _dirs, files in os.walk(pkg):
        for mod in files:
            path = os.path.join(root, mod)
            if not mod.endswith(".py") or os.path.relpath(path, pkg) in CALLERS:
                continue
            seen.add(os.path.relpath(path, pkg))
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute):
                    assert not node.attr.startswith("tw_"), (mod, node.attr)
                    assert node.attr not in ("lib", "_lib", "_raw", "CDLL"), (mod, node.attr)
                if isinstance(node, ast.Name):
                    assert not node.id.startswith("tw_"), (mod, node.id)
    assert {"engine.py", "mooncake_engine/transfer_engine.py", "mooncake_engine/conventions.py",
            "store.py", "mooncake_store/client.py", "mooncake_store/values.py",
            "_call_guard.py"} <= seen
    assert all(os.path.isfile(os.path.join(pkg, c)) for c in CALLERS)


def test_engine_module_holds_no_ctypes_structures():
    import tidewire.engine as twe
    from tidewire import _ffi
    for name in dir(twe):
        obj = getattr(twe, name)
        assert obj not in (_ffi.TransferRequest, _ffi.TransferStatus, _ffi.Buffer,
                           _ffi.Notification), name
    assert "tidewire._ffi" in sys.modules


def test_https_metadata_is_refused():
    """The docs say http:// only: https:// fails to start an engine, with the reason."""
    with pytest.raises(tw.Unsupported) as ei:
        tw.Engine(metadata="https://127.0.0.1:1/metadata")
    assert "https" in ei.value.message and "http://" in ei.value.message
