"""A transfer target in its own process, for the two-process tests.

    python peer_target.py core|compat SIZE

Starts an engine (pythonic API or the Mooncake-compatible class), registers SIZE bytes filled
with a known pattern, prints one JSON line {"name", "addr", "size", "pid"}, then answers
commands on stdin, one line each:

    sha OFFSET LENGTH   -> sha256 hex of that part of the buffer
    notes               -> JSON list of [name, msg] received so far
    quit                -> exit
"""

import ctypes
import hashlib
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pattern(n, seed=0):
    """Deterministic, non-periodic bytes (the same in every process)."""
    return random.Random(seed).randbytes(n)


def main():
    api, size = sys.argv[1], int(sys.argv[2])
    if api == "core":
        import tidewire

        engine = tidewire.Engine()
        buf = bytearray(pattern(size, seed=4))
        reg = engine.register(buf)
        addr, name = reg.addr, engine.name

        def notes():
            return [list(n) for n in engine.take_notifications()]
    else:
        from tidewire.engine import TransferEngine

        engine = TransferEngine()
        if engine.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "") != 0:
            raise SystemExit("initialize failed")
        addr = engine.allocate_managed_buffer(size)
        engine.write_bytes_to_buffer(addr, pattern(size, seed=4), size)
        name = engine.get_segment_name()

        def notes():
            return [[n.name, n.msg] for n in engine.get_notifies()]

    print(json.dumps({"name": name, "addr": addr, "size": size, "pid": os.getpid()}),
          flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "sha":
            off, n = int(cmd[1]), int(cmd[2])
            print(hashlib.sha256(ctypes.string_at(addr + off, n)).hexdigest(), flush=True)
        elif cmd[0] == "notes":
            print(json.dumps(notes()), flush=True)
        elif cmd[0] == "quit":
            break
    engine.close()


if __name__ == "__main__":
    main()
