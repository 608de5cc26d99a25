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
(checked), batch_get_into a fresh unregistered 256 MiB mapping (checked; TransferQueue's path:
torch.empty memory), the serving stacks' batch (128 pages of 64-256 KiB in 1-4 pieces:
batch_put_from_multi_buffers, batch_is_exist, batch_get_into_multi_buffers, checked), a
1024-key batch_is_exist, 4 threads x 64 keys of batch_upsert_from, batch_remove(force) of the 768 keys.
Modes: ``single`` (one process holds the segment and calls), ``two`` (a holder process with the
segment, a client process with none). Both implementations are set up side by side and their
rounds alternate (tidewire, Mooncake, Mooncake, tidewire, ...), so a shared machine's load
changes hit both alike. Prints medians over the rounds (ms) and a markdown table.
"""

import argparse
import ctypes
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
N = 256
OPS = ["put_batch", "get_batch", "upsert_batch", "batch_put_from", "batch_upsert_from_new",
       "batch_upsert_from_in_place", "batch_get_into", "batch_get_into_fresh",
       "4thr_x64_batch_upsert_from", "serving_put_128_pages", "serving_exists_128",
       "serving_get_128_pages", "batch_is_exist_1024",
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


class Bench:
    """One client's workload: registered source and destination, one round at a time."""

    def __init__(self, s, mod):
        self.s = s
        self.cfg = mod.ReplicateConfig()
        self.cfg.with_hard_pin = True
        self.src, self.dst = Region(N * MiB), Region(N * MiB)
        self.data = os.urandom(N * MiB)
        ctypes.memmove(self.src.addr, self.data, len(self.data))
        assert s.register_buffer(self.src.addr, self.src.size) == 0
        assert s.register_buffer(self.dst.addr, self.dst.size) == 0
        self.vals = [self.data[i * MiB:(i + 1) * MiB] for i in range(N)]
        self.ptrs = [self.src.addr + i * MiB for i in range(N)]
        self.dptrs = [self.dst.addr + i * MiB for i in range(N)]
        self.sizes = [MiB] * N
        # The serving stacks' shape: 128 pages of 64-256 KiB, each in 1-4 pieces (vLLM: one per
        # layer; SGLang: K and V, or MLA layers), at fixed places in the source and destination.
        rnd = random.Random(7)
        self.pages_ptrs, self.pages_sizes, self.pages_dptrs = [], [], []
        at = 0
        for _ in range(128):
            length = rnd.randint(64 << 10, 256 << 10)
            n = rnd.randint(1, 4)
            cuts = sorted(rnd.sample(range(1, length), n - 1)) + [length]
            ps, ss, ds, prev = [], [], [], 0
            for c in cuts:
                ps.append(self.src.addr + at + prev)
                ds.append(self.dst.addr + at + prev)
                ss.append(c - prev)
                prev = c
            at += length
            self.pages_ptrs.append(ps)
            self.pages_sizes.append(ss)
            self.pages_dptrs.append(ds)
        self.pages_bytes = at

    def close(self):
        self.s.unregister_buffer(self.src.addr)
        self.s.unregister_buffer(self.dst.addr)

    def round(self, r):
        s, cfg, vals, ptrs, sizes = self.s, self.cfg, self.vals, self.ptrs, self.sizes
        dst, data, dptrs = self.dst, self.data, self.dptrs
        times = {}
        ka = [f"r{r}/a{i}" for i in range(N)]
        kb = [f"r{r}/b{i}" for i in range(N)]
        kc = [f"r{r}/c{i}" for i in range(N)]
        t, rc = timed(lambda: s.put_batch(ka, vals, cfg))
        assert rc == 0, rc
        times["put_batch"] = t
        t, got = timed(lambda: s.get_batch(ka))
        assert got == vals, "get_batch returned wrong bytes"
        del got
        times["get_batch"] = t
        t, rc = timed(lambda: s.upsert_batch(ka, vals, cfg))
        assert rc == 0, rc
        times["upsert_batch"] = t
        t, rc = timed(lambda: s.batch_put_from(kb, ptrs, sizes, cfg))
        assert set(rc) == {0}, set(rc)
        times["batch_put_from"] = t
        t, rc = timed(lambda: s.batch_upsert_from(kc, ptrs, sizes, cfg))
        assert set(rc) == {0}, set(rc)
        times["batch_upsert_from_new"] = t
        t, rc = timed(lambda: s.batch_upsert_from(kc, ptrs, sizes, cfg))
        assert set(rc) == {0}, set(rc)
        times["batch_upsert_from_in_place"] = t
        ctypes.memset(dst.addr, 0, dst.size)
        t, rc = timed(lambda: s.batch_get_into(kc, dptrs, sizes))
        assert rc == sizes, set(rc)
        assert ctypes.string_at(dst.addr, dst.size) == data, "batch_get_into returned wrong bytes"
        times["batch_get_into"] = t
        # The path TransferQueue (and any first use of a pool) takes: memory just allocated,
        # never touched and not registered, as torch.empty gives it.
        fresh = Region(N * MiB)
        fptrs = [fresh.addr + i * MiB for i in range(N)]
        t, rc = timed(lambda: s.batch_get_into(kc, fptrs, sizes))
        assert rc == sizes, set(rc)
        assert ctypes.string_at(fresh.addr, fresh.size) == data, "fresh batch_get_into: bytes"
        times["batch_get_into_fresh"] = t
        fresh.view = None
        fresh.mm.close()
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
        times["4thr_x64_batch_upsert_from"] = t
        kp = [f"r{r}/page{i}" for i in range(128)]
        t, rc = timed(lambda: s.batch_put_from_multi_buffers(kp, self.pages_ptrs,
                                                             self.pages_sizes, cfg))
        assert set(rc) == {0}, set(rc)
        times["serving_put_128_pages"] = t
        t, rc = timed(lambda: s.batch_is_exist(kp))
        assert rc == [1] * 128, set(rc)
        times["serving_exists_128"] = t
        ctypes.memset(dst.addr, 0, self.pages_bytes)
        t, rc = timed(lambda: s.batch_get_into_multi_buffers(kp, self.pages_dptrs,
                                                             self.pages_sizes))
        assert rc == [sum(z) for z in self.pages_sizes], set(rc)
        assert ctypes.string_at(dst.addr, self.pages_bytes) == data[:self.pages_bytes], \
            "serving get: bytes"
        times["serving_get_128_pages"] = t
        none = [f"r{r}/none{i}" for i in range(128)]
        t, rc = timed(lambda: s.batch_is_exist(ka + kb + kc + kp + none))
        assert rc == [1] * 896 + [0] * 128, set(rc)
        times["batch_is_exist_1024"] = t
        t, rc = timed(lambda: s.batch_remove(ka + kb + kc, True))
        assert set(rc) == {0}, set(rc)
        times["batch_remove_768"] = t
        s.batch_remove(kp, True)
        return times


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
    bench = Bench(s, mod)
    print("READY", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] != "round":
            break
        print(json.dumps(bench.round(int(cmd[1]))), flush=True)
    bench.close()
    s.close()


def stop(procs, master):
    """Ends each child by closing its stdin (killed if it takes over 60 s), then the master."""
    for p in procs:
        try:
            p.stdin.close()
            p.wait(timeout=60)
        except Exception:
            p.kill()
            p.wait()
    master.kill()
    master.wait()


class Side:
    """One implementation's master, holder (two-process mode) and benchmarking client."""

    def __init__(self, impl, mode):
        self.impl = impl
        self.master, addr = start_master(impl)
        self.procs = []
        base = [sys.executable, os.path.abspath(__file__), "--impl", impl, "--mode", mode,
                "--master", addr]
        try:
            if mode == "two":
                self.procs.append(self.spawn(base + ["--role", "holder"]))
            self.client = self.spawn(base + ["--role", "client"])
        except BaseException:
            self.close()
            raise

    def spawn(self, cmd):
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        self.procs.append(p)
        if self.line(p, lambda ln: ln.strip() == "READY") is None:
            raise RuntimeError(f"{self.impl}: {cmd[-1]} did not start")
        return p

    @staticmethod
    def line(p, want):
        """The next stdout line of `p` that `want` accepts (others are logs); None at EOF."""
        while True:
            ln = p.stdout.readline()
            if not ln or want(ln):
                return ln or None

    def round(self, r):
        self.client.stdin.write(f"round {r}\n")
        self.client.stdin.flush()
        line = self.line(self.client, lambda ln: ln.startswith("{"))
        if line is None:
            raise RuntimeError(f"{self.impl}: round {r} failed (exit {self.client.poll()})")
        return json.loads(line)

    def close(self):
        stop(reversed(self.procs), self.master)


def interleaved(impls, mode, rounds):
    """Both implementations set up side by side; round r runs on each in turn (the order
    alternates), so load changes on a shared machine hit both alike. Medians per op."""
    sides = []
    try:
        for impl in impls:
            sides.append(Side(impl, mode))
        times = {impl: {op: [] for op in OPS} for impl in impls}
        for r in range(rounds):
            order = sides if r % 2 == 0 else sides[::-1]
            for side in order:
                for op, t in side.round(r).items():
                    times[side.impl][op].append(t)
        return {impl: {op: statistics.median(v) for op, v in t.items()}
                for impl, t in times.items()}
    finally:
        for side in sides:
            side.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--impl", choices=["tidewire", "mooncake"])
    ap.add_argument("--mode", choices=["single", "two"], default="two")
    ap.add_argument("--role", choices=["client", "holder"])
    ap.add_argument("--master")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.role:
        return child(args)
    impls = ["tidewire", "mooncake"] if args.all or not args.impl else [args.impl]
    modes = ["single", "two"] if args.all else [args.mode]
    results = {}
    for mode in modes:
        for impl, res in interleaved(impls, mode, args.rounds).items():
            results[(impl, mode)] = res
            print(f"# {impl}/{mode}: {json.dumps(res)}", flush=True)
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
                elif op.startswith(("batch_remove", "serving_", "batch_is_exist")):
                    row.append(f"{v:.2f}")  # not 256 MiB moved: no rate
                else:
                    row.append(f"{v:.1f} ({0.25 / (v / 1000):.2f})")
            row.append(f"{vals[1] / vals[0]:.2f}x" if None not in vals and vals[0] > 0 else "-")
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
