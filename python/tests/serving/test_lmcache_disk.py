"""LMCache's own ``mooncakestore://`` remote backend (lmcache 0.5.6, ``MooncakestoreConnector``
unchanged) on tidewire with the Store's disk tier on, turned on the way LMCache users do:
``extra_config`` keys ``mooncake_enable_ssd_offload: "true"`` and
``mooncake_ssd_offload_path: <dir>``, which the connector forwards (prefix stripped) in the
dict it hands to ``setup(dict)`` (the writer checks the dict's keys).

The same writer / reader pair as test_lmcache.py (``lmcache_driver.py``: LMCache's
``StorageManager`` with a ``LocalCPUBackend`` and the ``RemoteBackend``; ``batched_put`` of 3
requests of 64 chunks of 1 MiB, a re-put of round 0 with other bytes that must leave the stored
ones, a partial chunk; the reader, with no segment, checks misses, ``batched_contains``,
``get_block_mapping``, ``batched_get`` with every byte compared, the lookup client, prefix hits,
the partial chunk), with:

- ``tidewire-master --enable_offload=true`` (write-behind) for LMCache's default ``meta`` mode
  (``put_parts`` / ``batch_get_buffer``), ``--offload_on_evict=true`` for ``zerocopy``
  (``batch_put_from`` / ``batch_get_into`` on the registered CPU pool);
- the writer's segment 64 MiB against 193 MiB of chunks (3x), the tier under the test's tmp
  dir; once written, the master must show one tier, objects written and none failed or lost,
  and the directory record files (disk_tier_util.check_tier).
"""

import json
import os

import pytest

from disk_tier_util import MiB, OFFLOAD_FLAGS, check_tier
from serving_util import serving_test_deadline  # noqa: F401 (autouse)
from store_util import Master
from test_lmcache import _REASON, CLIENT_TTL, KEYS, PARTIAL_BYTES, need, run_pair

SEGMENT_MIB = 64
CASES = [("meta", "write-behind"), ("zerocopy", "on-evict")]


@pytest.mark.parametrize("mode,offload", CASES, ids=[f"{m}-{o}" for m, o in CASES])
def test_lmcache_mooncakestore_on_tidewire_disk_tier(mode, offload, tmp_path, record_property):
    need(_REASON)
    tier = str((tmp_path / "lmcache-ssd").resolve())
    os.makedirs(tier)
    # LMCache's writer polls ``batched_contains`` (is_exist) until a request is visible, and an
    # exist query grants a read lease (10 s by default): eviction writes leased objects to disk
    # and drops their memory all the same (a lease guards removal; readers have read holds).
    m = Master(CLIENT_TTL, *OFFLOAD_FLAGS[offload])
    seen = {}
    try:
        working_set = (KEYS - 2) * MiB + PARTIAL_BYTES

        def after_written():
            seen.update(check_tier(m, tier, working_set))

        figures = run_pair("tidewire", mode, m.address, m.metrics_port, lambda start: start(),
                           writer_args=["--segment-mib", str(SEGMENT_MIB),
                                        "--offload-dir", tier],
                           after_written=after_written)
        assert seen, "the tier was never checked"
        print(f"lmcache {mode} disk tier ({offload}): {working_set / MiB:.0f} MiB of chunks over "
              f"{seen['capacity_bytes'] / MiB:.0f} MiB of DRAM; "
              f"{seen['offload_written_total']} objects written, "
              f"{seen['disk_used_bytes'] / MiB:.0f} MiB on disk in {seen['tier_files']} files")
        record_property("time_ms", json.dumps(figures))
        record_property("tier", json.dumps(seen))
    finally:
        m.stop()
