"""A real etcd for the tests (``etcd`` from PATH, Debian's etcd-server) on 127.0.0.1 with free
ports, stopped by PID, its data in a temporary directory. (Also used by bench/ha_failover.py,
so it needs nothing beyond the standard library.)"""

import base64
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Etcd:
    def __init__(self):
        if shutil.which("etcd") is None:
            raise RuntimeError("etcd is not installed (Debian: etcd-server)")
        self.dir = tempfile.mkdtemp(prefix="tw-py-etcd-")
        self.port, peer = free_port(), free_port()
        c, p = "http://127.0.0.1:%d" % self.port, "http://127.0.0.1:%d" % peer
        self.log = open(os.path.join(self.dir, "log"), "wb")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "py", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", c, "--advertise-client-urls", c,
             "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
             "--initial-cluster", "py=" + p, "--unsafe-no-fsync", "--log-level=error",
             "--logger=zap"], stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        self.endpoint = "127.0.0.1:%d" % self.port
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen("http://%s/health" % self.endpoint, timeout=1) as r:
                    if b"true" in r.read():
                        return
            except OSError:
                time.sleep(0.05)
        self.close()
        raise RuntimeError("etcd did not start")

    def keys(self):
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        req = urllib.request.Request(
            "http://%s/v3/kv/range" % self.endpoint, method="POST",
            data=json.dumps({"key": b64("mooncake/"), "range_end": b64("mooncake0"),
                             "keys_only": True}).encode())
        with urllib.request.urlopen(req, timeout=5) as r:
            kvs = json.loads(r.read()).get("kvs") or []
        return sorted(base64.b64decode(kv["key"]).decode() for kv in kvs)

    def db_size(self):
        """etcd's database size and the part of it in use, bytes."""
        req = urllib.request.Request("http://%s/v3/maintenance/status" % self.endpoint,
                                     method="POST", data=b"{}")
        with urllib.request.urlopen(req, timeout=10) as r:
            st = json.loads(r.read())
        return int(st.get("dbSize", 0)), int(st.get("dbSizeInUse", 0))

    def get(self, key):
        """The value at ``key`` (str), or None."""
        b64 = lambda s: base64.b64encode(s.encode()).decode()  # noqa: E731
        req = urllib.request.Request("http://%s/v3/kv/range" % self.endpoint, method="POST",
                                     data=json.dumps({"key": b64(key)}).encode())
        with urllib.request.urlopen(req, timeout=5) as r:
            kvs = json.loads(r.read()).get("kvs") or []
        return base64.b64decode(kvs[0]["value"]).decode(errors="replace") if kvs else None

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
