#!/usr/bin/env python3
"""One engine's side of the side-by-side loopback benchmark (bench/run.sh runs it per engine).

Drives mooncake.engine.TransferEngine (PyPI wheel mooncake-transfer-engine-non-cuda) or
tidewire.engine.TransferEngine through the same Mooncake-style calls (--engine); the target
can be the other engine (--target-engine), which makes the run an interop test as well.
Real TCP over loopback, P2P-handshake mode, every address 127.0.0.1:

  tput     batch_transfer_sync_{write,read} throughput over a block x batch grid
  lat      transfer_sync_{read,write} latency for small sizes
  scatter  one READ of N 128-byte fragments, contiguous remotely, gapped locally

Per repetition it records wall time, the calling thread's CPU, this process's CPU (in
same-process mode including the target engine), the target process's CPU (two-process mode),
the CPU other processes used meanwhile ("bg cores", a noise gauge), and bytes received on "lo"
(lo_ratio = loopback bytes / payload bytes: ~1 means the payload crossed TCP). Results go to
--out as JSON (raw repetitions plus median/min/max per point) and a line per point to stdout.

Mooncake's listeners bind every address in P2P mode, so run it in a network namespace that
has only "lo" (run.sh uses `unshare -n`).
"""
import argparse
import json
import os
import platform
import sys
import time

import meter
import workloads
from peers import ENGINES, Pair, serve_target

MiB = 1 << 20
SECTIONS = {"lat": workloads.sec_lat, "tput": workloads.sec_tput,
            "scatter": workloads.sec_scatter}


def int_list(s):
    return [int(x) for x in s.split(",") if x]


def str_list(s):
    return [x for x in s.split(",") if x]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--role", default="initiator", choices=["initiator", "target"])
    p.add_argument("--engine", default="mooncake", choices=sorted(ENGINES),
                   help="engine that starts the transfers")
    p.add_argument("--target-engine", default="", choices=[""] + sorted(ENGINES),
                   help="engine that holds the remote buffer (default: --engine)")
    p.add_argument("--mode", default="same-process", choices=["same-process", "two-process"])
    p.add_argument("--sections", type=str_list, default="tput,lat,scatter")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per point")
    p.add_argument("--rep-seconds", type=float, default=0.8, help="throughput: length of a rep")
    p.add_argument("--warmup-seconds", type=float, default=0.3)
    p.add_argument("--max-point-seconds", type=float, default=60.0)
    p.add_argument("--ops", type=str_list, default="write,read")
    p.add_argument("--blocks", type=int_list, default="4096,65536,1048576,16777216")
    p.add_argument("--batches", type=int_list, default="1,32")
    p.add_argument("--lat-ops", type=str_list, default="read,write")
    p.add_argument("--lat-sizes", type=int_list, default="128,4096")
    p.add_argument("--lat-seconds", type=float, default=1.0)
    p.add_argument("--lat-warmup", type=int, default=300, help="calls before timing")
    p.add_argument("--lat-max-samples", type=int, default=200000)
    p.add_argument("--scatter-n", type=int_list, default="1,4096,32768")
    p.add_argument("--scatter-frag", type=int, default=128)
    p.add_argument("--scatter-stride", type=int, default=256,
                   help="local distance between fragments (fragment + gap)")
    p.add_argument("--scatter-rep-seconds", type=float, default=1.0)
    p.add_argument("--scatter-min-ops", type=int, default=3)
    p.add_argument("--scatter-max-ops", type=int, default=100000)
    p.add_argument("--buf-bytes", type=int, default=0, help="buffer per side (default: fits)")
    p.add_argument("--target-max-seconds", type=int, default=3600)
    p.add_argument("--target-log", default="", help="file for the target process's stderr")
    p.add_argument("--label", default="")
    p.add_argument("--out", default="", help="JSON results file")
    a = p.parse_args(argv)
    a.target_engine = a.target_engine or a.engine
    unknown = set(a.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections: {','.join(sorted(unknown))}")
    if not a.buf_bytes:
        need = 64 * MiB
        if "tput" in a.sections:
            need = max(need, max(a.blocks) * max(a.batches))
        if "scatter" in a.sections:
            need = max(need, 2 * max(a.scatter_n) * max(a.scatter_stride, a.scatter_frag))
        a.buf_bytes = -(-need // MiB) * MiB
    return a


def wheel_version():
    try:
        import importlib.metadata
        return importlib.metadata.version("mooncake-transfer-engine-non-cuda")
    except Exception:
        return "unknown"


def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def main():
    a = parse_args()
    if a.role == "target":
        serve_target(a.target_engine, a.buf_bytes, a.target_max_seconds)
        return
    res = {
        "label": a.label, "date_utc": utc_now(), "host": platform.node(),
        "kernel": platform.release(), "nproc": os.cpu_count(),
        "python": platform.python_version(), "mooncake_wheel": wheel_version(),
        "mode": a.mode, "engine": a.engine, "target_engine": a.target_engine,
        "net_interfaces": meter.interfaces(),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("MC_", "GLOG_", "TW_"))},
        "argv": sys.argv, "buf_bytes": a.buf_bytes, "loadavg_start": meter.loadavg(),
        "points": [],
    }
    print(f"# compare {res['date_utc']} engine={a.engine} target={a.target_engine}"
          f" wheel={res['mooncake_wheel']} mode={a.mode} ifaces={res['net_interfaces']}"
          f" env={res['env']} loadavg={res['loadavg_start']}", flush=True)
    pair = None
    status = 0
    try:
        pair = Pair(a.engine, a.target_engine, a.mode, a.buf_bytes, os.path.abspath(__file__),
                    a.target_log or None, a.target_max_seconds)
        res["target"] = pair.target
        res["sanity"] = pair.round_trip_check()
        print(f"# target={pair.target} sanity={res['sanity']}", flush=True)
        if not res["sanity"]["data_ok"]:
            raise RuntimeError("round-trip check failed")
        for name in ("lat", "tput", "scatter"):
            if name in a.sections:
                SECTIONS[name](pair, a, res)
    except RuntimeError as err:
        res["error"] = str(err)
        print(f"# ERROR {err}", flush=True)
        status = 1
    finally:
        res["loadavg_end"] = meter.loadavg()
        res["date_utc_end"] = utc_now()
        if a.out:
            with open(a.out, "w") as f:
                json.dump(res, f, indent=1)
        if pair is not None:
            pair.close()
    print(f"# done loadavg={res['loadavg_end']}", flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # the results are written; engine destructors may block at teardown


if __name__ == "__main__":
    main()
