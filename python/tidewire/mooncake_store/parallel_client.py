"""The ``*_with_tp`` and ``*_with_parallelism`` methods of ``MooncakeDistributedStore``
(:class:`ParallelTensorMixin`), built on the client's tensor and zero-copy calls. They store
the keys, headers and manifests Mooncake's do (see :mod:`~tidewire.mooncake_store.parallel`),
so shards written by one side are read by the other.

Writes return 0 or a negative code (-600 for a request Mooncake refuses: a bad axis list, a
dimension that does not split evenly, something that is not a tensor). A TP write from a full
tensor (``put_tensor_with_tp``, the ``*_from`` forms) stores every rank's shard, whatever
``tp_rank`` says; a write with one TP axis takes the caller's shard. Reads return a tensor or
None. Not done here (as Mooncake's dummy clients): reads and writes through a dummy client."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from .arguments import Key, _key_bytes, _key_list
from .codes import INVALID_PARAMS
from .config import ReplicateConfig
from .parallel import (
    TP, Axes, Axis, BadRequest, Writer, layout_axes, manifest, parallelism_manifest_key,
    parse_axes, parse_manifest, parse_target, parse_writer, shard_key, shard_range,
    stored_axes, tp_index, tp_key, uniform, with_tp, writer_key, writer_manifest_key,
)
from .tensor_format import (
    HEADER_LEN, LAYOUT_SHARD, Meta, Tensor, _code_dtype, _host, _over, _torch, _view,
    dtype_codes, header, meta, shard_header,
)

#: Bytes per element by Mooncake's dtype code.
_ELEM = (4, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 2, 2, 1, 1)
#: A shard to write: key, header, and the data pieces ``(address, size)``.
_Shard = Tuple[bytes, bytes, List[Tuple[int, int]]]


def _prod(xs: Sequence[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def _raw(buffer_ptr: Any, size: Any) -> Optional[Meta]:
    """The header of a tensor object in caller memory, checked (its data must fill the rest
    of ``size`` exactly, as Mooncake checks it), or None."""
    if not isinstance(buffer_ptr, int) or not isinstance(size, int) or not buffer_ptr \
            or size < HEADER_LEN:
        return None
    m = meta(ctypes.string_at(buffer_ptr, HEADER_LEN), size)
    if m is None or m.nbytes != size - HEADER_LEN:
        return None
    if _prod(m.local_shape) * _ELEM[m.code] != m.nbytes:
        return None
    return m


def _ranges(shape: Sequence[int], code: int, split_dim: int, rank: int,
            count: int) -> List[Tuple[int, int]]:
    """``(offset, size)`` of shard ``rank`` of ``count`` of a C-order tensor's data."""
    inner = _prod(shape[split_dim + 1:]) * _ELEM[code]
    start, ext = shard_range(shape[split_dim], rank, count)
    if ext * inner == 0:
        return []
    out: List[Tuple[int, int]] = []
    for o in range(_prod(shape[:split_dim])):
        off = (o * shape[split_dim] + start) * inner
        if out and out[-1][0] + out[-1][1] == off:
            out[-1] = (out[-1][0], out[-1][1] + ext * inner)
        else:
            out.append((off, ext * inner))
    return out


class ParallelTensorMixin:
    """Mooncake's tensor-parallel methods, for ``MooncakeDistributedStore``."""

    if TYPE_CHECKING:
        def get(self, key: Key) -> bytes: ...
        def get_tensor(self, key: Key) -> Optional[Tensor]: ...
        def batch_get_tensor(self, keys: Sequence[Key]) -> List[Optional[Tensor]]: ...
        def get_tensor_into(self, key: Key, buffer_ptr: int, size: int) -> Optional[Tensor]: ...
        def batch_get_tensor_into(self, keys: Sequence[Key], buffer_ptrs: Sequence[int],
                                  sizes: Sequence[int]) -> List[Optional[Tensor]]: ...
        def _put_tensors(self, keys: Sequence[Key], tensors: Sequence[Tensor], upsert: bool,
                         config: Optional[ReplicateConfig]) -> List[int]: ...
        def _put_tensor_from(self, keys: Sequence[Key], buffer_ptrs: Sequence[int],
                             sizes: Sequence[int], upsert: bool) -> List[int]: ...
        def _put(self, enc: List[bytes], ptrs: List[Any], sizes: List[Any], upsert: bool,
                 copy: bool, config: Optional[ReplicateConfig]) -> List[int]: ...
        def _put_pieces(self, enc: List[bytes], all_buffer_ptrs: Sequence[Sequence[int]],
                        all_sizes: Sequence[Sequence[int]], config: Optional[ReplicateConfig],
                        upsert: bool) -> List[int]: ...

    # ---------------------------------------------------------------- writing shards
    def _write_shards(self, shards: List[_Shard], upsert: bool,
                      config: Optional[ReplicateConfig]) -> int:
        """Writes each shard (header, then its pieces), in order; the first failure ends it."""
        for key, head, pieces in shards:
            addr = ctypes.cast(ctypes.c_char_p(head), ctypes.c_void_p).value or 0
            ptrs = [addr] + [p for p, _ in pieces]
            sizes = [len(head)] + [n for _, n in pieces]
            rc = self._put_pieces([key], [ptrs], [sizes], config, upsert)[0]
            if rc != 0:
                return rc
        return 0

    def _write_manifest(self, key: bytes, data: bytes, upsert: bool,
                        config: Optional[ReplicateConfig]) -> int:
        addr = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0
        return self._put([key], [addr], [len(data)], upsert, False, config)[0]

    @staticmethod
    def _shard_of(t: Tensor, key: bytes, code: int, global_shape: Sequence[int],
                  axes: Axes, keep: List[Any]) -> _Shard:
        t = t.contiguous()
        keep.append(t)
        local = list(t.shape)
        nbytes = t.numel() * t.element_size()
        head = shard_header(code, global_shape, local, layout_axes(axes, local), nbytes)
        keep.append(head)
        return key, head, [(t.data_ptr(), nbytes)] if nbytes else []

    def _tp_write(self, key: Key, tensor: Any, tp_size: int, split_dim: int, upsert: bool,
                  config: Optional[ReplicateConfig]) -> int:
        """``put_tensor_with_tp``: every rank's shard of a full tensor, under ``key_tp_<r>``."""
        base = _key_bytes(key)
        if tp_size <= 1:
            return self._put_tensors([key], [tensor], upsert, config)[0]
        h = _host(tensor)
        code = dtype_codes().get(h.dtype) if h is not None else None
        if h is None or code is None or not uniform(list(h.shape), split_dim, tp_size):
            return INVALID_PARAMS
        keep: List[Any] = []
        shards = []
        for r in range(tp_size):
            start, ext = shard_range(h.shape[split_dim], r, tp_size)
            axes = (Axis(TP, r, tp_size, split_dim, None, None),)
            shards.append(self._shard_of(h.narrow(split_dim, start, ext), tp_key(base, r), code,
                                         list(h.shape), axes, keep))
        return self._write_shards(shards, upsert, config)

    def _tp_write_from(self, base: bytes, buffer_ptr: int, size: int, tp_size: int,
                       split_dim: int, axes: Optional[Axes], upsert: bool,
                       config: Optional[ReplicateConfig]) -> int:
        """Every rank's shard of the full tensor object in caller memory, zero copy."""
        m = _raw(buffer_ptr, size)
        if m is None or not uniform(m.local_shape, split_dim, tp_size):
            return INVALID_PARAMS
        keep: List[Any] = []
        shards = []
        for r in range(tp_size):
            ax = (Axis(TP, r, tp_size, split_dim, None, None),) if axes is None \
                else with_tp(axes, r)
            key = tp_key(base, r) if axes is None else shard_key(base, ax)
            shards.append(self._raw_shard(key, buffer_ptr, m, split_dim, r, tp_size, ax, keep))
        return self._write_shards(shards, upsert, config)

    @staticmethod
    def _raw_shard(key: bytes, buffer_ptr: int, m: Meta, split_dim: int, rank: int, count: int,
                   axes: Axes, keep: List[Any]) -> _Shard:
        local = list(m.local_shape)
        local[split_dim] = shard_range(local[split_dim], rank, count)[1]
        pieces = [(buffer_ptr + HEADER_LEN + off, n)
                  for off, n in _ranges(m.local_shape, m.code, split_dim, rank, count)]
        nbytes = sum(n for _, n in pieces)
        head = shard_header(m.code, m.local_shape, local, layout_axes(axes, local), nbytes)
        keep.append(head)
        return key, head, pieces

    def _parallel_write(self, key: Key, tensor: Any, parallelism: Any, writer_partition: Any,
                        upsert: bool, config: Optional[ReplicateConfig]) -> int:
        """``put_tensor_with_parallelism`` and its upsert form."""
        base = _key_bytes(key)
        try:
            if writer_partition is not None:
                if parallelism is not None:
                    return INVALID_PARAMS
                return self._writer_write(base, tensor, parse_writer(writer_partition), upsert,
                                          config)
            if parallelism is None:
                return self._put_tensors([key], [tensor], upsert, config)[0]
            axes = parse_axes(parallelism)
        except BadRequest:
            return INVALID_PARAMS
        h = _host(tensor)
        code = dtype_codes().get(h.dtype) if h is not None else None
        if h is None or code is None:
            return INVALID_PARAMS
        shape = list(h.shape)
        keep: List[Any] = []
        i = tp_index(axes)
        if i is None:  # DP / EP / PP only: the tensor as it is, tagged
            shard = self._shard_of(h, shard_key(base, axes), code, shape, axes, keep)
            return self._write_shards([shard], upsert, config)
        a = axes[i]
        sd = a.split_dim if a.split_dim is not None else 0
        if len(axes) == 1:  # the caller's own TP shard; the global shape follows from it
            if not 0 <= sd < len(shape):
                return INVALID_PARAMS
            glob = list(shape)
            glob[sd] *= a.size
            shard = self._shard_of(h, tp_key(base, a.rank), code, glob, axes, keep)
        else:  # a full tensor: the requested TP rank's shard of it
            if not uniform(shape, sd, a.size):
                return INVALID_PARAMS
            glob = shape
            start, ext = shard_range(shape[sd], a.rank, a.size)
            shard = self._shard_of(h.narrow(sd, start, ext), shard_key(base, axes), code, glob,
                                   axes, keep)
        rc = self._write_shards([shard], upsert, config)
        if rc != 0:
            return rc
        return self._write_manifest(parallelism_manifest_key(base),
                                    manifest(code, glob, sd, a.size), upsert, config)

    def _writer_write(self, base: bytes, tensor: Any, w: Writer, upsert: bool,
                      config: Optional[ReplicateConfig]) -> int:
        h = _host(tensor)
        code = dtype_codes().get(h.dtype) if h is not None else None
        if h is None or code is None or not uniform(list(h.shape), w.split_dim, w.size):
            return INVALID_PARAMS
        start, ext = shard_range(h.shape[w.split_dim], w.rank, w.size)
        keep: List[Any] = []
        axes = (Axis(TP, w.rank, w.size, w.split_dim, None, None),)
        shard = self._shard_of(h.narrow(w.split_dim, start, ext), writer_key(base, w), code,
                               list(h.shape), axes, keep)
        rc = self._write_shards([shard], upsert, config)
        if rc != 0:
            return rc
        return self._write_manifest(writer_manifest_key(base),
                                    manifest(code, list(h.shape), w.split_dim, w.size), upsert,
                                    config)

    def _parallel_write_from(self, key: Key, buffer_ptr: int, size: int, parallelism: Any,
                             writer_partition: Any, upsert: bool,
                             config: Optional[ReplicateConfig]) -> int:
        """``put_tensor_with_parallelism_from`` and its upsert form."""
        base = _key_bytes(key)
        try:
            w = None
            if writer_partition is not None:
                if parallelism is not None:
                    return INVALID_PARAMS
                w = parse_writer(writer_partition)
            elif parallelism is None:
                if config is None:
                    return self._put_tensor_from([key], [buffer_ptr], [size], upsert)[0]
                if _raw(buffer_ptr, size) is None:
                    return INVALID_PARAMS
                return self._put([base], [buffer_ptr], [size], upsert, False, config)[0]
            axes = parse_axes(parallelism) if w is None else ()
        except BadRequest:
            return INVALID_PARAMS
        m = _raw(buffer_ptr, size)
        if m is None:
            return INVALID_PARAMS
        keep: List[Any] = []
        if w is not None:
            if not uniform(m.local_shape, w.split_dim, w.size):
                return INVALID_PARAMS
            ax = (Axis(TP, w.rank, w.size, w.split_dim, None, None),)
            rc = self._write_shards([self._raw_shard(writer_key(base, w), buffer_ptr, m,
                                                     w.split_dim, w.rank, w.size, ax, keep)],
                                    upsert, config)
            if rc != 0:
                return rc
            return self._write_manifest(writer_manifest_key(base),
                                        manifest(m.code, m.local_shape, w.split_dim, w.size),
                                        upsert, config)
        i = tp_index(axes)
        if i is not None:
            a = axes[i]
            return self._tp_write_from(base, buffer_ptr, size, a.size,
                                       a.split_dim if a.split_dim is not None else 0, axes,
                                       upsert, config)
        shape = list(m.local_shape)
        head = shard_header(m.code, shape, shape, layout_axes(axes, shape), m.nbytes)
        pieces = [(buffer_ptr + HEADER_LEN, m.nbytes)] if m.nbytes else []
        return self._write_shards([(shard_key(base, axes), head, pieces)], upsert, config)

    # ---------------------------------------------------------------- reading shards
    def _load(self, key: bytes) -> Optional[Tuple[Meta, Tensor]]:
        """The tensor object under ``key``: its header and the tensor (None if it is not one)."""
        data = self.get(key)
        m = meta(data, len(data)) if data else None
        dtype = _code_dtype(m.code) if m is not None else None
        if m is None or dtype is None or m.nbytes != len(data) - HEADER_LEN:
            return None
        torch = _torch()
        raw = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else None
        if raw is None or _prod(m.local_shape) * _ELEM[m.code] != m.nbytes:
            return None
        return m, _view(raw, dtype, m.local_shape, m.nbytes)

    def _concat(self, keys: List[bytes], split_dim: int, count: int,
                others: Optional[Axes]) -> Optional[Tensor]:
        """The shards under ``keys`` (TP ranks 0..count-1, each checked) put together along
        ``split_dim``; ``others``: the non-TP axes each shard must carry."""
        parts = []
        for r, k in enumerate(keys):
            got = self._load(k)
            if got is None or got[0].kind != LAYOUT_SHARD:
                return None
            stored = stored_axes(got[0].axes)
            tp = [a for a in stored if a.kind == TP]
            if not tp or tp[0].rank != r or tp[0].size != count or tp[0].split_dim != split_dim:
                return None
            if others is not None and [a for a in stored if a.kind != TP] != list(others):
                return None
            parts.append(got[1])
        return _torch().cat(parts, dim=split_dim) if parts else None

    def _tp_full(self, base: bytes, axes: Axes) -> Optional[Tensor]:
        """The full tensor of TP-sharded ``axes`` (its TP rank and size aside), from the
        parallelism manifest, or else from the shards' own headers (one TP axis)."""
        i = tp_index(axes)
        if i is None:
            return None
        a = axes[i]
        others = tuple(x for x in sorted(axes, key=lambda x: x.kind) if x.kind != TP)
        man = parse_manifest(self.get(parallelism_manifest_key(base)))
        if man is not None:
            _code, glob, sd, count = man
            if a.split_dim is not None and a.split_dim != sd:
                return None
            keys = [shard_key(base, with_tp(axes, r, count)) for r in range(count)]
        elif len(axes) == 1:
            first = self._load(tp_key(base, 0) if a.size > 1 else base)
            tps = [x for x in first[0].axes if x.kind == TP] if first is not None else []
            if not tps:
                return None
            sd, count = tps[0].split_dim, tps[0].shards
            glob = first[0].global_shape if first is not None else ()
            if a.split_dim is not None and a.split_dim != sd:
                return None
            keys = [tp_key(base, r) if count > 1 else base for r in range(count)]
        else:
            return None
        full = self._concat(keys, sd, count, others)
        if full is None or tuple(full.shape) != tuple(glob):
            return None
        return full

    def _writer_full(self, base: bytes) -> Optional[Tensor]:
        man = parse_manifest(self.get(writer_manifest_key(base)))
        if man is None:
            return None
        _code, glob, sd, count = man
        full = self._concat([writer_key(base, Writer(r, count, sd)) for r in range(count)], sd,
                            count, ())
        return full if full is not None and tuple(full.shape) == tuple(glob) else None

    def _parallel_read(self, key: Key, target: Any) -> Tuple[Optional[Tensor], Optional[bytes]]:
        """``get_tensor_with_parallelism``: ``(tensor, key it was stored under)``; the key is
        None for a tensor put together from shards."""
        base = _key_bytes(key)
        try:
            mode, axes = parse_target(target)
        except BadRequest:
            return None, None
        if axes is None:
            if mode == "as_stored":
                return self.get_tensor(key), base
            if mode == "full":
                full = self._writer_full(base)
                return (full, None) if full is not None else (self.get_tensor(key), base)
            return None, None
        if mode == "shard":
            want = sorted(axes, key=lambda x: x.kind)
            tries = [shard_key(base, axes)]
            if len(axes) == 1 and axes[0].kind == TP:
                a = axes[0]
                tries.append(writer_key(base, Writer(a.rank, a.size, a.split_dim or 0)))
            for k in tries:
                got = self._load(k)
                if got is not None and got[0].kind == LAYOUT_SHARD \
                        and list(stored_axes(got[0].axes)) == want:
                    return got[1], k
            i = tp_index(axes)
            if i is not None:
                full = self._tp_full(base, axes)
                a = axes[i]
                sd = a.split_dim if a.split_dim is not None else 0
                if full is not None and uniform(list(full.shape), sd, a.size):
                    start, ext = shard_range(full.shape[sd], a.rank, a.size)
                    return full.narrow(sd, start, ext).contiguous(), None
                if len(axes) == 1:
                    k = tp_key(base, a.rank) if a.size > 1 else base
                    return self.get_tensor(k), k
            return None, None
        if mode == "full" and tp_index(axes) is not None:
            return self._tp_full(base, axes), None
        return None, None

    @staticmethod
    def _into(t: Optional[Tensor], buffer_ptr: int, size: int) -> Optional[Tensor]:
        """``t`` written to caller memory as a tensor object; the tensor over that memory."""
        h = header(t) if t is not None else None
        if t is None or h is None or not isinstance(buffer_ptr, int) or not buffer_ptr:
            return None
        nbytes = t.numel() * t.element_size()
        if not isinstance(size, int) or HEADER_LEN + nbytes > size:
            return None
        ctypes.memmove(buffer_ptr, h, HEADER_LEN)
        if nbytes:
            ctypes.memmove(buffer_ptr + HEADER_LEN, t.contiguous().data_ptr(), nbytes)
        return _view(_over(buffer_ptr, HEADER_LEN + nbytes), t.dtype, tuple(t.shape), nbytes)

    def _parallel_read_into(self, key: Key, buffer_ptr: int, size: int,
                            target: Any) -> Optional[Tensor]:
        t, k = self._parallel_read(key, target)
        if t is None:
            return None
        if k is not None:
            return self.get_tensor_into(k, buffer_ptr, size)
        return self._into(t, buffer_ptr, size)

    # ---------------------------------------------------------------- *_with_tp
    def put_tensor_with_tp(self, key: Key, tensor: Tensor, tp_rank: int = 0, tp_size: int = 1,
                           split_dim: int = 0) -> int:
        """Splits a full tensor into ``tp_size`` even shards along ``split_dim`` and stores each
        under ``key_tp_<rank>`` (all ranks; ``tp_size`` 1 stores the tensor under ``key``)."""
        return self._tp_write(key, tensor, tp_size, split_dim, False, None)

    def pub_tensor_with_tp(self, key: Key, tensor: Tensor,
                           config: Optional[ReplicateConfig] = None, tp_rank: int = 0,
                           tp_size: int = 1, split_dim: int = 0) -> int:
        """``put_tensor_with_tp`` with a ``ReplicateConfig``."""
        return self._tp_write(key, tensor, tp_size, split_dim, False, config)

    def batch_put_tensor_with_tp(self, base_keys: Sequence[Key], tensors_list: Sequence[Tensor],
                                 tp_rank: int = 0, tp_size: int = 1,
                                 split_dim: int = 0) -> List[int]:
        """``put_tensor_with_tp`` per key; one code per key."""
        return self.batch_pub_tensor_with_tp(base_keys, tensors_list, None, tp_rank, tp_size,
                                             split_dim)

    def batch_pub_tensor_with_tp(self, base_keys: Sequence[Key], tensors_list: Sequence[Tensor],
                                 config: Optional[ReplicateConfig] = None, tp_rank: int = 0,
                                 tp_size: int = 1, split_dim: int = 0) -> List[int]:
        """``pub_tensor_with_tp`` per key; one code per key."""
        keys = _key_list(base_keys)
        tensors = list(tensors_list)
        if len(keys) != len(tensors):
            return [INVALID_PARAMS] * len(keys)
        return [self._tp_write(k, t, tp_size, split_dim, False, config)
                for k, t in zip(keys, tensors)]

    def put_tensor_with_tp_from(self, key: Key, buffer_ptr: int, size: int, tp_rank: int = 0,
                                tp_size: int = 1, split_dim: int = 0) -> int:
        """``put_tensor_with_tp`` of a tensor object in caller memory (``[header][bytes]``, as
        ``get_tensor_into`` leaves it), zero copy."""
        if tp_size <= 1:
            return self._put_tensor_from([key], [buffer_ptr], [size], False)[0]
        return self._tp_write_from(_key_bytes(key), buffer_ptr, size, tp_size, split_dim, None,
                                   False, None)

    def batch_put_tensor_with_tp_from(self, base_keys: Sequence[Key], buffer_ptrs: Sequence[int],
                                      sizes: Sequence[int], tp_rank: int = 0, tp_size: int = 1,
                                      split_dim: int = 0) -> List[int]:
        """``put_tensor_with_tp_from`` per key; one code per key."""
        keys, ptrs, lens = _key_list(base_keys), list(buffer_ptrs), list(sizes)
        if not len(keys) == len(ptrs) == len(lens):
            return [INVALID_PARAMS] * len(keys)
        return [self.put_tensor_with_tp_from(k, p, n, tp_rank, tp_size, split_dim)
                for k, p, n in zip(keys, ptrs, lens)]

    def get_tensor_with_tp(self, key: Key, tp_rank: int = 0, tp_size: int = 1,
                           split_dim: int = 0) -> Optional[Tensor]:
        """The shard ``key_tp_<tp_rank>`` (``key`` itself when ``tp_size`` is 1), or None."""
        return self.get_tensor(tp_key(_key_bytes(key), tp_rank) if tp_size > 1 else key)

    def batch_get_tensor_with_tp(self, base_keys: Sequence[Key], tp_rank: int = 0,
                                 tp_size: int = 1) -> List[Optional[Tensor]]:
        """``get_tensor_with_tp`` per key."""
        keys = _key_list(base_keys)
        return self.batch_get_tensor([tp_key(k, tp_rank) for k in keys] if tp_size > 1 else keys)

    def get_tensor_with_tp_into(self, key: Key, buffer_ptr: int, size: int, tp_rank: int = 0,
                                tp_size: int = 1, split_dim: int = 0) -> Optional[Tensor]:
        """``get_tensor_with_tp`` into caller memory (as ``get_tensor_into``)."""
        k = tp_key(_key_bytes(key), tp_rank) if tp_size > 1 else key
        return self.get_tensor_into(k, buffer_ptr, size)

    def batch_get_tensor_with_tp_into(self, base_keys: Sequence[Key], buffer_ptrs: Sequence[int],
                                      sizes: Sequence[int], tp_rank: int = 0,
                                      tp_size: int = 1) -> List[Optional[Tensor]]:
        """``get_tensor_with_tp_into`` per key."""
        keys = _key_list(base_keys)
        return self.batch_get_tensor_into(
            [tp_key(k, tp_rank) for k in keys] if tp_size > 1 else keys, buffer_ptrs, sizes)

    # ---------------------------------------------------------------- *_with_parallelism
    def put_tensor_with_parallelism(self, key: Key, tensor: Tensor, parallelism: Any = None,
                                    config: Optional[ReplicateConfig] = None,
                                    writer_partition: Any = None) -> int:
        """Stores ``tensor`` as the shard ``parallelism`` (a ``TensorParallelism``) names: with
        one TP axis the tensor is that shard; with a TP axis and others it is the full tensor,
        cut to the TP rank's shard; without a TP axis it is stored as it is, tagged. Or, with
        ``writer_partition`` (``rank``, ``size``, ``split_dim``), the full tensor's writer
        shard. With neither, a plain ``pub_tensor``. 0 or a negative code."""
        return self._parallel_write(key, tensor, parallelism, writer_partition, False, config)

    def upsert_tensor_with_parallelism(self, key: Key, tensor: Tensor, parallelism: Any = None,
                                       config: Optional[ReplicateConfig] = None,
                                       writer_partition: Any = None) -> int:
        """``put_tensor_with_parallelism``, create-or-replace."""
        return self._parallel_write(key, tensor, parallelism, writer_partition, True, config)

    def _parallel_batch(self, keys: Sequence[Key], values: List[Any], parallelisms: Any,
                        writer_partitions: Any, one: Any) -> List[int]:
        enc = _key_list(keys)
        n = len(enc)
        if (parallelisms is not None and writer_partitions is not None) or len(values) != n:
            return [INVALID_PARAMS] * n
        requests = parallelisms if parallelisms is not None else writer_partitions
        if requests is not None and (not isinstance(requests, list) or len(requests) != n):
            return [INVALID_PARAMS] * n
        out = []
        for i, (k, v) in enumerate(zip(enc, values)):
            if requests is None:
                out.append(one(k, v, None, None))
            elif parallelisms is not None:
                out.append(one(k, v, requests[i], None))
            else:
                out.append(one(k, v, None, requests[i]))
        return out

    def batch_put_tensor_with_parallelism(self, keys: Sequence[Key],
                                          tensors_list: Sequence[Tensor],
                                          parallelisms: Any = None,
                                          config: Optional[ReplicateConfig] = None,
                                          writer_partitions: Any = None) -> List[int]:
        """``put_tensor_with_parallelism`` per key (``parallelisms`` or ``writer_partitions``:
        a list as long as ``keys``); one code per key."""
        return self._parallel_batch(
            keys, list(tensors_list), parallelisms, writer_partitions,
            lambda k, t, p, w: self._parallel_write(k, t, p, w, False, config))

    def batch_upsert_tensor_with_parallelism(self, keys: Sequence[Key],
                                             tensors_list: Sequence[Tensor],
                                             parallelisms: Any = None,
                                             config: Optional[ReplicateConfig] = None,
                                             writer_partitions: Any = None) -> List[int]:
        """``upsert_tensor_with_parallelism`` per key; one code per key."""
        return self._parallel_batch(
            keys, list(tensors_list), parallelisms, writer_partitions,
            lambda k, t, p, w: self._parallel_write(k, t, p, w, True, config))

    def put_tensor_with_parallelism_from(self, key: Key, buffer_ptr: int, size: int,
                                         parallelism: Any = None,
                                         config: Optional[ReplicateConfig] = None,
                                         writer_partition: Any = None) -> int:
        """``put_tensor_with_parallelism`` of a full tensor object in caller memory, zero copy
        (a TP axis stores every TP rank's shard)."""
        return self._parallel_write_from(key, buffer_ptr, size, parallelism, writer_partition,
                                         False, config)

    def upsert_tensor_with_parallelism_from(self, key: Key, buffer_ptr: int, size: int,
                                            parallelism: Any = None,
                                            config: Optional[ReplicateConfig] = None,
                                            writer_partition: Any = None) -> int:
        """``put_tensor_with_parallelism_from``, create-or-replace."""
        return self._parallel_write_from(key, buffer_ptr, size, parallelism, writer_partition,
                                         True, config)

    def batch_put_tensor_with_parallelism_from(self, keys: Sequence[Key],
                                               buffer_ptrs: Sequence[int], sizes: Sequence[int],
                                               parallelisms: Any = None,
                                               config: Optional[ReplicateConfig] = None,
                                               writer_partitions: Any = None) -> List[int]:
        """``put_tensor_with_parallelism_from`` per key; one code per key."""
        if len(list(buffer_ptrs)) != len(list(sizes)):
            return [INVALID_PARAMS] * len(_key_list(keys))
        return self._parallel_batch(
            keys, list(zip(buffer_ptrs, sizes)), parallelisms, writer_partitions,
            lambda k, b, p, w: self._parallel_write_from(k, b[0], b[1], p, w, False, config))

    def batch_upsert_tensor_with_parallelism_from(self, keys: Sequence[Key],
                                                  buffer_ptrs: Sequence[int],
                                                  sizes: Sequence[int], parallelisms: Any = None,
                                                  config: Optional[ReplicateConfig] = None,
                                                  writer_partitions: Any = None) -> List[int]:
        """``upsert_tensor_with_parallelism_from`` per key; one code per key."""
        if len(list(buffer_ptrs)) != len(list(sizes)):
            return [INVALID_PARAMS] * len(_key_list(keys))
        return self._parallel_batch(
            keys, list(zip(buffer_ptrs, sizes)), parallelisms, writer_partitions,
            lambda k, b, p, w: self._parallel_write_from(k, b[0], b[1], p, w, True, config))

    def get_tensor_with_parallelism(self, key: Key, target: Any = None) -> Optional[Tensor]:
        """Reads by ``target`` (a ``ReadTarget``; None: the object as stored): ``"shard"``
        gives the named shard (stored, or cut from the full tensor its shards make up),
        ``"full"`` the full tensor put together from its shards. None when it cannot."""
        return self._parallel_read(key, target)[0]

    def batch_get_tensor_with_parallelism(self, keys: Sequence[Key],
                                          targets: Any = None) -> List[Optional[Tensor]]:
        """``get_tensor_with_parallelism`` per key (``targets``: None or a list as long as
        ``keys``)."""
        if targets is None:
            return self.batch_get_tensor(keys)
        enc = _key_list(keys)
        if not isinstance(targets, list) or len(targets) != len(enc):
            return [None] * len(enc)
        return [self._parallel_read(k, t)[0] for k, t in zip(enc, targets)]

    def get_tensor_with_parallelism_into(self, key: Key, buffer_ptr: int, size: int,
                                         target: Any = None) -> Optional[Tensor]:
        """``get_tensor_with_parallelism`` into caller memory (``[header][bytes]``); the tensor
        over that memory, or None."""
        return self._parallel_read_into(key, buffer_ptr, size, target)

    def batch_get_tensor_with_parallelism_into(self, keys: Sequence[Key],
                                               buffer_ptrs: Sequence[int],
                                               sizes: Sequence[int],
                                               targets: Any = None) -> List[Optional[Tensor]]:
        """``get_tensor_with_parallelism_into`` per key."""
        enc, ptrs, lens = _key_list(keys), list(buffer_ptrs), list(sizes)
        n = len(enc)
        if not n == len(ptrs) == len(lens):
            return [None] * n
        if targets is not None and (not isinstance(targets, list) or len(targets) != n):
            return [None] * n
        ts = targets if targets is not None else [None] * n
        return [self._parallel_read_into(k, p, s, t) for k, p, s, t in zip(enc, ptrs, lens, ts)]
