"""The tensor format of ``MooncakeDistributedStore``'s ``put_tensor``/``get_tensor`` family
(the methods are in :mod:`tidewire.mooncake_store.client`). torch is imported on first use, so
the package works without it.

A tensor is stored as Mooncake stores it: a 304-byte header, then the tensor's bytes in C
order. The header (little-endian) holds the magic ``b"NOOM"``, version 1 (u16), the header
length 304 (u16), the dtype code (u32, Mooncake's numbering: see ``DTYPE_CODES``), the number of
dimensions (u32), the layout kind (u32: 0 full, 1 shard) and a zero u32, the data offset 304
(u64), the data length (u64), then the global and the local shape as eight i64 each (unused
dimensions -1; the same for a full tensor), the axis count (u32, then a zero u32) and four
32-byte layout axes (kind, index, shard rank, shard count, split dim, a tag as i32, the local
extent of the split dimension as i64; see :mod:`~tidewire.mooncake_store.parallel`). So ``get``
of a tensor key returns the same bytes as on Mooncake, and ``put_tensor_from`` takes a buffer in
that layout. A tensor read back has the local shape.

One difference: a 0-d tensor comes back 0-d (shape ``()``); Mooncake gives it shape ``(1,)``.
Tensors on a device are copied to host memory first. The ``*_with_tp`` and
``*_with_parallelism`` forms are in :mod:`~tidewire.mooncake_store.parallel`, the safetensors
files in :mod:`~tidewire.mooncake_store.safetensor_files`."""

from __future__ import annotations

import ctypes
import struct
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

#: A ``torch.Tensor`` (torch is imported on first use, and is not typed here).
Tensor = Any

HEADER_LEN = 304
MAGIC = b"NOOM"
MAX_DIMS = 8
_HEAD = struct.Struct("<4sHHIIQQQ")
_DIMS = struct.Struct("<8q")
_AXIS = struct.Struct("<6iq")
#: Offsets of the local shape, the axis count and the first layout axis.
_LOCAL_AT, _COUNT_AT, _AXES_AT = 104, 168, 176
MAX_AXES = 4
LAYOUT_FULL, LAYOUT_SHARD = 0, 1


class LayoutAxis(NamedTuple):
    """One layout axis of a shard's header (Mooncake's ``LayoutAxis``)."""

    kind: int
    position: int
    rank: int
    shards: int
    split_dim: int
    tag: int
    extent: int


class Meta(NamedTuple):
    """A parsed header: dtype code, layout kind, global and local shape, layout axes."""

    code: int
    kind: int
    global_shape: Tuple[int, ...]
    local_shape: Tuple[int, ...]
    axes: Tuple[LayoutAxis, ...]
    nbytes: int

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


def shard_header(code: int, global_shape: Sequence[int], local_shape: Sequence[int],
                 axes: Sequence[LayoutAxis], nbytes: int) -> bytes:
    """A shard's header (layout kind 1): dtype ``code``, both shapes, up to four axes."""
    def dims(shape: Sequence[int]) -> bytes:
        return _DIMS.pack(*(list(shape) + [-1] * (MAX_DIMS - len(shape))))

    head = _HEAD.pack(MAGIC, 1, HEADER_LEN, code, len(global_shape), LAYOUT_SHARD, HEADER_LEN,
                      nbytes)
    out = head + dims(global_shape) + dims(local_shape) + struct.pack("<II", len(axes), 0)
    out += b"".join(_AXIS.pack(*a) for a in axes)
    return out.ljust(HEADER_LEN, b"\0")


def meta(mem: Any, length: int) -> Optional[Meta]:
    """The header at the start of ``mem`` (``length`` bytes of object), checked as Mooncake
    checks it, or None."""
    if length < HEADER_LEN:
        return None
    magic, version, hlen, code, ndim, _z, off, nbytes = _HEAD.unpack_from(mem, 0)
    kind = _z & 0xFFFFFFFF
    if magic != MAGIC or hlen != HEADER_LEN or off != HEADER_LEN or ndim > MAX_DIMS:
        return None
    if kind > LAYOUT_SHARD or not 0 <= code < len(_DTYPE_NAMES):
        return None
    if HEADER_LEN + nbytes > length:
        return None
    count = struct.unpack_from("<I", mem, _COUNT_AT)[0]
    if count > MAX_AXES:
        return None
    glob = tuple(_DIMS.unpack_from(mem, 40)[:ndim])
    local = tuple(_DIMS.unpack_from(mem, _LOCAL_AT)[:ndim])
    if any(d < 0 for d in glob + local):
        return None
    axes = tuple(LayoutAxis(*_AXIS.unpack_from(mem, _AXES_AT + 32 * i)) for i in range(count))
    return Meta(code, kind, glob, local, axes, nbytes)


def parse(mem: Any, length: int) -> Optional[Tuple[Any, Tuple[int, ...], int]]:
    """``(dtype, shape, data_length)`` from a header at the start of ``mem`` (a buffer of
    ``length`` bytes), or None when it is not a tensor Mooncake's way. ``shape`` is the local
    shape (a shard's own)."""
    m = meta(mem, length)
    if m is None:
        return None
    dtype = _code_dtype(m.code)
    if dtype is None:
        return None
    shape, nbytes = m.local_shape, m.nbytes
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
