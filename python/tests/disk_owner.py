"""A Store client process that owns a memory segment and a disk tier, for the disk-tier tests.

Usage: disk_owner.py MASTER SEGMENT_BYTES TIER_DIR (``-``: no tier, a plain client); then one
JSON command per stdin line:
``{"op": "put", "keys": {key: [seed, len]}}`` (upserts), ``{"op": "remove", "keys": [...]}``,
``{"op": "check", "keys": {key: [seed, len]}}`` (reads back: the keys whose bytes differ).
Prints one JSON line when ready and one per command. Killed by the tests with SIGKILL."""

import json
import random
import sys

from tidewire.store import MooncakeDistributedStore


def value(seed, n):
    return random.Random(seed).randbytes(n)


def main():
    master, segment, tier = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    s = MooncakeDistributedStore()
    disk = {} if tier == "-" else {"enable_ssd_offload": True, "ssd_offload_path": tier}
    try:
        rc = s.setup("127.0.0.1", "P2PHANDSHAKE", segment, 16 << 20, "tcp", "", master, **disk)
    except ValueError as e:
        print(json.dumps({"ready": False, "error": str(e)}), flush=True)
        return
    print(json.dumps({"ready": rc == 0, "rc": rc}), flush=True)
    if rc != 0:
        return
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "put":
            codes = [s.upsert(k, value(*spec)) for k, spec in cmd["keys"].items()]
            print(json.dumps({"codes": codes}), flush=True)
        elif cmd["op"] == "remove":
            print(json.dumps({"codes": [s.remove(k, True) for k in cmd["keys"]]}), flush=True)
        elif cmd["op"] == "check":
            bad = [k for k, spec in cmd["keys"].items() if s.get(k) != value(*spec)]
            print(json.dumps({"bad": bad, "disk_reads": s.get_offload_rpc_read_count()}),
                  flush=True)
    s.close()


if __name__ == "__main__":
    main()
