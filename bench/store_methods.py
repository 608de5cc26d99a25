#!/usr/bin/env python3
"""Put sessions and the tensor-parallel forms, tidewire beside Mooncake 0.3.13.post1 in one run.

    python3 bench/store_methods.py [--rounds 5]

Each store gets its own master and one client with a 1 GiB segment (Mooncake's inside
`unshare -n`, as its listeners bind every address); every value read back is checked.
- put sessions: 64 keys x 1 MiB, each written as 4 ranges from one registered buffer
  (`batch_put_session_start`, `batch_put_from_multi_buffer_ranges`, `batch_put_session_end`);
- TP forms: `batch_put_tensor_with_tp` of 16 float32 tensors of 4 MiB split 4 ways (one call
  stores every rank's shard), then `batch_get_tensor_with_tp` of each rank's shards, joined and
  compared (torch from .venv-serving).
Prints per-round times, then medians and ratios as a markdown table and one JSON line."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MC_PY = os.path.join(REPO, ".venv-mooncake", "bin", "python")
TESTS = os.path.join(REPO, "python", "tests")
MiB = 1 << 20


def torch_path():
    """The site-packages holding the serving environment's torch (it may be shared from
    .venv-tq through a .pth file)."""
    py = os.path.join(REPO, ".venv-serving", "bin", "python")
    if not os.path.exists(py):
        return None
    out = subprocess.run([py, "-c", "import os, torch; "
                          "print(os.path.dirname(os.path.dirname(torch.__file__)))"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip() or None


def worker(target, rounds):
    sys.path[:0] = [TESTS, os.path.join(REPO, "python")]
    import ctypes

    import torch
    from store_stress_base import Target

    tgt = Target(target)
    m = tgt.master()
    s = tgt.connect(m.address, m.metadata, 1 << 30, local_buffer=256 * MiB)
    out = {"sessions_s": [], "tp_put_s": [], "tp_get_s": []}
    try:
        n, size, parts = 64, MiB, 4
        data = os.urandom(n * size)
        buf = ctypes.create_string_buffer(data, len(data))
        base = ctypes.addressof(buf)
        assert s.register_buffer(base, len(data)) == 0
        step = size // parts
        tensors = [torch.randn(1024, 1024) for _ in range(16)]
        for r in range(rounds):
            keys = [f"ps{r}-{i}" for i in range(n)]
            t0 = time.perf_counter()
            assert s.batch_put_session_start(keys, [size] * n) == [0] * n
            ptrs = [[base + i * size + j * step for j in range(parts)] for i in range(n)]
            res = s.batch_put_from_multi_buffer_ranges(
                keys, ptrs, [[step] * parts] * n, [[j * step for j in range(parts)]] * n)
            assert res == [size] * n, res
            assert s.batch_put_session_end(keys) == [0] * n
            out["sessions_s"].append(time.perf_counter() - t0)
            got = s.get(keys[7])
            assert got == data[7 * size:8 * size], "session bytes"
            tkeys = [f"tp{r}-{i}" for i in range(len(tensors))]
            t0 = time.perf_counter()
            # One call stores every rank's shard (key_tp_<rank>).
            codes = s.batch_put_tensor_with_tp(tkeys, tensors, tp_size=4, split_dim=0)
            assert all(c == 0 for c in codes), codes
            out["tp_put_s"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            shards = [s.batch_get_tensor_with_tp(tkeys, tp_rank=rank, tp_size=4)
                      for rank in range(4)]
            out["tp_get_s"].append(time.perf_counter() - t0)
            for i, t in enumerate(tensors):
                parts_back = [shards[rank][i] for rank in range(4)]
                assert torch.equal(torch.cat(parts_back, 0), t), f"tp tensor {i}"
            s.remove_all()
    finally:
        s.close()
        m.stop()
    print("BENCH-RESULT " + json.dumps(out), flush=True)


def run(target, rounds):
    tp = torch_path()
    if tp is None:
        sys.exit("torch is not installed in .venv-serving (scripts/setup_serving_venv.sh)")
    env = dict(os.environ, GLOG_minloglevel="3",
               PYTHONPATH=os.pathsep.join([tp, os.path.join(REPO, "python"), TESTS]),
               TIDEWIRE_LIB=os.path.join(REPO, "target", "release", "libtidewire.so"))
    cmd = [MC_PY, os.path.abspath(__file__), "--worker", target, "--rounds", str(rounds)]
    if target == "mooncake":
        cmd = ["unshare", "-n", "bash", "-c", "ip link set lo up && exec " + " ".join(cmd)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    for line in out.stdout.splitlines():
        if line.startswith("BENCH-RESULT "):
            return json.loads(line[len("BENCH-RESULT "):])
    sys.exit(f"{target} failed:\n{out.stderr[-3000:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--worker")
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.rounds)
        return
    res = {}
    for target in ("tidewire", "mooncake", "tidewire", "mooncake"):
        r = run(target, a.rounds)
        print(f"{target}: " + ", ".join(f"{k} {[round(x * 1000, 1) for x in v]} ms"
                                        for k, v in r.items()), flush=True)
        for k, v in r.items():
            res.setdefault(target, {}).setdefault(k, []).extend(v)
    gib = {"sessions_s": 64 * MiB, "tp_put_s": 16 * 4 * MiB, "tp_get_s": 16 * 4 * MiB}
    print("\n| call | tidewire GiB/s | Mooncake GiB/s | tidewire / Mooncake |\n|---|---|---|---|")
    summary = {}
    for k, nbytes in gib.items():
        tw = nbytes / (1 << 30) / statistics.median(res["tidewire"][k])
        mc = nbytes / (1 << 30) / statistics.median(res["mooncake"][k])
        summary[k] = {"tidewire": tw, "mooncake": mc, "ratio": tw / mc}
        print(f"| {k[:-2]} | {tw:.2f} | {mc:.2f} | {tw / mc:.2f}x |")
    print("RESULT-JSON " + json.dumps({"summary": summary, "raw": res}))


if __name__ == "__main__":
    main()
