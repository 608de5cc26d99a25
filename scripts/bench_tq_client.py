#!/usr/bin/env python3
"""TransferQueue's own Store client, side by side: ``MooncakeStoreClient`` from PyPI's
``transferqueue`` (unchanged) on tidewire and on the Mooncake wheel, same run, TCP over loopback.

Per implementation: its master, a holder process with a 2 GiB segment (``bench_store.py``'s
holder role) and a client process running TransferQueue's client with no segment of its own, so
every put and get crosses processes (the issue's "remote" case). Each round puts 256 float32
tensors of 1 MiB under fresh keys (``put``), reads them back with ``get(keys, shapes, dtypes)``
(TransferQueue allocates each destination tensor, so the reads land in fresh memory), checks
every tensor, and clears the keys. A first round per implementation warms up (its times are
printed apart: it includes the first touch of the holder's segment pages), then the measured
rounds alternate between the implementations (tidewire, Mooncake, Mooncake, tidewire, ...).
Prints the median, best and worst measured round per op, and the ratio of medians.

The orchestrator runs in the Mooncake environment (its master binary and wheel), the clients in
the TransferQueue one (torch; ``scripts/setup_tq_venv.sh``); Mooncake's client there imports the
wheel from the Mooncake environment's site-packages:

    unshare -n bash -c 'ip link set lo up && TIDEWIRE_LIB=$PWD/target/release/libtidewire.so \\
      PYTHONPATH=python .venv-mooncake/bin/python scripts/bench_tq_client.py --rounds 5'
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import bench_store as bs  # noqa: E402  (masters, the holder role, stopping)
import bench_store_growth as bg  # noqa: E402  (waiting for a child's line)

N = 256
ELEMS = (1 << 20) // 4  # float32 elements in 1 MiB
OPS = ["put", "get"]


def client_role(args):
    """In the TransferQueue environment: TransferQueue's client, one round per stdin line."""
    if args.impl == "tidewire":
        sys.path[:0] = [os.path.join(REPO, "python", "tidewire", "shim"),
                        os.path.join(REPO, "python")]
    else:
        sys.path.extend(glob.glob(os.path.join(REPO, ".venv-mooncake", "lib", "python3*",
                                               "site-packages")))
    import torch
    from transfer_queue.storage.clients.mooncake_client import MooncakeStoreClient

    c = MooncakeStoreClient({
        "local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
        "master_server_address": args.master, "global_segment_size": 0,
        "local_buffer_size": 16 << 20, "protocol": "tcp",
    })
    gen = torch.Generator().manual_seed(7)
    vals = [torch.randn(ELEMS, generator=gen) for _ in range(N)]
    shapes, dtypes = [list(v.shape) for v in vals], [v.dtype for v in vals]
    print("READY", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] != "round":
            break
        keys = [f"r{cmd[1]}/{i}@tensor" for i in range(N)]
        t = time.perf_counter()
        meta = c.put(keys, vals)
        put_ms = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        got = c.get(keys, shapes=shapes, dtypes=dtypes, custom_backend_meta=meta)
        get_ms = (time.perf_counter() - t) * 1000
        bad = sum(1 for a, b in zip(vals, got) if not torch.equal(a, b))
        if bad:
            print(json.dumps({"error": f"{bad} tensors differ"}), flush=True)
            return 1
        c.clear(keys, custom_backend_meta=meta)
        print(json.dumps({"put": put_ms, "get": get_ms}), flush=True)
    c.close()
    return 0


class Side:
    def __init__(self, impl, tq_python):
        self.impl = impl
        self.master, addr = bs.start_master(impl)
        self.holder = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "bench_store.py"), "--role", "holder",
             "--impl", impl, "--master", addr],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        bg.wait_line(self.holder, "READY")
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # the client role sets its own path
        self.client = subprocess.Popen(
            [tq_python, os.path.abspath(__file__), "--role", "client", "--impl", impl,
             "--master", addr],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        bg.wait_line(self.client, "READY")

    def round(self, r):
        self.client.stdin.write(f"round {r}\n")
        self.client.stdin.flush()
        out = json.loads(bg.wait_line(self.client, "{"))
        if "error" in out:
            raise RuntimeError(f"{self.impl}: {out['error']}")
        return out

    def close(self):
        bs.stop((self.client, self.holder), self.master)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--role", choices=["client"])
    ap.add_argument("--impl", choices=["tidewire", "mooncake"])
    ap.add_argument("--master")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tq-python", default=os.path.join(REPO, ".venv-tq", "bin", "python"))
    args = ap.parse_args()
    if args.role == "client":
        return client_role(args)
    impls = ["tidewire", "mooncake"]
    sides = {i: Side(i, args.tq_python) for i in impls}
    times = {i: {op: [] for op in OPS} for i in impls}
    warm = {}
    try:
        for i in impls:
            warm[i] = sides[i].round(-1)
        for r in range(args.rounds):
            order = impls if r % 2 == 0 else impls[::-1]
            for i in order:
                for op, ms in sides[i].round(r).items():
                    times[i][op].append(ms)
                print(f"round {r + 1}/{args.rounds}: {i} done", file=sys.stderr, flush=True)
    finally:
        for s in sides.values():
            s.close()
    print(f"\nTransferQueue's MooncakeStoreClient, {N} x 1 MiB tensors, client without a segment, "
          f"{args.rounds} rounds, ms: median (best-worst)\n")
    print("| op | tidewire | Mooncake | speed-up (medians) | worst / median, tidewire |")
    print("|---|---|---|---|---|")
    for op in OPS:
        cell = {}
        for i in impls:
            v = times[i][op]
            cell[i] = (statistics.median(v), min(v), max(v))
        tw, mc = cell["tidewire"], cell["mooncake"]
        print(f"| {op} | {tw[0]:.1f} ({tw[1]:.1f}-{tw[2]:.1f}) | {mc[0]:.1f} ({mc[1]:.1f}-{mc[2]:.1f}) "
              f"| {mc[0] / tw[0]:.2f}x | {tw[2] / tw[0]:.2f} |")
    print("\nwarm-up round (not in the medians), ms: " + "; ".join(
        f"{i} put {warm[i]['put']:.1f} get {warm[i]['get']:.1f}" for i in impls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
