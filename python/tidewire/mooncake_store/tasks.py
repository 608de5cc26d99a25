"""Mooncake's replica-task types (``TaskType``, ``TaskStatus``, ``QueryTaskResponse``) and the
client methods that are compositions of others (:class:`ExtrasMixin`): ``put_from_with_metadata``
and the CUDA-IPC reads, which, as on Mooncake, only a dummy client with CUDA serves (here
every key gets -600, as Mooncake gives a real client)."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from .arguments import Key, _key_bytes, _key_list
from .codes import INVALID_PARAMS
from .config import ReplicateConfig


class TaskType(enum.IntEnum):
    """Kind of a replica task (Mooncake's values)."""

    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    """State of a replica task (Mooncake's values)."""

    PENDING = 0
    PROCESSING = 1
    FAILED = 2
    SUCCESS = 3


class QueryTaskResponse:
    """A replica task's state, as ``query_task`` reports it (every field read-only)."""

    __slots__ = ("_id", "_type", "_status", "_created", "_updated", "_client", "_message")

    def __init__(self) -> None:
        self._id: Tuple[int, int] = (0, 0)
        self._type = TaskType.REPLICA_COPY
        self._status = TaskStatus.PENDING
        self._created = 0
        self._updated = 0
        self._client: Tuple[int, int] = (0, 0)
        self._message = ""

    id = property(lambda self: self._id)
    type = property(lambda self: self._type)
    status = property(lambda self: self._status)
    created_at_ms_epoch = property(lambda self: self._created)
    last_updated_at_ms_epoch = property(lambda self: self._updated)
    assigned_client = property(lambda self: self._client)
    message = property(lambda self: self._message)

    def __repr__(self) -> str:
        return (f"QueryTaskResponse(id={self._id[0]}-{self._id[1]}, type={int(self._type)}, "
                f"status={int(self._status)}, created_at={self._created}, "
                f"last_updated_at={self._updated}, "
                f"assigned_client={self._client[0]}-{self._client[1]}, "
                f'message="{self._message}")')


class ExtrasMixin:
    """``put_from_with_metadata`` and the CUDA reads, for ``MooncakeDistributedStore``."""

    if TYPE_CHECKING:
        _h: Any
        def _put_pieces(self, enc: List[bytes], all_buffer_ptrs: Sequence[Sequence[int]],
                        all_sizes: Sequence[Sequence[int]], config: Optional[ReplicateConfig],
                        upsert: bool) -> List[int]: ...

    def put_from_with_metadata(self, key: Key, buffer_ptr: int, metadata_buffer_ptr: int,
                               size: int, metadata_size: int,
                               config: Optional[ReplicateConfig] = None) -> int:
        """Zero-copy create-only put of ``metadata_size`` bytes at ``metadata_buffer_ptr``
        followed by ``size`` bytes at ``buffer_ptr``, as one value. 0 or a negative code
        (-600 when the client is not set up, as Mooncake)."""
        k = _key_bytes(key)
        if self._h is None:
            return INVALID_PARAMS
        return self._put_pieces([k], [[metadata_buffer_ptr, buffer_ptr]],
                                [[metadata_size, size]], config, False)[0]

    def get_tensor_into_cuda(self, key: Key, tensor: Any) -> int:
        """Reads a tensor's payload into a CUDA tensor over CUDA IPC: Mooncake serves this in
        a dummy client only; here no client does, and the result is -600."""
        return self.batch_get_tensor_into_cuda([key], [tensor])[0]

    def batch_get_tensor_into_cuda(self, keys: Sequence[Key], tensors_list: Any) -> List[int]:
        """``get_tensor_into_cuda`` per key: -600 for each (see there)."""
        return [INVALID_PARAMS] * len(_key_list(keys))
