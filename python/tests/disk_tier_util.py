"""Shared by the serving-stack tests with the Store's disk tier on (SSD offload): the master's
tier figures (``/metrics``) and the checks every such test makes on them, and the tier's files.

A disk-tier test starts ``tidewire-master --enable_offload=true`` (write-behind, or
``--offload_on_evict=true``), gives the one process that owns memory a small segment (32-64 MiB)
and a tier directory under the test's tmp dir, and writes a working set 2-4 times the segment
through the serving stack's own code; every value read back must equal what was written (a miss
fails: the tier's quota is the filesystem's, far above the working set)."""

import glob
import os
import time

MiB = 1 << 20

#: The master's flags for each tier mode (the ids the tests are parametrized with).
OFFLOAD_FLAGS = {
    "write-behind": ("--enable_offload=true",),
    "on-evict": ("--enable_offload=true", "--offload_on_evict=true"),
}

FIGURES = ("disk_tiers", "disk_used_bytes", "offload_queued", "offload_written_total",
           "offload_failed_total", "offload_lost_total", "offload_queue_overflow_total",
           "capacity_bytes", "allocated_bytes")


def figures(master):
    """The master's tier and memory figures, by short name."""
    out = {}
    for line in master.metrics().splitlines():
        for name in FIGURES:
            if line.startswith(f"tidewire_master_{name} "):
                out[name] = int(float(line.split()[1]))
    return out


def settled(master, timeout=30):
    """Waits until no disk write is queued or in flight; returns the figures then."""
    deadline = time.monotonic() + timeout
    while True:
        f = figures(master)
        idle = f.get("offload_queued") == 0 and f.get("offload_in_flight", 0) == 0
        if idle or time.monotonic() > deadline:
            return f
        time.sleep(0.1)


def tier_files(tier_dir):
    """(record files, their bytes) under ``tier_dir`` (any depth: SGLang adds a per-rank
    subdirectory)."""
    files = glob.glob(os.path.join(tier_dir, "**", "*.twd"), recursive=True)
    return len(files), sum(os.path.getsize(f) for f in files)


def check_tier(master, tier_dir, working_set_bytes):
    """What the tier must show once the working set is written: one tier mounted, the working
    set over twice the DRAM segments' capacity, objects written to disk and none failed or
    lost, record files in the directory. Returns the figures (for the report)."""
    f = settled(master)
    nfiles, nbytes = tier_files(tier_dir)
    f.update(tier_files=nfiles, tier_file_bytes=nbytes, working_set_bytes=working_set_bytes)
    assert f.get("disk_tiers") == 1, f
    assert f["capacity_bytes"] > 0 and working_set_bytes >= 2 * f["capacity_bytes"], f
    assert f["offload_written_total"] > 0 and f["disk_used_bytes"] > 0, f
    assert f["offload_failed_total"] == 0 and f["offload_lost_total"] == 0, f
    assert f["offload_queue_overflow_total"] == 0, f
    assert nfiles > 0 and nbytes > 0, f
    return f
