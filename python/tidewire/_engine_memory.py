"""The memory methods of :class:`tidewire.engine.TransferEngine` (registration, managed
buffers, raw byte copies), a mixin: they use the engine's ``_engine``, ``_live``, ``_lock``,
``_regs`` and ``_managed``, set up by ``TransferEngine.__init__``. (``ctypes`` is used here only
to copy bytes at raw addresses.)"""

from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence

from ._engine_util import _FAILURES, _code

if TYPE_CHECKING:
    from .core import Engine, Registration


class _MemoryMethods:
    """Mooncake's memory methods: 0 or a negative ``error.h`` code, as documented on each."""

    # Provided by TransferEngine.
    _engine: Optional[Engine]
    _live: Callable[[], Optional[Engine]]
    _lock: threading.Lock
    _regs: Dict[int, List[Registration]]
    _managed: Dict[int, int]

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
