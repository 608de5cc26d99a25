"""Values of the pythonic API: opcodes, task states, requests, scatter ranges, configuration
keys, and :class:`Segment` (re-exported by :mod:`tidewire.core`)."""

from __future__ import annotations

import enum
from ctypes import byref, c_int32
from typing import Any, Dict, NamedTuple, Optional, Sequence, Union

from .. import _ffi
from .._call_guard import CallGuard, guarded
from .._errors import check


class Opcode(enum.IntEnum):
    """Transfer direction."""

    READ = 0  # remote -> local
    WRITE = 1  # local -> remote


READ = Opcode.READ
WRITE = Opcode.WRITE
LOCAL_SEGMENT = _ffi.TW_LOCAL_SEGMENT


class TaskState(enum.IntEnum):
    """State of one task of a batch (Mooncake's numbering)."""

    WAITING = _ffi.TW_TASK_WAITING
    COMPLETED = _ffi.TW_TASK_COMPLETED
    FAILED = _ffi.TW_TASK_FAILED


#: One READ or WRITE: ``local`` is an int address or a buffer object (then ``length`` may be
#: None: the buffer's size); ``segment`` a :class:`Segment`, an id or a name.
class Request(NamedTuple):
    """One READ or WRITE request (``length`` None: the local buffer's size)."""

    opcode: int
    segment: Any  # a Segment, an id or a name
    local: Any  # an int address or a buffer object
    remote: int
    length: Optional[int] = None


#: ``state`` (:class:`TaskState`), ``result`` (0 or the failure's code), ``transferred_bytes``.
class TaskStatus(NamedTuple):
    """State of one task: ``state``, ``result`` (0 or the failure's code), bytes moved."""

    state: TaskState
    result: int
    transferred_bytes: int


#: A received notification.
class Notification(NamedTuple):
    """A notification received from a peer."""

    name: str
    msg: str

#: Keys accepted by :class:`Engine` (``tw_config_set``).
CONFIG_KEYS = (
    "metadata",
    "local_server_name",
    "bind_address",
    "rpc_port",
    "data_port",
    "tcp_lanes",
    "tcp_spread",
    "tcp_congestion",
    "tcp_proto",
    "slice_size",
    "same_host",
    "connect_timeout_ms",
    "io_timeout_ms",
    "transfer_timeout_ms",
    "max_data_connections",
    "data_idle_timeout_ms",
    "rpc_max_concurrent",
    "notify_max_count",
    "notify_max_bytes",
    "handshake_max_len",
    "rdma",
    "rdma_devices",
    "rdma_slice_size",
    "rdma_qp_per_ep",
    "rdma_max_wr",
    "rdma_retries",
    "rdma_max_passive_endpoints",
    "auth_key",
)


def gpu_devices() -> int:
    """Number of CUDA devices the library can use. Raises :class:`Unsupported` (the message
    says why) when the driver (``libcuda.so.1``, or ``TW_CUDA_LIB``) cannot be loaded or finds
    no device. The library loads CUDA at run time, so this is a property of the host."""
    n = c_int32()
    check(_ffi.lib().tw_gpu_available(byref(n)))
    return n.value


class ScatterRange:
    """One range of a scatter operation.

    Fragment ``i`` moves ``lengths[i]`` bytes between ``local + local_offsets[i]`` and
    ``remote_base + remote_offsets[i]`` of ``segment``. ``local`` is a buffer object (its size is
    the local capacity) or an int address with ``local_capacity``; ``remote_size`` bounds the
    remote offsets.
    """

    __slots__ = ("opcode", "segment", "remote_base", "remote_size", "local", "local_offsets",
                 "remote_offsets", "lengths", "local_capacity")

    def __init__(self, opcode: int, segment: Union["Segment", int, str], remote_base: int,
                 remote_size: int, local: Any, local_offsets: Sequence[int],
                 remote_offsets: Sequence[int], lengths: Sequence[int],
                 local_capacity: Optional[int] = None) -> None:
        self.opcode = int(opcode)
        self.segment = segment
        self.remote_base = remote_base
        self.remote_size = remote_size
        self.local = local
        self.local_offsets = local_offsets
        self.remote_offsets = remote_offsets
        self.lengths = lengths
        self.local_capacity = local_capacity

    def __repr__(self) -> str:
        return (f"ScatterRange(opcode={self.opcode}, segment={self.segment!r}, "
                f"fragments={len(self.lengths)})")


@guarded
class Segment:
    """An open peer segment (``id`` is what requests carry)."""

    __slots__ = ("_engine", "_guard", "id", "name")

    def __init__(self, engine: Any, seg_id: int, name: str) -> None:
        self._engine = engine
        self._guard: CallGuard = engine._guard
        self.id = seg_id
        self.name = name

    def __int__(self) -> int:
        return self.id

    __index__ = __int__

    def refresh(self) -> None:
        """Re-fetches the peer's descriptor (after it registered more memory)."""
        self._engine.refresh_segment(self.id)

    def descriptor(self) -> Dict[str, Any]:
        """The peer's descriptor (Mooncake JSON) as a dict."""
        descriptor: Dict[str, Any] = self._engine.descriptor(self)
        return descriptor

    def notify(self, name: str, msg: str) -> None:
        """Sends a notification to the peer."""
        self._engine.notify(self, name, msg)

    def close(self) -> None:
        """Forgets the segment id."""
        check(self._engine._lib.tw_segment_close(self._engine._handle(), self.id))

    def __repr__(self) -> str:
        return f"<Segment {self.name!r} id={self.id}>"


#: What a segment argument may be: a :class:`Segment`, its id, or a peer's segment name.
SegmentLike = Union[Segment, int, str]
