"""Tensor helpers of ``MooncakeDistributedStore`` (Mooncake's ``put_tensor``/``get_tensor``
family), mixed into the client class. torch is imported on first use, so the package works
without it.

A tensor is stored as Mooncake stores it: a 304-byte header, then the tensor's bytes in C
order. The header (little-endian) holds the magic ``b"NOOM"``, version 1 (u16), the header
length 304 (u16), the dtype code (u32, Mooncake's numbering: see ``DTYPE_CODES``), the number of
dimensions (u32), a zero u64, the data offset 304 (u64), the data length (u64), then the shape
twice as eight i64 each (unused dimensions -1), then zeros. So ``get`` of a tensor key returns
the same bytes as on Mooncake, and ``put_tensor_from`` takes a buffer in that layout.

One difference: a 0-d tensor comes back 0-d (shape ``()``); Mooncake gives it shape ``(1,)``.
Tensors on a device are copied to host memory first. Not provided: the ``*_with_tp``,
``*_with_parallelism`` and ``*_cuda`` forms, ``save_tensor_to_safetensor`` /
``load_tensor_from_safetensor``."""

from __future__ import annotations

import ctypes
import struct
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._store_codes import INVALID_PARAMS as _INVALID

if TYPE_CHECKING:
    from ._store_args import Key
    from ._store_config import ReplicateConfig

#: A ``torch.Tensor`` (torch is imported on first use, and is not typed here).
Tensor = Any

HEADER_LEN = 304
MAGIC = b"NOOM"
MAX_DIMS = 8
_HEAD = struct.Struct("<4sHHIIQQQ")
_DIMS = struct.Struct("<8q")

_DTYPE_NAMES = [
    "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
    "uint64", "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
]


def _torch() -> Any:
    import torch

    return torch


def dtype_codes() -> Dict[Any, int]:
    """torch dtype -> Mooncake's dtype code (the dtypes this torch has)."""
    torch = _torch()
    return {getattr(torch, n): i for i, n in enumerate(_DTYPE_NAMES) if hasattr(torch, n)}


def _code_dtype(code: int) -> Any:
    if not 0 <= code < len(_DTYPE_NAMES):
        return None
    return getattr(_torch(), _DTYPE_NAMES[code], None)


def header(t: Tensor) -> Optional[bytes]:
    """The header for tensor ``t`` (contiguous, on the host), or None for a dtype or rank
    Mooncake cannot store."""
    code = dtype_codes().get(t.dtype)
    if code is None or t.dim() > MAX_DIMS:
        return None
    dims = list(t.shape) + [-1] * (MAX_DIMS - t.dim())
    nbytes = t.numel() * t.element_size()
    return (_HEAD.pack(MAGIC, 1, HEADER_LEN, code, t.dim(), 0, HEADER_LEN, nbytes)
            + _DIMS.pack(*dims) + _DIMS.pack(*dims)).ljust(HEADER_LEN, b"\0")


def parse(mem: Any, length: int) -> Optional[Tuple[Any, Tuple[int, ...], int]]:
    """``(dtype, shape, data_length)`` from a header at the start of ``mem`` (a buffer of
    ``length`` bytes), or None when it is not a tensor Mooncake's way."""
    if length < HEADER_LEN:
        return None
    magic, version, hlen, code, ndim, _z, off, nbytes = _HEAD.unpack_from(mem, 0)
    if magic != MAGIC or hlen != HEADER_LEN or off != HEADER_LEN or ndim > MAX_DIMS:
        return None
    dtype = _code_dtype(code)
    if dtype is None or HEADER_LEN + nbytes > length:
        return None
    shape = tuple(_DIMS.unpack_from(mem, 40)[:ndim])
    if any(d < 0 for d in shape):
        return None
    n = 1
    for d in shape:
        n *= d
    if n * _torch().empty((), dtype=dtype).element_size() != nbytes:
        return None
    return dtype, shape, nbytes


def _host(t: Any) -> Optional[Tensor]:
    """``t`` contiguous in host memory, or None when it is not a tensor."""
    try:
        torch = _torch()
    except ImportError:  # no torch here, so no tensor either
        return None
    if not isinstance(t, torch.Tensor):
        return None
    if t.device.type != "cpu":
        t = t.cpu()
    return t.contiguous()


def _view(mem_tensor: Tensor, dtype: Any, shape: Tuple[int, ...],
          nbytes: int) -> Tensor:
    """The tensor over ``nbytes`` of uint8 tensor ``mem_tensor`` after the header."""
    data = mem_tensor[HEADER_LEN:HEADER_LEN + nbytes]
    if nbytes == 0:
        return _torch().empty(shape, dtype=dtype)
    return data.view(dtype).reshape(shape)


def _over(addr: int, length: int) -> Tensor:
    """A uint8 tensor over caller memory (no copy; the caller keeps the memory alive)."""
    torch = _torch()
    if length == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer((ctypes.c_ubyte * length).from_address(addr), dtype=torch.uint8)


class TensorCalls:
    """The tensor methods; the class they are mixed into provides ``_put_pieces``,
    ``_get_made``, ``_get_into``, ``_put`` and key encoding."""

    _put_pieces: Callable[..., List[int]]
    _get_made: Callable[..., List[Any]]
    _get_into: Callable[..., List[int]]
    _put: Callable[..., List[int]]

    # ------------------------------------------------------------------ writes
    def _put_tensors(self, keys: Sequence[Key], tensors: Sequence[Tensor], upsert: bool,
                     config: Optional[ReplicateConfig]) -> List[int]:
        from ._store_args import _key_list

        enc = _key_list(keys)
        tlist = list(tensors)
        if len(enc) != len(tlist):
            return [_INVALID] * len(enc)
        results = [_INVALID] * len(enc)
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
        from ._store_args import _key_list

        enc = _key_list(keys)
        ptrs, size_list = list(buffer_ptrs), list(sizes)
        if not len(enc) == len(ptrs) == len(size_list):
            return [_INVALID] * len(enc)
        # The header is not read here (an unmapped address must fail as -600 in the library,
        # not crash in Python): a buffer that holds no tensor is stored as it is, and
        # get_tensor then returns None for it.
        ok = [isinstance(n, int) and not isinstance(n, bool) and n >= HEADER_LEN
              for n in size_list]
        results = [_INVALID] * len(enc)
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

    # ------------------------------------------------------------------ reads
    def batch_get_tensor(self, keys: Sequence[Key]) -> List[Optional[Tensor]]:
        """Tensors of several keys (None for a missing key or a value that is not a tensor).
        Each value is read straight into a new tensor's memory, one copy."""
        from ._store_args import _key_list

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
        from ._store_args import _key_list

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
