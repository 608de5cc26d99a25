"""The tidewire Store from two processes: a holder that contributes memory, and a client that
puts and gets through it (every byte crosses the process boundary through the engine).

    target/release/tidewire-master --rpc_address=127.0.0.1 --rpc_port=50051 &
    python examples/python/store_two_process.py --master 127.0.0.1:50051

Without --master, the example starts a private tidewire-master on a free port and stops it.
"""

import argparse
import json
import os
import subprocess
import sys

from tidewire.store import MooncakeDistributedStore, ReplicateConfig

MiB = 1 << 20


def holder(master):
    """Second process: contributes a 64 MiB segment until stdin closes."""
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 64 * MiB, 0, "tcp", "", master) == 0
    print(s.get_hostname(), flush=True)
    sys.stdin.read()
    s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", help="host:port of a running tidewire-master")
    ap.add_argument("--holder", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.holder:
        return holder(args.master)
    private = None
    if not args.master:
        here = os.path.dirname(os.path.abspath(__file__))
        lib = os.environ.get("TIDEWIRE_LIB", os.path.join(here, "..", "..", "target", "release", "x"))
        binary = os.path.join(os.path.dirname(lib), "tidewire-master")
        private = subprocess.Popen([binary, "--rpc_address=127.0.0.1", "--rpc_port=0",
                                    "--enable_metric_reporting=false"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        args.master = "127.0.0.1:%d" % json.loads(private.stdout.readline())["rpc_port"]
    peer = subprocess.Popen([sys.executable, __file__, "--holder", "--master", args.master],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        peer_host = peer.stdout.readline().strip()
        store = MooncakeDistributedStore()
        # No segment here (0): values live in the holder's memory.
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MiB, "tcp", "", args.master) == 0
        cfg = ReplicateConfig()
        cfg.with_hard_pin = True
        value = b"kv-cache block " * 100_000
        assert store.put("layer0/block7", value, cfg) == 0
        assert store.get("layer0/block7") == value
        assert store.upsert("layer0/block7", b"replaced") == 0
        assert store.get_batch(["layer0/block7", "missing"]) == [b"replaced", b""]
        assert store.remove("layer0/block7", force=True) == 0
        store.close()
        print(f"store_two_process.py: {len(value)} bytes put and read back through {peer_host}")
    finally:
        peer.stdin.close()
        peer.wait(timeout=30)
        if private:
            private.kill()
            private.wait()


if __name__ == "__main__":
    main()
