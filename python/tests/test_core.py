"""The pythonic API (tidewire.Engine & co.) over real loopback TCP between two engines."""

import array
import ctypes
import gc
import mmap
import threading

import pytest

import tidewire as tw
from conftest import pattern

MiB = 1 << 20


@pytest.fixture
def linked(pair):
    """Two engines, a registered 1 MiB bytearray on each, and a's view of b's segment."""
    a, b = pair
    la, rb = bytearray(MiB), bytearray(pattern(MiB, seed=2))
    ra, rr = a.register(la), b.register(rb)
    seg = a.open_segment(b.name)
    yield a, b, la, rb, ra, rr, seg
    ra.close()
    rr.close()


# ------------------------------------------------------------------------------------------
# engine
# ------------------------------------------------------------------------------------------
def test_engine_lifecycle_and_config():
    with tw.Engine(local_server_name="127.0.0.1", tcp_lanes=3, io_timeout_ms=5000) as e:
        assert e.name == f"127.0.0.1:{e.rpc_port}"
        assert not e.closed
        assert "Engine" in repr(e)
        d = e.descriptor()
        assert d["name"] == e.name and d["protocol"] == "tcp"
    assert e.closed
    e.close()  # idempotent
    with pytest.raises(tw.Shutdown):
        e.register(bytearray(16))
    with pytest.raises(tw.Shutdown):
        e.open_segment("127.0.0.1:1")


def test_bad_config_raises():
    with pytest.raises(tw.InvalidArgument) as ei:
        tw.Engine(no_such_key=1)
    assert "no_such_key" in str(ei.value) and ei.value.code == -1
    with pytest.raises(tw.InvalidArgument):
        tw.Engine(tcp_lanes=0)
    with pytest.raises(tw.Unsupported):
        tw.Engine(metadata="redis://127.0.0.1:6379")
    assert set(tw.CONFIG_KEYS) >= {"metadata", "tcp_lanes", "local_server_name"}


def test_engine_del_is_safe():
    e = tw.Engine()
    reg = e.register(bytearray(4096))
    del e
    gc.collect()
    reg.close()  # the engine is gone: nothing to do, no crash


def test_exceptions():
    e = tw.TransferTimeout(-9, "slow")
    assert isinstance(e, tw.TidewireError) and isinstance(e, TimeoutError)
    assert e.code == -9 and e.message == "slow" and "TW_ERR_TIMEOUT" in str(e)
    assert isinstance(tw.SocketError(-11, ""), ConnectionError)
    assert isinstance(tw.InvalidArgument(-1, ""), ValueError)
    from tidewire._errors import error_for
    assert type(error_for(-6, "x")) is tw.InvalidId
    assert type(error_for(-1234, "x")) is tw.TidewireError
    import pickle
    back = pickle.loads(pickle.dumps(tw.Busy(-8, "in flight")))
    assert type(back) is tw.Busy and back.code == -8 and back.message == "in flight"


# ------------------------------------------------------------------------------------------
# registration
# ------------------------------------------------------------------------------------------
def test_register_buffer_kinds(pair):
    a, _ = pair
    m = mmap.mmap(-1, 8192)
    objs = [bytearray(4096), memoryview(bytearray(4096)), (ctypes.c_char * 4096)(), m,
            array.array("d", [0.0] * 512)]
    regs = [a.register(o) for o in objs]
    for r, o in zip(regs, objs):
        assert r.registered and r.length == memoryview(o).nbytes
    for r in regs:
        r.close()
        assert not r.registered
    del regs, r
    m.close()  # no export is left once the registrations are closed


def test_register_int_address_and_slices(pair):
    a, _ = pair
    buf = bytearray(8192)
    mv = memoryview(buf)
    with a.register(mv[4096:]) as r:
        addr = r.addr
        with pytest.raises(tw.AddressOverlapped):
            a.register(addr - 16, 64)
        # The exact range again is counted; the handle unregisters one count.
        with a.register(addr, 4096):
            pass
    with pytest.raises(tw.AddressNotRegistered):
        a.unregister(addr)
    with pytest.raises(TypeError):
        a.register(addr)  # an int needs a length
    with pytest.raises(ValueError):
        a.register(buf, length=9000)


def test_register_bad_inputs(pair):
    a, _ = pair
    with pytest.raises(TypeError):
        a.register(b"immutable bytes")
    with pytest.raises(TypeError):
        a.register(None)
    with pytest.raises(TypeError):
        a.register("text")
    with pytest.raises(tw.InvalidArgument):
        a.register(bytearray(0))
    with pytest.raises(tw.InvalidArgument):
        a.register(bytearray(16), length=0)
    with pytest.raises(ValueError):
        a.register(0, 16)
    with pytest.raises(ValueError):
        a.register(memoryview(bytearray(64))[::2])


def test_registration_pins_the_buffer(pair):
    a, _ = pair
    buf = bytearray(4096)
    reg = a.register(buf)
    with pytest.raises(BufferError):
        buf.extend(b"x")  # resizing would move registered memory
    reg.close()
    buf.extend(b"x")


def test_dropped_registration_unregisters(pair):
    a, _ = pair
    buf = bytearray(4096)
    addr = a.register(buf).addr
    gc.collect()
    with pytest.raises(tw.AddressNotRegistered):
        a.unregister(addr)
    a.register(buf).close()


def test_numpy_arrays_if_available(pair):
    np = pytest.importorskip("numpy")
    a, b = pair
    la = np.zeros(1024, dtype=np.uint8)
    rb = np.arange(1024, dtype=np.uint32)
    with a.register(la), b.register(rb) as rr:
        a.read(b.name, la, rr.addr, 1024)
        assert bytes(la) == rb.tobytes()[:1024]
        with pytest.raises(ValueError):
            a.register(np.zeros((8, 8), dtype=np.uint8)[:, ::2])


# ------------------------------------------------------------------------------------------
# transfers
# ------------------------------------------------------------------------------------------
def test_read_write_round_trip(linked):
    a, b, la, rb, ra, rr, seg = linked
    a.read(seg, la, rr.addr)  # whole buffer
    assert la == rb
    la[:11] = b"hello world"
    a.write(seg, memoryview(la)[:11], rr.addr + 100)
    assert rb[100:111] == b"hello world"
    a.read(b.name, ra.addr + 500, rr.addr + 100, 11)  # name and int address forms
    assert la[500:511] == b"hello world"
    a.write(seg.id, ra.addr, rr.addr + 2000, 5, timeout=5.0)
    assert rb[2000:2005] == b"hello"


def test_transfer_errors(linked, pair):
    a, b, la, rb, ra, rr, seg = linked
    with pytest.raises(tw.Rejected):
        a.read(seg, ra.addr, rr.addr + MiB - 4, 8)
    with pytest.raises(tw.Rejected):
        a.write(seg, ra.addr, 4096, 8)
    stray = bytearray(64)
    with pytest.raises(tw.AddressNotRegistered):
        a.read(seg, stray, rr.addr)
    with pytest.raises(tw.UnknownSegment):
        a.read(999, ra.addr, rr.addr, 8)
    with pytest.raises(tw.TidewireError):
        a.open_segment("127.0.0.1:1")
    with pytest.raises(tw.InvalidArgument):
        a.open_segment("")
    with pytest.raises(TypeError):
        a.open_segment(None)
    with pytest.raises(tw.TidewireError) as ei:
        a.transfer([tw.Request(7, seg, ra.addr, rr.addr, 8)])
    assert ei.value.code == -1
    with pytest.raises(TypeError):
        a.read(seg, None, rr.addr)  # no buffer, no length
    with pytest.raises(tw.InvalidArgument):
        a.read(seg, None, rr.addr, 8)  # NULL local address
    a.read(seg, ra.addr, rr.addr, 0)  # zero length completes at once
    # Still healthy.
    a.read(seg, ra.addr, rr.addr, 16)
    assert la[:16] == rb[:16]


def test_batch_lifecycle(linked):
    a, b, la, rb, ra, rr, seg = linked
    with a.batch(4) as bt:
        bt.submit([tw.Request(tw.READ, seg, ra.addr + i * 64, rr.addr + i * 64, 64)
                   for i in range(3)])
        bt.submit([(tw.WRITE, seg, ra.addr, rr.addr + 8192, 64)], notify=("done", "4"))
        bt.wait(10)
        assert len(bt) == 4 and bt.done
        st = bt.status(0)
        assert st.state == tw.TaskState.COMPLETED and st.result == 0
        assert st.transferred_bytes == 64
        with pytest.raises(tw.TooManyRequests):
            bt.submit([(tw.READ, seg, ra.addr, rr.addr, 8)])
        with pytest.raises(tw.InvalidArgument):
            bt.status(4)
    assert la[:192] == rb[:192]
    assert b.take_notifications() == [tw.Notification("done", "4")]
    with pytest.raises(tw.InvalidId):
        bt.close()  # the with block freed it
    with pytest.raises(tw.InvalidId):
        bt.status(0)


def test_batch_failed_task_status(linked):
    a, b, la, rb, ra, rr, seg = linked
    bt = a.batch(2)
    bt.submit([(tw.READ, seg, ra.addr, rr.addr, 8),
               (tw.READ, seg, ra.addr + 8, rr.addr + MiB, 8)])
    with pytest.raises(tw.Rejected):
        bt.wait(10)
    assert bt.status(0).state == tw.TaskState.COMPLETED
    s1 = bt.status(1)
    assert s1.state == tw.TaskState.FAILED and s1.result == -10
    bt.close()
    with pytest.raises(tw.InvalidId):
        bt.close()


def test_batch_submit_validates_all_or_nothing(linked):
    a, b, la, rb, ra, rr, seg = linked
    with a.batch(8) as bt:
        with pytest.raises(tw.AddressNotRegistered):
            bt.submit([(tw.READ, seg, ra.addr, rr.addr, 8),
                       (tw.READ, seg, ra.addr + MiB, rr.addr, 8)])
        assert len(bt) == 0
        bt.wait(1)  # nothing was started


# ------------------------------------------------------------------------------------------
# scatter
# ------------------------------------------------------------------------------------------
def test_scatter_partial_failure_exactly_once(linked):
    a, b, la, rb, ra, rr, seg = linked
    n = 64
    calls = []
    lock = threading.Lock()

    def cb(i, result):
        with lock:
            calls.append((i, result))

    good = tw.ScatterRange(tw.READ, seg, rr.addr, 65536, la,
                           [i * 256 for i in range(n)], [i * 128 for i in range(n)], [128] * n)
    # Fragment 1 reaches past remote_size; fragment 2 past the local capacity; 3 is empty.
    mixed = tw.ScatterRange(tw.READ, seg, rr.addr + 65536, 4096, memoryview(la)[65536:69632],
                            [0, 0, 4000, 0], [0, 4000, 0, 0], [64, 200, 200, 0])
    unknown = tw.ScatterRange(tw.READ, 4242, rr.addr, 4096, ra.addr + 200000, [0, 8], [0, 8],
                              [8, 8], local_capacity=4096)
    with a.scatter([good, mixed, unknown], callback=cb) as op:
        assert op.fragments == n + 6
        results = op.wait(10)
    assert results[:n] == [0] * n
    assert results[n:n + 4] == [0, -1, -1, 0]
    assert results[n + 4] < 0 and results[n + 5] < 0
    assert op.result == -1  # the lowest-indexed failure
    assert sorted(calls) == sorted(enumerate(results))
    assert len(calls) == n + 6 and len({i for i, _ in calls}) == n + 6
    for i in range(n):
        assert la[i * 256:i * 256 + 128] == rb[i * 128:(i + 1) * 128]
    assert la[65536:65600] == rb[65536:65600]
    op.close()  # idempotent, no second callback
    assert len(calls) == n + 6


def test_scatter_adjacent_fragments_and_write(linked):
    a, b, la, rb, ra, rr, seg = linked
    la[:4096] = pattern(4096, seed=11)
    n = 32
    op = a.scatter([tw.ScatterRange(tw.WRITE, seg, rr.addr + 300000, 4096, la,
                                    [i * 128 for i in range(n)], [i * 128 for i in range(n)],
                                    [128] * n)])
    assert op.wait() == [0] * n
    op.close()
    assert rb[300000:300000 + 4096] == la[:4096]


def test_scatter_remote_rejection_and_none_local(linked):
    a, b, la, rb, ra, rr, seg = linked
    calls = []
    # remote_size claims more than b registered: the peer rejects the out-of-range fragment.
    r = tw.ScatterRange(tw.READ, seg, rr.addr + MiB - 4096, 8192, la, [0, 4096], [0, 4096],
                        [4096, 4096])
    none_local = tw.ScatterRange(tw.READ, seg, rr.addr, 64, None, [0], [0], [8],
                                 local_capacity=64)
    with a.scatter([r, none_local], callback=lambda i, res: calls.append((i, res))) as op:
        res = op.wait(10)
    assert res[0] == 0 and res[1] == -10 and res[2] == -1
    assert sorted(calls) == [(0, 0), (1, -10), (2, -1)]


def test_scatter_callback_exception_is_reported_once(linked):
    a, b, la, rb, ra, rr, seg = linked
    seen = []

    def cb(i, result):
        seen.append(i)
        if i == 1:
            raise RuntimeError("boom")

    op = a.scatter([tw.ScatterRange(tw.READ, seg, rr.addr, 4096, la, [0, 100, 200],
                                    [0, 100, 200], [10, 10, 10])], callback=cb)
    with pytest.raises(tw.CallbackError) as ei:
        op.wait(10)
    assert isinstance(ei.value.__cause__, RuntimeError)
    assert ei.value.results == [0, 0, 0]
    op.close()
    assert sorted(seen) == [0, 1, 2]


def test_scatter_free_fires_pending_callbacks_and_stale_id(linked):
    a, b, la, rb, ra, rr, seg = linked
    calls = []
    op = a.scatter([tw.ScatterRange(tw.READ, seg, rr.addr, MiB, la, [0], [0], [MiB])],
                   callback=lambda i, res: calls.append((i, res)))
    op.close()  # no wait: close waits for physical completion and fires the callback
    assert calls == [(0, 0)]
    assert la == rb
    assert op.wait() == [0]  # after close: the final results, no native call
    with pytest.raises(tw.InvalidId):
        a._lib and tw._errors.check(a._lib.tw_scatter_wait(a._handle(), op.id, 0, None, 0))


def test_scatter_empty_and_engine_close_fires_callbacks():
    a, b = tw.Engine(), tw.Engine()
    la, rb = bytearray(MiB), bytearray(MiB)
    a.register(la)
    rr = b.register(rb)
    calls = []
    op = a.scatter([tw.ScatterRange(tw.READ, b.name, rr.addr, MiB, la, [0], [0], [MiB])],
                   callback=lambda i, res: calls.append(i))
    assert a.scatter([]).wait(1) == []
    a.close()  # outstanding operations are freed first: the callback still fires once
    assert calls == [0]
    op.close()
    b.close()


# ------------------------------------------------------------------------------------------
# notifications, probe
# ------------------------------------------------------------------------------------------
def test_notifications_and_probe(linked):
    a, b, la, rb, ra, rr, seg = linked
    assert b.take_notifications() == []
    a.notify(seg, "n1", "m1")
    seg.notify("n2", "")
    a.notify(b.name, "n3", "ü" * 100)
    assert b.take_notifications() == [("n1", "m1"), ("n2", ""), ("n3", "ü" * 100)]
    assert b.take_notifications() == []
    a.probe(b.name)
    with pytest.raises(tw.SocketError):
        a.probe("127.0.0.1:1")
    with pytest.raises(tw.UnknownSegment):
        a.notify(77, "x", "y")


def test_segment_object(linked):
    a, b, la, rb, ra, rr, seg = linked
    assert int(seg) == seg.id >= 1 and seg.name == b.name
    assert a.open_segment(b.name).id == seg.id
    assert a.open_segment(a.name).id == tw.LOCAL_SEGMENT
    extra = bytearray(4096)
    with b.register(extra) as rx:
        seg.refresh()
        addrs = {buf["addr"] for buf in seg.descriptor()["buffers"]}
        assert rx.addr in addrs and rr.addr in addrs
    seg.close()
    with pytest.raises(tw.UnknownSegment):
        seg.close()
