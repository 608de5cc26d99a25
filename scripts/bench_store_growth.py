#!/usr/bin/env python3
"""How Store latency grows with the work: tidewire against Mooncake, same harness, same run,
TCP over loopback, two processes (a holder with the segment, clients without one).

- Batch growth: one client, 64 KiB values from a registered buffer, `batch_put_from` and then
  `batch_get_into` (checked) of 1 to 4096 fresh keys per batch; median of --reps per size.
- Client growth: 1 to 64 client processes against one master and one holder, each upserting
  (`batch_upsert_from`) and reading back (`batch_get_into`) its own 16 keys of 64 KiB for
  --seconds; median latency per call over all clients and aggregate keys/s.

Prints markdown tables and writes a JSON file; `--plot DIR` draws the two charts (matplotlib).
Run it inside a private network namespace (Mooncake binds all addresses):

    unshare -n bash -c 'ip link set lo up && TIDEWIRE_LIB=$PWD/target/release/libtidewire.so \\
      PYTHONPATH=python .venv-mooncake/bin/python scripts/bench_store_growth.py --plot docs/bench'
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_store as bs  # noqa: E402  (the master, setup and region helpers)

VALUE = 64 << 10
BATCHES = [1, 4, 16, 64, 256, 1024, 4096]
CLIENTS = [1, 2, 4, 8, 16, 32, 64]
PER_CLIENT_KEYS = 16


def batch_role(args):
    mod = bs.store_module(args.impl)
    s = bs.setup(mod, args.master, 0, 16 << 20)
    n_max = max(BATCHES)
    src, dst = bs.Region(n_max * VALUE), bs.Region(n_max * VALUE)
    data = os.urandom(n_max * VALUE)
    ctypes.memmove(src.addr, data, len(data))
    assert s.register_buffer(src.addr, src.size) == 0
    assert s.register_buffer(dst.addr, dst.size) == 0
    out, fails = {}, {}
    for n in BATCHES:
        puts, gets = [], []
        for r in range(args.reps):
            keys = [f"g-{args.impl}-{n}-{r}-{i}" for i in range(n)]
            ptrs = [src.addr + i * VALUE for i in range(n)]
            dptrs = [dst.addr + i * VALUE for i in range(n)]
            sizes = [VALUE] * n
            t, rcs = bs.timed(lambda: s.batch_put_from(keys, ptrs, sizes))
            puts.append(t)
            failed = sum(1 for rc in rcs if rc != 0)
            ctypes.memset(dst.addr, 0, n * VALUE)
            t, got = bs.timed(lambda: s.batch_get_into(keys, dptrs, sizes))
            gets.append(t)
            if failed == 0:
                assert all(g == VALUE for g in got), (n, got[:4])
                assert ctypes.string_at(dst.addr, n * VALUE) == data[:n * VALUE]
            else:
                fails[n] = max(fails.get(n, 0), failed)
            s.batch_remove(keys, True)
        out[n] = [statistics.median(puts), statistics.median(gets), fails.get(n, 0)]
    print(json.dumps(out), flush=True)
    s.unregister_buffer(src.addr)
    s.unregister_buffer(dst.addr)
    s.close()


def load_role(args):
    mod = bs.store_module(args.impl)
    s = bs.setup(mod, args.master, 0, 16 << 20)
    n = PER_CLIENT_KEYS
    src, dst = bs.Region(n * VALUE), bs.Region(n * VALUE)
    ctypes.memmove(src.addr, os.urandom(n * VALUE), n * VALUE)
    assert s.register_buffer(src.addr, src.size) == 0
    assert s.register_buffer(dst.addr, dst.size) == 0
    keys = [f"c-{os.getpid()}-{i}" for i in range(n)]
    ptrs = [src.addr + i * VALUE for i in range(n)]
    dptrs = [dst.addr + i * VALUE for i in range(n)]
    sizes = [VALUE] * n
    assert all(rc == 0 for rc in s.batch_upsert_from(keys, ptrs, sizes))
    print("READY", flush=True)
    sys.stdin.readline()  # GO
    puts, gets = [], []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        t, rcs = bs.timed(lambda: s.batch_upsert_from(keys, ptrs, sizes))
        assert all(rc == 0 for rc in rcs), rcs[:4]
        puts.append(t)
        t, got = bs.timed(lambda: s.batch_get_into(keys, dptrs, sizes))
        assert all(g == VALUE for g in got), got[:4]
        gets.append(t)
    print(json.dumps({"put": puts, "get": gets}), flush=True)
    sys.stdin.readline()
    s.close()


def spawn(impl, master, role, extra=(), script=__file__):
    """A child running `role` of `script` (this file unless told) against `master`."""
    cmd = [sys.executable, os.path.abspath(script), "--impl", impl, "--master", master,
           "--role", role, *extra]
    # Mooncake's TCP transport refuses more than 1,024 queued transfers per peer by default.
    env = dict(os.environ, MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER="65535")
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)


def wait_line(p, prefix):
    ln = bs.Side.line(p, lambda x: x.startswith(prefix))
    if ln is None:
        raise RuntimeError(f"child exited ({p.poll()}) before {prefix!r}")
    return ln


def with_master(impl, fn):
    master, addr = bs.start_master(impl)
    holder = spawn(impl, addr, "holder")
    try:
        wait_line(holder, "READY")
        return fn(addr)
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
        master.kill()
        master.wait()


def run_batches(impl, reps):
    def go(addr):
        p = spawn(impl, addr, "batch", ["--reps", str(reps)])
        out = json.loads(wait_line(p, "{"))
        p.wait(timeout=60)
        return {int(k): v for k, v in out.items()}
    return with_master(impl, go)


def run_clients(impl, counts, seconds):
    def go(addr):
        res = {}
        for n in counts:
            ps = [spawn(impl, addr, "load", ["--seconds", str(seconds)]) for _ in range(n)]
            for p in ps:
                wait_line(p, "READY")
            for p in ps:
                p.stdin.write("GO\n")
                p.stdin.flush()
            puts, gets = [], []
            for p in ps:
                r = json.loads(wait_line(p, "{"))
                puts += r["put"]
                gets += r["get"]
            for p in ps:
                p.stdin.close()
                p.wait(timeout=60)
            calls = len(puts) + len(gets)
            res[n] = [statistics.median(puts), statistics.median(gets),
                      calls * PER_CLIENT_KEYS / seconds]
            print(f"# {impl} clients={n}: {res[n]}", flush=True)
        return res
    return with_master(impl, go)


def chart(plt, series, labels, xlabel, title, path):
    """One log-log chart: per implementation, the first two columns of `series` against x."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for impl, style in (("tidewire", "-"), ("mooncake", "--")):
        rows = series[impl]
        xs = sorted(rows)
        for col, (marker, label) in enumerate(zip("os", labels)):
            ax.plot(xs, [rows[x][col] for x in xs], style, marker=marker,
                    label=f"{impl} {label}")
    ax.set(xscale="log", yscale="log", xlabel=xlabel,
           ylabel="latency per batch call, ms (median)", title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot(results, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(out_dir, exist_ok=True)
    chart(plt, results["batch"], ("batch_put_from", "batch_get_into"),
          "keys per batch (64 KiB each)", "Store: latency as the batch grows (two processes, TCP)",
          os.path.join(out_dir, "store_batch_growth.png"))
    chart(plt, results["clients"], ("upsert (16 keys)", "get (16 keys)"),
          "client processes on one master",
          "Store: latency as clients are added (2 cores shared by all)",
          os.path.join(out_dir, "store_client_growth.png"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=["tidewire", "mooncake"])
    ap.add_argument("--master")
    ap.add_argument("--role", choices=["holder", "batch", "load"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--clients", default=",".join(map(str, CLIENTS)))
    ap.add_argument("--json", default="/tmp/store_growth.json")
    ap.add_argument("--plot")
    args = ap.parse_args()
    if args.role == "holder":
        mod = bs.store_module(args.impl)
        s = bs.setup(mod, args.master, 2048 << 20, 16 << 20)
        print("READY", flush=True)
        sys.stdin.read()
        s.close()
        return
    if args.role == "batch":
        return batch_role(args)
    if args.role == "load":
        return load_role(args)
    counts = [int(c) for c in args.clients.split(",")]
    impls = ["tidewire", "mooncake"]
    results = {"batch": {}, "clients": {}}
    for impl in impls:
        results["batch"][impl] = run_batches(impl, args.reps)
        print(f"# {impl} batches: {results['batch'][impl]}", flush=True)
    for impl in impls[::-1]:
        results["clients"][impl] = run_clients(impl, counts, args.seconds)
    with open(args.json, "w") as f:
        json.dump(results, f)
    print("\n| keys per batch | tidewire put / get (ms) | Mooncake put / get (ms) | put / get speed-up |")
    print("|---|---|---|---|")
    for n in BATCHES:
        t, m = results["batch"]["tidewire"][n], results["batch"]["mooncake"][n]
        note = lambda r: f" ({r[2]} keys failed)" if r[2] else ""
        print(f"| {n} | {t[0]:.2f} / {t[1]:.2f}{note(t)} | {m[0]:.2f} / {m[1]:.2f}{note(m)} "
              f"| {m[0] / t[0]:.2f}x / {m[1] / t[1]:.2f}x |")
    print("\n| clients | tidewire upsert / get (ms), keys/s | Mooncake upsert / get (ms), keys/s |")
    print("|---|---|---|")
    for n in counts:
        t, m = results["clients"]["tidewire"][n], results["clients"]["mooncake"][n]
        print(f"| {n} | {t[0]:.2f} / {t[1]:.2f}, {t[2]:,.0f} | {m[0]:.2f} / {m[1]:.2f}, {m[2]:,.0f} |")
    if args.plot:
        plot(results, args.plot)
        print(f"charts: {args.plot}/store_batch_growth.png, {args.plot}/store_client_growth.png")


if __name__ == "__main__":
    main()
