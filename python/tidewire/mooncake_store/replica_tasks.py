"""Replica tasks and replica clearing (:class:`ReplicaTaskMixin`): Mooncake's
``create_copy_task``, ``create_move_task``, ``query_task`` and ``batch_replica_clear``.

A task runs in the background on the client that owns its source segment (any tidewire client
with a segment runs the tasks the master queues for it, fetched with its heartbeat): it writes
the object to the new replica's buffer on each target and only then adds it to the object; a
move's source replica leaves the object in the same step, so the object never lacks a complete
replica. ``query_task`` follows it: PENDING (queued), PROCESSING (its client fetched it), then
SUCCESS or FAILED with a message (a target that vanished, no room, a transfer that failed, the
client gone). Task ids are ``(int, int)`` tuples, as Mooncake's UUIDs; the ``assigned_client``
of a task is ``(0, store client id)``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from . import native as _core
from .arguments import Key, _key_bytes, _key_list
from .codes import INVALID_PARAMS
from .tasks import QueryTaskResponse, TaskStatus, TaskType

TaskId = Tuple[int, int]
_NO_TASK: TaskId = (0, 0)


def _name(s: Any, what: str) -> bytes:
    """A segment name as the library takes it (``str``, as Mooncake's ``std::string``)."""
    if not isinstance(s, str):
        raise TypeError(f"{what} must be str, not {type(s).__name__}")
    return s.encode("utf-8", "surrogatepass")


def _task_id(task_id: Any) -> Tuple[int, int]:
    """A task id: a pair of integers in 0..2**64 (Mooncake's UUID); ``TypeError`` otherwise."""
    try:
        hi, lo = task_id
    except (TypeError, ValueError):
        raise TypeError("task_id must be a tuple of two int") from None
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (hi, lo)):
        raise TypeError("task_id must be a tuple of two int")
    if not (0 <= hi < 1 << 64 and 0 <= lo < 1 << 64):
        raise TypeError("task_id halves must be 64-bit unsigned integers")
    return hi, lo


class ReplicaTaskMixin:
    """Replica tasks and replica clearing, for ``MooncakeDistributedStore``."""

    if TYPE_CHECKING:
        _h: Any

    def batch_replica_clear(self, keys: Sequence[Key], segment_name: str = "") -> List[str]:
        """Clears the keys whose read lease has expired: with ``segment_name``, their replicas
        on that segment (an object left with none is removed), without, the whole object (when
        no write of it is in flight). Returns the keys cleared, in order; ``[]`` on failure or
        before ``setup``. Unlike Mooncake, keys are cleared whichever client wrote them (the
        master does not record a complete object's writer)."""
        enc = _key_list(keys)
        if self._h is None:
            return []
        seg = _name(segment_name, "segment_name")
        if not enc:
            return []
        flags = _core.replica_clear(self._h, enc, seg)
        if flags is None:
            return []
        return [k.decode("utf-8", "surrogatepass") for k, f in zip(enc, flags) if f]

    def create_copy_task(self, key: str, targets: List[str]) -> Tuple[TaskId, int]:
        """Queues a copy of ``key`` to each segment named in ``targets`` (one holding a replica
        already is left as it is). Returns ``(task id, 0)``, or ``((0, 0), code)``: -600 (no
        target, a target not mounted), -704 (no such object), -1010 (a target takes no new
        replicas now), -1401 (too many tasks wait)."""
        k = _key_bytes(key)
        if isinstance(targets, (str, bytes)):
            raise TypeError("targets must be a list of str")
        names = [_name(t, "a target") for t in targets]
        if self._h is None:
            return _NO_TASK, INVALID_PARAMS
        rc, tid = _core.create_copy_task(self._h, k, names)
        return (tid, 0) if rc == 0 else (_NO_TASK, rc)

    def create_move_task(self, key: str, source: str, target: str) -> Tuple[TaskId, int]:
        """Queues a move of ``key``'s replica on segment ``source`` to segment ``target``: the
        new replica is written and joins the object before the source's leaves it. Returns
        ``(task id, 0)``, or ``((0, 0), code)``: -704 (no such object), -600 (``source`` ==
        ``target``, a target not mounted, no replica on ``source``), -1010, -1401."""
        k = _key_bytes(key)
        src, dst = _name(source, "source"), _name(target, "target")
        if self._h is None:
            return _NO_TASK, INVALID_PARAMS
        rc, tid = _core.create_move_task(self._h, k, src, dst)
        return (tid, 0) if rc == 0 else (_NO_TASK, rc)

    def query_task(self, task_id: TaskId) -> Tuple[Optional[QueryTaskResponse], int]:
        """A task's state: ``(QueryTaskResponse, 0)``, or ``(None, code)``: -1400 (no such
        task: never created, or forgotten after 10,000 newer tasks finished)."""
        hi, lo = _task_id(task_id)
        if self._h is None:
            return None, INVALID_PARAMS
        rc, info = _core.query_task(self._h, hi, lo)
        if rc != 0 or info is None:
            return None, rc
        r = QueryTaskResponse()
        r._id = (info.id[0], info.id[1])
        r._type = TaskType(info.kind)
        r._status = TaskStatus(info.status)
        r._created = info.created_ms
        r._updated = info.updated_ms
        r._client = (info.assigned_client[0], info.assigned_client[1])
        r._message = info.message.decode("utf-8", "replace")
        return r, 0
