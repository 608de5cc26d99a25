"""Mooncake's ``init_all`` (:class:`InitAllMixin`): its fixed set-up form, kept for scripts
that call it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .codes import INVALID_PARAMS


class InitAllMixin:
    """``init_all``, for ``MooncakeDistributedStore``."""

    if TYPE_CHECKING:
        _h: Any

        def setup(self, *args: Any, **kwargs: Any) -> int: ...

    def init_all(self, arg0: str, arg1: str, arg2: int) -> int:
        """``init_all(protocol, device_name, mount_segment_size)``: Mooncake's fixed
        set-up (engine name ``localhost:12345``, etcd metadata at ``127.0.0.1:2379``, the master
        at ``127.0.0.1:50051``, a 1 GiB local buffer, a ``mount_segment_size`` segment). -600 on
        a client set up already; otherwise what ``setup`` returns."""
        if self._h is not None:
            return INVALID_PARAMS
        return self.setup("localhost:12345", "etcd://127.0.0.1:2379", arg2, 1 << 30, arg0,
                          arg1, "127.0.0.1:50051")
