"""Mooncake's ``EngramStore``: one model layer's Engram embedding tables kept in the Store,
one object per head (``engram:l<layer>:h<head>``, ``table_vocab_sizes[h]`` rows of
``embedding_dim`` float32 each), filled by :meth:`EngramStore.populate` and read row by row by
:meth:`EngramStore.lookup` (ranged reads straight into the result array).

It only stores and reads tables: the model-side Engram logic (tokenizer compression, n-gram
hashing, gating) is not here, as it is not in Mooncake's. ``lookup`` and ``populate`` take and
give NumPy arrays; NumPy is imported when they are called (an ``ImportError`` then, if it is
missing), so this module imports without it.

Errors are Mooncake's: ``ValueError`` for a bad configuration, ``TypeError`` for arguments of
the wrong type, ``RuntimeError`` with Mooncake's messages for the rest (a failed lookup,
populate or removal)."""

from __future__ import annotations

import operator
from typing import Any, Iterable, List, Optional

from .codes import INVALID_PARAMS, OBJECT_NOT_FOUND

__all__ = ["EngramStore", "EngramStoreConfig"]

_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_FLOAT32 = 4


def _int_in(value: Any, lo: int, hi: int, what: str) -> int:
    if isinstance(value, int) and lo <= value <= hi:
        return int(value)
    raise TypeError(f"incompatible function arguments: {what} must be an int, got {value!r}")


def _row_id(value: Any) -> int:
    """One row id of a nested ``row_ids`` (pybind's cast: RuntimeError if it is no int64)."""
    try:
        v = operator.index(value)
    except TypeError:
        v = None
    if v is None or not _I64_MIN <= v <= _I64_MAX:
        raise RuntimeError(f"Unable to cast Python instance of type {type(value)} to C++ type "
                           "'long'")
    return v


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as e:
        raise ImportError(f"EngramStore.lookup/populate need NumPy: {e}") from e
    return numpy


class EngramStoreConfig:
    """The tables' layout: ``table_vocab_sizes`` (rows per head; one head of 1024 rows by
    default) and ``embedding_dim`` (floats per row, 64 by default). Reading
    ``table_vocab_sizes`` gives a copy of the list."""

    def __init__(self) -> None:
        self._table_vocab_sizes: List[int] = [1024]
        self._embedding_dim = 64

    @property
    def table_vocab_sizes(self) -> List[int]:
        return list(self._table_vocab_sizes)

    @table_vocab_sizes.setter
    def table_vocab_sizes(self, value: Iterable[int]) -> None:
        if isinstance(value, (str, bytes, bytearray)) or not hasattr(value, "__iter__"):
            raise TypeError("incompatible function arguments: table_vocab_sizes must be a "
                            f"sequence of ints, got {value!r}")
        self._table_vocab_sizes = [_int_in(v, _I64_MIN, _I64_MAX, "table_vocab_sizes[i]")
                                   for v in value]

    @property
    def embedding_dim(self) -> int:
        return self._embedding_dim

    @embedding_dim.setter
    def embedding_dim(self, value: int) -> None:
        self._embedding_dim = _int_in(value, _I32_MIN, _I32_MAX, "embedding_dim")


def _store_of(store: Any) -> Any:
    from .client import MooncakeDistributedStore

    if store is None or isinstance(store, MooncakeDistributedStore):
        return store
    raise RuntimeError("EngramStore store parameter must be a PyClient or store wrapper that "
                       "implements _get_pyclient_capsule()")


class EngramStore:
    """One layer's Engram tables in the Store ``store`` (a ``MooncakeDistributedStore``, or
    None: then the table layout is there and every Store operation fails)."""

    def __init__(self, layer_id: int, config: EngramStoreConfig, store: object = None) -> None:
        layer_id = _int_in(layer_id, _I32_MIN, _I32_MAX, "layer_id")
        if not isinstance(config, EngramStoreConfig):
            raise TypeError("incompatible function arguments: config must be an "
                            f"EngramStoreConfig, got {config!r}")
        self._store = _store_of(store)
        sizes = config.table_vocab_sizes
        dim = config.embedding_dim
        if not sizes:
            raise ValueError("EngramStoreConfig.table_vocab_sizes must not be empty")
        if dim <= 0:
            raise ValueError("EngramStoreConfig.embedding_dim must be positive")
        if any(v <= 0 for v in sizes):
            raise ValueError("EngramStoreConfig.table_vocab_sizes must contain only "
                             "positive values")
        self._sizes = sizes
        self._dim = dim
        self._keys = [f"engram:l{layer_id}:h{h}" for h in range(len(sizes))]

    # ------------------------------------------------------------------ layout
    def get_table_vocab_sizes(self) -> List[int]:
        return list(self._sizes)

    def get_store_keys(self) -> List[str]:
        return list(self._keys)

    def get_num_heads(self) -> int:
        return len(self._sizes)

    def get_embedding_dim(self) -> int:
        return self._dim

    # ------------------------------------------------------------------ reads
    def lookup(self, row_ids: object) -> Any:
        """Lookup embeddings by precomputed row IDs. Returns [B, L, H, D].

        ``row_ids``: a NumPy array of shape ``[B, L, H]`` (cast to int64) or nested sequences
        of that shape; ``H`` is the number of heads. Row ``row_ids[b, l, h]`` of head ``h``'s
        table lands at ``[b, l, h]`` of the float32 result. ``RuntimeError`` for a bad shape,
        a row outside its table, a table missing from the Store, or no store."""
        np = _numpy()
        heads = len(self._sizes)
        if isinstance(row_ids, np.ndarray):
            try:
                ids = np.ascontiguousarray(row_ids, dtype=np.int64)
            except (TypeError, ValueError):
                raise RuntimeError("row_ids array must be convertible to int64") from None
            if ids.ndim != 3:
                raise RuntimeError("row_ids array must have shape [B, L, H]")
            if ids.shape[2] != heads:
                raise RuntimeError("row_ids last dimension must match num_heads")
        else:
            nested = [[[_row_id(h) for h in tok] for tok in batch]
                      for batch in row_ids]  # type: ignore[attr-defined]
            if not nested or not nested[0]:
                raise RuntimeError("row_ids must not be empty")
            length = len(nested[0])
            if any(len(b) != length or any(len(t) != heads for t in b) for b in nested):
                raise RuntimeError("EngramStore lookup failed")
            ids = np.array(nested, dtype=np.int64).reshape(len(nested), length, heads)
        out = np.zeros((ids.shape[0], ids.shape[1], heads, self._dim), dtype=np.float32)
        if not self._lookup_into(ids, out):
            raise RuntimeError("EngramStore lookup failed")
        return out

    def _lookup_into(self, ids: Any, out: Any) -> bool:
        store = self._store
        b, length, heads = ids.shape
        if store is None or b <= 0 or length <= 0:
            return False
        row = self._dim * _FLOAT32
        flat = ids.reshape(-1, heads)
        dst: List[List[int]] = [[] for _ in range(heads)]
        src: List[List[int]] = [[] for _ in range(heads)]
        for t, token in enumerate(flat.tolist()):
            for h, idx in enumerate(token):
                if idx < 0 or idx >= self._sizes[h]:
                    return False
                dst[h].append((t * heads + h) * row)
                src[h].append(idx * row)
        ptr = int(out.ctypes.data)
        if store.register_buffer(ptr, int(out.nbytes)) != 0:
            return False
        try:
            results = store.get_into_ranges([ptr], [self._keys], [dst], [src],
                                            [[[row] * len(d) for d in dst]])
        finally:
            unregistered = store.unregister_buffer(ptr) == 0
        if not unregistered or not isinstance(results, list) or len(results) != 1:
            return False
        per_head = results[0]
        return len(per_head) == heads and all(
            len(per_head[h]) == len(dst[h]) and all(n == row for n in per_head[h])
            for h in range(heads))

    # ------------------------------------------------------------------ writes
    def populate(self, embedding_buffers: list) -> None:  # type: ignore[type-arg]
        """Stores head ``h``'s table from ``embedding_buffers[h]``, a float32-castable NumPy
        array of shape ``[table_vocab_sizes[h], embedding_dim]``. Every head's key must be
        absent; on any failure the heads stored by this call are removed again and
        ``RuntimeError("populate failed")`` is raised."""
        if not isinstance(embedding_buffers, list):
            raise TypeError("populate(): incompatible function arguments: embedding_buffers "
                            "must be a list")
        if len(embedding_buffers) != len(self._sizes):
            raise RuntimeError("embedding_buffers size must match num_heads")
        np = _numpy()
        arrays = []
        for buf, rows in zip(embedding_buffers, self._sizes):
            if not isinstance(buf, np.ndarray):
                raise RuntimeError("embedding_buffers must be NumPy arrays")
            try:
                arr = np.ascontiguousarray(buf, dtype=np.float32)
            except (TypeError, ValueError):
                raise RuntimeError("embedding_buffers must be float32 arrays") from None
            if arr.ndim != 2:
                raise RuntimeError("each embedding buffer must be 2D [N_h, D]")
            if arr.shape[0] != rows or arr.shape[1] != self._dim:
                raise RuntimeError("embedding buffer shape does not match "
                                   "get_table_vocab_sizes()/get_embedding_dim()")
            arrays.append(arr)
        if not self._populate(arrays):
            raise RuntimeError("populate failed")

    def _populate(self, arrays: List[Any]) -> bool:
        store = self._store
        if store is None:
            return False
        exists = store.batch_is_exist(self._keys)
        if len(exists) != len(self._keys) or any(e != 0 for e in exists):
            return False
        ptrs = [int(a.ctypes.data) for a in arrays]
        sizes = [int(a.nbytes) for a in arrays]
        registered: List[int] = []
        try:
            for p, n in zip(ptrs, sizes):
                if store.register_buffer(p, n) != 0:
                    return False
                registered.append(p)
            put: Optional[List[int]] = store.batch_put_from(self._keys, ptrs, sizes)
        finally:
            unregister_failed = [store.unregister_buffer(p) for p in registered] != \
                [0] * len(registered)
        complete = put is not None and len(put) == len(self._keys)
        if complete and not unregister_failed and all(r == 0 for r in put or []):
            return True
        for i, key in enumerate(self._keys):
            if complete and put is not None and put[i] != 0:
                continue
            store.remove(key, True)
        return False

    def remove_from_store(self, force: bool = False) -> int:
        """Remove all Mooncake Store tables owned by this EngramStore layer. Returns the number
        of removed head tables; missing keys are ignored. ``RuntimeError("remove_from_store
        failed, rc=<code>")`` with the first other failure's code (-600 without a store)."""
        ret = self._remove(bool(force))
        if ret < 0:
            raise RuntimeError(f"remove_from_store failed, rc={ret}")
        return ret

    def _remove(self, force: bool) -> int:
        if self._store is None:
            return INVALID_PARAMS
        removed = first_error = 0
        for key in self._keys:
            rc = self._store.remove(key, force)
            if rc == 0:
                removed += 1
            elif rc != OBJECT_NOT_FOUND and first_error == 0:
                first_error = rc
        return first_error if first_error else removed
