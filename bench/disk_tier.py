#!/usr/bin/env python3
"""The Store's disk tier (Mooncake's SSD offload) next to Mooncake's, in the same run.

    bench/disk_tier.py                      # full run, about 6-8 minutes on 2 cores
    bench/disk_tier.py --quick              # smoke run, about 2 minutes
    bench/disk_tier.py --rounds 5 --stores tidewire --sections dd,fill

Sections (one table each, medians over --rounds rounds):

dd        The disk's direct-I/O read ceiling: ``dd if=<1 GiB file> of=/dev/null bs=4M
          iflag=direct`` on a file in the tiers' filesystem, GiB/s (rounds at the start and at
          the end of the run).
fill      One owner client with a --segment-mib DRAM segment puts --fill-x times the segment of
          1-4 MiB values, tier off (plain eviction), offload-on-evict, or write-behind.
          * puts into a full segment: GiB/s of the puts made after the first segment's worth
            (time inside put() only, retries included); puts that returned a nonzero code are
            retried every 5 ms until they succeed or 10 s pass, and counted; a run's puts
            stop after --put-budget seconds of put time (the rest are counted as skipped).
          * cold gets (tier on): the offload settles (the tier's files stop growing, and for
            tidewire its master's offload queue is empty), the tier's files are dropped from
            the page cache (posix_fadvise DONTNEED on each, plus /proc/sys/vm/drop_caches when
            permitted), then the oldest values (disk-resident) are read back in slices with
            batch_get_buffer (8 keys a call) and with get; GiB/s of verified bytes, and as a
            fraction of the dd ceiling.
workload  Multi-round: each round re-reads every key of the earlier rounds (batch_get_buffer,
          8 keys a call) and then puts --wl-new-mib of new keys; over --wl-rounds rounds the
          working set grows to --ws-x times the segment. Per round: hit fraction of the
          re-read bytes (bytes equal to what was put), get time. tidewire with the tier
          (write-behind), tidewire DRAM-only, Mooncake with its SSD tier (write-behind).
          The tier's page cache is dropped before each round's re-reads (--wl-keep-cache keeps
          it).

Every byte read back is compared with what was put: a miss (None, b'', negative code) and a
mismatch (bytes differ) are counted separately. Values are 1-4 MiB, deterministic from a seed.

How it runs: the script re-executes itself inside ``unshare -n`` (a private network namespace
with only ``lo``; Mooncake's listeners bind every address) with the Python of
``.venv-mooncake`` (it has the Mooncake wheel, tidewire comes from ``python/``). Each
(store, configuration, round) is its own worker process with its own master, started and
stopped by PID. tidewire's library, master and Python package are copied into the run folder
first, so a rebuild during the run does not change what is measured. Tiers live in
``/tmp/twbench-<pid>/`` and are removed at the end. Results (progress log, per-worker stderr,
``result.json``, ``summary.md``) go to --outdir (default target/bench/results/disk_tier-<UTC>).

Environment: TIDEWIRE_LIB (default target/release/libtidewire.so),
MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS (set to 1 unless given), GLOG_minloglevel (2).
"""

import argparse
import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
MiB = 1 << 20
GiB = 1 << 30
HOST = "127.0.0.1"
STORES = ("tidewire", "mooncake")
FILL_MODES = ("off", "evict", "wb")  # tier off / offload-on-evict / write-behind
MODE_NAMES = {"off": "tier off", "evict": "on-evict", "wb": "write-behind", "dram": "DRAM only"}
BATCH_KEYS = 8
RETRY_SLEEP = 0.005
RETRY_LIMIT = 10.0


# ------------------------------------------------------------------------------------------
# Values: deterministic, 1-4 MiB, each one distinct (seed and index in its first 16 bytes)
# ------------------------------------------------------------------------------------------
MAX_VALUE = 4 * MiB
POOL_BYTES = 12 * MiB
_POOL = None


def pool():
    global _POOL
    if _POOL is None:
        _POOL = random.Random(20261205).randbytes(POOL_BYTES)
    return _POOL


def value(seed, i, n):
    off = (i * 7919 + seed * 104729) % (POOL_BYTES - MAX_VALUE)
    return struct.pack("<QQ", seed, i) + pool()[off:off + n - 16]


def sizes_for(seed, total):
    """1-4 MiB sizes from ``seed`` until they add up to ``total``."""
    rnd = random.Random(seed)
    out, acc = [], 0
    while acc < total:
        n = rnd.randint(MiB, MAX_VALUE)
        out.append(n)
        acc += n
    return out


# ------------------------------------------------------------------------------------------
# Page cache
# ------------------------------------------------------------------------------------------
def drop_cache(paths):
    """Sync, posix_fadvise(DONTNEED) every file under ``paths``, then try drop_caches.
    Returns (files advised, drop_caches permitted)."""
    os.sync()
    n = 0
    for p in paths:
        files = [p] if os.path.isfile(p) else [
            os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs]
        for f in files:
            try:
                fd = os.open(f, os.O_RDONLY)
            except OSError:
                continue
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += 1
            finally:
                os.close(fd)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        dropped = True
    except OSError:
        dropped = False
    return n, dropped


def resident_bytes(paths):
    """Bytes of the files under ``paths`` that are in the page cache (mincore), or None."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for p in paths:
        files = [p] if os.path.isfile(p) else [
            os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs]
        for f in files:
            try:
                size = os.path.getsize(f)
                if size == 0:
                    continue
                fd = os.open(f, os.O_RDONLY)
            except OSError:
                continue
            try:
                addr = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
                if addr in (None, ctypes.c_void_p(-1).value):
                    return None
                try:
                    n = (size + page - 1) // page
                    vec = (ctypes.c_ubyte * n)()
                    if libc.mincore(addr, size, vec) != 0:
                        return None
                    total += sum(1 for b in vec if b & 1) * page
                finally:
                    libc.munmap(addr, size)
            finally:
                os.close(fd)
    return total


def dir_bytes(path):
    total = 0
    for d, _, fs in os.walk(path):
        for f in fs:
            try:
                total += os.path.getsize(os.path.join(d, f))
            except OSError:
                pass
    return total


# ------------------------------------------------------------------------------------------
# Workers: one store client (the segment and tier owner), one scenario, one RESULT line
# ------------------------------------------------------------------------------------------
def say(msg):
    print(msg, flush=True)


def tw_metric(port, name):
    if not port:
        return None
    try:
        text = urllib.request.urlopen(f"http://{HOST}:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"tidewire_master_{name} "):
            return int(float(line.split()[1]))
    return None


def open_store(cfg):
    if cfg["store"] == "tidewire":
        from tidewire.store import MooncakeDistributedStore
    else:
        from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    kw = {}
    if cfg.get("tier"):
        kw = dict(enable_ssd_offload=True, ssd_offload_path=cfg["tier"])
    t0 = time.perf_counter()
    rc = s.setup(HOST, "P2PHANDSHAKE", cfg["segment"], cfg["local_buffer"], "tcp", "",
                 cfg["master"], **kw)
    if rc != 0:
        raise RuntimeError(f"setup returned {rc}")
    return s, time.perf_counter() - t0


class PutStats:
    def __init__(self):
        self.bytes = 0
        self.seconds = 0.0
        self.puts = 0
        self.nonzero = 0      # puts whose first attempt returned a nonzero code
        self.retries = 0      # extra attempts
        self.failed = 0       # puts that never succeeded within RETRY_LIMIT
        self.codes = {}
        self.skipped = 0      # puts never attempted: the phase ran out of its time budget

    def as_dict(self):
        return {"bytes": self.bytes, "seconds": self.seconds, "puts": self.puts,
                "gibps": self.bytes / GiB / self.seconds if self.seconds > 0 else None,
                "nonzero_puts": self.nonzero, "retries": self.retries, "failed": self.failed,
                "skipped": self.skipped,
                "codes": {str(k): v for k, v in sorted(self.codes.items())}}


def put_retry(s, key, val, st, budget_left=None):
    """put() with retries every 5 ms until it succeeds or RETRY_LIMIT (or ``budget_left``
    seconds, the less) pass; returns the last code."""
    t0 = time.perf_counter()
    deadline = t0 + (RETRY_LIMIT if budget_left is None else
                     max(0.0, min(RETRY_LIMIT, budget_left)))
    first = True
    while True:
        rc = s.put(key, val)
        if rc == 0:
            break
        st.codes[rc] = st.codes.get(rc, 0) + 1
        if first:
            st.nonzero += 1
            first = False
        if time.perf_counter() >= deadline:
            st.failed += 1
            break
        st.retries += 1
        time.sleep(RETRY_SLEEP)
    st.seconds += time.perf_counter() - t0
    st.puts += 1
    if rc == 0:
        st.bytes += len(val)
    return rc


def disk_reads(s):
    f = getattr(s, "get_offload_rpc_read_count", None)
    try:
        return int(f()) if f else None
    except Exception:
        return None


def read_back(s, items, method):
    """Read ``items`` [(key, seed, index, size)] with ``method``; only the calls are timed.
    Verifies every byte. Returns counts and seconds."""
    r = {"method": method, "keys": len(items), "bytes": sum(it[3] for it in items),
         "hits": 0, "hit_bytes": 0, "misses": 0, "mismatches": 0, "seconds": 0.0}
    before = disk_reads(s)

    def check(it, got):
        if got is None or len(got) == 0:
            r["misses"] += 1
        elif bytes(got) == value(it[1], it[2], it[3]):
            r["hits"] += 1
            r["hit_bytes"] += it[3]
        else:
            r["mismatches"] += 1

    if method == "batch_get_buffer":
        for i in range(0, len(items), BATCH_KEYS):
            chunk = items[i:i + BATCH_KEYS]
            t0 = time.perf_counter()
            bufs = s.batch_get_buffer([it[0] for it in chunk])
            r["seconds"] += time.perf_counter() - t0
            for it, b in zip(chunk, bufs):
                check(it, b)
            del bufs
    else:
        for it in items:
            t0 = time.perf_counter()
            got = s.get(it[0])
            r["seconds"] += time.perf_counter() - t0
            check(it, got)
    after = disk_reads(s)
    r["disk_reads"] = after - before if before is not None and after is not None else None
    r["gibps"] = r["hit_bytes"] / GiB / r["seconds"] if r["seconds"] > 0 else None
    r["hit_fraction"] = r["hit_bytes"] / r["bytes"] if r["bytes"] else None
    return r


def settle(cfg, timeout=60.0, stable_for=3.0):
    """Wait until the tier's files stop growing (and tidewire's offload queue is empty)."""
    t0 = time.monotonic()
    last, since = -1, time.monotonic()
    while time.monotonic() - t0 < timeout:
        now = dir_bytes(cfg["tier"])
        queued = tw_metric(cfg.get("metrics_port"), "offload_queued")
        if now != last or (queued not in (None, 0)):
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= stable_for:
            break
        time.sleep(0.25)
    return time.monotonic() - t0, dir_bytes(cfg["tier"])


def worker_fill(cfg):
    s, setup_s = open_store(cfg)
    seed = cfg["seed"]
    sizes = sizes_for(seed, cfg["fill_bytes"])
    keys = [f"fill-{seed}-{i}" for i in range(len(sizes))]
    pre, full = PutStats(), PutStats()
    acc = 0
    t_all = time.perf_counter()
    budget = cfg["put_budget"]
    for i, n in enumerate(sizes):
        st = full if acc >= cfg["segment"] else pre
        left = budget - (pre.seconds + full.seconds)
        if left <= 0:
            st.skipped += 1
            acc += n
            continue
        put_retry(s, keys[i], value(seed, i, n), st, left)
        acc += n
        if (i + 1) % 100 == 0:
            say(f"    put {i + 1}/{len(sizes)} ({acc / MiB:.0f} MiB) "
                f"{time.perf_counter() - t_all:.1f}s nonzero={pre.nonzero + full.nonzero}")
    out = {"setup_s": setup_s, "values": len(sizes), "put_bytes": acc,
           "put_empty": pre.as_dict(), "put_full": full.as_dict()}
    if cfg.get("tier"):
        settle_s, on_disk = settle(cfg)
        out.update(settle_s=settle_s, disk_bytes=on_disk)
        say(f"    settled in {settle_s:.1f}s, {on_disk / MiB:.0f} MiB in the tier")
        # The oldest values, in put order, were evicted first: they are the disk-resident ones.
        items = [(keys[i], seed, i, n) for i, n in enumerate(sizes)]
        slices, pos = [], 0
        for j in range(cfg["cold_slices"]):
            chunk, b = [], 0
            while pos < len(items) and b < cfg["slice_bytes"]:
                chunk.append(items[pos])
                b += items[pos][3]
                pos += 1
            if not chunk:
                break
            advised, dropped = drop_cache([cfg["tier"]])
            cached = resident_bytes([cfg["tier"]])
            method = ("batch_get_buffer", "get")[(j + seed) % 2]
            r = read_back(s, chunk, method)
            r.update(files_advised=advised, drop_caches=dropped, cached_after_drop=cached)
            slices.append(r)
            say(f"    cold {method}: {r['hit_bytes'] / MiB:.0f}/{r['bytes'] / MiB:.0f} MiB "
                f"in {r['seconds']:.2f}s = {r['gibps'] or 0:.2f} GiB/s, "
                f"misses={r['misses']} mismatches={r['mismatches']} disk_reads={r['disk_reads']} "
                f"(page cache after the drop: {fmt(cached and cached / MiB, '.1f')} MiB)")
        out["cold"] = slices
    for name in ("offload_written_total", "offload_lost_total", "offload_failed_total",
                 "offload_queue_overflow_total", "evictions_total", "disk_used_bytes"):
        v = tw_metric(cfg.get("metrics_port"), name)
        if v is not None:
            out.setdefault("master_metrics", {})[name] = v
    return s, out


def worker_workload(cfg):
    s, setup_s = open_store(cfg)
    rounds = []
    earlier = []  # (key, seed, index, size) of every earlier round
    for r in range(cfg["wl_rounds"]):
        seed = cfg["seed"] * 1000 + r
        row = {"round": r + 1}
        if earlier:
            if cfg.get("tier") and cfg["drop_cache"]:
                drop_cache([cfg["tier"]])
            rb = read_back(s, earlier, "batch_get_buffer")
            row["reread"] = rb
        sizes = sizes_for(seed, cfg["new_bytes"])
        st = PutStats()
        new = []
        for i, n in enumerate(sizes):
            key = f"wl-{seed}-{i}"
            left = cfg["put_budget"] - st.seconds
            if left <= 0:
                st.skipped += 1
            else:
                put_retry(s, key, value(seed, i, n), st, left)
            new.append((key, seed, i, n))  # a put that failed is a miss when re-read
        row["put"] = st.as_dict()
        rounds.append(row)
        rb = row.get("reread")
        say(f"    round {r + 1}: " + (
            f"re-read {rb['hit_bytes'] / MiB:.0f}/{rb['bytes'] / MiB:.0f} MiB "
            f"hit={rb['hit_fraction']:.2f} get={rb['seconds']:.2f}s misses={rb['misses']} "
            f"mismatches={rb['mismatches']}; " if rb else "") +
            f"put {st.bytes / MiB:.0f} MiB in {st.seconds:.2f}s nonzero={st.nonzero} "
            f"failed={st.failed}" + (f" skipped={st.skipped}" if st.skipped else ""))
        earlier += new
    out = {"setup_s": setup_s, "rounds": rounds}
    if cfg.get("tier"):
        out["disk_bytes"] = dir_bytes(cfg["tier"])
    return s, out


def worker_main(cfg):
    try:
        fn = worker_fill if cfg["task"] == "fill" else worker_workload
        s, out = fn(cfg)
        print("RESULT " + json.dumps(out), flush=True)
        s.close()
    except Exception as e:  # reported as the worker's result
        print("RESULT " + json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
    os._exit(0)  # skip interpreter teardown: store destructors may block


# ------------------------------------------------------------------------------------------
# Orchestrator: masters, workers, dd, tables
# ------------------------------------------------------------------------------------------
def free_port():
    s = socket.socket()
    s.bind((HOST, 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Run:
    def __init__(self, args):
        self.args = args
        self.dir = f"/tmp/twbench-{os.getpid()}"
        self.procs = []  # every process started here, stopped by PID
        self.log = None
        self.dd_cached = []
        self.dd_parallel = []

    def out(self, msg):
        say(msg)
        if self.log:
            self.log.write(msg + "\n")
            self.log.flush()

    def stop(self, p, grace=0.0):
        if p.poll() is None:
            if grace:
                try:
                    p.wait(timeout=grace)
                    return
                except subprocess.TimeoutExpired:
                    pass
            p.send_signal(signal.SIGKILL)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def cleanup(self):
        for p in self.procs:
            self.stop(p)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- snapshot of tidewire, so a rebuild during the run changes nothing measured
    def snapshot(self):
        snap = os.path.join(self.dir, "snap")
        os.makedirs(os.path.join(snap, "python"))
        lib = os.environ.get("TIDEWIRE_LIB") or os.path.join(
            PROJECT, "target", "release", "libtidewire.so")
        master = os.path.join(PROJECT, "target", "release", "tidewire-master")
        for p in (lib, master):
            if not os.path.exists(p):
                raise SystemExit(f"disk_tier.py: {p} is missing (build tidewire first)")
        info = {"lib": lib, "lib_mtime": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(lib))),
            "master_mtime": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(master)))}
        if self.args.no_snapshot:
            self.tw_lib, self.tw_master = lib, master
            self.tw_python = os.path.join(PROJECT, "python")
        else:
            self.tw_lib = shutil.copy2(lib, os.path.join(snap, "libtidewire.so"))
            self.tw_master = shutil.copy2(master, os.path.join(snap, "tidewire-master"))
            shutil.copytree(os.path.join(PROJECT, "python", "tidewire"),
                            os.path.join(snap, "python", "tidewire"),
                            ignore=shutil.ignore_patterns("__pycache__", "*.so"))
            self.tw_python = os.path.join(snap, "python")
        return info

    def env(self):
        e = dict(os.environ)
        e["TIDEWIRE_LIB"] = self.tw_lib
        e["PYTHONPATH"] = os.pathsep.join(
            [self.tw_python] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        e.setdefault("MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS", "1")
        e.setdefault("GLOG_minloglevel", "2")
        e["PYTHONUNBUFFERED"] = "1"
        return e

    # -- masters
    def start_master(self, store, mode, tag):
        flags = []
        if mode in ("evict", "wb"):
            flags.append("--enable_offload=true")
        if mode == "evict":
            flags.append("--offload_on_evict=true")
        errf = open(os.path.join(self.args.outdir, f"{tag}.master.stderr"), "wb")
        if store == "tidewire":
            p = subprocess.Popen([self.tw_master, f"--rpc_address={HOST}", "--rpc_port=0",
                                  f"--metrics_host={HOST}", "--metrics_port=0", *flags],
                                 stdout=subprocess.PIPE, stderr=errf, text=True, env=self.env())
            self.procs.append(p)
            line = p.stdout.readline()
            if not line:
                raise RuntimeError("tidewire-master did not start")
            info = json.loads(line)
            return p, f"{HOST}:{info['rpc_port']}", info["metrics_port"]
        exe = os.path.join(os.path.dirname(sys.executable), "mooncake_master")
        if not os.path.exists(exe):
            exe = shutil.which("mooncake_master")
        port, mport = free_port(), free_port()
        p = subprocess.Popen([exe, f"--rpc_address={HOST}", f"--rpc_port={port}",
                              f"--metrics_host={HOST}", f"--metrics_port={mport}", *flags],
                             stdout=subprocess.DEVNULL, stderr=errf, env=self.env())
        self.procs.append(p)
        deadline = time.monotonic() + 30
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"mooncake_master exited with {p.returncode}")
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("mooncake_master did not listen within 30 s")
                time.sleep(0.1)
        return p, f"{HOST}:{port}", None

    # -- one worker with its own master
    def work(self, task, store, mode, rnd, extra, timeout):
        tag = f"{task}-{store}-{mode}-r{rnd}"
        tier = None
        if mode in ("evict", "wb"):
            tier = os.path.join(self.dir, f"tier-{tag}")
            os.makedirs(tier)
        self.out(f"  [{time.strftime('%H:%M:%S')}] {task} {store} {MODE_NAMES[mode]} "
                 f"round {rnd}")
        master = worker = None
        t0 = time.monotonic()
        try:
            master, addr, mport = self.start_master(store, mode, tag)
            cfg = dict(task=task, store=store, mode=mode, master=addr, metrics_port=mport,
                       tier=tier, segment=self.args.segment_mib * MiB,
                       local_buffer=self.args.local_buffer_mib * MiB, **extra)
            errf = open(os.path.join(self.args.outdir, f"{tag}.stderr"), "wb")
            worker = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                       json.dumps(cfg)], stdout=subprocess.PIPE, stderr=errf,
                                      text=True, env=self.env())
            self.procs.append(worker)
            lines = queue.Queue()

            def pump():
                for line in worker.stdout:
                    lines.put(line)
                lines.put(None)

            threading.Thread(target=pump, daemon=True).start()
            deadline = time.monotonic() + timeout
            result = None
            while result is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    result = {"error": f"timed out after {timeout} s"}
                    break
                try:
                    line = lines.get(timeout=left)
                except queue.Empty:
                    continue
                if line is None:
                    result = {"error": f"worker exited ({worker.poll()}) without a result"}
                elif line.startswith("RESULT "):
                    result = json.loads(line[7:])
                else:
                    self.out(line.rstrip())
            if "error" in result:
                self.out(f"    ERROR: {result['error']} (see {tag}.stderr)")
            self.stop(worker, grace=30)
        finally:
            if worker is not None:
                self.stop(worker)
            if master is not None:
                self.stop(master)
            if tier:
                shutil.rmtree(tier, ignore_errors=True)
        result["wall_s"] = time.monotonic() - t0
        return result

    # -- dd ceiling
    def dd_prepare(self):
        path = os.path.join(self.dir, "dd-1GiB")
        chunk = 4 * MiB
        with open(path, "wb") as f:
            for i in range(GiB // chunk):
                f.write(value(9, i, chunk))
            f.flush()
            os.fsync(f.fileno())
        return path

    def dd_read(self, path):
        drop_cache([path])
        self.dd_cached.append(resident_bytes([path]))
        streams = self.args.dd_streams
        if streams > 1:
            # The same file read by N concurrent dd's on disjoint quarters (queue depth N).
            per = GiB // (4 * MiB) // streams
            drop_cache([path])
            t0 = time.monotonic()
            ps = [subprocess.Popen(["dd", f"if={path}", "of=/dev/null", "bs=4M", "iflag=direct",
                                    f"skip={k * per}", f"count={per}"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                  for k in range(streams)]
            ok = all(p.wait() == 0 for p in ps)
            g = streams * per * 4 * MiB / GiB / (time.monotonic() - t0)
            self.dd_parallel.append(g if ok else None)
            self.out(f"    {streams} concurrent dd iflag=direct: {g:.2f} GiB/s")
        p = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=4M", "iflag=direct"],
                           capture_output=True, text=True)
        m = re.search(r"(\d+) bytes .* copied, ([\d.e+-]+) s", p.stderr)
        if p.returncode != 0 or not m:
            self.out(f"    dd failed: {p.stderr.strip()[-300:]}")
            return None
        g = int(m.group(1)) / GiB / float(m.group(2))
        self.out(f"    dd iflag=direct: {int(m.group(1)) / GiB:.2f} GiB in {m.group(2)} s "
                 f"= {g:.2f} GiB/s")
        return g


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec=".2f", unit=""):
    return "n/a" if x is None else f"{x:{spec}}{unit}"


def ratio(a, b):
    return "" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def summarize(res, args):
    """Medians per (store, mode) and the markdown tables."""
    S = {"dd_gibps": med(res["dd"]), "dd_samples": res["dd"], "fill": {}, "workload": {},
         "dd_parallel_gibps": med(res.get("dd_parallel", []))}
    ceiling = S["dd_gibps"]
    for store in STORES:
        for mode in FILL_MODES:
            runs = [r for r in res["fill"].get(f"{store}/{mode}", []) if "error" not in r]
            errs = [r["error"] for r in res["fill"].get(f"{store}/{mode}", []) if "error" in r]
            if not runs and not errs:
                continue
            d = {"rounds_ok": len(runs), "errors": errs}
            pf = [r["put_full"] for r in runs]
            d["put_full_gibps"] = med([p["gibps"] for p in pf])
            d["put_empty_gibps"] = med([r["put_empty"]["gibps"] for r in runs])
            for k in ("nonzero_puts", "retries", "failed", "puts", "skipped"):
                d[f"put_full_{k}"] = med([p[k] for p in pf])
            for k in ("nonzero_puts", "retries", "failed", "skipped", "puts"):
                d[f"put_all_{k}"] = med([r["put_empty"][k] + r["put_full"][k] for r in runs])
            d["put_full_codes"] = {}
            for p in pf:
                for c, n in p["codes"].items():
                    d["put_full_codes"][c] = d["put_full_codes"].get(c, 0) + n
            if mode != "off":
                d["settle_s"] = med([r.get("settle_s") for r in runs])
                d["disk_mib"] = med([r.get("disk_bytes", 0) / MiB for r in runs])
                for method in ("batch_get_buffer", "get"):
                    sl = [c for r in runs for c in r.get("cold", []) if c["method"] == method]
                    # A slice whose hits involved no disk read (the store counts them) was
                    # served from DRAM: it is no cold read and gives no GiB/s.
                    dram = [c for c in sl if c["disk_reads"] == 0 and c["hits"] > 0]
                    g = med([c["gibps"] for c in sl if c not in dram and c["hits"] > 0])
                    d[f"cold_{method}"] = {
                        "gibps": g, "of_dd": g / ceiling if g and ceiling else None,
                        "hit_fraction": med([c["hit_fraction"] for c in sl]),
                        "misses": sum(c["misses"] for c in sl),
                        "mismatches": sum(c["mismatches"] for c in sl),
                        "keys": sum(c["keys"] for c in sl), "slices": len(sl),
                        "dram_served_slices": len(dram),
                        "disk_reads": sum(c["disk_reads"] or 0 for c in sl)
                        if all(c["disk_reads"] is not None for c in sl) else None}
            S["fill"][f"{store}/{mode}"] = d
    for name, r in res["workload"].items():
        if "error" in r:
            S["workload"][name] = {"error": r["error"]}
            continue
        S["workload"][name] = {"rounds": [
            {"round": row["round"],
             "hit_fraction": row.get("reread", {}).get("hit_fraction"),
             "get_s": row.get("reread", {}).get("seconds"),
             "reread_mib": row.get("reread", {}).get("bytes", 0) / MiB,
             "misses": row.get("reread", {}).get("misses"),
             "mismatches": row.get("reread", {}).get("mismatches"),
             "put_s": row["put"]["seconds"], "put_failed": row["put"]["failed"],
             "put_nonzero": row["put"]["nonzero_puts"]} for row in r["rounds"]]}

    L = []
    seg = args.segment_mib
    L.append(f"### Disk tier: tidewire vs Mooncake 0.3.13.post1 ({seg} MiB DRAM segment, "
             f"1-4 MiB values, medians of {args.rounds} rounds)\n")
    L.append(f"dd ceiling (`dd bs=4M iflag=direct`, 1 GiB file in the tiers' filesystem): "
             f"**{fmt(ceiling)} GiB/s** (samples {', '.join(fmt(x) for x in res['dd'])}); "
             f"{args.dd_streams} concurrent dd's on disjoint parts: "
             f"{fmt(S['dd_parallel_gibps'])} GiB/s. The % of dd columns use the first.\n")
    L.append(f"**Cold gets of disk-resident values** (put {args.fill_x}x the segment, settle, "
             f"drop the page cache, read the oldest {args.slice_mib} MiB slices; GiB/s of "
             f"verified bytes)\n")
    L.append("| mode | read | tidewire GiB/s | % of dd | hit | Mooncake GiB/s | % of dd | hit "
             "| tidewire / Mooncake |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    for mode in ("wb", "evict"):
        for method in ("batch_get_buffer", "get"):
            cells = []
            vals = {}
            for store in STORES:
                d = S["fill"].get(f"{store}/{mode}", {}).get(f"cold_{method}")
                if not d:
                    cells += ["-", "-", "-"]
                    continue
                vals[store] = d["gibps"]
                bad = (f", {d['mismatches']} mismatched" if d["mismatches"] else "")
                if d["dram_served_slices"]:
                    bad += (f" ({d['dram_served_slices']}/{d['slices']} slices served "
                            f"from DRAM, 0 disk reads)")
                cells += [fmt(d["gibps"]), fmt(d["of_dd"] and 100 * d["of_dd"], ".0f", "%"),
                          fmt(d["hit_fraction"] and 100 * d["hit_fraction"], ".0f", "%") + bad]
            L.append(f"| {MODE_NAMES[mode]} | {method} | " + " | ".join(cells) +
                     f" | {ratio(vals.get('tidewire'), vals.get('mooncake'))} |")
    L.append("")
    L.append(f"**Puts into a full DRAM segment** (GiB/s: the puts after the first {seg} MiB, "
             f"time inside put(); counts: every put of the run, nonzero = puts whose first try "
             f"failed, retried every 5 ms up to 10 s, failed = still failing after 10 s, skipped "
             f"= not attempted after {args.put_budget:.0f} s of put time; median per round)\n")
    L.append("| mode | tidewire GiB/s | nonzero / retries / failed | Mooncake GiB/s | "
             "nonzero / retries / failed | Mooncake codes | tidewire / Mooncake |")
    L.append("|---|---|---|---|---|---|---|")
    for mode in FILL_MODES:
        cells, vals, codes = [], {}, ""
        for store in STORES:
            d = S["fill"].get(f"{store}/{mode}")
            if not d:
                cells += ["-", "-"]
                continue
            vals[store] = d["put_full_gibps"]
            cells += [fmt(d["put_full_gibps"]) + (f" ({len(d['errors'])} runs failed)"
                                                  if d["errors"] else ""),
                      f"{fmt(d['put_all_nonzero_puts'], '.0f')} / "
                      f"{fmt(d['put_all_retries'], '.0f')} / {fmt(d['put_all_failed'], '.0f')}"
                      f" of {fmt(d['put_all_puts'], '.0f')}" +
                      (f" ({fmt(d['put_all_skipped'], '.0f')} skipped: budget)"
                       if d["put_all_skipped"] else "")]
            if store == "mooncake":
                codes = ", ".join(f"{c}: {n}" for c, n in d["put_full_codes"].items()) or "-"
        L.append(f"| {MODE_NAMES[mode]} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | "
                 f"{codes} | {ratio(vals.get('tidewire'), vals.get('mooncake'))} |")
    L.append("")
    if S["workload"]:
        names = list(S["workload"])
        L.append(f"**Multi-round workload** (working set {args.ws_x}x the segment over "
                 f"{args.wl_rounds} rounds; each round re-reads every earlier key with "
                 f"batch_get_buffer, then adds {args.wl_new_mib} MiB; hit = re-read bytes "
                 f"equal to what was put; get = seconds in the get calls)\n")
        L.append("| round | re-read MiB | " + " | ".join(
            f"{n} hit | {n} get s" for n in names) + " |")
        L.append("|---|---|" + "---|---|" * len(names))
        nrounds = max((len(w.get("rounds", [])) for w in S["workload"].values()), default=0)
        for i in range(1, nrounds):
            cells, mib = [], None
            for n in names:
                rows = S["workload"][n].get("rounds", [])
                if i < len(rows):
                    row = rows[i]
                    mib = row["reread_mib"]
                    bad = f" ({row['mismatches']} mismatched)" if row["mismatches"] else ""
                    cells += [fmt(100 * row["hit_fraction"], ".0f", "%") + bad,
                              fmt(row["get_s"])]
                else:
                    cells += ["-", "-"]
            L.append(f"| {i + 1} | {fmt(mib, '.0f')} | " + " | ".join(cells) + " |")
        for n in names:
            if "error" in S["workload"][n]:
                L.append(f"\n{n}: ERROR {S['workload'][n]['error']}")
        L.append("")
    return S, "\n".join(L)


def orchestrate(args):
    run = Run(args)
    os.makedirs(args.outdir, exist_ok=True)
    run.log = open(os.path.join(args.outdir, "progress.log"), "w")
    os.makedirs(run.dir)
    res = {"dd": [], "fill": {}, "workload": {},
           "args": {k: v for k, v in vars(args).items() if k not in ("table",)}}
    t_start = time.monotonic()
    try:
        res["tidewire_build"] = run.snapshot()
        run.out(f"disk_tier: run folder {run.dir}, results {args.outdir}")
        run.out(f"  tidewire lib {res['tidewire_build']['lib']} "
                f"(built {res['tidewire_build']['lib_mtime']}), python {sys.executable}")
        st = os.statvfs(run.dir)
        res["machine"] = {"nproc": os.cpu_count(), "loadavg": open("/proc/loadavg").read().split()[:3],
                          "fs_free_gib": st.f_bavail * st.f_frsize / GiB,
                          "heartbeat_s": run.env()["MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS"]}
        ddfile = None
        if "dd" in args.sections:
            run.out(f"[{time.strftime('%H:%M:%S')}] dd ceiling: writing a 1 GiB file")
            ddfile = run.dd_prepare()
            for _ in range(args.dd_rounds):
                res["dd"].append(run.dd_read(ddfile))
        if "fill" in args.sections:
            run.out(f"[{time.strftime('%H:%M:%S')}] fill: {args.fill_x}x the segment, "
                    f"{args.rounds} rounds")
            extra = dict(fill_bytes=int(args.fill_x * args.segment_mib * MiB),
                         put_budget=args.put_budget,
                         slice_bytes=args.slice_mib * MiB, cold_slices=args.cold_slices)
            for rnd in range(1, args.rounds + 1):
                for mode in FILL_MODES:
                    order = args.stores if rnd % 2 else list(reversed(args.stores))
                    for store in order:
                        r = run.work("fill", store, mode, rnd, dict(extra, seed=rnd),
                                     args.worker_timeout)
                        res["fill"].setdefault(f"{store}/{mode}", []).append(r)
        if "workload" in args.sections:
            run.out(f"[{time.strftime('%H:%M:%S')}] workload: {args.wl_rounds} rounds of "
                    f"{args.wl_new_mib} MiB")
            extra = dict(wl_rounds=args.wl_rounds, new_bytes=args.wl_new_mib * MiB, seed=77,
                         put_budget=args.wl_put_budget,
                         drop_cache=not args.wl_keep_cache)
            plan = [("tidewire", "wb", "tidewire tier"), ("tidewire", "off", "tidewire DRAM-only"),
                    ("mooncake", "wb", "Mooncake SSD")]
            for store, mode, name in plan:
                if store in args.stores:
                    res["workload"][name] = run.work("workload", store, mode, 1, extra,
                                                     args.worker_timeout * 2)
        if ddfile:
            run.out(f"[{time.strftime('%H:%M:%S')}] dd ceiling again")
            for _ in range(args.dd_end_rounds):
                res["dd"].append(run.dd_read(ddfile))
        res["dd"] = [x for x in res["dd"] if x is not None]
        res["dd_cached_after_drop"] = run.dd_cached
        res["dd_parallel"] = [x for x in run.dd_parallel if x is not None]
        res["elapsed_s"] = time.monotonic() - t_start
        S, table = summarize(res, args)
        res["summary"] = S
        run.out("")
        run.out(table)
        run.out(f"(elapsed {res['elapsed_s']:.0f} s; raw results {args.outdir}/result.json)")
        with open(os.path.join(args.outdir, "summary.md"), "w") as f:
            f.write(table + "\n")
        with open(os.path.join(args.outdir, "result.json"), "w") as f:
            json.dump(res, f, indent=1)
        run.out("RESULT-JSON " + json.dumps(res, separators=(",", ":")))
        fails = [k for k, v in res["fill"].items() for r in v if "error" in r]
        fails += [k for k, v in res["workload"].items() if "error" in v]
        return 1 if fails else 0
    finally:
        run.cleanup()


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sections", default="dd,fill,workload")
    ap.add_argument("--stores", default="tidewire,mooncake")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the fill section")
    ap.add_argument("--segment-mib", type=int, default=256)
    ap.add_argument("--local-buffer-mib", type=int, default=128)
    ap.add_argument("--fill-x", type=float, default=3.5, help="fill: puts, in segments")
    ap.add_argument("--slice-mib", type=int, default=96, help="fill: bytes per cold slice")
    ap.add_argument("--cold-slices", type=int, default=4,
                    help="fill: cold slices per round, alternating batch_get_buffer / get")
    ap.add_argument("--ws-x", type=float, default=4.0, help="workload: working set, in segments")
    ap.add_argument("--wl-rounds", type=int, default=8)
    ap.add_argument("--wl-keep-cache", action="store_true",
                    help="workload: do not drop the tier's page cache before each round")
    ap.add_argument("--put-budget", type=float, default=40.0,
                    help="fill: seconds of put time per run; puts past it are skipped")
    ap.add_argument("--wl-put-budget", type=float, default=20.0,
                    help="workload: seconds of put time per round; puts past it are skipped")
    ap.add_argument("--dd-rounds", type=int, default=3)
    ap.add_argument("--dd-streams", type=int, default=4,
                    help="also time this many concurrent dd's (0 or 1: skip)")
    ap.add_argument("--dd-end-rounds", type=int, default=2)
    ap.add_argument("--worker-timeout", type=int, default=240)
    ap.add_argument("--quick", action="store_true", help="1 round, 2x the segment, 4 rounds")
    ap.add_argument("--no-snapshot", action="store_true",
                    help="use the build in place instead of a copy")
    ap.add_argument("--python", default=os.path.join(PROJECT, ".venv-mooncake", "bin", "python"))
    ap.add_argument("--outdir", default=os.path.join(
        PROJECT, "target", "bench", "results",
        "disk_tier-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())))
    ap.add_argument("--table", metavar="RESULT_JSON",
                    help="print the tables of an earlier run's result.json and exit")
    ap.add_argument("--plot", nargs=2, metavar=("RESULT_JSON", "PNG"),
                    help="draw the multi-round workload of an earlier run (matplotlib) and exit")
    ap.add_argument("--in-namespace", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.fill_x, args.wl_rounds, args.ws_x = 1, 2.0, 4, 2.0
        args.cold_slices, args.dd_rounds, args.dd_end_rounds = 2, 1, 1
    args.sections = [s for s in args.sections.split(",") if s]
    args.stores = [s for s in args.stores.split(",") if s]
    for s in args.stores:
        if s not in STORES:
            ap.error(f"unknown store {s}")
    args.wl_new_mib = int(args.ws_x * args.segment_mib / args.wl_rounds)
    return args


def plot(result_json, png):
    """The multi-round workload, per round: re-read hits and get time, each store a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(result_json) as f:
        work = json.load(f)["summary"]["workload"]
    fig, (hits, gets) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, w in work.items():
        rows = [r for r in w["rounds"] if r.get("hit_fraction") is not None]
        rounds = [r["round"] for r in rows]
        hits.plot(rounds, [100 * r["hit_fraction"] for r in rows], marker="o", label=name)
        gets.plot(rounds, [r["get_s"] for r in rows], marker="o", label=name)
    hits.set(title="re-reads that hit (%)", xlabel="round", ylim=(0, 105))
    gets.set(title="get time per round (s)", xlabel="round")
    hits.legend()
    fig.suptitle("working set growing to 4x a 256 MiB DRAM segment")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        worker_main(json.loads(sys.argv[2]))
        return
    args = parse(sys.argv[1:])
    if args.plot:
        plot(*args.plot)
        return
    if args.table:
        with open(args.table) as f:
            res = json.load(f)
        a = argparse.Namespace(**dict(vars(args), **res.get("args", {})))
        a.stores = STORES
        print(summarize(res, a)[1])
        return
    if not args.in_namespace:
        if not os.path.exists(args.python):
            raise SystemExit(f"disk_tier.py: {args.python} is missing "
                             f"(scripts/setup_mooncake_venv.sh creates .venv-mooncake)")
        if os.geteuid() != 0:
            print("disk_tier.py: not root: drop_caches will be skipped (fadvise still runs)",
                  file=sys.stderr)
        cmd = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
               args.python, os.path.abspath(__file__), *sys.argv[1:], "--in-namespace"]
        os.execvp("unshare", cmd)

    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    sys.exit(orchestrate(args))


if __name__ == "__main__":
    main()
