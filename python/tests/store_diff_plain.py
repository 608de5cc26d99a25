"""Runs one call sequence of the Store methods that need no torch (put sessions and ranged
puts, the disk-tier methods on a client without a tier) on one target and prints every
result as one JSON line, so test_store_differential.py compares Mooncake's wheel and tidewire
call by call::

    python store_diff_plain.py tidewire|mooncake"""

import ctypes
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def main(target):
    from store_stress_base import Target

    tgt = Target(target)
    m = tgt.master()
    s = tgt.connect(m.address, m.metadata, 64 << 20)
    res = {}
    a = (ctypes.c_char * 4096)(*[bytes([i % 251]) for i in range(4096)])
    b = (ctypes.c_char * 512)(*[b"z"] * 512)
    pa, pb = ctypes.addressof(a), ctypes.addressof(b)
    try:
        s.register_buffer(pa, 4096)
        s.register_buffer(pb, 512)
        res["start"] = s.batch_put_session_start(["s1", "s2", "s3"], [4608, 100, 64])
        res["start.again"] = s.batch_put_session_start(["s1"], [4608])
        res["start.zero"] = s.batch_put_session_start(["z0"], [0])
        res["start.lens"] = s.batch_put_session_start(["x1", "x2"], [10])
        res["start.exists"] = (s.put("old", b"v"), s.batch_put_session_start(["old"], [5]))
        res["hidden"] = (s.is_exist("s1"), s.get("s1"))
        res["ranges"] = s.batch_put_from_multi_buffer_ranges(
            ["s1", "s2"], [[pa, pb], [pa]], [[4096, 512], [100]], [[0, 4096], [0]])
        res["ranges.past_end"] = s.batch_put_from_multi_buffer_ranges(
            ["s1"], [[pa]], [[100]], [[4600]])
        res["ranges.no_session"] = s.batch_put_from_multi_buffer_ranges(
            ["nosuch"], [[pa]], [[10]], [[0]])
        res["ranges.lens"] = s.batch_put_from_multi_buffer_ranges(
            ["s1"], [[pa, pb]], [[10]], [[0]])
        res["ranges.outer"] = s.batch_put_from_multi_buffer_ranges(
            ["s1", "s2"], [[pa]], [[10]], [[0]])
        res["end"] = s.batch_put_session_end(["s1", "nosuch"])
        res["end.again"] = s.batch_put_session_end(["s1"])
        res["revoke"] = s.batch_put_session_revoke(["s2", "nosuch"])
        res["after"] = (s.get("s1").hex(), s.get("s2"), s.is_exist("s2"))
        res["ranges.after_end"] = s.batch_put_from_multi_buffer_ranges(
            ["s1"], [[pa]], [[10]], [[0]])
        res["restart"] = s.batch_put_session_start(["s2"], [10])
        res["restart.end"] = s.batch_put_session_end(["s2"])
        res["empty_session"] = (s.get("s2").hex(), s.batch_put_session_revoke(["s3"]))
        res["disk.count"] = s.get_offload_rpc_read_count()
        res["init_all.again"] = s.init_all("tcp", "", 16 << 20)
        # Run-time segments (ids differ between the two: compare codes and shapes).
        seg = s.allocate_and_mount_segment(32 << 20)
        res["alloc"] = (seg["ret"], len(seg["segment_ids"]), seg["allocated_size"])
        res["alloc.zero"] = s.allocate_and_mount_segment(0)["ret"]
        res["unmount.wrong_kind"] = s.unmount_segment(seg["segment_ids"])
        res["unmount.free"] = s.unmount_and_free_segment(seg["segment_ids"])
        res["unmount.free.again"] = s.unmount_and_free_segment(seg["segment_ids"])
        res["unmount.bogus"] = (s.unmount_segment(["1-2"]), s.unmount_segment(["nonsense"]))
        path = os.path.join(os.environ.get("DIFF_TMP", "/tmp"), f"seg-{target}-{os.getpid()}")
        with open(path, "wb") as f:
            f.truncate(8 << 20)
        try:
            fs = s.mount_segment(path, 4 << 20, 4096)
            res["file"] = (fs["ret"], len(fs["segment_ids"]))
            res["file.past_end"] = s.mount_segment(path, 8 << 20, 4096)["ret"]
            res["file.unaligned"] = s.mount_segment(path, 4096, 100)["ret"]
            res["file.missing"] = s.mount_segment(path + ".none", 4096)["ret"]
            res["file.unmount"] = s.unmount_segment(fs["segment_ids"])
        finally:
            os.unlink(path)
    finally:
        s.close()
        m.stop()
    print("DIFF-RESULT " + json.dumps(res, default=list), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
