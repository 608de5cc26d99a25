"""Dummy clients (Mooncake's ``setup_dummy``, standalone storage): a real client process
(``python -m tidewire.store_server``) owns the engine and segment; dummy clients in other
processes send their calls to it, their buffers being ``MooncakeHostMemAllocator`` memory it
maps. Checked: zero-copy and copying calls byte for byte across two dummies and a normal
client, values in pieces, sessions, bad addresses, junk sent to the real client, a dummy that
dies, and a real client that dies (the dummy gets errors at once, never a hang)."""

import ctypes
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import REPO
from store_util import Master, connect
from tidewire.store import MooncakeDistributedStore, MooncakeHostMemAllocator

# Fails, not skips, without the master binary (see conftest.store_master_built).
pytestmark = pytest.mark.usefixtures("store_master_built")

MiB = 1 << 20


class RealClient:
    """``python -m tidewire.store_server`` on a free port, stopped by PID."""

    def __init__(self, master, segment="128mb"):
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tidewire.store_server", "--master_server_address",
             master.address, "--port", "0", "--global_segment_size", segment],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"store_server did not start: {self.proc.stderr.read()[-500:]}")
        info = json.loads(line)
        self.address, self.hostname = info["address"], info["hostname"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture
def cluster():
    m = Master()
    real = RealClient(m)
    yield m, real
    real.stop()
    m.stop()


def dummy(real):
    d = MooncakeDistributedStore()
    assert d.setup_dummy(16 * MiB, 16 * MiB, real.address) == 0
    return d


# A second dummy in its own process: writes through its shared memory, reads back, prints.
CHILD = r"""
import ctypes, json, sys
from tidewire.store import MooncakeDistributedStore, MooncakeHostMemAllocator
d = MooncakeDistributedStore()
assert d.setup_dummy(0, 0, sys.argv[1]) == 0
a = MooncakeHostMemAllocator()
p = a.alloc(8 << 20)
assert d.register_buffer(p, 8 << 20) == 0
want = bytes.fromhex(sys.stdin.readline().strip())
got = d.get_into("child/in", p, 8 << 20)
ok_in = got == len(want) and ctypes.string_at(p, got) == want
ctypes.memmove(p, want[::-1], len(want))
rc = d.put_from("child/out", p, len(want))
print(json.dumps({"ok_in": ok_in, "rc": rc, "hostname": d.get_hostname()}), flush=True)
"""


def test_dummies_move_values_through_shared_memory(cluster):
    m, real = cluster
    d = dummy(real)
    normal = connect(m)
    try:
        a = MooncakeHostMemAllocator()
        n = 4 * MiB + 123
        src, dst = a.alloc(2 * n), a.alloc(2 * n)
        assert d.register_buffer(src, 2 * n) == 0 and d.register_buffer(dst, 2 * n) == 0
        rnd = random.Random(3)
        value = rnd.randbytes(n)
        ctypes.memmove(src, value, n)
        assert d.put_from("dm/a", src, n) == 0
        assert d.get_hostname() == real.hostname
        # A normal client elsewhere sees the bytes; the dummy reads them back into its memory.
        assert normal.get("dm/a") == value
        assert d.get_into("dm/a", dst, 2 * n) == n and ctypes.string_at(dst, n) == value
        # Batches, pieces, copying calls, existence, sizes, replicas, sessions, removal.
        keys = [f"dm/b{i}" for i in range(8)]
        vals = [rnd.randbytes(rnd.randrange(1, 64 << 10)) for _ in keys]
        at, ptrs = 0, []
        for v in vals:
            ctypes.memmove(src + at, v, len(v))
            ptrs.append(src + at)
            at += len(v)
        assert d.batch_put_from(keys, ptrs, [len(v) for v in vals]) == [0] * 8
        assert d.get_batch(keys + ["dm/none"]) == vals + [b""]
        assert d.batch_is_exist(keys[:2] + ["dm/none"]) == [1, 1, 0]
        assert d.get_size(keys[3]) == len(vals[3])
        assert d.batch_put_from_multi_buffers(["dm/p"], [[src, src + 10]], [[5, 5]]) == [0]
        assert d.batch_get_into_multi_buffers(["dm/p"], [[dst, dst + 100]], [[3, 50]]) == [10]
        assert ctypes.string_at(dst, 3) + ctypes.string_at(dst + 100, 7) == \
            ctypes.string_at(src, 5) + ctypes.string_at(src + 10, 5)
        assert d.put("dm/c", b"copied") == 0 and normal.get("dm/c") == b"copied"
        assert bytes(d.get_buffer("dm/c")) == b"copied"
        (r,) = d.batch_get_replica_desc(["dm/c"])["dm/c"]
        assert r.get_memory_descriptor().buffer_descriptor.transport_endpoint == real.hostname
        assert d.batch_get_session_start(["dm/a"]) == [0]
        assert d.batch_get_into_multi_buffer_ranges(["dm/a"], [[dst]], [[100]], [[n - 100]]) \
            == [100]
        assert ctypes.string_at(dst, 100) == value[-100:]
        assert d.batch_get_session_end(["dm/a"]) == 0
        # A dummy in another process, through its own shared memory.
        normal.put("child/in", value[:MiB])
        child = subprocess.run([sys.executable, "-c", CHILD, real.address],
                               input=value[:MiB].hex() + "\n", capture_output=True, text=True,
                               timeout=120, env=dict(os.environ, PYTHONPATH=os.path.join(
                                   REPO, "python")))
        out = json.loads(child.stdout.strip().splitlines()[-1])
        assert out == {"ok_in": True, "rc": 0, "hostname": real.hostname}, child.stderr[-500:]
        assert d.get("child/out") == value[:MiB][::-1]
        assert d.remove_all(force=True) >= 10
    finally:
        d.close()
        normal.close()


def test_bad_input_to_a_dummy_and_to_the_real_client(cluster):
    _, real = cluster
    d = dummy(real)
    buf = ctypes.create_string_buffer(4096)  # not shared memory
    addr = ctypes.addressof(buf)
    assert d.register_buffer(addr, 4096) == -600
    assert d.put_from("bad/a", addr, 16) == -600 and "MooncakeHostMemAllocator" in d.last_error
    assert d.batch_get_into(["bad/a", "bad/b"], [addr, addr], [8, 8]) == [-600, -600]
    a = MooncakeHostMemAllocator()
    p = a.alloc(4096)
    assert d.put_from("bad/over", p, 8192) == -600  # runs past the shared region
    with pytest.raises(TypeError):
        d.get(5)
    assert d.get_tensor("bad/t") is None and "not available in a dummy" in d.last_error
    # Junk and a half frame to the real client: it drops that connection and keeps serving.
    host, port = real.address.split(":")
    for junk in (b"\xff\xff\xff\xff", b"\x00\x00\x00\x05{bad", b"\x00\x00\x00\x02[]"):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(junk)
            s.shutdown(socket.SHUT_WR)
            s.settimeout(5)
            try:
                s.recv(100)
            except OSError:
                pass
    # A hostile dummy naming offsets past the memory it shared is refused by the real client.
    from tidewire.mooncake_store import wire

    with socket.create_connection((host, int(port)), timeout=5) as s:
        wire.send(s, {"op": "share", "pid": os.getpid(), "fd": _fd_of(p), "size": 4096, "id": 1})
        assert wire.recv(s)["rc"] == 0
        for call in (["put_from", ["bad/h", [1, 4000], 4096, None]],
                     ["batch_get_into", [["bad/still"], [[1, 0]], [1 << 30]]],
                     ["get_into", ["bad/still", [1, 5000], 1]]):
            wire.send(s, {"op": "call", "m": call[0], "a": call[1]})
            rep = wire.recv(s)
            assert rep.get("rc") == -600 and "outside the shared region" in rep["error"], rep
    assert d.put("bad/still", b"up") == 0 and d.get("bad/still") == b"up"
    # A second setup_dummy is a no-op; a real client that is not there is -900.
    assert d.setup_dummy(0, 0, real.address) == 0
    gone = MooncakeDistributedStore()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = f"127.0.0.1:{s.getsockname()[1]}"
    s.close()
    assert gone.setup_dummy(0, 0, dead) == -900
    d.close()


def _fd_of(addr):
    """The memfd behind allocator memory at ``addr``."""
    from tidewire.mooncake_store.values import shared_region, shared_regions

    return shared_regions()[shared_region(addr, 1)[0]][2]


def test_a_dead_real_client_fails_calls_at_once(cluster):
    _, real = cluster
    d = dummy(real)
    assert d.put("dead/a", b"x") == 0
    real.stop()
    t0 = time.monotonic()
    assert d.put("dead/b", b"y") == -900
    assert d.get("dead/a") == b""
    assert d.batch_is_exist(["dead/a"]) == [-1]
    assert time.monotonic() - t0 < 5
    assert "gone" in d.last_error
    d.close()


def test_a_dead_dummy_leaves_the_real_client_serving(cluster):
    m, real = cluster
    code = CHILD.replace("print(json.dumps", "import os; os._exit(0); print(json.dumps")
    normal = connect(m)
    normal.put("child/in", b"z" * 1000)
    for _ in range(3):  # each dies holding a mapping the real client must drop
        subprocess.run([sys.executable, "-c", code, real.address], input=(b"z" * 1000).hex(),
                       text=True, timeout=120, capture_output=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
    d = dummy(real)
    assert d.get("child/in") == b"z" * 1000
    d.close()
    normal.close()
