"""The pythonic tidewire API: engines, registrations, segments, batches, scatter operations.

Failures raise :class:`~tidewire.TidewireError` subclasses. Local memory is given either as an
int address or as an object with the writable buffer protocol (``bytearray``, ``memoryview``,
``mmap``, ctypes arrays, C-contiguous numpy arrays); such objects are kept alive (and, for
``bytearray``, kept from resizing) for as long as the library may touch them. Every call into
the library releases the GIL.

The objects live in private modules, one per object family, all re-exported here (import them
from :mod:`tidewire.core` or :mod:`tidewire`): :mod:`~tidewire._core_types` (values and
:class:`Segment`), :mod:`~tidewire._core_buffers` (buffer addresses, :class:`RequestArray`),
:mod:`~tidewire._core_objects` (:class:`Registration`, :class:`Batch`, :class:`StreamOp`),
:mod:`~tidewire._core_scatter` (:class:`ScatterOp`) and :mod:`~tidewire._core_engine`
(:class:`Engine`). They and :mod:`tidewire._store_core` are the only modules that call the
library's functions; :mod:`tidewire._ffi` declares them.
"""

from ._core_buffers import U64, RequestArray, buffer_address
from ._core_engine import Engine
from ._core_objects import Batch, Registration, StreamOp
from ._core_scatter import ScatterOp
from ._core_types import (
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
