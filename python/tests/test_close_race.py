"""close() while other threads are inside calls (issue: destroy vs calls): the handle is never
freed under a running call, calls racing or following close() fail with an error (Shutdown /
a failure code), close() returns within its bound, and nothing crashes."""

import threading
import time

import pytest

import tidewire as tw
from conftest import new_te, pattern

KiB = 1 << 10
ROUNDS = 4


def _hammer(stop, errors, counts, fn):
    while not stop.is_set():
        try:
            fn()
            counts[0] += 1
        except tw.TidewireError as e:
            counts[1] += 1
            if isinstance(e, tw.Shutdown):
                return  # closed: every later call answers the same
        except Exception as e:  # anything else (AttributeError, ctypes errors) is a bug
            errors.append(repr(e))
            return


@pytest.mark.parametrize("close_timeout", [10.0, 0.0])
def test_engine_close_while_threads_transfer(close_timeout):
    for rnd in range(ROUNDS):
        a, b = tw.Engine(), tw.Engine()
        src, dst = bytearray(pattern(256 * KiB, seed=rnd)), bytearray(256 * KiB)
        ra, rb = a.register(src), b.register(dst)
        seg = a.open_segment(b.name)
        stop, errors = threading.Event(), []
        counts = [[0, 0] for _ in range(6)]
        scratch = [bytearray(4 * KiB) for _ in range(2)]
        work = [
            lambda: a.write(seg, ra.addr, rb.addr, 64 * KiB, timeout=10),
            lambda: a.read(seg, ra.addr + 64 * KiB, rb.addr, 64 * KiB, timeout=10),
            lambda: a.transfer([tw.Request(tw.WRITE, seg, ra.addr + i * KiB, rb.addr + i * KiB,
                                           KiB) for i in range(32)], timeout=10),
            lambda: a.register(scratch[0]).close(),
            lambda: a.take_notifications(),
            lambda: a.descriptor(seg),
        ]
        threads = [threading.Thread(target=_hammer, args=(stop, errors, counts[i], fn))
                   for i, fn in enumerate(work)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        a.close(timeout=close_timeout)
        took = time.monotonic() - t0
        assert a.closed
        for t in threads:
            t.join(15)
        stop.set()
        assert not any(t.is_alive() for t in threads), "a call hung after close()"
        assert errors == [], errors
        assert took < close_timeout + 5, took
        assert sum(c[0] for c in counts) > 0, "nothing ran before close()"
        with pytest.raises(tw.Shutdown):
            a.write(seg, ra.addr, rb.addr, 64, timeout=1)
        with pytest.raises(tw.Shutdown):
            a.register(scratch[1])
        # The handle is freed once the last call returned (at once with the default timeout).
        deadline = time.monotonic() + 10
        while a._eng is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert a._eng is None
        a.close()  # idempotent
        b.close()
        del ra, rb


def test_mooncake_engine_close_while_threads_transfer():
    for rnd in range(ROUNDS):
        a, b = new_te(), new_te()
        n = 256 * KiB
        src = a.allocate_managed_buffer(n)
        dst = b.allocate_managed_buffer(n)
        assert src and dst
        a.write_bytes_to_buffer(src, pattern(n, seed=rnd), n)
        target = b.get_segment_name()
        stop, errors, codes = threading.Event(), [], []

        def loop(fn):
            while not stop.is_set():
                try:
                    rc = fn()
                except Exception as e:  # a Mooncake-style call answers with a code
                    errors.append(repr(e))
                    return
                codes.append(rc)
                if a._off:
                    return

        work = [
            lambda: a.transfer_sync_write(target, src, dst, 64 * KiB),
            lambda: a.transfer_sync_read(target, src + 64 * KiB, dst, 64 * KiB),
            lambda: a.batch_transfer_sync_write(target, [src + i * KiB for i in range(16)],
                                                [dst + i * KiB for i in range(16)], [KiB] * 16),
            lambda: a.get_batch_transfer_status(
                [a.batch_transfer_async_read(target, [src], [dst], [4 * KiB])]),
            lambda: a.get_notifies(),
        ]
        threads = [threading.Thread(target=loop, args=(fn,)) for fn in work]
        for t in threads:
            t.start()
        time.sleep(0.3)
        a.close()
        for t in threads:
            t.join(15)
        stop.set()
        assert not any(t.is_alive() for t in threads)
        assert errors == [], errors
        assert 0 in codes, "nothing ran before close()"
        assert a.transfer_sync_write(target, src, dst, 64) == -1
        assert a.register_memory(src, 64) == -1
        assert a.get_rpc_port() == -1
        b.close()
