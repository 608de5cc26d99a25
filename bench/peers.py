"""The two ends of every transfer: an initiator engine with a local buffer, and a target engine
with a registered remote buffer, either in this process or in a child process of its own.

Both engines are driven through the same Mooncake-style Python class, chosen by name:
mooncake.engine.TransferEngine (the PyPI wheel) or tidewire.engine.TransferEngine. Both run in
P2P-handshake mode over TCP and name themselves "127.0.0.1:<rpc port>".
"""
import ctypes
import importlib
import json
import mmap
import os
import select
import subprocess
import sys
import time

from meter import Meter

HOST = "127.0.0.1"
ENGINES = {"mooncake": "mooncake.engine", "tidewire": "tidewire.engine"}
INITIATOR_FILL = 0x11
TARGET_FILL = 0x5A


class Buffer:
    """Anonymous memory at a fixed address, every page touched before use."""

    def __init__(self, size, fill):
        self.size = size
        self._map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._view = ctypes.c_char.from_buffer(self._map)
        self.addr = ctypes.addressof(self._view)
        ctypes.memset(self.addr, fill, size)


def open_engine(kind):
    engine = importlib.import_module(ENGINES[kind]).TransferEngine()
    rc = engine.initialize(f"{HOST}:0", "P2PHANDSHAKE", "tcp", "")
    if rc != 0:
        raise RuntimeError(f"{kind}: initialize returned {rc}")
    return engine


def register(engine, buf):
    rc = engine.register_memory(buf.addr, buf.size)
    if rc != 0:
        raise RuntimeError(f"register_memory({buf.size} bytes) returned {rc}")


def serve_target(kind, size, max_seconds):
    """Child-process role: register a buffer, print where it is, hold it until stdin closes."""
    engine = open_engine(kind)
    buf = Buffer(size, TARGET_FILL)
    register(engine, buf)
    print(json.dumps({"port": engine.get_rpc_port(), "addr": buf.addr, "pid": os.getpid()}),
          flush=True)
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sys.stdin], [], [], 1.0)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break
    engine.unregister_memory(buf.addr)
    os._exit(0)  # skip interpreter teardown: engine destructors may block


class Pair:
    """Initiator engine + local buffer, and the target's name and remote buffer address.

    Attributes the workloads use: engine, target (segment name), local (address),
    remote (address), size (bytes on each side), meter.
    """

    def __init__(self, engine, target_engine, mode, size, script, target_log=None,
                 target_max_seconds=3600):
        self.size = size
        self._child = None
        self.engine = open_engine(engine)
        self._local_buf = Buffer(size, INITIATOR_FILL)
        register(self.engine, self._local_buf)
        self.local = self._local_buf.addr
        if mode == "same-process":
            self._target_engine = open_engine(target_engine)
            self._remote_buf = Buffer(size, TARGET_FILL)
            register(self._target_engine, self._remote_buf)
            self.target = f"{HOST}:{self._target_engine.get_rpc_port()}"
            self.remote = self._remote_buf.addr
            self.meter = Meter()
        else:
            info = self._start_child(script, target_engine, size, target_log, target_max_seconds)
            self.target = f"{HOST}:{info['port']}"
            self.remote = info["addr"]
            self.meter = Meter(self._child.pid)

    def _start_child(self, script, kind, size, log, max_seconds):
        stderr = open(log, "ab") if log else subprocess.DEVNULL
        self._child = subprocess.Popen(
            [sys.executable, script, "--role", "target", "--target-engine", kind,
             "--buf-bytes", str(size), "--target-max-seconds", str(max_seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        ready, _, _ = select.select([self._child.stdout], [], [], 120)
        line = self._child.stdout.readline() if ready else b""
        if not line:
            self.close()
            raise RuntimeError("target process did not report its port within 120 s")
        return json.loads(line)

    def close(self):
        """Stop the target child (the only process this class starts)."""
        child, self._child = self._child, None
        if child is None:
            return
        child.stdin.close()
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    def round_trip_check(self, size=1 << 20):
        """WRITE a pattern, clear it locally, READ it back: the pair works and moves the bytes."""
        ref = pattern(size, 1)
        ctypes.memmove(self.local, ref, size)
        wrc = self.engine.transfer_sync_write(self.target, self.local, self.remote, size)
        ctypes.memset(self.local, 0, size)
        rrc = self.engine.transfer_sync_read(self.target, self.local, self.remote, size)
        ok = wrc == 0 and rrc == 0 and ctypes.string_at(self.local, size) == ref
        return {"write_rc": wrc, "read_rc": rrc, "data_ok": ok}


def pattern(size, seed):
    """Deterministic bytes; the period (251, prime) never lines up with a block size."""
    period = bytes((i * 37 + seed * 101 + 7) % 251 for i in range(251))
    reps = size // len(period) + 1
    return (period * reps)[:size]
