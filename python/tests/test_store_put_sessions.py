"""Put sessions (``batch_put_session_start`` / ``batch_put_from_multi_buffer_ranges`` /
``batch_put_session_end`` / ``batch_put_session_revoke``) beyond the call-by-call comparison
with Mooncake in test_store_differential.py: ranges written from several threads at once become
visible together at ``end``; a revoked session leaves the older value; a writer that dies
leaves nothing readable, and its key is writable again after the master's discard timeout."""

import ctypes
import os
import subprocess
import sys
import threading
import time

from conftest import REPO
from store_util import Master, connect, wait_until

MiB = 1 << 20


def buf(data):
    b = ctypes.create_string_buffer(data, len(data))
    return b, ctypes.addressof(b)


def test_ranges_from_many_threads_become_visible_together():
    m = Master()
    s = connect(m, segment=64 * MiB)
    try:
        size, parts = 8 * MiB, 16
        step = size // parts
        data = os.urandom(size)
        keep = [buf(data[i * step:(i + 1) * step]) for i in range(parts)]
        assert s.batch_put_session_start(["big"], [size]) == [0]
        results = []

        def write(i):
            b, p = keep[i]
            results.append(s.batch_put_from_multi_buffer_ranges(["big"], [[p]], [[step]],
                                                                 [[i * step]])[0])

        threads = [threading.Thread(target=write, args=(i,)) for i in range(parts)]
        for t in threads:
            t.start()
            assert s.get("big") == b"", "nothing is readable before end"
        for t in threads:
            t.join()
        assert results == [step] * parts
        assert s.batch_put_session_end(["big"]) == [0]
        assert s.get("big") == data
        # A second session on the same key is refused: it exists now (create-only).
        assert s.batch_put_session_start(["big"], [10]) == [-705]
    finally:
        s.close()
        m.stop()


def test_a_revoked_session_keeps_nothing():
    m = Master()
    s = connect(m, segment=16 * MiB)
    try:
        b, p = buf(b"x" * 1000)
        assert s.batch_put_session_start(["r"], [1000]) == [0]
        assert s.batch_put_from_multi_buffer_ranges(["r"], [[p]], [[1000]], [[0]]) == [1000]
        assert s.batch_put_session_revoke(["r"]) == [0]
        assert s.get("r") == b"" and s.is_exist("r") == 0
        assert s.put("r", b"fresh") == 0 and s.get("r") == b"fresh"
    finally:
        s.close()
        m.stop()


_WRITER = r"""
import ctypes, sys, time
from tidewire.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", sys.argv[1]) == 0
b = ctypes.create_string_buffer(b"y" * 4096, 4096)
assert s.batch_put_session_start(["dies"], [8192]) == [0]
assert s.batch_put_from_multi_buffer_ranges(["dies"], [[ctypes.addressof(b)]], [[4096]],
                                            [[0]]) == [4096]
print("written", flush=True)
time.sleep(60)
"""


def test_a_writer_that_dies_leaves_nothing_readable():
    m = Master("--put_start_discard_timeout_sec=1")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    w = subprocess.Popen([sys.executable, "-c", _WRITER, m.address], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=env)
    s = connect(m, segment=16 * MiB)
    try:
        assert w.stdout.readline().strip() == "written"
        w.kill()
        w.wait(timeout=10)
        assert s.get("dies") == b"" and s.is_exist("dies") == 0
        # The key takes a new value at once: the dead session is pre-empted (its space is held
        # until the master's release timeout, since its writer might still be writing).
        assert wait_until(lambda: s.put("dies", b"new") == 0, 10)
        assert s.get("dies") == b"new"
    finally:
        if w.poll() is None:
            w.kill()
        s.close()
        m.stop()
