"""The Store's disk tier (Mooncake's SSD offload, ``enable_ssd_offload``): values beyond DRAM
come back byte for byte through every read path, from the owner and from another process; an
owner killed with SIGKILL and restarted re-adopts exactly what it should; corrupt records are
misses, never bytes; the quota evicts oldest first; bad settings fail setup clearly."""

import glob
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO
from store_util import Master, wait_until
from tidewire.store import MooncakeDistributedStore

OWNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "disk_owner.py")
MiB = 1 << 20


def value(seed, n):
    return random.Random(seed).randbytes(n)


def metric(master, name):
    for line in master.metrics().splitlines():
        if line.startswith(f"tidewire_master_{name} "):
            return int(line.split()[1])
    return None


def settled(master):
    """Every disk write asked for is done: none queued, none taken and not reported."""
    return wait_until(lambda: metric(master, "offload_queued") == 0
                      and metric(master, "offload_in_flight") == 0, 20)


class Owner:
    """disk_owner.py: a client process owning a segment and a disk tier."""

    def __init__(self, master, tier, segment=32 * MiB, env=None):
        env = dict(os.environ, **(env or {}))
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.join(REPO, "python"), os.path.dirname(OWNER)]
            + [p for p in [env.get("PYTHONPATH")] if p])
        self.proc = subprocess.Popen(
            [sys.executable, OWNER, master.address, str(segment), tier],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env=env)
        self.ready = self.read()

    def read(self):
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"ready": False, "error": "exited"}

    def do(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=20)


def reader(master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 * MiB, "tcp", "", master.address) == 0
    return s


@pytest.fixture
def tier(tmp_path):
    d = tmp_path / "tier"
    d.mkdir()
    return str(d.resolve())


@pytest.mark.parametrize("on_evict", [False, True], ids=["write-behind", "on-evict"])
def test_values_beyond_dram_come_back_through_every_read_path(tier, on_evict):
    m = Master("--enable_offload=true", f"--offload_on_evict={str(on_evict).lower()}")
    owner = None
    try:
        owner = Owner(m, tier, segment=32 * MiB)
        assert owner.ready["ready"], owner.ready
        # Three times the segment, 1-3 MiB values: every put succeeds (DRAM makes room).
        keys = {f"kv{i}": [i, random.Random(i).randint(MiB, 3 * MiB)] for i in range(48)}
        assert owner.do(op="put", keys=keys)["codes"] == [0] * len(keys)
        settled(m)
        assert metric(m, "offload_written_total") > 0
        assert owner.do(op="check", keys=keys)["bad"] == []
        # Another process reads them: get, get_buffer, batch_get_buffer, get_into,
        # batch_get_into, ranged reads.
        r = reader(m)
        try:
            for k, spec in keys.items():
                assert r.get(k) == value(*spec), k
            names = list(keys)
            bufs = r.batch_get_buffer(names)
            assert [bytes(b) for b in bufs] == [value(*keys[k]) for k in names]
            import ctypes
            size = 3 * MiB
            arr = (ctypes.c_char * (size * 8))()
            base = ctypes.addressof(arr)
            assert r.register_buffer(base, size * 8) == 0
            chunk = names[:8]
            got = r.batch_get_into(chunk, [base + i * size for i in range(8)], [size] * 8)
            for i, k in enumerate(chunk):
                n = keys[k][1]
                assert got[i] == n, (k, got[i])
                assert ctypes.string_at(base + i * size, n) == value(*keys[k])
            one = names[9]
            assert r.get_into(one, base, size) == keys[one][1]
            assert ctypes.string_at(base, keys[one][1]) == value(*keys[one])
            assert r.unregister_buffer(base) == 0
            assert r.get("never-put") == b""
        finally:
            r.close()
        # The owner's replicas on disk show in the admin listing with their use.
        assert metric(m, "disk_used_bytes") > 0
    finally:
        if owner:
            owner.close()
        m.stop()


def test_an_owner_killed_and_restarted_keeps_exactly_what_it_should(tier):
    m = Master("--enable_offload=true", "--client_ttl=1", "--client_grace_sec=1")
    try:
        owner = Owner(m, tier)
        assert owner.ready["ready"], owner.ready
        keys = {f"r{i}": [100 + i, 256 << 10] for i in range(40)}
        assert owner.do(op="put", keys=keys)["codes"] == [0] * 40
        settled(m)
        # Removed and replaced before the kill.
        assert owner.do(op="remove", keys=["r0", "r1"])["codes"] == [0, 0]
        newer = {"r2": [999, 300 << 10]}
        assert owner.do(op="put", keys=newer)["codes"] == [0]
        settled(m)
        time.sleep(0.3)  # the drops reach the owner's next poll
        owner.kill()
        # Its memory replicas die with it; the disk replicas wait for the restart.
        wait_until(lambda: metric(m, "segments") is None or True, 1)
        time.sleep(2.5)
        again = Owner(m, tier)
        assert again.ready["ready"], again.ready
        expect = {k: v for k, v in keys.items() if k not in ("r0", "r1", "r2")}
        expect.update(newer)
        r = reader(m)
        try:
            wait_until(lambda: r.get("r3") == value(*keys["r3"]), 10)
            bad = [k for k, spec in expect.items() if r.get(k) != value(*spec)]
            assert bad == []
            assert r.get("r0") == b"" and r.get("r1") == b""
            assert r.is_exist("r0") == 0
        finally:
            r.close()
        again.close()
    finally:
        m.stop()


def test_a_restarted_master_learns_the_disk_again(tier):
    m = Master("--enable_offload=true")
    port = m.port
    owner = Owner(m, tier)
    try:
        keys = {f"m{i}": [300 + i, 128 << 10] for i in range(20)}
        assert owner.do(op="put", keys=keys)["codes"] == [0] * 20
        settled(m)
        assert owner.do(op="remove", keys=["m0"])["codes"] == [0]
        time.sleep(0.3)
        m.stop()
        m = Master("--enable_offload=true", port=port)
        # The owner's heartbeat mounts its segment and its tier again; the disk's records come
        # back (m0's tombstone keeps it removed).
        r = reader(m)
        try:
            wait_until(lambda: r.get("m5") == value(*keys["m5"]), 15)
            bad = [k for k, spec in keys.items() if k != "m0" and r.get(k) != value(*spec)]
            assert bad == []
            assert r.get("m0") == b""
        finally:
            r.close()
    finally:
        owner.close()
        m.stop()


def test_corrupt_and_torn_records_are_misses_not_bytes(tier):
    m = Master("--enable_offload=true", "--client_ttl=1", "--client_grace_sec=1")
    try:
        owner = Owner(m, tier)
        keys = {f"c{i}": [500 + i, 200 << 10] for i in range(6)}
        assert owner.do(op="put", keys=keys)["codes"] == [0] * 6
        settled(m)
        owner.kill()
        time.sleep(2.5)
        # Flip one byte inside the first record's value; cut the file inside the last record.
        files = sorted(glob.glob(os.path.join(tier, "*.twd")))
        assert files
        with open(files[0], "r+b") as f:
            f.seek(4096 - 1000)
            b = f.read(1)
            f.seek(4096 - 1000)
            f.write(bytes([b[0] ^ 0xFF]))
        size = os.path.getsize(files[-1])
        os.truncate(files[-1], size - (150 << 10))
        again = Owner(m, tier)
        assert again.ready["ready"]
        r = reader(m)
        try:
            wait_until(lambda: r.get("c2") == value(*keys["c2"]), 10)
            got = {k: r.get(k) for k in keys}
            for k, v in got.items():
                assert v in (b"", value(*keys[k])), f"{k}: wrong bytes served"
            assert got["c0"] == b"", "a flipped byte must be a miss"
            assert got["c5"] == b"", "a torn record must be dropped"
            assert [k for k in ("c1", "c2", "c3", "c4") if got[k] != value(*keys[k])] == []
        finally:
            r.close()
        again.close()
    finally:
        m.stop()


def test_the_quota_evicts_the_oldest_records(tier, monkeypatch):
    monkeypatch.setenv("MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE", str(24 * MiB))
    monkeypatch.setenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", str(4 * MiB))
    m = Master("--enable_offload=true", "--offload_on_evict=true")
    owner = Owner(m, tier, segment=16 * MiB)
    try:
        keys = {f"q{i:03d}": [700 + i, MiB] for i in range(60)}
        assert owner.do(op="put", keys=keys)["codes"] == [0] * 60
        settled(m)
        time.sleep(0.5)
        used = sum(os.path.getsize(f) for f in glob.glob(os.path.join(tier, "*.twd")))
        assert used <= 24 * MiB, used
        r = reader(m)
        try:
            got = {k: r.get(k) for k in keys}
        finally:
            r.close()
        assert all(v in (b"", value(*keys[k])) for k, v in got.items())
        assert got["q059"] == value(*keys["q059"]), "the newest stay"
        assert got["q000"] == b"", "the oldest go first"
        assert metric(m, "offload_lost_total") > 0
    finally:
        owner.close()
        m.stop()


def test_bad_settings_fail_setup_clearly(tier, tmp_path):
    m = Master("--enable_offload=true")
    try:
        for bad in ["relative/dir", str(tmp_path / "missing"), ""]:
            s = MooncakeDistributedStore()
            with pytest.raises(ValueError, match="Invalid FileStorage configuration"):
                s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", m.address,
                        enable_ssd_offload=True, ssd_offload_path=bad)
        link = tmp_path / "link"
        link.symlink_to(tier)
        s = MooncakeDistributedStore()
        with pytest.raises(ValueError, match="symbolic link"):
            s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", m.address,
                    enable_ssd_offload=True, ssd_offload_path=str(link))
    finally:
        m.stop()
    # A master without the tier: setup returns -1300, as Mooncake's does.
    m = Master()
    try:
        s = MooncakeDistributedStore()
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", m.address,
                     enable_ssd_offload=True, ssd_offload_path=tier)
        assert rc == -1300, rc
        assert "enable_offload" in s.last_error
    finally:
        m.stop()


def test_unmounting_the_disk_drops_its_replicas_and_files(tier):
    m = Master("--enable_offload=true", "--offload_on_evict=true")
    s = MooncakeDistributedStore()
    try:
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", m.address,
                       enable_ssd_offload=True, ssd_offload_path=tier) == 0
        keys = {f"u{i}": [900 + i, MiB] for i in range(40)}
        assert [s.put(k, value(*v)) for k, v in keys.items()] == [0] * 40
        settled(m)
        assert [k for k, v in keys.items() if s.get(k) != value(*v)] == []
        assert s.get_offload_rpc_read_count() > 0
        assert glob.glob(os.path.join(tier, "*.twd"))
        # u0 lives on disk only: its descriptor is Mooncake's local-disk form.
        (d,) = s.get_replica_desc("u0")
        assert d.is_local_disk_replica() and not d.is_memory_replica()
        disk = d.get_disk_descriptor()
        assert disk.object_size == MiB and os.path.exists(disk.file_path), disk
        assert os.path.dirname(disk.file_path) == tier
        newest = s.get_replica_desc("u39")
        assert any(r.is_memory_replica() for r in newest), newest
        assert s.unmount_local_disk_segment() == 0
        assert glob.glob(os.path.join(tier, "*.twd")) == []
        got = {k: s.get(k) for k in keys}
        assert all(v in (b"", value(*keys[k])) for k, v in got.items())
        assert got["u0"] == b"", "a disk-only key goes with the tier"
        assert s.unmount_local_disk_segment() == -101
    finally:
        s.close()
        m.stop()


def test_a_disk_only_object_read_twice_is_promoted_to_memory(tier):
    m = Master("--enable_offload=true", "--offload_on_evict=true", "--promotion_on_hit=true")
    s = MooncakeDistributedStore()
    try:
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MiB, 16 * MiB, "tcp", "", m.address,
                       enable_ssd_offload=True, ssd_offload_path=tier) == 0
        keys = {f"p{i}": [1200 + i, MiB] for i in range(40)}
        assert [s.put(k, value(*v)) for k, v in keys.items()] == [0] * 40
        settled(m)
        before = s.get_offload_rpc_read_count()
        assert s.get("p0") == value(*keys["p0"])
        assert s.get_offload_rpc_read_count() == before + 1, "p0 was read from disk"
        assert metric(m, "promoted_total") == 0, "one read is not enough (threshold 2)"
        assert s.get("p0") == value(*keys["p0"])
        # Promoted in the background, once the owner's memory has room (the first attempt may
        # make it; a later read tries again).
        assert wait_until(lambda: s.get("p0") == value(*keys["p0"])
                          and metric(m, "promoted_total") == 1, 10)
        # Now in memory: the next read does not touch the disk.
        read = s.get_offload_rpc_read_count()
        assert s.get("p0") == value(*keys["p0"])
        assert s.get_offload_rpc_read_count() == read
    finally:
        s.close()
        m.stop()


def test_a_reader_that_cannot_reach_the_disk_gets_the_value_through_its_owner(tier):
    """A reader on another host (here: told not to read other tiers' directories) asks the
    master to promote disk-only values; their owner reads them into memory, and the reader
    reads them over the engine."""
    m = Master("--enable_offload=true", "--offload_on_evict=true")
    owner = Owner(m, tier, segment=16 * MiB)
    far = None
    try:
        assert owner.ready["ready"], owner.ready
        keys = {f"f{i}": [1500 + i, MiB] for i in range(40)}
        assert owner.do(op="put", keys=keys)["codes"] == [0] * 40
        settled(m)
        far = Owner(m, "-", segment=0, env={"TW_STORE_DISK_DIRECT": "0"})
        assert far.ready["ready"], far.ready
        oldest = {k: keys[k] for k in ["f0", "f1", "f2"]}
        got = far.do(op="check", keys=oldest)
        assert got["bad"] == [] and got["disk_reads"] == 0, got
        assert metric(m, "promoted_total") >= 3
    finally:
        if far:
            far.close()
        owner.close()
        m.stop()


def test_dummy_clients_read_and_write_through_a_real_client_with_a_tier(tier):
    """Mooncake's standalone mode: one real client (``tidewire.store_server``, as
    ``mooncake_client --enable_offload``) owns the segment and the tier; a dummy client in
    this process writes 3x the segment and reads every value back, most from disk."""
    m = Master("--enable_offload=true", "--offload_on_evict=true")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    real = subprocess.Popen(
        [sys.executable, "-m", "tidewire.store_server", "--master_server_address", m.address,
         "--port", "0", "--global_segment_size", "16mb", "--enable_offload", "true",
         "--ssd_offload_path", tier],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    d = MooncakeDistributedStore()
    try:
        line = real.stdout.readline()
        assert line, real.stderr.read()[-500:]
        address = json.loads(line)["address"]
        assert d.setup_dummy(16 * MiB, 16 * MiB, address) == 0
        keys = {f"d{i}": [2000 + i, 512 << 10] for i in range(96)}
        assert [d.put(k, value(*v)) for k, v in keys.items()] == [0] * 96
        settled(m)
        assert metric(m, "offload_written_total") > 0
        assert [k for k, v in keys.items() if d.get(k) != value(*v)] == []
        got = d.batch_get_buffer(list(keys)[:8])
        assert [bytes(b) for b in got] == [value(*keys[k]) for k in list(keys)[:8]]
    finally:
        d.close()
        real.send_signal(signal.SIGKILL)
        real.wait(timeout=10)
        m.stop()


_READER = r"""
import sys
from tidewire.store import MooncakeDistributedStore
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 << 20, "tcp", "", sys.argv[1]) == 0
keys = sys.argv[2:]
print("reading", flush=True)
while True:
    s.batch_get_buffer(keys)
"""


def test_a_reader_killed_mid_read_of_disk_objects_changes_nothing(tier):
    m = Master("--enable_offload=true", "--offload_on_evict=true")
    owner = Owner(m, tier, segment=16 * MiB)
    try:
        keys = {f"k{i}": [3000 + i, 2 * MiB] for i in range(32)}
        assert owner.do(op="put", keys=keys)["codes"] == [0] * 32
        settled(m)
        def contents():
            out = {}
            for f in glob.glob(os.path.join(tier, "*.twd")):
                with open(f, "rb") as fh:
                    out[f] = fh.read()
            return out

        before = contents()
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
        oldest = list(keys)[:12]
        for _ in range(3):
            r = subprocess.Popen([sys.executable, "-c", _READER, m.address, *oldest],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                 env=env)
            assert r.stdout.readline().strip() == "reading"
            time.sleep(0.3)
            r.send_signal(signal.SIGKILL)
            r.wait(timeout=10)
        # Reads change no record (the sweep may still append objects it evicts to disk).
        after = contents()
        assert all(after.get(f, b"")[:len(b)] == b for f, b in before.items()), \
            "reads never change the files"
        assert owner.do(op="check", keys=keys)["bad"] == []
        # The keys are removed as usual (the dead readers hold nothing on the files).
        assert wait_until(lambda: owner.do(op="remove", keys=oldest)["codes"] == [0] * 12, 20)
    finally:
        owner.close()
        m.stop()
