#!/usr/bin/env python3
"""Side-by-side Store benchmark: tidewire (tidewire-master + tidewire.store) against Mooncake
(mooncake_master + mooncake.store from the wheel), same harness, same run, TCP over loopback.

Run everything inside a private network namespace (Mooncake binds all addresses):

    unshare -n bash -c 'ip link set lo up && \\
      TIDEWIRE_LIB=$PWD/target/release/libtidewire.so PYTHONPATH=python \\
      .venv-mooncake/bin/python scripts/bench_store.py --all'

Workload per round (fresh keys each round), 256 values of 1 MiB from one registered 256 MiB
source, read into one registered 256 MiB destination: put_batch, get_batch (checked),
upsert_batch, batch_put_from, batch_upsert_from (new keys, then in place), batch_get_into
(checked), 4 threads x 64 keys of batch_upsert_from, batch_remove(force) of the 768 keys.
Modes: ``single`` (one process holds the segment and calls), ``two`` (a holder process with the
segment, a client process with none). Prints medians over the rounds (ms) and a markdown table.
"""

import argparse
import ctypes
import json
import mmap
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MiB = 1 << 20
N = 256
OPS = ["put_batch", "get_batch", "upsert_batch", "batch_put_from", "batch_upsert_from_new",
       "batch_upsert_from_in_place", "batch_get_into", "4thr_x64_batch_upsert_from",
       "batch_remove_768"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_module(impl):
    if impl == "tidewire":
        sys.path.insert(0, os.path.join(REPO, "python"))
        import tidewire.store as m
    else:
        import mooncake.store as m
    return m


class Region:
    def __init__(self, size):
        self.mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.view = ctypes.c_char.from_buffer(self.mm)
        self.addr = ctypes.addressof(self.view)
        self.size = size


def start_master(impl):
    port = free_port()
    if impl == "tidewire":
        cmd = [os.path.join(REPO, "target", "release", "tidewire-master"),
               "--rpc_address=127.0.0.1", f"--rpc_port={port}", "--metrics_port=0",
               "--metrics_host=127.0.0.1", "--default_kv_lease_ttl=5000"]
    else:
        cmd = [os.path.join(os.path.dirname(sys.executable), "mooncake_master"),
               "--rpc_address=127.0.0.1", f"--rpc_port={port}",
               f"--metrics_port={free_port()}", "--default_kv_lease_ttl=5000"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    p.kill()
    raise RuntimeError(f"{impl} master did not start")


def setup(mod, master, seg, lbuf):
    s = mod.MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", seg, lbuf, "tcp", "", master)
    if rc != 0:
        raise RuntimeError(f"setup returned {rc}")
    return s


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return (time.perf_counter() - t) * 1000, r


def run_rounds(s, mod, rounds):
    cfg = mod.ReplicateConfig()
    cfg.with_hard_pin = True
    src, dst = Region(N * MiB), Region(N * MiB)
    data = os.urandom(N * MiB)
    ctypes.memmove(src.addr, data, len(data))
    assert s.register_buffer(src.addr, src.size) == 0
    assert s.register_buffer(dst.addr, dst.size) == 0
    vals = [data[i * MiB:(i + 1) * MiB] for i in range(N)]
    ptrs = [src.addr + i * MiB for i in range(N)]
    dptrs = [dst.addr + i * MiB for i in range(N)]
    sizes = [MiB] * N
    times = {op: [] for op in OPS}
    for r in range(rounds):
        ka = [f"r{r}/a{i}" for i in range(N)]
        kb = [f"r{r}/b{i}" for i in range(N)]
        kc = [f"r{r}/c{i}" for i in range(N)]
        t, rc = timed(lambda: s.put_batch(ka, vals, cfg))
        assert rc == 0, rc
        times["put_batch"].append(t)
        t, got = timed(lambda: s.get_batch(ka))
        assert got == vals, "get_batch returned wrong bytes"
        times["get_batch"].append(t)
        t, rc = timed(lambda: s.upsert_batch(ka, vals, cfg))
        assert rc == 0, rc
        times["upsert_batch"].append(t)
        t, rc = timed(lambda: s.batch_put_from(kb, ptrs, sizes, cfg))
        assert set(rc) == {0}, set(rc)
        times["batch_put_from"].append(t)
        t, rc = timed(lambda: s.batch_upsert_from(kc, ptrs, sizes, cfg))
        assert set(rc) == {0}, set(rc)
        times["batch_upsert_from_new"].append(t)
        t, rc = timed(lambda: s.batch_upsert_from(kc, ptrs, sizes, cfg))
        assert set(rc) == {0}, set(rc)
        times["batch_upsert_from_in_place"].append(t)
        ctypes.memset(dst.addr, 0, dst.size)
        t, rc = timed(lambda: s.batch_get_into(kc, dptrs, sizes))
        assert rc == sizes, set(rc)
        assert ctypes.string_at(dst.addr, dst.size) == data, "batch_get_into returned wrong bytes"
        times["batch_get_into"].append(t)
        errs = []

        def worker(w):
            sl = slice(w * 64, (w + 1) * 64)
            rc = s.batch_upsert_from(kb[sl], ptrs[sl], sizes[sl], cfg)
            if set(rc) != {0}:
                errs.append(rc)

        def four():
            ts = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
            for x in ts:
                x.start()
            for x in ts:
                x.join()

        t, _ = timed(four)
        assert not errs, errs[0][:4]
        times["4thr_x64_batch_upsert_from"].append(t)
        t, rc = timed(lambda: s.batch_remove(ka + kb + kc, True))
        assert set(rc) == {0}, set(rc)
        times["batch_remove_768"].append(t)
    s.unregister_buffer(src.addr)
    s.unregister_buffer(dst.addr)
    return {op: statistics.median(v) for op, v in times.items()}


def child(args):
    mod = store_module(args.impl)
    if args.role == "holder":
        s = setup(mod, args.master, 2048 * MiB, 16 * MiB)
        print("READY", flush=True)
        sys.stdin.read()
        s.close()
        return
    seg = 2048 * MiB if args.mode == "single" else 0
    s = setup(mod, args.master, seg, 512 * MiB)
    res = run_rounds(s, mod, args.rounds)
    print(json.dumps(res), flush=True)
    s.close()


def one(impl, mode, rounds):
    master, addr = start_master(impl)
    holder = None
    try:
        base = [sys.executable, os.path.abspath(__file__), "--impl", impl, "--mode", mode,
                "--master", addr, "--rounds", str(rounds)]
        if mode == "two":
            holder = subprocess.Popen(base + ["--role", "holder"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            assert holder.stdout.readline().strip() == "READY"
        out = subprocess.run(base + ["--role", "client"], capture_output=True, text=True,
                             timeout=600)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        if out.returncode != 0 or not lines:
            raise RuntimeError(f"{impl}/{mode} failed: {out.stderr[-2000:]}")
        return json.loads(lines[-1])
    finally:
        if holder:
            holder.stdin.close()
            holder.wait(timeout=60)
        master.kill()
        master.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--impl", choices=["tidewire", "mooncake"])
    ap.add_argument("--mode", choices=["single", "two"], default="two")
    ap.add_argument("--role", choices=["client", "holder"])
    ap.add_argument("--master")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.role:
        return child(args)
    impls = ["tidewire", "mooncake"] if args.all or not args.impl else [args.impl]
    modes = ["single", "two"] if args.all else [args.mode]
    results = {}
    for mode in modes:
        for impl in impls:
            results[(impl, mode)] = one(impl, mode, args.rounds)
            print(f"# {impl}/{mode}: {json.dumps(results[(impl, mode)])}", flush=True)
    for mode in modes:
        print(f"\n{mode} process(es), 256 x 1 MiB, median of {args.rounds} rounds, ms (GiB/s)\n")
        print("| op | tidewire | Mooncake | speed-up |")
        print("|---|---|---|---|")
        for op in OPS:
            row = [op]
            vals = []
            for impl in ("tidewire", "mooncake"):
                v = results.get((impl, mode), {}).get(op)
                vals.append(v)
                if v is None:
                    row.append("-")
                elif op.startswith("batch_remove"):
                    row.append(f"{v:.2f}")
                else:
                    row.append(f"{v:.1f} ({0.25 / (v / 1000):.2f})")
            row.append(f"{vals[1] / vals[0]:.2f}x" if None not in vals and vals[0] > 0 else "-")
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
