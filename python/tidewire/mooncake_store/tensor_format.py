"""The tensor format of ``MooncakeDistributedStore``'s ``put_tensor``/``get_tensor`` family
(the methods are in :mod:`tidewire.mooncake_store.client`). torch is imported on first use, so
the package works without it.

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
from typing import Any, Dict, Optional, Tuple

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
