"""Mooncake Store's error codes, as the Python API returns them (``mooncake.store``'s numbers),
and their translation from the numbers of the C API.

The C API (``TW_STORE_*`` in ``include/tidewire.h``) shares one code space with ``tw_result``:
Mooncake's numbers, except ``INTERNAL_ERROR`` (-1) and ``BUFFER_OVERFLOW`` (-10), which are
``tw_result`` numbers of other meanings there and so travel as the ``TW_ERR_*`` codes of the same
meaning (``TW_STORE_INTERNAL_ERROR``, ``TW_STORE_BUFFER_OVERFLOW``).
:mod:`tidewire.mooncake_store.native` turns those two back (:func:`from_c`, :func:`results`), so everything above it, and every caller
of the package, sees Mooncake's numbers only. ``python/tests/test_store_facts.py`` checks this
table against the header."""

from array import array
from typing import Any, Dict, List

from .signatures import TW_STORE_BUFFER_OVERFLOW, TW_STORE_INTERNAL_ERROR

OK = 0
INTERNAL_ERROR = -1
BUFFER_OVERFLOW = -10
SEGMENT_NOT_FOUND = -101
NO_AVAILABLE_HANDLE = -200
INVALID_PARAMS = -600
REPLICA_IS_NOT_READY = -703
OBJECT_NOT_FOUND = -704
OBJECT_HAS_LEASE = -706
LEASE_EXPIRED = -707
TRANSFER_FAIL = -800
RPC_FAIL = -900
RPC_TIMEOUT = -901
UNAVAILABLE_IN_CURRENT_MODE = -1300

#: Mooncake's name of each code (the header's ``TW_STORE_<name>``).
NAMES: Dict[int, str] = {
    OK: "OK", INTERNAL_ERROR: "INTERNAL_ERROR", BUFFER_OVERFLOW: "BUFFER_OVERFLOW",
    SEGMENT_NOT_FOUND: "SEGMENT_NOT_FOUND", NO_AVAILABLE_HANDLE: "NO_AVAILABLE_HANDLE",
    INVALID_PARAMS: "INVALID_PARAMS", REPLICA_IS_NOT_READY: "REPLICA_IS_NOT_READY",
    OBJECT_NOT_FOUND: "OBJECT_NOT_FOUND", OBJECT_HAS_LEASE: "OBJECT_HAS_LEASE",
    LEASE_EXPIRED: "LEASE_EXPIRED", TRANSFER_FAIL: "TRANSFER_FAIL", RPC_FAIL: "RPC_FAIL",
    RPC_TIMEOUT: "RPC_TIMEOUT", UNAVAILABLE_IN_CURRENT_MODE: "UNAVAILABLE_IN_CURRENT_MODE",
}

#: The C API's number -> Mooncake's, for the two that differ.
_FROM_C = {TW_STORE_INTERNAL_ERROR: INTERNAL_ERROR, TW_STORE_BUFFER_OVERFLOW: BUFFER_OVERFLOW}
# The low byte of each in two's complement (-17: 0xef, -15: 0xf1): an array whose bytes hold
# neither holds neither code, found with memchr instead of a look at every item.
_LOW_BYTES = tuple(bytes([c & 0xFF]) for c in _FROM_C)


def from_c(code: int) -> int:
    """A code (or a count or size when not negative) the library returned, in Mooncake's
    numbers."""
    return _FROM_C.get(code, code)


def results(res: Any) -> List[int]:
    """Per-key results the library wrote into ``res`` (an ``array`` or a ctypes array of
    integers: codes, or sizes and counts when not negative) as a list, codes in Mooncake's
    numbers."""
    values: List[int] = res.tolist() if isinstance(res, array) else list(res)
    raw = bytes(res)
    if any(b in raw for b in _LOW_BYTES) and any(c in values for c in _FROM_C):
        return [_FROM_C.get(v, v) for v in values]
    return values
