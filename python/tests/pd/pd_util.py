"""The test side of the P/D connector tests (python/tests/pd/test_*_pd.py): finding the serving
environment, running a prefill and a decode driver process and talking to them in JSON lines,
running the Mooncake control inside a private network namespace, and reporting times.

Every driver runs under the serving environment's interpreter (``.venv-serving``, or the one
``TIDEWIRE_SERVING_PYTHON`` names). A test module calls :func:`environment_problem` at import:
with the environment missing it skips with the reason, or fails when
``TIDEWIRE_REQUIRE_SERVING=1``.

Each run is one :class:`Pair` of drivers for one engine (``tidewire``: the shim package first on
the driver's ``sys.path``; ``mooncake``: the real wheel). Every byte crosses TCP on both:
tidewire's same-host shortcut is turned off in the drivers (``TW_SAME_HOST=0``) unless
``TIDEWIRE_PD_SAME_HOST=1`` asks to measure it. The Mooncake run happens in a child of
this test started under ``unshare -n`` (Mooncake's listeners bind every address), which prints
the run's result as its last JSON line; :func:`run_in_netns` collects it.
"""

from __future__ import annotations

import faulthandler
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(TESTS))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)



def _suite_deadline_s() -> float:
    """python/tests/conftest.py's watchdog bound (loaded by path: this folder's own conftest.py
    takes the module name ``conftest`` under pytest)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tidewire_tests_conftest",
                                                  os.path.join(TESTS, "conftest.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return float(module.SUITE_DEADLINE_S)


SUITE_DEADLINE_S = _suite_deadline_s()

SERVING_PYTHON = (os.environ.get("TIDEWIRE_SERVING_PYTHON")
                  or os.path.join(REPO, ".venv-serving", "bin", "python"))
REQUIRE = os.environ.get("TIDEWIRE_REQUIRE_SERVING") == "1"
#: A P/D test's own bound: two driver processes, each importing a serving stack (up to a
#: minute on 2 cores), then their cases, each bounded well below this.
TEST_DEADLINE_S = 900
#: How long one driver step may stay silent (an import of vLLM alone is ~25 s on 2 cores).
STEP_TIMEOUT_S = 300
ENGINES = ("tidewire", "mooncake")


@pytest.fixture(autouse=True)
def pd_test_deadline() -> Iterator[None]:
    """Re-arms the suite watchdog of python/tests/conftest.py with this test's longer bound
    (import it into a test module to use it), and restores the suite's after."""
    faulthandler.dump_traceback_later(TEST_DEADLINE_S, exit=True)
    yield
    faulthandler.dump_traceback_later(SUITE_DEADLINE_S, exit=True)


# ------------------------------------------------------------------------------------------
# The environment
# ------------------------------------------------------------------------------------------
def environment_problem(package: str, version: str, extra_modules: Sequence[str] = ()) -> \
        Optional[str]:
    """Why the serving environment cannot run ``package`` ``version``'s P/D code, or None.

    Cheap: checks that the modules are found and the version matches (the import chain itself
    shows up as a driver's error instead)."""
    if not os.path.exists(SERVING_PYTHON):
        return f"no serving environment at {SERVING_PYTHON} (scripts/setup_serving_venv.sh)"
    wanted = [package, "mooncake", "torch", "zmq", *extra_modules]
    probe = subprocess.run(
        [SERVING_PYTHON, "-c",
         "import importlib.metadata as m, importlib.util as u, sys\n"
         f"missing = [n for n in {wanted!r} if u.find_spec(n) is None]\n"
         f"print(missing or m.version({package!r}))"],
        capture_output=True, text=True, timeout=120)
    got = probe.stdout.strip()
    if probe.returncode != 0 or got != version:
        return (f"{SERVING_PYTHON} lacks {package} {version} or its P/D dependencies: "
                f"{got or probe.stderr.strip()[-300:]}")
    return None


def netns_problem() -> Optional[str]:
    """Why the Mooncake control cannot get a private network namespace, or None."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return "the Mooncake control needs root, unshare and ip (a private network namespace)"
    return None


def require_netns() -> None:
    """For a Mooncake control test: skip (or fail, when the environment is required) without a
    private network namespace."""
    problem = netns_problem()
    if problem is not None:
        if REQUIRE:
            raise AssertionError(problem)
        pytest.skip(problem)


def module_marks(reason: Optional[str]) -> List[Any]:
    """The test module's marks: fail at import when the environment is required and missing,
    otherwise skip saying why."""
    if reason is not None and REQUIRE:
        raise RuntimeError(f"TIDEWIRE_REQUIRE_SERVING=1 but {reason}")
    return [pytest.mark.skipif(reason is not None, reason=reason or "")]


# ------------------------------------------------------------------------------------------
# Driver processes
# ------------------------------------------------------------------------------------------
class Driver:
    """One driver process (``python DRIVER --engine E ROLE``); its JSON lines arrive on a
    queue, its stderr is kept for the report."""

    def __init__(self, script: str, engine: str, role: str, extra_args: Sequence[str] = ()):
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # the driver sets its own path (the shim first for tidewire)
        # Every byte over TCP: tidewire's same-host shortcut (process_vm, shared buffers) stays
        # off unless TIDEWIRE_PD_SAME_HOST=1 asks to measure it.
        env["TW_SAME_HOST"] = "1" if os.environ.get("TIDEWIRE_PD_SAME_HOST") == "1" else "0"
        self.role = role
        self.proc = subprocess.Popen(
            [SERVING_PYTHON, script, "--engine", engine, *extra_args, role],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env)
        self.lines: List[Dict[str, Any]] = []
        self.err: List[str] = []
        self._queue: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                msg = {"noise": line.rstrip()}
            self._queue.put(msg)
        self._queue.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            del self.err[:-400]  # the tail is what a report needs

    def until(self, key: str, timeout: float = STEP_TIMEOUT_S) -> Optional[Dict[str, Any]]:
        """The next line that has ``key``; None when the driver ended, reported an error or fell
        silent for ``timeout`` s first (the reason is recorded in :attr:`lines`)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                msg = self._queue.get(timeout=max(0.1, left))
            except queue.Empty:
                self.lines.append({"error": f"{self.role} silent for {timeout:.0f} s "
                                            f"waiting for {key!r}"})
                self.kill()
                return None
            if msg is None:
                self._queue.put(None)  # stays ended for later calls
                self._reap()
                if not any("error" in m for m in self.lines):
                    self.lines.append({"error": f"{self.role} exited with "
                                                f"{self.proc.returncode} before {key!r}"})
                return None
            self.lines.append(msg)
            if key in msg:
                return msg
            if "error" in msg:
                return None

    def send(self, **command: Any) -> None:
        """Writes one JSON command line to the driver's stdin (ignored once it has ended)."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass

    def finish(self, timeout: float = 120) -> None:
        """Closes stdin (the driver's cue to shut down) and waits for its ``closed`` line."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass
        if self.proc.poll() is None or not self._queue.empty():
            self.until("closed", timeout)
        self._reap()

    def _reap(self) -> None:
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """Kills this driver (by its own PID) if it still runs."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def failures(self) -> List[str]:
        """Failed checks and errors this driver reported, with its stderr tail after a crash."""
        out: List[str] = []
        crashed = False
        for msg in self.lines:
            if msg.get("failed"):
                out.append(f"{self.role} {msg.get('case', '?')}: {msg['failed']}")
            if "error" in msg:
                out.append(f"{self.role}: {msg['error']}")
                crashed = True
        if crashed:
            out.append(f"{self.role} stderr tail: {''.join(self.err)[-2500:]}")
        elif out:  # failed checks: the engine's own error lines say why
            logged = [ln.strip() for ln in self.err if ln.startswith("E1") or "ERROR" in ln]
            if logged:
                out.append(f"{self.role} logged errors (last {min(6, len(logged))}): "
                           + " | ".join(logged[-6:]))
        return out


class Pair:
    """A prefill and a decode driver of one stack on one engine."""

    def __init__(self, script: str, engine: str, extra_args: Sequence[str] = ()):
        self.engine = engine
        self.prefill = Driver(script, engine, "prefill", extra_args)
        self.decode = Driver(script, engine, "decode", extra_args)

    def both(self) -> List[Driver]:
        return [self.prefill, self.decode]

    def close(self) -> None:
        """Lets both drivers shut down, then kills whatever is left."""
        for d in self.both():
            d.finish()
        for d in self.both():
            d.kill()

    def result(self) -> Dict[str, Any]:
        """What the test checks: failures, per-case times, and every line."""
        times: Dict[str, Any] = {}
        for d in self.both():
            for msg in d.lines:
                if "times" in msg:
                    times.update(msg["times"])
        failures = self.prefill.failures() + self.decode.failures()
        return {"engine": self.engine, "failures": failures, "times": times,
                "prefill": self.prefill.lines, "decode": self.decode.lines}


def run_pair(script: str, engine: str, scenario: Callable[[Pair], None],
             extra_args: Sequence[str] = ()) -> Dict[str, Any]:
    """Starts a pair, runs ``scenario`` (which drives both and records failures in their lines),
    closes it, and returns :meth:`Pair.result`."""
    pair = Pair(script, engine, extra_args)
    try:
        scenario(pair)
    except Exception as exc:  # a broken exchange is reported like a driver's failure
        pair.decode.lines.append({"error": f"scenario: {type(exc).__name__}: {exc}"})
    finally:
        pair.close()
    return pair.result()


# ------------------------------------------------------------------------------------------
# The Mooncake control in a private network namespace
# ------------------------------------------------------------------------------------------
def run_in_netns(test_file: str, timeout: float = TEST_DEADLINE_S - 120) -> Dict[str, Any]:
    """Runs ``python test_file --inside-netns`` under ``unshare -n`` (loopback up) and returns
    the result it prints as its last JSON line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE, TESTS, os.path.join(REPO, "python")])
    cmd = ["unshare", "-n", "--", "bash", "-c",
           'ip link set lo up && exec "$0" "$1" --inside-netns', sys.executable, test_file]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the runner and both drivers
        out, err = proc.communicate()
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"engine": "mooncake", "times": {}, "prefill": [], "decode": [],
                "failures": [f"the namespace run exited {proc.returncode}: "
                             f"{(err or out)[-2500:]}"]}
    result: Dict[str, Any] = json.loads(lines[-1])
    return result


def main_for(test_file: str, run: Callable[[str], Dict[str, Any]]) -> None:
    """The ``__main__`` of a test module: ``--inside-netns`` (the Mooncake half, called by
    :func:`run_in_netns`) or ``--run tidewire|mooncake`` by hand."""
    args = sys.argv[1:]
    if args == ["--inside-netns"]:
        print(json.dumps(run("mooncake")), flush=True)
    elif len(args) == 2 and args[0] == "--run" and args[1] in ENGINES:
        result = run(args[1]) if args[1] == "tidewire" else run_in_netns(test_file)
        print(json.dumps(result, indent=1))
        sys.exit(1 if result["failures"] else 0)
    else:
        sys.exit(f"usage: {os.path.basename(test_file)} --run tidewire|mooncake")


# ------------------------------------------------------------------------------------------
# Reporting
# ------------------------------------------------------------------------------------------
def median(values: Sequence[float]) -> Optional[float]:
    return round(statistics.median(values), 2) if values else None


def print_times(stack: str, result: Dict[str, Any]) -> None:
    """One ``PD-TIME`` line per figure: a median over the case's requests (``*_ms``: a time in
    ms; ``*_mib``: the MiB one engine call carried)."""
    for name, value in sorted(result["times"].items()):
        unit = "ms" if name.endswith("_ms") else "MiB" if "_mib" in name else ""
        print(f"PD-TIME {stack} {name} {result['engine']} {value} {unit}".rstrip(), flush=True)


def cases_seen(result: Dict[str, Any], role: str) -> List[str]:
    """The cases a driver reported as passed (``{"case": C, "ok": true}`` lines)."""
    return [m["case"] for m in result[role] if m.get("ok") and "case" in m]


def check_engine_modules(result: Dict[str, Any]) -> None:
    """Both drivers report which module served ``mooncake.engine``: tidewire's (through the
    shim) in a tidewire run, the wheel's in the Mooncake run."""
    want = "tidewire." if result["engine"] == "tidewire" else "mooncake."
    seen = [m.get("engine") or (m.get("ready") or {}).get("engine")
            for role in ("prefill", "decode") for m in result[role]]
    modules = [s for s in seen if isinstance(s, str) and "." in s]
    assert len(modules) == 2 and all(s.startswith(want) for s in modules), modules


def check_control(result: Dict[str, Any]) -> None:
    """The Mooncake control: a check that Mooncake itself fails is printed and the test is
    marked xfail with the exact reasons (the test of tidewire must pass them all)."""
    if result["failures"]:
        for failure in result["failures"]:
            print("MOONCAKE CONTROL FAILED:", failure)
        pytest.xfail("Mooncake itself fails: " + " | ".join(result["failures"])[:3000])
