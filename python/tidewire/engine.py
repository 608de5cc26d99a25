"""Mooncake-compatible ``TransferEngine`` on top of tidewire.

A drop-in for ``mooncake.engine.TransferEngine``: the same methods, positional names, defaults
and return conventions, so existing code switches by changing one import::

    from tidewire.engine import TransferEngine, TransferNotify, TransferOpcode

Return conventions (as Mooncake's Python wrapper):

- transfers and most calls: ``0`` on success, ``-1`` on failure or timeout;
- async submits: a batch id (a non-zero int), ``0`` on failure;
- ``transfer_check_status``: ``1`` completed, ``-1`` failed, ``-2`` timed out, ``0`` pending
  (a terminal answer frees the batch); ``get_batch_transfer_status`` blocks, frees, returns 0/-1;
- memory registration and ``send_probe``: ``0`` or a negative code of Mooncake's ``error.h``
  (``-1`` invalid argument, ``-3`` address not registered, ``-7`` overlap, ``-102`` socket ...).

Sync transfers wait at most ``MC_TRANSFER_TIMEOUT`` seconds (at least 5, default 30) plus one
nanosecond per byte. Every call into the library releases the GIL. CUDA stream methods are not
provided (``SUPPORT_CUDA`` is ``False``); ``transport_hint`` is accepted and ignored, as in
Mooncake's classic engine. Metadata: ``P2PHANDSHAKE`` or ``http(s)://...``; other schemes
(etcd, redis) make ``initialize`` return ``-1``. Protocol ``"rdma"`` on a host without RDMA
devices runs over TCP, as Mooncake does.
"""

import ctypes
import enum
import json
import mmap
import os
import sys
import threading
import time
from array import array
from ctypes import byref, c_int32, c_size_t, c_uint16, c_uint64, c_void_p

from . import _ffi
from ._ffi import Buffer, Notification, TransferRequest, TransferStatus

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
]

def _cuda_devices():
    """Number of CUDA devices the library can use (0 without a driver or GPU)."""
    try:
        n = ctypes.c_int32()
        return n.value if _ffi.lib().tw_gpu_available(ctypes.byref(n)) == 0 else 0
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

P2PHANDSHAKE = "P2PHANDSHAKE"


class TransferOpcode(enum.IntEnum):
    """Direction of a transfer: ``Read`` (remote to local) or ``Write`` (local to remote)."""

    Read = 0
    Write = 1


Read = TransferOpcode.Read
Write = TransferOpcode.Write


class TransferNotify:
    """A notification: ``name`` and ``msg`` (strings), as ``mooncake.engine.TransferNotify``."""

    __slots__ = ("name", "msg")

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def __repr__(self):
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    def __eq__(self, other):
        if not isinstance(other, TransferNotify):
            return NotImplemented
        return self.name == other.name and self.msg == other.msg

    def __hash__(self):
        return hash((self.name, self.msg))


# Native TW_ERR_* -> Mooncake error.h (te/include/error.h).
_MOONCAKE_CODE = {
    0: 0,
    _ffi.TW_ERR_INVALID_ARGUMENT: -1,
    _ffi.TW_ERR_NULL_ARGUMENT: -1,
    _ffi.TW_ERR_TOO_MANY_REQUESTS: -2,
    _ffi.TW_ERR_ADDRESS_NOT_REGISTERED: -3,
    _ffi.TW_ERR_ADDRESS_OVERLAPPED: -7,
    _ffi.TW_ERR_INVALID_ID: -1,
    _ffi.TW_ERR_UNKNOWN_SEGMENT: -1,
    _ffi.TW_ERR_BUSY: -4,
    _ffi.TW_ERR_TIMEOUT: -301,
    _ffi.TW_ERR_REJECTED: -104,
    _ffi.TW_ERR_SOCKET: -102,
    _ffi.TW_ERR_PROTOCOL: -103,
    _ffi.TW_ERR_METADATA: -200,
    _ffi.TW_ERR_UNSUPPORTED: -303,
}


def mooncake_code(code):
    """Mooncake ``error.h`` number for a native result code (``-1`` when there is no twin)."""
    return _MOONCAKE_CODE.get(code, -1)


def _transfer_timeout_s():
    v = os.environ.get("MC_TRANSFER_TIMEOUT")
    if v is None:
        return 30
    try:
        return max(5, int(v.strip()))
    except ValueError:
        return 30


def _conn_string(metadata_server):
    if metadata_server == P2PHANDSHAKE or "://" in metadata_server:
        return metadata_server
    return "etcd://" + metadata_server  # Mooncake's default scheme; unsupported here


_LITTLE = sys.byteorder == "little" and ctypes.sizeof(c_void_p) == 8


def _request_array(opcode, segment, buffers, peers, lengths):
    """Builds ``n`` tw_transfer_request structs from three int lists (at C speed).

    Returns (ctypes array, total length). Raises TypeError/OverflowError on bad elements.
    """
    n = len(buffers)
    if _LITTLE:
        words = array("Q", (opcode | (segment << 32), 0, 0, 0)) * n
        words[1::4] = array("Q", buffers)
        words[2::4] = array("Q", peers)
        first = lengths[0] if n else 0
        if n > 16 and type(first) is int and lengths.count(first) == n:
            # Uniform lengths (the common case): skip converting the list element by element.
            words[3::4] = array("Q", (first,)) * n
            return (TransferRequest * n).from_buffer(words), first * n
        lens = array("Q", lengths)
        words[3::4] = lens
        return (TransferRequest * n).from_buffer(words), sum(lens)
    arr = (TransferRequest * n)()
    total = 0
    for i in range(n):
        r = arr[i]
        r.opcode = opcode
        r.segment = segment
        r.local_addr = buffers[i]
        r.remote_addr = peers[i]
        r.length = lengths[i]
        total += lengths[i]
    return arr, total


class _Scratch:
    """Per-thread preallocated ctypes objects for the single-request hot path."""

    __slots__ = ("req", "req_ref", "bid", "bid_ref", "seg", "seg_ref", "st", "st_ref")

    def __init__(self):
        self.req = TransferRequest()
        self.req_ref = byref(self.req)
        self.bid = c_uint64()
        self.bid_ref = byref(self.bid)
        self.seg = c_int32()
        self.seg_ref = byref(self.seg)
        self.st = TransferStatus()
        self.st_ref = byref(self.st)


def _topology_json():
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


class TransferEngine:
    """Mooncake-compatible transfer engine (see the module documentation)."""

    TransferOpcode = TransferOpcode

    def __init__(self):
        lib = _ffi.lib()
        self._lib = lib
        self._eng = c_void_p()  # NULL until initialize(): every call then fails cleanly
        self._name = ""
        self._timeout_ns = _transfer_timeout_s() * 1_000_000_000
        self._timeout_ms = self._timeout_ns // 1_000_000
        self._segs = {}
        self._async = {}  # batch id -> (start ns, total bytes, task count)
        self._orphans = []  # batches that timed out and could not be freed yet
        self._orphan_lock = threading.Lock()
        self._managed = {}  # addr -> (mmap, ctypes view)
        self._tls = threading.local()
        # Bound once: attribute lookups on the CDLL are slower than on self.
        self._alloc = lib.tw_batch_alloc
        self._submit = lib.tw_batch_submit
        self._submit_notify = lib.tw_batch_submit_with_notify
        self._wait = lib.tw_batch_wait
        self._free = lib.tw_batch_free
        self._status = lib.tw_batch_status
        self._open_fn = lib.tw_segment_open
        self._engine_free = lib.tw_engine_free

    # ----------------------------------------------------------------------------------------
    # lifecycle
    # ----------------------------------------------------------------------------------------
    def initialize(self, local_hostname, metadata_server, protocol, device_name):
        """Starts the engine. ``metadata_server``: ``"P2PHANDSHAKE"`` or ``http(s)://...``.

        In P2P mode the segment name is ``<host>:<rpc_port>`` (the port in ``local_hostname``
        is ignored). Returns 0 or -1.
        """
        return self._init(local_hostname, _conn_string(metadata_server), protocol, device_name)

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name,
                       metadata_type):
        """As :meth:`initialize`, with the metadata scheme given apart (``"http"``, ...)."""
        if metadata_server == P2PHANDSHAKE or "://" in metadata_server:
            conn = metadata_server
        else:
            conn = f"{metadata_type}://{metadata_server}"
        return self._init(local_hostname, conn, protocol, device_name)

    def _init(self, local_hostname, conn, protocol, device_name):
        for v in (local_hostname, conn, protocol, device_name):
            if not isinstance(v, str):
                raise TypeError(f"expected str, got {type(v).__name__}")
        if protocol == "xgmi":
            return -1
        lib = self._lib
        cfg = c_void_p()
        if lib.tw_config_new(byref(cfg)) != 0:
            return -1
        try:
            for key, value in (("metadata", conn), ("local_server_name", local_hostname)):
                if lib.tw_config_set(cfg, key.encode(), value.encode()) != 0:
                    return -1
            eng = c_void_p()
            if lib.tw_engine_new(cfg, byref(eng)) != 0:
                return -1
        finally:
            lib.tw_config_free(cfg)
        buf = ctypes.create_string_buffer(1024)
        if lib.tw_engine_segment_name(eng, buf, len(buf)) != 0:
            lib.tw_engine_free(eng)
            return -1
        self._shutdown_engine()
        self._eng = eng
        self._name = buf.value.decode()
        return 0

    def _shutdown_engine(self):
        eng = self._eng
        if eng:
            self._eng = c_void_p()
            self._segs = {}
            self._async = {}
            self._orphans = []
            self._engine_free(eng)
        for mm, view in self._managed.values():
            del view
            try:
                mm.close()
            except BufferError:
                pass
        self._managed = {}

    def close(self):
        """tidewire extension: stops the engine now (Mooncake stops it when the object is
        collected) and releases managed buffers. The object can be initialized again."""
        self._shutdown_engine()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._shutdown_engine()

    def __del__(self):
        try:
            self._shutdown_engine()
        except Exception:
            pass

    def get_rpc_port(self):
        """The engine's RPC (handshake) port; -1 before :meth:`initialize`."""
        port = c_uint16()
        if self._lib.tw_engine_rpc_port(self._eng, byref(port)) != 0:
            return -1
        return port.value

    def get_segment_name(self):
        """tidewire extension: the name peers open (``host:rpc_port`` in P2P mode)."""
        return self._name

    def get_engine(self):
        """The native engine handle (a ``ctypes.c_void_p``)."""
        return self._eng

    def get_engine_ptr(self):
        """The native engine handle as an int (0 before :meth:`initialize`)."""
        return self._eng.value or 0

    # ----------------------------------------------------------------------------------------
    # helpers
    # ----------------------------------------------------------------------------------------
    def _scratch(self):
        try:
            return self._tls.s
        except AttributeError:
            s = self._tls.s = _Scratch()
            return s

    def _segment(self, target_hostname):
        """Cached segment id for a name, or -1."""
        seg = self._segs.get(target_hostname)
        if seg is not None:
            return seg
        if not isinstance(target_hostname, str):
            raise TypeError(f"target_hostname must be str, not {type(target_hostname).__name__}")
        out = c_int32()
        if self._open_fn(self._eng, target_hostname.encode(), byref(out)) != 0:
            return -1
        self._segs[target_hostname] = out.value
        return out.value

    def _dispose(self, bid):
        """Frees a batch; one still in flight is kept and freed later."""
        if self._free(self._eng, bid) == _ffi.TW_ERR_BUSY:
            self._orphan(bid)

    def _orphan(self, bid):
        with self._orphan_lock:
            self._orphans.append(bid)

    def _reap(self):
        with self._orphan_lock:
            left = []
            for bid in self._orphans:
                if self._free(self._eng, bid) == _ffi.TW_ERR_BUSY:
                    left.append(bid)
            self._orphans = left

    def _sync_one(self, target_hostname, buffer, peer_buffer_address, length, opcode, notify):
        seg = self._segs.get(target_hostname)
        if seg is None:
            seg = self._segment(target_hostname)
            if seg < 0:
                return -1
        s = self._scratch()
        req = s.req
        req.opcode = opcode
        req.segment = seg
        req.local_addr = buffer
        req.remote_addr = peer_buffer_address
        req.length = length
        eng = self._eng
        if self._alloc(eng, 1, s.bid_ref):
            return -1
        bid = s.bid.value
        if notify is None:
            rc = self._submit(eng, bid, s.req_ref, 1)
        else:
            rc = self._submit_notify(eng, bid, s.req_ref, 1, notify.name.encode(),
                                     notify.msg.encode())
        if rc == 0:
            rc = self._wait(eng, bid, self._timeout_ms + req.length // 1_000_000)
        if self._free(eng, bid) == _ffi.TW_ERR_BUSY:
            self._orphan(bid)  # timed out: still in flight
        if self._orphans:
            self._reap()
        return 0 if rc == 0 else -1

    def _sync_many(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode,
                   notify):
        n = len(buffers)
        if len(peer_buffer_addresses) != n or len(lengths) != n:
            return -1
        seg = self._segs.get(target_hostname)
        if seg is None:
            seg = self._segment(target_hostname)
            if seg < 0:
                return -1
        if n == 0 and notify is not None:
            return -1  # Mooncake: a notify needs at least one request
        try:
            reqs, total = _request_array(int(opcode), seg, buffers, peer_buffer_addresses, lengths)
        except (TypeError, OverflowError, ValueError):
            return -1
        s = self._scratch()
        eng = self._eng
        if self._alloc(eng, n, s.bid_ref):
            return -1
        bid = s.bid.value
        if notify is None:
            rc = self._submit(eng, bid, reqs, n)
        else:
            rc = self._submit_notify(eng, bid, reqs, n, notify.name.encode(), notify.msg.encode())
        if rc == 0:
            rc = self._wait(eng, bid, self._timeout_ms + total // 1_000_000)
        if self._free(eng, bid) == _ffi.TW_ERR_BUSY:
            self._orphan(bid)  # timed out: still in flight
        if self._orphans:
            self._reap()
        return 0 if rc == 0 else -1

    def _async_many(self, target_hostname, buffers, peer_buffer_addresses, lengths, opcode):
        n = len(buffers)
        seg = self._segment(target_hostname)
        if seg < 0:
            return 0
        if len(peer_buffer_addresses) != n or len(lengths) != n:
            return 0
        try:
            reqs, total = _request_array(int(opcode), seg, buffers, peer_buffer_addresses, lengths)
        except (TypeError, OverflowError, ValueError):
            return 0
        s = self._scratch()
        eng = self._eng
        if self._alloc(eng, n, s.bid_ref):
            return 0
        bid = s.bid.value
        start = time.monotonic_ns()
        if self._submit(eng, bid, reqs, n):
            self._free(eng, bid)
            return 0
        self._async[bid] = (start, total, n)
        return bid

    # ----------------------------------------------------------------------------------------
    # sync transfers
    # ----------------------------------------------------------------------------------------
    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length,
                            transport_hint=""):
        """Writes ``length`` bytes from local ``buffer`` to ``peer_buffer_address``. 0 / -1."""
        return self._sync_one(target_hostname, buffer, peer_buffer_address, length, 1, None)

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length,
                           transport_hint=""):
        """Reads ``length`` bytes from ``peer_buffer_address`` into local ``buffer``. 0 / -1."""
        return self._sync_one(target_hostname, buffer, peer_buffer_address, length, 0, None)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode,
                      notify=None, transport_hint=""):
        """One transfer in direction ``opcode``; ``notify`` is delivered to the target once the
        transfer has completed. 0 / -1."""
        op = int(opcode)
        if op not in (0, 1):
            return -1
        return self._sync_one(target_hostname, buffer, peer_buffer_address, length, op, notify)

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                  transport_hint=""):
        """Writes every ``(buffers[i], peer_buffer_addresses[i], lengths[i])``. 0 / -1."""
        return self._sync_many(target_hostname, buffers, peer_buffer_addresses, lengths, 1, None)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                 transport_hint=""):
        """Reads every ``(buffers[i], peer_buffer_addresses[i], lengths[i])``. 0 / -1."""
        return self._sync_many(target_hostname, buffers, peer_buffer_addresses, lengths, 0, None)

    def batch_transfer_sync(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                            opcode, notify=None, transport_hint=""):
        """A batch in direction ``opcode``, with an optional completion notify. 0 / -1."""
        op = int(opcode)
        if op not in (0, 1):
            return -1
        return self._sync_many(target_hostname, buffers, peer_buffer_addresses, lengths, op,
                               notify)

    # ----------------------------------------------------------------------------------------
    # async transfers
    # ----------------------------------------------------------------------------------------
    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                   transport_hint=""):
        """Submits a WRITE batch; returns its id, or 0 on failure."""
        return self._async_many(target_hostname, buffers, peer_buffer_addresses, lengths, 1)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                  transport_hint=""):
        """Submits a READ batch; returns its id, or 0 on failure."""
        return self._async_many(target_hostname, buffers, peer_buffer_addresses, lengths, 0)

    def batch_transfer_async(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                             opcode, transport_hint=""):
        """Submits a batch in direction ``opcode``; returns its id, or 0 on failure."""
        op = int(opcode)
        if op not in (0, 1):
            return 0
        return self._async_many(target_hostname, buffers, peer_buffer_addresses, lengths, op)

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length,
                              transport_hint=""):
        """Submits one WRITE; returns its batch id, or 0 on failure."""
        return self._async_many(target_hostname, [buffer], [peer_buffer_address], [length], 1)

    def transfer_check_status(self, batch_id):
        """1 completed, -1 failed, -2 timed out, 0 still running. A terminal answer frees the
        batch. Unlike Mooncake (task 0 only) every task of the batch counts."""
        eng = self._eng
        rc = self._wait(eng, batch_id, 0)
        if rc == _ffi.TW_ERR_TIMEOUT:
            if self._in_flight(batch_id):
                info = self._async.get(batch_id)
                if info is not None and time.monotonic_ns() - info[0] > self._timeout_ns:
                    return -2
                return 0
            # Every task ended between the wait and the per-task look: the batch goes idle
            # within microseconds, so ask again for its real outcome.
            rc = self._wait(eng, batch_id, 1000)
            if rc == _ffi.TW_ERR_TIMEOUT:
                return 0
        if rc == 0:
            self._async.pop(batch_id, None)
            self._dispose(batch_id)
            return 1
        self._async.pop(batch_id, None)
        if rc != _ffi.TW_ERR_INVALID_ID:
            self._dispose(batch_id)
        return -1

    def _in_flight(self, batch_id):
        info = self._async.get(batch_id)
        count = info[2] if info is not None else 1
        s = self._scratch()
        for task in range(count):
            if self._status(self._eng, batch_id, task, s.st_ref) != 0:
                return False
            if s.st.state == _ffi.TW_TASK_WAITING:
                return True
        return False

    def get_batch_transfer_status(self, batch_ids):
        """Blocks until every batch completed (0) or one failed or timed out (-1); frees all."""
        eng = self._eng
        ids = list(batch_ids)
        failed = False
        for i, bid in enumerate(ids):
            info = self._async.pop(bid, None)
            if failed:
                self._dispose(bid)
                continue
            now = time.monotonic_ns()
            start, total = (info[0], info[1]) if info is not None else (now, 0)
            left_ms = max(0, (start + self._timeout_ns + total - now) // 1_000_000)
            rc = self._wait(eng, bid, left_ms)
            if rc == _ffi.TW_ERR_INVALID_ID:
                failed = True
                continue
            self._dispose(bid)
            if rc != 0:
                failed = True
        if self._orphans:
            self._reap()
        return -1 if failed else 0

    # ----------------------------------------------------------------------------------------
    # memory
    # ----------------------------------------------------------------------------------------
    # --- stream-ordered transfers (Mooncake's CUDA-build methods) ----------------------------
    def _on_cuda(self, target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr, opcode):
        """Enqueues the transfer on a CUDA stream: it starts when the stream reaches this point
        and later work on the stream waits for it. Unlike Mooncake, a failure never exits the
        process: it is logged (and the stream still proceeds)."""
        if not (len(buffers) == len(peer_buffer_addresses) == len(lengths)):
            raise RuntimeError("buffers, peer_buffer_addresses and lengths differ in length")
        seg = self._segment(target_hostname)
        if seg < 0:
            raise RuntimeError(f"cannot open segment {target_hostname!r}: {_ffi.last_error_message()}")
        reqs, _ = _request_array(int(opcode), seg, buffers, peer_buffer_addresses, lengths)
        rc = self._lib.tw_transfer_on_stream(self._eng, reqs, len(buffers), ctypes.c_void_p(stream_ptr or None), None)
        if rc != 0:
            raise RuntimeError(f"transfer on CUDA stream failed ({rc}): {_ffi.last_error_message()}")

    def transfer_write_on_cuda(self, target_hostname, buffer, peer_buffer_address, length,
                               stream_ptr=0, transport_hint=""):
        """WRITE ``length`` bytes in stream order on ``stream_ptr`` (a ``cudaStream_t``)."""
        self._on_cuda(target_hostname, [buffer], [peer_buffer_address], [length], stream_ptr, 1)

    def transfer_read_on_cuda(self, target_hostname, buffer, peer_buffer_address, length,
                              stream_ptr=0, transport_hint=""):
        """READ ``length`` bytes in stream order on ``stream_ptr`` (a ``cudaStream_t``)."""
        self._on_cuda(target_hostname, [buffer], [peer_buffer_address], [length], stream_ptr, 0)

    def batch_transfer_write_on_cuda(self, target_hostname, buffers, peer_buffer_addresses,
                                     lengths, stream_ptr=0, transport_hint=""):
        """Batched :meth:`transfer_write_on_cuda`."""
        self._on_cuda(target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr, 1)

    def batch_transfer_read_on_cuda(self, target_hostname, buffers, peer_buffer_addresses,
                                    lengths, stream_ptr=0, transport_hint=""):
        """Batched :meth:`transfer_read_on_cuda`."""
        self._on_cuda(target_hostname, buffers, peer_buffer_addresses, lengths, stream_ptr, 0)

    def register_memory(self, buffer_addr, capacity, location="*"):
        """Registers ``[buffer_addr, buffer_addr + capacity)``. 0, -1 (zero length or bad
        argument) or -7 (overlaps a registered region)."""
        if not isinstance(location, str):
            raise TypeError("location must be str")
        rc = self._lib.tw_memory_register(self._eng, buffer_addr, capacity, location.encode(),
                                          True)
        return mooncake_code(rc)

    def unregister_memory(self, buffer_addr):
        """Unregisters the region starting at ``buffer_addr``. 0 or -3 (not registered)."""
        return mooncake_code(self._lib.tw_memory_unregister(self._eng, buffer_addr))

    def batch_register_memory(self, buffer_addresses, capacities, location="*"):
        """Registers several regions, all or none. 0 or a negative error.h code."""
        n = len(buffer_addresses)
        if len(capacities) != n:
            return -1
        if not isinstance(location, str):
            raise TypeError("location must be str")
        try:
            words = array("Q", (0, 0)) * n
            words[0::2] = array("Q", buffer_addresses)
            words[1::2] = array("Q", capacities)
        except (TypeError, OverflowError):
            return -1
        bufs = (Buffer * n).from_buffer(words) if n else None
        return mooncake_code(
            self._lib.tw_memory_register_batch(self._eng, bufs, n, location.encode()))

    def batch_unregister_memory(self, buffer_addresses):
        """Unregisters several regions; tries all, returns the first error (or 0)."""
        n = len(buffer_addresses)
        try:
            words = array("Q", buffer_addresses)
        except (TypeError, OverflowError):
            return -1
        addrs = (c_void_p * n).from_buffer(words) if n else None
        return mooncake_code(self._lib.tw_memory_unregister_batch(self._eng, addrs, n))

    def allocate_managed_buffer(self, length):
        """Allocates and registers ``length`` bytes; returns the address, or 0 on failure."""
        if length <= 0 or not self._eng:
            return 0
        try:
            mm = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, ValueError, OverflowError):
            return 0
        view = ctypes.c_char.from_buffer(mm)
        addr = ctypes.addressof(view)
        if self._lib.tw_memory_register(self._eng, addr, length, b"*", True) != 0:
            del view
            mm.close()
            return 0
        self._managed[addr] = (mm, view)
        return addr

    def free_managed_buffer(self, buffer_addr, length):
        """Unregisters and releases a buffer from :meth:`allocate_managed_buffer`. Returns 0
        (-1 for an address it did not allocate)."""
        entry = self._managed.pop(buffer_addr, None)
        if entry is None:
            return -1
        self._lib.tw_memory_unregister(self._eng, buffer_addr)
        mm, view = entry
        del view, entry
        mm.close()
        return 0

    def write_bytes_to_buffer(self, dest_address, src_ptr, length):
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

    def read_bytes_from_buffer(self, source_address, length):
        """Returns ``length`` bytes copied from ``source_address``."""
        if length <= 0:
            return b""
        if not source_address:
            raise ValueError("source_address is 0")
        return ctypes.string_at(source_address, length)

    # ----------------------------------------------------------------------------------------
    # segments, notifications, misc
    # ----------------------------------------------------------------------------------------
    def get_first_buffer_address(self, segment_name):
        """Address of the first buffer the peer ``segment_name`` registered, or 0."""
        seg = self._segment(segment_name)
        if seg < 0:
            return 0
        desc = self._descriptor(seg)
        if desc is not None and not desc.get("buffers"):
            self._lib.tw_segment_refresh(self._eng, seg)
            desc = self._descriptor(seg)
        try:
            return int(desc["buffers"][0]["addr"])
        except (TypeError, KeyError, IndexError, ValueError):
            return 0

    def _descriptor(self, seg):
        lib = self._lib
        needed = c_size_t(0)
        size = 4096
        for _ in range(4):
            buf = ctypes.create_string_buffer(size)
            rc = lib.tw_segment_descriptor(self._eng, seg, buf, size, byref(needed))
            if rc == 0:
                try:
                    return json.loads(buf.value.decode("utf-8", "replace"))
                except ValueError:
                    return None
            if rc != _ffi.TW_ERR_BUFFER_TOO_SMALL:
                return None
            size = max(needed.value, size * 2)
        return None

    def get_notifies(self):
        """Takes every notification received so far (a list of :class:`TransferNotify`)."""
        lib = self._lib
        lst = ctypes.POINTER(Notification)()
        count = c_size_t(0)
        if lib.tw_notify_take(self._eng, byref(lst), byref(count)) != 0 or not lst:
            return []
        try:
            return [TransferNotify((lst[i].name or b"").decode("utf-8", "replace"),
                                   (lst[i].msg or b"").decode("utf-8", "replace"))
                    for i in range(count.value)]
        finally:
            lib.tw_notifications_free(lst, count.value)

    def send_probe(self, peer_server_name):
        """Probes a peer's RPC port: 0, or a negative error.h code (-102 unreachable)."""
        if not isinstance(peer_server_name, str):
            raise TypeError("peer_server_name must be str")
        return mooncake_code(self._lib.tw_engine_probe(self._eng, peer_server_name.encode()))

    def get_local_topology(self, device_name=None):
        """Topology JSON in Mooncake's format: every NUMA node, no RDMA devices."""
        return _topology_json()

    def warmup_efa_segment(self, segment_name):
        """No EFA here: returns 0."""
        return 0
