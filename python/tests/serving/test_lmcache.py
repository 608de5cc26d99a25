"""LMCache's own ``mooncakestore://`` remote backend (PyPI ``lmcache`` 0.5.6: its
``MooncakestoreConnector`` and ``MooncakeLookupClient``, unchanged) on tidewire, and on the real
Mooncake wheel as the control.

lmcache_driver.py drives LMCache's ``StorageManager`` (``LocalCPUBackend`` plus a
``RemoteBackend`` with ``remote_url = mooncakestore://HOST:PORT/``) in both of the connector's
modes: ``meta`` (LMCache's default, ``save_chunk_meta`` True: ``put_parts`` and
``batch_get_buffer``, whose handles LMCache reads through ``memoryview(h)``,
``torch.frombuffer(h)`` and ``len(h)``) and ``zerocopy`` (``batch_put_from`` /
``batch_get_into`` on the CPU pool that the connector registers). A writer process (the segment
owner) ``batched_put``s 3 requests of 64 chunks of 1 MiB and one of a full and a 44-token
chunk, waiting until each is visible; a reader process (no segment) checks misses, then
``batched_contains``, ``get_block_mapping`` and ``batched_get`` per request with every byte,
shape, dtype and format compared, LMCache's lookup client, prefix hits, the partial chunk, and
removal (the connector offers no remove or clear: checked to remove nothing) with the local CPU
cache cleared while the remote copy stays. The TIME figures (medians over the 3 requests of
64 MiB) are printed.

- tidewire: a tidewire-master on a free port; LMCache's ``master_server_address`` key is
  honoured, so the port is any.
- Mooncake: its master and clients bind every address, so they run in a private network
  namespace of this test (this thread enters it to start them; they stay in it). Mooncake
  ignores LMCache's ``master_server_address`` setup key and dials 127.0.0.1:50051, so its master
  listens on 50051 there; a probe records the quirk (a client pointed elsewhere still reaches
  the master on 50051). A check that Mooncake fails is reported as an xfail with its reason.

No stand-in: LMCache runs on its own CPU device (``StubCPUDevice``) and its pure-Python
pinned-memory fallback; nothing on this path needs a GPU.

The drivers run in the serving environment (``.venv-serving``, Python 3.11 with torch and the
lmcache wheel plus requirements-lmcache.txt installed with ``--no-deps``);
``TIDEWIRE_SERVING_PYTHON`` names another interpreter. Without it the test is skipped with the
reason, unless ``TIDEWIRE_REQUIRE_SERVING=1``, which makes it fail instead.
"""

import ctypes
import json
import os
import subprocess
import threading

import pytest

from conftest import REPO
from serving_util import serving_test_deadline  # noqa: F401 (autouse)
from store_util import MASTER_BIN, Master

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "lmcache_driver.py")
SERVING_PYTHON = (os.environ.get("TIDEWIRE_SERVING_PYTHON")
                  or os.path.join(REPO, ".venv-serving", "bin", "python"))
REQUIRE = os.environ.get("TIDEWIRE_REQUIRE_SERVING") == "1"
MOONCAKE_PORT = 50051  # where Mooncake's client dials, whatever LMCache passes
NO_MASTER = "127.0.0.1:1"  # nothing listens on port 1
MiB = 1 << 20
CHUNKS, ROUNDS = 64, 3
KEYS = ROUNDS * CHUNKS + 2
PARTIAL_BYTES = MiB + MiB * 44 // 256


def _probe(code):
    if not os.path.exists(SERVING_PYTHON):
        return f"no serving environment at {SERVING_PYTHON}"
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    try:
        p = subprocess.run([SERVING_PYTHON, "-c", code], capture_output=True, text=True,
                           timeout=300, env=env)
    except subprocess.TimeoutExpired:
        return f"{SERVING_PYTHON} took over 300 s to import LMCache"
    if p.returncode != 0:
        return f"{SERVING_PYTHON} cannot run LMCache's backend: {p.stderr.strip()[-400:]}"
    return None


_LMCACHE = ("import torch, lmcache.v1.storage_backend.storage_manager, "
            "lmcache.v1.storage_backend.connector.mooncakestore_connector, "
            "lmcache.v1.lookup_client.mooncake_lookup_client")
_REASON = _probe(_LMCACHE)
if _REASON is None and not os.path.exists(MASTER_BIN):
    _REASON = f"{MASTER_BIN} is missing: build tidewire-master first"


def _mooncake_reason():
    if _REASON is not None:
        return _REASON
    if os.geteuid() != 0:
        return "a private network namespace for Mooncake needs root"
    return _probe("import mooncake.store")






def need(reason):
    if reason:
        if REQUIRE:
            pytest.fail(f"TIDEWIRE_REQUIRE_SERVING=1 but {reason}")
        pytest.skip(reason)


# ------------------------------------------------------------------------------------------
# A private network namespace, entered by this thread only while processes are started in it
# ------------------------------------------------------------------------------------------
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _thread_netns():
    return os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


class PrivateNetns:
    """A network namespace with only loopback up. ``with ns:`` moves the calling thread into it
    (the first time creates it); processes started there stay in it after the block."""

    def __init__(self):
        self.fd = None

    def __enter__(self):
        self.home = _thread_netns()
        try:
            if self.fd is None:
                if _libc.unshare(CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")
                self.fd = _thread_netns()
                subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=30)
            else:
                _setns(self.fd)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        try:
            _setns(self.home)
        finally:
            os.close(self.home)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


# ------------------------------------------------------------------------------------------
# The driver processes
# ------------------------------------------------------------------------------------------
class Driver:
    def __init__(self, store, master, role, mode="meta", metrics_port=0, extra=()):
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # the driver sets its own path (the shim first for tidewire)
        env["PYTHONHASHSEED"] = "0"
        env["TIDEWIRE_LIB"] = env.get("TIDEWIRE_LIB") or os.path.join(
            REPO, "target", "release", "libtidewire.so")
        cmd = [SERVING_PYTHON, DRIVER, "--store", store, "--master", master, "--mode", mode]
        if metrics_port:
            cmd += ["--metrics-port", str(metrics_port)]
        self.name = f"{store} {mode} {role}"
        self.proc = subprocess.Popen(cmd + list(extra) + [role], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=env)
        self.err = []
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()

    def tail(self):
        return "".join(self.err)[-3000:]

    def read(self, timeout=240):
        """The next step; a driver's {"error": ...} raises DriverError."""
        box = {}

        def reader():
            box["line"] = self.proc.stdout.readline()

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        t.join(timeout)
        if "line" not in box:
            self.kill()
            raise AssertionError(f"{self.name}: silent for {timeout} s\n{self.tail()}")
        if not box["line"]:
            self.proc.wait(timeout=30)
            raise AssertionError(f"{self.name}: exited {self.proc.returncode}\n{self.tail()}")
        msg = json.loads(box["line"])
        if "error" in msg:
            raise DriverError(f"{self.name}: {msg['error']}", self.tail())
        return msg

    def expect(self, step, timeout=240):
        msg = self.read(timeout)
        assert msg.get("step") == step, f"{self.name}: expected step {step!r}, got {msg}"
        return msg

    def send(self, text):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def finish(self, timeout=120):
        self.proc.stdin.close()
        return self.proc.wait(timeout=timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class DriverError(AssertionError):
    def __init__(self, what, stderr):
        super().__init__(f"{what}\n{stderr}")
        self.what = what


def run_pair(store, mode, master, metrics_port, spawn, writer_args=(), after_written=None):
    """Writer, then reader; every step checked. ``spawn(fn)`` starts a process (in the right
    network namespace); ``writer_args`` go to the writer's command line; ``after_written()``
    runs once the writer is ready, before the reader starts. Returns the TIME figures."""
    writer = reader = None
    try:
        writer = spawn(lambda: Driver(store, master, "writer", mode, metrics_port, writer_args))
        setup = writer.expect("setup")
        assert setup["store_module"] == f"{store}.store", setup
        assert setup["connector"] == "MooncakestoreConnector", setup
        assert setup["backends"] == ["LocalCPUBackend", "RemoteBackend"], setup
        assert setup["save_chunk_meta"] == (mode == "meta"), setup
        assert setup["remote_metadata_bytes"] == 28, setup
        for r in range(ROUNDS):
            put = writer.expect("put")
            assert (put["round"], put["chunks"], put["mib"]) == (r, CHUNKS, CHUNKS), put
        assert writer.expect("reput")["chunks"] == CHUNKS
        assert writer.expect("put_partial")["chunks"] == 2
        assert writer.expect("master_keys")["listed"] == KEYS
        writer.expect("ready")
        if after_written:
            after_written()

        reader = spawn(lambda: Driver(store, master, "reader", mode))
        reader.send("ready\n")
        setup = reader.expect("setup")
        assert setup["store_module"] == f"{store}.store", setup
        assert reader.expect("lookup_client")["store_module"] == f"{store}.store"
        assert reader.expect("misses")["keys"] == 8
        for r in range(ROUNDS):
            got = reader.expect("get")
            assert (got["round"], got["chunks"], got["bytes_checked"]) == (r, CHUNKS,
                                                                          CHUNKS * MiB), got
        part = reader.expect("partial")
        assert part["bytes_checked"] == PARTIAL_BYTES and part["tokens"] == [256, 44], part
        rm = reader.expect("remove")
        assert rm["remote_remove_offered"] is False, rm
        assert (rm["remote_removed"], rm["remote_cleared"]) == (0, 0), rm
        assert rm["local_hits_before"] == CHUNKS and rm["local_cleared_tokens"] > 0, rm
        assert rm["remote_hits_after"] == ROUNDS * CHUNKS, rm
        reader.expect("closed")
        rtime = reader.expect("time")
        assert reader.finish() == 0, reader.tail()

        writer.proc.stdin.close()
        writer.expect("closed", timeout=120)
        wtime = writer.expect("time")
        assert writer.proc.wait(timeout=60) == 0, writer.tail()
        figures = {"store": store, "mode": mode, "batch": f"{CHUNKS} x 1 MiB",
                   "put_ms": wtime["put_ms"], "contains_ms": rtime["contains_ms"],
                   "block_mapping_ms": rtime["block_mapping_ms"], "get_ms": rtime["get_ms"],
                   "lookup_ms": rtime["lookup_ms"], "put_rounds_ms": wtime["put_rounds_ms"],
                   "get_rounds_ms": rtime["get_rounds_ms"]}
        print("LMCACHE TIME " + json.dumps(figures), flush=True)
        return figures
    finally:
        for d in (reader, writer):
            if d:
                d.kill()


MODES = ["meta", "zerocopy"]
# Pings of an idle writer must not lapse while the other process starts LMCache on 2 cores.
CLIENT_TTL = "--client_ttl=60"


@pytest.mark.parametrize("mode", MODES)
def test_lmcache_mooncakestore_on_tidewire(mode, record_property):
    need(_REASON)
    m = Master(CLIENT_TTL)
    try:
        # Any port: tidewire honours LMCache's master_server_address key.
        assert m.port != MOONCAKE_PORT
        figures = run_pair("tidewire", mode, m.address, m.metrics_port, lambda start: start())
        record_property("time_ms", json.dumps(figures))
    finally:
        m.stop()


@pytest.mark.parametrize("mode", MODES)
def test_lmcache_mooncakestore_on_mooncake_control(mode, record_property):
    need(_mooncake_reason())
    import store_stress  # its mooncake_master starter

    ns = PrivateNetns()
    m = None
    try:
        with ns:
            try:
                # The wheel's mooncake_master beside this interpreter, or on PATH.
                m = store_stress.MooncakeMaster(CLIENT_TTL, port=MOONCAKE_PORT)
            except RuntimeError as e:
                if "not found" not in str(e):
                    raise
                need(str(e))

        def spawn(start):
            with ns:
                return start()

        try:
            # Mooncake's quirk, recorded: LMCache's master_server_address names a port where
            # no master listens, and the client still reaches the master (on 50051).
            probe = spawn(lambda: Driver("mooncake", NO_MASTER, "probe"))
            try:
                got = probe.expect("probe", timeout=150)
            finally:
                probe.kill()
            quirk = ("ignores master_server_address (dials 127.0.0.1:50051)"
                     if got["connected"] else "honours master_server_address")
            print(f"LMCACHE MOONCAKE QUIRK {quirk}: {json.dumps(got)}", flush=True)
            record_property("mooncake_master_server_address", quirk)
            figures = run_pair("mooncake", mode, m.address, m.metrics_port, spawn)
            record_property("time_ms", json.dumps(figures))
        except DriverError as e:
            record_property("mooncake_fails", e.what)
            pytest.xfail(f"Mooncake itself fails: {e.what}")
    finally:
        if m:
            m.stop()
        ns.close()
