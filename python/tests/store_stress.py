"""Stress and fault cases for the Store, runnable against tidewire or the real Mooncake wheel.

Every value is derived from (key, version): a 32-byte header (magic, a hash of the key, the
version, the length, a CRC of those) and then bytes cut from a fixed random pool at an offset
that depends on key and version. A read is checked byte for byte: it must be a miss (or an
error code), or exactly one version of that key. A torn value, another key's value or a wrong
length is a failure.

Cases (short variant; ``TIDEWIRE_STORE_STRESS=long`` or ``--long`` for the long one):

=====================  ==========================================================================
mixed_threads          8 threads, shared keys, put/upsert/put_from/upsert_from/get/get_into/
                       batch_get_into/remove/is_exist/get_size; then every key read back and
                       60 % of the segments filled with pinned values after remove_all
mixed_processes        the same from 4 processes (2 threads each), each with a segment
hot_upserts            2 threads x 200 (long: 1,000) upserts of one 1 MiB key and a reader, in
                       a 64 MiB segment: no -200, and the whole segment is free after remove_all
eviction               512 MiB (long: 2 GiB) of 1 MiB puts into a 256 MiB segment; survivors
                       checked; after remove_all 75 % of the segment fits pinned values again
kill_owner             a segment owner SIGKILLed while puts go to it: errors, no hangs, puts
                       work again within client_ttl + 8 s; keys with 2 replicas stay readable
kill_reader            a process looping get_into on a 64 MiB key SIGKILLed mid-read: the other
                       readers are unaffected and the key becomes evictable after the lease
kill_master            the master SIGKILLed (no HA) and restarted on the same port while both
                       clients work: errors, no hangs, recovery within 20 s, both segments back
cycles                 2,000 (long: 20,000) put/get/get_into/remove cycles after a warm-up, then
                       10 (100) setup/close cycles: this process's open fds and threads grow by
                       at most 2, its RSS by at most 16 MiB (long: 32 MiB; 32/64 MiB over the
                       setup/close cycles); the master's fds by at most 2, its RSS 16 (32) MiB
big_value              a 256 MiB (long: 1 GiB) value put_from, get_into, batch_get_into,
                       upserted in place and read again, every byte checked
batch_concurrency      64 threads (long: 512 in 8 processes) of batch_put_from/put_batch/
                       batch_upsert_from/batch_get_into/get_batch/batch_is_exist/batch_remove on
                       their own keys: every code and every byte exactly as expected
=====================  ==========================================================================

Each case runs in its own process group (``run_isolated``), so a crash or a hang is reported
as that case's failure and every process it started is killed. Script mode prints a table::

    python python/tests/store_stress.py --target tidewire|mooncake [--cases a,b] [--long]

Mooncake's listeners bind every address, so ``--target mooncake`` re-runs itself inside a
private network namespace (``unshare -n``, loopback up) unless it already is in one.
"""

import argparse
import ctypes
import hashlib
import json
import mmap
import os
import queue
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYDIR)
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


# ------------------------------------------------------------------------------------------
# Agents: client processes of the same target driven by JSON lines on stdin/stdout
# ------------------------------------------------------------------------------------------
class Agent:
    """A client process (this file with ``--agent``) holding a segment and running commands."""

    def __init__(self, target, master, segment, local_buffer=64 * MiB):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [PYDIR, HERE] + [p for p in [env.get("PYTHONPATH")] if p])
        conf = {"target": target.name, "master": master.address, "metadata": master.metadata,
                "segment": segment, "local_buffer": local_buffer}
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--agent",
                                      json.dumps(conf)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env)
        self.pid = self.proc.pid
        self._lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.ready = self.read(90)
        if not self.ready.get("ready"):
            raise RuntimeError(f"agent did not start: {self.ready}")
        self.hostname = self.ready.get("hostname", "")

    def _pump(self):
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    self._lines.put(json.loads(line))
                except ValueError:
                    pass
        self._lines.put({"ready": False, "error": f"agent exited ({self.proc.wait()})",
                         "exited": True})

    def send(self, cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def read(self, timeout):
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            return {"error": f"agent did not answer within {timeout} s", "timeout": True}

    def call(self, cmd, timeout):
        self.send(cmd)
        return self.read(timeout)

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except Exception:
                self.kill()


def agent_main(conf):
    target = Target(conf["target"])
    try:
        s = target.connect(conf["master"], conf["metadata"], conf["segment"],
                           conf["local_buffer"])
    except Exception as e:
        print(json.dumps({"ready": False, "error": str(e)}), flush=True)
        return
    print(json.dumps({"ready": True, "hostname": s.get_hostname(), "pid": os.getpid()}),
          flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("cmd")
        try:
            if op == "mixed":
                out = mixed_workload(s, target, **cmd)
            elif op == "batch":
                out = batch_workload(s, target, **cmd)
            elif op == "probe":
                out = probe(s, **cmd)
            elif op == "read_loop":
                read_loop(s, **cmd)  # never returns
            elif op == "stats":
                out = proc_stats()
            else:
                out = {"error": f"unknown command {op}"}
        except Exception:
            out = {"counts": {},
                   "kinds": {"agent exception": [1, [traceback.format_exc(limit=3)]]}}
        print(json.dumps(out), flush=True)
    s.close()


def read_loop(s, key, size, version):
    """get_into ``key`` in a loop until killed; says so after the first good read."""
    buf = Buf(size)
    s.register_buffer(buf.addr, size)
    told, reads = False, 0
    while True:
        r = s.get_into(key, buf.addr, size)
        if r == size:
            reads += 1
            if not told:
                got, err = check_in(buf, 0, key, size, version)
                print(json.dumps({"reading": True, "error": err}), flush=True)
                told = True
        elif not told:
            print(json.dumps({"reading": False, "rc": r}), flush=True)
            told = True


def probe(s, prefix, n=4, size=16 * KiB, within=30.0):
    """Puts and reads back ``n`` fresh keys until that works; how long it took."""
    t0 = time.monotonic()
    attempt, last = 0, None
    while True:
        attempt += 1
        keys = [f"{prefix}/{attempt}/{i}" for i in range(n)]
        codes = []
        for k in keys:
            rc = s.upsert(k, value(k, attempt, size))
            if rc == 0:
                v = s.get(k)
                rc = 0 if v and check(k, v)[1] is None and check(k, v)[0] == attempt else -1
            codes.append(rc)
        if all(c == 0 for c in codes):
            return {"ok": True, "after": time.monotonic() - t0, "attempts": attempt}
        last = codes
        if time.monotonic() - t0 > within:
            return {"ok": False, "after": time.monotonic() - t0, "last": last}
        time.sleep(0.2)


# ------------------------------------------------------------------------------------------
# Workloads (run in the case process or in agents)
# ------------------------------------------------------------------------------------------
MIX_SIZES = (4 * KiB, 64 * KiB, 192 * KiB)
MIX_SLOT = 256 * KiB
# Codes that are real answers under contention on one key, with why:
#   -601 INVALID_WRITE: this write was pre-empted by a newer write of the key (Mooncake too);
#   -703 REPLICA_IS_NOT_READY: the key is being written; -704: removed meanwhile;
#   -714 OBJECT_REPLICA_BUSY: a same-size upsert while a read holds the replica (Mooncake).
MIX_WRITE_OK = {0, -601, -703, -704, -714}
MIX_READ_MISS = {-704, -703}
MIX_REMOVE_OK = {0, -704, -706, -703, -714}
MIX_OPS = ("upsert", "upsert_from", "put", "put_from", "get", "get_into", "batch_get_into",
           "remove", "is_exist", "get_size")
MIX_WEIGHTS = (22, 10, 8, 5, 18, 15, 6, 8, 4, 4)


def mix_size(key, version):
    return MIX_SIZES[_mix(key_hash(key) * 31 + version) % len(MIX_SIZES)]


def _valid_version(v, writers):
    return (v >> 32) < writers and (v & 0xFFFFFFFF) >= 1


def mixed_workload(s, target, keys, writer_ids, writers, seconds, seed, lease_force=0.5):
    """Threads (one per writer id) doing mixed calls on shared ``keys`` for ``seconds``.
    Version = writer_id << 32 | counter, so versions are unique across threads and processes."""
    deadline = time.monotonic() + seconds
    parts = []

    def verify(t, op, key, data):
        got, err = check(key, data)
        if err:
            t.bad(f"{op}: {err}", key)
        elif not _valid_version(got, writers):
            t.bad(f"{op}: a version that was never written", f"{key} {got:#x}")
        else:
            t.counts[f"{op}:verified"] += 1
            t.counts["bytes_verified"] += len(data)

    def worker(wid):
        t = Tally()
        parts.append(t)
        rnd = random.Random(seed * 1000 + wid)
        buf = Buf(8 * MIX_SLOT)
        try:
            if s.register_buffer(buf.addr, buf.size) != 0:
                t.bad("register_buffer failed")
                return
            counter = 0
            while time.monotonic() < deadline:
                key = rnd.choice(keys)
                op = rnd.choices(MIX_OPS, MIX_WEIGHTS)[0]
                t.counts[op] += 1
                if op in ("upsert", "put", "upsert_from", "put_from"):
                    counter += 1
                    ver = (wid << 32) | counter
                    n = mix_size(key, ver)
                    if op in ("upsert", "put"):
                        rc = getattr(s, op)(key, value(key, ver, n))
                    else:
                        buf.put(0, value(key, ver, n))
                        rc = getattr(s, op)(key, buf.addr, n)
                    t.counts[f"{op}:{rc}"] += 1
                    if rc not in MIX_WRITE_OK:
                        t.bad(f"{op} -> {rc}", f"{key} {n} B")
                elif op == "get":
                    v = s.get(key)
                    if v:
                        verify(t, op, key, v)
                    else:
                        t.counts["get:miss"] += 1
                elif op == "get_into":
                    buf.zero(MIX_SLOT, HEADER)  # bytes a read reports but never wrote show
                    r = s.get_into(key, buf.addr + MIX_SLOT, MIX_SLOT)
                    if r > 0:
                        verify(t, op, key, buf.get(MIX_SLOT, r))
                    else:
                        t.counts[f"get_into:{r}"] += 1
                        if r not in MIX_READ_MISS:
                            t.bad(f"get_into -> {r}", key)
                elif op == "batch_get_into":
                    ks = rnd.sample(keys, 3)
                    ptrs = [buf.addr + (2 + i) * MIX_SLOT for i in range(3)]
                    for p in ptrs:
                        buf.zero(p - buf.addr, HEADER)
                    res = s.batch_get_into(ks, ptrs, [MIX_SLOT] * 3)
                    for i, (k, r) in enumerate(zip(ks, res)):
                        if r > 0:
                            verify(t, op, k, buf.get((2 + i) * MIX_SLOT, r))
                        else:
                            t.counts[f"batch_get_into:{r}"] += 1
                            if r not in MIX_READ_MISS:
                                t.bad(f"batch_get_into -> {r}", k)
                elif op == "remove":
                    rc = s.remove(key, force=rnd.random() < lease_force)
                    t.counts[f"remove:{rc}"] += 1
                    if rc not in MIX_REMOVE_OK:
                        t.bad(f"remove -> {rc}", key)
                elif op == "is_exist":
                    rc = s.is_exist(key)
                    t.counts[f"is_exist:{rc}"] += 1
                    if rc not in (0, 1):
                        t.bad(f"is_exist -> {rc}", key)
                else:
                    rc = s.get_size(key)
                    t.counts[f"get_size:{rc}" if rc < 0 else "get_size:ok"] += 1
                    if rc not in MIX_READ_MISS and rc not in MIX_SIZES:
                        t.bad(f"get_size -> {rc}" if rc < 0 else "get_size: a size never written",
                              f"{key} {rc}")
        except Exception:
            t.bad("exception", traceback.format_exc(limit=3))
        finally:
            s.unregister_buffer(buf.addr)
            buf.close()

    ts = [threading.Thread(target=worker, args=(w,), daemon=True) for w in writer_ids]
    for th in ts:
        th.start()
    hung = 0
    for th in ts:
        th.join(max(1.0, deadline - time.monotonic()) + HANG_S)
        hung += th.is_alive()
    total = Tally()
    for t in parts:
        total.add(t)
    if hung:
        total.bad(f"threads still inside a call {HANG_S} s after the deadline", str(hung))
    return total.as_dict()


BATCH_KEYS = 8
BATCH_MAX = 32 * KiB


def batch_workload(s, target, threads, seconds, seed, tag, keys=BATCH_KEYS, max_size=BATCH_MAX):
    """``threads`` threads, each on its own keys, doing every batch call; each knows exactly what
    its keys hold, so every code and every byte is checked against that."""
    deadline = time.monotonic() + seconds
    parts = []
    barrier = threading.Barrier(threads, timeout=120)

    def worker(ti):
        t = Tally()
        parts.append(t)
        rnd = random.Random(seed * 7919 + ti)
        ks = [f"{tag}/t{ti}/k{i}" for i in range(keys)]
        state = {k: None for k in ks}  # key -> (version, size) or None
        src, dst = Buf(keys * max_size), Buf(keys * max_size)
        ver = 0
        try:
            for b in (src, dst):
                if s.register_buffer(b.addr, b.size) != 0:
                    t.bad("register_buffer failed")
                    return
            barrier.wait()
            while time.monotonic() < deadline:
                op = rnd.choice(("put", "upsert", "get_into", "get_batch", "is_exist", "remove"))
                t.counts[op] += 1
                if op in ("put", "upsert"):
                    pick = ([k for k in ks if state[k] is None] if op == "put"
                            else rnd.sample(ks, rnd.randint(1, keys)))
                    if not pick:
                        continue
                    ver += 1
                    sizes = [rnd.randint(HEADER, max_size) for _ in pick]
                    copying = rnd.random() < 0.3
                    if copying:
                        vals = [value(k, ver, n) for k, n in zip(pick, sizes)]
                        fn = s.put_batch if op == "put" else s.upsert_batch
                        rc = fn(pick, vals)
                        codes = [rc] * len(pick)
                        name = "put_batch" if op == "put" else "upsert_batch"
                    else:
                        ptrs = []
                        for k, n in zip(pick, sizes):
                            off = ks.index(k) * max_size
                            src.put(off, value(k, ver, n))
                            ptrs.append(src.addr + off)
                        fn = s.batch_put_from if op == "put" else s.batch_upsert_from
                        codes = fn(pick, ptrs, sizes)
                        name = "batch_put_from" if op == "put" else "batch_upsert_from"
                    for k, n, rc in zip(pick, sizes, codes):
                        t.counts[f"{name}:{rc}"] += 1
                        if rc == 0:
                            state[k] = (ver, n)
                        else:
                            t.bad(f"{name} -> {rc}", k)
                            state[k] = "unknown"
                elif op == "get_into":
                    ptrs = [dst.addr + i * max_size for i in range(keys)]
                    for p in ptrs:
                        dst.zero(p - dst.addr, HEADER)
                    got = s.batch_get_into(ks, ptrs, [max_size] * keys)
                    for i, (k, r) in enumerate(zip(ks, got)):
                        st = state[k]
                        if st == "unknown":
                            continue
                        if st is None:
                            if r != -704:
                                t.bad(f"batch_get_into of a removed key -> {r}", k)
                            continue
                        if r != st[1]:
                            t.bad(f"batch_get_into of a stored key -> {min(r, 0) or 'wrong size'}",
                                  f"{k} {r} want {st[1]}")
                            continue
                        v, err = check(k, dst.get(i * max_size, r))
                        if err or v != st[0]:
                            t.bad(f"batch_get_into: {err or 'an old version'}",
                                  f"{k} {v} want {st[0]}")
                        else:
                            t.counts["bytes_verified"] += r
                elif op == "get_batch":
                    got = s.get_batch(ks)
                    for k, v in zip(ks, got):
                        st = state[k]
                        if st == "unknown":
                            continue
                        if st is None:
                            if v:
                                t.bad("get_batch of a removed key: bytes", f"{k} {len(v)}")
                            continue
                        ver_got, err = check(k, v) if v else (None, "a miss")
                        if err or ver_got != st[0]:
                            t.bad(f"get_batch: {err or 'an old version'}",
                                  f"{k} {ver_got} want {st[0]}")
                        else:
                            t.counts["bytes_verified"] += len(v)
                elif op == "is_exist":
                    got = s.batch_is_exist(ks)
                    for k, e in zip(ks, got):
                        st = state[k]
                        if st != "unknown" and e != (0 if st is None else 1):
                            t.bad(f"batch_is_exist -> {e}, want {0 if st is None else 1}", k)
                else:
                    pick = rnd.sample(ks, rnd.randint(1, keys))
                    got = s.batch_remove(pick, force=True)
                    for k, rc in zip(pick, got):
                        st = state[k]
                        want = -704 if st is None else 0
                        if st != "unknown" and rc != want:
                            t.bad(f"batch_remove -> {rc}, want {want}", k)
                        state[k] = None if rc in (0, -704) else "unknown"
            t.counts["threads_done"] += 1
        except threading.BrokenBarrierError:
            t.bad("threads did not all start")
        except Exception:
            t.bad("exception", traceback.format_exc(limit=3))
        finally:
            s.batch_remove(ks, force=True)
            for b in (src, dst):
                s.unregister_buffer(b.addr)
                b.close()

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for th in ts:
        th.start()
    hung = 0
    for th in ts:
        th.join(max(1.0, deadline - time.monotonic()) + 120 + HANG_S)
        hung += th.is_alive()
    total = Tally()
    for t in parts:
        total.add(t)
    if hung:
        total.bad(f"threads did not finish {HANG_S} s after the deadline", str(hung))
    if total.counts["threads_done"] != threads:
        total.bad("threads that did not run to the end",
                  str(threads - total.counts["threads_done"]))
    return total.as_dict()


def fill_check(s, target, res, capacity, frac, prefix, wait_s=5.0, value_size=MiB):
    """After remove_all: ``frac`` of ``capacity`` must take pinned values again (within
    ``wait_s``), and read back exactly. Space lost for good fails here."""
    n = int(capacity * frac) // value_size
    pin = target.config(hard_pin=True)
    batch = 16
    src, dst = Buf(batch * value_size), Buf(batch * value_size)
    s.register_buffer(src.addr, src.size)
    s.register_buffer(dst.addr, dst.size)
    keys = [f"{prefix}/{i}" for i in range(n)]
    stored, codes = 0, Counter()
    t0 = time.monotonic()
    waited = 0.0
    try:
        for b in range(0, n, batch):
            ks = keys[b:b + batch]
            for i, k in enumerate(ks):
                write_into(src, i * value_size, k, 1, value_size)
            todo = list(range(len(ks)))
            deadline = time.monotonic() + wait_s
            while todo:
                got = s.batch_put_from([ks[i] for i in todo],
                                       [src.addr + i * value_size for i in todo],
                                       [value_size] * len(todo), pin)
                codes.update(got)
                todo = [i for i, rc in zip(todo, got) if rc != 0]
                if not todo or time.monotonic() > deadline:
                    break
                tw = time.monotonic()
                time.sleep(0.5)
                waited += time.monotonic() - tw
            if todo:
                res.fail(f"space lost: after remove_all only {stored + len(ks) - len(todo)} of "
                         f"{n} x {value_size >> 20} MiB pinned values fit "
                         f"(capacity {capacity >> 20} MiB, codes {dict(codes)})")
                return
            stored += len(ks)
            dst.zero()
            got = s.batch_get_into(ks, [dst.addr + i * value_size for i in range(len(ks))],
                                   [value_size] * len(ks))
            for i, (k, r) in enumerate(zip(ks, got)):
                if r != value_size:
                    res.fail(f"fill: batch_get_into({k}) -> {r}")
                    return
                v, err = check_in(dst, i * value_size, k, value_size, 1)
                if err:
                    res.fail(f"fill: {k}: {err}")
                    return
        res.info[f"{prefix}_filled_mib"] = stored * value_size >> 20
        res.info[f"{prefix}_waited_s"] = round(waited, 2)
        res.info[f"{prefix}_s"] = round(time.monotonic() - t0, 2)
    finally:
        s.batch_remove(keys, force=True)
        for b in (src, dst):
            s.unregister_buffer(b.addr)
            b.close()


# ------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------
class Ctx:
    """What a case started (masters, agents, in-process clients), stopped at the end."""

    def __init__(self, target):
        self.t = target
        self.stores, self.agents, self.masters = [], [], []

    def master(self, *flags, port=0):
        m = self.t.master(*flags, port=port)
        self.masters.append(m)
        return m

    def agent(self, m, segment, local_buffer=64 * MiB):
        a = Agent(self.t, m, segment, local_buffer)
        self.agents.append(a)
        return a

    def connect(self, m, segment, local_buffer=64 * MiB):
        s = self.t.connect(m.address, m.metadata, segment, local_buffer)
        self.stores.append(s)
        return s

    def cleanup(self):
        for s in self.stores:
            try:
                s.close()
            except Exception:
                pass
        for a in self.agents:
            a.close()
        for m in self.masters:
            m.stop()


def wait_for(pred, within, step=0.1):
    """Seconds until ``pred()`` held, or None if it did not within ``within`` s."""
    t0 = time.monotonic()
    while True:
        if pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 > within:
            return None
        time.sleep(step)


def timed(fn, *args, **kwargs):
    t0 = time.monotonic()
    r = fn(*args, **kwargs)
    return r, time.monotonic() - t0


def _mixed_final(ctx, res, s, keys, writers, capacity):
    """After the mixed workload: every key read twice (equal, valid), then space check."""
    for k in keys:
        a, b = s.get(k), s.get(k)
        if a != b:
            res.fail(f"final: two reads of {k} differ with no writer")
        if a:
            v, err = check(k, a)
            if err or not _valid_version(v, writers):
                res.fail(f"final: {k}: {err or f'version {v:#x} never written'}")
            else:
                res.counts["final_verified"] += 1
    rc = s.remove_all(True)
    res.info["remove_all"] = rc
    fill_check(s, ctx.t, res, capacity, 0.6, "fill")


def case_mixed_threads(ctx, prof, res):
    m = ctx.master("--default_kv_lease_ttl=500")
    ctx.agent(m, 128 * MiB)
    s = ctx.connect(m, 128 * MiB)
    keys = [f"mix/{i}" for i in range(48)]
    out = mixed_workload(s, ctx.t, keys, list(range(8)), 8, prof.mix_seconds, 11)
    res.merge(out)
    _mixed_final(ctx, res, s, keys, 8, 256 * MiB)
    res.info["ops"] = sum(out["counts"].get(op, 0) for op in MIX_OPS)


def case_mixed_processes(ctx, prof, res):
    m = ctx.master("--default_kv_lease_ttl=500")
    agents = [ctx.agent(m, 64 * MiB) for _ in range(4)]
    keys = [f"mixp/{i}" for i in range(48)]
    for i, a in enumerate(agents):
        a.send({"cmd": "mixed", "keys": keys, "writer_ids": [2 * i, 2 * i + 1], "writers": 8,
                "seconds": prof.mix_seconds, "seed": 100 + i})
    ops = 0
    for i, a in enumerate(agents):
        out = a.read(prof.mix_seconds + 3 * HANG_S)
        if "counts" not in out:
            res.fail(f"process {i}: {out}")
            continue
        res.merge(out, prefix="")
        ops += sum(out["counts"].get(op, 0) for op in MIX_OPS)
    res.info["ops"] = ops
    res.expect(all(a.alive() for a in agents), "a worker process died")
    s = ctx.connect(m, 0)
    _mixed_final(ctx, res, s, keys, 8, 256 * MiB)


def case_hot_upserts(ctx, prof, res):
    """2 threads upserting one 1 MiB key (same size in place, and another size) while a third
    reads it, in a 64 MiB segment: only 1 MiB is live, so no upsert may fail for space, and
    after remove_all the whole segment is there again."""
    seg = 64 * MiB
    m = ctx.master()
    ctx.agent(m, seg)
    s = ctx.connect(m, 0)
    key, per = "hot", prof.hot_upserts
    done = threading.Event()
    tallies = [Tally() for _ in range(3)]

    def writer(w):
        t = tallies[w]
        for i in range(1, per + 1):
            ver = (w << 32) | i
            n = MiB if i % 4 else MiB - 4 * KiB
            rc = s.upsert(key, value(key, ver, n))
            t.counts[f"upsert:{rc}"] += 1
            if rc not in MIX_WRITE_OK:
                t.bad(f"upsert -> {rc}", f"{n} B")

    def reader():
        t = tallies[2]
        buf = Buf(2 * MiB)
        s.register_buffer(buf.addr, buf.size)
        try:
            while not done.is_set():
                buf.zero(0, HEADER)
                r = s.get_into(key, buf.addr, buf.size)
                t.counts[f"get_into:{min(r, 1)}"] += 1
                if r > 0:
                    v, err = check_in(buf, 0, key, r)
                    if err or not _valid_version(v, 2):
                        t.bad(f"get_into: {err or 'a version never written'}")
                elif r not in MIX_READ_MISS:
                    t.bad(f"get_into -> {r}")
        finally:
            s.unregister_buffer(buf.addr)
            buf.close()

    ws = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(2)]
    rd = threading.Thread(target=reader, daemon=True)
    t0 = time.monotonic()
    for th in ws + [rd]:
        th.start()
    for th in ws:
        th.join(per * 0.5 + HANG_S)
        res.expect(not th.is_alive(), "an upsert hung")
    done.set()
    rd.join(HANG_S)
    res.expect(not rd.is_alive(), "the reader hung")
    res.info["upserts_s"] = round(time.monotonic() - t0, 2)
    for t in tallies:
        res.merge(t.as_dict())
    v = s.get(key)
    res.expect(v and check(key, v)[1] is None, f"the hot key after the upserts: "
                                               f"{check(key, v)[1] if v else 'a miss'}")
    res.info["remove_all"] = s.remove_all(True)
    fill_check(s, ctx.t, res, seg, 0.75, "fill")


def case_eviction(ctx, prof, res):
    seg = 256 * MiB
    m = ctx.master()
    owner = ctx.agent(m, seg)
    s = ctx.connect(m, 0)
    n = prof.evict_total // MiB
    keys = [f"ev/{i}" for i in range(n)]
    batch = 8
    src, dst = Buf(batch * MiB), Buf(batch * MiB)
    s.register_buffer(src.addr, src.size)
    s.register_buffer(dst.addr, dst.size)
    codes = Counter()
    t0 = time.monotonic()
    try:
        for b in range(0, n, batch):
            ks = keys[b:b + batch]
            if (b // batch) % 2:
                for i, k in enumerate(ks):  # copying puts, one call per key
                    rc = s.put(k, value(k, 1, MiB - 64))
                    codes[rc] += 1
                    if rc != 0:
                        res.fail(f"put({k}) -> {rc}")
            else:
                for i, k in enumerate(ks):
                    src.put(i * MiB, value(k, 1, MiB - 64))
                got = s.batch_put_from(ks, [src.addr + i * MiB for i in range(len(ks))],
                                       [MiB - 64] * len(ks))
                codes.update(got)
                for k, rc in zip(ks, got):
                    if rc != 0:
                        res.fail(f"batch_put_from({k}) -> {rc}")
        res.info["put_s"] = round(time.monotonic() - t0, 2)
        res.info["put_codes"] = {str(k): v for k, v in codes.items()}
        survivors, newest = 0, []
        for b in range(0, n, batch):
            ks = keys[b:b + batch]
            dst.zero()
            got = s.batch_get_into(ks, [dst.addr + i * MiB for i in range(len(ks))],
                                   [MiB] * len(ks))
            for i, (k, r) in enumerate(zip(ks, got)):
                if r == -704:
                    continue
                if r != MiB - 64:
                    res.fail(f"batch_get_into({k}) -> {r}")
                    continue
                v, err = check_in(dst, i * MiB, k, r, 1)
                if err:
                    res.fail(f"survivor {k}: {err}")
                else:
                    survivors += 1
                    newest.append(b + i)
        res.info["survivors"] = survivors
        res.info["newest_survivor"] = max(newest) if newest else None
        # Eviction keeps the segment mostly full: at least a quarter of it survives, and never
        # more than fits.
        res.expect(seg // MiB // 4 <= survivors <= seg // MiB,
                   f"{survivors} survivors of {n} x 1 MiB in a {seg >> 20} MiB segment")
        res.expect(owner.alive(), "the segment owner died")
    finally:
        for b in (src, dst):
            s.unregister_buffer(b.addr)
            b.close()
    res.info["remove_all"] = s.remove_all(True)
    fill_check(s, ctx.t, res, seg, 0.75, "fill")
    # And the segment still takes evictable puts.
    k = "ev/after"
    res.expect(s.put(k, value(k, 2, 4096)) == 0 and check(k, s.get(k))[0] == 2,
               "a put after remove_all does not read back")


def case_kill_owner(ctx, prof, res):
    ttl = 2
    m = ctx.master(f"--client_ttl={ttl}")
    victim = ctx.agent(m, 256 * MiB)
    ctx.agent(m, 256 * MiB)
    s = ctx.connect(m, 0)
    pin2 = ctx.t.config(hard_pin=True, replicas=2)
    pin1 = ctx.t.config(hard_pin=True)
    rep_keys = [f"ko/rep{i}" for i in range(16)]
    one_keys = [f"ko/one{i}" for i in range(32)]
    for k in rep_keys:
        res.expect(s.put(k, value(k, 1, 256 * KiB), pin2) == 0, f"put 2 replicas of {k}")
    for k in one_keys:
        res.expect(s.put(k, value(k, 1, 256 * KiB), pin1) == 0, f"put {k}")
    for k in rep_keys + one_keys:
        res.expect(check(k, s.get(k))[0] == 1, f"{k} does not read back before the kill")

    size = 8 * MiB
    log, stop, inside = [], threading.Event(), threading.Event()
    started = threading.Semaphore(0)

    def writer(w):
        buf = Buf(size)
        s.register_buffer(buf.addr, size)
        i = 0
        try:
            while not stop.is_set():
                i += 1
                k = f"ko/w{w}/{i}"
                write_into(buf, 0, k, i, size)
                inside.set()
                t0 = time.monotonic()
                rc = s.put_from(k, buf.addr, size)
                dt = time.monotonic() - t0
                log.append((t0, dt, rc))
                started.release()
                if rc == 0:
                    s.remove(k, force=True)
        finally:
            s.unregister_buffer(buf.addr)
            buf.close()

    ws = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(2)]
    for w in ws:
        w.start()
    for _ in range(6):
        started.acquire(timeout=30)
    inside.clear()
    inside.wait(10)
    time.sleep(0.005)
    victim.kill()
    t_kill = time.monotonic()
    # Right after the kill (before the master can know): replicated keys must still read.
    buf = Buf(MiB)
    s.register_buffer(buf.addr, buf.size)
    early = Counter()
    for k in rep_keys:
        (r, dt) = timed(s.get_into, k, buf.addr, MiB)
        res.expect(dt < HANG_S, f"get_into({k}) took {dt:.1f} s")
        if r == 256 * KiB and check_in(buf, 0, k, r, 1)[1] is None:
            early["ok"] += 1
        else:
            early[str(r)] += 1
    res.info["replicated_reads_right_after_kill"] = dict(early)
    res.expect(early["ok"] == len(rep_keys),
               f"keys with 2 replicas right after the owner's death: {dict(early)} "
               f"(a read must fall back to the live replica)")
    recover_bound = ttl + 8
    time.sleep(max(0.0, t_kill + recover_bound - time.monotonic()))
    stop.set()
    for w in ws:
        w.join(HANG_S + 5)
        res.expect(not w.is_alive(), f"a writer is stuck in put_from > {HANG_S} s")
    after = [(t0 - t_kill, dt, rc) for t0, dt, rc in log if t0 + dt >= t_kill]
    res.info["puts_total"] = len(log)
    res.info["puts_after_kill"] = len(after)
    res.info["put_codes_after_kill"] = {str(k): v for k, v in
                                        Counter(rc for *_, rc in after).items()}
    res.info["max_put_s"] = round(max((dt for _, dt, _ in log), default=0), 2)
    res.expect(all(dt < HANG_S for _, dt, _ in log), "a put hung")
    # Recovery: from some time on, every put succeeded, and that time is bounded.
    last_bad = max((t0 + dt for t0, dt, rc in after if rc != 0), default=0.0)
    streak = [x for x in after if x[0] > last_bad]
    res.info["recovered_after_s"] = round(last_bad, 2)
    res.expect(last_bad <= ttl + 6 and len(streak) >= 4,
               f"puts did not recover: last failure {last_bad:.1f} s after the kill, "
               f"{len(streak)} good puts after it")
    failed_new = [x for x in after if x[0] > 0.05 and x[2] != 0]
    res.info["failed_puts_started_after_kill"] = len(failed_new)
    res.expect(len(failed_new) <= 2,
               f"{len(failed_new)} puts started after the kill failed (a put must move away "
               f"from a segment that just failed)")
    late = Counter()
    for k in rep_keys + one_keys:
        (r, dt) = timed(s.get_into, k, buf.addr, MiB)
        res.expect(dt < HANG_S, f"get_into({k}) took {dt:.1f} s")
        if r > 0:
            v, err = check_in(buf, 0, k, r, 1)
            late["ok" if err is None else "bad"] += 1
            if err:
                res.fail(f"after the kill {k}: {err}")
        else:
            late[str(r)] += 1
            if k in rep_keys:
                res.fail(f"{k} (2 replicas, one alive) -> {r} after the dead owner was dropped")
    res.info["reads_after_ttl"] = dict(late)
    s.unregister_buffer(buf.addr)
    buf.close()


def case_kill_reader(ctx, prof, res):
    lease_ms, ttl, seg, big = 2000, 3, 256 * MiB, 64 * MiB
    m = ctx.master(f"--default_kv_lease_ttl={lease_ms}", f"--client_ttl={ttl}")
    owner = ctx.agent(m, seg)
    s = ctx.connect(m, 0)
    key = "kr/big"
    src = Buf(big)
    s.register_buffer(src.addr, big)
    write_into(src, 0, key, 1, big)
    res.expect(s.put_from(key, src.addr, big) == 0, "put of the 64 MiB key")
    reader = ctx.agent(m, 0, local_buffer=16 * MiB)
    reader.send({"cmd": "read_loop", "key": key, "size": big, "version": 1})
    hello = reader.read(60)
    if not hello.get("reading") or hello.get("error"):
        res.fail(f"the reader did not read: {hello}")
        return
    stop, survivor = threading.Event(), Counter()

    def other_reader():
        while not stop.is_set():
            r, dt = timed(s.get_into, key, src.addr, big)
            survivor["max_ms"] = max(survivor["max_ms"], int(dt * 1000))
            if r == big and check_in(src, 0, key, big, 1)[1] is None:
                survivor["ok"] += 1
            else:
                survivor[f"rc {r}" if r != big else "bad bytes"] += 1

    th = threading.Thread(target=other_reader, daemon=True)
    th.start()
    time.sleep(random.uniform(0.2, 0.6))
    reader.kill()
    t_kill = time.monotonic()
    time.sleep(1.0)
    stop.set()
    th.join(HANG_S + 5)
    res.expect(not th.is_alive(), "the surviving reader hung")
    res.info["surviving_reader"] = dict(survivor)
    res.expect(survivor["ok"] > 0 and set(survivor) <= {"ok", "max_ms"},
               f"the surviving reader saw errors: {dict(survivor)}")
    res.expect(owner.alive(), "the segment owner died with the reader")
    s.unregister_buffer(src.addr)
    src.close()
    # A dead reader's hold must end by its lease (or its client's TTL): then the key is the
    # oldest object and 320 x 1 MiB of evictable puts into the 256 MiB segment evict it.
    wait = max(lease_ms / 1000, ttl) + 2
    time.sleep(max(0.0, t_kill + wait - time.monotonic()))
    codes = Counter()
    ks = [f"kr/fill{i}" for i in range(320)]
    for k in ks:
        rc = s.put(k, value(k, 1, MiB - 64))
        codes[rc] += 1
    res.info["fill_codes"] = {str(k): v for k, v in codes.items()}
    res.expect(codes[0] == len(ks), f"evictable puts after the reader's death: {dict(codes)}")
    still = s.is_exist(key)
    res.info["big_key_exists_after_fill"] = still
    res.expect(still == 0, f"the key a killed reader held is still not evicted "
                           f"{wait + 2:.0f}+ s after the kill (is_exist={still})")
    good = 0
    for k in ks:
        v = s.get(k)
        if v:
            got, err = check(k, v)
            if err:
                res.fail(f"{k}: {err}")
            good += 1
    res.info["fill_survivors"] = good
    res.info["remove_all"] = s.remove_all(True)
    fill_check(s, ctx.t, res, seg, 0.75, "fill")


def case_kill_master(ctx, prof, res):
    seg = 64 * MiB
    m = ctx.master()
    port = m.port
    s = ctx.connect(m, seg)
    peer = ctx.agent(m, seg)
    old = [f"km/old{i}" for i in range(16)]
    for k in old:
        res.expect(s.upsert(k, value(k, 1, 16 * KiB)) == 0, f"upsert {k}")
    log, stop = [], threading.Event()

    def worker(w):
        buf = Buf(64 * KiB)
        s.register_buffer(buf.addr, buf.size)
        i = 0
        try:
            while not stop.is_set():
                i += 1
                k = f"km/w{w}/{i}"
                t0 = time.monotonic()
                rc = s.upsert(k, value(k, i, 16 * KiB))
                t1 = time.monotonic()
                log.append((t0, t1 - t0, "upsert", rc))
                r = s.get_into(k, buf.addr, buf.size)
                log.append((t1, time.monotonic() - t1, "get_into", r if r <= 0 else 0))
                if r > 0:
                    v, err = check_in(buf, 0, k, r, i)
                    if err:
                        res.fail(f"get_into({k}): {err}")
                elif rc == 0 and r not in (-704, -900, -901, -800, -200):
                    res.fail(f"get_into({k}) -> {r}")
                time.sleep(0.01)
        finally:
            s.unregister_buffer(buf.addr)
            buf.close()

    ws = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(3)]
    for w in ws:
        w.start()
    time.sleep(1.5)
    m.stop()
    t_kill = time.monotonic()
    # Calls made while the master is down: an error each, in bounded time.
    k = "km/while-down"
    direct = {}
    for name, fn in (("upsert", lambda: s.upsert(k, value(k, 1, 4096))),
                     ("get_size", lambda: s.get_size(old[0])),
                     ("batch_is_exist", lambda: s.batch_is_exist(old[:2])),
                     ("health_check", s.health_check)):
        r, dt = timed(fn)
        direct[name] = [r, round(dt, 2)]
        res.expect(dt < HANG_S, f"{name} with the master down took {dt:.1f} s")
    res.info["calls_with_master_down"] = direct
    res.expect(direct["upsert"][0] != 0, f"upsert with the master down -> {direct['upsert'][0]}")
    res.expect(direct["get_size"][0] < 0, f"get_size with the master down -> {direct['get_size']}")
    res.expect(all(x != 1 for x in direct["batch_is_exist"][0]),
               f"batch_is_exist with the master down -> {direct['batch_is_exist']}")
    # health_check may go by the last heartbeat: it must say so within 3 s.
    sick = wait_for(lambda: s.health_check() != 0, 3.0)
    res.info["health_check_noticed_s"] = round(sick, 2) if sick is not None else None
    res.expect(sick is not None, "health_check still 0 3 s after the master died")
    time.sleep(max(0.0, t_kill + 2.0 - time.monotonic()))
    m2 = ctx.master(port=port)
    t_up = time.monotonic()
    res.info["down_s"] = round(t_up - t_kill, 2)
    mine = probe(s, "km/probe-here")
    theirs = peer.call({"cmd": "probe", "prefix": "km/probe-peer"}, 60)
    res.info["recovered_here_s"] = round(mine["after"], 2)
    res.info["recovered_peer_s"] = round(theirs.get("after", -1), 2)
    res.expect(mine["ok"] and mine["after"] < 20,
               f"this client did not recover within 20 s of the restart: {mine}")
    res.expect(theirs.get("ok") and theirs["after"] < 20,
               f"the peer process did not recover within 20 s of the restart: {theirs}")
    t_ok = time.monotonic()
    time.sleep(2.0)
    stop.set()
    for w in ws:
        w.join(HANG_S + 5)
        res.expect(not w.is_alive(), f"a worker is stuck in a call > {HANG_S} s")
    res.info["max_call_s"] = round(max((dt for _, dt, _, _ in log), default=0), 2)
    res.expect(all(dt < HANG_S for _, dt, _, _ in log), "a call hung")
    # The workers' calls that began and ended while the master was down must all have failed.
    down = [x for x in log if x[0] > t_kill and x[0] + x[1] < t_up]
    res.info["calls_while_down"] = len(down)
    res.info["codes_while_down"] = {f"{op}:{rc}": n for (op, rc), n in
                                    Counter((x[2], x[3]) for x in down).items()}
    res.expect(all(x[3] != 0 for x in down),
               "a call made while the master was down succeeded")
    late = [x for x in log if x[0] > t_ok]
    res.info["calls_after_recovery"] = len(late)
    bad_late = Counter((x[2], x[3]) for x in late if x[3] != 0)
    res.expect(late and not bad_late, f"errors after recovery: {dict(bad_late)}")
    # Without HA the objects are gone; a read is a miss, never other bytes.
    for k in old:
        v = s.get(k)
        if v and check(k, v)[1]:
            res.fail(f"{k} after the restart: {check(k, v)[1]}")
    # Both segments are back: 60 % of both fits pinned values.
    fill_check(s, ctx.t, res, 2 * seg, 0.6, "fill", wait_s=10)
    res.expect(m2.proc.poll() is None, "the restarted master died")


def case_cycles(ctx, prof, res):
    m = ctx.master()
    ctx.agent(m, 64 * MiB)
    s = ctx.connect(m, 64 * MiB)
    buf = Buf(256 * KiB)
    s.register_buffer(buf.addr, buf.size)
    rnd = random.Random(5)
    bad = Counter()

    def cycle(i):
        k = f"cy/{i}"
        n = rnd.randint(4 * KiB, 64 * KiB)
        v = value(k, i, n)
        if i % 2:
            rc = s.put(k, v)
        else:
            buf.put(0, v)
            rc = s.put_from(k, buf.addr, n)
        if rc != 0:
            bad[f"put {rc}"] += 1
            return
        g = s.get(k)
        if g != v:
            bad["get " + ("miss" if not g else check(k, g)[1] or "old version")] += 1
        r = s.get_into(k, buf.addr + 128 * KiB, 128 * KiB)
        if r != n or buf.get(128 * KiB, n) != v:
            bad[f"get_into {r}"] += 1
        rc = s.remove(k, force=True)
        if rc != 0:
            bad[f"remove {rc}"] += 1

    warm = max(200, prof.cycles // 10)
    for i in range(warm):
        cycle(i)
    mpid = m.proc.pid
    a0, m0 = proc_stats(), proc_stats(mpid)
    t0 = time.monotonic()
    for i in range(warm, warm + prof.cycles):
        cycle(i)
    dt = time.monotonic() - t0
    a1, m1 = proc_stats(), proc_stats(mpid)
    s.unregister_buffer(buf.addr)
    buf.close()
    res.info["cycles"] = prof.cycles
    res.info["cycles_per_s"] = round(prof.cycles / dt, 1)
    res.info["client_start"], res.info["client_end"] = a0, a1
    res.info["master_start"], res.info["master_end"] = m0, m1
    res.expect(not bad, f"cycle errors: {dict(bad)}")
    rss_tol = (32 if prof.long else 16) * MiB
    res.expect(a1["rss"] - a0["rss"] <= rss_tol,
               f"client RSS grew {(a1['rss'] - a0['rss']) >> 20} MiB over {prof.cycles} cycles "
               f"(tolerance {rss_tol >> 20} MiB)")
    res.expect(a1["fds"] - a0["fds"] <= 2, f"client fds {a0['fds']} -> {a1['fds']}")
    res.expect(a1["threads"] - a0["threads"] <= 2,
               f"client threads {a0['threads']} -> {a1['threads']}")
    res.expect(m1["fds"] - m0["fds"] <= 2, f"master fds {m0['fds']} -> {m1['fds']}")
    res.expect(m1["rss"] - m0["rss"] <= rss_tol,
               f"master RSS grew {(m1['rss'] - m0['rss']) >> 20} MiB")

    # setup/close cycles: a client that comes and goes leaves nothing behind.
    def reconnect(i):
        c = ctx.t.connect(m.address, m.metadata, 16 * MiB, 16 * MiB)
        k = f"rc/{i}"
        ok = c.put(k, value(k, i, 8 * KiB)) == 0 and check(k, c.get(k))[0] == i
        c.close()
        if not ok:
            bad[f"reconnect {i}"] += 1

    for i in range(2):
        reconnect(i)
    time.sleep(0.5)
    b0 = proc_stats()
    t0 = time.monotonic()
    for i in range(2, 2 + prof.reconnects):
        reconnect(i)
    res.info["setup_close_s"] = round((time.monotonic() - t0) / prof.reconnects, 3)
    time.sleep(1.0)
    b1 = proc_stats()
    res.info["reconnects"] = prof.reconnects
    res.info["reconnect_start"], res.info["reconnect_end"] = b0, b1
    res.expect(not any(k.startswith("reconnect") for k in bad), f"reconnect errors: {dict(bad)}")
    res.expect(b1["fds"] - b0["fds"] <= 2,
               f"fds {b0['fds']} -> {b1['fds']} over {prof.reconnects} setup/close")
    res.expect(b1["threads"] - b0["threads"] <= 2,
               f"threads {b0['threads']} -> {b1['threads']} over {prof.reconnects} setup/close")
    res.expect(b1["rss"] - b0["rss"] <= 2 * rss_tol,
               f"RSS grew {(b1['rss'] - b0['rss']) >> 20} MiB over {prof.reconnects} setup/close")


def case_big_value(ctx, prof, res):
    n = prof.big
    m = ctx.master()
    ctx.agent(m, n + 64 * MiB, local_buffer=16 * MiB)
    s = ctx.connect(m, 0)
    key = "big/value"
    src, dst = Buf(n), Buf(n)
    try:
        res.expect(s.register_buffer(src.addr, n) == 0, "register src")
        res.expect(s.register_buffer(dst.addr, n) == 0, "register dst")
        write_into(src, 0, key, 1, n)
        rc, t_put = timed(s.put_from, key, src.addr, n)
        res.info["put_from_mib_s"] = round((n >> 20) / t_put, 1)
        if not res.expect(rc == 0, f"put_from of {n >> 20} MiB -> {rc}"):
            return
        rc, t_get = timed(s.get_into, key, dst.addr, n)
        res.info["get_into_mib_s"] = round((n >> 20) / t_get, 1)
        res.expect(rc == n, f"get_into -> {rc}")
        v, err = check_in(dst, 0, key, n, 1)
        res.expect(err is None, f"get_into bytes: {err}")
        dst.zero()
        got, t_b = timed(s.batch_get_into, [key], [dst.addr], [n])
        res.expect(got == [n], f"batch_get_into -> {got}")
        v, err = check_in(dst, 0, key, n, 1)
        res.expect(err is None, f"batch_get_into bytes: {err}")
        write_into(src, 0, key, 2, n)
        rc, t_up = timed(s.upsert_from, key, src.addr, n)
        res.info["upsert_from_mib_s"] = round((n >> 20) / t_up, 1)
        res.expect(rc == 0, f"upsert_from (same size) -> {rc}")
        dst.zero()
        rc = s.get_into(key, dst.addr, n)
        res.expect(rc == n, f"get_into after upsert -> {rc}")
        v, err = check_in(dst, 0, key, n, 2)
        res.expect(err is None, f"bytes after upsert: {err}")
        res.expect(s.get_size(key) == n, f"get_size -> {s.get_size(key)}")
        res.expect(s.remove(key, force=True) == 0, "remove")
        res.info["mib"] = n >> 20
    finally:
        for b in (src, dst):
            s.unregister_buffer(b.addr)
            b.close()


def case_batch_concurrency(ctx, prof, res):
    m = ctx.master()
    if prof.batch_procs:
        agents = [ctx.agent(m, 128 * MiB) for _ in range(prof.batch_procs)]
        for i, a in enumerate(agents):
            a.send({"cmd": "batch", "threads": prof.batch_threads, "seconds": prof.batch_seconds,
                    "seed": i, "tag": f"bc{i}"})
        for i, a in enumerate(agents):
            out = a.read(prof.batch_seconds + 200)
            if "counts" not in out:
                res.fail(f"process {i}: {out}")
            else:
                res.merge(out)
        res.expect(all(a.alive() for a in agents), "a process crashed")
        threads = prof.batch_procs * prof.batch_threads
    else:
        ctx.agent(m, 256 * MiB)
        s = ctx.connect(m, 0)
        res.merge(batch_workload(s, ctx.t, prof.batch_threads, prof.batch_seconds, 1, "bc"))
        threads = prof.batch_threads
    res.info["threads"] = threads
    res.info["calls"] = sum(res.counts.get(op, 0) for op in
                            ("put", "upsert", "get_into", "get_batch", "is_exist", "remove"))
    res.info["mib_verified"] = res.counts.get("bytes_verified", 0) >> 20
    res.expect(res.counts.get("bytes_verified", 0) > 0, "nothing was read back")


CASES = {
    "mixed_threads": case_mixed_threads,
    "mixed_processes": case_mixed_processes,
    "hot_upserts": case_hot_upserts,
    "eviction": case_eviction,
    "kill_owner": case_kill_owner,
    "kill_reader": case_kill_reader,
    "kill_master": case_kill_master,
    "cycles": case_cycles,
    "big_value": case_big_value,
    "batch_concurrency": case_batch_concurrency,
}
CASE_NAMES = list(CASES)


def run_case(target_name, case, long):
    """Runs one case in this process; a result dict."""
    res = Result(case, target_name)
    t0 = time.monotonic()
    ctx = None
    try:
        ctx = Ctx(Target(target_name))
        CASES[case](ctx, Profile(long), res)
    except Exception:
        res.fail(f"exception: {traceback.format_exc(limit=6)}")
    finally:
        if ctx:
            ctx.cleanup()
        res.seconds = time.monotonic() - t0
    return res.as_dict()


def run_isolated(target_name, case, long, timeout=None):
    """Runs one case in a fresh process group; a crash or a hang is that case's failure, and
    every process the case started is killed afterwards."""
    timeout = timeout or Profile(long).case_timeout
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PYDIR, HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, os.path.abspath(__file__), "--target", target_name, "--run-case", case]
    if long:
        cmd.append("--long")
    t0 = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                             start_new_session=True)
        hung = False
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # whatever the case left behind
            except (ProcessLookupError, PermissionError):
                pass
        err.seek(0)
        tail = err.read()[-3000:]
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    res = Result(case, target_name)
    res.seconds = time.monotonic() - t0
    if hung:
        res.fail(f"hung: the case did not finish within {timeout} s")
    else:
        rc = p.returncode
        how = f"signal {-rc} ({signal.Signals(-rc).name})" if rc < 0 else f"exit code {rc}"
        res.fail(f"crashed: the case process ended with {how}")
    res.info["stderr_tail"] = tail
    return res.as_dict()


def summary(r):
    """The few numbers of a result worth a table column."""
    i = r.get("info", {})
    c = r.get("counts", {})
    keys = {
        "mixed_threads": ["ops", "final_verified"],
        "mixed_processes": ["ops", "final_verified"],
        "hot_upserts": ["upserts_s", "fill_filled_mib"],
        "eviction": ["put_s", "survivors", "fill_filled_mib"],
        "kill_owner": ["puts_after_kill", "recovered_after_s", "failed_puts_started_after_kill",
                       "replicated_reads_right_after_kill", "max_put_s"],
        "kill_reader": ["surviving_reader", "big_key_exists_after_fill", "fill_filled_mib"],
        "kill_master": ["calls_while_down", "recovered_here_s", "recovered_peer_s",
                        "max_call_s", "fill_filled_mib"],
        "cycles": ["cycles_per_s", "client_start", "client_end", "setup_close_s"],
        "big_value": ["mib", "put_from_mib_s", "get_into_mib_s"],
        "batch_concurrency": ["threads", "calls", "mib_verified"],
    }.get(r["case"], [])
    parts = []
    for k in keys:
        if k in i:
            v = i[k]
            if isinstance(v, dict) and "rss" in v:
                v = f"rss {v['rss'] >> 20} MiB fds {v['fds']} thr {v['threads']}"
            parts.append(f"{k}={v}")
        elif k in c:
            parts.append(f"{k}={c[k]}")
    return ", ".join(parts)


def in_private_netns():
    try:
        with open("/proc/net/dev") as f:
            names = [ln.split(":")[0].strip() for ln in f.readlines()[2:]]
        return names == ["lo"]
    except OSError:
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="tidewire", choices=["tidewire", "mooncake"])
    ap.add_argument("--cases", default=",".join(CASE_NAMES))
    ap.add_argument("--long", action="store_true", default=long_mode())
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--run-case", help=argparse.SUPPRESS)
    ap.add_argument("--agent", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.agent:
        agent_main(json.loads(args.agent))
        return 0
    if args.run_case:
        r = run_case(args.target, args.run_case, args.long)
        sys.stdout.flush()
        print(RESULT_MARK + json.dumps(r), flush=True)
        os._exit(0)  # a stuck native thread must not keep the case alive
    if args.target == "mooncake" and not in_private_netns():
        script = ("ip link set lo up && exec " + " ".join(
            map(_quote, [sys.executable, os.path.abspath(__file__)] + (argv or sys.argv[1:]))))
        return subprocess.call(["unshare", "-n", "bash", "-c", script])
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}; known: {CASE_NAMES}")
    results = []
    print(f"store stress on {args.target} ({'long' if args.long else 'short'} variant)",
          flush=True)
    for c in cases:
        r = run_isolated(args.target, c, args.long)
        results.append(r)
        print(f"{c:18} {'PASS' if r['ok'] else 'FAIL':4} {r['seconds']:7.1f} s  {summary(r)}",
              flush=True)
        for p in r["problems"][:6]:
            print(f"{'':24} - {p.splitlines()[0] if p else p}", flush=True)
        if not r["ok"] and r["info"].get("stderr_tail") and r["problems"][0].startswith("crash"):
            print(r["info"]["stderr_tail"][-1500:], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    passed = sum(r["ok"] for r in results)
    print(f"{passed}/{len(results)} cases passed", flush=True)
    return 0 if passed == len(results) else 1


def _quote(s):
    import shlex

    return shlex.quote(s)


if __name__ == "__main__":
    sys.exit(main())
