#!/usr/bin/env python3
"""The store master at scale: tidewire-master against mooncake_master, same harness, same run.

Run it inside a private network namespace (Mooncake's listeners bind all addresses):

    unshare -n bash -c 'ip link set lo up && \\
      TIDEWIRE_LIB=$PWD/target/release/libtidewire.so PYTHONPATH=python \\
      .venv-mooncake/bin/python scripts/bench_master_scale.py --sizes 100000,1000000'

For each size N and each master (a fresh master per size), one driver client with a segment
large enough for every value:

- fills N objects: 64-char hex keys (sha256 of the index), 64-byte values, batch_put_from in
  batches of 1024 from one registered buffer; then batch_is_exist and batch_get_into over all of
  them (each result checked). Keys/s counts only the time inside the store calls;
- reads the master's RSS (VmRSS of /proc/PID/status) before the fill and after it, and reports
  (after - before) / N as bytes per object;
- times 2,000 single is_exist calls on random stored keys while nothing else runs (p50, p99);
- runs 8 threads of 1024-key batch_is_exist in a loop for a few seconds: aggregate keys/s and
  the master's CPU time (utime + stime of /proc/PID/stat) per million keys;
- calls remove_all(force=True) while a second client process calls is_exist on one key in a
  loop: the time remove_all took, what it returned, and the probe's worst and p99 wait and how
  many probes were answered while it ran;
- reads the master's RSS right after remove_all and again after a short settle.

Every child process runs under a deadline; every master is stopped by its PID. Prints one JSON
line per (size, master) and a markdown table at the end (medians where --repeat > 1).
"""

import argparse
import ctypes
import hashlib
import json
import mmap
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MiB = 1 << 20
VALUE = 64
BATCH = 1024
IMPLS = ("tidewire", "mooncake")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def key(i):
    return hashlib.sha256(i.to_bytes(8, "little")).hexdigest()


def keys(lo, hi):
    return [key(i) for i in range(lo, hi)]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def store_module(impl):
    if impl == "tidewire":
        sys.path.insert(0, os.path.join(REPO, "python"))
        import tidewire.store as m
    else:
        import mooncake.store as m
    return m


def start_master(impl, lease_ms):
    port = free_port()
    if impl == "tidewire":
        cmd = [os.path.join(REPO, "target", "release", "tidewire-master"),
               "--rpc_address=127.0.0.1", f"--rpc_port={port}", "--metrics_port=0",
               "--metrics_host=127.0.0.1", f"--default_kv_lease_ttl={lease_ms}"]
    else:
        cmd = [os.path.join(os.path.dirname(sys.executable), "mooncake_master"),
               "--rpc_address=127.0.0.1", f"--rpc_port={port}",
               f"--metrics_port={free_port()}", f"--default_kv_lease_ttl={lease_ms}"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p, f"127.0.0.1:{port}"
        except OSError:
            if p.poll() is not None:
                break
            time.sleep(0.1)
    p.kill()
    p.wait()
    raise RuntimeError(f"{impl} master did not start")


def setup(mod, master, seg, lbuf):
    s = mod.MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", seg, lbuf, "tcp", "", master)
    if rc != 0:
        raise RuntimeError(f"setup returned {rc}")
    return s


class Region:
    def __init__(self, size):
        self.mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.view = ctypes.c_char.from_buffer(self.mm)
        self.addr = ctypes.addressof(self.view)
        self.size = size


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# ------------------------------------------------------------------------------ prober
def prober(args):
    """A second client: waits for "start", then calls is_exist on one key in a loop until
    "stop"; prints the waits (ms)."""
    mod = store_module(args.impl)
    s = setup(mod, args.master, 0, 16 * MiB)
    k = key(0)
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "start":
        s.close()
        return
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    waits = []
    while not stop.is_set():
        t = time.perf_counter()
        s.is_exist(k)
        waits.append((time.perf_counter() - t) * 1000)
    print(json.dumps({"n": len(waits), "max_ms": max(waits, default=0.0),
                      "p99_ms": quantile(waits, 0.99) if waits else 0.0}), flush=True)
    s.close()


# ------------------------------------------------------------------------------ driver
def timed_batches(n, call, check):
    """Runs `call(keys, lo)` over [0, n) in batches; returns keys/s counting the calls only."""
    spent = 0.0
    for lo in range(0, n, BATCH):
        ks = keys(lo, min(n, lo + BATCH))
        t = time.perf_counter()
        r = call(ks, lo)
        spent += time.perf_counter() - t
        check(r, ks)
    return n / spent


def driver(args):
    mod = store_module(args.impl)
    n, pid = args.n, args.master_pid
    out = {"impl": args.impl, "n": n}
    # Room for every value with margin for an allocator's rounding.
    seg = max(256 * MiB, n * VALUE * 4)
    s = setup(mod, args.master, seg, 16 * MiB)
    src, dst = Region(BATCH * VALUE), Region(BATCH * VALUE)
    ctypes.memmove(src.addr, os.urandom(src.size), src.size)
    assert s.register_buffer(src.addr, src.size) == 0
    assert s.register_buffer(dst.addr, dst.size) == 0
    ptrs = [src.addr + j * VALUE for j in range(BATCH)]
    dptrs = [dst.addr + j * VALUE for j in range(BATCH)]
    sizes = [VALUE] * BATCH
    cfg = mod.ReplicateConfig()
    time.sleep(1.0)
    out["rss_empty"] = rss_bytes(pid)

    def all_eq(want):
        def check(r, ks):
            if list(r) != [want] * len(ks):
                bad = [x for x in r if x != want][:4]
                raise RuntimeError(f"{args.impl}: expected {want}, got {bad}")
        return check

    out["put_keys_s"] = timed_batches(
        n, lambda ks, lo: s.batch_put_from(ks, ptrs[:len(ks)], sizes[:len(ks)], cfg), all_eq(0))
    out["exist_keys_s"] = timed_batches(n, lambda ks, lo: s.batch_is_exist(ks), all_eq(1))
    out["get_keys_s"] = timed_batches(
        n, lambda ks, lo: s.batch_get_into(ks, dptrs[:len(ks)], sizes[:len(ks)]), all_eq(VALUE))
    time.sleep(1.0)
    out["rss_full"] = rss_bytes(pid)
    out["bytes_per_object"] = (out["rss_full"] - out["rss_empty"]) / n

    # Single is_exist while nothing else runs.
    rng = random.Random(7)
    waits = []
    for _ in range(2000):
        k = key(rng.randrange(n))
        t = time.perf_counter()
        r = s.is_exist(k)
        waits.append((time.perf_counter() - t) * 1000)
        if r != 1:
            raise RuntimeError(f"{args.impl}: is_exist {r}")
    out["is_exist_p50_ms"] = quantile(waits, 0.5)
    out["is_exist_p99_ms"] = quantile(waits, 0.99)

    # 8 threads x 1024-key batch_is_exist in a loop.
    sets = [keys(b * BATCH, b * BATCH + BATCH) for b in range(min(16, n // BATCH))]
    stop = threading.Event()
    done = [0] * args.threads
    errors = []

    def loop(w):
        i = w
        while not stop.is_set():
            ks = sets[i % len(sets)]
            r = s.batch_is_exist(ks)
            if r.count(1) != len(ks):
                errors.append(r[:4])
                return
            done[w] += len(ks)
            i += 1

    ts = [threading.Thread(target=loop, args=(w,)) for w in range(args.threads)]
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    for t in ts:
        t.start()
    time.sleep(args.loop_s)
    stop.set()
    for t in ts:
        t.join()
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    if errors:
        raise RuntimeError(f"{args.impl}: batch_is_exist {errors[0]}")
    total = sum(done)
    out["mt_exist_keys_s"] = total / wall
    out["mt_master_cpu_s_per_m"] = cpu / (total / 1e6) if total else 0.0
    out["mt_master_cpu_cores"] = cpu / wall

    # remove_all while another client probes is_exist.
    time.sleep(args.lease_ms / 1000 + 0.5)
    pr = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "prober",
                           "--impl", args.impl, "--master", args.master],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        while (ln := pr.stdout.readline()) and ln.strip() != "READY":
            pass
        pr.stdin.write("start\n")
        pr.stdin.flush()
        time.sleep(0.3)
        t = time.perf_counter()
        removed = s.remove_all(True)
        out["remove_all_s"] = time.perf_counter() - t
        out["remove_all_result"] = removed
        time.sleep(0.3)
        pr.stdin.write("stop\n")
        pr.stdin.flush()
        while (ln := pr.stdout.readline()) and not ln.startswith("{"):
            pass
        probe = json.loads(ln) if ln else {}
        pr.wait(timeout=60)
    finally:
        if pr.poll() is None:
            pr.kill()
            pr.wait()
    out["probe_during_remove"] = probe
    out["rss_after_remove"] = rss_bytes(pid)
    time.sleep(args.settle_s)
    out["rss_after_settle"] = rss_bytes(pid)
    left = s.batch_is_exist(keys(0, min(n, BATCH)))
    out["left_after_remove"] = left.count(1)
    s.unregister_buffer(src.addr)
    s.unregister_buffer(dst.addr)
    s.close()
    print(json.dumps(out), flush=True)


# ------------------------------------------------------------------------------ orchestrator
def run_one(impl, n, args):
    master, addr = start_master(impl, args.lease_ms)
    try:
        cmd = [sys.executable, os.path.abspath(__file__), "--role", "driver", "--impl", impl,
               "--master", addr, "--master-pid", str(master.pid), "--n", str(n),
               "--threads", str(args.threads), "--loop-s", str(args.loop_s),
               "--settle-s", str(args.settle_s), "--lease-ms", str(args.lease_ms)]
        budget = 120 + n / 10_000
        r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=budget)
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not lines:
            raise RuntimeError(f"{impl} n={n}: driver exited {r.returncode}")
        res = json.loads(lines[-1])
        res["master_rss_end"] = rss_bytes(master.pid)
        return res
    finally:
        master.kill()
        master.wait()


def fmt_table(results, sizes):
    def med(impl, n, f):
        xs = [r[f] for r in results if r["impl"] == impl and r["n"] == n and f in r]
        return statistics.median(xs) if xs else None

    def probe(impl, n, f):
        xs = [r["probe_during_remove"].get(f) for r in results
              if r["impl"] == impl and r["n"] == n and r.get("probe_during_remove")]
        return statistics.median(xs) if xs else None

    mib = lambda b: f"{b / MiB:,.0f}"
    rows = [
        ("master RSS empty (MiB)", lambda i, n: mib(med(i, n, "rss_empty"))),
        ("master RSS full (MiB)", lambda i, n: mib(med(i, n, "rss_full"))),
        ("bytes/object", lambda i, n: f"{med(i, n, 'bytes_per_object'):,.0f}"),
        ("put keys/s", lambda i, n: f"{med(i, n, 'put_keys_s'):,.0f}"),
        ("exists keys/s", lambda i, n: f"{med(i, n, 'exist_keys_s'):,.0f}"),
        ("get keys/s", lambda i, n: f"{med(i, n, 'get_keys_s'):,.0f}"),
        ("is_exist p50 / p99 idle (ms)",
         lambda i, n: f"{med(i, n, 'is_exist_p50_ms'):.3f} / {med(i, n, 'is_exist_p99_ms'):.3f}"),
        ("8 thr batch_is_exist keys/s", lambda i, n: f"{med(i, n, 'mt_exist_keys_s'):,.0f}"),
        ("  master CPU s per M keys", lambda i, n: f"{med(i, n, 'mt_master_cpu_s_per_m'):.2f}"),
        ("remove_all (s)", lambda i, n: f"{med(i, n, 'remove_all_s'):.2f}"),
        ("remove_all result", lambda i, n: f"{med(i, n, 'remove_all_result'):.0f}"),
        ("probe is_exist worst / p99 during it (ms)",
         lambda i, n: f"{probe(i, n, 'max_ms'):.1f} / {probe(i, n, 'p99_ms'):.1f}"),
        ("probes answered during it", lambda i, n: f"{probe(i, n, 'n'):.0f}"),
        ("RSS after remove_all (MiB)", lambda i, n: mib(med(i, n, "rss_after_remove"))),
        ("RSS after settle (MiB)", lambda i, n: mib(med(i, n, "rss_after_settle"))),
    ]
    impls = [i for i in IMPLS if any(r["impl"] == i for r in results)]
    cols = [(i, n) for n in sizes for i in impls]
    head = "| | " + " | ".join(f"{i} {n:,}" for i, n in cols) + " |"
    lines = [head, "|---" * (len(cols) + 1) + "|"]
    for name, f in rows:
        cells = []
        for i, n in cols:
            try:
                cells.append(f(i, n))
            except (TypeError, KeyError):
                cells.append("-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--impls", default="tidewire,mooncake")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--loop-s", type=float, default=5.0)
    ap.add_argument("--settle-s", type=float, default=3.0)
    ap.add_argument("--lease-ms", type=int, default=1000)
    ap.add_argument("--role", choices=["driver", "prober"])
    ap.add_argument("--impl", choices=IMPLS)
    ap.add_argument("--master")
    ap.add_argument("--master-pid", type=int)
    ap.add_argument("--n", type=int)
    args = ap.parse_args()
    if args.role == "driver":
        return driver(args)
    if args.role == "prober":
        return prober(args)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    impls = [i for i in args.impls.split(",") if i]
    for i in impls:
        if i not in IMPLS:
            sys.exit(f"unknown master {i!r} (tidewire | mooncake)")
    if any(n < BATCH for n in sizes):
        sys.exit(f"each size must be at least {BATCH}")
    results = []
    for n in sizes:
        for rep in range(args.repeat):
            # Alternate which master goes first, so a machine's load changes hit both alike.
            order = impls if rep % 2 == 0 else impls[::-1]
            for impl in order:
                res = run_one(impl, n, args)
                results.append(res)
                print("# " + json.dumps(res), flush=True)
    print()
    print(fmt_table(results, sizes))


if __name__ == "__main__":
    main()
