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
- reads the master's RSS (VmRSS of /proc/PID/status) when it is fresh, when it is empty (after
  a warm-up of 1,024 objects put, read, probed by the 8 threads and removed, so its
  connections and code paths are in place), and after the fill; (full - empty) / N is the
  bytes per object;
- times 2,000 single is_exist calls on random stored keys while nothing else runs (p50, p99);
- runs 8 threads of 1024-key batch_is_exist in a loop for a few seconds: aggregate keys/s and
  the master's CPU time (utime + stime of /proc/PID/stat) per million keys;
- calls remove_all(force=True) while a second client process calls is_exist on one key in a
  loop: the time remove_all took, what it returned, and the probe's worst and p99 wait and how
  many probes were answered while it ran; the same probe over a window before it, with nothing
  else running, is the machine's own noise for reference;
- reads the master's RSS right after remove_all and again after a short settle (the probe goes
  on meanwhile: a master giving memory back must not stall it either).

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
# Warm-up keys come from indexes no run reaches.
WARM = 1 << 62
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
    log = open(os.environ["BENCH_MASTER_LOG"], "a") if os.environ.get("BENCH_MASTER_LOG") \
        else subprocess.DEVNULL
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
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
    """A second client: after "start", calls is_exist on one key in a loop; the waits before the
    first "mark" are the idle reference, those up to the second one happen during the removal,
    those after it while the master settles (and gives memory back); after "stop" prints the
    three (ms)."""
    mod = store_module(args.impl)
    s = setup(mod, args.master, 0, 16 * MiB)
    k = key(0)
    print("READY", flush=True)
    if sys.stdin.readline().strip() != "start":
        s.close()
        return
    phase = [0]

    def follow():
        for _ in range(3):
            sys.stdin.readline()
            phase[0] += 1

    threading.Thread(target=follow, daemon=True).start()
    waits = ([], [], [])
    while phase[0] < 3:
        p = phase[0]
        t = time.perf_counter()
        s.is_exist(k)
        waits[p].append((time.perf_counter() - t) * 1000)

    def stats(w):
        return {"n": len(w), "max_ms": max(w, default=0.0),
                "p99_ms": quantile(w, 0.99) if w else 0.0}

    print(json.dumps({"idle": stats(waits[0]), "during": stats(waits[1]),
                      "settle": stats(waits[2])}), flush=True)
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
    # Room for every value: Mooncake's offset allocator takes at most one allocation per KiB
    # of segment (and at least 1 Mi of them), so 1.25 KiB per object; tidewire's maps it
    # lazily, so the size costs nothing until written.
    seg = max(256 * MiB, n * 1280)
    s = setup(mod, args.master, seg, 16 * MiB)
    src, dst = Region(BATCH * VALUE), Region(BATCH * VALUE)
    ctypes.memmove(src.addr, os.urandom(src.size), src.size)
    assert s.register_buffer(src.addr, src.size) == 0
    assert s.register_buffer(dst.addr, dst.size) == 0
    ptrs = [src.addr + j * VALUE for j in range(BATCH)]
    dptrs = [dst.addr + j * VALUE for j in range(BATCH)]
    sizes = [VALUE] * BATCH
    cfg = mod.ReplicateConfig()
    out["rss_fresh"] = rss_bytes(pid)
    # The second client (it probes during remove_all) connects now, and a warm-up opens the
    # connections the 8-thread loop uses and runs every call once, so "empty" is the master
    # with its connections and code paths in place, holding no object.
    pr = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--role", "prober",
                           "--impl", args.impl, "--master", args.master],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        while (ln := pr.stdout.readline()) and ln.strip() != "READY":
            pass
        warm = [key(WARM + j) for j in range(BATCH)]
        assert set(s.batch_put_from(warm, ptrs, sizes, cfg)) == {0}
        assert set(s.batch_get_into(warm, dptrs, sizes)) == {VALUE}
        mt_exist(s, [warm], args.threads, 0.5)
        assert set(s.batch_remove(warm, True)) == {0}
        time.sleep(1.5)
        out["rss_empty"] = rss_bytes(pid)
        measure(s, args, out, pr, ptrs, dptrs, sizes, cfg)
    finally:
        if pr.poll() is None:
            pr.kill()
            pr.wait()
    s.unregister_buffer(src.addr)
    s.unregister_buffer(dst.addr)
    s.close()
    print(json.dumps(out), flush=True)


def mt_exist(s, sets, threads, seconds):
    """`threads` threads of batch_is_exist over `sets` for `seconds`: (keys done, wall s)."""
    stop = threading.Event()
    done = [0] * threads
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

    ts = [threading.Thread(target=loop, args=(w,)) for w in range(threads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError(f"batch_is_exist {errors[0]}")
    return sum(done), time.perf_counter() - t0


def measure(s, args, out, pr, ptrs, dptrs, sizes, cfg):
    n, pid = args.n, args.master_pid

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
    c0 = cpu_seconds(pid)
    total, wall = mt_exist(s, sets, args.threads, args.loop_s)
    cpu = cpu_seconds(pid) - c0
    out["mt_exist_keys_s"] = total / wall
    out["mt_master_cpu_s_per_m"] = cpu / (total / 1e6) if total else 0.0
    out["mt_master_cpu_cores"] = cpu / wall

    # remove_all while another client probes is_exist.
    time.sleep(args.lease_ms / 1000 + 0.5)
    pr.stdin.write("start\n")
    pr.stdin.flush()
    # The idle reference: the same probe for a while with nothing else running.
    time.sleep(args.idle_probe_s)
    pr.stdin.write("mark\n")
    pr.stdin.flush()
    t = time.perf_counter()
    removed = s.remove_all(True)
    out["remove_all_s"] = time.perf_counter() - t
    out["remove_all_result"] = removed
    pr.stdin.write("mark\n")
    pr.stdin.flush()
    out["rss_after_remove"] = rss_bytes(pid)
    # The RSS through the settle, every 0.25 s (MiB): when the memory goes back, and whether
    # anything takes it again.
    trace, until = [], time.perf_counter() + args.settle_s
    while (left_s := until - time.perf_counter()) > 0:
        time.sleep(min(0.25, left_s))
        trace.append(round(rss_bytes(pid) / MiB, 1))
    out["rss_settle_trace_mib"] = trace
    out["rss_after_settle"] = rss_bytes(pid)
    pr.stdin.write("stop\n")
    pr.stdin.flush()
    while (ln := pr.stdout.readline()) and not ln.startswith("{"):
        pass
    probe = json.loads(ln) if ln else {}
    pr.wait(timeout=60)
    out["probe_idle"] = probe.get("idle", {})
    out["probe_during_remove"] = probe.get("during", {})
    out["probe_settle"] = probe.get("settle", {})
    left = s.batch_is_exist(keys(0, min(n, BATCH)))
    out["left_after_remove"] = left.count(1)


# ------------------------------------------------------------------------------ orchestrator
def run_one(impl, n, args):
    master, addr = start_master(impl, args.lease_ms)
    try:
        cmd = [sys.executable, os.path.abspath(__file__), "--role", "driver", "--impl", impl,
               "--master", addr, "--master-pid", str(master.pid), "--n", str(n),
               "--threads", str(args.threads), "--loop-s", str(args.loop_s),
               "--settle-s", str(args.settle_s), "--lease-ms", str(args.lease_ms),
               "--idle-probe-s", str(args.idle_probe_s)]
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

    def probe(impl, n, f, which="probe_during_remove"):
        xs = [r[which].get(f) for r in results
              if r["impl"] == impl and r["n"] == n and r.get(which)]
        return statistics.median(xs) if xs else None

    mib = lambda b: f"{b / MiB:,.1f}"
    rows = [
        ("master RSS fresh / empty (MiB)",
         lambda i, n: f"{mib(med(i, n, 'rss_fresh'))} / {mib(med(i, n, 'rss_empty'))}"),
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
        ("same probe idle, worst / p99 (ms)",
         lambda i, n: f"{probe(i, n, 'max_ms', 'probe_idle'):.1f} / "
                      f"{probe(i, n, 'p99_ms', 'probe_idle'):.1f}"),
        ("RSS after remove_all (MiB)", lambda i, n: mib(med(i, n, "rss_after_remove"))),
        ("RSS after settle (MiB)", lambda i, n: mib(med(i, n, "rss_after_settle"))),
        ("  after settle / empty",
         lambda i, n: f"{med(i, n, 'rss_after_settle') / med(i, n, 'rss_empty'):.2f}"),
        ("probe while settling, worst / p99 (ms)",
         lambda i, n: f"{probe(i, n, 'max_ms', 'probe_settle'):.1f} / "
                      f"{probe(i, n, 'p99_ms', 'probe_settle'):.1f}"),
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
    ap.add_argument("--idle-probe-s", type=float, default=2.0)
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
