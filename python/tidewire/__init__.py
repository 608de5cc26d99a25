"""tidewire: a KV-cache transfer engine (Mooncake-compatible), Python bindings over ctypes.

Layers, each using only the ones below:

- :mod:`tidewire._ffi`: the one ctypes layer: it declares every C function of ``tidewire.h``
  (argument and result types) and finds the library: ``TIDEWIRE_LIB``, then the copy inside
  the installed package (wheels carry it), then the source tree's ``target/release``;
- the modules that call those functions, and only they (a test checks it): the pythonic engine
  API (:class:`Engine`, :class:`Batch`, :class:`ScatterOp`, :class:`RequestArray`,
  exceptions), in the :mod:`tidewire.core` package, and the store's calls, in
  :mod:`tidewire.mooncake_store.native`;
- :mod:`tidewire.engine`, a drop-in for ``mooncake.engine.TransferEngine`` (the code is in
  :mod:`tidewire.mooncake_engine`), built on the pythonic API; :mod:`tidewire.store`, a drop-in
  for ``mooncake.store`` (Mooncake's return codes; the code is in
  :mod:`tidewire.mooncake_store`), and :class:`tidewire.Store` (:mod:`tidewire.kv`), the
  pythonic store on top of it (exceptions, context managers; :class:`StoreError` is a
  :class:`TidewireError`).

Every class that holds a native handle guards its public calls with one call guard
(:mod:`tidewire._call_guard`): ``close()`` never frees the handle under a running call.

``python -m tidewire`` prints the version, the library path and the transports this host can
use (:mod:`tidewire.host`).
"""

from . import _errors
from ._errors import (
    AddressNotRegistered,
    AddressOverlapped,
    BufferTooSmall,
    Busy,
    CallbackError,
    InternalError,
    InvalidArgument,
    InvalidId,
    MetadataError,
    NullArgument,
    PanicError,
    ProtocolError,
    Rejected,
    Shutdown,
    SocketError,
    TidewireError,
    TooManyRequests,
    TransferTimeout,
    Unsupported,
    UnknownSegment,
)
from ._ffi import LibraryNotFound, library_path
from ._ffi import version as library_version
from .core import (
    CONFIG_KEYS,
    LOCAL_SEGMENT,
    READ,
    WRITE,
    Batch,
    Engine,
    Notification,
    Opcode,
    Registration,
    Request,
    RequestArray,
    ScatterOp,
    ScatterRange,
    Segment,
    StreamOp,
    TaskState,
    TaskStatus,
    buffer_address,
    gpu_devices,
)

__version__ = "0.1.0"

__all__ = [
    "Engine",
    "Batch",
    "ScatterOp",
    "ScatterRange",
    "StreamOp",
    "RequestArray",
    "Registration",
    "Segment",
    "Request",
    "Opcode",
    "READ",
    "WRITE",
    "LOCAL_SEGMENT",
    "TaskState",
    "TaskStatus",
    "Notification",
    "CONFIG_KEYS",
    "buffer_address",
    "gpu_devices",
    "library_path",
    "library_version",
    "LibraryNotFound",
]
__all__ += [n for n in _errors.__all__ if n not in ("check", "error_for")]

#: The pythonic store (tidewire.kv), loaded on first use so that `import tidewire` stays light.
_KV_NAMES = ("Store", "StoreRegistration", "StoreError", "ObjectNotFound", "ObjectExists",
             "ObjectHasLease", "NoSpace", "InvalidParams", "TransferFailed", "MasterUnavailable")
__all__ += list(_KV_NAMES)


def __getattr__(name: str) -> object:
    if name in _KV_NAMES:
        from . import kv

        return getattr(kv, name)
    raise AttributeError(f"module 'tidewire' has no attribute {name!r}")
