"""The Mooncake-Store-compatible client class, :class:`MooncakeDistributedStore` (callers
import it from :mod:`tidewire.store`, whose documentation gives Mooncake's return conventions
that every method here follows).

Every call into the library releases the GIL (ctypes), so threads overlap their transfers.
"""

from __future__ import annotations

import ctypes
import operator
import os
import threading
from array import array
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from .. import _ffi
from .._call_guard import CallGuard, closes, guarded
from . import native as _core
from . import setup_args as _setup_args
from . import wire as _wire
from .arguments import (
    _BYTES_MAX, _SIZE_CODE, Key, Value, _address, _bytes_address, _c_buffers, _ints, _key_bytes,
    _pack_ranges,
    _key_list, _key_list_of_lists, _new_bytes, _ptrs_ok, _sizes_ok,
)
from .codes import INTERNAL_ERROR, INVALID_PARAMS, OBJECT_NOT_FOUND, RPC_FAIL
from .config import ReplicateConfig
from .dummy import ENCODE as _DUMMY_ENCODE
from .dummy import DummyLink, NotShared, _check_keys, _decode, _failed, forwarded_in_dummy
from .signatures import StoreValue
from .parallel_client import ParallelTensorMixin
from .safetensor_files import SafetensorMixin
from .init_all import InitAllMixin
from .put_sessions import PutSessionMixin
from .segments import SegmentMixin
from .replica_tasks import ReplicaTaskMixin
from .tasks import ExtrasMixin
from .tensor_format import HEADER_LEN, Tensor, _host, _over, _torch, _view, header, parse
from .values import (
    BufferHandle, ReplicaDescriptor, alloc_shared, handle_of,
    shared_region, shared_regions,
)

__all__ = ["MooncakeDistributedStore", "MAX_KEY_LEN"]

#: Longest key in bytes (``TW_STORE_MAX_KEY_LEN``, Mooncake's limit).
MAX_KEY_LEN = 1 << 20

#: Per key: a piece list of addresses, or of sizes (or of source offsets).
Pieces = Sequence[Sequence[int]]
#: ``_pieces``' checked arguments: results, good indices, counts, flat addresses, flat sizes.
_PieceArgs = Tuple[List[int], List[int], "array[int]", "array[int]", "array[int]"]

#: The methods a dummy client runs itself; it forwards every other public call to its real
#: client (see :func:`~tidewire.mooncake_store.dummy.forwarded_in_dummy`).
_RUN_BY_DUMMY = frozenset({
    "setup", "setup_dummy", "alloc_from_mem_pool", "close", "get_hostname", "get_replica_desc",
    "register_buffer", "unregister_buffer",
})


@guarded
@forwarded_in_dummy(_RUN_BY_DUMMY)
class MooncakeDistributedStore(ParallelTensorMixin, SafetensorMixin, ExtrasMixin,
                               PutSessionMixin, InitAllMixin, SegmentMixin,
                               ReplicaTaskMixin):
    """A store client: contributes a segment to the pool and reads/writes objects.

    Every public method counts itself in the client's call guard while it runs
    (:mod:`tidewire._call_guard`): :meth:`close` never frees the handle under a running call.
    In a dummy client (:meth:`setup_dummy`) every public call but those in ``_RUN_BY_DUMMY``
    goes to the real client."""

    def __init__(self) -> None:
        self._h: _core.Handle = None
        self._guard = CallGuard()  # replaced by a fresh one when close() released the handle
        self._pool_lock = threading.Lock()
        self._hostname = ""
        self._dummy: Optional[DummyLink] = None
        # setup()'s local_buffer_size: the capacity a BufferPool over this client starts from.
        self._local_buffer_size = 0

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
        -600). ``enable_ssd_offload=True`` with ``ssd_offload_path`` (or
        ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH``) turns on this client's disk tier (the master
        needs ``--enable_offload``; without it setup returns -1300); a missing or unusable path
        raises ``ValueError("Invalid FileStorage configuration...")`` as Mooncake does. There
        is no client HTTP server here: ``enable_client_http_server`` and ``client_http_port``
        are accepted and change nothing, and every ``tenant_id`` shares one key space. Returns
        0, or a negative code (``last_error`` says why); a second ``setup`` on a started client
        returns 0 and changes nothing."""
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
        disk = _setup_args.offload_path(cfg)

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
            disk.encode(),
        )
        if rc != 0:
            self.last_error = _ffi.last_error_message()
            if disk and rc == INVALID_PARAMS:
                # Mooncake raises for a tier path it cannot use (the reason is in last_error).
                raise ValueError(f"Invalid FileStorage configuration: {self.last_error}")
            return rc
        self._h = h
        self._local_buffer_size = local
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
        except (OSError, ValueError, _wire.WireError) as e:
            self.last_error = f"cannot reach the real client at {server_address}: {e}"
            return RPC_FAIL
        if rep.get("rc") != 0:
            link.close()
            self.last_error = rep.get("error", "the real client refused this dummy client")
            refused: int = rep.get("rc", RPC_FAIL)
            return refused
        self._dummy = link
        self._hostname = rep.get("hostname", "")
        pool: Any = alloc_shared(mem_pool_size) if mem_pool_size else (0, 0)
        self._pool: int = pool[1]  # no memory: TypeError, as ever
        self._pool_at, self._pool_size = 0, int(mem_pool_size)
        return 0

    def alloc_from_mem_pool(self, size: int) -> int:
        """An address of ``size`` bytes from the dummy client's pool (``setup_dummy``'s
        ``mem_pool_size``), handed out in order and never reused; 0 when it does not fit or this
        is not a dummy client."""
        if self._dummy is None or not _sizes_ok([size]) or not self._pool:
            return 0
        with self._pool_lock:
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
        except _wire.WireError as e:
            self.last_error = str(e)
            return _failed(name, args, RPC_FAIL)
        if "error" in rep:
            self.last_error = rep["error"]
            return _failed(name, args, rep.get("rc", INTERNAL_ERROR))
        return _decode(name, rep["r"])

    @closes
    def close(self) -> int:
        """Unmounts this client's segment (its objects go with it) and stops. Returns 0. Calls
        other threads have in flight finish first (up to 600 s; if some are still running then,
        the last of them to return frees the handle); calls made from now on find no handle
        and return their error code. The client can be set up again."""
        if self._dummy is not None:
            self._dummy.close()
            self._dummy = None
        guard = self._guard
        h, self._h = self._h, None  # before the guard closes: uncounted calls find no handle
        if h is not None:
            self._guard = CallGuard()  # for a later setup()
            guard.close(lambda: _core.free(h), timeout=600)
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

    def unmount_local_disk_segment(self, grace_period_seconds: int = 0) -> int:
        """Drops this client's disk tier after ``grace_period_seconds``: the master forgets its
        disk replicas (objects whose last replica they were go with them) and the record files
        are deleted. 0, or -101 when the client has no tier."""
        if self._h is None:
            return INVALID_PARAMS
        if not isinstance(grace_period_seconds, int) or grace_period_seconds < 0:
            return INVALID_PARAMS
        return _core.unmount_local_disk(self._h, grace_period_seconds)

    def get_offload_rpc_read_count(self) -> int:
        """Objects this client has read from disk tiers (Mooncake counts its offload RPC reads;
        here a same-host reader reads the owner's records directly)."""
        if self._h is None:
            return 0
        return _core.disk_read_count(self._h)

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

    # ---------------------------------------------------------------- values in pieces
    def _pieces(self, enc: List[bytes], all_buffer_ptrs: Pieces, all_sizes: Pieces
                ) -> Tuple[Optional[List[int]], Optional[_PieceArgs]]:
        """A multi-buffer batch's arguments, checked: ``(settled, args)``. ``settled`` is the
        whole result when the arguments decide it (no handle, outer lengths that differ, no
        keys), else None; ``args`` is ``(results, good, counts, ptrs, sizes)``: the result list
        with -600 for each key whose own pieces are unusable (a ptr list and a size list of
        different lengths, or entries that are not addresses or sizes), the indices of the
        other keys, and their piece counts and flat addresses and sizes as arrays."""
        n = len(enc)
        if self._h is None:
            return [INTERNAL_ERROR] * n, None
        try:
            ptr_lists, size_lists = list(all_buffer_ptrs), list(all_sizes)
        except TypeError:
            return [INVALID_PARAMS] * n, None
        if not (n == len(ptr_lists) == len(size_lists)):
            return [INVALID_PARAMS] * n, None
        if n == 0:
            return [], None
        results = [INVALID_PARAMS] * n
        good: List[int] = []
        counts, flat_ptrs, flat_sizes = array(_SIZE_CODE), array("Q"), array("Q")
        for i in range(n):
            try:
                ps, ss = list(ptr_lists[i]), list(size_lists[i])
            except TypeError:
                continue
            if len(ps) != len(ss):
                continue
            pi, si = _ints(ps, 1 << 64), _ints(ss, 1 << 63)
            if pi is None or si is None:
                continue
            good.append(i)
            counts.append(len(pi))
            flat_ptrs.extend(pi)
            flat_sizes.extend(si)
        return None, (results, good, counts, flat_ptrs, flat_sizes)

    def batch_put_from_multi_buffers(self, keys: Sequence[Key], all_buffer_ptrs: Pieces,
                                     all_sizes: Pieces,
                                     config: Optional[ReplicateConfig] = None) -> List[int]:
        """Zero-copy create-only puts of values in pieces: key ``i``'s value is the
        concatenation of the ``all_sizes[i][j]`` bytes at each ``all_buffer_ptrs[i][j]``, in
        order. Every piece of every key goes straight to its replica buffers, in one transfer
        batch. One code per key: 0, or a negative code: -600 for outer lists of different
        lengths (every key gets it), for a key whose pieces are unusable (a pointer list and a
        size list of different lengths, NULL with a nonzero size, no bytes in all, unmapped
        memory) and for a config Mooncake refuses; -200 when no segment has room. Zero-size
        pieces are skipped. ``config.prefer_alloc_in_same_node`` places the value in this
        client's own segment when it has room (``replica_num`` must be 1)."""
        return self._put_pieces(_key_list(keys), all_buffer_ptrs, all_sizes, config, False)

    def _put_pieces(self, enc: List[bytes], all_buffer_ptrs: Pieces, all_sizes: Pieces,
                    config: Optional[ReplicateConfig], upsert: bool) -> List[int]:
        """``batch_put_from_multi_buffers`` of encoded keys, create-only or ``upsert``."""
        settled, args = self._pieces(enc, all_buffer_ptrs, all_sizes)
        if settled is not None:
            return settled
        assert args is not None  # not settled: the arguments to run
        results, good, counts, ptrs, sizes = args
        cfg = (config or ReplicateConfig())._c(local=self._hostname)
        if cfg is None:
            return [INVALID_PARAMS] * len(enc)
        if not good:
            return results
        res = _core.put_multi(self._h, [enc[i] for i in good], counts, ptrs, sizes, upsert, cfg)
        for j, i in enumerate(good):
            results[i] = res[j]
        return results

    def batch_get_into_multi_buffers(self, keys: Sequence[Key], all_buffer_ptrs: Pieces,
                                     all_sizes: Pieces,
                                     prefer_alloc_in_same_node: bool = False) -> List[int]:
        """Zero-copy reads into pieces: key ``i``'s value fills ``all_buffer_ptrs[i][j]``
        (``all_sizes[i][j]`` bytes each) in order; the pieces may hold more than the value,
        and what lies past its end is left as it was. Per key: the value's size in bytes, or a
        negative code: -704 missing; -600 for outer lists of different lengths (every key gets
        it), or for a key whose pieces are unusable or hold fewer bytes than the value.
        ``prefer_alloc_in_same_node`` is accepted and changes nothing (a replica in this
        process's own segment is always read by memcpy)."""
        del prefer_alloc_in_same_node  # accepted for Mooncake's signature; see above
        enc = _key_list(keys)
        settled, args = self._pieces(enc, all_buffer_ptrs, all_sizes)
        if settled is not None:
            return settled
        assert args is not None  # not settled: the arguments to run
        results, good, counts, ptrs, sizes = args
        if not good:
            return results
        res = _core.get_into_multi(self._h, [enc[i] for i in good], counts, ptrs, sizes)
        for j, i in enumerate(good):
            results[i] = res[j]
        return results

    def get_into_ranges(self, buffer_ptrs: Sequence[int], all_keys: Sequence[Sequence[Key]],
                        all_dst_offsets: Sequence[Pieces], all_src_offsets: Sequence[Pieces],
                        all_sizes: Sequence[Pieces]) -> Union[int, List[List[List[int]]]]:
        """Ranged reads, buffer-major: for buffer ``b`` and its ``k``-th key, fragment ``f``
        copies ``[src_offsets[b][k][f], +sizes[b][k][f])`` of the object to
        ``buffer_ptrs[b] + dst_offsets[b][k][f]``. Returns ``[b][k][f]`` bytes read or a code.

        Lists whose lengths disagree get Mooncake's answer, -600 in each place of the nested
        result rather than one bare code: every key of every buffer when the outer lists differ
        in length, every key of a buffer whose key and offset lists differ, and one key whose
        own three lists differ (the other keys are read). A key has as many places as it has
        destination offsets (one when it has none)."""
        groups = [_key_list(ks) for ks in _key_list_of_lists(all_keys)]
        flat_keys: List[bytes] = []
        dsts: List[int] = []
        srcs: List[int] = []
        lens: List[int] = []
        # Per buffer, per key: the number of fragments read, or -(places) for a refused key.
        shape: List[List[int]] = []
        n = len(buffer_ptrs)
        lists_agree = len(groups) == len(all_dst_offsets) == len(all_src_offsets) \
            == len(all_sizes) == n
        try:
            for b, base in enumerate(buffer_ptrs):
                keys = groups[b] if b < len(groups) else [b""]
                dst_b = all_dst_offsets[b] if b < len(all_dst_offsets) else []
                src_b = all_src_offsets[b] if b < len(all_src_offsets) else []
                len_b = all_sizes[b] if b < len(all_sizes) else []
                buffer_agrees = lists_agree and len(keys) == len(dst_b) == len(src_b) \
                    == len(len_b)
                kshape = []
                for k, key in enumerate(keys):
                    d = dst_b[k] if k < len(dst_b) else [0]
                    if not (buffer_agrees and len(d) == len(src_b[k]) == len(len_b[k])):
                        kshape.append(-max(len(d), 1))
                        continue
                    s_, z = src_b[k], len_b[k]
                    for i in range(len(d)):
                        flat_keys.append(key)
                        dsts.append(int(base) + int(d[i]))
                        srcs.append(int(s_[i]))
                        lens.append(int(z[i]))
                    kshape.append(len(d))
                shape.append(kshape)
        except (IndexError, TypeError, ValueError):
            return INVALID_PARAMS
        if self._h is None:
            return INTERNAL_ERROR
        if not _ptrs_ok(dsts) or not _sizes_ok(srcs) or not _sizes_ok(lens):
            return INVALID_PARAMS
        res: List[int] = []
        if flat_keys:
            rc, res = _core.get_ranges(self._h, flat_keys, dsts, srcs, lens)
            if rc != 0:
                return rc
        out: List[List[List[int]]] = []
        i = 0
        for kshape in shape:
            per_buf: List[List[int]] = []
            for m in kshape:
                if m < 0:
                    per_buf.append([INVALID_PARAMS] * -m)
                else:
                    per_buf.append(res[i:i + m])
                    i += m
            out.append(per_buf)
        return out

    # ---------------------------------------------------------------- get sessions
    def batch_get_session_start(self, keys: Sequence[Key]) -> List[int]:
        """Starts a get session per key: the replicas are looked up once and held, so the
        ranged reads that follow (``batch_get_into_multi_buffer_ranges``) need no master round
        trip and their bytes cannot be freed or replaced until ``batch_get_session_end``. Per
        key: 0, -704 missing, -600 bad key. The hold outlives the master's lease only while this
        client's heartbeats keep arriving, and never past its ``--max_read_hold_sec``."""
        enc = _key_list(keys)
        n = len(enc)
        if self._h is None:
            return [INTERNAL_ERROR] * n
        if n == 0:
            return []
        return _core.session_start(self._h, enc)

    def batch_get_session_end(self, keys: Sequence[Key]) -> int:
        """Ends the get sessions of ``keys`` (keys without one are ignored). Returns 0."""
        enc = _key_list(keys)
        if self._h is None:
            return INTERNAL_ERROR
        if not enc:
            return 0
        return _core.session_end(self._h, enc)

    def batch_get_into_multi_buffer_ranges(self, keys: Sequence[Key], all_buffer_ptrs: Pieces,
                                           all_sizes: Pieces,
                                           all_src_offsets: Pieces) -> List[int]:
        """Ranged reads under open get sessions: for key ``i``, fragment ``j`` copies
        ``all_sizes[i][j]`` bytes from offset ``all_src_offsets[i][j]`` of the object to
        ``all_buffer_ptrs[i][j]``. All fragments of all keys go in one transfer batch. Per key:
        the bytes read (the sum of its sizes), or a negative code: -600 for a key with no open
        session, a fragment past the object's end, lists of different lengths, a NULL or
        unmapped destination; -707 when the session's hold no longer protects the read."""
        enc = _key_list(keys)
        n = len(enc)
        if self._h is None:
            return [INTERNAL_ERROR] * n
        packed = _pack_ranges(n, all_buffer_ptrs, all_sizes, all_src_offsets)
        if packed is None:
            return [INVALID_PARAMS] * n
        good, counts, ptrs, sizes, offs = packed
        results = [INVALID_PARAMS] * n
        if not good:
            return results
        res = _core.session_ranges(self._h, [enc[i] for i in good], counts, ptrs, sizes, offs)
        for j, i in enumerate(good):
            results[i] = res[j]
        return results

    # ---------------------------------------------------------------- replica descriptors
    def batch_get_replica_desc(self, keys: Sequence[Key]) -> Dict[Key, List[ReplicaDescriptor]]:
        """``{key: [ReplicaDescriptor, ...]}`` for the keys that exist (complete replicas, in
        memory or on a disk tier; missing keys are left out, as in Mooncake). Nothing stays
        held: the bytes may move or be freed after the call."""
        key_list = list(keys) if not isinstance(keys, (str, bytes, bytearray)) else keys
        enc = _key_list(key_list)
        n = len(enc)
        if self._h is None or n == 0:
            return {}
        found = _core.get_replicas(self._h, enc)
        if found is None:
            return {}
        out: Dict[Key, List[ReplicaDescriptor]] = {}
        for key, reps in zip(key_list, found):
            if reps:
                out[key] = [ReplicaDescriptor.of(*r) for r in reps]
        return out

    def get_replica_desc(self, key: Key) -> List[ReplicaDescriptor]:
        """The key's replicas as ``[ReplicaDescriptor]`` (empty when it does not exist)."""
        _key_bytes(key)
        return next(iter(self.batch_get_replica_desc([key]).values()), [])

    # ---------------------------------------------------------------- tensors: writes
    def _put_tensors(self, keys: Sequence[Key], tensors: Sequence[Tensor], upsert: bool,
                     config: Optional[ReplicateConfig]) -> List[int]:
        enc = _key_list(keys)
        tlist = list(tensors)
        if len(enc) != len(tlist):
            return [INVALID_PARAMS] * len(enc)
        results = [INVALID_PARAMS] * len(enc)
        keep: List[Any] = []
        good: List[int] = []
        ptrs: List[List[Any]] = []
        sizes: List[List[int]] = []
        for i, t in enumerate(tlist):
            h = _host(t)
            head = header(h) if h is not None else None
            if h is None or head is None:
                continue
            keep.append((h, head))
            good.append(i)
            data = h.numel() * h.element_size()
            ptrs.append([ctypes.cast(ctypes.c_char_p(head), ctypes.c_void_p).value,
                         h.data_ptr() if data else 0])
            sizes.append([HEADER_LEN, data])
        if good:
            codes = self._put_pieces([enc[i] for i in good], ptrs, sizes, config, upsert)
            for i, c in zip(good, codes):
                results[i] = c
        return results

    def put_tensor(self, key: Key, tensor: Tensor) -> int:
        """Create-only put of a tensor (dtype and shape kept). 0 or a negative code: -600 for
        something that is not a tensor, or a dtype Mooncake cannot store (complex)."""
        return self._put_tensors([key], [tensor], False, None)[0]

    def upsert_tensor(self, key: Key, tensor: Tensor) -> int:
        """Create-or-replace of a tensor."""
        return self._put_tensors([key], [tensor], True, None)[0]

    def pub_tensor(self, key: Key, tensor: Tensor, config: Optional[ReplicateConfig] = None) -> int:
        """``put_tensor`` with a ``ReplicateConfig``."""
        return self._put_tensors([key], [tensor], False, config)[0]

    def upsert_pub_tensor(self, key: Key, tensor: Tensor,
                          config: Optional[ReplicateConfig] = None) -> int:
        """``upsert_tensor`` with a ``ReplicateConfig``."""
        return self._put_tensors([key], [tensor], True, config)[0]

    def batch_put_tensor(self, keys: Sequence[Key], tensors_list: Sequence[Tensor]) -> List[int]:
        """Create-only puts of tensors, one transfer batch; one code per key (-600 for every key
        when the lists differ in length)."""
        return self._put_tensors(keys, tensors_list, False, None)

    def batch_upsert_tensor(self, keys: Sequence[Key], tensors_list: Sequence[Tensor]) -> List[int]:
        """Create-or-replace of tensors; one code per key."""
        return self._put_tensors(keys, tensors_list, True, None)

    def batch_pub_tensor(self, keys: Sequence[Key], tensors_list: Sequence[Tensor],
                         config: Optional[ReplicateConfig] = None) -> List[int]:
        """``batch_put_tensor`` with a ``ReplicateConfig``."""
        return self._put_tensors(keys, tensors_list, False, config)

    def batch_upsert_pub_tensor(self, keys: Sequence[Key], tensors_list: Sequence[Tensor],
                                config: Optional[ReplicateConfig] = None) -> List[int]:
        """``batch_upsert_tensor`` with a ``ReplicateConfig``."""
        return self._put_tensors(keys, tensors_list, True, config)

    def _put_tensor_from(self, keys: Sequence[Key], buffer_ptrs: Sequence[int],
                         sizes: Sequence[int], upsert: bool) -> List[int]:
        enc = _key_list(keys)
        ptrs, size_list = list(buffer_ptrs), list(sizes)
        if not len(enc) == len(ptrs) == len(size_list):
            return [INVALID_PARAMS] * len(enc)
        # The header is not read here (an unmapped address must fail as -600 in the library,
        # not crash in Python): a buffer that holds no tensor is stored as it is, and
        # get_tensor then returns None for it.
        ok = [isinstance(n, int) and not isinstance(n, bool) and n >= HEADER_LEN
              for n in size_list]
        results = [INVALID_PARAMS] * len(enc)
        idx = [i for i, g in enumerate(ok) if g]
        if idx:
            codes = self._put([enc[i] for i in idx], [ptrs[i] for i in idx],
                              [size_list[i] for i in idx], upsert, False, None)
            for i, c in zip(idx, codes):
                results[i] = c
        return results

    def put_tensor_from(self, key: Key, buffer_ptr: int, size: int) -> int:
        """Zero-copy put of a buffer already laid out as ``[header][tensor bytes]`` (as
        ``get_tensor_into`` leaves it). 0, or -600 for a size shorter than the header or a
        pointer the library refuses. The header is not checked here: ``get_tensor`` returns
        None for a value that holds no tensor."""
        return self._put_tensor_from([key], [buffer_ptr], [size], False)[0]

    def upsert_tensor_from(self, key: Key, buffer_ptr: int, size: int) -> int:
        """``put_tensor_from``, create-or-replace."""
        return self._put_tensor_from([key], [buffer_ptr], [size], True)[0]

    def batch_put_tensor_from(self, keys: Sequence[Key], buffer_ptrs: Sequence[int],
                              sizes: Sequence[int]) -> List[int]:
        """``put_tensor_from`` per key; one code per key."""
        return self._put_tensor_from(keys, buffer_ptrs, sizes, False)

    def batch_upsert_tensor_from(self, keys: Sequence[Key], buffer_ptrs: Sequence[int],
                                 sizes: Sequence[int]) -> List[int]:
        """``upsert_tensor_from`` per key; one code per key."""
        return self._put_tensor_from(keys, buffer_ptrs, sizes, True)

    # ---------------------------------------------------------------- tensors: reads
    def batch_get_tensor(self, keys: Sequence[Key]) -> List[Optional[Tensor]]:
        """Tensors of several keys (None for a missing key or a value that is not a tensor).
        Each value is read straight into a new tensor's memory, one copy."""
        def make(size: int) -> Any:
            torch = _torch()
            t = torch.empty(size, dtype=torch.uint8)
            return t, t.data_ptr()

        out: List[Optional[Tensor]] = []
        for mem in self._get_made(_key_list(keys), make):
            meta = parse(mem.numpy(), mem.numel()) if mem is not None else None
            out.append(_view(mem, *meta) if meta is not None else None)
        return out

    def get_tensor(self, key: Key) -> Optional[Tensor]:
        """The tensor stored under ``key``, or None."""
        return self.batch_get_tensor([key])[0]

    def batch_get_tensor_into(self, keys: Sequence[Key], buffer_ptrs: Sequence[int],
                              sizes: Sequence[int]) -> List[Optional[Tensor]]:
        """Reads each value (header and bytes) into caller memory and returns tensors over it
        (no copy: they use the caller's memory, which must outlive them); None for a missing
        key, a buffer too small, or a value that is not a tensor."""
        ptrs = list(buffer_ptrs)
        got = self._get_into(_key_list(keys), ptrs, list(sizes))
        out: List[Optional[Tensor]] = []
        for n, p in zip(got, ptrs):
            meta = None
            if n >= HEADER_LEN:
                mem = _over(p, n)
                meta = parse(mem.numpy(), n)
            out.append(_view(mem, *meta) if meta is not None else None)
        return out

    def get_tensor_into(self, key: Key, buffer_ptr: int, size: int) -> Optional[Tensor]:
        """``batch_get_tensor_into`` of one key."""
        return self.batch_get_tensor_into([key], [buffer_ptr], [size])[0]



# The public path of the class is tidewire.store (Mooncake's mooncake.store under tidewire's
# name): reprs, pickles and callers that check a class's module see that path.
MooncakeDistributedStore.__module__ = "tidewire.store"
