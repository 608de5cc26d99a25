#!/usr/bin/env python3
"""This machine's ceilings, measured in the same run as the engines.

  memcpy    single-thread memcpy GB/s, 1 MiB and 64 MiB (memcpy_bw.c)
  stream    loopback TCP GB/s with 1 and 2 streams: iperf3 when installed, and always
            tcp_stream.c (a sender and a receiver process per stream)
  pingpong  loopback TCP round trip for 128 B and 4 KiB messages (tcp_pingpong.c)

The C helpers are compiled with gcc into --bindir. Each measurement is repeated; the JSON
(--out) keeps every value, with "bg_cores" per measurement: the CPU other processes used per
wall second while it ran. Everything binds 127.0.0.1 and every child has a timeout.
"""
import argparse
import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from meter import loadavg, machine_busy_s  # noqa: E402

HELPERS = ("memcpy_bw", "tcp_stream", "tcp_pingpong")


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Measured:
    """Context manager: wall time, CPU of the children it waited for, and everyone else's CPU."""

    def __enter__(self):
        self._t, self._c, self._b = time.perf_counter(), children_cpu_s(), machine_busy_s()
        return self

    def __exit__(self, *exc):
        self.wall_s = time.perf_counter() - self._t
        self.cpu_s = children_cpu_s() - self._c
        self.bg_cores = max(0.0, machine_busy_s() - self._b - self.cpu_s) / self.wall_s
        return False


def compile_helpers(bindir):
    os.makedirs(bindir, exist_ok=True)
    for name in HELPERS:
        src, exe = os.path.join(HERE, name + ".c"), os.path.join(bindir, name)
        if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(src):
            subprocess.run(["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-o", exe, src],
                           check=True, timeout=120)


def json_lines(cmd, timeout, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr[-400:]}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def unused_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iperf3(streams, secs):
    """One iperf3 client run against a one-shot server bound to 127.0.0.1."""
    port = str(unused_port())
    server = subprocess.Popen(["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", port],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        r = subprocess.run(["iperf3", "-c", "127.0.0.1", "-B", "127.0.0.1", "-p", port,
                            "-t", str(secs), "-O", "1", "-P", str(streams), "-J"],
                           capture_output=True, text=True, timeout=secs + 30)
        server.wait(timeout=15)
    finally:
        if server.poll() is None:  # only the server started above
            server.terminate()
            server.wait(timeout=10)
    end = json.loads(r.stdout)["end"]
    bps = end["sum_received"]["bits_per_second"]
    return {"gbit_s": bps / 1e9, "gbytes_s": bps / 8e9,
            "retransmits": end.get("sum_sent", {}).get("retransmits"),
            "cpu_util": end.get("cpu_utilization_percent")}


def say(line):
    print(line, flush=True)


def measure_memcpy(a, points):
    exe = os.path.join(a.bindir, "memcpy_bw")
    env = dict(os.environ, REPS=str(max(3, a.reps)), REP_SECONDS="0.5")
    for invocation in range(2):
        with Measured() as m:
            rows = json_lines([exe] + [str(s) for s in a.memcpy_sizes], 120, env)
        for row in rows:
            row.update(kind="memcpy", invocation=invocation, bg_cores=m.bg_cores)
            points.append(row)
            say(f"memcpy size={row['size']:>9d} GB/s median={row['median']:.2f}"
                f" min={row['min']:.2f} max={row['max']:.2f} (all {row['gbps']})"
                f" bg={m.bg_cores:.2f}")


def measure_streams(a, points):
    have_iperf3 = shutil.which("iperf3") is not None
    exe = os.path.join(a.bindir, "tcp_stream")
    for streams in (1, 2):
        for rep in range(a.reps):
            if have_iperf3:
                with Measured() as m:
                    r = iperf3(streams, a.stream_seconds)
                r.update(kind="iperf3", streams=streams, rep=rep, bg_cores=m.bg_cores,
                         children_cpu_s=m.cpu_s, wall_s=m.wall_s)
                points.append(r)
                say(f"iperf3 P={streams} {r['gbit_s']:.2f} Gbit/s = {r['gbytes_s']:.3f} GB/s"
                    f" retr={r['retransmits']} bg={m.bg_cores:.2f}")
            with Measured() as m:
                r = json_lines([exe, str(streams), str(a.stream_seconds)],
                               a.stream_seconds + 40)[0]
            r.update(kind="tcp_stream", rep=rep, bg_cores=m.bg_cores, children_cpu_s=m.cpu_s,
                     wall_s=m.wall_s, cpu_s_per_gb=m.cpu_s / (r["bytes"] / 1e9))
            points.append(r)
            say(f"tcp_stream P={streams} {r['gbytes_per_s']:.3f} GB/s"
                f" cpu_s/GB={r['cpu_s_per_gb']:.2f} bg={m.bg_cores:.2f}")
    return have_iperf3


def measure_pingpong(a, points):
    exe = os.path.join(a.bindir, "tcp_pingpong")
    for size in a.pingpong_sizes:
        for rep in range(a.reps):
            with Measured() as m:
                r = json_lines([exe, str(size), str(a.pingpong_seconds)],
                               a.pingpong_seconds + 40)[0]
            per_rtt = m.cpu_s / r["samples"] * 1e6
            r.update(kind="pingpong", rep=rep, bg_cores=m.bg_cores, children_cpu_s=m.cpu_s,
                     cpu_us_per_rtt=per_rtt)
            points.append(r)
            say(f"pingpong {size:>5d}B p50={r['p50_us']:.1f}us p99={r['p99_us']:.1f}us"
                f" mean={r['mean_us']:.1f}us min={r['min_us']:.1f}us n={r['samples']}"
                f" cpu/rtt={per_rtt:.1f}us (with warm-up) bg={m.bg_cores:.2f}")


def main():
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--bindir", default=os.path.join(os.getcwd(), "target", "bench", "limits"))
    p.add_argument("--memcpy-sizes", type=ints, default=f"{1 << 20},{64 << 20}")
    p.add_argument("--stream-seconds", type=int, default=4)
    p.add_argument("--pingpong-seconds", type=float, default=2.0)
    p.add_argument("--pingpong-sizes", type=ints, default="128,4096")
    p.add_argument("--out", default="")
    a = p.parse_args()
    compile_helpers(a.bindir)
    res = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "host": platform.node(), "kernel": platform.release(), "nproc": os.cpu_count(),
           "loadavg_start": loadavg(), "points": []}
    say(f"# physical_limits {res['date_utc']} loadavg={res['loadavg_start']}")
    measure_memcpy(a, res["points"])
    if not measure_streams(a, res["points"]):
        res["note"] = "iperf3 not installed; tcp_stream only"
    measure_pingpong(a, res["points"])
    res["loadavg_end"] = loadavg()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    say(f"# done loadavg={res['loadavg_end']}")


if __name__ == "__main__":
    main()
