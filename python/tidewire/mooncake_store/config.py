"""``ReplicateConfig`` and its enums (Mooncake's names, fields and defaults), re-exported by
``tidewire.store``."""

import enum
import operator
from typing import Any, List, Optional

from .signatures import ReplicateConfigC


class SoftPinAction(enum.IntEnum):
    """``ReplicateConfig.soft_pin_action`` (Mooncake's values)."""

    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(enum.IntEnum):
    """``ReplicateConfig.data_type`` (Mooncake's values; recorded nowhere here)."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class ReplicateConfig:
    """Placement and pinning of a write (Mooncake's ``ReplicateConfig``, every field with
    Mooncake's default).

    Acted on: ``replica_num``; ``with_hard_pin``; ``preferred_segments`` and
    ``preferred_segment`` (Mooncake's deprecated single form, tried first); soft pinning by
    ``soft_pin_action=SoftPinAction.ENABLE`` (or the older ``with_soft_pin=True``), for the
    master's ``--default_kv_soft_pin_ttl``; ``prefer_alloc_in_same_node``, which, as in
    Mooncake, only ``batch_put_from_multi_buffers`` takes (needs ``replica_num == 1`` and no
    NoF replicas; it places the value in this client's own segment when it has room) and every
    other write refuses with -600; ``soft_pin_ttl_ms`` set without ``ENABLE`` is refused with
    -600, as Mooncake's master does.

    Accepted and not acted on: ``soft_pin_ttl_ms``'s value (the master's default TTL applies);
    ``SoftPinAction.DISABLE`` (an existing soft pin stays until its TTL ends, as with
    ``PRESERVE``); ``nof_replica_num``, ``dfs_replica_num`` and ``preferred_nof_segments``
    (there are no NoF or DFS tiers); ``data_type``; ``group_ids`` and ``session_ids`` (no
    group leases, group eviction or write sessions)."""

    def __init__(self) -> None:
        self.replica_num = 1
        self.nof_replica_num = 0
        self.dfs_replica_num = 0
        self.soft_pin_action = SoftPinAction.PRESERVE
        self.soft_pin_ttl_ms: Optional[int] = None
        self.with_soft_pin = False
        self.with_hard_pin = False
        self.preferred_segments: List[str] = []
        self.preferred_segment = ""
        self.preferred_nof_segments: List[str] = []
        self.prefer_alloc_in_same_node = False
        self.data_type = ObjectDataType.UNKNOWN
        self.group_ids: Optional[List[Any]] = None
        self.session_ids: Optional[List[Any]] = None

    def _soft_pin(self) -> Optional[bool]:
        """Whether the write soft-pins, or None when the fields conflict (a TTL without
        ``ENABLE``, or an unknown action)."""
        try:
            action = SoftPinAction(operator.index(self.soft_pin_action))
        except (TypeError, ValueError):
            return None
        if self.soft_pin_ttl_ms is not None and action != SoftPinAction.ENABLE:
            return None
        if action == SoftPinAction.DISABLE:
            return False
        return action == SoftPinAction.ENABLE or bool(self.with_soft_pin)

    def _c(self, local: Optional[str] = None) -> Optional[ReplicateConfigC]:
        """The C config, or None when Mooncake refuses this one (-600). ``local``: the calling
        client's segment name, given by the calls that take ``prefer_alloc_in_same_node``."""
        soft = self._soft_pin()
        if soft is None:
            return None
        try:
            replicas = operator.index(self.replica_num)
        except TypeError:
            return None
        if replicas < 1:
            return None  # Mooncake refuses replica_num=0 (and negatives) with -600
        names = list(self.preferred_segments or [])
        if self.preferred_segment:
            names.insert(0, self.preferred_segment)
        if self.prefer_alloc_in_same_node:
            if local is None or self.replica_num != 1 or self.nof_replica_num:
                return None
            if local:
                names.insert(0, local)
        return ReplicateConfigC(
            min(replicas, 1 << 31),
            bool(self.with_hard_pin),
            soft,
            ",".join(names).encode() if names else None,
        )

    def __repr__(self) -> str:
        return (
            f"ReplicateConfig(replica_num={self.replica_num}, "
            f"soft_pin_action={getattr(self.soft_pin_action, 'name', self.soft_pin_action)}, "
            f"soft_pin_ttl_ms={self.soft_pin_ttl_ms}, with_hard_pin={self.with_hard_pin}, "
            f"preferred_segments={self.preferred_segments!r}, "
            f"preferred_segment={self.preferred_segment!r}, "
            f"prefer_alloc_in_same_node={self.prefer_alloc_in_same_node}, "
            f"group_ids={self.group_ids!r})"
        )
