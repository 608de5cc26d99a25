#!/usr/bin/env python3
"""How tidewire scales on this machine: throughput and CPU per GB against block size, batch
size, lanes and scatter fragment count, plus engine memory (RSS) at rest and under load.

Runs `target/release/tidewire-bench loopback --json` (two processes, loopback TCP unless
--path says otherwise) for each point and prints markdown tables (medians of --reps runs).
The scatter and memory sections use the Python package in-process.

    python3 scripts/bench_scaling.py [--reps 3] [--duration 1.0] [--path tcp]
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "target", "release", "tidewire-bench")
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("TIDEWIRE_LIB", os.path.join(ROOT, "target", "release", "libtidewire.so"))


def human(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


def point(args, op, block, batch, lanes=None):
    runs = []
    for _ in range(args.reps):
        cmd = [BENCH, "loopback", "--json", "--op", op, "--block-size", str(block),
               "--batch-size", str(batch), "--duration", str(args.duration), "--path", args.path]
        if lanes:
            cmd += ["--lanes", str(lanes)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
        runs.append(json.loads(out.stdout)["results"][0])
    med = lambda key: statistics.median(r[key] for r in runs)
    return {"gbps": med("gb_per_s"), "ops": med("ops_per_s"), "cpu": med("cpu_s_per_gb"),
            "p50": statistics.median(r["latency_us"]["p50"] for r in runs)}


def table(title, header, rows):
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    sys.stdout.flush()


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def scatter_and_memory(args):
    import tidewire
    opts = {"same_host": 0} if args.path == "tcp" else {}
    base = rss_kib()
    a, b = tidewire.Engine(**opts), tidewire.Engine(**opts)
    at_rest = rss_kib() - base
    n_max = 32768
    remote = (ctypes.c_char * (n_max * 128))()
    local = (ctypes.c_char * (n_max * 256))()
    keep = (b.register(remote), a.register(local))
    seg = a.open_segment(b.name)
    raddr, laddr = ctypes.addressof(remote), ctypes.addressof(local)
    rows = []
    for n in (1, 16, 256, 4096, 32768):
        times = []
        for _ in range(args.reps + 2):
            rng = tidewire.ScatterRange(tidewire.Opcode.READ, seg, raddr, n * 128, laddr,
                                        [i * 256 for i in range(n)], [i * 128 for i in range(n)],
                                        [128] * n, local_capacity=n * 256)
            t = time.perf_counter()
            op = a.scatter([rng])
            results = op.wait()
            op.close()
            if any(results):
                raise SystemExit(f"scatter of {n} fragments failed: {sorted(set(results))}")
            times.append((time.perf_counter() - t) * 1e3)
        ms = statistics.median(times[2:])
        rows.append([str(n), f"{ms:.3f}", f"{ms * 1e3 / n:.2f}"])
    table(f"Scatter READ of N x 128 B fragments (gapped local side, path {args.path})",
          ["fragments", "ms per op", "µs per fragment"], rows)
    # Memory under load: many batches and scatters; RSS must stay flat.
    after_warm = rss_kib()
    for _ in range(200):
        with a.batch(1024) as bt:
            bt.submit([(tidewire.Opcode.READ, seg, laddr + i * 256, raddr + i * 128, 128)
                       for i in range(1024)])
            bt.wait()
    after_batches = rss_kib()
    table("Engine memory (RSS of this process, buffers excluded)",
          ["moment", "RSS delta"],
          [["two engines started, nothing registered", f"{at_rest} KiB"],
           ["after warm-up (lanes connected, scatters done)", f"{after_warm - base - (n_max * 384) // 1024} KiB"],
           ["after 200 more batches of 1024 requests", f"{after_batches - base - (n_max * 384) // 1024} KiB"]])
    del keep
    a.close()
    b.close()


def wait_cpu(args):
    """CPU used by a thread blocked in a wait: the peer process is stopped (SIGSTOP), so the
    wait lasts its whole timeout."""
    import signal
    import tidewire
    child = subprocess.Popen([BENCH, "target", "--buffer-size", "64M", "--max-seconds", "60"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().split()
        info = dict(kv.split("=", 1) for kv in line[1:])
        with tidewire.Engine(same_host=0) as a:
            local = (ctypes.c_char * (64 << 20))()
            keep = a.register(local)
            seg = a.open_segment(info["segment"])
            os.kill(child.pid, signal.SIGSTOP)
            bt = a.batch(1)
            bt.submit([(tidewire.Opcode.READ, seg, ctypes.addressof(local), int(info["addr"], 0), 64 << 20)])
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                bt.wait(timeout=2.0)
            except tidewire.TidewireError:
                pass
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            os.kill(child.pid, signal.SIGCONT)
            bt.wait(timeout=30)
            bt.close()
            del keep
        table("A thread blocked in a wait (peer stopped, 2 s timeout)",
              ["wall s", "thread CPU ms", "share of a core"],
              [[f"{wall:.2f}", f"{cpu * 1e3:.2f}", f"{100 * cpu / wall:.3f} %"]])
    finally:
        child.stdin.close()
        child.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=1.0)
    ap.add_argument("--path", default="tcp", choices=["tcp", "same-host", "auto"])
    ap.add_argument("--sections", default="block,batch,lanes,scatter,wait")
    args = ap.parse_args()
    sections = args.sections.split(",")
    print(f"# tidewire scaling, path={args.path}, {os.cpu_count()} cores, "
          f"medians of {args.reps} runs x {args.duration} s, loadavg {os.getloadavg()[0]:.2f}")
    if "block" in sections:
        rows = []
        for block in (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20):
            batch = max(1, min(32, (128 << 20) // block))
            r, w = point(args, "read", block, batch), point(args, "write", block, batch)
            rows.append([human(block), str(batch), f"{r['gbps']:.2f}", f"{w['gbps']:.2f}",
                         f"{r['cpu']:.2f}", f"{w['cpu']:.2f}"])
        table("Block size (batch 32, or 128 MiB per batch for the largest blocks)",
              ["block", "batch", "read GB/s", "write GB/s", "read CPU s/GB", "write CPU s/GB"], rows)
    if "batch" in sections:
        rows = []
        for batch in (1, 4, 16, 64, 256, 1024, 4096):
            r = point(args, "read", 4096, batch)
            rows.append([str(batch), f"{r['ops']:.0f}", f"{r['gbps']:.3f}", f"{r['p50']:.0f}",
                         f"{r['cpu']:.2f}"])
        table("Batch size (4 KiB READs)", ["batch", "requests/s", "GB/s", "batch p50 µs", "CPU s/GB"], rows)
    if "lanes" in sections:
        rows = []
        for lanes in (1, 2, 4, 8):
            r, w = point(args, "read", 1 << 20, 32, lanes), point(args, "write", 1 << 20, 32, lanes)
            rows.append([str(lanes), f"{r['gbps']:.2f}", f"{w['gbps']:.2f}", f"{r['cpu']:.2f}", f"{w['cpu']:.2f}"])
        table("Lanes per peer (1 MiB x 32)", ["lanes", "read GB/s", "write GB/s", "read CPU s/GB", "write CPU s/GB"], rows)
    if "scatter" in sections:
        scatter_and_memory(args)
    if "wait" in sections:
        wait_cpu(args)


if __name__ == "__main__":
    main()
