"""Segments mounted at run time (:class:`SegmentMixin`): Mooncake's ``mount_segment``,
``allocate_and_mount_segment``, ``unmount_segment`` and ``unmount_and_free_segment``. A segment
mounted here takes new objects at once; unmounting drops the replicas there (an object keeps
its others) and frees the memory after the grace period."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Sequence

from . import native as _core


class SegmentMixin:
    """Run-time segments, for ``MooncakeDistributedStore``."""

    if TYPE_CHECKING:
        _h: Any
        last_error: str

    def mount_segment(self, path: str, size: int, offset: int = 0, protocol: str = "tcp",
                      location: str = "") -> Dict[str, Any]:
        """Maps ``size`` bytes of the file at ``path`` from ``offset`` (page aligned) and
        mounts them as one more segment of this client: ``{"ret": 0, "segment_ids": [id]}``,
        or ``{"ret": -1, "segment_ids": []}`` (``last_error`` says why), as Mooncake."""
        ids = self._mount(lambda: _core.mount_file_segment(self._h, str(path).encode(), size,
                                                           offset))
        return {"ret": 0 if ids else -1, "segment_ids": ids}

    def allocate_and_mount_segment(self, size: int, protocol: str = "tcp",
                                   location: str = "") -> Dict[str, Any]:
        """Allocates ``size`` bytes and mounts them as one more segment of this client:
        ``{"ret": 0, "segment_ids": [id], "allocated_size": size}``, or ``ret`` -1 with no id
        and ``allocated_size`` 0."""
        ids = self._mount(lambda: _core.allocate_segment(self._h, size))
        return {"ret": 0 if ids else -1, "segment_ids": ids,
                "allocated_size": size if ids else 0}

    def unmount_segment(self, segment_ids: Sequence[str], grace_period_seconds: int = 0) -> int:
        """Unmounts segments ``mount_segment`` mounted: 0, or -1 for an id it did not mount
        (or the master's code). Their memory is unmapped after ``grace_period_seconds``."""
        return self._unmount(segment_ids, grace_period_seconds, False)

    def unmount_and_free_segment(self, segment_ids: Sequence[str],
                                 grace_period_seconds: int = 0) -> int:
        """Unmounts and frees segments ``allocate_and_mount_segment`` mounted: 0, or -1 for an
        id it did not mount (or the master's code)."""
        return self._unmount(segment_ids, grace_period_seconds, True)

    def _mount(self, call: Any) -> List[str]:
        if self._h is None:
            return []
        try:
            rc, seg_id = call()
        except (TypeError, ValueError, OverflowError) as e:
            self.last_error = str(e)
            return []
        return [seg_id] if rc == 0 and seg_id else []

    def _unmount(self, segment_ids: Sequence[str], grace: int, allocated: bool) -> int:
        if self._h is None:
            return -1
        if isinstance(segment_ids, (str, bytes)) or not isinstance(grace, int) or grace < 0:
            return -1
        try:
            ids = [str(i).encode() for i in segment_ids]
        except TypeError:
            return -1
        return _core.unmount_segments(self._h, ids, grace, allocated)
