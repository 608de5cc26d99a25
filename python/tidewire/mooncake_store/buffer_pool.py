"""Mooncake's buffer pools: :class:`BufferPool` hands out :class:`BufferLease` s, regions of
host memory registered with a store client, ready for the zero-copy calls (``put_from``,
``get_into``, ``batch_*_from``/``_into``). ``RegisteredBufferPool``, ``RegisteredBufferLease``
and ``RegisteredBufferLeaseView`` are the same classes under Mooncake's other names::

    pool = BufferPool(store)                 # a set-up MooncakeDistributedStore
    with pool.acquire(n) as lease:           # n bytes at lease.ptr
        lease.buffer[:n] = data              # a writable memoryview ("B", n bytes)
        store.put_from(key, lease.ptr, n)

As in Mooncake:

- the pool's capacity starts from the client's ``local_buffer_size`` (a client without one is
  refused): ``max_bytes=0`` allows twice that, a larger ``max_bytes`` that much, a smaller one
  the local buffer size; a request above the capacity raises at once;
- a lease is ``max(size, 1)`` bytes of its own; ``lease.size`` is the size asked for;
  releasing it (``release()``, the ``with`` block's end, or the lease being collected) gives
  the memory back and wakes waiting ``acquire`` calls;
- when the capacity (or ``max_regions`` leases) is in use, ``acquire`` waits (``block``,
  default ``block_on_exhaustion``) up to ``timeout`` seconds (default ``default_timeout``, None
  for ever) or raises ``RuntimeError``: "buffer pool is exhausted" (not blocking), "timed out
  waiting for buffer";
- ``release()`` refuses while a ``lease.buffer`` view is alive; ``close()`` refuses while
  leases are held, and a closed pool refuses ``acquire``; ``prewarm`` does nothing
  (Mooncake's does nothing either); ``min_size_class`` and ``max_size_class`` are checked and
  kept, and change no allocation.

Memory: Mooncake carves leases out of the client's registered local buffer and, past it,
allocates ``alignment``-aligned overflow regions and registers them (``register_buffer``).
tidewire's client has no local buffer to carve from, so every lease here is a region of its
own: 4 KiB aligned while the leases fit in the local buffer size, ``alignment``-aligned past it,
each registered with ``store.register_buffer`` when it is made and unregistered and freed when
it is released. A failed registration raises ``RuntimeError``; a failed unregistration (the
client still set up) raises and leaves that region allocated, never freed under a
registration. The pool is thread-safe; a lease is used by one thread at a time."""

from __future__ import annotations

import ctypes
import functools
import threading
import time
from typing import Any, Dict, Optional, Set, Type

from .host_memory import host_alloc, host_free

__all__ = [
    "BufferLease", "BufferLeaseView", "BufferPool", "RegisteredBufferLease",
    "RegisteredBufferLeaseView", "RegisteredBufferPool",
]

#: Alignment of the regions within the local buffer size (a page).
_LOCAL_ALIGNMENT = 4096
_SIZE_T_MAX = (1 << 64) - 1


def _size_t(value: Any, where: str) -> int:
    """``value`` as pybind's ``size_t`` argument takes it: a non-negative int, else TypeError."""
    if isinstance(value, int) and 0 <= value <= _SIZE_T_MAX:
        return int(value)
    raise TypeError(f"{where}: incompatible function arguments "
                    f"(expected a non-negative int, got {value!r})")


def _cast_size_t(value: Any) -> int:
    """An optional argument cast to ``size_t`` (pybind's ``cast``: RuntimeError if it cannot)."""
    if isinstance(value, int) and 0 <= value <= _SIZE_T_MAX:
        return int(value)
    raise RuntimeError(f"Unable to cast Python instance of type {type(value)} to C++ type "
                       f"'unsigned long'")


def _cast_double(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise RuntimeError(f"Unable to cast Python instance of type {type(value)} to C++ type "
                           f"'double'") from None


class _Region:
    """A lease's memory: ``size`` bytes at ``ptr``, registered with the store."""

    __slots__ = ("ptr", "size", "overflow")

    def __init__(self, ptr: int, size: int, overflow: bool) -> None:
        self.ptr, self.size, self.overflow = ptr, size, overflow


class BufferLeaseView:
    """What a lease's ``buffer`` is a view of: the lease's bytes as a buffer (format ``B``).
    While one is alive its lease cannot be released. Made only by ``BufferLease.buffer``.

    Each view is an instance of a subclass of this class and of a ctypes byte array at the
    lease's address (that is what makes it a buffer on every Python version)."""

    _lease: "BufferLease"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("tidewire.store.BufferLeaseView: No constructor defined!")

    @property
    def buffer(self) -> memoryview:
        """A writable memoryview of the lease's bytes (unsigned bytes, one dimension)."""
        view: Any = self
        return memoryview(view).cast("B")

    def __del__(self) -> None:
        lease = self.__dict__.pop("_lease", None)
        if lease is not None:
            lease._drop_export()


@functools.lru_cache(maxsize=256)
def _view_class(n: int) -> Type[Any]:
    return type("BufferLeaseView", (BufferLeaseView, ctypes.c_ubyte * n), {})


class BufferLease:
    """A region of a :class:`BufferPool`: ``size`` bytes at ``ptr`` (registered with the pool's
    store), until :meth:`release` (or the ``with`` block's end, or collection) gives it back.
    Made only by ``BufferPool.acquire``/``buffer``."""

    _pool: Optional["BufferPool"]
    _region: Optional[_Region]
    _size: int
    _exports: int
    _lock: threading.Lock

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("tidewire.store.BufferLease: No constructor defined!")

    @classmethod
    def _make(cls, pool: "BufferPool", region: _Region, size: int) -> "BufferLease":
        lease: BufferLease = object.__new__(cls)
        lease._pool, lease._region, lease._size = pool, region, size
        lease._exports, lease._lock = 0, threading.Lock()
        return lease

    @property
    def ptr(self) -> int:
        """Address of the bytes; ``RuntimeError`` once released."""
        region = self._region
        if region is None:
            raise RuntimeError("buffer lease is closed")
        return region.ptr

    @property
    def size(self) -> int:
        """The size asked for (also after release)."""
        return self._size

    @property
    def buffer(self) -> memoryview:
        """A writable memoryview of the ``size`` bytes (format ``B``); its ``obj`` is a
        :class:`BufferLeaseView`. ``BufferError`` once released."""
        with self._lock:
            region = self._region
            if region is None:
                raise BufferError("Error getting buffer")
            view = _view_class(self._size).from_address(region.ptr)
            view._lease = self
            self._exports += 1
        mv: memoryview = view.buffer
        return mv

    def _drop_export(self) -> None:
        with self._lock:
            self._exports -= 1

    def release(self) -> None:
        """Gives the memory back to the pool (a second call does nothing). ``RuntimeError``
        while a view from ``buffer`` is alive."""
        self._release(check_views=True)

    def _release(self, check_views: bool) -> None:
        with self._lock:
            region, pool = self._region, self._pool
            if region is None or pool is None:
                return
            if check_views and self._exports != 0:
                raise RuntimeError("cannot release buffer while exported views exist")
            self._region = self._pool = None
        pool._release(region)

    def __enter__(self) -> "BufferLease":
        return self

    def __exit__(self, arg0: object, arg1: object, arg2: object, /) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self._release(check_views=False)
        except Exception:  # interpreter shutdown, or an unregistration that failed
            pass

    def __repr__(self) -> str:
        state = "released" if self._region is None else f"ptr={self._region.ptr:#x}"
        return f"<BufferLease size={self._size} {state}>"


def _store_of(store: Any) -> Any:
    """The set-up tidewire client behind ``store`` (Mooncake's checks and messages)."""
    from .client import MooncakeDistributedStore

    if store is None:
        raise RuntimeError("MooncakeDistributedStore is not initialized")
    if not isinstance(store, MooncakeDistributedStore):
        raise RuntimeError("BufferPool store parameter must be a PyClient or store wrapper "
                           "that implements _get_pyclient_capsule()")
    if getattr(store, "_h", None) is None and getattr(store, "_dummy", None) is None:
        raise RuntimeError("MooncakeDistributedStore is not initialized")
    return store


class BufferPool:
    """Leases of registered host memory over a set-up ``MooncakeDistributedStore`` (see the
    module's documentation for Mooncake's rules it follows)."""

    def __init__(self, store: object, max_bytes: int = 0, min_size_class: int = 65536,
                 max_size_class: object = None, alignment: int = 8388608,
                 block_on_exhaustion: bool = True, default_timeout: object = None,
                 max_regions: object = None, prewarm_size: object = None,
                 prewarm_count: int = 0) -> None:
        where = "BufferPool.__init__()"
        max_bytes = _size_t(max_bytes, where)
        min_size_class = _size_t(min_size_class, where)
        alignment = _size_t(alignment, where)
        prewarm_count = _size_t(prewarm_count, where)
        self._store = _store_of(store)
        if min_size_class == 0 or alignment == 0:
            raise RuntimeError("min_size_class and alignment must be positive")
        if alignment < ctypes.sizeof(ctypes.c_void_p) or alignment & (alignment - 1):
            raise RuntimeError("alignment must be a power of two and at least sizeof(void*)")
        local = int(getattr(self._store, "_local_buffer_size", 0) or 0)
        if self._store._dummy is not None or local == 0:
            raise RuntimeError("BufferPool requires a store configured with a local buffer")
        self._local_capacity = local
        if max_bytes == 0:
            self._max_bytes = local if local > _SIZE_T_MAX - local else local * 2
        else:
            self._max_bytes = max(max_bytes, local)
        self._min_size_class = min_size_class
        self._max_size_class = (self._max_bytes if max_size_class is None
                                else _cast_size_t(max_size_class))
        self._alignment = alignment
        self._block = bool(block_on_exhaustion)
        self._default_timeout = (None if default_timeout is None
                                 else _cast_double(default_timeout))
        self._max_regions = None if max_regions is None else _cast_size_t(max_regions)
        self._cond = threading.Condition(threading.Lock())
        self._regions: Dict[int, _Region] = {}
        self._in_use: Set[int] = set()
        self._closed = self._closing = False
        self._total = self._reserved = self._reserved_regions = self._local_used = 0
        if prewarm_size is not None and prewarm_count > 0:
            self.prewarm(_cast_size_t(prewarm_size), prewarm_count)

    # ------------------------------------------------------------------ leases
    def acquire(self, size: int, block: object = None, timeout: object = None) -> BufferLease:
        """A lease of ``size`` bytes. Waits for room when ``block`` (default: the pool's
        ``block_on_exhaustion``) up to ``timeout`` seconds (default: ``default_timeout``; None:
        for ever). ``RuntimeError``: above the pool's capacity, exhausted (not blocking), timed
        out, closed or closing, a negative timeout, a failed registration."""
        size = _size_t(size, "acquire()")
        should_block = self._block if block is None else bool(block)
        timeout_s = self._default_timeout if timeout is None else _cast_double(timeout)
        if timeout_s is not None and timeout_s < 0:
            raise RuntimeError("timeout must be non-negative")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        if max(size, 1) > self._max_bytes:
            raise RuntimeError("requested buffer size exceeds pool capacity")
        with self._cond:
            while True:
                self._raise_if_not_open()
                region = self._try_acquire(size)
                if region is not None:
                    self._in_use.add(region.ptr)
                    return BufferLease._make(self, region, size)
                if not should_block:
                    raise RuntimeError("buffer pool is exhausted")
                if deadline is None:
                    self._cond.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise RuntimeError("timed out waiting for buffer")
                    self._cond.wait(left)

    def buffer(self, size: int, block: object = None, timeout: object = None) -> BufferLease:
        """:meth:`acquire` under its other name."""
        return self.acquire(size, block, timeout)

    def prewarm(self, size: int, count: int) -> None:
        """Does nothing (as Mooncake's): leases are made when acquired."""
        _size_t(size, "prewarm()")
        _size_t(count, "prewarm()")

    def close(self) -> None:
        """Closes the pool once in-flight allocations finish: ``acquire`` refuses from then
        on. ``RuntimeError`` (and the pool stays open) while leases are held. A second call
        does nothing."""
        with self._cond:
            if self._closed:
                return
            self._closing = True
            self._cond.wait_for(lambda: self._reserved_regions == 0)
            self._closing = False
            if self._in_use:
                self._cond.notify_all()
                raise RuntimeError("cannot close buffer pool with active leases")
            self._closed = True
            self._cond.notify_all()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ internals
    def _raise_if_not_open(self) -> None:
        if self._closed:
            raise RuntimeError("buffer pool is closed")
        if self._closing:
            raise RuntimeError("buffer pool is closing")

    def _has_capacity(self, size: int) -> bool:
        if size > self._max_bytes - self._total - self._reserved:
            return False
        return (self._max_regions is None
                or len(self._in_use) + self._reserved_regions < self._max_regions)

    def _try_acquire(self, requested: int) -> Optional[_Region]:
        """A new region for ``requested`` bytes, or None when there is no room (or no memory).
        Called and returns with the lock held; allocates and registers without it."""
        size = max(requested, 1)
        if not self._has_capacity(size):
            return None
        overflow = self._local_used + size > self._local_capacity
        self._reserved += size
        self._reserved_regions += 1
        if not overflow:
            self._local_used += size
        self._cond.release()
        try:
            region = self._allocate(size, overflow)
        except BaseException:
            self._cond.acquire()
            self._unreserve(size, overflow, undo_local=True)
            raise
        self._cond.acquire()
        self._unreserve(size, overflow, undo_local=region is None)
        if region is None:
            return None
        if self._closing or self._closed:
            self._cond.release()
            try:
                self._free(region)
            finally:
                self._cond.acquire()
                if not overflow:
                    self._local_used -= size
            raise RuntimeError("buffer pool is closing")
        self._regions[region.ptr] = region
        self._total += size
        return region

    def _unreserve(self, size: int, overflow: bool, undo_local: bool) -> None:
        self._reserved -= size
        self._reserved_regions -= 1
        if undo_local and not overflow:
            self._local_used -= size
        self._cond.notify_all()

    def _allocate(self, size: int, overflow: bool) -> Optional[_Region]:
        ptr = host_alloc(size, self._alignment if overflow else _LOCAL_ALIGNMENT)
        if not ptr:
            return None
        if self._store.register_buffer(ptr, size) != 0:
            host_free(ptr)
            raise RuntimeError("overflow buffer registration failed" if overflow
                               else "buffer registration failed")
        return _Region(ptr, size, overflow)

    def _free(self, region: _Region) -> None:
        """Unregisters and frees a region (keeps it when the unregistration fails while the
        client is still set up: memory is never freed under a registration)."""
        rc = self._store.unregister_buffer(region.ptr)
        if rc != 0 and getattr(self._store, "_h", None) is not None:
            raise RuntimeError("overflow buffer unregistration failed" if region.overflow
                               else "buffer unregistration failed")
        host_free(region.ptr)

    def _release(self, region: _Region) -> None:
        with self._cond:
            if region.ptr not in self._in_use:
                raise RuntimeError("buffer lease is not active")
            self._in_use.discard(region.ptr)
            del self._regions[region.ptr]
            self._total -= region.size
        try:
            self._free(region)
        finally:
            with self._cond:
                if not region.overflow:
                    self._local_used -= region.size
                self._cond.notify_all()


RegisteredBufferPool = BufferPool
RegisteredBufferLease = BufferLease
RegisteredBufferLeaseView = BufferLeaseView
