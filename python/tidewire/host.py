"""What this host offers tidewire: the library in use and the transports it can run.

``python -m tidewire`` prints :func:`report`. Every answer comes from the library itself:

- ``tcp``: always (loopback and any interface the engine binds).
- ``same-host``: between engines of one process, always (a checked ``memcpy``); between
  processes, a ``process_vm_readv``/``writev`` copy, which the kernel allows when the Yama
  ``ptrace_scope`` (``/proc/sys/kernel/yama/ptrace_scope``) is 0 or absent, for peers running
  as the same user. With scope 1 only a parent process can reach its children, with 2 only
  ``CAP_SYS_PTRACE``, with 3 nobody; the engine then verifies, finds out, and uses TCP.
  ``TW_SAME_HOST=0`` turns the shortcut off.
- ``rdma``: an engine is started with ``rdma=on``, which opens every verbs device found
  through ``libibverbs.so.1`` (or ``TW_IBVERBS_LIB``) exactly as a transfer would; its
  descriptor names the devices, or its error says why there is none.
- ``cuda``: ``tw_gpu_available`` loads the CUDA driver (``libcuda.so.1`` or ``TW_CUDA_LIB``)
  and counts devices.
"""

import os
from typing import Dict, Optional, Tuple

from . import _ffi
from ._errors import TidewireError
from .core import Engine, gpu_devices

__all__ = ["transports", "report"]


def _same_host() -> Tuple[bool, str]:
    if os.environ.get("TW_SAME_HOST", "").strip() == "0":
        return False, "off (TW_SAME_HOST=0)"
    try:
        with Engine() as e:
            host_id: object = e.descriptor().get("tw_host_id", "")
    except TidewireError as err:
        return False, f"engine failed to start: {err}"
    if not host_id:
        return True, "in-process only (no boot id to match peers on this host)"
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope: Optional[str] = f.read().strip()
    except OSError:
        scope = None
    cross = {
        None: "cross-process via process_vm_readv/writev (no Yama restriction)",
        "0": "cross-process via process_vm_readv/writev (same user; Yama ptrace_scope 0)",
        "1": "cross-process only toward child processes (Yama ptrace_scope 1); other peers "
             "use TCP",
        "2": "in-process only: cross-process needs CAP_SYS_PTRACE (Yama ptrace_scope 2)",
        "3": "in-process only: cross-process disabled (Yama ptrace_scope 3)",
    }.get(scope, f"in-process; cross-process depends on Yama ptrace_scope {scope}")
    return True, "in-process memcpy; " + cross


def _rdma() -> Tuple[bool, str]:
    try:
        with Engine(rdma="on") as e:
            devices = [d.get("name", "?") for d in e.descriptor().get("devices", [])]
    except TidewireError as err:
        return False, err.message or str(err)
    return True, "devices: " + (", ".join(devices) or "(unnamed)")


def _cuda() -> Tuple[bool, str]:
    try:
        n = gpu_devices()
    except TidewireError as err:
        return False, err.message or str(err)
    return True, f"{n} device(s)"


def transports() -> Dict[str, Tuple[bool, str]]:
    """``{name: (usable, detail)}`` for ``tcp``, ``same-host``, ``rdma`` and ``cuda``."""
    return {
        "tcp": (True, "always"),
        "same-host": _same_host(),
        "rdma": _rdma(),
        "cuda": _cuda(),
    }


def report() -> str:
    """The text ``python -m tidewire`` prints: versions, library path, transports."""
    from . import __version__

    lines = [
        f"tidewire {__version__} (library {_ffi.version()})",
        f"library: {_ffi.library_path()}",
        "transports:",
    ]
    for name, (ok, detail) in transports().items():
        lines.append(f"  {name:<10} {'yes' if ok else 'no':<4} {detail}")
    return "\n".join(lines)
