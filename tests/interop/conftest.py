"""Harness for the interop tests: tidewire against the real Mooncake Transfer Engine.

The tidewire side runs in this pytest process through ``tidewire.engine.TransferEngine``
(the Mooncake-compatible class). The Mooncake side runs in a child process driven by
``mooncake_peer.py`` (line-delimited JSON). Both peers expose the same small interface
(``alloc``, ``fill_random``, ``digest``, ``write``, ``batch_read``, ``notify``, ...), so a
test is written once and run in both directions.

Mooncake's listeners bind every address, so the whole run must happen inside a private
network namespace where only ``lo`` exists (``make interop`` does that). Without the
Mooncake wheel or the namespace every test is skipped with a loud reason, unless
``TIDEWIRE_REQUIRE_INTEROP=1`` is set: then they fail.
"""

import ctypes
import ctypes.util
import faulthandler
import hashlib
import json
import os
import random
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PEER_SCRIPT = os.path.join(HERE, "mooncake_peer.py")
META_SCRIPT = os.path.join(HERE, "http_metadata_server.py")
REQUIRE = os.environ.get("TIDEWIRE_REQUIRE_INTEROP") == "1"

# Hard ceiling for the whole run: a hung native call must not hang CI.
SUITE_DEADLINE_S = 240
# Ceiling for one engine call made from a test.
CALL_TIMEOUT_S = 30

KiB = 1024
MiB = 1024 * 1024


# --------------------------------------------------------------------------------------
# Preconditions
# --------------------------------------------------------------------------------------

def _namespace_problem():
    """None when only `lo` exists and 127.0.0.1 works, else why not."""
    try:
        names = sorted(name for _, name in socket.if_nameindex())
    except OSError as e:
        return "cannot list network interfaces: %s" % e
    if names != ["lo"]:
        return ("not inside a private network namespace (interfaces: %s); Mooncake binds "
                "all addresses, run `make interop` (unshare -n)" % ", ".join(names))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 0))
    except OSError as e:
        return "loopback is not up in this namespace (%s); run `ip link set lo up`" % e
    finally:
        s.close()
    return None


def _mooncake_problem():
    """None when `import mooncake.engine` works in this interpreter, else why not."""
    try:
        out = subprocess.run([sys.executable, "-c", "import mooncake.engine"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "cannot run %s: %s" % (sys.executable, e)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["?"])[-1]
        return ("`import mooncake.engine` fails in %s (%s); install the wheel with "
                "scripts/setup_mooncake_venv.sh" % (sys.executable, tail))
    return None


_PRECONDITION = {}


def precondition_problem():
    if "problem" not in _PRECONDITION:
        _PRECONDITION["problem"] = _namespace_problem() or _mooncake_problem()
    return _PRECONDITION["problem"]


def _banner(problem):
    verdict = "FAILING (TIDEWIRE_REQUIRE_INTEROP=1)" if REQUIRE else "SKIPPING"
    return "!!! interop: %s every test: %s !!!" % (verdict, problem)


def pytest_configure(config):
    faulthandler.dump_traceback_later(SUITE_DEADLINE_S, exit=True)


def pytest_unconfigure(config):
    faulthandler.cancel_dump_traceback_later()


def pytest_report_header(config):
    problem = precondition_problem()
    return _banner(problem) if problem else "interop: Mooncake peer available, private netns ok"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    problem = precondition_problem()
    if problem:
        terminalreporter.write_sep("!", "interop tests did not run", red=True, bold=True)
        terminalreporter.write_line(_banner(problem), red=True, bold=True)


@pytest.fixture(scope="session", autouse=True)
def interop_preconditions():
    problem = precondition_problem()
    if problem:
        if REQUIRE:
            pytest.fail(_banner(problem), pytrace=False)
        pytest.skip(_banner(problem))


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------

def bounded(fn, *args, timeout=CALL_TIMEOUT_S, what=None):
    """Runs fn(*args) in a daemon thread; fails the test if it takes longer than timeout."""
    box = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # re-raised in the caller
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        pytest.fail("%s did not return within %ss" % (what or getattr(fn, "__name__", fn),
                                                      timeout))
    if "error" in box:
        raise box["error"]
    return box["value"]


def wait_until(predicate, timeout, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def random_bytes(size, seed):
    """Same bytes as mooncake_peer.py's fill_random."""
    return random.Random(seed).randbytes(size)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def mmap_anon(size):
    addr = _libc.mmap(None, size, 3, 0x22, -1, 0)  # PROT_READ|WRITE, PRIVATE|ANONYMOUS
    if addr is None or addr == ctypes.c_void_p(-1).value:
        raise OSError(ctypes.get_errno(), "mmap(%d) failed" % size)
    return addr


def _die_with_parent():
    """preexec_fn: SIGTERM the child when this process dies (also on a hard abort)."""
    _libc.prctl(1, 15, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGTERM


def child_env(**extra):
    """Environment for child processes: ours minus MC_* settings, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MC_")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [os.path.join(REPO, "python"), env.get("PYTHONPATH", "")] if p)
    env.update({k: str(v) for k, v in extra.items()})
    return env


class PeerError(AssertionError):
    pass


# --------------------------------------------------------------------------------------
# Peers
# --------------------------------------------------------------------------------------

class ProcessPeer:
    """An engine in a child process, driven by mooncake_peer.py (Mooncake by default)."""

    def __init__(self, label, metadata="P2PHANDSHAKE", name=None, impl="mooncake",
                 env=None, start_timeout=45):
        self.label = label
        self.impl = impl
        self.log = tempfile.NamedTemporaryFile(prefix="interop-%s-" % label, suffix=".log",
                                               delete=False)
        args = [sys.executable, PEER_SCRIPT, "--metadata", metadata, "--impl", impl]
        if name:
            args += ["--name", name]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env or child_env(), cwd=REPO,
                                     preexec_fn=_die_with_parent)
        self._buf = b""
        self._next_id = 0
        ready = self._read_reply(start_timeout, "startup")
        if not ready.get("ready"):
            self.close()
            raise PeerError("%s did not start: %s%s" % (label, ready, self.log_tail()))
        self.segment = ready["segment"]
        self.rpc_port = ready["rpc_port"]

    def __repr__(self):
        return "<%s %s>" % (self.label, getattr(self, "segment", "?"))

    def log_tail(self, lines=int(os.environ.get("INTEROP_LOG_LINES", "25"))):
        try:
            with open(self.log.name, "rb") as f:
                text = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n--- %s stderr (last %d lines) ---\n%s" % (self.label, lines,
                                                             "\n".join(text[-lines:]))

    def _read_reply(self, timeout, what):
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerError("%s: no reply to %s within %ss%s"
                                % (self.label, what, timeout, self.log_tail()))
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise PeerError("%s exited (rc=%s) while waiting for %s%s"
                                    % (self.label, self.proc.poll(), what, self.log_tail()))
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, cmd, timeout=CALL_TIMEOUT_S, **fields):
        if self.proc.poll() is not None:
            raise PeerError("%s is not running (rc=%s)%s" % (self.label, self.proc.returncode,
                                                            self.log_tail()))
        self._next_id += 1
        fields.update(cmd=cmd, id=self._next_id)
        self.proc.stdin.write((json.dumps(fields) + "\n").encode())
        self.proc.stdin.flush()
        reply = self._read_reply(timeout, cmd)
        if reply.get("id") != self._next_id:
            raise PeerError("%s: reply out of order: %s" % (self.label, reply))
        if not reply.get("ok"):
            raise PeerError("%s: %s failed: %s%s" % (self.label, cmd, reply, self.log_tail()))
        return reply

    # -- the common peer interface ------------------------------------------------------
    def alloc(self, size, fill=0):
        return self.call("alloc", size=size, fill=fill)["addr"]

    def free(self, addr):
        return self.call("free", addr=addr)["rc"]

    def fill_random(self, addr, size, seed):
        self.call("fill_random", addr=addr, size=size, seed=seed)

    def fill(self, addr, size, value):
        self.call("fill", addr=addr, size=size, value=value)

    def digest(self, addr, size):
        return self.call("digest", addr=addr, size=size)["sha256"]

    def write(self, target, local, remote, length):
        return self.call("write", target=target, local=local, remote=remote,
                         length=length)["rc"]

    def read(self, target, local, remote, length):
        return self.call("read", target=target, local=local, remote=remote,
                         length=length)["rc"]

    def batch_write(self, target, locals_, remotes, lengths):
        return self.call("batch_write", target=target, locals=locals_, remotes=remotes,
                         lengths=lengths)["rc"]

    def batch_read(self, target, locals_, remotes, lengths):
        return self.call("batch_read", target=target, locals=locals_, remotes=remotes,
                         lengths=lengths)["rc"]

    def notify(self, target, name, msg, local, remote, length):
        return self.call("notify", target=target, name=name, msg=msg, local=local,
                         remote=remote, length=length)["rc"]

    def get_notifies(self):
        return [(n["name"], n["msg"]) for n in self.call("get_notifies")["notifies"]]

    def close(self):
        if self.proc.poll() is None:
            try:
                self.call("quit", timeout=15)
            except (PeerError, OSError, ValueError):
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


class TidewirePeer:
    """A tidewire engine in this process, through tidewire.engine.TransferEngine."""

    def __init__(self, label="tidewire", metadata="P2PHANDSHAKE", name="127.0.0.1",
                 env=None):
        import tidewire.engine as twe
        self.label = label
        self.mod = twe
        self.buffers = {}
        saved = {k: os.environ.get(k) for k in (env or {})}
        os.environ.update(env or {})
        try:
            self.engine = twe.TransferEngine()
            rc = bounded(self.engine.initialize, name, metadata, "tcp", "",
                         what="tidewire initialize")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        if rc != 0:
            raise PeerError("tidewire initialize(%r, %r) returned %r" % (name, metadata, rc))
        self.rpc_port = self.engine.get_rpc_port()
        named = getattr(self.engine, "get_segment_name", None)
        if named is not None:
            self.segment = named()
        elif metadata == "P2PHANDSHAKE":
            host = name.rsplit(":", 1)[0] if name.count(":") == 1 else name
            self.segment = "%s:%d" % (host, self.rpc_port)
        else:
            self.segment = name

    def __repr__(self):
        return "<%s %s>" % (self.label, self.segment)

    def log_tail(self):
        return ""

    def _check_local(self, addr, size):
        for base, length in self.buffers.items():
            if base <= addr and addr + size <= base + length:
                return
        raise PeerError("[0x%x, +%d) is not inside a tidewire test buffer" % (addr, size))

    def alloc(self, size, fill=0):
        addr = mmap_anon(size)
        ctypes.memset(addr, fill, size)
        rc = self.engine.register_memory(addr, size)
        if rc != 0:
            _libc.munmap(addr, size)
            raise PeerError("tidewire register_memory(%d) returned %r" % (size, rc))
        self.buffers[addr] = size
        return addr

    def free(self, addr):
        rc = self.engine.unregister_memory(addr)
        _libc.munmap(addr, self.buffers.pop(addr))
        return rc

    def fill_random(self, addr, size, seed):
        self._check_local(addr, size)
        ctypes.memmove(addr, random_bytes(size, seed), size)

    def fill(self, addr, size, value):
        self._check_local(addr, size)
        ctypes.memset(addr, value, size)

    def digest(self, addr, size):
        self._check_local(addr, size)
        return sha256(ctypes.string_at(addr, size))

    def write(self, target, local, remote, length):
        self._check_local(local, length)
        return bounded(self.engine.transfer_sync_write, target, local, remote, length)

    def read(self, target, local, remote, length):
        self._check_local(local, length)
        return bounded(self.engine.transfer_sync_read, target, local, remote, length)

    def batch_write(self, target, locals_, remotes, lengths):
        for a, n in zip(locals_, lengths):
            self._check_local(a, n)
        return bounded(self.engine.batch_transfer_sync_write, target, list(locals_),
                       list(remotes), list(lengths))

    def batch_read(self, target, locals_, remotes, lengths):
        for a, n in zip(locals_, lengths):
            self._check_local(a, n)
        return bounded(self.engine.batch_transfer_sync_read, target, list(locals_),
                       list(remotes), list(lengths))

    def notify(self, target, name, msg, local, remote, length):
        self._check_local(local, length)
        notify = self.mod.TransferNotify(name, msg)
        return bounded(self.engine.transfer_sync, target, local, remote, length,
                       self.mod.TransferOpcode.Write, notify)

    def get_notifies(self):
        return [(n.name, n.msg) for n in self.engine.get_notifies()]

    def close(self):
        """Unregisters and unmaps the test buffers, then drops the engine."""
        engine = getattr(self, "engine", None)
        if engine is None:
            return
        for addr in list(self.buffers):
            engine.unregister_memory(addr)
        self.engine = None
        closer = getattr(engine, "close", None) or getattr(engine, "shutdown", None)
        if closer is not None:
            bounded(closer, what="tidewire engine close")
        del engine
        import gc
        gc.collect()
        # Unmap only after the engine is gone: a late server thread must not touch freed pages.
        for addr, size in list(self.buffers.items()):
            _libc.munmap(addr, size)
        self.buffers.clear()


# --------------------------------------------------------------------------------------
# Verified transfers
# --------------------------------------------------------------------------------------

BACKGROUND = 0xA5


class Side:
    """One engine plus one registered buffer of it."""

    def __init__(self, peer, size):
        self.peer = peer
        self.size = size
        self.base = peer.alloc(size, BACKGROUND)

    def free(self):
        self.peer.free(self.base)


def metadata_key(kind, name):
    """Mooncake's metadata key for segment `name`: kind is "ram" or "rpc_meta"."""
    return "mooncake/%s/%s" % (kind, name)


class Closers:
    """Things opened one after another (`opened` returns what it is given), closed in reverse
    order by `close`, errors ignored. A constructor that fails part way calls `close` itself."""

    def __init__(self):
        self.closers = []

    def opened(self, thing):
        self.closers.append(thing.close)
        return thing

    def close(self):
        for close in reversed(self.closers):
            try:
                close()
            except Exception:
                pass
        self.closers = []


def verified_transfer(initiator, target, op, entries, seed, batch=None, settle_s=0.0,
                      attempts=1):
    """Runs a READ or WRITE (one request, or a batch) and checks every destination byte.

    initiator, target: Side. entries: (local_offset, remote_offset, length) relative to the
    two buffers. The source span is filled with random bytes and the destination span with
    BACKGROUND; afterwards the destination span (including the gaps and a guard band around
    the pieces) must equal BACKGROUND with exactly the source pieces copied in.
    settle_s: a v1 WRITE completes at the initiator once its bytes are sent (no ack), so the
    destination is polled for up to settle_s seconds; leave it 0 for v2, where completion
    means the bytes have landed. attempts: tries of the transfer call while it returns -1
    (for the Mooncake initiator's per-peer failure back-off, see test_rejections.py).
    Returns the seconds the successful transfer call took.
    """
    assert op in ("read", "write")
    if batch is None:
        batch = len(entries) > 1
    src, dst = (initiator, target) if op == "write" else (target, initiator)
    src_idx, dst_idx = (0, 1) if op == "write" else (1, 0)
    guard = 4 * KiB

    def span(side, idx):
        lo = max(0, min(e[idx] for e in entries) - guard)
        hi = min(side.size, max(e[idx] + e[2] for e in entries) + guard)
        return lo, hi

    s_lo, s_hi = span(src, src_idx)
    d_lo, d_hi = span(dst, dst_idx)
    src.peer.fill_random(src.base + s_lo, s_hi - s_lo, seed)
    dst.peer.fill(dst.base + d_lo, d_hi - d_lo, BACKGROUND)
    source = random_bytes(s_hi - s_lo, seed)
    expected = bytearray([BACKGROUND]) * (d_hi - d_lo)
    for e in entries:
        so, do, n = e[src_idx] - s_lo, e[dst_idx] - d_lo, e[2]
        expected[do:do + n] = source[so:so + n]

    locals_ = [initiator.base + e[0] for e in entries]
    remotes = [target.base + e[1] for e in entries]
    lengths = [e[2] for e in entries]
    for attempt in range(attempts):
        if attempt:
            time.sleep(0.3)
        t0 = time.monotonic()
        if batch:
            fn = initiator.peer.batch_write if op == "write" else initiator.peer.batch_read
            rc = fn(target.peer.segment, locals_, remotes, lengths)
        else:
            fn = initiator.peer.write if op == "write" else initiator.peer.read
            rc = fn(target.peer.segment, locals_[0], remotes[0], lengths[0])
        elapsed = time.monotonic() - t0
        if rc == 0:
            break
    assert rc == 0, "%s %s -> %s (%d entries, %d bytes) returned %r%s%s" % (
        op, initiator.peer, target.peer, len(entries), sum(lengths), rc,
        initiator.peer.log_tail(), target.peer.log_tail())
    want = sha256(expected)
    got = dst.peer.digest(dst.base + d_lo, d_hi - d_lo)
    if got != want and settle_s > 0:
        got = wait_until(lambda: (dst.peer.digest(dst.base + d_lo, d_hi - d_lo) == want
                                  and want), settle_s, 0.02) or got
    if got != want:
        pytest.fail("%s %s -> %s: destination bytes differ from the source (%d entries, "
                    "%d bytes)" % (op, initiator.peer, target.peer, len(entries),
                                   sum(lengths)))
    return elapsed


# --------------------------------------------------------------------------------------
# Metadata servers
# --------------------------------------------------------------------------------------

class MetadataServer:
    """http_metadata_server.py (ours, with GET /keys) or the wheel's aiohttp server."""

    def __init__(self, kind="ours", start_timeout=30):
        self.kind = kind
        self.log = tempfile.NamedTemporaryFile(prefix="interop-meta-", suffix=".log",
                                               delete=False)
        if kind == "ours":
            args = [sys.executable, META_SCRIPT, "--port", "0", "--exit-on-stdin-eof"]
        else:
            self.port = free_port()
            args = [sys.executable, "-m", "mooncake.http_metadata_server",
                    "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=child_env(), cwd=REPO,
                                     preexec_fn=_die_with_parent)
        if kind == "ours":
            fd = self.proc.stdout.fileno()
            ready, _, _ = select.select([fd], [], [], start_timeout)
            line = os.read(fd, 4096) if ready else b""
            if not line:
                self.close()
                raise PeerError("metadata server did not start")
            self.port = json.loads(line.split(b"\n")[0])["port"]
        self.url = "http://127.0.0.1:%d/metadata" % self.port
        if not wait_until(self._answers, start_timeout, 0.05):
            self.close()
            raise PeerError("%s metadata server does not answer on %s" % (kind, self.url))

    def _answers(self):
        try:
            self.get("tidewire-interop-probe")
        except OSError:
            return False
        return True

    def _request(self, method, url, body=None):
        req = urllib.request.Request(url, data=body, method=method)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def get(self, key):
        """The stored bytes, or None (404)."""
        status, body = self._request("GET", self.url + "?key=" + urllib.request.quote(key))
        if status == 404:
            return None
        assert status == 200, "GET %s -> %d %r" % (key, status, body)
        return body

    def put(self, key, body):
        status, reply = self._request("PUT", self.url + "?key=" + urllib.request.quote(key),
                                      body)
        assert status == 200, "PUT %s -> %d %r" % (key, status, reply)

    def keys(self):
        assert self.kind == "ours", "only our server lists keys"
        status, body = self._request("GET", "http://127.0.0.1:%d/keys" % self.port)
        assert status == 200
        return json.loads(body)

    def close(self):
        if self.proc.poll() is None:
            if self.kind == "ours":
                try:
                    self.proc.stdin.close()
                except OSError:
                    pass
            else:
                self.proc.terminate()  # the wheel's server stops on SIGTERM
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


class EtcdServer:
    """A throwaway single-member etcd (``etcd`` from PATH) on 127.0.0.1 with free ports and a
    temp data dir; keys read and written through its v3 JSON gateway."""

    def __init__(self, start_timeout=20):
        import shutil
        self.dir = tempfile.mkdtemp(prefix="interop-etcd-")
        self.port, peer = free_port(), free_port()
        client_url, peer_url = ("http://127.0.0.1:%d" % p for p in (self.port, peer))
        self.log = open(os.path.join(self.dir, "etcd.log"), "wb")
        args = ["etcd", "--name", "tw", "--data-dir", os.path.join(self.dir, "data"),
                "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", "tw=" + peer_url, "--unsafe-no-fsync",
                "--logger=zap", "--log-level=error"]
        if shutil.which("etcd") is None:
            raise PeerError("etcd is not installed (Debian: etcd-server)")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, preexec_fn=_die_with_parent)
        self.endpoint = "127.0.0.1:%d" % self.port
        self.url = "etcd://" + self.endpoint
        if not wait_until(self._healthy, start_timeout, 0.05):
            self.close()
            raise PeerError("etcd did not become healthy on %s" % self.endpoint)

    def _healthy(self):
        try:
            with urllib.request.urlopen("http://%s/health" % self.endpoint, timeout=2) as r:
                return b"true" in r.read()
        except OSError:
            return False

    def _call(self, path, body):
        req = urllib.request.Request("http://%s/v3/%s" % (self.endpoint, path),
                                     data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())

    @staticmethod
    def _b64(text):
        import base64
        return base64.b64encode(text.encode()).decode()

    def kv(self, key):
        """The key's kv object (value decoded, lease as int), or None."""
        import base64
        kvs = self._call("kv/range", {"key": self._b64(key)}).get("kvs") or []
        if not kvs:
            return None
        kv = kvs[0]
        return {"value": base64.b64decode(kv.get("value", "")),
                "lease": int(kv.get("lease", 0))}

    def get(self, key):
        kv = self.kv(key)
        return None if kv is None else kv["value"]

    def keys(self, prefix="mooncake/"):
        import base64
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        reply = self._call("kv/range", {"key": self._b64(prefix), "range_end": self._b64(end),
                                        "keys_only": True})
        return sorted(base64.b64decode(kv["key"]).decode() for kv in reply.get("kvs") or [])

    def close(self):
        import shutil
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------------------
# A recording TCP proxy, to see the data protocol on the wire
# --------------------------------------------------------------------------------------

STATUS_MAGIC = 0x4D435456


class RecordingProxy:
    """Forwards 127.0.0.1:port to an upstream port and records both byte streams of every
    connection. Used by pointing a published tcp_data_port at it."""

    def __init__(self, upstream_port):
        self.upstream = ("127.0.0.1", upstream_port)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []  # [{"c2s": bytearray, "s2c": bytearray, "done": Event x2}]
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            rec = {"c2s": bytearray(), "s2c": bytearray(),
                   "done": [threading.Event(), threading.Event()]}
            with self.lock:
                self.conns.append(rec)
            threading.Thread(target=self._pump, args=(client, server, rec["c2s"],
                                                      rec["done"][0]), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, rec["s2c"],
                                                      rec["done"][1]), daemon=True).start()

    @staticmethod
    def _pump(src, dst, log, done):
        try:
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                log += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
                try:
                    s.shutdown(how)
                except OSError:
                    pass
            done.set()

    def snapshot(self):
        with self.lock:
            return [(bytes(c["c2s"]), bytes(c["s2c"])) for c in self.conns]

    def close(self):
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


def parse_data_streams(c2s, s2c):
    """Decodes one data connection of the Mooncake TCP protocol.

    Returns (requests, trailing) where each request is a dict with opcode (0/1), v2 (flag),
    size, addr and status (None for v1, else the low 32 bits of the status frame); trailing
    is a list of problems found. Stops after a rejected request (the server closes then).
    """
    reqs, problems = [], []
    i = j = 0
    while i < len(c2s):
        if len(c2s) - i < 24:
            problems.append("truncated header (%d bytes)" % (len(c2s) - i))
            break
        size, addr = struct.unpack_from("<QQ", c2s, i)
        raw_op = c2s[i + 16]
        i += 24
        v2 = bool(raw_op & 0x80)
        op = raw_op & 0x7F
        if op not in (0, 1):
            problems.append("unknown opcode byte 0x%02x" % raw_op)
        req = {"opcode": op, "v2": v2, "size": size, "addr": addr, "status": None}
        reqs.append(req)
        if op == 1:
            i += size  # the payload follows the header (a rejected one may be cut short)
        if v2:
            if len(s2c) - j < 8:
                problems.append("missing status frame for request %d" % (len(reqs) - 1))
                break
            (frame,) = struct.unpack_from("<Q", s2c, j)
            j += 8
            if frame >> 32 != STATUS_MAGIC:
                problems.append("bad status frame %016x" % frame)
                break
            req["status"] = frame & 0xFFFFFFFF
            if req["status"] != 0:
                break
        if op == 0:
            j += size
    if j < len(s2c) and not (reqs and reqs[-1]["status"]):
        problems.append("%d unexplained bytes from the server" % (len(s2c) - j))
    return reqs, problems


# --------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------

@pytest.fixture
def cleanup():
    """Collects close() callables; runs them in reverse order after the test."""
    items = []
    yield items.append
    errors = []
    for close in reversed(items):
        try:
            close()
        except Exception as e:  # keep closing the rest
            errors.append(e)
    if errors:
        raise errors[0]


@pytest.fixture(scope="module")
def module_cleanup():
    items = []
    yield items.append
    for close in reversed(items):
        try:
            close()
        except Exception:
            pass


@pytest.fixture(scope="module")
def mooncake_p2p(module_cleanup):
    peer = ProcessPeer("mooncake")
    module_cleanup(peer.close)
    return peer


@pytest.fixture(scope="module")
def tidewire_p2p(module_cleanup):
    peer = TidewirePeer("tidewire")
    module_cleanup(peer.close)
    return peer
