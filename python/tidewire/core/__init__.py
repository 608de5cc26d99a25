"""The pythonic tidewire API: engines, registrations, segments, batches, scatter operations.

Failures raise :class:`~tidewire.TidewireError` subclasses. Local memory is given either as an
int address or as an object with the writable buffer protocol (``bytearray``, ``memoryview``,
``mmap``, ctypes arrays, C-contiguous numpy arrays); such objects are kept alive (and, for
``bytearray``, kept from resizing) for as long as the library may touch them. Every call into
the library releases the GIL.

The objects live in the modules of this package, one per object family, all re-exported here
(import them from :mod:`tidewire.core` or :mod:`tidewire`): :mod:`~tidewire.core.values`
(values and :class:`Segment`), :mod:`~tidewire.core.buffers` (buffer addresses,
:class:`RequestArray`), :mod:`~tidewire.core.owned` (:class:`Registration`, :class:`Batch`,
:class:`StreamOp`), :mod:`~tidewire.core.scatter` (:class:`ScatterOp`) and
:mod:`~tidewire.core.engine` (:class:`Engine`). They and :mod:`tidewire.mooncake_store.native`
are the only modules that call the library's functions; :mod:`tidewire._ffi` declares them.
Every class here that uses the engine's handle is guarded (:mod:`tidewire._call_guard`).
"""

from .buffers import U64, RequestArray, buffer_address
from .engine import Engine
from .owned import Batch, Registration, StreamOp
from .scatter import ScatterOp
from .values import (
    CONFIG_KEYS,
    LOCAL_SEGMENT,
    READ,
    WRITE,
    Notification,
    Opcode,
    Request,
    ScatterRange,
    Segment,
    TaskState,
    TaskStatus,
    gpu_devices,
)

__all__ = [
    "Engine",
    "Opcode",
    "READ",
    "WRITE",
    "LOCAL_SEGMENT",
    "Request",
    "TaskState",
    "TaskStatus",
    "Notification",
    "ScatterRange",
    "Registration",
    "Segment",
    "Batch",
    "ScatterOp",
    "StreamOp",
    "RequestArray",
    "CONFIG_KEYS",
    "buffer_address",
    "gpu_devices",
]
