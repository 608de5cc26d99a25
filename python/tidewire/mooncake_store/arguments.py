"""Argument handling shared by the store modules: keys as the library takes them (full-length
byte strings in one joined buffer), per-key result arrays, caller addresses and sizes."""

import ctypes
import operator
from array import array
from ctypes import POINTER, c_char_p, c_int32, c_size_t, c_uint64, c_void_p
from typing import Any, Iterable, List, Optional, Sequence, Tuple, Union

#: A store key: ``str`` (used as its UTF-8 bytes) or ``bytes``/``bytearray`` (see ``_key_bytes``).
Key = Union[str, bytes, bytearray]
#: A value to store: any bytes-like object (the buffer protocol).
Value = Any


_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = [c_void_p, ctypes.c_ssize_t]
_BYTES_MAX = 1 << 62


def _bytes_address(b: bytes) -> int:
    """Address of a ``bytes`` object's contents (no copy)."""
    return ctypes.cast(c_char_p(b), c_void_p).value or 0


_PTR_CODE = "Q" if ctypes.sizeof(c_void_p) == 8 else "I"
_SIZE_CODE = "Q" if ctypes.sizeof(c_size_t) == 8 else "I"


def _key_bytes(key: Any) -> bytes:
    """A key as the library takes it: a ``str`` as its UTF-8 bytes (lone surrogates kept, so the
    library refuses them as invalid UTF-8), ``bytes``/``bytearray`` as they are. Any other type
    raises ``TypeError``."""
    if type(key) is str:
        return key.encode("utf-8", "surrogatepass")
    if isinstance(key, str):
        return str.encode(key, "utf-8", "surrogatepass")
    if isinstance(key, (bytes, bytearray)):
        return bytes(key)
    raise TypeError(f"a store key must be str, not {type(key).__name__}")


def _key_list(keys: Any) -> List[bytes]:
    """A batch's keys as bytes (see ``_key_bytes``). A ``str`` or ``bytes`` where the list should
    be, or something that is not iterable, raises ``TypeError``."""
    if isinstance(keys, (str, bytes, bytearray)):
        raise TypeError(f"store keys must be a list of str, not {type(keys).__name__}")
    if type(keys) is not list:
        try:
            keys = list(keys)
        except TypeError:
            raise TypeError(
                f"store keys must be a list of str, not {type(keys).__name__}"
            ) from None
    packed = _packed_str_keys(keys)
    return packed if packed is not None else [_key_bytes(k) for k in keys]


class _PackedKeys(List[bytes]):
    """Encoded keys (a list of ``bytes``, as ``_key_list`` gives) that also hold ``blob``: the
    keys' UTF-8 joined by NUL bytes, which ``native._c_keys`` hands to the library to split
    (``tw_store_split_keys``) instead of joining again."""

    blob: bytes


def _packed_str_keys(keys: List[Any]) -> Optional[_PackedKeys]:
    """The fast path of ``_key_list`` for a list of ``str`` without NUL: one join, one encode
    and one split, all C loops (1024 keys: ~34 us, against ~140 us key by key). None when a key
    is not a ``str`` or holds a NUL (the caller goes key by key)."""
    if not keys:
        return None
    try:
        joined = "\0".join(keys)
    except TypeError:
        return None
    blob = joined.encode("utf-8", "surrogatepass")
    parts = blob.split(b"\0")
    if len(parts) != len(keys):  # a key holds a NUL
        return None
    out = _PackedKeys(parts)
    out.blob = blob
    return out


def _key_list_of_lists(groups: Any) -> List[Any]:
    """``get_into_ranges``' ``all_keys``: a list of key lists (``TypeError`` otherwise)."""
    if isinstance(groups, (str, bytes, bytearray)):
        raise TypeError(f"all_keys must be a list of lists of str, not {type(groups).__name__}")
    try:
        return list(groups)
    except TypeError:
        raise TypeError(
            f"all_keys must be a list of lists of str, not {type(groups).__name__}"
        ) from None


def _codes(n: int) -> Tuple["array[int]", Any]:
    """Per-key results for the library to fill: (array("i") of ``n`` zeros, its pointer).
    ``.tolist()`` on it is much cheaper than ``list()`` of a ctypes array."""
    out = array("i", bytes(4 * n))
    return out, ctypes.cast(out.buffer_info()[0], POINTER(c_int32))


def _address(value: Any) -> Tuple[int, int, Any]:
    """(address, length, keepalive) of a bytes-like object, without copying when possible."""
    if isinstance(value, bytes):
        return ctypes.cast(c_char_p(value), c_void_p).value or 0, len(value), value
    mv = memoryview(value)
    if not mv.c_contiguous:
        data = mv.tobytes()
        return _address(data)
    mv = mv.cast("B")
    if mv.readonly:
        data = mv.tobytes()
        return _address(data)
    n = mv.nbytes
    if n == 0:
        return 0, 0, mv
    arr = (ctypes.c_char * n).from_buffer(mv)
    return ctypes.addressof(arr), n, (mv, arr)


def _ints(values: Iterable[Any], limit: int) -> Optional[List[int]]:
    """Integers (anything with ``__index__``, e.g. numpy scalars) in ``[0, limit)``, or None."""
    out = []
    for v in values:
        if isinstance(v, bool):
            return None
        try:
            i = operator.index(v)
        except TypeError:
            return None
        if not 0 <= i < limit:
            return None
        out.append(i)
    return out


def _sizes_ok(sizes: Iterable[Any]) -> bool:
    return _ints(sizes, 1 << 63) is not None


def _ptrs_ok(ptrs: Iterable[Any]) -> bool:
    return _ints(ptrs, 1 << 64) is not None


def _c_buffers(ptrs: Sequence[Any], sizes: Sequence[Any]) -> Tuple[Any, Any]:
    """Checked addresses and sizes (see ``_settled_by_args``) as C arrays."""
    n = len(ptrs)
    addrs: Any = _ints(ptrs, 1 << 64)
    lengths: Any = _ints(sizes, 1 << 63)
    return (c_void_p * n)(*addrs), (c_uint64 * n)(*lengths)


def _pack_ranges(n: int, all_ptrs: Any, all_sizes: Any,
                 all_offsets: Any) -> Optional[Tuple[List[int], Any, Any, Any, Any]]:
    """Mooncake's per-key lists of ranges, flattened for the C API: ``(good, counts, ptrs,
    sizes, offsets)`` where ``good`` lists the keys whose three lists have one length and
    hold valid numbers (the others keep their -600), and key ``good[k]`` owns the next
    ``counts[k]`` entries of the flat arrays. None when the outer lists are not ``n`` long."""
    try:
        ptr_lists, size_lists, off_lists = list(all_ptrs), list(all_sizes), list(all_offsets)
    except TypeError:
        return None
    if not (n == len(ptr_lists) == len(size_lists) == len(off_lists)):
        return None
    good: List[int] = []
    counts = array(_SIZE_CODE)
    ptrs, sizes, offs = array("Q"), array("Q"), array("Q")
    for i in range(n):
        try:
            ps, ss, os_ = list(ptr_lists[i]), list(size_lists[i]), list(off_lists[i])
        except TypeError:
            continue
        if not len(ps) == len(ss) == len(os_):
            continue
        pi, si, oi = _ints(ps, 1 << 64), _ints(ss, 1 << 63), _ints(os_, 1 << 63)
        if pi is None or si is None or oi is None:
            continue
        good.append(i)
        counts.append(len(pi))
        ptrs.extend(pi)
        sizes.extend(si)
        offs.extend(oi)
    return good, counts, ptrs, sizes, offs
