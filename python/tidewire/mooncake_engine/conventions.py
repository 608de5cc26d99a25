"""Conventions of the Mooncake-compatible engine (:mod:`tidewire.engine`): Mooncake's return
codes for exceptions, the sync timeout from ``MC_TRANSFER_TIMEOUT``, the metadata connection
string and the topology JSON."""

from __future__ import annotations

import os

from .. import _ffi
from .._errors import TidewireError

P2PHANDSHAKE = "P2PHANDSHAKE"


def mooncake_code(code: int) -> int:
    """Mooncake ``error.h`` number for a native result code (``-1`` when there is no twin),
    from the library's one table (``tw_result_mooncake_code``), which its Mooncake C API uses
    too."""
    return _ffi.mooncake_code(code)


def _code(exc: BaseException) -> int:
    """Mooncake code of an exception raised by the pythonic API (bad Python input: -1)."""
    if isinstance(exc, TidewireError) and exc.code is not None:
        return mooncake_code(exc.code)
    return -1


#: Bad input from Python (wrong element types, lengths) and library failures alike.
_FAILURES = (TidewireError, TypeError, ValueError, OverflowError)

# One past the largest address or length a request can carry.
_U64_END = 1 << 64


def _transfer_timeout_s() -> int:
    v = os.environ.get("MC_TRANSFER_TIMEOUT")
    if v is None:
        return 30
    try:
        return max(1, int(v.strip()))  # the engine reads it with the same floor
    except ValueError:
        return 30


def _conn_string(metadata_server: str) -> str:
    if metadata_server == P2PHANDSHAKE or "://" in metadata_server:
        return metadata_server
    return "etcd://" + metadata_server  # Mooncake's default scheme


def _topology_json() -> str:
    nodes = []
    try:
        for name in os.listdir("/sys/devices/system/node"):
            if name.startswith("node") and name[4:].isdigit():
                nodes.append(int(name[4:]))
    except OSError:
        pass
    if not nodes:
        nodes = [0]
    body = ",\n".join(f'\t"cpu:{n}" : \n\t[\n\t\t[],\n\t\t[]\n\t]' for n in sorted(nodes))
    return "{\n" + body + "\n}\n"
