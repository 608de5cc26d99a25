"""TransferQueue's own MooncakeStore client (PyPI ``transferqueue``, its
``MooncakeStoreClient`` unchanged) on tidewire: ``mooncake.store`` resolves to
``tidewire.store`` through the shim, against a tidewire-master, in both metadata modes.

A writer process puts 900 tensors (float32, int64, bfloat16, uint8, 0-d) and 450 non-tensors
(dicts, strings, numpy arrays, lists) three times (new, same sizes in place, new sizes), reading
each generation back; a reader process (its own segment, so every byte crosses processes) gets
the last generation with TransferQueue's ``get(keys, shapes, dtypes, custom_backend_meta)``,
compares every value byte for byte, then ``clear``s and checks nothing is left.

TransferQueue needs torch and lives in its own virtual environment: ``scripts/setup_tq_venv.sh``
creates ``.venv-tq``; ``TIDEWIRE_TQ_PYTHON`` may name another interpreter. Without one the
test is skipped with that reason, unless ``TIDEWIRE_REQUIRE_TQ=1`` (``make tq-test``, CI), which
makes it fail instead.
"""

import json
import os
import subprocess
import threading

import pytest

from conftest import REPO
from store_util import MASTER_BIN, Master

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tq_driver.py")
TQ_PYTHON = os.environ.get("TIDEWIRE_TQ_PYTHON") or os.path.join(REPO, ".venv-tq", "bin", "python")


def _tq_ready():
    if not os.path.exists(TQ_PYTHON):
        return f"no TransferQueue environment at {TQ_PYTHON} (run scripts/setup_tq_venv.sh)"
    probe = subprocess.run(
        [TQ_PYTHON, "-c", "import torch, transfer_queue.storage.clients.mooncake_client"],
        capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        return f"{TQ_PYTHON} cannot import TransferQueue: {probe.stderr.strip()[-300:]}"
    return None


_REASON = _tq_ready()
if _REASON is not None and os.environ.get("TIDEWIRE_REQUIRE_TQ") == "1":
    # CI installs TransferQueue and must run this test, never skip it.
    raise RuntimeError(f"TIDEWIRE_REQUIRE_TQ=1 but {_REASON}")
pytestmark = [
    pytest.mark.skipif(not os.path.exists(MASTER_BIN), reason="build tidewire-master first"),
    pytest.mark.skipif(_REASON is not None, reason=_REASON or ""),
]


class Driver:
    def __init__(self, role, master, metadata, extra=()):
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # the driver sets its own path (shim first)
        self.proc = subprocess.Popen(
            [TQ_PYTHON, DRIVER, role, master.address, metadata, *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env)
        self.err = []
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()

    def read(self, timeout=240):
        box = {}

        def reader():
            box["line"] = self.proc.stdout.readline()

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        t.join(timeout)
        if "line" not in box:
            self.kill()
            raise AssertionError(f"driver silent for {timeout}s: {''.join(self.err)[-2000:]}")
        if not box["line"]:
            self.proc.wait(timeout=30)
            raise AssertionError(f"driver exited {self.proc.returncode}: "
                                 f"{''.join(self.err)[-2000:]}")
        msg = json.loads(box["line"])
        assert "error" not in msg, f"{msg['error']}\n{''.join(self.err)[-2000:]}"
        return msg

    def send(self, text):
        self.proc.stdin.write(text)
        self.proc.stdin.flush()

    def finish(self, timeout=60):
        self.proc.stdin.close()
        return self.proc.wait(timeout=timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.mark.parametrize("mode", ["p2p", "http"])
def test_transferqueue_client_put_get_clear(mode):
    m = Master("-client_ttl=30", "-default_kv_lease_ttl=999999", "-default_kv_soft_pin_ttl=999999",
               "--allow_evict_soft_pinned_objects=false", "--eviction_high_watermark_ratio=1.0",
               "--eviction_ratio=0.0", http=mode == "http")
    # TransferQueue adds "http://" and "/metadata" itself: give it the bare host:port.
    metadata = m.metadata if mode == "p2p" else m.metadata[len("http://"):-len("/metadata")]
    writer = reader = None
    try:
        writer = Driver("writer", m, metadata)
        put = writer.read()
        assert put["store"] == "tidewire.store", put
        assert put["keys"] == 1350 and put["batch"] == 400
        reader = Driver("reader", m, metadata)
        reader.send(json.dumps({"meta": put["meta"]}) + "\n")
        assert reader.read() == {"checked": 1350}
        assert reader.read() == {"cleared": 1350}
        assert reader.finish() == 0, "".join(reader.err)[-2000:]
        assert writer.finish() == 0, "".join(writer.err)[-2000:]
    finally:
        for d in (reader, writer):
            if d:
                d.kill()
        m.stop()


# TransferQueue's SSD-offload deployment (transfer_queue/storage/bootstrap/mooncake_bootstrap.py
# with ``offload.enabled``): the master's flags below, and one standalone client owning a
# segment and the disk tier (``mooncake_client -enable_offload=true``, here disk_owner.py: a
# tidewire client with setup(..., enable_ssd_offload=True, ssd_offload_path=<dir>)).
# TransferQueue's bootstrap gives reads a 999,999 ms lease: eviction writes leased objects to
# disk and drops their memory all the same (a lease guards removal, not the memory copy of a
# value the disk keeps), so a generation read back does not pin DRAM.
TQ_OFFLOAD_MASTER_FLAGS = (
    "-client_ttl=30", "-default_kv_lease_ttl=999999", "-default_kv_soft_pin_ttl=999999",
    "--allow_evict_soft_pinned_objects=false", "--enable_offload=true",
    "--eviction_high_watermark_ratio=0.9", "--eviction_ratio=0.1", "--offload_on_evict=true",
    "--offload_force_evict=false", "--offloading_queue_limit=10000")
OWNER_SEGMENT = 48 << 20


def test_transferqueue_client_disk_tier(tmp_path):
    """TransferQueue's MooncakeStoreClient configured for its SSD offload (``offload: {enabled:
    true}``: puts not hard-pinned) with no segment of its own, against a master with
    TransferQueue's offload flags (on-evict) and a tier owner with a 48 MiB segment: a writer
    puts 150 MiB of 256 KiB tensors and 450 non-tensors, 100 keys per put, three generations
    (new, same sizes in place, new sizes: upserts of keys whose only copy is on disk), reading
    each back whole; a reader gets the last one (every byte compared), clears, and nothing is
    left. Misses fail: the tier's quota is far above the working set."""
    from disk_tier_util import check_tier
    from test_store_disk import Owner

    tier = str((tmp_path / "tq-ssd").resolve())
    os.makedirs(tier)
    m = Master(*TQ_OFFLOAD_MASTER_FLAGS)
    owner = writer = reader = None
    try:
        owner = Owner(m, tier, segment=OWNER_SEGMENT)
        assert owner.ready["ready"], owner.ready
        writer = Driver("writer", m, "P2PHANDSHAKE", ["--disk"])
        put = writer.read(timeout=420)
        assert put["store"] == "tidewire.store" and put["hard_pin"] is False, put
        assert put["keys"] == 1050 and put["bytes"] >= 3 * OWNER_SEGMENT, put
        tier_figures = check_tier(m, tier, put["bytes"])
        print(f"TransferQueue disk tier: {put['bytes'] >> 20} MiB of tensors a generation over "
              f"{tier_figures['capacity_bytes'] >> 20} MiB of DRAM; "
              f"{tier_figures['offload_written_total']} objects written, "
              f"{tier_figures['disk_used_bytes'] >> 20} MiB on disk")
        reader = Driver("reader", m, "P2PHANDSHAKE", ["--disk"])
        reader.send(json.dumps({"meta": put["meta"]}) + "\n")
        assert reader.read(timeout=420) == {"checked": 1050}
        assert reader.read() == {"cleared": 1050}
        assert reader.finish() == 0, "".join(reader.err)[-2000:]
        assert writer.finish() == 0, "".join(writer.err)[-2000:]
    finally:
        for d in (reader, writer):
            if d:
                d.kill()
        if owner:
            owner.close()
        m.stop()
