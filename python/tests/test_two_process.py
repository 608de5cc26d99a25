"""A second Python process as the target (peer_target.py), and proof that waiting in a
transfer releases the GIL: the target is frozen with SIGSTOP so the transfer cannot finish,
while another thread of this process keeps running Python code."""

import gc
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest

import tidewire as tw
from conftest import PYDIR, new_te, pattern
from tidewire.engine import TransferNotify, TransferOpcode

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE = 4 << 20


class Target:
    def __init__(self, api):
        env = dict(os.environ)
        env["PYTHONPATH"] = PYDIR + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer_target.py"), api, str(SIZE)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        info = json.loads(self._line(60))
        self.name, self.addr, self.pid = info["name"], info["addr"], info["pid"]
        assert self.pid == self.proc.pid

    def _line(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            raise AssertionError("target did not answer in time")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"target exited (rc={self.proc.poll()})")
        return line

    def ask(self, cmd, timeout=20):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self._line(timeout).strip()

    def sha(self, off, n):
        return self.ask(f"sha {off} {n}")

    def stop(self):
        """Freezes the target and returns once every one of its threads is stopped."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        task_dir = f"/proc/{self.proc.pid}/task"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            states = []
            for tid in os.listdir(task_dir):
                try:
                    with open(f"{task_dir}/{tid}/stat") as f:
                        states.append(f.read().rsplit(")", 1)[1].split()[0])
                except OSError:
                    pass
            if states and all(st in ("T", "t") for st in states):
                return
            time.sleep(0.002)
        raise AssertionError("target did not stop")

    def cont(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self):
        if self.proc.poll() is None:
            self.cont()
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()  # the process this test started
                self.proc.wait(timeout=10)


@pytest.fixture(params=["core", "compat"])
def target(request):
    t = Target(request.param)
    try:
        yield t
    finally:
        t.close()


def sha(b):
    return hashlib.sha256(b).hexdigest()


def test_cross_process_transfers_both_apis(target, mbuf):
    te = new_te()
    eng = tw.Engine()
    try:
        local = mbuf(SIZE)
        assert te.register_memory(local.addr, SIZE) == 0
        # READ the target's pattern, every byte checked.
        assert te.transfer_sync_read(target.name, local.addr, target.addr, SIZE) == 0
        assert local.get(0, SIZE) == pattern(SIZE, seed=4)
        # WRITE a different pattern to the middle, with a notify.
        data = pattern(SIZE // 2, seed=9)
        local.put(0, data)
        assert te.transfer_sync(target.name, local.addr, target.addr + 4096, len(data),
                                TransferOpcode.Write, TransferNotify("w", "done")) == 0
        assert target.sha(4096, len(data)) == sha(data)
        assert target.sha(0, 4096) == sha(pattern(SIZE, seed=4)[:4096])
        assert json.loads(target.ask("notes")) == [["w", "done"]]
        # The pythonic API reads it back from the same process.
        back = bytearray(len(data))
        with eng.register(back):
            eng.read(target.name, back, target.addr + 4096)
            assert bytes(back) == data
            with pytest.raises(tw.Rejected):
                eng.read(target.name, memoryview(back)[:16], target.addr + SIZE)
            eng.notify(target.name, "core", "hi")
        assert json.loads(target.ask("notes")) == [["core", "hi"]]
        assert te.unregister_memory(local.addr) == 0
    finally:
        eng.close()
        te.close()


def _count_while(thread, seconds, result=None):
    """Runs Python bytecode for `seconds` and returns how many loop turns it managed."""
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
    assert thread.is_alive(), f"the transfer ended although the target was stopped: {result}"
    return n


# A thread holding the GIL for the whole window would leave this loop at (almost) zero turns.
MIN_TURNS = 20_000


@pytest.mark.parametrize("target", ["core"], indirect=True)
def test_gil_released_during_transfer_sync(target, mbuf, monkeypatch):
    monkeypatch.setenv("MC_TRANSFER_TIMEOUT", "5")  # bounds a broken run
    te = new_te()
    try:
        local = mbuf(1 << 20)
        assert te.register_memory(local.addr, local.size) == 0
        assert te.transfer_sync_read(target.name, local.addr, target.addr, 4096) == 0  # warm
        data = pattern(1 << 20, seed=13)
        local.put(0, data)
        result = {}
        target.stop()
        try:
            t = threading.Thread(target=lambda: result.setdefault(
                "rc", te.transfer_sync_write(target.name, local.addr, target.addr, len(data))))
            t.start()
            time.sleep(0.05)
            turns = _count_while(t, 0.5, result)
        finally:
            target.cont()
        t.join(20)
        assert not t.is_alive()
        assert turns > MIN_TURNS, turns
        assert result["rc"] == 0
        assert target.sha(0, len(data)) == sha(data)
    finally:
        te.close()


@pytest.mark.parametrize("target", ["compat"], indirect=True)
def test_gil_released_during_batch_wait_and_timeout_does_not_cancel(target, mbuf):
    # Over the socket: a stopped target must hold the write up. (Through the target's shared
    # buffer, which a same-host engine maps, the write would land without it.)
    eng = tw.Engine(io_timeout_ms=10000, same_host=0)
    try:
        buf = bytearray(pattern(1 << 20, seed=21))
        with eng.register(buf):
            seg = eng.open_segment(target.name)
            eng.write(seg, memoryview(buf)[:64], target.addr)  # warm the connection
            target.stop()
            try:
                bt = eng.batch(1)
                bt.submit([(tw.WRITE, seg, buf, target.addr, None)])
                # A bounded wait runs out and leaves the work alone.
                t0 = time.monotonic()
                with pytest.raises(tw.TransferTimeout):
                    bt.wait(0.2)
                assert 0.15 < time.monotonic() - t0 < 5
                with pytest.raises(tw.Busy):
                    bt.close()
                errors = []

                def waiter():
                    try:
                        bt.wait(20)
                    except Exception as e:  # reported below
                        errors.append(e)

                t = threading.Thread(target=waiter)
                t.start()
                time.sleep(0.05)
                turns = _count_while(t, 0.5, errors)
            finally:
                target.cont()
            t.join(20)
            assert not t.is_alive()
            assert not errors, errors
            assert turns > MIN_TURNS, turns
            bt.close()
            assert target.sha(0, len(buf)) == sha(bytes(buf))
    finally:
        eng.close()


def test_dead_target_fails_cleanly(mbuf):
    t = Target("compat")
    te = new_te()
    try:
        local = mbuf(65536)
        assert te.register_memory(local.addr, local.size) == 0
        assert te.transfer_sync_read(t.name, local.addr, t.addr, 4096) == 0
        t.close()
        assert t.proc.returncode == 0
        assert te.transfer_sync_read(t.name, local.addr, t.addr, 4096) == -1
        assert te.send_probe(t.name) == -102
    finally:
        t.close()
        te.close()


@pytest.mark.parametrize("target", ["core"], indirect=True)
def test_compat_timeouts_with_a_frozen_target(target, mbuf):
    te = new_te()
    # White-box: a 0.3 s transfer timeout instead of MC_TRANSFER_TIMEOUT's 5 s minimum.
    te._timeout_ns, te._timeout_ms = 300_000_000, 300
    try:
        local = mbuf(1 << 20)
        assert te.register_memory(local.addr, local.size) == 0
        assert te.transfer_sync_read(target.name, local.addr, target.addr, 4096) == 0
        local.put(0, pattern(1 << 20, seed=17))
        target.stop()
        try:
            t0 = time.monotonic()
            assert te.transfer_sync_write(target.name, local.addr, target.addr, 65536) == -1
            assert 0.25 < time.monotonic() - t0 < 5
            assert len(te._orphans) == 1  # still in flight: freed later, never abandoned
            bid = te.transfer_submit_write(target.name, local.addr + 65536,
                                           target.addr + 65536, 4096)
            assert bid > 0 and te.transfer_check_status(bid) == 0
            time.sleep(0.35)
            assert te.transfer_check_status(bid) == -2  # timed out, not freed
            bid2 = te.batch_transfer_async_write(target.name, [local.addr + 131072],
                                                 [target.addr + 131072], [4096])
            t0 = time.monotonic()
            assert te.get_batch_transfer_status([bid2]) == -1
            assert 0.25 < time.monotonic() - t0 < 5
        finally:
            target.cont()
        deadline = time.monotonic() + 20
        while te._orphans and time.monotonic() < deadline:
            te._reap()
            time.sleep(0.01)
        assert te._orphans == []
        while (r := te.transfer_check_status(bid)) in (0, -2) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert r == 1
        assert te.transfer_sync_write(target.name, local.addr, target.addr, 1 << 20) == 0
        assert target.sha(0, 1 << 20) == sha(pattern(1 << 20, seed=17))
    finally:
        te.close()


@pytest.mark.parametrize("target", ["core"], indirect=True)
def test_core_transfer_timeout_returns_and_the_batch_is_freed_later(target, mbuf):
    """Engine.transfer gives up at its timeout (the work goes on); the engine frees the batch
    once the work ended, keeping the local buffer referenced until then."""
    eng = tw.Engine()
    try:
        buf = bytearray(pattern(1 << 20, seed=23))
        with eng.register(buf):
            seg = eng.open_segment(target.name)
            eng.write(seg, memoryview(buf)[:64], target.addr)
            target.stop()
            try:
                t0 = time.monotonic()
                with pytest.raises(tw.TransferTimeout):
                    eng.write(seg, buf, target.addr, timeout=0.3)
                assert 0.25 < time.monotonic() - t0 < 5
                assert len(eng.parked) == 1
                assert eng.reap() == 1  # still in flight
            finally:
                target.cont()
            deadline = time.monotonic() + 20
            while eng.reap() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert eng.parked == []
            assert target.sha(0, len(buf)) == sha(bytes(buf))
    finally:
        eng.close()


@pytest.fixture
def core_target():
    t = Target("core")
    try:
        yield t
    finally:
        t.close()


def _frozen_write(eng, target, buf):
    """A batch writing ``buf`` to a frozen target: over the socket (the engine has
    ``same_host=0``), so it stays in flight until the target runs again."""
    seg = eng.open_segment(target.name)
    eng.write(seg, memoryview(buf)[:64], target.addr)  # warm the connection
    target.stop()
    bt = eng.batch(1)
    bt.submit([(tw.WRITE, seg, buf, target.addr, None)])
    with pytest.raises(tw.TransferTimeout):
        bt.wait(0.1)  # in flight, and it stays so while the target is stopped
    return bt


def test_busy_batch_cannot_be_freed(core_target):
    """Freeing a batch while its work is in flight is refused, every time (the target is
    frozen, so the work cannot finish first); once it has finished, the free succeeds."""
    eng = tw.Engine(io_timeout_ms=20000, same_host=0)
    try:
        buf = bytearray(pattern(SIZE, seed=31))
        with eng.register(buf):
            try:
                bt = _frozen_write(eng, core_target, buf)
                for _ in range(3):
                    with pytest.raises(tw.Busy):
                        bt.close()
                assert not bt.done
            finally:
                core_target.cont()
            bt.wait(20)
            bt.close()
            with pytest.raises(tw.InvalidId):
                bt.close()
            assert core_target.sha(0, len(buf)) == sha(bytes(buf))
    finally:
        eng.close()


def test_collecting_a_batch_in_flight_never_waits(core_target):
    """Batch.__del__ returns at once while the work is held up (io_timeout 20 s); the engine
    keeps the batch and its buffer and frees it once the work has finished."""
    eng = tw.Engine(io_timeout_ms=20000, same_host=0)
    try:
        buf = bytearray(pattern(SIZE, seed=32))
        with eng.register(buf):
            try:
                bt = _frozen_write(eng, core_target, buf)
                bid = bt.id
                t0 = time.monotonic()
                del bt
                gc.collect()
                assert time.monotonic() - t0 < 1.0
                assert eng.parked == [bid]
                assert eng.reap() == 1  # still in flight
            finally:
                core_target.cont()
            deadline = time.monotonic() + 20
            while eng.reap() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert eng.parked == []
            assert core_target.sha(0, len(buf)) == sha(bytes(buf))
    finally:
        eng.close()


def test_engine_close_after_a_collected_batch_in_flight(core_target):
    """A collected in-flight batch does not stop the engine from closing: close frees it."""
    eng = tw.Engine(io_timeout_ms=2000, same_host=0)
    buf = bytearray(SIZE)
    reg = eng.register(buf)
    try:
        bt = _frozen_write(eng, core_target, buf)
        del bt
        gc.collect()
        assert len(eng.parked) == 1
    finally:
        core_target.cont()
        eng.close()
        reg.close()
    assert eng.parked == []
