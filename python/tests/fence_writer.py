"""A writer in its own process, for the free_managed_buffer race tests.

    python fence_writer.py SEGMENT ADDR LENGTH

Writes LENGTH bytes into ADDR of SEGMENT (Mooncake-compatible API, same-host path by default)
again and again until stdin closes (or 30 s). Prints "READY" after its first successful write
and "DONE ok=N failed=M other=K" at the end (other: return codes that are neither 0 nor -1).
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tidewire.engine import TransferEngine  # noqa: E402


def main():
    seg, addr, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    te = TransferEngine()
    if te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "") != 0:
        raise SystemExit("initialize failed")
    src = te.allocate_managed_buffer(n)
    stop = threading.Event()

    def watch_stdin():
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    ok = failed = other = 0
    seq = 0
    t0 = time.monotonic()
    while not stop.is_set() and time.monotonic() - t0 < 30:
        seq = seq % 255 + 1
        te.write_bytes_to_buffer(src, bytes([seq]) * n, n)
        rc = te.transfer_sync_write(seg, src, addr, n)
        if rc == 0:
            ok += 1
            if ok == 1:
                print("READY", flush=True)
        elif rc == -1:
            failed += 1
            time.sleep(0.02)
        else:
            other += 1
    print(f"DONE ok={ok} failed={failed} other={other}", flush=True)
    te.free_managed_buffer(src, n)
    te.close()


if __name__ == "__main__":
    main()
