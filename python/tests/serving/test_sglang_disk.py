"""SGLang's own HiCache L3 backend for Mooncake Store (sglang 0.5.23, ``MooncakeStore``
unchanged) on tidewire with the Store's disk tier on, SSD offload turned on the way SGLang users
do: ``MOONCAKE_ENABLE_SSD_OFFLOAD=true`` and ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH=<dir>`` in the
writer's environment (``MooncakeStoreConfig.load_from_env``), which the backend hands to
``setup(..., enable_ssd_offload=True, ssd_offload_path=<dir>/rank_0_0_0_0)``.

The same writer / reader pair as test_sglang.py (``sglang_driver.py``: ``batch_set_v1``,
``batch_exists``, ``batch_get_v1`` in chunks of 128 pages, every byte compared in another
process, a miss, ``clear()`` under a read lease and after it), with:

- ``tidewire-master --enable_offload=true`` (write-behind: every page is written to disk after
  its put) or with ``--offload_on_evict=true`` (written when eviction picks it);
- the writer's segment 64 MiB, 3 rounds of about 64 MiB of fresh pages (3x the segment), so
  most pages the reader gets (and that ``batch_exists`` finds, and that the writer's second
  ``batch_set_v1`` of round 0 skips) live only on disk;
- the tier under the test's tmp dir; once written, the master must show one tier, pages
  written and none failed or lost, and the directory record files (disk_tier_util.check_tier).

Pools: ``mha`` (``page_first``, K and V objects: ``batch_put_from`` / ``batch_get_into``) with
write-behind, ``mla`` (``layer_first``, 8 pieces per page: the multi-buffer calls) with
on-evict. No Mooncake control here (test_sglang.py has it for the same driver).
"""

import json
import os

import pytest

from disk_tier_util import MiB, OFFLOAD_FLAGS, check_tier, settled
from serving_util import serving_test_deadline  # noqa: F401 (autouse)
from store_util import MASTER_BIN, Master
from test_sglang import MASTER_FLAGS, Driver, check, report, serving  # noqa: F401 (fixture)

SEGMENT = 64 * MiB
ROUNDS = 3  # about 64 MiB each: 3x the segment
CASES = [("mha", "write-behind"), ("mla", "on-evict")]


def run_disk_scenario(pool, offload, tier):
    out = {"store": "tidewire", "pool": pool, "writer": [], "reader": [], "error": None}
    master = writer = reader = None
    try:
        master = Master(*MASTER_FLAGS, *OFFLOAD_FLAGS[offload])
        sizes = ["--segment", str(SEGMENT), "--rounds", str(ROUNDS)]
        writer = Driver("tidewire", pool, "writer", master, [*sizes, "--offload-dir", tier])
        reader = Driver("tidewire", pool, "reader", master, sizes)
        reader.read_until("ready")
        written = writer.read_until("written")
        writer.read_until("time")
        out["tier"] = check_tier(master, tier, written["rounds"] * written["pages"]
                                 * written["page_bytes"])
        reader.send(json.dumps(written) + "\n")
        reader.read_until("time")
        reader.finish()
        writer.finish()
        out["tier_after_clear"] = settled(master)
    except Exception as e:  # noqa: BLE001 - the caller asserts on it
        out["error"] = str(e)
    finally:
        for d in (reader, writer):
            if d:
                d.kill()
                out[d.role] = d.lines
        if master:
            master.stop()
    return out


@pytest.mark.skipif(not os.path.exists(MASTER_BIN), reason="build tidewire-master first")
@pytest.mark.parametrize("pool,offload", CASES, ids=[f"{p}-{o}" for p, o in CASES])
def test_sglang_hicache_on_tidewire_disk_tier(serving, pool, offload, tmp_path,
                                              record_property):
    tier = str((tmp_path / "hicache-ssd").resolve())
    os.makedirs(tier)
    result = run_disk_scenario(pool, offload, tier)
    times, clear_now = check(result, "tidewire.store")
    # The backend mounted its tier in its per-rank subdirectory of the configured path.
    assert os.path.isdir(os.path.join(tier, "rank_0_0_0_0")), os.listdir(tier)
    report(record_property, f"tidewire+disk({offload})", pool, times, clear_now)
    t = result["tier"]
    line = (f"sglang {pool} disk tier ({offload}): {t['working_set_bytes'] / MiB:.0f} MiB "
            f"working set over {t['capacity_bytes'] / MiB:.0f} MiB of DRAM; "
            f"{t['offload_written_total']} objects written, {t['disk_used_bytes'] / MiB:.0f} MiB "
            f"on disk in {t['tier_files']} files")
    print(line)
    record_property(f"disk_{pool}_{offload}", json.dumps(t))
