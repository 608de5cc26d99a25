"""Local memory as the library sees it: buffer addresses, packed request arrays, per-thread
scratch structures (used by :mod:`tidewire.core`'s objects)."""

from __future__ import annotations

import ctypes
import sys
import threading
from array import array
from ctypes import byref, c_size_t, c_uint64, c_void_p
from typing import Any, Iterable, Optional, Sequence, Tuple, Union

from .._ffi import TransferRequest as _CRequest
from .._ffi import TransferStatus as _CStatus
from .values import Segment



# buffers
# --------------------------------------------------------------------------------------------
def _timeout_ms(timeout: Optional[float]) -> int:
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError("timeout must be None or >= 0 seconds")
    return round(timeout * 1000)


def buffer_address(obj: Any, length: Optional[int] = None) -> Tuple[int, int, Any]:
    """``(address, nbytes, keepalive)`` of an int address or a writable contiguous buffer.

    For an int, ``length`` is required. For a buffer, ``length`` (if given) must fit in it.
    """
    if isinstance(obj, bool):
        raise TypeError("a bool is not a buffer or an address")
    if isinstance(obj, int):
        if length is None:
            raise TypeError("length is required when the buffer is given as an int address")
        if obj <= 0:
            raise ValueError(f"address {obj} is not a valid pointer")
        return obj, int(length), None
    if obj is None:
        raise TypeError("buffer is None")
    if isinstance(obj, (ctypes.Array, ctypes.Structure, ctypes.Union, ctypes._SimpleCData)):
        addr, size = ctypes.addressof(obj), ctypes.sizeof(obj)
        keep: Any = obj
    else:
        iface = getattr(obj, "__array_interface__", None)
        if iface is not None and not isinstance(obj, memoryview):
            ptr, readonly = iface["data"]
            if readonly:
                raise TypeError("read-only array: the library writes into local memory")
            flags = getattr(obj, "flags", None)
            if flags is not None and not flags["C_CONTIGUOUS"]:
                raise ValueError("array is not C-contiguous")
            addr, size, keep = ptr, int(obj.nbytes), obj
        else:
            try:
                mv = memoryview(obj)
            except TypeError:
                raise TypeError(
                    f"{type(obj).__name__} is neither an int address nor a buffer") from None
            if mv.readonly:
                raise TypeError(f"read-only {type(obj).__name__}: the library writes into "
                                "local memory; use a bytearray or another writable buffer")
            if not mv.contiguous:
                raise ValueError("buffer is not contiguous")
            mv = mv.cast("B")
            size = mv.nbytes
            if size == 0:
                keep = mv
                addr = 0
            else:
                keep = (ctypes.c_char * size).from_buffer(mv)  # pins the export
                addr = ctypes.addressof(keep)
    if length is not None:
        length = int(length)
        if length < 0 or length > size:
            raise ValueError(f"length {length} does not fit the {size}-byte buffer")
        size = length
    return addr, size, keep


# Typecode of unsigned 64-bit array items: "L" where C long is 64 bits (LP64), because CPython
# converts a multi-digit int to unsigned long about twice as fast as to unsigned long long
# (32,768 addresses: 0.42 vs 1.02 ms); "Q" elsewhere.
U64 = "L" if array("L").itemsize == 8 else "Q"


def _size_array(values: Iterable[int]) -> Tuple[Any, array[int]]:
    """A ``size_t[n]`` ctypes array (and its backing store) built from ints at C speed."""
    words = array(U64, values)
    n = len(words)
    return ((c_size_t * n).from_buffer(words) if n else None), words


_LITTLE_LP64 = sys.byteorder == "little" and ctypes.sizeof(c_void_p) == 8


class RequestArray:
    """Requests over int addresses, packed into the library's layout at C speed.

    ``RequestArray(opcode, segment, local_addrs, remote_addrs, lengths)``: request ``i`` moves
    ``lengths[i]`` bytes between ``local_addrs[i]`` and ``remote_addrs[i]`` of ``segment`` (a
    :class:`Segment` or an id). Meant for many small requests, where building :class:`Request`
    tuples would cost more than the transfer. Accepted wherever a list of requests is
    (:meth:`Batch.submit`, :meth:`Engine.transfer`, :meth:`Engine.transfer_on_stream`).
    Raises ``ValueError`` when the lists differ in length, ``TypeError``/``OverflowError`` for an
    element that is not an int in ``[0, 2**64)``. Addresses are not kept alive: the caller owns
    the memory.
    """

    __slots__ = ("array", "count", "total_bytes", "_words")

    def __init__(self, opcode: int, segment: Union[Segment, int], local_addrs: Sequence[int],
                 remote_addrs: Sequence[int], lengths: Sequence[int]) -> None:
        n = len(local_addrs)
        if len(remote_addrs) != n or len(lengths) != n:
            raise ValueError("local_addrs, remote_addrs and lengths differ in length")
        opcode = int(opcode)
        segment = segment.id if isinstance(segment, Segment) else int(segment)
        self.count = n
        if _LITTLE_LP64:
            # Four 64-bit words per request: (opcode | segment << 32), local, remote, length.
            head = (opcode & 0xFFFFFFFF) | ((segment & 0xFFFFFFFF) << 32)
            words = array(U64, (head, 0, 0, 0)) * n
            words[1::4] = array(U64, local_addrs)
            words[2::4] = array(U64, remote_addrs)
            first = lengths[0] if n else 0
            if n > 16 and type(first) is int and lengths.count(first) == n:
                # Uniform lengths (the common case): no per-element conversion.
                words[3::4] = array(U64, (first,)) * n
                total = first * n
            else:
                lens = array(U64, lengths)
                words[3::4] = lens
                total = sum(lens)
            self._words: Optional[array[int]] = words
            self.array = (_CRequest * n).from_buffer(words) if n else None
        else:
            arr: Any = (_CRequest * n)() if n else None
            total = 0
            for i in range(n):
                r = arr[i]
                r.opcode, r.segment = opcode, segment
                r.local_addr, r.remote_addr, r.length = local_addrs[i], remote_addrs[i], lengths[i]
                if local_addrs[i] is None or lengths[i] < 0 or remote_addrs[i] < 0:
                    raise TypeError(f"request {i}: addresses and lengths must be ints >= 0")
                total += lengths[i]
            self._words = None
            self.array = arr
        self.total_bytes = total

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"<RequestArray {self.count} requests, {self.total_bytes} bytes>"


class _Scratch:
    """Per-thread ctypes objects reused by single-request transfers (no allocation per call)."""

    __slots__ = ("req", "req_ref", "bid", "bid_ref", "st", "st_ref")

    def __init__(self) -> None:
        self.req = _CRequest()
        self.req_ref = byref(self.req)
        self.bid = c_uint64()
        self.bid_ref = byref(self.bid)
        self.st = _CStatus()
        self.st_ref = byref(self.st)


_tls = threading.local()


def _scratch() -> _Scratch:
    try:
        s: _Scratch = _tls.s
        return s
    except AttributeError:
        s = _tls.s = _Scratch()
        return s


#: What a transfer takes: a :class:`RequestArray`, or :class:`~tidewire.Request` objects (or
#: 5-tuples).
Requests = Union[RequestArray, Iterable[Any]]
