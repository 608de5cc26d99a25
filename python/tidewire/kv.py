"""The pythonic Store: :class:`Store`, beside the Mooncake-compatible class.

:class:`tidewire.store.MooncakeDistributedStore` keeps Mooncake's conventions (codes returned,
``b''`` for a missing key). :class:`Store` is built on it for new code: failures raise
:class:`StoreError` subclasses that carry the code and the message, and the client and its
buffer registrations are context managers::

    import tidewire

    with tidewire.Store("127.0.0.1:50051", segment_size=64 << 20) as s:
        s.put("k", b"value")              # create-only; s.upsert replaces
        assert s.get("k") == b"value"     # tidewire.ObjectNotFound when missing
        assert "k" in s and s.size("k") == 5
        buf = bytearray(5)
        with s.register(buf):             # zero-copy: registered for the block
            assert s.get_into("k", buf) == 5
        s.remove("k")

Keys are ``str`` or ``bytes``, values any bytes-like object. Every call releases the GIL while
it is in the library.
"""

from __future__ import annotations

import ctypes
from types import TracebackType
from typing import Any, Dict, Optional, Tuple, Type, Union

from ._errors import TidewireError
from .mooncake_store import codes
from .mooncake_store.config import ReplicateConfig
from .mooncake_store.setup_args import DEFAULT_MASTER_ADDRESS
from .store import MooncakeDistributedStore

__all__ = [
    "Store",
    "StoreRegistration",
    "StoreError",
    "ObjectNotFound",
    "ObjectExists",
    "ObjectHasLease",
    "NoSpace",
    "InvalidParams",
    "TransferFailed",
    "MasterUnavailable",
]

Key = Union[str, bytes]


class StoreError(TidewireError):
    """A failed store call: ``code`` (Mooncake Store's number, e.g. -704) and ``message``.
    A :class:`~tidewire.TidewireError` (``except TidewireError`` catches it too), whose
    ``code`` is in Mooncake Store's numbers rather than a ``TW_ERR_*`` one."""

    #: Mooncake's name of the code.
    name = "STORE_ERROR"  # a plain name here, not the TW_ERR_* lookup of TidewireError

    def __init__(self, code: int, message: str = "") -> None:
        super().__init__(code, message)

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.code, self.message), self.__dict__)

    def __str__(self) -> str:
        return f"{self.name} ({self.code}): {self.message}" if self.message else \
            f"{self.name} ({self.code})"

    @staticmethod
    def from_code(code: int, message: str = "") -> "StoreError":
        """The exception for ``code``: its subclass, or :class:`StoreError` itself."""
        cls = _BY_CODE.get(code, StoreError)
        err = cls(code, message)
        if cls is StoreError:
            err.name = _NAMES.get(code, "STORE_ERROR")
        return err


class ObjectNotFound(StoreError, KeyError):
    """-704: no such key (or its value is not complete yet)."""

    name = "OBJECT_NOT_FOUND"


class ObjectExists(StoreError):
    """A create-only :meth:`Store.put` of a key that exists (``exist_ok=False``)."""

    name = "OBJECT_ALREADY_EXISTS"


class ObjectHasLease(StoreError):
    """-706: a reader holds the key; remove it with ``force=True``."""

    name = "OBJECT_HAS_LEASE"


class NoSpace(StoreError):
    """-200: no segment has room for the value."""

    name = "NO_AVAILABLE_HANDLE"


class InvalidParams(StoreError, ValueError):
    """-600: a bad key or argument, or a buffer too small for the value."""

    name = "INVALID_PARAMS"


class TransferFailed(StoreError):
    """-800: moving the bytes failed."""

    name = "TRANSFER_FAIL"


class MasterUnavailable(StoreError):
    """-900 / -901: the master cannot be reached, or did not answer in time."""

    name = "RPC_FAIL"


_BY_CODE: Dict[int, Type[StoreError]] = {
    codes.OBJECT_NOT_FOUND: ObjectNotFound,
    codes.OBJECT_HAS_LEASE: ObjectHasLease,
    codes.NO_AVAILABLE_HANDLE: NoSpace,
    codes.INVALID_PARAMS: InvalidParams,
    codes.TRANSFER_FAIL: TransferFailed,
    codes.RPC_FAIL: MasterUnavailable,
    codes.RPC_TIMEOUT: MasterUnavailable,
}
#: Names of the codes without a class of their own.
_NAMES = {c: n for c, n in codes.NAMES.items() if c != codes.OK and c not in _BY_CODE}


def _address(buf: Any) -> "tuple[int, int, Any]":
    """``(address, size, keepalive)`` of a writable buffer."""
    mv = memoryview(buf).cast("B")
    if mv.readonly:
        raise TypeError("the buffer must be writable")
    if mv.nbytes == 0:
        raise ValueError("the buffer is empty")
    keep = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(keep), mv.nbytes, keep


class StoreRegistration:
    """A buffer registered with a :class:`Store` for zero-copy calls; unregisters on
    :meth:`close` or at the end of a ``with`` block."""

    def __init__(self, store: "Store", addr: int, size: int, keep: Any) -> None:
        self._store: Optional[Store] = store
        self.addr = addr
        self.size = size
        self._keep = keep

    def close(self) -> None:
        """Unregisters the buffer (idempotent)."""
        store, self._store = self._store, None
        if store is not None and not store.closed:
            store._check(store._client().unregister_buffer(self.addr))
        self._keep = None

    def __enter__(self) -> "StoreRegistration":
        return self

    def __exit__(self, t: Optional[Type[BaseException]], e: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()


class Store:
    """A store client: contributes ``segment_size`` bytes of memory to the pool (0: none) and
    reads and writes objects; ``master`` is the master's ``host:port``. Raises
    :class:`StoreError` when the client cannot start. Use as a context manager or call
    :meth:`close`."""

    def __init__(self, master: str = DEFAULT_MASTER_ADDRESS, *, segment_size: int = 16 << 20,
                 local_buffer_size: int = 16 << 20, local_hostname: str = "",
                 metadata: str = "P2PHANDSHAKE", protocol: str = "tcp",
                 rdma_devices: str = "") -> None:
        self._s: Optional[MooncakeDistributedStore] = MooncakeDistributedStore()
        rc = self._s.setup(local_hostname, metadata, segment_size, local_buffer_size, protocol,
                           rdma_devices, master)
        if rc != 0:
            msg = getattr(self._s, "last_error", "")
            self._s = None
            raise StoreError.from_code(rc, msg)

    # ------------------------------------------------------------------------ lifecycle
    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._s is None

    @property
    def name(self) -> str:
        """This client's segment name (``host:port``)."""
        return self._client().get_hostname()

    def close(self) -> None:
        """Unmounts this client's segment (its objects go with it) and stops. Idempotent."""
        s, self._s = self._s, None
        if s is not None:
            s.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, t: Optional[Type[BaseException]], e: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def healthy(self) -> bool:
        """True while the master answers."""
        return self._client().health_check() == 0

    def _client(self) -> MooncakeDistributedStore:
        s = self._s
        if s is None:
            raise StoreError(-1, "the store is closed")
        return s

    def _check(self, rc: int) -> int:
        """``rc`` when it is not negative, else raises its exception."""
        if rc < 0:
            s = self._s
            raise StoreError.from_code(rc, getattr(s, "last_error", "") if s else "")
        return rc

    # ------------------------------------------------------------------------ writes
    def put(self, key: Key, value: Any, config: Optional[ReplicateConfig] = None, *,
            exist_ok: bool = True) -> None:
        """Create-only write: an existing key keeps its value (Mooncake's ``put``), or, with
        ``exist_ok=False``, raises :class:`ObjectExists`."""
        s = self._client()
        if not exist_ok and s.is_exist(key) == 1:
            raise ObjectExists(codes.INTERNAL_ERROR, f"key {key!r} exists")
        self._check(s.put(key, value, config))

    def upsert(self, key: Key, value: Any, config: Optional[ReplicateConfig] = None) -> None:
        """Create-or-replace write."""
        self._check(self._client().upsert(key, value, config))

    def put_from(self, key: Key, buffer: Any, config: Optional[ReplicateConfig] = None, *,
                 upsert: bool = False) -> None:
        """Zero-copy write from a buffer registered with :meth:`register`."""
        addr, size, _keep = _address(buffer)
        s = self._client()
        fn = s.upsert_from if upsert else s.put_from
        self._check(fn(key, addr, size, config))

    # ------------------------------------------------------------------------ reads
    def get(self, key: Key) -> bytes:
        """The value; raises :class:`ObjectNotFound` when the key is missing."""
        s = self._client()
        h = s.get_buffer(key)
        if h is None:
            size = s.get_size(key)  # why: missing, or another failure
            raise StoreError.from_code(size if size < 0 else codes.OBJECT_NOT_FOUND,
                                       getattr(s, "last_error", "") or f"key {key!r}")
        try:
            return h.tobytes()
        finally:
            h.release()

    def get_into(self, key: Key, buffer: Any) -> int:
        """Reads the value into a buffer registered with :meth:`register` and returns its
        size; raises :class:`ObjectNotFound`, or :class:`InvalidParams` when it does not
        fit."""
        addr, size, _keep = _address(buffer)
        return self._check(self._client().get_into(key, addr, size))

    def size(self, key: Key) -> int:
        """Size of the value in bytes; raises :class:`ObjectNotFound`."""
        return self._check(self._client().get_size(key))

    def __contains__(self, key: Key) -> bool:
        rc = self._client().is_exist(key)
        if rc < 0:
            raise StoreError.from_code(codes.INVALID_PARAMS, f"cannot look {key!r} up")
        return rc == 1

    def __getitem__(self, key: Key) -> bytes:
        return self.get(key)

    def __setitem__(self, key: Key, value: Any) -> None:
        self.upsert(key, value)

    def __delitem__(self, key: Key) -> None:
        self.remove(key)

    # ------------------------------------------------------------------------ removal
    def remove(self, key: Key, force: bool = False) -> None:
        """Removes a key; raises :class:`ObjectNotFound`, or :class:`ObjectHasLease` while a
        reader holds it (unless ``force``)."""
        self._check(self._client().remove(key, force))

    def remove_all(self, force: bool = False) -> int:
        """Removes every key; returns how many."""
        return self._check(self._client().remove_all(force))

    def remove_by_regex(self, pattern: Union[str, bytes], force: bool = False) -> int:
        """Removes the keys matching ``pattern``; returns how many."""
        return self._check(self._client().remove_by_regex(pattern, force))

    # ------------------------------------------------------------------------ registration
    def register(self, buffer: Any) -> StoreRegistration:
        """Registers a writable buffer for :meth:`put_from` / :meth:`get_into`; returns a
        :class:`StoreRegistration` (a context manager that unregisters it)."""
        addr, size, keep = _address(buffer)
        self._check(self._client().register_buffer(addr, size))
        return StoreRegistration(self, addr, size, keep)

    def __repr__(self) -> str:
        return f"<tidewire.Store {'closed' if self.closed else self.name!r}>"
