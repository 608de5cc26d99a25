"""The pythonic tidewire API: engines, registrations, segments, batches, scatter operations.

Failures raise :class:`~tidewire.TidewireError` subclasses. Local memory is given either as an
int address or as an object with the writable buffer protocol (``bytearray``, ``memoryview``,
``mmap``, ctypes arrays, C-contiguous numpy arrays); such objects are kept alive (and, for
``bytearray``, kept from resizing) for as long as the library may touch them. Every call into
the library releases the GIL.
"""

import ctypes
import enum
import json
import sys
import threading
import weakref
from array import array
from collections import namedtuple
from ctypes import byref, c_int32, c_size_t, c_uint16, c_uint64, c_void_p

from . import _ffi
from ._errors import CallbackError, Shutdown, check, error_for
from ._guard import CallGuard, GuardedLib
from ._ffi import Notification as _CNotification
from ._ffi import Buffer as _CBuffer
from ._ffi import ScatterRange as _CScatterRange
from ._ffi import TransferRequest as _CRequest
from ._ffi import TransferStatus as _CStatus

__all__ = [
    "Engine",
    "Opcode",
    "READ",
    "WRITE",
    "LOCAL_SEGMENT",
    "Request",
    "TaskState",
    "TaskStatus",
    "Notification",
    "ScatterRange",
    "Registration",
    "Segment",
    "Batch",
    "ScatterOp",
    "StreamOp",
    "RequestArray",
    "CONFIG_KEYS",
    "buffer_address",
    "gpu_devices",
]


class Opcode(enum.IntEnum):
    """Transfer direction."""

    READ = 0  # remote -> local
    WRITE = 1  # local -> remote


READ = Opcode.READ
WRITE = Opcode.WRITE
LOCAL_SEGMENT = _ffi.TW_LOCAL_SEGMENT


class TaskState(enum.IntEnum):
    """State of one task of a batch (Mooncake's numbering)."""

    WAITING = _ffi.TW_TASK_WAITING
    COMPLETED = _ffi.TW_TASK_COMPLETED
    FAILED = _ffi.TW_TASK_FAILED


#: One READ or WRITE: ``local`` is an int address or a buffer object (then ``length`` may be
#: None: the buffer's size); ``segment`` a :class:`Segment`, an id or a name.
Request = namedtuple("Request", "opcode segment local remote length")
Request.__new__.__defaults__ = (None,)

#: ``state`` (:class:`TaskState`), ``result`` (0 or the failure's code), ``transferred_bytes``.
TaskStatus = namedtuple("TaskStatus", "state result transferred_bytes")

#: A received notification.
Notification = namedtuple("Notification", "name msg")

#: Keys accepted by :class:`Engine` (``tw_config_set``).
CONFIG_KEYS = (
    "metadata",
    "local_server_name",
    "bind_address",
    "rpc_port",
    "data_port",
    "tcp_lanes",
    "tcp_spread",
    "tcp_congestion",
    "tcp_proto",
    "slice_size",
    "same_host",
    "connect_timeout_ms",
    "io_timeout_ms",
    "transfer_timeout_ms",
    "max_data_connections",
    "data_idle_timeout_ms",
    "rpc_max_concurrent",
    "notify_max_count",
    "notify_max_bytes",
    "handshake_max_len",
    "rdma",
    "rdma_devices",
    "rdma_slice_size",
    "rdma_qp_per_ep",
    "rdma_max_wr",
    "rdma_retries",
    "rdma_max_passive_endpoints",
    "auth_key",
)


def gpu_devices():
    """Number of CUDA devices the library can use. Raises :class:`Unsupported` (the message
    says why) when the driver (``libcuda.so.1``, or ``TW_CUDA_LIB``) cannot be loaded or finds
    no device. The library loads CUDA at run time, so this is a property of the host."""
    n = c_int32()
    check(_ffi.lib().tw_gpu_available(byref(n)))
    return n.value


class ScatterRange:
    """One range of a scatter operation.

    Fragment ``i`` moves ``lengths[i]`` bytes between ``local + local_offsets[i]`` and
    ``remote_base + remote_offsets[i]`` of ``segment``. ``local`` is a buffer object (its size is
    the local capacity) or an int address with ``local_capacity``; ``remote_size`` bounds the
    remote offsets.
    """

    __slots__ = ("opcode", "segment", "remote_base", "remote_size", "local", "local_offsets",
                 "remote_offsets", "lengths", "local_capacity")

    def __init__(self, opcode, segment, remote_base, remote_size, local, local_offsets,
                 remote_offsets, lengths, local_capacity=None):
        self.opcode = int(opcode)
        self.segment = segment
        self.remote_base = remote_base
        self.remote_size = remote_size
        self.local = local
        self.local_offsets = local_offsets
        self.remote_offsets = remote_offsets
        self.lengths = lengths
        self.local_capacity = local_capacity

    def __repr__(self):
        return (f"ScatterRange(opcode={self.opcode}, segment={self.segment!r}, "
                f"fragments={len(self.lengths)})")


# --------------------------------------------------------------------------------------------
# buffers
# --------------------------------------------------------------------------------------------
def _timeout_ms(timeout):
    if timeout is None:
        return -1
    if timeout < 0:
        raise ValueError("timeout must be None or >= 0 seconds")
    return round(timeout * 1000)


def buffer_address(obj, length=None):
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
        addr, size, keep = ctypes.addressof(obj), ctypes.sizeof(obj), obj
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


def _size_array(values):
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

    def __init__(self, opcode, segment, local_addrs, remote_addrs, lengths):
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
            self._words = words
            self.array = (_CRequest * n).from_buffer(words) if n else None
        else:
            arr = (_CRequest * n)() if n else None
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

    def __len__(self):
        return self.count

    def __repr__(self):
        return f"<RequestArray {self.count} requests, {self.total_bytes} bytes>"


class _Scratch:
    """Per-thread ctypes objects reused by single-request transfers (no allocation per call)."""

    __slots__ = ("req", "req_ref", "bid", "bid_ref", "st", "st_ref")

    def __init__(self):
        self.req = _CRequest()
        self.req_ref = byref(self.req)
        self.bid = c_uint64()
        self.bid_ref = byref(self.bid)
        self.st = _CStatus()
        self.st_ref = byref(self.st)


_tls = threading.local()


def _scratch():
    try:
        return _tls.s
    except AttributeError:
        s = _tls.s = _Scratch()
        return s


# --------------------------------------------------------------------------------------------
# objects
# --------------------------------------------------------------------------------------------
class _Owned:
    """Base of the objects that own a library resource: ``with`` support and release on
    garbage collection, both through ``close()``."""

    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown or a closed engine: nothing left to release
            pass


class Registration(_Owned):
    """A registered memory range; unregister with :meth:`close` (or a ``with`` block)."""

    __slots__ = ("_engine", "addr", "length", "location", "remote_accessible", "_keep",
                 "__weakref__")

    def __init__(self, engine, addr, length, location, remote_accessible, keep):
        self._engine = engine
        self.addr = addr
        self.length = length
        self.location = location
        self.remote_accessible = remote_accessible
        self._keep = keep

    @property
    def registered(self):
        """True until :meth:`close`."""
        return self._engine is not None

    def close(self):
        """Unregisters the range (idempotent)."""
        eng, self._engine = self._engine, None
        if eng is not None and not eng.closed:
            try:
                eng.unregister(self.addr)
            finally:
                self._keep = None
        self._keep = None

    unregister = close


    def __repr__(self):
        state = "registered" if self.registered else "closed"
        return f"<Registration {self.addr:#x}+{self.length} {state}>"


class Segment:
    """An open peer segment (``id`` is what requests carry)."""

    __slots__ = ("_engine", "id", "name")

    def __init__(self, engine, seg_id, name):
        self._engine = engine
        self.id = seg_id
        self.name = name

    def __int__(self):
        return self.id

    __index__ = __int__

    def refresh(self):
        """Re-fetches the peer's descriptor (after it registered more memory)."""
        self._engine.refresh_segment(self.id)

    def descriptor(self):
        """The peer's descriptor (Mooncake JSON) as a dict."""
        return self._engine.descriptor(self)

    def notify(self, name, msg):
        """Sends a notification to the peer."""
        self._engine.notify(self, name, msg)

    def close(self):
        """Forgets the segment id."""
        check(self._engine._lib.tw_segment_close(self._engine._handle(), self.id))

    def __repr__(self):
        return f"<Segment {self.name!r} id={self.id}>"


class Batch:
    """A batch of requests: ``submit`` (any number of times, up to ``capacity`` requests in
    all), ``status(i)``, ``wait(timeout)``; ``close`` frees it. A ``with`` block waits for work
    still in flight before freeing."""

    def __init__(self, engine, capacity):
        self._freed = True  # until the allocation succeeds
        self._engine = engine
        self.capacity = capacity
        out = c_uint64()
        check(engine._lib.tw_batch_alloc(engine._handle(), capacity, byref(out)))
        self.id = out.value
        self._keep = []
        self._count = 0
        self._freed = False

    def __len__(self):
        return self._count

    def submit(self, requests, notify=None):
        """Submits requests (:class:`Request` or 5-tuples, or a :class:`RequestArray`); all are
        validated before any starts. ``notify=(name, msg)`` is sent to the first request's
        segment once the whole batch has completed."""
        eng = self._engine
        reqs, n, keep = eng._requests(requests)
        h = eng._handle()
        if notify is None:
            rc = eng._lib.tw_batch_submit(h, self.id, reqs, n)
        else:
            name, msg = notify
            rc = eng._lib.tw_batch_submit_with_notify(h, self.id, reqs, n, name.encode(),
                                                      msg.encode())
        check(rc)
        self._keep.extend(keep)
        self._count += n
        return self

    def status(self, task):
        """:class:`TaskStatus` of task ``task`` (submission order from 0)."""
        st = _CStatus()
        check(self._engine._lib.tw_batch_status(self._engine._handle(), self.id, task,
                                                byref(st)))
        return TaskStatus(TaskState(st.state), st.result, st.transferred_bytes)

    def wait(self, timeout=None):
        """Waits for every task (``timeout`` in seconds, None = no limit). Raises the first
        failed task's error, or :class:`TransferTimeout` (the work continues)."""
        check(self._engine._lib.tw_batch_wait(self._engine._handle(), self.id,
                                              _timeout_ms(timeout)))

    @property
    def done(self):
        """True when no task is in flight."""
        rc = self._engine._lib.tw_batch_wait(self._engine._handle(), self.id, 0)
        if rc == _ffi.TW_ERR_TIMEOUT:
            return not self._in_flight()
        return True

    def _in_flight(self):
        lib, h, s = self._engine._lib, self._engine._handle(), _scratch()
        for task in range(self._count):
            if lib.tw_batch_status(h, self.id, task, s.st_ref) != 0:
                return False
            if s.st.state == _ffi.TW_TASK_WAITING:
                return True
        return False

    def poll(self):
        """Never blocks: True when every task completed, False while any is in flight; raises
        the first failed task's error."""
        lib, h = self._engine._lib, self._engine._handle()
        rc = lib.tw_batch_wait(h, self.id, 0)
        if rc == _ffi.TW_ERR_TIMEOUT:
            if self._in_flight():
                return False
            # Every task ended between the two looks: the batch goes idle within microseconds
            # (its latch is released right after the last task), so a bounded wait gets the
            # final answer; a zero wait could still lose that race and report a timeout.
            rc = lib.tw_batch_wait(h, self.id, 1000)
        check(rc)
        return True

    def discard(self):
        """Frees the batch without waiting: now, or, while work is in flight, as soon as the
        engine notices it finished (the batch's buffers stay referenced until then). Use it to
        abandon a batch after a timeout. Idempotent."""
        if self._freed:
            return
        self._freed = True
        eng = self._engine
        if not eng.closed:
            eng._free_or_park(self.id, self._keep)
        self._keep = []

    def close(self):
        """Frees the batch. Raises :class:`Busy` while work is in flight (the batch stays
        valid), :class:`InvalidId` if it was already freed."""
        if self._freed:
            raise error_for(_ffi.TW_ERR_INVALID_ID, f"batch {self.id:#x} is already freed")
        eng = self._engine
        if eng.closed:
            self._freed = True
            self._keep = []
            return
        check(eng._lib.tw_batch_free(eng._handle(), self.id))
        self._freed = True
        self._keep = []

    free = close

    def _release(self):
        if self._freed or self._engine.closed:
            return
        lib, h = self._engine._lib, self._engine._handle()
        if lib.tw_batch_free(h, self.id) == _ffi.TW_ERR_BUSY:
            lib.tw_batch_wait(h, self.id, -1)  # the pinned buffers must outlive the work
            lib.tw_batch_free(h, self.id)
        self._freed = True
        self._keep = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._release()

    def __del__(self):
        try:
            self._release()
        except Exception:
            pass

    def __repr__(self):
        return f"<Batch {self.id:#x} tasks={self._count}/{self.capacity}>"


class ScatterOp(_Owned):
    """A submitted scatter operation. ``wait(timeout)`` returns the per-fragment results
    (0 = success, else a negative code); ``close`` waits for physical completion and frees it.
    The callback (if any) is called exactly once per fragment, as ``callback(index, result)``,
    on the thread in ``wait`` or ``close``."""

    def __init__(self, engine, ranges, callback):
        self._engine = engine
        self._freed = True  # until the submit succeeds
        self.id = 0
        self._user_cb = callback
        self._cb_error = None
        self._lock = threading.Lock()
        crs = (_CScatterRange * len(ranges))() if ranges else None
        keep = []
        total = 0
        for i, r in enumerate(ranges):
            c = crs[i]
            c.opcode = int(r.opcode)
            c.segment = engine._segment_id(r.segment)
            c.remote_base = r.remote_base
            c.remote_size = r.remote_size
            if r.local is None or (isinstance(r.local, int) and r.local == 0):
                addr, cap = 0, r.local_capacity or 0  # the library fails this range's fragments
            else:
                addr, cap, k = buffer_address(r.local, r.local_capacity)
                keep.append(k)
            c.local_base = addr
            c.local_capacity = cap
            lo, a = _size_array(r.local_offsets)
            ro, b = _size_array(r.remote_offsets)
            ln, d = _size_array(r.lengths)
            keep.extend((a, b, d))
            c.local_offsets, c.remote_offsets, c.lengths = lo, ro, ln
            c.fragment_count = len(d)
            total += len(d)
        self.fragments = total
        self._results = (c_int32 * max(total, 1))()
        for i in range(total):
            self._results[i] = 1  # not yet known
        if callback is None:
            self._cfn = _ffi.FRAGMENT_CALLBACK()
        else:
            self._cfn = _ffi.FRAGMENT_CALLBACK(self._trampoline)
        out = c_uint64()
        check(engine._lib.tw_scatter_submit(engine._handle(), crs, len(ranges), self._cfn, None,
                                            byref(out)))
        self.id = out.value
        self._keep = keep  # local buffers must stay alive until the operation is freed
        self._freed = False
        self.result = None
        engine._ops[self.id] = self

    def _trampoline(self, _user_data, index, result):
        try:
            self._user_cb(index, result)
        except BaseException as e:  # noqa: BLE001 - reported from wait()/close()
            if self._cb_error is None:
                self._cb_error = e

    def wait(self, timeout=None):
        """Waits up to ``timeout`` seconds (None = no limit) and returns the list of
        per-fragment results. Raises :class:`TransferTimeout` if fragments are still in flight
        (wait again), :class:`CallbackError` if a callback raised."""
        if self._freed:
            return self._final()
        eng = self._engine
        rc = eng._lib.tw_scatter_wait(eng._handle(), self.id, _timeout_ms(timeout),
                                      self._results, len(self._results))
        if rc == _ffi.TW_ERR_TIMEOUT or any(r == 1 for r in self._results[: self.fragments]):
            check(rc)  # still in flight, or the wait itself failed
        self.result = rc
        return self._final()

    def _final(self):
        if self._cb_error is not None:
            err = CallbackError(_ffi.TW_ERR_INTERNAL, f"fragment callback raised: "
                                                      f"{self._cb_error!r}")
            err.__cause__ = self._cb_error
            err.results = list(self._results[: self.fragments])
            raise err
        return list(self._results[: self.fragments])

    @property
    def results(self):
        """Per-fragment results known so far (1 = not finished yet)."""
        return list(self._results[: self.fragments])

    def close(self):
        """Waits for physical completion (firing the remaining callbacks), then frees the
        operation. Idempotent."""
        with self._lock:
            if self._freed:
                return
            self._freed = True
        eng = self._engine
        eng._ops.pop(self.id, None)
        if not eng.closed:
            h = eng._handle()
            eng._lib.tw_scatter_wait(h, self.id, -1, self._results, len(self._results))
            eng._lib.tw_scatter_free(h, self.id)
        self._keep = []

    free = close


    def __repr__(self):
        return f"<ScatterOp {getattr(self, 'id', 0):#x} fragments={self.fragments}>"


class StreamOp(_Owned):
    """A transfer ordered on a CUDA stream (:meth:`Engine.transfer_on_stream`): ``status()``,
    ``wait(timeout)``; ``close`` frees it once finished."""

    def __init__(self, engine, op_id, keep):
        self._engine = engine
        self.id = op_id
        self._keep = keep
        self._freed = False

    def status(self):
        """:class:`TaskStatus` of the operation (WAITING until the stream reached it and it
        finished)."""
        st = _CStatus()
        check(self._engine._lib.tw_stream_op_status(self._engine._handle(), self.id, byref(st)))
        return TaskStatus(TaskState(st.state), st.result, st.transferred_bytes)

    def wait(self, timeout=None):
        """Waits for the operation (``timeout`` in seconds, None = no limit); raises its error,
        or :class:`TransferTimeout` (nothing is cancelled)."""
        check(self._engine._lib.tw_stream_op_wait(self._engine._handle(), self.id,
                                                  _timeout_ms(timeout)))

    def close(self):
        """Frees the operation. Raises :class:`Busy` while it has not finished. Idempotent."""
        if self._freed:
            return
        eng = self._engine
        if not eng.closed:
            check(eng._lib.tw_stream_op_free(eng._handle(), self.id))
        self._freed = True
        self._keep = []

    free = close

    def __repr__(self):
        return f"<StreamOp {self.id:#x}>"


class Engine(_Owned):
    """A tidewire engine. Keyword options map to the library's configuration keys
    (:data:`CONFIG_KEYS`), e.g. ``Engine(metadata="P2PHANDSHAKE", local_server_name="127.0.0.1",
    tcp_lanes=4)``. Use as a context manager or call :meth:`close`."""

    def __init__(self, **options):
        lib = _ffi.lib()
        self._guard = CallGuard()
        self._lib = GuardedLib(lib, self._guard)  # every call counted: close waits for them
        self._eng = None
        self._ops = weakref.WeakValueDictionary()
        self._parked = {}  # batch id -> buffers it uses: freed once its work has finished
        self._park_lock = threading.Lock()
        cfg = c_void_p()
        check(lib.tw_config_new(byref(cfg)))
        try:
            for key, value in options.items():
                if value is None:
                    continue
                if isinstance(value, bool):
                    value = int(value)
                check(lib.tw_config_set(cfg, key.encode(), str(value).encode()))
            eng = c_void_p()
            check(lib.tw_engine_new(cfg, byref(eng)))
        finally:
            lib.tw_config_free(cfg)
        self._eng = eng
        buf = ctypes.create_string_buffer(1024)
        check(lib.tw_engine_segment_name(eng, buf, len(buf)))
        self.name = buf.value.decode()
        port = c_uint16()
        check(lib.tw_engine_rpc_port(eng, byref(port)))
        self.rpc_port = port.value

    # ----------------------------------------------------------------------------------------
    @property
    def closed(self):
        """True once :meth:`close` started."""
        return self._eng is None or self._guard.closing

    @property
    def handle(self):
        """The native ``tw_engine *`` (a ``ctypes.c_void_p``), for C code that takes one.
        Valid until :meth:`close`."""
        return self._handle()

    def _handle(self):
        eng = self._eng
        if eng is None or self._guard.closing:
            raise Shutdown(_ffi.TW_ERR_SHUTDOWN, "engine is closed")
        return eng

    def close(self, timeout=10.0):
        """Frees outstanding scatter operations (their callbacks fire), then stops the engine
        (work still in flight fails). Idempotent and thread-safe: calls made from other threads
        after it started raise :class:`Shutdown`; it waits up to ``timeout`` seconds for the
        calls already inside the library to return before the engine is freed (if some are
        still there then, the last of them to return frees it). The handle is never freed
        under a running call."""
        if self._eng is None or self._guard.closing:
            return
        for op in list(self._ops.values()):
            try:
                op.close()
            except Exception:
                pass
        raw, eng = self._lib._raw, self._eng

        def release():
            self._eng = None
            raw.tw_engine_free(eng)
            self._parked = {}

        self._guard.close(release, timeout)

    def __repr__(self):
        return f"<tidewire.Engine {self.name!r}{' closed' if self.closed else ''}>"

    # ----------------------------------------------------------------------------------------
    # memory
    # ----------------------------------------------------------------------------------------
    def register(self, buf, length=None, location="*", remote_accessible=True):
        """Registers a buffer (or ``length`` bytes at an int address) and returns a
        :class:`Registration`. Peers can never touch a range registered with
        ``remote_accessible=False``. Registering the exact same range again is counted (each
        registration is dropped separately); a partial overlap raises
        :class:`AddressOverlapped`."""
        addr, size, keep = buffer_address(buf, length)
        location = "*" if location is None else location
        if addr == 0:
            raise error_for(_ffi.TW_ERR_INVALID_ARGUMENT, "cannot register an empty buffer")
        check(self._lib.tw_memory_register(self._handle(), addr, size, location.encode(),
                                           bool(remote_accessible)))
        return Registration(self, addr, size, location, bool(remote_accessible), keep)

    def register_many(self, ranges, location="*"):
        """Registers several ranges, all or none (remote accessible), and returns their
        :class:`Registration` objects. ``ranges``: ``(address, length)`` pairs of ints."""
        ranges = list(ranges)
        n = len(ranges)
        words = array(U64, (0, 0)) * n
        words[0::2] = array(U64, (r[0] for r in ranges))
        words[1::2] = array(U64, (r[1] for r in ranges))
        bufs = (_CBuffer * n).from_buffer(words) if n else None
        check(self._lib.tw_memory_register_batch(self._handle(), bufs, n, location.encode()))
        return [Registration(self, a, ln, location, True, None) for a, ln in ranges]

    def unregister(self, addr):
        """Drops one registration of the range starting at ``addr`` (an int, a
        :class:`Registration` or a buffer)."""
        if isinstance(addr, Registration):
            addr.close()
            return
        if not isinstance(addr, int):
            addr = buffer_address(addr)[0]
        check(self._lib.tw_memory_unregister(self._handle(), addr))

    def alloc_shared(self, length):
        """Allocates ``length`` zeroed bytes of memory shared with same-host peers (memfd-backed,
        registered remote-accessible) and returns the address (an int). Verified tidewire peers
        on this host map it and copy with memcpy; others reach it like any registered memory.
        Release it with :meth:`free_shared`; what is left is released when the engine closes."""
        out = c_void_p()
        check(self._lib.tw_memory_alloc_shared(self._handle(), int(length), byref(out)))
        return out.value

    def free_shared(self, addr):
        """Unregisters and releases a buffer from :meth:`alloc_shared`; when this returns no
        peer byte lands in it. Raises :class:`InvalidArgument` for any other address."""
        check(self._lib.tw_memory_free_shared(self._handle(), addr))

    def memory_location(self, addr):
        """Where ``addr`` lives, as the library sees it: ``"cpu:N"``, ``"cuda:N"`` or
        ``"*"``."""
        buf = ctypes.create_string_buffer(64)
        check(self._lib.tw_memory_location(self._handle(), addr, buf, len(buf)))
        return buf.value.decode()

    # ----------------------------------------------------------------------------------------
    # segments
    # ----------------------------------------------------------------------------------------
    def open_segment(self, name):
        """Opens a peer's segment by name (its own name gives segment 0)."""
        if not isinstance(name, str):
            raise TypeError("segment name must be str")
        out = c_int32()
        check(self._lib.tw_segment_open(self._handle(), name.encode(), byref(out)))
        return Segment(self, out.value, name)

    def _segment_id(self, segment):
        if isinstance(segment, Segment):
            return segment.id
        if isinstance(segment, str):
            return self.open_segment(segment).id
        if isinstance(segment, int) and not isinstance(segment, bool):
            return segment
        raise TypeError(f"segment must be a Segment, an id or a name, not "
                        f"{type(segment).__name__}")

    def descriptor(self, segment=LOCAL_SEGMENT):
        """The cached descriptor of an open segment (0 = this engine) as a dict."""
        seg = self._segment_id(segment)
        needed = c_size_t(0)
        size = 4096
        for _ in range(8):
            buf = ctypes.create_string_buffer(size)
            rc = self._lib.tw_segment_descriptor(self._handle(), seg, buf, size, byref(needed))
            if rc == _ffi.TW_ERR_BUFFER_TOO_SMALL:
                size = max(needed.value, size * 2)
                continue
            check(rc)
            return json.loads(buf.value.decode("utf-8", "replace"))
        raise error_for(_ffi.TW_ERR_BUFFER_TOO_SMALL, "descriptor keeps growing")

    def refresh_segment(self, segment):
        """Re-fetches an open segment's descriptor (after the peer registered more memory)."""
        check(self._lib.tw_segment_refresh(self._handle(), self._segment_id(segment)))

    def probe(self, name):
        """Checks that the peer ``name`` answers on its RPC port (raises otherwise)."""
        check(self._lib.tw_engine_probe(self._handle(), name.encode()))

    # ----------------------------------------------------------------------------------------
    # transfers
    # ----------------------------------------------------------------------------------------
    def _requests(self, requests):
        """``(ctypes array or None, count, buffers to keep alive)``."""
        if isinstance(requests, RequestArray):
            return requests.array, requests.count, [requests]
        reqs = list(requests)
        arr = (_CRequest * len(reqs))() if reqs else None
        keep = []
        for i, r in enumerate(reqs):
            if not isinstance(r, Request):
                r = Request(*r)
            c = arr[i]
            c.opcode = int(r.opcode)
            c.segment = self._segment_id(r.segment)
            if r.local is None:
                if r.length is None:
                    raise TypeError("request without a local buffer or a length")
                addr, size = 0, r.length  # NULL: the library rejects it
            else:
                addr, size, k = buffer_address(r.local, r.length)
                if k is not None:
                    keep.append(k)
            c.local_addr = addr
            c.remote_addr = r.remote
            c.length = size
        return arr, len(reqs), keep

    def batch(self, capacity):
        """Allocates a :class:`Batch` holding up to ``capacity`` requests."""
        return Batch(self, capacity)

    def _free_or_park(self, bid, keep):
        """Frees a batch, or keeps it (and its buffers) to free once its work has finished."""
        if self._lib.tw_batch_free(self._handle(), bid) == _ffi.TW_ERR_BUSY:
            with self._park_lock:
                self._parked[bid] = keep

    def reap(self):
        """Frees the batches abandoned while in flight (after a timeout) whose work has
        finished since; returns how many are still in flight. Called by every transfer."""
        if not self._parked or self.closed:
            return 0
        free, h = self._lib.tw_batch_free, self._eng
        with self._park_lock:
            try:
                for bid in list(self._parked):
                    if free(h, bid) != _ffi.TW_ERR_BUSY:
                        del self._parked[bid]
            except Shutdown:
                return 0
            return len(self._parked)

    @property
    def parked(self):
        """Ids of the batches abandoned while in flight and not freed yet (see :meth:`reap`)."""
        return list(self._parked)

    def _run(self, arr, n, keep, timeout_ms, notify, s=None):
        """One batch: alloc, submit, wait, free (parked when the wait ran out). Counted in
        the call guard once for the four calls (the hot path)."""
        guard = self._guard
        guard.enter()  # raises Shutdown once close() started
        try:
            self._run_guarded(self._lib._raw, self._eng, arr, n, keep, timeout_ms, notify,
                              _scratch() if s is None else s)
        finally:
            guard.leave()
        if self._parked:
            self.reap()

    def _run_guarded(self, lib, h, arr, n, keep, timeout_ms, notify, s):
        check(lib.tw_batch_alloc(h, n, s.bid_ref))
        bid = s.bid.value
        if notify is None:
            rc = lib.tw_batch_submit_and_wait(h, bid, arr, n, timeout_ms)
        else:
            rc = lib.tw_batch_submit_with_notify(h, bid, arr, n, notify[0].encode(),
                                                 notify[1].encode())
            if rc == 0:
                rc = lib.tw_batch_wait(h, bid, timeout_ms)
        err = error_for(rc) if rc else None  # before free() replaces the thread's message
        if lib.tw_batch_free(h, bid) == _ffi.TW_ERR_BUSY:
            with self._park_lock:
                self._parked[bid] = keep  # timed out, still in flight: freed later
        if err is not None:
            raise err

    def transfer(self, requests, timeout=None, notify=None):
        """Runs requests (a list of :class:`Request` or a :class:`RequestArray`) as one batch
        and waits (``timeout`` seconds, None = no limit). Raises the first failure. After a
        :class:`TransferTimeout` the work goes on; the engine frees its batch once it ends."""
        if notify is not None and not isinstance(notify, tuple):
            notify = tuple(notify)
        arr, n, keep = self._requests(requests)
        self._run(arr, n, keep, _timeout_ms(timeout), notify)

    def _one(self, opcode, segment, local, remote, length, timeout_ms, notify):
        """One request, waited for (``timeout_ms`` < 0: no limit). The single-request path of
        :meth:`read`/:meth:`write` and of Mooncake's ``transfer_sync_*``: nothing is allocated
        per call."""
        if local is None or type(local) is int:
            if length is None:
                raise TypeError("length is required when local is an int address")
            addr, size, keep = local or 0, length, None
        else:
            addr, size, keep = buffer_address(local, length)
        seg = segment if type(segment) is int else self._segment_id(segment)
        s = _scratch()
        req = s.req
        req.opcode = opcode
        req.segment = seg
        req.local_addr = addr
        req.remote_addr = remote
        req.length = size
        self._run(s.req_ref, 1, keep, timeout_ms, notify, s)

    def read(self, segment, local, remote, length=None, timeout=None, notify=None):
        """Reads ``length`` bytes (default: the local buffer's size) from ``remote`` in
        ``segment`` into ``local`` (a buffer or an int address); ``notify=(name, msg)`` is
        delivered once it completed."""
        self._one(0, segment, local, remote, length, _timeout_ms(timeout), notify)

    def write(self, segment, local, remote, length=None, timeout=None, notify=None):
        """Writes ``length`` bytes (default: the local buffer's size) from ``local`` to
        ``remote`` in ``segment``; ``notify=(name, msg)`` is delivered once it completed."""
        self._one(1, segment, local, remote, length, _timeout_ms(timeout), notify)

    def scatter(self, ranges, callback=None):
        """Submits a scatter operation over :class:`ScatterRange` objects and returns a
        :class:`ScatterOp`. Per-fragment problems (bounds, unregistered memory, unknown
        segment) fail only those fragments."""
        return ScatterOp(self, list(ranges), callback)

    def transfer_on_stream(self, requests, stream, track=True):
        """Orders requests on a CUDA stream (``stream``: a ``cudaStream_t``/``CUstream`` as an
        int; 0 = the legacy default stream): they start when the stream reaches this point, and
        later work on the stream waits for them. Segments and local ranges are checked now
        (errors raise here). Returns a :class:`StreamOp`, or None with ``track=False`` (then
        the operation frees itself and later failures are only logged). Raises
        :class:`Unsupported` without a CUDA driver."""
        arr, n, keep = self._requests(requests)
        out = c_uint64()
        check(self._lib.tw_transfer_on_stream(self._handle(), arr, n, c_void_p(stream or None),
                                              byref(out) if track else None))
        return StreamOp(self, out.value, keep) if track else None

    # ----------------------------------------------------------------------------------------
    # notifications
    # ----------------------------------------------------------------------------------------
    def notify(self, segment, name, msg):
        """Sends a notification (``name``, ``msg``) to the owner of ``segment``."""
        check(self._lib.tw_notify_send(self._handle(), self._segment_id(segment),
                                       name.encode(), msg.encode()))

    def take_notifications(self):
        """Takes every notification received so far (a list of :class:`Notification`)."""
        lst = ctypes.POINTER(_CNotification)()
        count = c_size_t(0)
        check(self._lib.tw_notify_take(self._handle(), byref(lst), byref(count)))
        if not lst:
            return []
        try:
            return [Notification((lst[i].name or b"").decode("utf-8", "replace"),
                                 (lst[i].msg or b"").decode("utf-8", "replace"))
                    for i in range(count.value)]
        finally:
            self._lib.tw_notifications_free(lst, count.value)
