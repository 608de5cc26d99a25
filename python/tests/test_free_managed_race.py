"""free_managed_buffer while a peer keeps writing into the buffer (hardening row 2): over TCP,
the in-process memcpy path and the same-host process_vm path (a writer process). The target
frees the buffer (unregister, then unmap) while writes are in flight: nothing crashes, free
returns promptly with 0, and every write returns 0 or -1 (-1 once the buffer is gone)."""

import os
import select
import subprocess
import sys
import threading
import time

import pytest

from conftest import PYDIR, new_te

HERE = os.path.dirname(os.path.abspath(__file__))
LEN = 256 << 10


def free_while_writing(target, start_writer):
    addr = target.allocate_managed_buffer(LEN)
    assert addr
    stop_writer, results = start_writer(target.get_segment_name(), addr)
    time.sleep(0.2)
    t0 = time.monotonic()
    assert target.free_managed_buffer(addr, LEN) == 0
    took = time.monotonic() - t0
    time.sleep(0.3)
    ok, failed, other = stop_writer()
    assert took < 3.0, f"free_managed_buffer took {took:.2f} s"
    assert other == 0, (ok, failed, other)
    assert ok > 0 and failed > 0, (ok, failed, other)


@pytest.mark.parametrize("same_host", ["1", "0"], ids=["in-process", "tcp"])
def test_free_managed_buffer_while_a_thread_writes(same_host, monkeypatch):
    monkeypatch.setenv("TW_SAME_HOST", same_host)
    target, writer = new_te(), new_te()
    try:
        def start(seg, addr):
            src = writer.allocate_managed_buffer(LEN)
            writer.write_bytes_to_buffer(src, b"\xab" * LEN, LEN)
            stop = threading.Event()
            codes = []
            first = threading.Event()

            def run():
                while not stop.is_set():
                    rc = writer.transfer_sync_write(seg, src, addr, LEN)
                    codes.append(rc)
                    if rc == 0:
                        first.set()
                    else:
                        time.sleep(0.01)

            th = threading.Thread(target=run)
            th.start()
            assert first.wait(20), codes[:5]

            def finish():
                stop.set()
                th.join(30)
                assert not th.is_alive()
                return (codes.count(0), codes.count(-1),
                        len(codes) - codes.count(0) - codes.count(-1))
            return finish, codes

        free_while_writing(target, start)
    finally:
        writer.close()
        target.close()


def test_free_managed_buffer_while_a_process_writes():
    target = new_te()
    procs = []
    try:
        def start(seg, addr):
            env = dict(os.environ)
            env["PYTHONPATH"] = PYDIR + os.pathsep + env.get("PYTHONPATH", "")
            p = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "fence_writer.py"), seg, str(addr), str(LEN)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
            procs.append(p)

            def line(timeout):
                r, _, _ = select.select([p.stdout], [], [], timeout)
                assert r, "writer did not answer in time"
                out = p.stdout.readline()
                assert out, f"writer exited (rc={p.poll()})"
                return out.split()

            assert line(60) == ["READY"]

            def finish():
                p.stdin.close()
                done = line(30)
                assert done[0] == "DONE", done
                assert p.wait(30) == 0
                return tuple(int(f.split("=")[1]) for f in done[1:])
            return finish, None

        free_while_writing(target, start)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        target.close()
