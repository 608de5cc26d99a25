"""vLLM's own MooncakeStoreConnector worker (vllm 0.33.0, ``MooncakeStoreWorker`` unchanged) on
tidewire with the Store's disk tier on, configured as vLLM configures Mooncake's SSD tier.

vLLM's embedded mode cannot turn a tier on: ``setup_mooncake_store`` passes only the seven
positional arguments (and ``tenant_id``), never ``enable_ssd_offload``, and vLLM's
``enable_offload`` key only changes its log lines. Its configuration for the SSD tier is
``mode: standalone-store`` (``MooncakeStoreConfig``: "rank contributes 0; an external
``mooncake_client`` process owns the pool and the SSD tier") with ``enable_offload: true``. The
existing tests drive only embedded mode, so this one drives vLLM's standalone-store mode, the
mode its users run the tier with: both ranks mount no segment, and the test starts the external
owner (disk_owner.py: a tidewire client with a 64 MiB segment and
``setup(..., enable_ssd_offload=True, ssd_offload_path=<tmp dir>)``, standing in for
``mooncake_client``).

The same writer / reader pair as test_vllm.py (``vllm_driver.py --disk``): 3 rounds of 4
requests x 64 blocks saved through the send thread (``batch_put_from_multi_buffers``, 8 pieces of
32 KiB a key, 64 MiB a round: 192 MiB through 64 MiB of DRAM), lookups, misses, dedup; the
reader loads every round with every byte of its KV cache compared, a partial miss, the tier log
(``batch_get_replica_desc``: every key known, memory or disk), and the reset
(``remove_all(force=True)``) after which nothing is found. Master: ``--enable_offload=true``
(write-behind). Once the writer has saved, the master must show one tier, objects written and
none failed or lost, and the tier directory record files (disk_tier_util.check_tier).
"""

import json
import os

from disk_tier_util import MiB, OFFLOAD_FLAGS, check_tier
from serving_util import serving_test_deadline  # noqa: F401 (autouse)
from store_util import Master
from test_store_disk import Owner
from test_vllm import check_shape, pytestmark, run_pair, summary  # noqa: F401 (marks)

OWNER_SEGMENT = 64 * MiB
RSS_CAP_MIB = 6144  # a driver past this is stopped (its Python stacks dumped first)


def rss_guard(stop, seen):
    """Stops a vllm_driver.py process whose resident memory passes RSS_CAP_MIB, before the
    kernel's OOM killer picks a process of its own: SIGUSR1 first (the driver dumps every
    thread's Python stack to its stderr), SIGKILL 3 s later."""
    import signal
    import time

    while not stop:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().split(b"\0")
                if not any(c.endswith(b"vllm_driver.py") for c in cmd):
                    continue
                with open(f"/proc/{pid}/status") as f:
                    kib = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:"))
            except (OSError, StopIteration):
                continue
            if kib >> 10 > RSS_CAP_MIB:
                seen.append(f"{cmd[-2].decode()} pid {pid} at {kib >> 10} MiB")
                os.kill(int(pid), signal.SIGUSR1)
                time.sleep(3)
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.2)


def test_vllm_store_worker_standalone_store_disk_tier(tmp_path, record_property):
    tier = str((tmp_path / "vllm-ssd").resolve())
    os.makedirs(tier)
    m = Master(*OFFLOAD_FLAGS["write-behind"])
    owner = None
    seen = {}
    import threading
    stop, too_big = [], []
    threading.Thread(target=rss_guard, args=(stop, too_big), daemon=True).start()
    try:
        owner = Owner(m, tier, segment=OWNER_SEGMENT)
        assert owner.ready["ready"], owner.ready

        def after_written():
            seen.update(check_tier(m, tier, 3 * 64 * MiB))

        result = run_pair("tidewire", m.address, m.metrics_port, extra=["--disk"],
                          after_written=after_written)
    finally:
        stop.append(True)
        if owner:
            owner.close()
        m.stop()
    print(summary(result))
    assert not too_big, f"stopped over {RSS_CAP_MIB} MiB: {too_big}; " + "\n".join(
        result["failures"])
    print(json.dumps(result["time"]))
    assert not result["failures"], "\n".join(result["failures"])
    check_shape(result)
    assert seen, "the tier was never checked"
    tier_keys = [x for x in result["reader"] if x.get("step") == "tier_disk"]
    assert tier_keys, result["reader"]
    print(f"vllm standalone-store disk tier: 192 MiB over {seen['capacity_bytes'] / MiB:.0f} MiB "
          f"of DRAM; {seen['offload_written_total']} objects written, "
          f"{seen['disk_used_bytes'] / MiB:.0f} MiB on disk; round 0 request 1 read with "
          f"{tier_keys[0]['memory_keys']} memory and {tier_keys[0]['disk_keys']} disk replicas; "
          f"first replicas per round (memory/disk): "
          f"{[(r['memory'], r['disk']) for r in tier_keys[0]['per_round']]}")
    record_property("time_ms", json.dumps(result["time"]))
    record_property("tier", json.dumps({**seen, **tier_keys[0]}))
