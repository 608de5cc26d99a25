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

import ctypes
import struct

HEADER_LEN = 304
MAGIC = b"NOOM"
MAX_DIMS = 8
_HEAD = struct.Struct("<4sHHIIQQQ")
_DIMS = struct.Struct("<8q")
_INVALID = -600

_DTYPE_NAMES = [
    "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
    "uint64", "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
]


def _torch():
    import torch

    return torch


def dtype_codes():
    """torch dtype -> Mooncake's dtype code (the dtypes this torch has)."""
    torch = _torch()
    return {getattr(torch, n): i for i, n in enumerate(_DTYPE_NAMES) if hasattr(torch, n)}


def _code_dtype(code):
    if not 0 <= code < len(_DTYPE_NAMES):
        return None
    return getattr(_torch(), _DTYPE_NAMES[code], None)


def header(t):
    """The header for tensor ``t`` (contiguous, on the host), or None for a dtype or rank
    Mooncake cannot store."""
    code = dtype_codes().get(t.dtype)
    if code is None or t.dim() > MAX_DIMS:
        return None
    dims = list(t.shape) + [-1] * (MAX_DIMS - t.dim())
    nbytes = t.numel() * t.element_size()
    return (_HEAD.pack(MAGIC, 1, HEADER_LEN, code, t.dim(), 0, HEADER_LEN, nbytes)
            + _DIMS.pack(*dims) + _DIMS.pack(*dims)).ljust(HEADER_LEN, b"\0")


def parse(mem, length):
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


def _host(t):
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


def _view(mem_tensor, dtype, shape, nbytes):
    """The tensor over ``nbytes`` of uint8 tensor ``mem_tensor`` after the header."""
    data = mem_tensor[HEADER_LEN:HEADER_LEN + nbytes]
    if nbytes == 0:
        return _torch().empty(shape, dtype=dtype)
    return data.view(dtype).reshape(shape)


def _over(addr, length):
    """A uint8 tensor over caller memory (no copy; the caller keeps the memory alive)."""
    torch = _torch()
    if length == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer((ctypes.c_ubyte * length).from_address(addr), dtype=torch.uint8)


class TensorCalls:
    """The tensor methods; the class they are mixed into provides ``_put_pieces``,
    ``_get_made``, ``_get_into``, ``_put`` and key encoding."""

    # ------------------------------------------------------------------ writes
    def _put_tensors(self, keys, tensors, upsert, config):
        from ._store_args import _key_list

        enc = _key_list(keys)
        tensors = list(tensors)
        if len(enc) != len(tensors):
            return [_INVALID] * len(enc)
        results = [_INVALID] * len(enc)
        keep, good, ptrs, sizes = [], [], [], []
        for i, t in enumerate(tensors):
            h = _host(t)
            head = header(h) if h is not None else None
            if head is None:
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

    def put_tensor(self, key, tensor):
        """Create-only put of a tensor (dtype and shape kept). 0 or a negative code: -600 for
        something that is not a tensor, or a dtype Mooncake cannot store (complex)."""
        return self._put_tensors([key], [tensor], False, None)[0]

    def upsert_tensor(self, key, tensor):
        """Create-or-replace of a tensor."""
        return self._put_tensors([key], [tensor], True, None)[0]

    def pub_tensor(self, key, tensor, config=None):
        """``put_tensor`` with a ``ReplicateConfig``."""
        return self._put_tensors([key], [tensor], False, config)[0]

    def upsert_pub_tensor(self, key, tensor, config=None):
        """``upsert_tensor`` with a ``ReplicateConfig``."""
        return self._put_tensors([key], [tensor], True, config)[0]

    def batch_put_tensor(self, keys, tensors_list):
        """Create-only puts of tensors, one transfer batch; one code per key (-600 for every key
        when the lists differ in length)."""
        return self._put_tensors(keys, tensors_list, False, None)

    def batch_upsert_tensor(self, keys, tensors_list):
        """Create-or-replace of tensors; one code per key."""
        return self._put_tensors(keys, tensors_list, True, None)

    def batch_pub_tensor(self, keys, tensors_list, config=None):
        """``batch_put_tensor`` with a ``ReplicateConfig``."""
        return self._put_tensors(keys, tensors_list, False, config)

    def batch_upsert_pub_tensor(self, keys, tensors_list, config=None):
        """``batch_upsert_tensor`` with a ``ReplicateConfig``."""
        return self._put_tensors(keys, tensors_list, True, config)

    def _put_tensor_from(self, keys, buffer_ptrs, sizes, upsert):
        from ._store_args import _key_list

        enc = _key_list(keys)
        ptrs, sizes = list(buffer_ptrs), list(sizes)
        if not len(enc) == len(ptrs) == len(sizes):
            return [_INVALID] * len(enc)
        # The header is not read here (an unmapped address must fail as -600 in the library,
        # not crash in Python): a buffer that holds no tensor is stored as it is, and
        # get_tensor then returns None for it.
        ok = [isinstance(n, int) and not isinstance(n, bool) and n >= HEADER_LEN for n in sizes]
        results = [_INVALID] * len(enc)
        idx = [i for i, g in enumerate(ok) if g]
        if idx:
            codes = self._put([enc[i] for i in idx], [ptrs[i] for i in idx],
                              [sizes[i] for i in idx], upsert, False, None)
            for i, c in zip(idx, codes):
                results[i] = c
        return results

    def put_tensor_from(self, key, buffer_ptr, size):
        """Zero-copy put of a buffer already laid out as ``[header][tensor bytes]`` (as
        ``get_tensor_into`` leaves it). 0, or -600 for a size shorter than the header or a
        pointer the library refuses. The header is not checked here: ``get_tensor`` returns
        None for a value that holds no tensor."""
        return self._put_tensor_from([key], [buffer_ptr], [size], False)[0]

    def upsert_tensor_from(self, key, buffer_ptr, size):
        """``put_tensor_from``, create-or-replace."""
        return self._put_tensor_from([key], [buffer_ptr], [size], True)[0]

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
        """``put_tensor_from`` per key; one code per key."""
        return self._put_tensor_from(keys, buffer_ptrs, sizes, False)

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
        """``upsert_tensor_from`` per key; one code per key."""
        return self._put_tensor_from(keys, buffer_ptrs, sizes, True)

    # ------------------------------------------------------------------ reads
    def batch_get_tensor(self, keys):
        """Tensors of several keys (None for a missing key or a value that is not a tensor).
        Each value is read straight into a new tensor's memory, one copy."""
        from ._store_args import _key_list

        def make(size):
            torch = _torch()
            t = torch.empty(size, dtype=torch.uint8)
            return t, t.data_ptr()

        out = []
        for mem in self._get_made(_key_list(keys), make):
            meta = parse(mem.numpy(), mem.numel()) if mem is not None else None
            out.append(_view(mem, *meta) if meta is not None else None)
        return out

    def get_tensor(self, key):
        """The tensor stored under ``key``, or None."""
        return self.batch_get_tensor([key])[0]

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes):
        """Reads each value (header and bytes) into caller memory and returns tensors over it
        (no copy: they use the caller's memory, which must outlive them); None for a missing
        key, a buffer too small, or a value that is not a tensor."""
        from ._store_args import _key_list

        ptrs, sizes = list(buffer_ptrs), list(sizes)
        got = self._get_into(_key_list(keys), ptrs, sizes)
        out = []
        for n, p in zip(got, ptrs):
            meta = None
            if n >= HEADER_LEN:
                mem = _over(p, n)
                meta = parse(mem.numpy(), n)
            out.append(_view(mem, *meta) if meta is not None else None)
        return out

    def get_tensor_into(self, key, buffer_ptr, size):
        """``batch_get_tensor_into`` of one key."""
        return self.batch_get_tensor_into([key], [buffer_ptr], [size])[0]
