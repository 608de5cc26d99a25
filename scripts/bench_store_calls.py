#!/usr/bin/env python3
"""The fixed cost of one Store call: tidewire against Mooncake, same harness, same run, TCP over
loopback, two processes (a holder with the segment, a client without one).

Each op runs --reps times in a loop on one client, after a warm-up; the two implementations
alternate in blocks (tidewire, Mooncake, Mooncake, tidewire, ...). Ops: `is_exist` of one key,
`batch_is_exist` of 128 keys (the serving stacks' shape) and of 1024 keys, `get_into` and
`put_from` of one 4 KiB value, `batch_get_into` of 4 and 16 values of 64 KiB. Prints p50/p99 per op (us) and the ratio of medians.

    unshare -n bash -c 'ip link set lo up && TIDEWIRE_LIB=$PWD/target/release/libtidewire.so \\
      PYTHONPATH=python .venv-mooncake/bin/python scripts/bench_store_calls.py'
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_store as bs  # noqa: E402  (the master, setup and region helpers)
import bench_store_growth as bg  # noqa: E402  (spawning a role beside a holder)

SMALL = 4 << 10
PAGE = 64 << 10
OPS = ["is_exist_1", "batch_is_exist_128", "batch_is_exist_1024", "get_into_4k", "put_from_4k",
       "batch_get_into_4x64k", "batch_get_into_16x64k"]


def calls_role(args):
    mod = bs.store_module(args.impl)
    s = bs.setup(mod, args.master, 0, 16 << 20)
    src, dst = bs.Region(16 * PAGE), bs.Region(16 * PAGE)
    ctypes.memmove(src.addr, os.urandom(src.size), src.size)
    assert s.register_buffer(src.addr, src.size) == 0
    assert s.register_buffer(dst.addr, dst.size) == 0
    keys = [f"k-{args.impl}-{i}" for i in range(1024)]
    assert all(rc == 0 for rc in s.batch_upsert_from(keys[:16], [src.addr + i * PAGE
                                                                  for i in range(16)],
                                                     [PAGE] * 16))
    assert s.put_from("small", src.addr, SMALL) == 0

    def put_small():
        assert s.upsert_from("small", src.addr, SMALL) == 0

    def get_small():
        assert s.get_into("small", dst.addr, SMALL) == SMALL

    def exists_one():
        assert s.is_exist(keys[0]) == 1

    def exists_many(n):
        def go():
            r = s.batch_is_exist(keys[:n])
            assert r[0] == 1 and r[-1] == 0
        return go

    def get_pages(n):
        def go():
            got = s.batch_get_into(keys[:n], [dst.addr + i * PAGE for i in range(n)], [PAGE] * n)
            assert all(g == PAGE for g in got), got
        return go

    fns = {"is_exist_1": exists_one, "batch_is_exist_128": exists_many(128),
           "batch_is_exist_1024": exists_many(1024),
           "get_into_4k": get_small, "put_from_4k": put_small,
           "batch_get_into_4x64k": get_pages(4), "batch_get_into_16x64k": get_pages(16)}
    print("READY", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] != "block":
            break
        out = {}
        for op in OPS:
            fn = fns[op]
            for _ in range(max(10, args.reps // 10)):
                fn()
            ts = []
            for _ in range(args.reps):
                t = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t) * 1e6)
            out[op] = ts
        print(json.dumps(out), flush=True)
    s.unregister_buffer(src.addr)
    s.unregister_buffer(dst.addr)
    s.close()


class CallsSide:
    def __init__(self, impl, reps):
        self.impl = impl
        self.master, addr = bs.start_master(impl)
        self.holder = bg.spawn(impl, addr, "holder", script=__file__)
        bg.wait_line(self.holder, "READY")
        self.client = bg.spawn(impl, addr, "calls", ["--reps", str(reps)], script=__file__)
        bg.wait_line(self.client, "READY")

    def block(self):
        self.client.stdin.write("block\n")
        self.client.stdin.flush()
        return json.loads(bg.wait_line(self.client, "{"))

    def close(self):
        bs.stop((self.client, self.holder), self.master)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=["tidewire", "mooncake"])
    ap.add_argument("--impls", default="tidewire,mooncake")
    ap.add_argument("--role", choices=["holder", "calls"])
    ap.add_argument("--master")
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.role == "holder":
        return bs.child(argparse.Namespace(impl=args.impl, role="holder", master=args.master,
                                           mode="two"))
    if args.role == "calls":
        return calls_role(args)
    impls = args.impls.split(",")
    sides = [CallsSide(impl, args.reps) for impl in impls]
    times = {impl: {op: [] for op in OPS} for impl in impls}
    try:
        for b in range(args.blocks):
            for side in (sides if b % 2 == 0 else sides[::-1]):
                for op, ts in side.block().items():
                    times[side.impl][op].extend(ts)
                print(f"block {b + 1}/{args.blocks}: {side.impl} done", file=sys.stderr, flush=True)
    finally:
        for side in sides:
            side.close()
    print(f"\none client, two processes, {args.blocks} x {args.reps} calls per op, us\n")
    print("| op | " + " | ".join(f"{i} p50 | {i} p99" for i in impls)
          + (" | ratio (p50) |" if len(impls) == 2 else " |"))
    print("|---" * (1 + 2 * len(impls) + (len(impls) == 2)) + "|")
    for op in OPS:
        row = []
        for impl in impls:
            row += [f"{pct(times[impl][op], 0.5):.0f}", f"{pct(times[impl][op], 0.99):.0f}"]
        if len(impls) == 2:
            a, b = (statistics.median(times[i][op]) for i in impls)
            row.append(f"{b / a:.2f}x")
        print(f"| {op} | " + " | ".join(row) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({i: {op: [pct(t, 0.5), pct(t, 0.99)] for op, t in v.items()}
                       for i, v in times.items()}, f, indent=1)


if __name__ == "__main__":
    main()
