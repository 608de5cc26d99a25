"""The :class:`Engine` of the pythonic API (re-exported by :mod:`tidewire.core` and
:mod:`tidewire`)."""

from __future__ import annotations

import collections
import ctypes
import json
import threading
import weakref
from array import array
from ctypes import byref, c_int32, c_size_t, c_uint16, c_uint64, c_void_p
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from .. import _ffi
from .._call_guard import CallGuard, closes, guarded
from .._errors import Shutdown, check, error_for
from .._ffi import Buffer as _CBuffer
from .._ffi import Notification as _CNotification
from .._ffi import TransferRequest as _CRequest
from .buffers import U64, RequestArray, Requests, _scratch, _timeout_ms, buffer_address
from .owned import Batch, Registration, StreamOp, _Owned
from .scatter import ScatterOp
from .values import LOCAL_SEGMENT, Notification, Request, ScatterRange, Segment, SegmentLike


@guarded
class Engine(_Owned):
    """A tidewire engine. Keyword options map to the library's configuration keys
    (:data:`CONFIG_KEYS`), e.g. ``Engine(metadata="P2PHANDSHAKE", local_server_name="127.0.0.1",
    tcp_lanes=4)``. Use as a context manager or call :meth:`close`.

    Every public method and property counts itself in the engine's call guard while it runs
    (see :mod:`tidewire._call_guard`), and so do those of the objects it hands out: ``close``
    never frees the engine under a running call."""

    def __init__(self, **options: Any) -> None:
        lib = _ffi.lib()
        self._guard = CallGuard()  # counts the public calls in flight: close waits for them
        self._lib = lib
        self._eng: Optional[c_void_p] = None
        self._ops: weakref.WeakValueDictionary[int, ScatterOp] = weakref.WeakValueDictionary()
        self._parked: Dict[int, Any] = {}  # batch id -> buffers it uses: freed once its work has finished
        self._park_lock = threading.Lock()
        # (batch id, buffers) handed over by Batch finalizers, which never wait: moved into
        # _parked by the next reap.
        self._orphans: collections.deque[Tuple[int, Any]] = collections.deque()
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
    def closed(self) -> bool:
        """True once :meth:`close` started."""
        return self._eng is None or self._guard.closing

    @property
    def handle(self) -> c_void_p:
        """The native ``tw_engine *`` (a ``ctypes.c_void_p``), for C code that takes one.
        Valid until :meth:`close`."""
        return self._handle()

    def _handle(self) -> c_void_p:
        eng = self._eng
        if eng is None or self._guard.closing:
            raise Shutdown(_ffi.TW_ERR_SHUTDOWN, "engine is closed")
        return eng

    @closes
    def close(self, timeout: float = 10.0) -> None:
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
        raw, eng = self._lib, self._eng

        def release() -> None:
            self._eng = None
            raw.tw_engine_free(eng)
            self._parked = {}
            self._orphans.clear()

        self._guard.close(release, timeout)

    def __repr__(self) -> str:
        return f"<tidewire.Engine {self.name!r}{' closed' if self.closed else ''}>"

    # ----------------------------------------------------------------------------------------
    # memory
    # ----------------------------------------------------------------------------------------
    def register(self, buf: Any, length: Optional[int] = None, location: Optional[str] = "*",
                 remote_accessible: bool = True) -> Registration:
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

    def register_many(self, ranges: Iterable[Tuple[int, int]],
                      location: str = "*") -> List[Registration]:
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

    def unregister(self, addr: Any) -> None:
        """Drops one registration of the range starting at ``addr`` (an int, a
        :class:`Registration` or a buffer)."""
        if isinstance(addr, Registration):
            addr.close()
            return
        if not isinstance(addr, int):
            addr = buffer_address(addr)[0]
        check(self._lib.tw_memory_unregister(self._handle(), addr))

    def alloc_shared(self, length: int) -> int:
        """Allocates ``length`` zeroed bytes of memory shared with same-host peers (memfd-backed,
        registered remote-accessible) and returns the address (an int). Verified tidewire peers
        on this host map it and copy with memcpy; others reach it like any registered memory.
        Release it with :meth:`free_shared`; what is left is released when the engine closes."""
        out = c_void_p()
        check(self._lib.tw_memory_alloc_shared(self._handle(), int(length), byref(out)))
        return out.value or 0

    def free_shared(self, addr: int) -> None:
        """Unregisters and releases a buffer from :meth:`alloc_shared`; when this returns no
        peer byte lands in it. Raises :class:`InvalidArgument` for any other address."""
        check(self._lib.tw_memory_free_shared(self._handle(), addr))

    def memory_location(self, addr: int) -> str:
        """Where ``addr`` lives, as the library sees it: ``"cpu:N"``, ``"cuda:N"`` or
        ``"*"``."""
        buf = ctypes.create_string_buffer(64)
        check(self._lib.tw_memory_location(self._handle(), addr, buf, len(buf)))
        return buf.value.decode()

    # ----------------------------------------------------------------------------------------
    # segments
    # ----------------------------------------------------------------------------------------
    def open_segment(self, name: str) -> Segment:
        """Opens a peer's segment by name (its own name gives segment 0)."""
        if not isinstance(name, str):
            raise TypeError("segment name must be str")
        out = c_int32()
        check(self._lib.tw_segment_open(self._handle(), name.encode(), byref(out)))
        return Segment(self, out.value, name)

    def _segment_id(self, segment: SegmentLike) -> int:
        if isinstance(segment, Segment):
            return segment.id
        if isinstance(segment, str):
            return self.open_segment(segment).id
        if isinstance(segment, int) and not isinstance(segment, bool):
            return segment
        raise TypeError(f"segment must be a Segment, an id or a name, not "
                        f"{type(segment).__name__}")

    def descriptor(self, segment: SegmentLike = LOCAL_SEGMENT) -> Dict[str, Any]:
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
            desc: Dict[str, Any] = json.loads(buf.value.decode("utf-8", "replace"))
            return desc
        raise error_for(_ffi.TW_ERR_BUFFER_TOO_SMALL, "descriptor keeps growing")

    def refresh_segment(self, segment: SegmentLike) -> None:
        """Re-fetches an open segment's descriptor (after the peer registered more memory)."""
        check(self._lib.tw_segment_refresh(self._handle(), self._segment_id(segment)))

    def probe(self, name: str) -> None:
        """Checks that the peer ``name`` answers on its RPC port (raises otherwise)."""
        check(self._lib.tw_engine_probe(self._handle(), name.encode()))

    # ----------------------------------------------------------------------------------------
    # transfers
    # ----------------------------------------------------------------------------------------
    def _requests(self, requests: Requests) -> Tuple[Any, int, List[Any]]:
        """``(ctypes array or None, count, buffers to keep alive)``."""
        if isinstance(requests, RequestArray):
            return requests.array, requests.count, [requests]
        reqs = list(requests)
        arr: Any = (_CRequest * len(reqs))() if reqs else None
        keep: List[Any] = []
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

    def batch(self, capacity: int) -> Batch:
        """Allocates a :class:`Batch` holding up to ``capacity`` requests."""
        return Batch(self, capacity)

    def _free_or_park(self, bid: int, keep: Any) -> None:
        """Frees a batch, or keeps it (and its buffers) to free once its work has finished."""
        if self._lib.tw_batch_free(self._handle(), bid) == _ffi.TW_ERR_BUSY:
            with self._park_lock:
                self._parked[bid] = keep

    def reap(self) -> int:
        """Frees the batches abandoned while in flight (after a timeout, or collected) whose
        work has finished since; returns how many are still in flight. Called by every
        transfer."""
        if (not self._parked and not self._orphans) or self.closed:
            return 0  # closed: this call is not counted, and the handle is gone or going
        with self._park_lock:
            self._reap_locked()
            return len(self._parked)

    def _reap_locked(self) -> None:
        """Under the park lock and counted in the call guard."""
        free, h = self._lib.tw_batch_free, self._eng
        while self._orphans:
            bid, keep = self._orphans.popleft()
            self._parked[bid] = keep
        for bid in list(self._parked):
            if free(h, bid) != _ffi.TW_ERR_BUSY:
                del self._parked[bid]

    def _adopt(self, bid: int, keep: Any) -> None:
        """A batch from a finalizer: freed now if that needs no waiting (no lock is taken that
        this thread might already hold), else once its work has finished (:meth:`reap`). Never
        blocks."""
        self._orphans.append((bid, keep))
        if not self._park_lock.acquire(blocking=False):
            return
        try:
            guard = self._guard
            if not guard.try_enter():
                return
            try:
                self._reap_locked()
            finally:
                guard.leave_nowait()
        finally:
            self._park_lock.release()

    @property
    def parked(self) -> List[int]:
        """Ids of the batches abandoned while in flight and not freed yet (see :meth:`reap`)."""
        return list(self._parked) + [bid for bid, _keep in list(self._orphans)]

    def _run(self, arr: Any, n: int, keep: Any, timeout_ms: int,
             notify: Optional[Tuple[str, str]], s: Any = None) -> None:
        """One batch: alloc, submit, wait, free (parked when the wait ran out), inside a
        public call counted in the call guard (the hot path)."""
        self._run_guarded(self._lib, self._handle(), arr, n, keep, timeout_ms, notify,
                          _scratch() if s is None else s)
        if self._parked or self._orphans:
            self.reap()

    def _run_guarded(self, lib: Any, h: Any, arr: Any, n: int, keep: Any, timeout_ms: int,
                     notify: Optional[Tuple[str, str]], s: Any) -> None:
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

    def transfer(self, requests: Requests, timeout: Optional[float] = None,
                 notify: Optional[Tuple[str, str]] = None) -> None:
        """Runs requests (a list of :class:`Request` or a :class:`RequestArray`) as one batch
        and waits (``timeout`` seconds, None = no limit). Raises the first failure. After a
        :class:`TransferTimeout` the work goes on; the engine frees its batch once it ends."""
        if notify is not None and not isinstance(notify, tuple):
            notify = tuple(notify)
        arr, n, keep = self._requests(requests)
        self._run(arr, n, keep, _timeout_ms(timeout), notify)

    def _one(self, opcode: int, segment: SegmentLike, local: Any, remote: int,
             length: Optional[int], timeout_ms: int, notify: Optional[Tuple[str, str]]) -> None:
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

    def read(self, segment: SegmentLike, local: Any, remote: int, length: Optional[int] = None,
             timeout: Optional[float] = None, notify: Optional[Tuple[str, str]] = None) -> None:
        """Reads ``length`` bytes (default: the local buffer's size) from ``remote`` in
        ``segment`` into ``local`` (a buffer or an int address); ``notify=(name, msg)`` is
        delivered once it completed."""
        self._one(0, segment, local, remote, length, _timeout_ms(timeout), notify)

    def write(self, segment: SegmentLike, local: Any, remote: int, length: Optional[int] = None,
              timeout: Optional[float] = None, notify: Optional[Tuple[str, str]] = None) -> None:
        """Writes ``length`` bytes (default: the local buffer's size) from ``local`` to
        ``remote`` in ``segment``; ``notify=(name, msg)`` is delivered once it completed."""
        self._one(1, segment, local, remote, length, _timeout_ms(timeout), notify)

    def scatter(self, ranges: Iterable[ScatterRange],
                callback: Optional[Callable[[int, int], None]] = None) -> ScatterOp:
        """Submits a scatter operation over :class:`ScatterRange` objects and returns a
        :class:`ScatterOp`. Per-fragment problems (bounds, unregistered memory, unknown
        segment) fail only those fragments."""
        return ScatterOp(self, list(ranges), callback)

    def transfer_on_stream(self, requests: Requests, stream: Optional[int],
                           track: bool = True) -> Optional[StreamOp]:
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
    def notify(self, segment: SegmentLike, name: str, msg: str) -> None:
        """Sends a notification (``name``, ``msg``) to the owner of ``segment``."""
        check(self._lib.tw_notify_send(self._handle(), self._segment_id(segment),
                                       name.encode(), msg.encode()))

    def take_notifications(self) -> List[Notification]:
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
