"""The store's calls into the library: every ``tw_store_*`` call of the package is made here.

:mod:`tidewire._ffi` declares the functions (their store part comes from
:mod:`tidewire.mooncake_store.signatures`); this module turns Python lists into the C arrays
they take and their outputs back into lists, and decides nothing else. The Mooncake-compatible
class (:mod:`tidewire.mooncake_store.client`) checks arguments and applies Mooncake's
conventions around these calls; the pythonic :class:`tidewire.Store` is built on that class.
Every function takes the ``tw_store *`` handle first, and returns what the C function returned
(a code, or the code and the filled outputs), its codes in Mooncake's numbers
(:mod:`tidewire.mooncake_store.codes`: the C API gives two of them other numbers).
"""

import ctypes
import itertools
from array import array
from ctypes import POINTER, byref, c_char_p, c_int64, c_size_t, c_uint64, c_void_p
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .. import _ffi
from .arguments import _PTR_CODE, _SIZE_CODE, _codes, _key_list
from .codes import from_c, results
from .signatures import MAX_REPLICAS, AllocFn, ReplicaC, StoreValue, TaskInfoC

Handle = Any  # a ctypes.c_void_p holding the tw_store *
Keys = Sequence[bytes]


def _pointer(arr: "array[int]", ctype: Any) -> Any:
    """A pointer to an ``array``'s items (NULL when it is empty)."""
    return ctypes.cast(arr.buffer_info()[0], POINTER(ctype)) if len(arr) else None


# ------------------------------------------------------------------------------ keys
def _c_keys(enc: Keys) -> Tuple[Any, Any, Any]:
    """Encoded keys as the C arrays the library reads (pointers, then lengths), and what keeps
    them alive. Keys packed by ``_packed_str_keys`` are split by the library itself
    (``tw_store_split_keys``: 1,024 keys ~10 us; building the arrays here took ~80-180 us); other
    keys are joined into one buffer and their arrays built by C loops. Every key keeps all its
    bytes, NULs included."""
    n = len(enc)
    if not n:
        return (c_char_p * 0)(), (c_size_t * 0)(), enc
    blob = getattr(enc, "blob", None)
    if blob is not None:
        # Keys NUL-separated in one buffer, none holding a NUL: the library finds them.
        karr = (c_char_p * n)()
        klens = (c_size_t * n)()
        if _ffi.lib().tw_store_split_keys(blob, len(blob), n, karr, klens) == 0:
            return karr, klens, (blob, karr, klens)
    lens = array(_SIZE_CODE, map(len, enc))
    blob = b"".join(enc)
    base = ctypes.cast(c_char_p(blob), c_void_p).value
    ptrs = array(_PTR_CODE, itertools.accumulate(lens[:-1], initial=base))
    return (
        ctypes.cast(ptrs.buffer_info()[0], POINTER(c_char_p)),
        ctypes.cast(lens.buffer_info()[0], POINTER(c_size_t)),
        (blob, ptrs, lens),
    )


def _keys(keys: Sequence[Any]) -> Tuple[Any, Any, Any]:
    """``_c_keys`` of ``_key_list(keys)``."""
    return _c_keys(_key_list(keys))


# ------------------------------------------------------------------------------ lifecycle
def setup(local_hostname: bytes, metadata_server: bytes, segment: int, local: int,
          protocol: bytes, rdma_devices: bytes, master: bytes,
          disk_path: bytes = b"") -> Tuple[int, Optional[Handle]]:
    """``tw_store_setup_disk``: ``(0, handle)`` or ``(code, None)`` (the thread's last error
    says why). An empty ``disk_path`` means no disk tier."""
    h = c_void_p()
    rc = _ffi.lib().tw_store_setup_disk(local_hostname, metadata_server, segment, local,
                                        protocol, rdma_devices, master, disk_path or None,
                                        byref(h))
    return (0, h) if rc == 0 else (from_c(rc), None)


def hostname(h: Handle) -> Optional[str]:
    """This client's segment name, or None."""
    buf = ctypes.create_string_buffer(512)
    if _ffi.lib().tw_store_hostname(h, buf, 512) == 0:
        return buf.value.decode()
    return None


def free(h: Handle) -> None:
    _ffi.lib().tw_store_free(h)


def health_check(h: Handle) -> int:
    return from_c(int(_ffi.lib().tw_store_health_check(h)))


def unmount_local_disk(h: Handle, grace_period_seconds: int) -> int:
    return from_c(int(_ffi.lib().tw_store_unmount_local_disk(h, grace_period_seconds)))


def disk_read_count(h: Handle) -> int:
    return int(_ffi.lib().tw_store_disk_read_count(h))


def register_buffer(h: Handle, ptr: int, size: int) -> int:
    return from_c(int(_ffi.lib().tw_store_register_buffer(h, ptr, size)))


def unregister_buffer(h: Handle, ptr: int) -> int:
    return from_c(int(_ffi.lib().tw_store_unregister_buffer(h, ptr)))


def value_release(value: StoreValue) -> None:
    """Gives bytes the library lent (``tw_store_get_copy``) back."""
    _ffi.lib().tw_store_value_release(byref(value))


# ------------------------------------------------------------------------------ writes
def put(h: Handle, enc: Keys, cptrs: Any, csizes: Any, upsert: bool, copy: bool,
        cfg: Any) -> List[int]:
    """``tw_store_put``: one code per key (the call's code for every key if it failed)."""
    n = len(enc)
    karr, klens, _keep = _c_keys(enc)
    res, cres = _codes(n)
    rc = _ffi.lib().tw_store_put(h, karr, klens, cptrs, csizes, n, 1 if upsert else 0,
                                 1 if copy else 0, byref(cfg), cres)
    return [from_c(rc)] * n if rc != 0 else results(res)


def put_multi(h: Handle, enc: Keys, counts: "array[int]", ptrs: "array[int]",
              sizes: "array[int]", upsert: bool, cfg: Any) -> List[int]:
    """``tw_store_put_multi``: one code per key; key ``i`` has ``counts[i]`` pieces."""
    m = len(enc)
    karr, klens, _keep = _c_keys(enc)
    res, cres = _codes(m)
    rc = _ffi.lib().tw_store_put_multi(
        h, karr, klens, _pointer(counts, c_size_t), m, _pointer(ptrs, c_void_p),
        _pointer(sizes, c_uint64), len(ptrs), 1 if upsert else 0, byref(cfg), cres)
    return [from_c(rc)] * m if rc != 0 else results(res)


# ------------------------------------------------------------------------------ reads
def get_into(h: Handle, enc: Keys, cptrs: Any, csizes: Any) -> List[int]:
    """``tw_store_get_into``: bytes read or a code, per key."""
    n = len(enc)
    karr, klens, _keep = _c_keys(enc)
    # array("q").tolist() is much cheaper than list() of a ctypes array.
    res = array("q", bytes(8 * n))
    cres = ctypes.cast(res.buffer_info()[0], POINTER(c_int64))
    rc = _ffi.lib().tw_store_get_into(h, karr, klens, cptrs, csizes, n, cres)
    return [from_c(rc)] * n if rc != 0 else results(res)


def get_into_multi(h: Handle, enc: Keys, counts: "array[int]", ptrs: "array[int]",
                   sizes: "array[int]") -> List[int]:
    """``tw_store_get_into_multi``: the value's size or a code, per key."""
    m = len(enc)
    karr, klens, _keep = _c_keys(enc)
    res = (c_int64 * m)()
    rc = _ffi.lib().tw_store_get_into_multi(
        h, karr, klens, _pointer(counts, c_size_t), m, _pointer(ptrs, c_void_p),
        _pointer(sizes, c_uint64), len(ptrs), res)
    return [from_c(rc)] * m if rc != 0 else results(res)


def get_copy(h: Handle, enc: Keys) -> Tuple[List[Optional[StoreValue]], List[int]]:
    """``tw_store_get_copy``: per key the lent value (None when it failed) and its code."""
    n = len(enc)
    karr, klens, _keep = _c_keys(enc)
    vals = (StoreValue * n)()
    res = (c_int64 * n)()
    rc = _ffi.lib().tw_store_get_copy(h, karr, klens, n, vals, res)
    if rc != 0:
        return [None] * n, [from_c(rc)] * n
    return [vals[i] if res[i] >= 0 else None for i in range(n)], results(res)


def get_sized(h: Handle, enc: Keys,
              alloc: Callable[[Any, int, int], Optional[int]]) -> Optional[List[int]]:
    """``tw_store_get_sized``: ``alloc(ctx, index, size)`` gives the address to read key
    ``index`` into (None fails it). Per key the size read or a code; None if the call failed."""
    n = len(enc)
    cb = AllocFn(alloc)
    karr, klens, _keep = _c_keys(enc)
    res = (c_int64 * n)()
    rc = _ffi.lib().tw_store_get_sized(h, karr, klens, n, cb, None, res)
    return None if rc != 0 else results(res)


def get_size(h: Handle, key: bytes) -> int:
    return from_c(int(_ffi.lib().tw_store_get_size(h, key, len(key))))


def get_ranges(h: Handle, enc: Keys, dsts: Sequence[int], srcs: Sequence[int],
               lens: Sequence[int]) -> Tuple[int, List[int]]:
    """``tw_store_get_ranges``: the call's code and, per fragment, bytes read or a code."""
    n = len(enc)
    res = (c_int64 * max(n, 1))()
    if n == 0:
        return 0, []
    karr, klens, _keep = _c_keys(enc)
    rc = _ffi.lib().tw_store_get_ranges(h, karr, klens, (c_void_p * n)(*dsts),
                                        (c_uint64 * n)(*srcs), (c_uint64 * n)(*lens), n, res)
    return from_c(rc), results(res)


# ------------------------------------------------------------------------------ get sessions
def session_start(h: Handle, enc: Keys) -> List[int]:
    n = len(enc)
    karr, klens, _keep = _c_keys(enc)
    res, cres = _codes(n)
    rc = _ffi.lib().tw_store_get_session_start(h, karr, klens, n, cres)
    return [from_c(rc)] * n if rc != 0 else results(res)


def session_end(h: Handle, enc: Keys) -> int:
    karr, klens, _keep = _c_keys(enc)
    return from_c(int(_ffi.lib().tw_store_get_session_end(h, karr, klens, len(enc))))


def session_ranges(h: Handle, enc: Keys, counts: "array[int]", ptrs: "array[int]",
                   sizes: "array[int]", offs: "array[int]") -> List[int]:
    """``tw_store_get_session_ranges``: bytes read or a code, per key."""
    m = len(enc)
    karr, klens, _keep = _c_keys(enc)
    res = (c_int64 * m)()
    rc = _ffi.lib().tw_store_get_session_ranges(
        h, karr, klens, _pointer(counts, c_size_t), m, _pointer(ptrs, c_void_p),
        _pointer(sizes, c_uint64), _pointer(offs, c_uint64), len(ptrs), res)
    return [from_c(rc)] * m if rc != 0 else results(res)


# ------------------------------------------------------------------------------ put sessions
def put_session_start(h: Handle, enc: Keys, sizes: Sequence[int], cfg: Any) -> List[int]:
    """``tw_store_put_session_start``: one code per key."""
    n = len(enc)
    karr, klens, _keep = _c_keys(enc)
    res, cres = _codes(n)
    rc = _ffi.lib().tw_store_put_session_start(h, karr, klens, (c_uint64 * n)(*sizes), n,
                                               byref(cfg), cres)
    return [from_c(rc)] * n if rc != 0 else results(res)


def put_session_ranges(h: Handle, enc: Keys, counts: "array[int]", ptrs: "array[int]",
                       sizes: "array[int]", offs: "array[int]") -> List[int]:
    """``tw_store_put_session_ranges``: bytes written or a code, per key."""
    m = len(enc)
    karr, klens, _keep = _c_keys(enc)
    res = (c_int64 * m)()
    rc = _ffi.lib().tw_store_put_session_ranges(
        h, karr, klens, _pointer(counts, c_size_t), m, _pointer(ptrs, c_void_p),
        _pointer(sizes, c_uint64), _pointer(offs, c_uint64), len(ptrs), res)
    return [from_c(rc)] * m if rc != 0 else results(res)


def put_session_close(h: Handle, enc: Keys, publish: bool) -> List[int]:
    """``tw_store_put_session_end`` (``publish``) or ``..._revoke``: one code per key."""
    n = len(enc)
    karr, klens, _keep = _c_keys(enc)
    res, cres = _codes(n)
    lib = _ffi.lib()
    fn = lib.tw_store_put_session_end if publish else lib.tw_store_put_session_revoke
    rc = fn(h, karr, klens, n, cres)
    return [from_c(rc)] * n if rc != 0 else results(res)


# ------------------------------------------------------------------------------ run-time segments
def _segment_id(rc: int, buf: Any) -> Tuple[int, str]:
    return (from_c(rc), buf.value.decode() if rc == 0 else "")


def mount_file_segment(h: Handle, path: bytes, size: int, offset: int) -> Tuple[int, str]:
    """``tw_store_mount_file_segment``: ``(code, segment id)``."""
    buf = ctypes.create_string_buffer(64)
    return _segment_id(_ffi.lib().tw_store_mount_file_segment(h, path, size, offset, buf, 64),
                       buf)


def allocate_segment(h: Handle, size: int) -> Tuple[int, str]:
    """``tw_store_allocate_segment``: ``(code, segment id)``."""
    buf = ctypes.create_string_buffer(64)
    return _segment_id(_ffi.lib().tw_store_allocate_segment(h, size, buf, 64), buf)


def unmount_segments(h: Handle, ids: Sequence[bytes], grace: int, allocated: bool) -> int:
    """``tw_store_unmount_segments``: 0, -1 or a code."""
    n = len(ids)
    rc = _ffi.lib().tw_store_unmount_segments(h, (c_char_p * n)(*ids), n, grace,
                                              1 if allocated else 0)
    return from_c(int(rc))


# ------------------------------------------------------------------------------ replicas
def get_replicas(h: Handle, enc: Keys) -> Optional[List[List[Tuple[str, int, int]]]]:
    """``tw_store_get_replicas``: per key its replicas as ``(endpoint, address, size)``; None
    if the call failed."""
    n = len(enc)
    karr, klens, _keep = _c_keys(enc)
    slots = (ReplicaC * (n * MAX_REPLICAS))()
    counts = (c_int64 * n)()
    if _ffi.lib().tw_store_get_replicas(h, karr, klens, n, slots, counts) != 0:
        return None
    out = []
    for i in range(n):
        reps = []
        for j in range(max(0, counts[i])):
            r = slots[i * MAX_REPLICAS + j]
            reps.append((r.endpoint.decode("utf-8", "replace"), r.addr, r.size))
        out.append(reps)
    return out


# ------------------------------------------------------------------------------ existence, removal
def exist(h: Handle, enc: Keys) -> Optional[List[int]]:
    """``tw_store_exist``: 1/0/code per key; None if the call failed."""
    n = len(enc)
    karr, klens, _keep = _c_keys(enc)
    res, cres = _codes(n)
    rc = _ffi.lib().tw_store_exist(h, karr, klens, n, cres)
    return None if rc != 0 else results(res)


def remove(h: Handle, enc: Keys, force: bool) -> Tuple[int, List[int]]:
    """``tw_store_remove``: the call's code and, when it is 0, 0 or a code per key."""
    n = len(enc)
    karr, klens, _keep = _c_keys(enc)
    res, cres = _codes(n)
    rc = _ffi.lib().tw_store_remove(h, karr, klens, n, bool(force), cres)
    return from_c(rc), ([] if rc != 0 else results(res))


def remove_by_regex(h: Handle, pattern: bytes, force: bool) -> int:
    return from_c(int(_ffi.lib().tw_store_remove_by_regex(h, pattern, bool(force))))


def remove_all(h: Handle, force: bool) -> int:
    return from_c(int(_ffi.lib().tw_store_remove_all(h, bool(force))))


# ------------------------------------------------------------------------------ replica tasks
def replica_clear(h: Handle, enc: Keys, segment: bytes) -> Optional[List[bool]]:
    """``tw_store_replica_clear``: per key whether it was cleared; None if the call failed."""
    n = len(enc)
    karr, klens, _keep = _c_keys(enc)
    out = (ctypes.c_uint8 * max(n, 1))()
    if _ffi.lib().tw_store_replica_clear(h, karr, klens, n, segment, out) != 0:
        return None
    return [bool(out[i]) for i in range(n)]


def create_copy_task(h: Handle, key: bytes,
                     targets: Sequence[bytes]) -> Tuple[int, Tuple[int, int]]:
    """``tw_store_create_copy_task``: the code and the task id."""
    ids = (c_uint64 * 2)()
    names = (c_char_p * max(len(targets), 1))(*targets)
    rc = _ffi.lib().tw_store_create_copy_task(h, key, len(key), names, len(targets), ids)
    return from_c(rc), (ids[0], ids[1])


def create_move_task(h: Handle, key: bytes, source: bytes,
                     target: bytes) -> Tuple[int, Tuple[int, int]]:
    """``tw_store_create_move_task``: the code and the task id."""
    ids = (c_uint64 * 2)()
    rc = _ffi.lib().tw_store_create_move_task(h, key, len(key), source, target, ids)
    return from_c(rc), (ids[0], ids[1])


def query_task(h: Handle, hi: int, lo: int) -> Tuple[int, Optional[TaskInfoC]]:
    """``tw_store_query_task``: the code and the filled state (None on failure)."""
    info = TaskInfoC()
    rc = _ffi.lib().tw_store_query_task(h, hi, lo, byref(info))
    return from_c(rc), (info if rc == 0 else None)


def host_function_address(name: str) -> int:
    """Address of the exported function ``name`` (``tw_store_host_alloc``/``_free``)."""
    addr = ctypes.cast(getattr(_ffi.lib(), name), c_void_p).value
    if not addr:
        raise RuntimeError(f"{name} is not exported by the library")
    return int(addr)


def host_alloc(size: int, alignment: int) -> int:
    """``tw_store_host_alloc_aligned``: the address, or 0."""
    return int(_ffi.lib().tw_store_host_alloc_aligned(size, alignment) or 0)


def host_free(ptr: int) -> None:
    """``tw_store_host_free`` (0 is NULL: nothing)."""
    _ffi.lib().tw_store_host_free(ptr or None)
