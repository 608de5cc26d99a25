"""The driver side of the P/D connector tests: what every ``*_pd_driver.py`` process shares.

A driver runs under the serving environment's interpreter as
``DRIVER --engine tidewire|mooncake [...] prefill|decode``. :func:`start` picks the engine
(``tidewire``: ``python/tidewire/shim`` and ``python`` first on ``sys.path``, so the stack's own
``from mooncake.engine import TransferEngine`` loads ``tidewire.engine``; ``mooncake``: the
real wheel) and keeps the real stdout for JSON lines (fd 1 becomes stderr for everyone else:
native libraries and the stacks' logging print there).

Protocol: the test writes JSON commands on stdin (``{"cmd": NAME, ...}``), one at a time per
driver; the driver answers each with JSON lines on stdout. A case's checks end with
``{"case": C, "ok": true}`` or ``{"case": C, "failed": WHY}`` (the run goes on); an exception
ends the driver with ``{"error": ...}`` and exit status 1; stdin closing ends it with
``{"closed": true}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import traceback
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TextIO

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

#: The real stdout (JSON lines only); set by :func:`start`.
_OUT: Optional[TextIO] = None
#: Folders made by :func:`temp_dir`, removed when the driver exits.
_TEMP_DIRS: List[str] = []


class CheckFailed(Exception):
    """A failed check: ends the case, not the driver."""


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


def emit(**fields: Any) -> None:
    """One JSON line to the test."""
    assert _OUT is not None, "start() first"
    _OUT.write(json.dumps(fields) + "\n")
    _OUT.flush()


@contextlib.contextmanager
def case(name: str) -> Iterator[None]:
    """One checked case: ``ok`` when the block ends, ``failed`` when a check fails in it."""
    try:
        yield
    except CheckFailed as failed:
        emit(case=name, failed=str(failed))
    else:
        emit(case=name, ok=True)


def ms_since(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1e3, 3)


def median(values: Sequence[float]) -> Optional[float]:
    return round(statistics.median(values), 3) if values else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for a server the stack binds itself)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.0005) -> bool:
    """Polls ``predicate`` until it holds or ``timeout_s`` passes; whether it held."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)


def parse_args(description: str, extra: Callable[[argparse.ArgumentParser], Any] =
               lambda p: None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--engine", choices=["tidewire", "mooncake"], required=True)
    extra(parser)
    parser.add_argument("role", choices=["prefill", "decode"])
    return parser.parse_args()


def start(engine: str) -> None:
    """Chooses the engine and redirects stdout; call before the stack is imported."""
    global _OUT
    _OUT = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if engine == "tidewire":
        sys.path[:0] = [os.path.join(REPO, "python", "tidewire", "shim"),
                        os.path.join(REPO, "python")]


def temp_dir(prefix: str) -> str:
    """A fresh folder for this driver's files, removed when it exits."""
    import tempfile

    path = tempfile.mkdtemp(prefix=prefix)
    _TEMP_DIRS.append(path)
    return path


def _exit(code: int) -> None:
    """Removes this driver's folders and exits at once (skipping interpreter teardown of the
    stacks' threads)."""
    import shutil

    for path in _TEMP_DIRS:
        shutil.rmtree(path, ignore_errors=True)
    sys.stderr.flush()
    os._exit(code)


def engine_module() -> str:
    """Which module serves ``mooncake.engine`` in this process (reported at setup)."""
    import mooncake.engine

    return getattr(mooncake.engine.TransferEngine, "__module__", "?")


def serve(handlers: Dict[str, Callable[[Dict[str, Any]], None]],
          close: Callable[[], None] = lambda: None) -> None:
    """Runs commands from stdin until it closes, then ``close``; exits the process (skipping
    interpreter teardown of the stacks' threads) with 0, or 1 after an exception."""
    code = 0
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            command = json.loads(line)
            handler = handlers.get(command.get("cmd", ""))
            if handler is None:
                raise ValueError(f"unknown command {command!r}")
            handler(command)
        close()
        emit(closed=True)
    except Exception as exc:  # reported to the test, which fails on it
        traceback.print_exc()
        emit(error=f"{type(exc).__name__}: {exc}")
        code = 1
    _exit(code)


def run_main(body: Callable[[], None]) -> None:
    """Runs a driver's setup ``body`` (which ends in :func:`serve`), reporting an exception
    there as the driver's ``error`` line."""
    try:
        body()
    except Exception as exc:
        traceback.print_exc()
        if _OUT is not None:
            emit(error=f"setup: {type(exc).__name__}: {exc}")
        _exit(1)


def pattern_bytes(seed: str, n: int) -> bytes:
    """Deterministic, non-periodic bytes, the same in every process."""
    import hashlib

    import numpy as np

    key = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "little")
    return bytes(np.random.default_rng(key).integers(0, 256, n, dtype=np.uint8).tobytes())


def list_ranges(indices: List[int]) -> str:
    """A short text for a list of indices (for failure messages)."""
    return ",".join(str(i) for i in indices[:12]) + ("..." if len(indices) > 12 else "")
