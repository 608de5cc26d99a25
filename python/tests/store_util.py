"""Helpers for the Store tests: a tidewire-master process, peer client processes, and
TransferQueue's calling pattern as a reusable workload."""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

from conftest import REPO, MBuf
from tidewire.store import MooncakeDistributedStore, ReplicateConfig

MASTER_BIN = os.path.join(REPO, "target", "release", "tidewire-master")
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "store_peer.py")


class Master:
    """A tidewire-master on 127.0.0.1 (free ports), stopped by PID."""

    def __init__(self, *flags, port=0, http=False):
        args = [MASTER_BIN, "--rpc_address=127.0.0.1", f"--rpc_port={port}",
                "--metrics_host=127.0.0.1", "--metrics_port=0"]
        if http:
            args += ["--enable_http_metadata_server=true",
                     "--http_metadata_server_host=127.0.0.1",
                     "--http_metadata_server_port=0"]
        args += list(flags)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("tidewire-master did not start")
        info = json.loads(line)
        self.port = info["rpc_port"]
        self.address = f"127.0.0.1:{self.port}"
        self.metrics_port = info["metrics_port"]
        self.metadata = (f"http://127.0.0.1:{info['http_metadata_port']}/metadata"
                         if http else "P2PHANDSHAKE")

    def metrics(self):
        with socket.create_connection(("127.0.0.1", self.metrics_port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        return data.decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


class Peer:
    """A client process (store_peer.py) holding a segment until told to exit."""

    def __init__(self, master, role="server", segment=256 << 20, *args):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [os.path.join(REPO, "python"), os.path.dirname(PEER)]
            + [p for p in [env.get("PYTHONPATH")] if p])
        self.proc = subprocess.Popen(
            [sys.executable, PEER, role, master.address, master.metadata, str(segment), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=env)
        self.ready = self.read()
        assert self.ready.get("ready"), self.ready

    def read(self, timeout=120):
        result = {}

        def reader():
            line = self.proc.stdout.readline()
            result["v"] = json.loads(line) if line else {"ready": False, "error": "peer exited"}

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        t.join(timeout)
        if "v" not in result:
            self.kill()
            raise TimeoutError("peer did not answer")
        return result["v"]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=20)
            except Exception:
                self.kill()


def connect(master, segment=0, local_buffer=64 << 20):
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", master.metadata, segment, local_buffer, "tcp", "", master.address)
    assert rc == 0, rc
    return s


def values(prefix, n, seed, lo=1, hi=48 << 10):
    rnd = random.Random(seed)
    return {f"{prefix}{i}@field": rnd.randbytes(rnd.randint(lo, hi)) for i in range(n)}


def tq_workload(store, prefix, seed, threads=4, per_thread=400):
    """TransferQueue's pattern on ``store``: ``threads`` threads, each registering one merged
    region and calling batch_upsert_from / batch_get_into on 400 keys; upserts of the same size,
    larger and smaller; forced removal; misses. Returns a list of failures (empty = all good)."""
    hard = ReplicateConfig()
    hard.with_hard_pin = True
    errors = []

    def worker(t):
        vals = values(f"{prefix}t{t}k", per_thread, seed * 100 + t)
        keys = list(vals)
        total = sum(len(v) for v in vals.values())
        src, dst = MBuf(total * 2 + 4096), MBuf(total * 2 + 4096)
        try:
            for b in (src, dst):
                if store.register_buffer(b.addr, b.size) != 0:
                    errors.append("register_buffer failed")
                    return

            def write(current):
                ptrs, sizes, off = [], [], 0
                for k in keys:
                    src.put(off, current[k])
                    ptrs.append(src.addr + off)
                    sizes.append(len(current[k]))
                    off += len(current[k])
                return store.batch_upsert_from(keys, ptrs, sizes, config=hard)

            def check(current, what):
                ptrs, sizes, off = [], [], 0
                for k in keys:
                    ptrs.append(dst.addr + off)
                    sizes.append(len(current[k]))
                    off += len(current[k])
                got = store.batch_get_into(keys, ptrs, sizes)
                for k, p, n, r in zip(keys, ptrs, sizes, got):
                    if r != n:
                        errors.append(f"{what}: {k} read {r}, want {n}")
                        return
                    if dst.get(p - dst.addr, n) != current[k]:
                        errors.append(f"{what}: {k} bytes differ")
                        return

            rc = write(vals)
            if any(rc):
                errors.append(f"first upsert: {sorted(set(rc))}")
                return
            check(vals, "first read")
            rnd = random.Random(seed + t)
            # Same size (in place), then grow, then shrink.
            for what, scale in (("same", 1.0), ("grow", 2.0), ("shrink", 0.25)):
                vals = {k: rnd.randbytes(max(1, int(len(v) * scale))) for k, v in vals.items()}
                rc = write(vals)
                if any(rc):
                    errors.append(f"upsert {what}: {sorted(set(rc))}")
                    return
                check(vals, f"after upsert {what}")
            # Misses and a buffer that is too small.
            miss = store.batch_get_into([f"{prefix}missing{t}"], [dst.addr], [16])
            if miss != [-704]:
                errors.append(f"miss gave {miss}")
            big = max(keys, key=lambda k: len(vals[k]))
            small = store.batch_get_into([big], [dst.addr], [len(vals[big]) - 1])
            if small != [-600]:
                errors.append(f"small buffer gave {small}")
            rm = store.batch_remove(keys, force=True)
            if any(rm):
                errors.append(f"remove gave {sorted(set(rm))}")
            if set(store.batch_remove(keys[:5], force=True)) != {-704}:
                errors.append("second remove is not -704")
        finally:
            for b in (src, dst):
                store.unregister_buffer(b.addr)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(180)
    return errors


def wait_until(pred, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()
