"""The Store stress harness's ground (see store_stress.py): sizes of the two variants, values
derived from (key, version) and their checks, page-aligned buffers, process stats, the two
targets (tidewire or the Mooncake wheel, each with its master) and case results."""

import ctypes
import hashlib
import json
import mmap
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter


HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYDIR)
# The entry point: agents and isolated cases run it (``--agent``, ``--run-case``).
SCRIPT = os.path.join(HERE, "store_stress.py")
for _p in (HERE, PYDIR):
    if _p not in sys.path:
        sys.path.insert(0, _p)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
RESULT_MARK = "STORE-STRESS-RESULT "
# A single call that takes longer than this is a hang.
HANG_S = 20.0


def long_mode():
    return os.environ.get("TIDEWIRE_STORE_STRESS", "") == "long"


class Profile:
    """Sizes and durations of the two variants."""

    def __init__(self, long):
        self.long = long
        self.mix_seconds = 45 if long else 10
        self.hot_upserts = 1000 if long else 200
        self.evict_total = (2 * GiB) if long else (512 * MiB)
        self.cycles = 20000 if long else 2000
        self.reconnects = 100 if long else 10
        self.big = GiB if long else 256 * MiB
        self.batch_threads = 64
        self.batch_procs = 8 if long else 0  # 0: the threads run in the case process itself
        self.batch_seconds = 60 if long else 12
        # Whole-case wall-clock bound (asserted by the tests) and the kill-after bound.
        self.case_limit = 300 if long else 60
        self.case_timeout = 540 if long else 100


# ------------------------------------------------------------------------------------------
# Values derived from (key, version)
# ------------------------------------------------------------------------------------------
MAGIC = b"TWSS"
_HEAD = struct.Struct("<4sQQQ")
HEADER = _HEAD.size + 4  # + CRC32 of the packed fields = 32 bytes
POOL_SIZE = 4 * MiB
_POOL = random.Random(0x5EED5).randbytes(POOL_SIZE)
_POOL2 = _POOL + _POOL
_key_hashes = {}


def key_hash(key):
    h = _key_hashes.get(key)
    if h is None:
        h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
        if len(_key_hashes) < 100000:
            _key_hashes[key] = h
    return h


def _mix(x):
    x = (x ^ (x >> 33)) * 0xFF51AFD7ED558CCD & 0xFFFFFFFFFFFFFFFF
    x = (x ^ (x >> 33)) * 0xC4CEB9FE1A85EC53 & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 33)


def _offset(key, version):
    return _mix(key_hash(key) ^ _mix(version + 1)) % POOL_SIZE


def header(key, version, n):
    head = _HEAD.pack(MAGIC, key_hash(key), version, n)
    return head + struct.pack("<I", zlib.crc32(head))


def value(key, version, n):
    """The whole value of ``key`` at ``version``, ``n`` bytes (n >= 32, n <= 4 MiB + 32)."""
    assert HEADER <= n <= POOL_SIZE + HEADER, n
    o = _offset(key, version)
    return header(key, version, n) + _POOL2[o:o + n - HEADER]


def value_pieces(key, version, n):
    """(offset, bytes) pieces of the value, each at most 4 MiB: for values of any size."""
    yield 0, header(key, version, n)
    o, pos = _offset(key, version), 0
    rest = n - HEADER
    while pos < rest:
        take = min(POOL_SIZE, rest - pos)
        start = (o + pos) % POOL_SIZE
        yield HEADER + pos, _POOL2[start:start + take]
        pos += take


def parse_header(key, head, n):
    """(version, None) when ``head`` is a valid header of ``key`` for an ``n``-byte value,
    else (None, what is wrong)."""
    if n < HEADER or len(head) < HEADER:
        return None, f"short value ({n} bytes)"
    magic, kh, version, length = _HEAD.unpack_from(head)
    if magic != MAGIC:
        return None, "no value header (foreign or unwritten bytes)"
    if struct.unpack_from("<I", head, _HEAD.size)[0] != zlib.crc32(head[:_HEAD.size]):
        return None, "torn header"
    if kh != key_hash(key):
        return None, "another key's value"
    if length != n:
        return None, f"length {n}, header says {length}"
    return version, None


def check(key, data):
    """(version, None) if ``data`` is exactly some version of ``key``, else (None, why)."""
    version, err = parse_header(key, data[:HEADER], len(data))
    if err:
        return None, err
    o = _offset(key, version)
    if data[HEADER:] != _POOL2[o:o + len(data) - HEADER]:
        return None, f"torn or garbled body (version {version:#x}, {len(data)} bytes)"
    return version, None


def check_in(buf, off, key, n, version=None):
    """Checks an ``n``-byte value at ``buf``+``off`` piece by piece (for values of any size)."""
    got, err = parse_header(key, buf.get(off, HEADER), n)
    if err:
        return None, err
    if version is not None and got != version:
        return None, f"version {got:#x}, want {version:#x}"
    for pos, piece in value_pieces(key, got, n):
        if pos and buf.get(off + pos, len(piece)) != piece:
            return None, f"bytes differ in [{pos}, {pos + len(piece)})"
    return got, None


def write_into(buf, off, key, version, n):
    for pos, piece in value_pieces(key, version, n):
        buf.put(off + pos, piece)


class Buf:
    """Anonymous, page-aligned memory with a stable address."""

    def __init__(self, size):
        self.size = size
        self.mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._view = ctypes.c_char.from_buffer(self.mm)
        self.addr = ctypes.addressof(self._view)

    def put(self, off, data):
        ctypes.memmove(self.addr + off, data, len(data))

    def get(self, off, n):
        return ctypes.string_at(self.addr + off, n)

    def zero(self, off=0, n=None):
        ctypes.memset(self.addr + off, 0, self.size - off if n is None else n)

    def close(self):
        self._view = None
        try:
            self.mm.close()
        except BufferError:
            pass


def proc_stats(pid="self"):
    """RSS (bytes), open fds and threads of a process."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    return {"rss": rss, "fds": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": len(os.listdir(f"/proc/{pid}/task"))}


# ------------------------------------------------------------------------------------------
# Targets: tidewire (tidewire-master + tidewire.store) or Mooncake (mooncake_master + wheel)
# ------------------------------------------------------------------------------------------
def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class MooncakeMaster:
    """A mooncake_master on 127.0.0.1, stopped by PID (same surface as store_util.Master)."""

    def __init__(self, *flags, port=0):
        exe = os.path.join(os.path.dirname(sys.executable), "mooncake_master")
        if not os.path.exists(exe):
            exe = shutil.which("mooncake_master")
        if not exe:
            raise RuntimeError("mooncake_master not found (install the Mooncake wheel)")
        self.port = port or _free_port()
        self.metrics_port = _free_port()
        args = [exe, "--rpc_address=127.0.0.1", f"--rpc_port={self.port}",
                "--metrics_host=127.0.0.1", f"--metrics_port={self.metrics_port}", *flags]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.address = f"127.0.0.1:{self.port}"
        self.metadata = "P2PHANDSHAKE"
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mooncake_master exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("mooncake_master did not listen within 30 s")
                time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


class Target:
    def __init__(self, name):
        self.name = name
        if name == "tidewire":
            import store_util
            from tidewire.store import MooncakeDistributedStore, ReplicateConfig

            if not os.path.exists(store_util.MASTER_BIN):
                raise RuntimeError(f"{store_util.MASTER_BIN} is missing: run `make build` first")
            self._master = store_util.Master
        elif name == "mooncake":
            os.environ.setdefault("GLOG_minloglevel", "2")
            from mooncake.store import MooncakeDistributedStore, ReplicateConfig

            self._master = MooncakeMaster
        else:
            raise ValueError(f"unknown target {name!r}")
        self.Store = MooncakeDistributedStore
        self.Config = ReplicateConfig

    def master(self, *flags, port=0):
        return self._master(*flags, port=port)

    def config(self, hard_pin=False, replicas=1):
        c = self.Config()
        c.replica_num = replicas
        c.with_hard_pin = hard_pin
        return c

    def connect(self, address, metadata, segment, local_buffer=64 * MiB):
        s = self.Store()
        rc = s.setup("127.0.0.1", metadata, segment, local_buffer, "tcp", "", address)
        if rc != 0:
            raise RuntimeError(f"setup returned {rc}")
        return s


# ------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------
class Result:
    """pass/fail, counts, numbers worth reporting, and what went wrong."""

    MAX_PROBLEMS = 25

    def __init__(self, case, target):
        self.case, self.target = case, target
        self.ok = True
        self.problems = []
        self.dropped = 0
        self.kinds = {}  # workload problems: kind -> [count, examples]
        self.counts = Counter()
        self.info = {}
        self.seconds = 0.0
        self._lock = threading.Lock()

    def fail(self, msg):
        with self._lock:
            self.ok = False
            if len(self.problems) < self.MAX_PROBLEMS:
                self.problems.append(msg)
            else:
                self.dropped += 1

    def expect(self, cond, msg):
        if not cond:
            self.fail(msg)
        return bool(cond)

    def merge(self, part, prefix=""):
        """Adds a workload's result (a dict from ``Tally.as_dict``)."""
        with self._lock:
            for k, v in part.get("counts", {}).items():
                self.counts[prefix + k] += v
            for kind, (n, ex) in part.get("kinds", {}).items():
                self.ok = False
                have = self.kinds.setdefault(prefix + kind, [0, []])
                have[0] += n
                have[1] = (have[1] + ex)[:2]

    def as_dict(self):
        kinds = sorted(self.kinds.items(), key=lambda kv: -kv[1][0])
        problems = self.problems + [f"{k}: {n} time(s), e.g. {'; '.join(ex)}"
                                    for k, (n, ex) in kinds]
        return {"case": self.case, "target": self.target, "ok": self.ok,
                "seconds": round(self.seconds, 2), "problems": problems,
                "dropped_problems": self.dropped, "counts": dict(self.counts), "info": self.info}


class Tally:
    """Per-thread counters and problems by kind (merged at the end)."""

    def __init__(self):
        self.counts = Counter()
        self.kinds = {}

    def bad(self, kind, detail=""):
        have = self.kinds.setdefault(kind, [0, []])
        have[0] += 1
        if len(have[1]) < 2:
            have[1].append(detail)

    def add(self, other):
        self.counts.update(other.counts)
        for kind, (n, ex) in other.kinds.items():
            have = self.kinds.setdefault(kind, [0, []])
            have[0] += n
            have[1] = (have[1] + ex)[:2]

    def as_dict(self):
        return {"counts": dict(self.counts), "kinds": self.kinds}


def describe(r):
    """One paragraph about a result dict (for assertion messages)."""
    lines = [f"{r['case']} on {r['target']}: {'PASS' if r['ok'] else 'FAIL'} in {r['seconds']} s"]
    for p in r["problems"]:
        lines.append(f"  - {p}")
    if r.get("dropped_problems"):
        lines.append(f"  - ... and {r['dropped_problems']} more")
    if r.get("info"):
        lines.append(f"  info: {json.dumps(r['info'], sort_keys=True)}")
    if r.get("counts"):
        lines.append(f"  counts: {json.dumps(dict(sorted(r['counts'].items())))}")
    return "\n".join(lines)
