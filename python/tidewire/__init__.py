"""tidewire: a KV-cache transfer engine (Mooncake-compatible), Python bindings over ctypes.

Two APIs share one library:

- the pythonic API below (:class:`Engine`, :class:`Batch`, :class:`ScatterOp`, exceptions);
- :mod:`tidewire.engine`, a drop-in for ``mooncake.engine.TransferEngine``.

The shared library is located by :mod:`tidewire._ffi` (``TIDEWIRE_LIB`` first) on first use.
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
    ScatterOp,
    ScatterRange,
    Segment,
    TaskState,
    TaskStatus,
    buffer_address,
)

__version__ = "0.1.0"

__all__ = [
    "Engine",
    "Batch",
    "ScatterOp",
    "ScatterRange",
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
    "library_path",
    "library_version",
    "LibraryNotFound",
]
__all__ += [n for n in _errors.__all__ if n not in ("check", "error_for")]
