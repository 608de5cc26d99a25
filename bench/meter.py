"""What one timed window cost: wall time, CPU by whom, other processes' load, loopback traffic.

A snapshot reads the clocks and the /proc counters; the difference of two snapshots is a dict
of plain numbers that the workloads store per repetition.
"""
import os
import statistics
import time

TICKS = os.sysconf("SC_CLK_TCK")


def machine_busy_s():
    """CPU seconds the whole machine spent busy (all cores, all processes)."""
    with open("/proc/stat") as f:
        user, nice, system, idle, iowait, irq, softirq, steal = \
            (int(x) for x in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / TICKS


def loopback_rx():
    """(bytes, packets) received on "lo" so far."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, sep, fields = line.partition(":")
            if sep and name.strip() == "lo":
                cols = fields.split()
                return int(cols[0]), int(cols[1])
    return 0, 0


def interfaces():
    with open("/proc/net/dev") as f:
        return [line.split(":")[0].strip() for line in f if ":" in line]


def process_cpu_s(pid):
    """utime + stime of another process; NaN once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS
    except (OSError, IndexError, ValueError):
        return float("nan")


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def summary(values):
    """Median, min, max and count of the values that are not None."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "n": len(vals)}


class Meter:
    """Snapshots for this process (and, in two-process mode, the target process)."""

    def __init__(self, peer_pid=None):
        self.peer_pid = peer_pid

    def snapshot(self):
        return {
            "wall": time.perf_counter(),
            "thread": time.thread_time(),
            "proc": time.process_time(),
            "peer": process_cpu_s(self.peer_pid) if self.peer_pid else 0.0,
            "busy": machine_busy_s(),
            "lo": loopback_rx(),
        }

    @staticmethod
    def between(a, b):
        wall = b["wall"] - a["wall"]
        proc = b["proc"] - a["proc"]
        peer = b["peer"] - a["peer"]
        others = max(0.0, (b["busy"] - a["busy"]) - proc - peer)
        return {
            "wall_s": wall,
            "thread_cpu_s": b["thread"] - a["thread"],  # the calling thread
            "proc_cpu_s": proc,                         # this process (same-process: both engines)
            "peer_cpu_s": peer,                         # the target process
            "total_cpu_s": proc + peer,
            "bg_cores": others / wall if wall > 0 else 0.0,  # everything else on the machine
            "lo_rx_bytes": b["lo"][0] - a["lo"][0],
            "lo_rx_pkts": b["lo"][1] - a["lo"][1],
        }
