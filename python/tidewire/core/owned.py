"""The objects an :class:`~tidewire.Engine` hands out that own a library resource:
registrations, batches and stream-ordered operations (re-exported by :mod:`tidewire.core`)."""

from __future__ import annotations

from ctypes import byref, c_uint64
from typing import Any, List, Optional, Tuple, TypeVar

from .. import _ffi
from .._call_guard import CallGuard, guarded
from .._errors import check, error_for
from .._ffi import TransferStatus as _CStatus
from .buffers import Requests, _scratch, _timeout_ms
from .values import TaskState, TaskStatus

_T = TypeVar("_T")


class _Owned:
    """Base of the objects that own a library resource: ``with`` support and release on
    garbage collection, both through ``close()``."""

    __slots__ = ()

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:  # each subclass frees its resource
        raise NotImplementedError

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown or a closed engine: nothing left to release
            pass


@guarded
class Registration(_Owned):
    """A registered memory range; unregister with :meth:`close` (or a ``with`` block)."""

    __slots__ = ("_engine", "_guard", "addr", "length", "location", "remote_accessible", "_keep",
                 "__weakref__")

    def __init__(self, engine: Any, addr: int, length: int, location: str,
                 remote_accessible: bool, keep: Any) -> None:
        self._engine = engine
        self._guard: CallGuard = engine._guard
        self.addr = addr
        self.length = length
        self.location = location
        self.remote_accessible = remote_accessible
        self._keep = keep

    @property
    def registered(self) -> bool:
        """True until :meth:`close`."""
        return self._engine is not None

    def close(self) -> None:
        """Unregisters the range (idempotent)."""
        eng, self._engine = self._engine, None
        if eng is not None and not eng.closed:
            try:
                eng.unregister(self.addr)
            finally:
                self._keep = None
        self._keep = None

    unregister = close

    def __repr__(self) -> str:
        state = "registered" if self.registered else "closed"
        return f"<Registration {self.addr:#x}+{self.length} {state}>"


@guarded
class Batch:
    """A batch of requests: ``submit`` (any number of times, up to ``capacity`` requests in
    all), ``status(i)``, ``wait(timeout)``; ``close`` frees it. A ``with`` block waits for work
    still in flight before freeing; garbage collection never waits (a batch collected while in
    flight is freed by its engine once the work has ended, see :meth:`Engine.reap`)."""

    def __init__(self, engine: Any, capacity: int) -> None:
        self._freed = True  # until the allocation succeeds
        self._engine = engine
        self._guard: CallGuard = engine._guard
        self.capacity = capacity
        out = c_uint64()
        with self._guard.counted():
            check(engine._lib.tw_batch_alloc(engine._handle(), capacity, byref(out)))
        self.id = out.value
        self._keep: List[Any] = []
        self._count = 0
        self._freed = False

    def __len__(self) -> int:
        return self._count

    def submit(self, requests: Requests, notify: Optional[Tuple[str, str]] = None) -> "Batch":
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

    def status(self, task: int) -> TaskStatus:
        """:class:`TaskStatus` of task ``task`` (submission order from 0)."""
        st = _CStatus()
        check(self._engine._lib.tw_batch_status(self._engine._handle(), self.id, task,
                                                byref(st)))
        return TaskStatus(TaskState(st.state), st.result, st.transferred_bytes)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits for every task (``timeout`` in seconds, None = no limit). Raises the first
        failed task's error, or :class:`TransferTimeout` (the work continues)."""
        check(self._engine._lib.tw_batch_wait(self._engine._handle(), self.id,
                                              _timeout_ms(timeout)))

    @property
    def done(self) -> bool:
        """True when no task is in flight."""
        rc = self._engine._lib.tw_batch_wait(self._engine._handle(), self.id, 0)
        if rc == _ffi.TW_ERR_TIMEOUT:
            return not self._in_flight()
        return True

    def _in_flight(self) -> bool:
        lib, h, s = self._engine._lib, self._engine._handle(), _scratch()
        for task in range(self._count):
            if lib.tw_batch_status(h, self.id, task, s.st_ref) != 0:
                return False
            if s.st.state == _ffi.TW_TASK_WAITING:
                return True
        return False

    def poll(self) -> bool:
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

    def discard(self) -> None:
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

    def close(self) -> None:
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

    def _release(self) -> None:
        if self._freed or self._engine.closed:
            return
        lib, h = self._engine._lib, self._engine._handle()
        if lib.tw_batch_free(h, self.id) == _ffi.TW_ERR_BUSY:
            lib.tw_batch_wait(h, self.id, -1)  # the pinned buffers must outlive the work
            lib.tw_batch_free(h, self.id)
        self._freed = True
        self._keep = []

    def __enter__(self) -> "Batch":
        return self

    def __exit__(self, *exc: object) -> None:
        with self._guard.counted():
            self._release()

    def __del__(self) -> None:
        # A finalizer never waits for the transfer: a batch still in flight goes to its
        # engine with the buffers it uses, and is freed once its work has ended (Engine.reap,
        # which every transfer runs; Engine.close frees what is left).
        if getattr(self, "_freed", True):
            return
        self._freed = True
        try:
            eng = self._engine
            if not eng.closed:
                eng._adopt(self.id, self._keep)
        except Exception:  # interpreter shutdown or a closed engine: nothing left to release
            pass
        self._keep = []

    def __repr__(self) -> str:
        return f"<Batch {self.id:#x} tasks={self._count}/{self.capacity}>"


@guarded
class StreamOp(_Owned):
    """A transfer ordered on a CUDA stream (:meth:`Engine.transfer_on_stream`): ``status()``,
    ``wait(timeout)``; ``close`` frees it once finished."""

    def __init__(self, engine: Any, op_id: int, keep: Any) -> None:
        self._engine = engine
        self._guard: CallGuard = engine._guard
        self.id = op_id
        self._keep = keep
        self._freed = False

    def status(self) -> TaskStatus:
        """:class:`TaskStatus` of the operation (WAITING until the stream reached it and it
        finished)."""
        st = _CStatus()
        check(self._engine._lib.tw_stream_op_status(self._engine._handle(), self.id, byref(st)))
        return TaskStatus(TaskState(st.state), st.result, st.transferred_bytes)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits for the operation (``timeout`` in seconds, None = no limit); raises its error,
        or :class:`TransferTimeout` (nothing is cancelled)."""
        check(self._engine._lib.tw_stream_op_wait(self._engine._handle(), self.id,
                                                  _timeout_ms(timeout)))

    def close(self) -> None:
        """Frees the operation. Raises :class:`Busy` while it has not finished. Idempotent."""
        if self._freed:
            return
        eng = self._engine
        if not eng.closed:
            check(eng._lib.tw_stream_op_free(eng._handle(), self.id))
        self._freed = True
        self._keep = []

    free = close

    def __repr__(self) -> str:
        return f"<StreamOp {self.id:#x}>"
