"""Mooncake-Store-compatible client on top of tidewire.

A drop-in for ``mooncake.store``: ``MooncakeDistributedStore`` and ``ReplicateConfig`` with
Mooncake's method names, argument orders, defaults and return conventions, talking to a
``tidewire-master`` (which accepts ``mooncake_master``'s flags)::

    from tidewire.store import MooncakeDistributedStore, ReplicateConfig

Return conventions (as Mooncake's Python API):

- ``put*``/``upsert*``/``put_from``/``register_buffer``/...: ``0`` or a negative code;
  ``put_batch``/``upsert_batch`` return one code for the whole batch; ``batch_*`` return a list
  with one code per key. A create-only ``put`` of an existing key returns 0 and keeps the old
  value; ``upsert`` replaces it.
- ``get``/``get_batch``: ``bytes``, ``b''`` for a missing key. ``get_into``/``batch_get_into``:
  bytes read, or ``-704`` (missing) / ``-600`` (buffer too small or bad arguments).
- ``batch_put_from_multi_buffers``/``batch_get_into_multi_buffers``: values in several
  ``(ptr, size)`` pieces, concatenated; per key 0 / the value's size, or a negative code.
- ``get_size``: the size or ``-704``. ``is_exist``: 1/0/-1. ``remove``: 0, -704, -706 (leased,
  unless ``force``). ``remove_by_regex``/``remove_all``: the count removed.

Keys are ``str`` (``bytes`` and ``bytearray`` are taken too, as Mooncake's binding does), used
as byte strings of their full UTF-8 length: ``"k\0a"`` and ``"k\0b"`` are two keys, and neither
is ``"k"``. Any other type raises ``TypeError`` in every method, before anything else is checked
(Mooncake raises ``TypeError`` too), and so does a ``str`` or ``bytes`` given where a list of
keys is expected. A key that is empty, longer than ``MAX_KEY_LEN`` (1 MiB, Mooncake's limit)
bytes or not valid UTF-8 (a ``str`` with lone surrogates, or such ``bytes``) fails on its own, as
every method reports a bad key: ``-600`` where a code is returned (``put*``, ``upsert*``,
``get_into``, ``get_size``, ``remove``, each per key of the ``batch_*`` forms and per fragment
of ``get_into_ranges``), ``b''`` from ``get``/``get_batch``, ``None`` from ``get_buffer``, ``-1``
from ``is_exist``.

Codes: -1 internal, -10 buffer overflow, -101 segment not found, -200 no space,
-600 invalid parameters, -703 being written, -704 not found, -706 has lease, -707 lease
expired, -800 transfer failed, -900 master unreachable, -901 master timeout.

Every call into the library releases the GIL (ctypes), so threads overlap their transfers.
"""

from __future__ import annotations

import functools
import operator
import os
import threading
from types import ModuleType
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _ffi
from . import _store_core as _core
from . import _store_setup as _setup_args
from . import _store_wire
from ._store_args import (
    _BYTES_MAX, Key, Value, _address, _bytes_address, _c_buffers, _key_bytes, _key_list,
    _new_bytes, _ptrs_ok, _sizes_ok,
)
from ._store_codes import INTERNAL_ERROR, INVALID_PARAMS, OBJECT_NOT_FOUND, RPC_FAIL
from ._store_config import ObjectDataType, ReplicateConfig, SoftPinAction
from ._store_dummy import _LOCAL_IN_DUMMY, DummyLink, NotShared, _check_keys, _decode, _failed
from ._store_dummy import ENCODE as _DUMMY_ENCODE
from ._store_ffi import StoreValue
from ._store_pieces import PieceCalls
from ._store_tensor import TensorCalls
from ._store_types import (
    BufferHandle, Descriptor, DiskDescriptor, MemoryDescriptor, MooncakeHostMemAllocator,
    ReplicaDescriptor, ReplicaStatus, alloc_shared, bind_to_numa_node, handle_of,
    shared_region, shared_regions,
)

__all__ = [
    "MooncakeDistributedStore", "ReplicateConfig", "BufferHandle", "SoftPinAction",
    "ObjectDataType", "ReplicaDescriptor", "MemoryDescriptor", "Descriptor", "DiskDescriptor",
    "ReplicaStatus", "MooncakeHostMemAllocator", "bind_to_numa_node",
]

#: Longest key in bytes (``TW_STORE_MAX_KEY_LEN``, Mooncake's limit).
MAX_KEY_LEN = 1 << 20

_MiB = 1024 * 1024


class MooncakeDistributedStore(PieceCalls, TensorCalls):
    """A store client: contributes a segment to the pool and reads/writes objects."""

    def __init__(self) -> None:
        self._h: _core.Handle = None
        self._cv = threading.Condition()
        self._busy = 0
        self._hostname = ""
        self._dummy: Optional[DummyLink] = None

    # ---------------------------------------------------------------- lifecycle
    def setup(self, *args: Any, **kwargs: Any) -> int:
        """Starts the client. Mooncake's two forms:

        - ``setup(local_hostname, metadata_server, global_segment_size, local_buffer_size,
          protocol, rdma_devices, master_server_addr, engine=None, enable_ssd_offload=False,
          ssd_offload_path='', tenant_id='default', enable_client_http_server=False,
          client_http_port=9300)``: the seven leading arguments are required; an unknown
          keyword raises ``TypeError`` (SGLang retries without it, as with Mooncake);
        - ``setup(config)``: one dict with those names as keys (missing ones take Mooncake's
          defaults: 16 MiB sizes, ``tcp``, master ``127.0.0.1:50051``). Values may be strings,
          as LMCache passes them (``"1gb"`` sizes, ``"true"`` flags). LMCache's documented
          spellings ``master_server_address`` and ``device_name`` are honoured (Mooncake
          ignores them and dials its default master). Unknown keys are ignored, as Mooncake
          ignores them.

        ``engine`` must be None: the store runs its own engine (a shared one is refused with
        -600). There is no SSD tier or client HTTP server here: ``enable_ssd_offload``,
        ``ssd_offload_path``, ``enable_client_http_server`` and ``client_http_port`` are
        accepted and change nothing (values live in memory), and every ``tenant_id`` shares
        one key space. Returns 0, or a negative code (``last_error`` says why); a second
        ``setup`` on a started client returns 0 and changes nothing."""
        cfg = _setup_args.from_call(args, kwargs)
        if cfg.get("engine") is not None:
            self.last_error = "sharing a TransferEngine with the store is not supported"
            return INVALID_PARAMS
        if self._h is not None:
            return 0
        try:
            segment = _setup_args.parse_size(cfg["global_segment_size"], "global_segment_size")
            local = _setup_args.parse_size(cfg["local_buffer_size"], "local_buffer_size")
        except ValueError as e:
            self.last_error = str(e)
            return INVALID_PARAMS

        def enc(k: str, default: str = "") -> bytes:
            v = cfg.get(k)
            return str(v if v not in (None, "") else default).encode()

        rc, h = _core.setup(
            enc("local_hostname"),
            enc("metadata_server", "P2PHANDSHAKE"),
            segment,
            local,
            enc("protocol", "tcp"),
            enc("rdma_devices"),
            enc("master_server_addr", _setup_args.DEFAULT_MASTER_ADDRESS),
        )
        if rc != 0:
            self.last_error = _ffi.last_error_message()
            return rc
        self._h = h
        name = _core.hostname(h)
        if name is not None:
            self._hostname = name
        return 0

    def setup_dummy(self, mem_pool_size: int, local_buffer_size: int,
                    server_address: str) -> int:
        """Starts a dummy client (Mooncake's standalone-storage form): no engine or segment of
        its own; every call goes to the real client process at ``server_address``
        (``host:port``, on this host: ``python -m tidewire.store_server``). Zero-copy calls
        must use memory from ``MooncakeHostMemAllocator``, which the real client maps and moves
        the bytes in and out of directly; ``mem_pool_size`` bytes of such memory are made for
        ``alloc_from_mem_pool``. ``local_buffer_size`` is accepted (copying calls carry their
        values in the call). Returns 0, or -900 when the real client cannot be reached (or
        -600 for bad arguments); ``last_error`` says why."""
        if self._h is not None or self._dummy is not None:
            return 0
        if not _sizes_ok([mem_pool_size, local_buffer_size]):
            return INVALID_PARAMS
        try:
            link = DummyLink(str(server_address))
            rep = link.request({"op": "hello", "pid": os.getpid()})
        except (OSError, ValueError, _store_wire.WireError) as e:
            self.last_error = f"cannot reach the real client at {server_address}: {e}"
            return RPC_FAIL
        if rep.get("rc") != 0:
            link.close()
            self.last_error = rep.get("error", "the real client refused this dummy client")
            return rep.get("rc", RPC_FAIL)
        self._dummy = link
        self._hostname = rep.get("hostname", "")
        self._pool = alloc_shared(mem_pool_size)[1] if mem_pool_size else 0
        self._pool_at, self._pool_size = 0, int(mem_pool_size)
        return 0

    def alloc_from_mem_pool(self, size: int) -> int:
        """An address of ``size`` bytes from the dummy client's pool (``setup_dummy``'s
        ``mem_pool_size``), handed out in order and never reused; 0 when it does not fit or this
        is not a dummy client."""
        if self._dummy is None or not _sizes_ok([size]) or not self._pool:
            return 0
        with self._cv:
            at = (self._pool_at + 63) & ~63
            if at + size > self._pool_size:
                return 0
            self._pool_at = at + size
        return self._pool + at

    def _forward(self, name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """A dummy client's call, run by its real client."""
        _check_keys(name, args, kwargs)
        encode = _DUMMY_ENCODE.get(name)
        if encode is None:
            self.last_error = f"{name} is not available in a dummy client"
            return _failed(name, args, INVALID_PARAMS)
        try:
            payload = encode(*args, **kwargs)
        except NotShared as e:
            self.last_error = str(e)
            return _failed(name, args, INVALID_PARAMS)
        link = self._dummy
        assert link is not None  # only called for a dummy client
        try:
            for rid, (_addr, size, fd) in shared_regions().items():
                if rid not in link.shared and link.share(rid, fd, size) != 0:
                    self.last_error = "the real client could not map shared memory"
                    return _failed(name, args, INTERNAL_ERROR)
            rep = link.request({"op": "call", "m": name, "a": payload})
        except _store_wire.WireError as e:
            self.last_error = str(e)
            return _failed(name, args, RPC_FAIL)
        if "error" in rep:
            self.last_error = rep["error"]
            return _failed(name, args, rep.get("rc", INTERNAL_ERROR))
        return _decode(name, rep["r"])

    def close(self) -> int:
        """Unmounts this client's segment (its objects go with it) and stops. Returns 0."""
        if self._dummy is not None:
            self._dummy.close()
            self._dummy = None
        with self._cv:
            h, self._h = self._h, None
            # Calls already inside the library finish first (they hold the handle).
            self._cv.wait_for(lambda: self._busy == 0, timeout=600)
        if h is not None:
            _core.free(h)
        return 0

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def health_check(self) -> int:
        """0 healthy, 1 not initialised, 2 master unreachable."""
        if self._h is None:
            return 1
        return _core.health_check(self._h)

    def get_hostname(self) -> str:
        """This client's endpoint ``ip:port`` (its segment name)."""
        return self._hostname

    # ---------------------------------------------------------------- registration
    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        """Registers caller memory for the zero-copy calls. 0 or a negative code. In a dummy
        client the memory must come from ``MooncakeHostMemAllocator`` (-600 otherwise)."""
        if self._dummy is not None:
            if not _ptrs_ok([buffer_ptr]) or not _sizes_ok([size]):
                return INVALID_PARAMS
            if shared_region(operator.index(buffer_ptr), operator.index(size)) is None:
                self.last_error = "a dummy client can only register MooncakeHostMemAllocator memory"
                return INVALID_PARAMS
            return 0
        if self._h is None:
            return INTERNAL_ERROR
        if not _ptrs_ok([buffer_ptr]) or not _sizes_ok([size]) or not buffer_ptr or not size:
            return INVALID_PARAMS
        return _core.register_buffer(self._h, operator.index(buffer_ptr), operator.index(size))

    def unregister_buffer(self, buffer_ptr: int) -> int:
        """Drops a registration. 0 or a negative code."""
        if self._dummy is not None:
            return 0
        if self._h is None:
            return INTERNAL_ERROR
        if not _ptrs_ok([buffer_ptr]):
            return INVALID_PARAMS
        return _core.unregister_buffer(self._h, operator.index(buffer_ptr))

    # ---------------------------------------------------------------- writes
    def _settled_by_args(self, keys: Sequence[bytes], ptrs: Sequence[Any],
                         sizes: Sequence[Any]) -> Optional[List[int]]:
        """The per-key result a zero-copy batch's arguments settle by themselves: INTERNAL_ERROR
        without a handle, INVALID_PARAMS for mismatched lengths or a bad address or size, []
        for no keys; None when the batch has to run."""
        n = len(keys)
        if self._h is None:
            return [INTERNAL_ERROR] * n
        if not (n == len(ptrs) == len(sizes)) or not _ptrs_ok(ptrs) or not _sizes_ok(sizes):
            return [INVALID_PARAMS] * n
        if n == 0:
            return []
        return None

    def _put(self, enc: List[bytes], ptrs: List[Any], sizes: List[Any], upsert: bool, copy: bool,
             config: Optional[ReplicateConfig]) -> List[int]:
        """Writes the encoded keys ``enc`` (see ``_key_list``)."""
        settled = self._settled_by_args(enc, ptrs, sizes)
        if settled is not None:
            return settled
        n = len(enc)
        cptrs, csizes = _c_buffers(ptrs, sizes)
        cfg = (config or ReplicateConfig())._c()
        if cfg is None:
            return [INVALID_PARAMS] * n
        return _core.put(self._h, enc, cptrs, csizes, upsert, copy, cfg)

    def _put_values(self, enc: List[bytes], values: Sequence[Value], upsert: bool,
                    config: Optional[ReplicateConfig]) -> List[int]:
        addrs = [_address(v) for v in values]
        return self._put(enc, [a[0] for a in addrs], [a[1] for a in addrs], upsert, True, config)

    @staticmethod
    def _first_error(codes: Sequence[int]) -> int:
        return next((c for c in codes if c != 0), 0)

    def put(self, key: Key, value: Value, config: Optional[ReplicateConfig] = None) -> int:
        """Create-only put of a bytes-like value (copied through the local buffer)."""
        return self._put_values([_key_bytes(key)], [value], False, config)[0]

    def upsert(self, key: Key, value: Value, config: Optional[ReplicateConfig] = None) -> int:
        """Create-or-replace of a bytes-like value."""
        return self._put_values([_key_bytes(key)], [value], True, config)[0]

    def put_batch(self, keys: Sequence[Key], values: Sequence[Value],
                  config: Optional[ReplicateConfig] = None) -> int:
        """Create-only put of several values; one code for the batch."""
        enc = _key_list(keys)
        if len(enc) != len(values):
            return INVALID_PARAMS
        return self._first_error(self._put_values(enc, values, False, config))

    def upsert_batch(self, keys: Sequence[Key], values: Sequence[Value],
                     config: Optional[ReplicateConfig] = None) -> int:
        """Create-or-replace of several values; one code for the batch."""
        enc = _key_list(keys)
        if len(enc) != len(values):
            return INVALID_PARAMS
        return self._first_error(self._put_values(enc, values, True, config))

    def put_parts(self, key: Key, *parts: Value, config: Optional[ReplicateConfig] = None) -> int:
        """Create-only put of the concatenation of ``parts``."""
        _key_bytes(key)
        return self.put(key, b"".join(bytes(memoryview(p)) for p in parts), config)

    def upsert_parts(self, key: Key, *parts: Value,
                     config: Optional[ReplicateConfig] = None) -> int:
        """Create-or-replace with the concatenation of ``parts``."""
        _key_bytes(key)
        return self.upsert(key, b"".join(bytes(memoryview(p)) for p in parts), config)

    def put_from(self, key: Key, buffer_ptr: int, size: int,
                 config: Optional[ReplicateConfig] = None) -> int:
        """Zero-copy create-only put from caller memory."""
        return self._put([_key_bytes(key)], [buffer_ptr], [size], False, False, config)[0]

    def upsert_from(self, key: Key, buffer_ptr: int, size: int,
                    config: Optional[ReplicateConfig] = None) -> int:
        """Zero-copy create-or-replace from caller memory."""
        return self._put([_key_bytes(key)], [buffer_ptr], [size], True, False, config)[0]

    def batch_put_from(self, keys: Sequence[Key], buffer_ptrs: Sequence[int],
                       sizes: Sequence[int], config: Optional[ReplicateConfig] = None) -> List[int]:
        """Zero-copy create-only puts; one code per key."""
        return self._put(_key_list(keys), list(buffer_ptrs), list(sizes), False, False, config)

    def batch_upsert_from(self, keys: Sequence[Key], buffer_ptrs: Sequence[int],
                          sizes: Sequence[int],
                          config: Optional[ReplicateConfig] = None) -> List[int]:
        """Zero-copy create-or-replace; one code per key."""
        return self._put(_key_list(keys), list(buffer_ptrs), list(sizes), True, False, config)

    # ---------------------------------------------------------------- reads
    def batch_get_into(self, keys: Sequence[Key], buffer_ptrs: Sequence[int],
                       sizes: Sequence[int]) -> List[int]:
        """Reads each key into caller memory; bytes read or a negative code per key."""
        return self._get_into(_key_list(keys), buffer_ptrs, sizes)

    def _get_into(self, enc: List[bytes], buffer_ptrs: Sequence[Any],
                  sizes: Sequence[Any]) -> List[int]:
        ptrs, size_list = list(buffer_ptrs), list(sizes)
        settled = self._settled_by_args(enc, ptrs, size_list)
        if settled is not None:
            return settled
        cptrs, csizes = _c_buffers(ptrs, size_list)
        return _core.get_into(self._h, enc, cptrs, csizes)

    def get_into(self, key: Key, buffer_ptr: int, size: int) -> int:
        """Reads one key into caller memory: bytes read or a negative code."""
        return self._get_into([_key_bytes(key)], [buffer_ptr], [size])[0]

    def _get_values(self, enc: List[bytes]) -> Tuple[List[Optional[StoreValue]], List[int]]:
        n = len(enc)
        if self._h is None or n == 0:
            return [None] * n, [INTERNAL_ERROR] * n
        return _core.get_copy(self._h, enc)

    def get_batch(self, keys: Sequence[Key]) -> List[bytes]:
        """Values of several keys; ``b''`` for a missing (or failed) key.

        Each ``bytes`` is created empty once its size is known and the value is read straight
        into it (one copy, no staging); it escapes to the caller only after it is filled."""
        return self._get_batch(_key_list(keys))

    def _get_batch(self, enc: List[bytes]) -> List[bytes]:
        got = self._get_made(enc, lambda size: (lambda b: (b, _bytes_address(b)))(
            _new_bytes(None, size)) if size < _BYTES_MAX else None)
        return [b"" if g is None else g for g in got]

    def _get_made(self, enc: List[bytes],
                  make: Callable[[int], Optional[Tuple[Any, int]]]) -> List[Any]:
        """Reads each key into memory ``make(size)`` creates once the value's size is known
        (``(object, address)``, or None to fail the key): per key the object, filled, or None
        (missing, failed, or ``make`` refused or raised)."""
        n = len(enc)
        if self._h is None or n == 0:
            return [None] * n
        made: List[Optional[Tuple[Any, int]]] = [None] * n

        def alloc(_ctx: Any, i: int, size: int) -> Optional[int]:
            try:
                if i >= n:
                    return None
                m = make(size)
                if m is None:
                    return None
                made[i] = m
                return m[1]
            except BaseException:  # noqa: BLE001 - MemoryError etc.: this key fails, not the call
                return None

        res = _core.get_sized(self._h, enc, alloc)
        if res is None:
            return [None] * n
        return [m[0] if r >= 0 and m is not None else None for r, m in zip(res, made)]

    def get(self, key: Key) -> bytes:
        """Value of one key; ``b''`` when missing."""
        return self._get_batch([_key_bytes(key)])[0]

    def get_buffer(self, key: Key) -> Optional[BufferHandle]:
        """A :class:`BufferHandle` over the value, or ``None`` when missing."""
        vals, _ = self._get_values([_key_bytes(key)])
        return handle_of(vals[0]) if vals[0] is not None else None

    def batch_get_buffer(self, keys: Sequence[Key]) -> List[Optional[BufferHandle]]:
        """:class:`BufferHandle` per key (``None`` for misses)."""
        vals, _ = self._get_values(_key_list(keys))
        return [handle_of(v) if v is not None else None for v in vals]

    def get_size(self, key: Key) -> int:
        """Size of the value, or a negative code (-704 missing, and for the empty key as in
        Mooncake)."""
        k = _key_bytes(key)
        if self._h is None:
            return INTERNAL_ERROR
        if not k:
            return OBJECT_NOT_FOUND
        return _core.get_size(self._h, k)

    # ---------------------------------------------------------------- existence, removal
    def batch_is_exist(self, keys: Sequence[Key]) -> List[int]:
        """1 present, 0 absent, -1 error, per key."""
        return self._exist(_key_list(keys))

    def _exist(self, enc: List[bytes]) -> List[int]:
        n = len(enc)
        if self._h is None:
            return [-1] * n
        if n == 0:
            return []
        out = _core.exist(self._h, enc)
        if out is None:
            return [-1] * n
        if min(out) >= 0:
            # Every key answered (1 or 0): the common case, with no per-key Python work.
            return out
        # The empty key is absent (Mooncake), not a bad key.
        return [r if r in (0, 1) else 0 if not k else -1 for r, k in zip(out, enc)]

    def is_exist(self, key: Key) -> int:
        """1 present, 0 absent, -1 error."""
        return self._exist([_key_bytes(key)])[0]

    def batch_remove(self, keys: Sequence[Key], force: bool = False) -> List[int]:
        """Removes keys; per key 0, -704 missing, -706 leased (unless ``force``)."""
        return self._remove(_key_list(keys), force)

    def _remove(self, enc: List[bytes], force: bool) -> List[int]:
        n = len(enc)
        if self._h is None:
            return [INTERNAL_ERROR] * n
        if n == 0:
            return []
        rc, res = _core.remove(self._h, enc, force)
        if rc != 0:
            return [rc] * n
        # The empty key is not found (Mooncake), not a bad key.
        return [OBJECT_NOT_FOUND if not k else r for r, k in zip(res, enc)]

    def remove(self, key: Key, force: bool = False) -> int:
        """Removes one key: 0, -704 missing, -706 leased (unless ``force``)."""
        return self._remove([_key_bytes(key)], force)[0]

    def remove_by_regex(self, pattern: Union[str, bytes, bytearray], force: bool = False) -> int:
        """Removes keys matching ``pattern``; the count removed, or a negative code. A pattern
        that is not ``str`` (or ``bytes``) raises ``TypeError``, as a key does."""
        if isinstance(pattern, (bytes, bytearray)):
            p = bytes(pattern)
        elif isinstance(pattern, str):
            p = pattern.encode("utf-8", "surrogatepass")
        else:
            raise TypeError(f"a pattern must be str, not {type(pattern).__name__}")
        if self._h is None:
            return INTERNAL_ERROR
        return _core.remove_by_regex(self._h, p, force)

    def remove_all(self, force: bool = False) -> int:
        """Removes every key; the count removed, or a negative code."""
        if self._h is None:
            return INTERNAL_ERROR
        return _core.remove_all(self._h, force)


def _counted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Counts the call as in flight, so ``close`` waits for it before freeing the handle."""

    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(self: MooncakeDistributedStore, *args: Any, **kwargs: Any) -> Any:
        if self._dummy is not None and name not in _LOCAL_IN_DUMMY:
            return self._forward(name, args, kwargs)
        with self._cv:
            self._busy += 1
        try:
            return fn(self, *args, **kwargs)
        finally:
            with self._cv:
                self._busy -= 1
                if self._busy == 0:
                    self._cv.notify_all()

    return wrapper


for _name in [
    "health_check", "register_buffer", "unregister_buffer", "put", "upsert", "put_batch",
    "upsert_batch", "put_parts", "upsert_parts", "put_from", "upsert_from", "batch_put_from",
    "batch_upsert_from", "batch_put_from_multi_buffers", "batch_get_into_multi_buffers",
    "batch_get_into", "get_into", "get_batch", "get", "get_buffer",
    "batch_get_buffer", "get_size", "get_into_ranges", "batch_is_exist", "is_exist",
    "batch_remove", "remove", "remove_by_regex", "remove_all", "batch_get_session_start",
    "batch_get_session_end", "batch_get_into_multi_buffer_ranges", "batch_get_replica_desc",
    "put_tensor", "upsert_tensor", "pub_tensor", "upsert_pub_tensor", "batch_put_tensor",
    "batch_upsert_tensor", "batch_pub_tensor", "batch_upsert_pub_tensor", "put_tensor_from",
    "upsert_tensor_from", "batch_put_tensor_from", "batch_upsert_tensor_from", "get_tensor",
    "batch_get_tensor", "get_tensor_into", "batch_get_tensor_into",
]:
    setattr(MooncakeDistributedStore, _name, _counted(getattr(MooncakeDistributedStore, _name)))
del _name


def install_as_mooncake() -> ModuleType:
    """Makes ``import mooncake.store`` (and ``from mooncake.store import ...``) resolve to this
    module, so code written for Mooncake Store (TransferQueue's ``MooncakeStoreClient``) runs on
    tidewire unchanged. Call it once before that code imports ``mooncake.store``. An installed
    ``mooncake`` package keeps its other modules; only ``mooncake.store`` is replaced."""
    import importlib
    import sys
    import types

    me = sys.modules[__name__]
    parent = sys.modules.get("mooncake")
    if parent is None:
        try:
            parent = importlib.import_module("mooncake")
        except ImportError:
            parent = types.ModuleType("mooncake")
            parent.__path__ = []
            sys.modules["mooncake"] = parent
    sys.modules["mooncake.store"] = me
    setattr(parent, "store", me)
    return me
