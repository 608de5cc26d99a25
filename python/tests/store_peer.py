"""A Store client process for the tests. Roles:

- ``server``: contributes a segment; idles until stdin closes.
- ``tq``: contributes a segment, runs TransferQueue's workload, reports, then idles.
- ``put``: writes the keys given as ``key=seed:len`` arguments, reports, then idles.

Prints one JSON line when ready (and one per result)."""

import json
import random
import sys

from tidewire.store import MooncakeDistributedStore


def main():
    role, master, metadata, segment = sys.argv[1:5]
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", metadata, int(segment), 64 << 20, "tcp", "", master)
    print(json.dumps({"ready": rc == 0, "rc": rc, "hostname": s.get_hostname()}), flush=True)
    if rc != 0:
        return
    if role == "tq":
        from store_util import tq_workload
        errors = tq_workload(s, sys.argv[5], int(sys.argv[6]))
        print(json.dumps({"errors": errors}), flush=True)
    elif role == "put":
        codes = []
        for arg in sys.argv[5:]:
            key, spec = arg.split("=")
            seed, n = spec.split(":")
            codes.append(s.upsert(key, random.Random(int(seed)).randbytes(int(n))))
        print(json.dumps({"codes": codes}), flush=True)
    for _ in sys.stdin:
        pass
    s.close()


if __name__ == "__main__":
    main()
