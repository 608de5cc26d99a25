"""vLLM's own MooncakeStoreConnector worker (vllm 0.33.0, ``MooncakeStoreWorker`` unchanged) on
tidewire's store, and on the real Mooncake store as the control.

``vllm_driver.py`` (run under the serving environment's python) builds the engine's pieces with
vLLM's code (``VllmConfig``, a single-rank world on gloo, the KV cache plan and CPU KV tensors,
the store config file named by ``MOONCAKE_CONFIG_PATH``), starts a ``MooncakeStoreWorker`` with
its real send/receive threads and ``LookupKeyServer``, and looks up through a
``LookupKeyClient`` over ZMQ. A writer process saves 3 rounds of 4 requests x 64 blocks of 16
tokens (8 layers, one 32 KiB piece per layer: ``batch_put_from_multi_buffers`` of 256 keys x 8
pieces, 64 MiB a round), looks them up (``batch_is_exist``), checks misses, a shared prefix and
vLLM's dedup on a second save; a reader process (its own segment, its own KV tensors, other
block ids) loads every round (``batch_get_into_multi_buffers``) and compares every byte of its
KV cache, loads a request whose last blocks were never saved (exactly those blocks must come
back as load errors, untouched), loads with ``VLLM_MOONCAKE_STORE_TIER_LOG=1``
(``batch_get_replica_desc``), and resets through the LookupKey channel
(``remove_all(force=True)``): every lookup, ``batch_is_exist`` and the master's ``/get_all_keys``
must then report nothing, seen from the reader and from the writer.

Stand-in: ``wait_for_save`` records a ``torch.cuda.Event``; the driver puts the same requests on
the worker's send thread with ``current_event = None`` (CPU tensors, nothing to fence).

The Mooncake control runs the same drivers with the real wheel and ``mooncake_master`` inside a
private network namespace (``unshare -n``: Mooncake's listeners bind every address). A check
that Mooncake itself fails is printed and the test is marked xfail with the exact reasons.

The drivers need ``.venv-serving`` (vllm 0.33.0, the Mooncake wheel, and
``requirements-vllm.txt``); ``TIDEWIRE_SERVING_PYTHON`` may name another interpreter. Without it
the tests are skipped with the reason, unless ``TIDEWIRE_REQUIRE_SERVING=1``, which makes them
fail instead.

    python test_vllm.py --run tidewire|mooncake   # one pair by hand, the result as JSON
"""

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

import pytest  # noqa: E402

from conftest import REPO  # noqa: E402
from serving_util import serving_test_deadline  # noqa: E402,F401 (autouse)
from store_util import MASTER_BIN, Master  # noqa: E402

DRIVER = os.path.join(HERE, "vllm_driver.py")
SERVING_PYTHON = (os.environ.get("TIDEWIRE_SERVING_PYTHON")
                  or os.path.join(REPO, ".venv-serving", "bin", "python"))
REQUIRE = os.environ.get("TIDEWIRE_REQUIRE_SERVING") == "1"
STEP_TIMEOUT_S = 300  # a vLLM import alone takes ~25 s on this machine's two cores
ROUNDS = 3


def _serving_ready():
    """Cheap: the packages are there at the right versions (importing vLLM takes ~25 s; a
    broken import chain shows as the driver's error instead)."""
    if not os.path.exists(SERVING_PYTHON):
        return f"no serving environment at {SERVING_PYTHON}"
    probe = subprocess.run(
        [SERVING_PYTHON, "-c",
         "import importlib.metadata as m, importlib.util as u\n"
         "missing = [n for n in ('vllm', 'mooncake', 'torch', 'zmq') if u.find_spec(n) is None]\n"
         "print(missing or m.version('vllm'))"],
        capture_output=True, text=True, timeout=120)
    got = probe.stdout.strip()
    if probe.returncode != 0 or got != "0.33.0":
        return (f"{SERVING_PYTHON} has no vllm 0.33.0 with its MooncakeStoreConnector "
                f"dependencies: {got or probe.stderr.strip()[-300:]}")
    return None


def _netns_ready():
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return "the Mooncake control needs root, unshare and ip (a private network namespace)"
    return None


# (Not in script mode: the pytest process has already probed the environment.)
_REASON = None if __name__ == "__main__" else _serving_ready()
if _REASON is not None and REQUIRE:
    raise RuntimeError(f"TIDEWIRE_REQUIRE_SERVING=1 but {_REASON}")
pytestmark = [
    pytest.mark.skipif(not os.path.exists(MASTER_BIN), reason="build tidewire-master first"),
    pytest.mark.skipif(_REASON is not None, reason=_REASON or ""),
]


# ------------------------------------------------------------------------------------------
# Running a writer and a reader
# ------------------------------------------------------------------------------------------
class Driver:
    """One vllm_driver.py process; its JSON lines arrive on a queue."""

    def __init__(self, store, master, metrics_port, role, extra=()):
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # the driver sets its own path (shim first for tidewire)
        self.role = role
        self.proc = subprocess.Popen(
            [SERVING_PYTHON, DRIVER, "--store", store, "--master", master,
             "--metrics-port", str(metrics_port), *extra, role],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env)
        self.lines, self.err, self.q = [], [], queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                msg = {"noise": line.rstrip()}
            self.q.put(msg)
        self.q.put(None)

    def until(self, key, timeout=STEP_TIMEOUT_S):
        """Collects lines until one has ``key`` and returns it; with ``key`` None, until the
        process ends. None (and the reason recorded) if it ended or fell silent first."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.q.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                self.lines.append({"error": f"{self.role} silent for {timeout} s"})
                return None
            if msg is None:
                self.q.put(None)  # stays ended for later calls
                self.proc.wait(timeout=30)
                said = any("error" in m for m in self.lines)
                if not said and (key is not None or self.proc.returncode != 0):
                    self.lines.append({"error": f"{self.role} exited with "
                                                f"{self.proc.returncode}"
                                                + (f" before {key!r}" if key else "")})
                return None
            self.lines.append(msg)
            if key is not None and key in msg:
                return msg
            if "error" in msg:  # the driver's last word
                self.until(None, 60)
                return None

    def send(self, text):
        try:
            self.proc.stdin.write(text)
            self.proc.stdin.flush()
        except OSError:
            pass

    def finish(self, timeout=STEP_TIMEOUT_S):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        if self.until("closed", timeout) is not None:
            self.until(None, 60)

    def failures(self):
        out, crashed = [], False
        for msg in self.lines:
            if "error" not in msg:
                continue
            listed = msg.get("failures") or []
            out += [f"{self.role} {f}" for f in listed]
            if msg["error"] != "; ".join(listed):  # not only failed checks: an exception
                out.append(f"{self.role}: {msg['error']}")
                crashed = True
        if crashed:
            out.append(f"{self.role} stderr: {''.join(self.err)[-1500:]}")
        return out

    def steps(self, name):
        return [m for m in self.lines if m.get("step") == name]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def run_pair(store, master, metrics_port, extra=(), after_written=None):
    """Writer, then reader, then the writer's view after the reset. Returns the result.
    ``extra`` goes to both drivers' command lines; ``after_written()`` runs once the writer has
    saved everything, before the reader starts."""
    writer = reader = None
    try:
        writer = Driver(store, master, metrics_port, "writer", extra)
        meta = writer.until("meta")
        if meta is not None and after_written:
            after_written()
        if meta is not None:
            reader = Driver(store, master, metrics_port, "reader", extra)
            reader.send(json.dumps({"meta": meta["meta"]}) + "\n")
            reader.until("time")
            reader.finish()
            writer.send("after-reset\n")
        writer.finish()
    finally:
        for d in (reader, writer):
            if d:
                d.kill()
    result = {"store": store, "failures": [], "time": {}, "writer": writer.lines,
              "reader": reader.lines if reader else []}
    for d in (writer, reader):
        if d is None:
            continue
        result["failures"] += d.failures()
        for m in d.lines:
            if "time" in m:
                result["time"].update({f"{d.role}_{k}": v for k, v in m["time"].items()
                                       if k != "role"})
    return result


def summary(result):
    t = result["time"]
    keys = t.get("writer_keys")
    mib = (t.get("writer_bytes") or 0) / (1 << 20)
    return (f"vLLM MooncakeStoreWorker on {result['store']}: {keys} keys x 8 pieces, "
            f"{mib:.0f} MiB; save {t.get('writer_save_ms')} ms, lookup "
            f"{t.get('writer_lookup_ms')} ms (reader {t.get('reader_lookup_ms')} ms), load "
            f"{t.get('reader_load_ms')} ms (medians of {ROUNDS} rounds)")


def run_tidewire():
    m = Master()
    try:
        return run_pair("tidewire", m.address, m.metrics_port)
    finally:
        m.stop()


def run_mooncake_here():
    """Inside the private network namespace: mooncake_master and the two drivers."""
    from store_stress import MooncakeMaster

    m = MooncakeMaster()
    try:
        return run_pair("mooncake", m.address, m.metrics_port)
    finally:
        m.stop()


def run_mooncake():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([TESTS, os.path.join(REPO, "python")])
    # store_stress finds mooncake_master beside this interpreter, else on PATH: the serving
    # environment's (the wheel the drivers use) is the fallback.
    env["PATH"] = os.pathsep.join([env.get("PATH", ""), os.path.dirname(SERVING_PYTHON)])
    cmd = ["unshare", "-n", "--", "bash", "-c",
           'ip link set lo up && exec "$0" "$1" --inside-netns', sys.executable, __file__]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=3 * STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # its own session: the master and both drivers
        out, err = p.communicate()
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"store": "mooncake", "time": {}, "writer": [], "reader": [],
                "failures": [f"the namespace run exited {p.returncode}: "
                             f"{(err or out)[-2000:]}"]}
    return json.loads(lines[-1])


# ------------------------------------------------------------------------------------------
# The tests
# ------------------------------------------------------------------------------------------
def check_shape(result):
    """What both stores must show when no check failed."""
    w = {m.get("step") for m in result["writer"]}
    r = {m.get("step") for m in result["reader"]}
    assert {"setup", "save", "lookup", "miss", "dedup", "after_reset"} <= w, sorted(w - {None})
    assert {"setup", "load", "load_checked", "load_miss", "tier_log", "reset"} <= r, \
        sorted(r - {None})
    setup = next(m for m in result["writer"] if m.get("step") == "setup")
    assert setup["store"] == f"{'tidewire' if result['store'] == 'tidewire' else 'mooncake'}" \
        ".store", setup
    assert setup["pieces"] == 8 and setup["layout"] == "LBNHC", setup
    checked = [m for m in result["reader"] if m.get("step") == "load_checked"]
    assert len(checked) == ROUNDS and all(m["bytes_checked"] == 64 << 20 for m in checked)
    saves = [m for m in result["writer"] if m.get("step") == "save" and "ms" in m]
    assert len(saves) == ROUNDS and all(m["keys"] == 256 for m in saves)


def test_vllm_store_worker_on_tidewire():
    result = run_tidewire()
    print(summary(result))
    print(json.dumps(result["time"]))
    assert not result["failures"], "\n".join(result["failures"])
    check_shape(result)


@pytest.mark.skipif(_netns_ready() is not None, reason=_netns_ready() or "")
def test_vllm_store_worker_on_mooncake_control():
    result = run_mooncake()
    print(summary(result))
    print(json.dumps(result["time"]))
    if result["failures"]:
        for f in result["failures"]:
            print("MOONCAKE CONTROL FAILED:", f)
        pytest.xfail("Mooncake itself fails: " + " | ".join(result["failures"])[:3000])
    check_shape(result)


if __name__ == "__main__":
    if sys.argv[1:] == ["--inside-netns"]:
        print(json.dumps(run_mooncake_here()), flush=True)
    elif sys.argv[1:2] == ["--run"] and sys.argv[2:] in (["tidewire"], ["mooncake"]):
        res = run_tidewire() if sys.argv[2] == "tidewire" else run_mooncake()
        print(json.dumps(res, indent=1))
        print(summary(res))
        sys.exit(1 if res["failures"] else 0)
    else:
        sys.exit(__doc__)
