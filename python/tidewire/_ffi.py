"""ctypes declarations for the native tidewire C API (``include/tidewire.h``): the package's
only ctypes layer. The functions declared here are called only by the core modules
(the modules of :mod:`tidewire.core`, for the engine) and :mod:`tidewire.mooncake_store.native`
(for the store); every other module goes through their classes and functions (a test checks it).

The library is found, in order, through:

1. the ``TIDEWIRE_LIB`` environment variable (a path to the shared library),
2. ``libtidewire.so`` inside this package (the copy a wheel carries),
3. the project's build output, ``../target/release/libtidewire.so`` relative to ``python/``.

It is loaded on first use with :func:`lib`, so ``import tidewire`` works without it. Every
``tw_*`` function of the header is declared in :data:`SIGNATURES` (a test compares the two).
It is loaded with ``ctypes.CDLL``: every call releases the GIL for its whole duration.
"""

import ctypes
import os
import threading
from typing import List, Optional, Tuple
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_int32,
    c_int64,
    c_size_t,
    c_uint16,
    c_uint64,
    c_void_p,
)

__all__ = [
    "LibraryNotFound",
    "lib",
    "library_candidates",
    "last_error_message",
    "result_name",
    "TransferRequest",
    "TransferStatus",
    "Buffer",
    "ScatterRange",
    "Notification",
    "FRAGMENT_CALLBACK",
    "SIGNATURES",
]

# --------------------------------------------------------------------------------------------
# Constants (mirrors of the header's #defines)
# --------------------------------------------------------------------------------------------
TW_TASK_WAITING = 0
TW_TASK_COMPLETED = 4
TW_TASK_FAILED = 6
TW_OPCODE_READ = 0
TW_OPCODE_WRITE = 1
TW_LOCAL_SEGMENT = 0

TW_OK = 0
TW_ERR_INVALID_ARGUMENT = -1
TW_ERR_NULL_ARGUMENT = -2
TW_ERR_TOO_MANY_REQUESTS = -3
TW_ERR_ADDRESS_NOT_REGISTERED = -4
TW_ERR_ADDRESS_OVERLAPPED = -5
TW_ERR_INVALID_ID = -6
TW_ERR_UNKNOWN_SEGMENT = -7
TW_ERR_BUSY = -8
TW_ERR_TIMEOUT = -9
TW_ERR_REJECTED = -10
TW_ERR_SOCKET = -11
TW_ERR_PROTOCOL = -12
TW_ERR_METADATA = -13
TW_ERR_UNSUPPORTED = -14
TW_ERR_BUFFER_TOO_SMALL = -15
TW_ERR_SHUTDOWN = -16
TW_ERR_INTERNAL = -17
TW_ERR_PANIC = -18


# --------------------------------------------------------------------------------------------
# Structures
# --------------------------------------------------------------------------------------------
class TransferRequest(Structure):
    """``tw_transfer_request`` (32 bytes)."""

    _fields_ = [
        ("opcode", c_int32),
        ("segment", c_int32),
        ("local_addr", c_void_p),
        ("remote_addr", c_uint64),
        ("length", c_uint64),
    ]


class TransferStatus(Structure):
    """``tw_transfer_status`` (16 bytes)."""

    _fields_ = [
        ("state", c_int32),
        ("result", c_int32),
        ("transferred_bytes", c_uint64),
    ]


class Buffer(Structure):
    """``tw_buffer`` (16 bytes)."""

    _fields_ = [("addr", c_void_p), ("length", c_size_t)]


class ScatterRange(Structure):
    """``tw_scatter_range`` (72 bytes)."""

    _fields_ = [
        ("opcode", c_int32),
        ("segment", c_int32),
        ("remote_base", c_uint64),
        ("remote_size", c_uint64),
        ("local_base", c_void_p),
        ("local_capacity", c_size_t),
        ("local_offsets", POINTER(c_size_t)),
        ("remote_offsets", POINTER(c_size_t)),
        ("lengths", POINTER(c_size_t)),
        ("fragment_count", c_size_t),
    ]


class Notification(Structure):
    """``tw_notification`` (16 bytes); strings owned by the array from ``tw_notify_take``."""

    _fields_ = [("name", c_char_p), ("msg", c_char_p)]


assert ctypes.sizeof(TransferRequest) == 32, "tw_transfer_request must be 32 bytes"
assert ctypes.sizeof(TransferStatus) == 16, "tw_transfer_status must be 16 bytes"
assert ctypes.sizeof(Buffer) == 16, "tw_buffer must be 16 bytes"
assert ctypes.sizeof(ScatterRange) == 72, "tw_scatter_range must be 72 bytes"
assert ctypes.sizeof(Notification) == 16, "tw_notification must be 16 bytes"
assert TransferRequest.remote_addr.offset == 16 and TransferRequest.length.offset == 24
assert TransferStatus.transferred_bytes.offset == 8
assert ScatterRange.local_base.offset == 24 and ScatterRange.fragment_count.offset == 64

#: ``tw_fragment_callback``: ``void (*)(void *user_data, size_t fragment, tw_result result)``.
FRAGMENT_CALLBACK = CFUNCTYPE(None, c_void_p, c_size_t, c_int32)

_p = POINTER

#: name -> (argtypes, restype) for every ``tw_*`` function of ``include/tidewire.h``.
SIGNATURES = {
    "tw_version": ([], c_char_p),
    "tw_config_new": ([_p(c_void_p)], c_int32),
    "tw_config_set": ([c_void_p, c_char_p, c_char_p], c_int32),
    "tw_config_free": ([c_void_p], None),
    "tw_engine_new": ([c_void_p, _p(c_void_p)], c_int32),
    "tw_engine_free": ([c_void_p], None),
    "tw_engine_segment_name": ([c_void_p, c_void_p, c_size_t], c_int32),
    "tw_engine_rpc_port": ([c_void_p, _p(c_uint16)], c_int32),
    "tw_memory_register": ([c_void_p, c_void_p, c_size_t, c_char_p, c_bool], c_int32),
    "tw_memory_unregister": ([c_void_p, c_void_p], c_int32),
    "tw_memory_alloc_shared": ([c_void_p, c_size_t, POINTER(c_void_p)], c_int32),
    "tw_memory_free_shared": ([c_void_p, c_void_p], c_int32),
    "tw_memory_register_batch": ([c_void_p, _p(Buffer), c_size_t, c_char_p], c_int32),
    "tw_memory_unregister_batch": ([c_void_p, _p(c_void_p), c_size_t], c_int32),
    "tw_segment_open": ([c_void_p, c_char_p, _p(c_int32)], c_int32),
    "tw_segment_close": ([c_void_p, c_int32], c_int32),
    "tw_segment_refresh": ([c_void_p, c_int32], c_int32),
    "tw_batch_alloc": ([c_void_p, c_size_t, _p(c_uint64)], c_int32),
    "tw_batch_submit": ([c_void_p, c_uint64, _p(TransferRequest), c_size_t], c_int32),
    "tw_batch_status": ([c_void_p, c_uint64, c_size_t, _p(TransferStatus)], c_int32),
    "tw_batch_wait": ([c_void_p, c_uint64, c_int64], c_int32),
    "tw_batch_submit_and_wait": (
        [c_void_p, c_uint64, _p(TransferRequest), c_size_t, c_int64],
        c_int32,
    ),
    "tw_batch_free": ([c_void_p, c_uint64], c_int32),
    "tw_scatter_submit": (
        [c_void_p, _p(ScatterRange), c_size_t, FRAGMENT_CALLBACK, c_void_p, _p(c_uint64)],
        c_int32,
    ),
    "tw_scatter_wait": ([c_void_p, c_uint64, c_int64, _p(c_int32), c_size_t], c_int32),
    "tw_scatter_free": ([c_void_p, c_uint64], c_int32),
    "tw_notify_send": ([c_void_p, c_int32, c_char_p, c_char_p], c_int32),
    "tw_notify_take": ([c_void_p, _p(_p(Notification)), _p(c_size_t)], c_int32),
    "tw_notifications_free": ([_p(Notification), c_size_t], None),
    "tw_segment_descriptor": ([c_void_p, c_int32, c_void_p, c_size_t, _p(c_size_t)], c_int32),
    "tw_batch_submit_with_notify": (
        [c_void_p, c_uint64, _p(TransferRequest), c_size_t, c_char_p, c_char_p],
        c_int32,
    ),
    "tw_engine_probe": ([c_void_p, c_char_p], c_int32),
    # GPU memory (CUDA driver loaded at run time) and stream-ordered transfers.
    "tw_gpu_available": ([_p(c_int32)], c_int32),
    "tw_memory_location": ([c_void_p, c_void_p, c_void_p, c_size_t], c_int32),
    "tw_transfer_on_stream": (
        [c_void_p, _p(TransferRequest), c_size_t, c_void_p, _p(c_uint64)],
        c_int32,
    ),
    "tw_stream_op_status": ([c_void_p, c_uint64, _p(TransferStatus)], c_int32),
    "tw_stream_op_wait": ([c_void_p, c_uint64, c_int64], c_int32),
    "tw_stream_op_free": ([c_void_p, c_uint64], c_int32),
    "tw_result_str": ([c_int32], c_char_p),
    "tw_result_mooncake_code": ([c_int32], c_int32),
    "tw_last_error_message": ([c_void_p, c_size_t], c_size_t),
}
del _p
from .mooncake_store.signatures import STORE_SIGNATURES as _STORE_SIGNATURES  # noqa: E402

SIGNATURES.update(_STORE_SIGNATURES)


class LibraryNotFound(ImportError):
    """The shared library could not be found or loaded; the message lists every place tried."""


def library_candidates() -> List[Tuple[str, str]]:
    """Paths tried, in order, to load the library."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    env = os.environ.get("TIDEWIRE_LIB")
    if env:
        out.append(("TIDEWIRE_LIB", env))
    out.append(("inside the package", os.path.join(here, "libtidewire.so")))
    root = os.path.dirname(os.path.dirname(here))  # python/tidewire -> python -> project
    out.append(("project build output", os.path.join(root, "target", "release", "libtidewire.so")))
    return out


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def _load() -> ctypes.CDLL:
    tried = []
    for origin, path in library_candidates():
        if not os.path.exists(path):
            tried.append(f"  {path} ({origin}): not found")
            continue
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"  {path} ({origin}): {e}")
            continue
        missing = []
        for name, (argtypes, restype) in SIGNATURES.items():
            try:
                fn = getattr(handle, name)
            except AttributeError:
                missing.append(name)
                continue
            fn.argtypes = argtypes
            fn.restype = restype
        if missing:
            tried.append(f"  {path} ({origin}): missing symbols {', '.join(missing)}")
            continue
        setattr(handle, "_tidewire_path", path)
        return handle
    raise LibraryNotFound(
        "cannot load the tidewire library (libtidewire.so); tried:\n"
        + "\n".join(tried)
        + "\nInstall a wheel that carries it (`pip install ./python` from the source tree), "
        "build it with `make build`, or set TIDEWIRE_LIB to its path."
    )


def lib() -> ctypes.CDLL:
    """The loaded library (``ctypes.CDLL``) with every ``tw_*`` signature declared."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _load()
    return _lib


def library_path() -> str:
    """Path of the loaded library."""
    return str(getattr(lib(), "_tidewire_path"))


def last_error_message() -> str:
    """Detail of the calling thread's last failed ``tw_*`` call ('' if none)."""
    fn = lib().tw_last_error_message
    n = int(fn(None, 0))
    if n <= 1:
        return ""
    buf = ctypes.create_string_buffer(n)
    fn(buf, n)
    return buf.value.decode("utf-8", "replace")


def result_name(code: int) -> str:
    """Static name of a result code, e.g. ``"TW_ERR_TIMEOUT"``."""
    name: bytes = lib().tw_result_str(int(code))
    return name.decode()


def mooncake_code(code: int) -> int:
    """Mooncake's ``error.h`` number for a result code, from the library's one table (the one
    its Mooncake C API uses): 0 for ``TW_OK``, -1 for numbers it does not define."""
    return int(lib().tw_result_mooncake_code(int(code)))


def version() -> str:
    """Library version string, e.g. ``"0.1.0"``."""
    text: bytes = lib().tw_version()
    return text.decode()

