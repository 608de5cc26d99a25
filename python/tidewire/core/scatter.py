"""Scatter operations: per-fragment results and callbacks (re-exported by
:mod:`tidewire.core`)."""

from __future__ import annotations

import threading
from ctypes import byref, c_int32, c_uint64
from typing import Any, Callable, List, Optional

from .. import _ffi
from .._call_guard import CallGuard, guarded
from .._errors import CallbackError, check
from .._ffi import ScatterRange as _CScatterRange
from .buffers import _size_array, _timeout_ms, buffer_address
from .owned import _Owned
from .values import ScatterRange


@guarded
class ScatterOp(_Owned):
    """A submitted scatter operation. ``wait(timeout)`` returns the per-fragment results
    (0 = success, else a negative code); ``close`` waits for physical completion and frees it.
    The callback (if any) is called exactly once per fragment, as ``callback(index, result)``,
    on the thread in ``wait`` or ``close``."""

    def __init__(self, engine: Any, ranges: List[ScatterRange],
                 callback: Optional[Callable[[int, int], None]]) -> None:
        self._engine = engine
        self._guard: CallGuard = engine._guard
        self._freed = True  # until the submit succeeds
        self.id = 0
        self._user_cb = callback
        self._cb_error: Optional[BaseException] = None
        self._lock = threading.Lock()
        crs: Any = (_CScatterRange * len(ranges))() if ranges else None
        keep: List[Any] = []
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
        with self._guard.counted():
            check(engine._lib.tw_scatter_submit(engine._handle(), crs, len(ranges), self._cfn,
                                                None, byref(out)))
        self.id = out.value
        self._keep = keep  # local buffers must stay alive until the operation is freed
        self._freed = False
        self.result = None
        engine._ops[self.id] = self

    def _trampoline(self, _user_data: Any, index: int, result: int) -> None:
        try:
            if self._user_cb is not None:
                self._user_cb(index, result)
        except BaseException as e:  # noqa: BLE001 - reported from wait()/close()
            if self._cb_error is None:
                self._cb_error = e

    def wait(self, timeout: Optional[float] = None) -> List[int]:
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

    def _final(self) -> List[int]:
        if self._cb_error is not None:
            err = CallbackError(_ffi.TW_ERR_INTERNAL, f"fragment callback raised: "
                                                      f"{self._cb_error!r}")
            err.__cause__ = self._cb_error
            err.results = list(self._results[: self.fragments])
            raise err
        return list(self._results[: self.fragments])

    @property
    def results(self) -> List[int]:
        """Per-fragment results known so far (1 = not finished yet)."""
        return list(self._results[: self.fragments])

    def close(self) -> None:
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


    def __repr__(self) -> str:
        return f"<ScatterOp {getattr(self, 'id', 0):#x} fragments={self.fragments}>"
