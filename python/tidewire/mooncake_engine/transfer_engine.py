"""Mooncake-compatible ``TransferEngine`` on top of tidewire.

A drop-in for ``mooncake.engine.TransferEngine``: the same methods, positional names, defaults
and return conventions, so existing code switches by changing one import::

    from tidewire.engine import TransferEngine, TransferNotify, TransferOpcode

It is a thin layer over the pythonic API (:class:`tidewire.Engine`, :class:`tidewire.Batch`,
:class:`tidewire.RequestArray`, ...) and never calls the library itself: exceptions become
Mooncake's return codes. (``ctypes`` is used only to copy bytes at raw addresses, for
``write_bytes_to_buffer``/``read_bytes_from_buffer``, and for the handle ``get_engine``
returns.) The argument and return-code helpers are in
:mod:`tidewire.mooncake_engine.conventions`; every public name is importable from
:mod:`tidewire.engine` (the module path Mooncake callers import) and from
:mod:`tidewire.mooncake_engine`.

Return conventions (as Mooncake's Python wrapper):

- transfers and most calls: ``0`` on success, ``-1`` on failure or timeout;
- async submits: a batch id (a non-zero int), ``0`` on failure;
- ``transfer_check_status``: ``1`` completed, ``-1`` failed, ``-2`` timed out, ``0`` pending
  (a terminal answer frees the batch); ``get_batch_transfer_status`` blocks, frees, returns 0/-1;
- memory registration and ``send_probe``: ``0`` or a negative code of Mooncake's ``error.h``
  (``-1`` invalid argument, ``-3`` address not registered, ``-7`` overlap, ``-102`` socket ...).

Sync transfers wait at most ``MC_TRANSFER_TIMEOUT`` seconds (at least 1, default 30, read as the
engine reads it) plus one millisecond per MB. Every call into the library releases the GIL. The CUDA stream methods of
Mooncake's CUDA builds (``transfer_write_on_cuda`` and friends) are provided in every build and
work when a CUDA driver is present (``SUPPORT_CUDA``); ``transport_hint`` is accepted and
ignored, as in Mooncake's classic engine. Metadata: ``P2PHANDSHAKE``, ``http://...`` or
etcd (``etcd://h:p[;h:p...]`` or a bare ``h:p``); ``https://`` and other schemes (redis) make
``initialize`` return ``-1``. The
``protocol`` argument does not pick the transport (``"xgmi"`` is refused): every engine uses
RDMA toward peers that publish it when a verbs device is usable, and TCP otherwise, as Mooncake
does with ``"rdma"`` on a host without RDMA devices; ``MC_FORCE_TCP=1`` (or ``TW_RDMA=off``)
keeps it on TCP.
"""

from __future__ import annotations

import ctypes
import enum
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .. import _ffi
from .._errors import TidewireError
from ..core import Batch, Engine, Registration, RequestArray, gpu_devices
from .conventions import (  # P2PHANDSHAKE and mooncake_code are public names of this module
    _FAILURES, _U64_END, P2PHANDSHAKE, _code, _conn_string, _topology_json, _transfer_timeout_s,
    mooncake_code)

__all__ = [
    "TransferEngine",
    "TransferNotify",
    "TransferOpcode",
    "Read",
    "Write",
    "SUPPORT_CUDA",
    "SUPPORT_EFA",
    "SUPPORT_HIP",
    "SUPPORT_MNNVL",
    "SUPPORT_MUSA",
    "SUPPORT_INTRA_NVLINK",
    "P2PHANDSHAKE",
    "mooncake_code",
]


def _cuda_devices() -> int:
    """Number of CUDA devices the library can use (0 without a driver or GPU)."""
    try:
        return gpu_devices()
    except Exception:  # library not loadable yet: reported when an engine is created
        return 0


#: True when a CUDA driver and device are present (decided when the module is imported; the
#: library itself loads CUDA at run time, so one package serves CPU-only and GPU hosts).
SUPPORT_CUDA = _cuda_devices() > 0
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False


class TransferOpcode(enum.IntEnum):
    """Direction of a transfer: ``Read`` (remote to local) or ``Write`` (local to remote)."""

    Read = 0
    Write = 1


Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification: ``name`` and ``msg`` (strings), as ``mooncake.engine.TransferNotify``."""

    __slots__ = ("name", "msg")

    def __init__(self, name: str = "", msg: str = "") -> None:
        self.name = name
        self.msg = msg

    def __repr__(self) -> str:
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TransferNotify):
            return NotImplemented
        return self.name == other.name and self.msg == other.msg

    def __hash__(self) -> int:
        return hash((self.name, self.msg))


class TransferEngine:
    """Mooncake-compatible transfer engine (see the module documentation), built on
    :class:`tidewire.Engine`."""

    TransferOpcode = TransferOpcode

    def __init__(self) -> None:
        _ffi.library_path()  # a missing library fails here (LibraryNotFound)
        # A tidewire.Engine after initialize(); calls fail cleanly before.
        self._engine: Optional[Engine] = None
        self._name = ""
        self._timeout_ns = _transfer_timeout_s() * 1_000_000_000
        self._timeout_ms = self._timeout_ns // 1_000_000
        self._segs: Dict[str, int] = {}  # segment name -> id
        self._async: Dict[int, Tuple[Batch, int, int]] = {}  # batch id -> (Batch, start ns, bytes)
        # address -> [Registration, ...] (an exact re-registration is counted)
        self._regs: Dict[int, List[Registration]] = {}
        self._managed: Dict[int, int] = {}  # address -> length (shared buffers the engine made)
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------------------------
    # lifecycle
    # ----------------------------------------------------------------------------------------
    def initialize(self, local_hostname: str, metadata_server: str, protocol: str,
                   device_name: str) -> int:
        """Starts the engine. ``metadata_server``: ``"P2PHANDSHAKE"``, ``http://...``, or etcd
        (``etcd://h:p[;h:p...]`` or a bare ``h:p``).

        In P2P mode the segment name is ``<host>:<rpc_port>`` (the port in ``local_hostname``
        is ignored). Returns 0 or -1.
        """
        return self._init(local_hostname, _conn_string(metadata_server), protocol, device_name)

    def initialize_ext(self, local_hostname: str, metadata_server: str, protocol: str,
                       device_name: str, metadata_type: str) -> int:
        """As :meth:`initialize`, with the metadata scheme given apart (``"http"``, ...)."""
        if metadata_server == P2PHANDSHAKE or "://" in metadata_server:
            conn = metadata_server
        else:
            conn = f"{metadata_type}://{metadata_server}"
        return self._init(local_hostname, conn, protocol, device_name)

    def _init(self, local_hostname: str, conn: str, protocol: str, device_name: str) -> int:
        for v in (local_hostname, conn, protocol, device_name):
            if not isinstance(v, str):
                raise TypeError(f"expected str, got {type(v).__name__}")
        if protocol == "xgmi":
            return -1
        try:
            engine = Engine(metadata=conn, local_server_name=local_hostname)
        except TidewireError:
            return -1
        self._shutdown_engine()
        self._engine = engine
        self._name = engine.name
        return 0

    def _live(self) -> Optional[Engine]:
        """The engine, or None before initialize() and once close() started. The closed Engine
        is kept, not dropped: a call racing close() then gets the engine's Shutdown error
        (answered as a failure code), never a missing attribute."""
        engine = self._engine
        return None if engine is None or engine.closed else engine

    @property
    def _off(self) -> bool:
        """True before initialize() and once close() started (see :meth:`_live`)."""
        return self._live() is None

    def _shutdown_engine(self) -> None:
        engine = self._engine
        if engine is not None:
            engine.close()  # waits (bounded) for the calls other threads have in flight
        self._segs = {}
        self._async = {}
        self._regs = {}
        self._managed = {}  # the engine released them when it closed

    def close(self) -> None:
        """tidewire extension: stops the engine now (Mooncake stops it when the object is
        collected) and releases managed buffers. The object can be initialized again.
        Thread-safe: calls other threads have in flight are waited for (bounded) before the
        engine is freed; calls made meanwhile or later return their failure code."""
        self._shutdown_engine()

    def __enter__(self) -> TransferEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self._shutdown_engine()

    def __del__(self) -> None:
        try:
            self._shutdown_engine()
        except Exception:
            pass

    def get_rpc_port(self) -> int:
        """The engine's RPC (handshake) port; -1 before :meth:`initialize`."""
        engine = self._live()
        return engine.rpc_port if engine is not None else -1

    def get_segment_name(self) -> str:
        """tidewire extension: the name peers open (``host:rpc_port`` in P2P mode)."""
        return self._name

    def get_engine(self) -> ctypes.c_void_p:
        """The native engine handle (a ``ctypes.c_void_p``; NULL before :meth:`initialize`)."""
        engine = self._live()
        return engine.handle if engine is not None else ctypes.c_void_p()

    def get_engine_ptr(self) -> int:
        """The native engine handle as an int (0 before :meth:`initialize`)."""
        return self.get_engine().value or 0

    # ----------------------------------------------------------------------------------------
    # helpers
    # ----------------------------------------------------------------------------------------
    def _segment(self, target_hostname: str) -> int:
        """Cached segment id for a name, or -1."""
        seg = self._segs.get(target_hostname)
        if seg is not None:
            return seg
        if not isinstance(target_hostname, str):
            raise TypeError(f"target_hostname must be str, not {type(target_hostname).__name__}")
        engine = self._live()
        if engine is None:
            return -1
        try:
            seg = engine.open_segment(target_hostname).id
        except TidewireError:
            return -1
        self._segs[target_hostname] = seg
        return seg

    @property
    def _orphans(self) -> List[int]:
        """Batches abandoned after a timeout and not freed yet (freed by later calls)."""
        engine = self._live()
        return engine.parked if engine is not None else []

    def _reap(self) -> None:
        engine = self._live()
        if engine is not None:
            engine.reap()

    def _sync_one(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int,
                  opcode: int, notify: Optional[TransferNotify]) -> int:
        seg = self._segs.get(target_hostname)
        if seg is None:
            seg = self._segment(target_hostname)
            if seg < 0:
                return -1
        engine = self._engine
        assert engine is not None  # set before any segment id was cached (close keeps it)
        try:
            # Engine.write/read count the call in the engine's call guard: close() waits.
            (engine.write if opcode else engine.read)(
                seg, buffer, peer_buffer_address, length,
                (self._timeout_ms + length // 1_000_000) / 1000,
                None if notify is None else (notify.name, notify.msg))
        except _FAILURES:
            return -1
        return 0

    def _sync_many(self, target_hostname: str, buffers: Sequence[int],
                   peer_buffer_addresses: Sequence[int], lengths: Sequence[int], opcode: int,
                   notify: Optional[TransferNotify]) -> int:
        n = len(buffers)
        if len(peer_buffer_addresses) != n or len(lengths) != n:
            return -1
        if n == 1:
            local, remote, length = buffers[0], peer_buffer_addresses[0], lengths[0]
            if (type(local) is int and type(remote) is int and type(length) is int
                    and 0 <= local < _U64_END and 0 <= remote < _U64_END
                    and 0 <= length < _U64_END):
                # One request in plain ints (what RequestArray would accept): the single-request
                # path builds no array (3.6-4.3 us less per call, a tenth of a 64 KiB WRITE).
                return self._sync_one(target_hostname, local, remote, length, opcode, notify)
        seg = self._segs.get(target_hostname)
        if seg is None:
            seg = self._segment(target_hostname)
            if seg < 0:
                return -1
        if n == 0 and notify is not None:
            return -1  # Mooncake: a notify needs at least one request
        engine = self._engine
        assert engine is not None  # set before any segment id was cached (close keeps it)
        try:
            reqs = RequestArray(int(opcode), seg, buffers, peer_buffer_addresses, lengths)
            engine.transfer(reqs, (self._timeout_ms + reqs.total_bytes // 1_000_000) / 1000,
                                  None if notify is None else (notify.name, notify.msg))
        except _FAILURES:
            return -1
        return 0

    def _async_many(self, target_hostname: str, buffers: Sequence[int],
                    peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                    opcode: int) -> int:
        n = len(buffers)
        seg = self._segment(target_hostname)
        if seg < 0:
            return 0
        if len(peer_buffer_addresses) != n or len(lengths) != n:
            return 0
        engine = self._engine
        assert engine is not None  # set before any segment id was cached (close keeps it)
        try:
            reqs = RequestArray(int(opcode), seg, buffers, peer_buffer_addresses, lengths)
            batch = engine.batch(n)
        except _FAILURES:
            return 0
        start = time.monotonic_ns()
        try:
            batch.submit(reqs)
        except _FAILURES:
            batch.discard()
            return 0
        self._async[batch.id] = (batch, start, reqs.total_bytes)
        return batch.id

    # ----------------------------------------------------------------------------------------
    # memory: 0 or a negative ``error.h`` code, as documented on each
    # ----------------------------------------------------------------------------------------
    def _register(self, engine: Engine, addr: int, length: int, location: str) -> None:
        reg = engine.register(addr, length, location)
        with self._lock:
            self._regs.setdefault(addr, []).append(reg)

    def _unregister(self, engine: Engine, addr: int) -> None:
        with self._lock:
            regs = self._regs.get(addr)
            reg = regs.pop() if regs else None
            if regs == []:
                del self._regs[addr]
        if reg is not None:
            reg.close()
        else:
            engine.unregister(addr)  # not registered here: the library's answer

    def register_memory(self, buffer_addr: int, capacity: int, location: str = "*") -> int:
        """Registers ``[buffer_addr, buffer_addr + capacity)``. 0, -1 (zero length or bad
        argument) or -7 (overlaps a registered region)."""
        if not isinstance(location, str):
            raise TypeError("location must be str")
        engine = self._live()
        if engine is None:
            return -1
        try:
            self._register(engine, buffer_addr, capacity, location)
        except _FAILURES as e:
            return _code(e)
        return 0

    def unregister_memory(self, buffer_addr: int) -> int:
        """Unregisters the region starting at ``buffer_addr``. 0 or -3 (not registered)."""
        engine = self._live()
        if engine is None:
            return -1
        try:
            self._unregister(engine, buffer_addr)
        except _FAILURES as e:
            return _code(e)
        return 0

    def batch_register_memory(self, buffer_addresses: Sequence[int], capacities: Sequence[int],
                              location: str = "*") -> int:
        """Registers several regions, all or none. 0 or a negative error.h code."""
        if len(capacities) != len(buffer_addresses):
            return -1
        if not isinstance(location, str):
            raise TypeError("location must be str")
        engine = self._live()
        if engine is None:
            return -1
        try:
            regs = engine.register_many(zip(buffer_addresses, capacities), location)
        except _FAILURES as e:
            return _code(e)
        with self._lock:
            for reg in regs:
                self._regs.setdefault(reg.addr, []).append(reg)
        return 0

    def batch_unregister_memory(self, buffer_addresses: Iterable[int]) -> int:
        """Unregisters several regions; tries all, returns the first error (or 0)."""
        engine = self._live()
        if engine is None:
            return -1
        first = 0
        for addr in list(buffer_addresses):
            try:
                self._unregister(engine, addr)
            except _FAILURES as e:
                first = first or _code(e)
        return first

    def allocate_managed_buffer(self, length: int) -> int:
        """Allocates and registers ``length`` bytes; returns the address, or 0 on failure.

        The memory is shared with same-host peers (memfd-backed): a tidewire peer on this host
        maps it and copies with memcpy, with no socket on the way; other peers reach it over
        the network like any registered memory."""
        engine = self._live()
        if length <= 0 or engine is None:
            return 0
        try:
            addr = engine.alloc_shared(length)
        except _FAILURES:
            return 0
        self._managed[addr] = length
        return addr

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        """Unregisters and releases a buffer from :meth:`allocate_managed_buffer`: when it
        returns, no peer byte lands in it any more. Returns 0 (-1 for an address it did not
        allocate)."""
        if self._managed.pop(buffer_addr, None) is None:
            return -1
        engine = self._engine
        assert engine is not None  # the buffer came from it (close keeps it)
        try:
            engine.free_shared(buffer_addr)
        except _FAILURES:
            return -1
        return 0

    def write_bytes_to_buffer(self, dest_address: int, src_ptr: Any, length: int) -> int:
        """Copies ``length`` bytes of ``src_ptr`` (bytes-like or str) to ``dest_address``. 0/-1."""
        if isinstance(src_ptr, str):
            src_ptr = src_ptr.encode()
        elif not isinstance(src_ptr, bytes):
            src_ptr = memoryview(src_ptr).cast("B").tobytes()
        if not dest_address or length < 0 or length > len(src_ptr):
            return -1
        if length:
            ctypes.memmove(dest_address, src_ptr, length)
        return 0

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        """Returns ``length`` bytes copied from ``source_address``."""
        if length <= 0:
            return b""
        if not source_address:
            raise ValueError("source_address is 0")
        return ctypes.string_at(source_address, length)

    # ----------------------------------------------------------------------------------------
    # sync transfers
    # ----------------------------------------------------------------------------------------
    def transfer_sync_write(self, target_hostname: str, buffer: int,
                            peer_buffer_address: int, length: int,
                            transport_hint: str = "") -> int:
        """Writes ``length`` bytes from local ``buffer`` to ``peer_buffer_address``. 0 / -1."""
        return self._sync_one(target_hostname, buffer, peer_buffer_address, length, 1, None)

    def transfer_sync_read(self, target_hostname: str, buffer: int,
                           peer_buffer_address: int, length: int,
                           transport_hint: str = "") -> int:
        """Reads ``length`` bytes from ``peer_buffer_address`` into local ``buffer``. 0 / -1."""
        return self._sync_one(target_hostname, buffer, peer_buffer_address, length, 0, None)

    def transfer_sync(self, target_hostname: str, buffer: int,
                      peer_buffer_address: int, length: int,
                      opcode: int, notify: Optional[TransferNotify] = None,
                      transport_hint: str = "") -> int:
        """One transfer in direction ``opcode``; ``notify`` is delivered to the target once the
        transfer has completed. 0 / -1."""
        op = int(opcode)
        if op not in (0, 1):
            return -1
        return self._sync_one(target_hostname, buffer, peer_buffer_address, length, op, notify)

    def batch_transfer_sync_write(self, target_hostname: str, buffers: Sequence[int],
                                  peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                  transport_hint: str = "") -> int:
        """Writes every ``(buffers[i], peer_buffer_addresses[i], lengths[i])``. 0 / -1."""
        return self._sync_many(target_hostname, buffers, peer_buffer_addresses, lengths, 1, None)

    def batch_transfer_sync_read(self, target_hostname: str, buffers: Sequence[int],
                                 peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                 transport_hint: str = "") -> int:
        """Reads every ``(buffers[i], peer_buffer_addresses[i], lengths[i])``. 0 / -1."""
        return self._sync_many(target_hostname, buffers, peer_buffer_addresses, lengths, 0, None)

    def batch_transfer_sync(self, target_hostname: str, buffers: Sequence[int],
                            peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                            opcode: int,
                            notify: Optional[TransferNotify] = None,
                            transport_hint: str = "") -> int:
        """A batch in direction ``opcode``, with an optional completion notify. 0 / -1."""
        op = int(opcode)
        if op not in (0, 1):
            return -1
        return self._sync_many(target_hostname, buffers, peer_buffer_addresses, lengths, op,
                               notify)

    # ----------------------------------------------------------------------------------------
    # async transfers
    # ----------------------------------------------------------------------------------------
    def batch_transfer_async_write(self, target_hostname: str, buffers: Sequence[int],
                                   peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                   transport_hint: str = "") -> int:
        """Submits a WRITE batch; returns its id, or 0 on failure."""
        return self._async_many(target_hostname, buffers, peer_buffer_addresses, lengths, 1)

    def batch_transfer_async_read(self, target_hostname: str, buffers: Sequence[int],
                                  peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                  transport_hint: str = "") -> int:
        """Submits a READ batch; returns its id, or 0 on failure."""
        return self._async_many(target_hostname, buffers, peer_buffer_addresses, lengths, 0)

    def batch_transfer_async(self, target_hostname: str, buffers: Sequence[int],
                             peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                             opcode: int,
                             transport_hint: str = "") -> int:
        """Submits a batch in direction ``opcode``; returns its id, or 0 on failure."""
        op = int(opcode)
        if op not in (0, 1):
            return 0
        return self._async_many(target_hostname, buffers, peer_buffer_addresses, lengths, op)

    def transfer_submit_write(self, target_hostname: str, buffer: int,
                              peer_buffer_address: int, length: int,
                              transport_hint: str = "") -> int:
        """Submits one WRITE; returns its batch id, or 0 on failure."""
        return self._async_many(target_hostname, [buffer], [peer_buffer_address], [length], 1)

    def transfer_check_status(self, batch_id: int) -> int:
        """1 completed, -1 failed, -2 timed out, 0 still running. A terminal answer frees the
        batch. Unlike Mooncake (task 0 only) every task of the batch counts."""
        info = self._async.get(batch_id)
        if info is None or self._off:
            return -1  # unknown, or already freed by a terminal answer
        batch, start, _ = info
        try:
            if not batch.poll():
                return -2 if time.monotonic_ns() - start > self._timeout_ns else 0
            result = 1
        except TidewireError:
            result = -1
        self._async.pop(batch_id, None)
        batch.discard()
        return result

    def get_batch_transfer_status(self, batch_ids: Iterable[int]) -> int:
        """Blocks until every batch completed (0) or one failed or timed out (-1); frees all."""
        failed = False
        for bid in list(batch_ids):
            info = self._async.pop(bid, None)
            if info is None:
                failed = True  # unknown or already freed
                continue
            batch, start, total = info
            if not failed:
                left_ns = start + self._timeout_ns + total - time.monotonic_ns()
                try:
                    batch.wait(max(0, left_ns // 1_000_000) / 1000)
                except TidewireError:
                    failed = True
            batch.discard()
        self._reap()
        return -1 if failed else 0

    # ----------------------------------------------------------------------------------------
    # stream-ordered transfers (Mooncake's CUDA-build methods)
    # ----------------------------------------------------------------------------------------
    def _on_cuda(self, target_hostname: str, buffers: Sequence[int],
                 peer_buffer_addresses: Sequence[int], lengths: Sequence[int], stream_ptr: int,
                 opcode: int) -> None:
        """Enqueues the transfer on a CUDA stream: it starts when the stream reaches this point
        and later work on the stream waits for it. Unlike Mooncake, a failure never exits the
        process: bad input raises RuntimeError, a later failure is logged (and the stream
        still proceeds)."""
        if not (len(buffers) == len(peer_buffer_addresses) == len(lengths)):
            raise RuntimeError("buffers, peer_buffer_addresses and lengths differ in length")
        engine = self._live()
        if engine is None:
            raise RuntimeError("the engine is not initialized")
        seg = self._segs.get(target_hostname)
        try:
            if seg is None:
                seg = engine.open_segment(target_hostname).id
                self._segs[target_hostname] = seg
            reqs = RequestArray(int(opcode), seg, buffers, peer_buffer_addresses, lengths)
            engine.transfer_on_stream(reqs, stream_ptr, track=False)
        except _FAILURES as e:
            raise RuntimeError(f"transfer on CUDA stream failed: {e}") from e

    def transfer_write_on_cuda(self, target_hostname: str, buffer: int,
                               peer_buffer_address: int, length: int,
                               stream_ptr: int = 0, transport_hint: str = "") -> None:
        """WRITE ``length`` bytes in stream order on ``stream_ptr`` (a ``cudaStream_t``)."""
        self._on_cuda(target_hostname, [buffer], [peer_buffer_address], [length], stream_ptr, 1)

    def transfer_read_on_cuda(self, target_hostname: str, buffer: int,
                              peer_buffer_address: int, length: int,
                              stream_ptr: int = 0, transport_hint: str = "") -> None:
        """READ ``length`` bytes in stream order on ``stream_ptr`` (a ``cudaStream_t``)."""
        self._on_cuda(target_hostname, [buffer], [peer_buffer_address], [length], stream_ptr, 0)

    def batch_transfer_write_on_cuda(self, target_hostname: str, buffers: Sequence[int],
                                     peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                     stream_ptr: int = 0, transport_hint: str = "") -> None:
        """Batched :meth:`transfer_write_on_cuda`."""
        self._on_cuda(target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr, 1)

    def batch_transfer_read_on_cuda(self, target_hostname: str, buffers: Sequence[int],
                                    peer_buffer_addresses: Sequence[int], lengths: Sequence[int],
                                    stream_ptr: int = 0, transport_hint: str = "") -> None:
        """Batched :meth:`transfer_read_on_cuda`."""
        self._on_cuda(target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr, 0)

    # ----------------------------------------------------------------------------------------
    # segments, notifications, misc
    # ----------------------------------------------------------------------------------------
    def get_first_buffer_address(self, segment_name: str) -> int:
        """Address of the first buffer the peer ``segment_name`` registered, or 0."""
        seg = self._segment(segment_name)
        if seg < 0:
            return 0
        engine = self._engine
        assert engine is not None  # set before any segment id was cached (close keeps it)
        try:
            desc = engine.descriptor(seg)
            if not desc.get("buffers"):
                engine.refresh_segment(seg)
                desc = engine.descriptor(seg)
            return int(desc["buffers"][0]["addr"])
        except (TidewireError, TypeError, KeyError, IndexError, ValueError, AttributeError):
            return 0

    def get_notifies(self) -> List[TransferNotify]:
        """Takes every notification received so far (a list of :class:`TransferNotify`)."""
        engine = self._live()
        if engine is None:
            return []
        try:
            return [TransferNotify(n.name, n.msg) for n in engine.take_notifications()]
        except TidewireError:
            return []

    def send_probe(self, peer_server_name: str) -> int:
        """Probes a peer's RPC port: 0, or a negative error.h code (-102 unreachable)."""
        if not isinstance(peer_server_name, str):
            raise TypeError("peer_server_name must be str")
        engine = self._live()
        if engine is None:
            return -1
        try:
            engine.probe(peer_server_name)
        except TidewireError as e:
            return _code(e)
        return 0

    def get_local_topology(self, device_name: Optional[str] = None) -> str:
        """Topology JSON in Mooncake's format: every NUMA node, no RDMA devices."""
        return _topology_json()

    def warmup_efa_segment(self, segment_name: str) -> int:
        """No EFA here: returns 0."""
        return 0


# The public path of these classes is tidewire.engine (Mooncake's mooncake.engine under
# tidewire's name): reprs, pickles and callers that check a class's module see that path.
for _public in (TransferEngine, TransferNotify, TransferOpcode):
    _public.__module__ = "tidewire.engine"
del _public
