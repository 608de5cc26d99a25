"""Segments mounted at run time (``allocate_and_mount_segment``, ``mount_segment``,
``unmount_segment``, ``unmount_and_free_segment``): placement moves to a new segment at once,
other clients read from it, and unmounting keeps every object that has another replica."""

import os

from store_util import Master, connect

MiB = 1 << 20


def test_a_segment_mounted_at_run_time_takes_objects_and_serves_readers(tmp_path):
    m = Master()
    owner = connect(m, segment=0)  # no segment of its own at setup
    reader = connect(m, segment=0)
    try:
        assert owner.put("none", b"x") != 0, "no segment anywhere: nowhere to put"
        seg = owner.allocate_and_mount_segment(16 * MiB)
        assert seg["ret"] == 0 and seg["allocated_size"] == 16 * MiB, seg
        vals = {f"a{i}": os.urandom(100_000 + i) for i in range(20)}
        assert [owner.put(k, v) for k, v in vals.items()] == [0] * 20
        assert all(reader.get(k) == v for k, v in vals.items())
        # A file-backed segment too.
        path = tmp_path / "seg.bin"
        with open(path, "wb") as f:
            f.truncate(8 * MiB)
        fseg = owner.mount_segment(str(path), 8 * MiB)
        assert fseg["ret"] == 0, fseg
        # Two replicas each, on the two segments.
        from tidewire.store import ReplicateConfig
        cfg = ReplicateConfig()
        cfg.replica_num = 2
        twice = {f"b{i}": os.urandom(50_000) for i in range(10)}
        assert [owner.put(k, v, cfg) for k, v in twice.items()] == [0] * 10
        assert all(len(owner.get_replica_desc(k)) == 2 for k in twice)
        # Unmounting the allocated segment keeps what has another replica, drops the rest.
        assert owner.unmount_and_free_segment(seg["segment_ids"]) == 0
        assert all(reader.get(k) == v for k, v in twice.items())
        assert all(reader.get(k) == b"" for k in vals)
        assert owner.unmount_segment(fseg["segment_ids"]) == 0
        assert all(reader.get(k) == b"" for k in twice)
        assert owner.unmount_segment(fseg["segment_ids"]) == -1
    finally:
        reader.close()
        owner.close()
        m.stop()
