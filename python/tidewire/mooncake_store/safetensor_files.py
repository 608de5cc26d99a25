"""``save_tensor_to_safetensor`` / ``load_tensor_from_safetensor`` of
``MooncakeDistributedStore`` (:class:`SafetensorMixin`), with the safetensors file format
written and read here (no ``safetensors`` package needed): an 8-byte little-endian header
length, a JSON header ``{name: {"dtype", "shape", "data_offsets"}}`` padded with spaces to a
multiple of 8, then the raw tensor bytes."""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

from .arguments import Key, _key_bytes
from .codes import INVALID_PARAMS
from .tensor_format import Tensor, _torch

#: Mooncake's FILE_NOT_FOUND: ``save_tensor_to_safetensor`` of a key holding no tensor.
FILE_NOT_FOUND = -1100

_NAMES = {
    "float32": "F32", "float64": "F64", "int8": "I8", "uint8": "U8", "int16": "I16",
    "uint16": "U16", "int32": "I32", "uint32": "U32", "int64": "I64", "uint64": "U64",
    "bool": "BOOL", "float16": "F16", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}


def dumps(name: str, t: Tensor) -> bytes:
    """A safetensors file holding ``t`` under ``name``."""
    t = t.contiguous()
    dtype = _NAMES[str(t.dtype).replace("torch.", "")]
    nbytes = t.numel() * t.element_size()
    head = json.dumps({name: {"dtype": dtype, "shape": list(t.shape),
                              "data_offsets": [0, nbytes]}}, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    data = t.reshape(-1).view(_torch().uint8).numpy().tobytes() if nbytes else b""
    return struct.pack("<Q", len(head)) + head + data


def loads(data: bytes) -> Dict[str, Tensor]:
    """The tensors of a safetensors file, by name (ValueError for a malformed file)."""
    torch = _torch()
    (n,) = struct.unpack_from("<Q", data, 0)
    head = json.loads(data[8:8 + n])
    body = data[8 + n:]
    by_name = {v: k for k, v in _NAMES.items()}
    out: Dict[str, Tensor] = {}
    for name in sorted(head):
        if name == "__metadata__":
            continue
        info = head[name]
        dtype = getattr(torch, by_name[info["dtype"]])
        lo, hi = info["data_offsets"]
        raw = bytearray(body[lo:hi])
        t = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(dtype).reshape(info["shape"])
    return out


class SafetensorMixin:
    """Mooncake's safetensors helpers, for ``MooncakeDistributedStore``."""

    if TYPE_CHECKING:
        _h: Any
        _dummy: Any
        def get_tensor(self, key: Key) -> Optional[Tensor]: ...
        def put_tensor(self, key: Key, tensor: Tensor) -> int: ...

    def _started(self) -> bool:
        return self._h is not None or self._dummy is not None

    def save_tensor_to_safetensor(self, key: Key, file_name: Any = None) -> int:
        """Writes the tensor stored under ``key`` to a safetensors file (named ``key`` when
        ``file_name`` is None), the tensor named ``key`` in it. 0, -1100 when ``key`` holds no
        tensor, -600 when the file cannot be written (or the client is not set up)."""
        k = _key_bytes(key)
        if not self._started():
            return INVALID_PARAMS
        t = self.get_tensor(key)
        if t is None:
            return FILE_NOT_FOUND
        name = k.decode("utf-8", "surrogatepass")
        try:
            path = name if file_name is None else file_name
            if not isinstance(path, str):
                return INVALID_PARAMS
            with open(path, "wb") as f:
                f.write(dumps(name, t))
        except (OSError, KeyError, ValueError):
            return INVALID_PARAMS
        return 0

    def load_tensor_from_safetensor(self, key: Any = None, file_name: str = "") -> Optional[Tensor]:
        """Reads a safetensors file and stores its tensor named ``key`` (the first, by name,
        when there is none of that name) under ``key`` (``file_name`` when ``key`` is None),
        with ``put_tensor``. Returns the tensor, or None when the file cannot be read or the
        put fails."""
        if not self._started():
            return None
        try:
            with open(file_name, "rb") as f:
                tensors = loads(f.read())
        except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError,
                struct.error):
            return None
        if not tensors:
            return None
        target = file_name if key is None else key
        pick: Tuple[str, Tensor] = next(iter(tensors.items()))
        if key is not None and isinstance(key, str) and key in tensors:
            pick = (key, tensors[key])
        if self.put_tensor(target, pick[1]) != 0:
            return None
        return pick[1]
