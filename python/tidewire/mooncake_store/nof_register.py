"""Mooncake's ``MooncakeDistributedNoFRegister``: the client behind its ``mooncake_ssd_register``
/ ``mooncake_ssd_unregister`` scripts, which mounts (unmounts) an NVMe-oF SSD namespace on the
master as a NoF segment.

tidewire has no NVMe-oF segments (its master refuses the ``--nof_*`` flags), so both methods
answer -1 (Mooncake's ``OPERATION_FAILED``), which is what Mooncake's own answer is without
NVMe-oF: its published wheel's master does not mount NoF segments, and without a master it
cannot connect; ``real_unregister_by_endpoint`` finds no matching segment. The arguments are
checked as Mooncake's binding checks them (positional, of these types: ``TypeError``
otherwise)."""

from __future__ import annotations

import logging
__all__ = ["MooncakeDistributedNoFRegister"]

#: Mooncake's ``OPERATION_FAILED``.
OPERATION_FAILED = -1
_SIZE_T_MAX = (1 << 64) - 1
_log = logging.getLogger("tidewire.store")


def _check(method: str, args: tuple, kinds: str) -> None:  # type: ignore[type-arg]
    for i, (value, kind) in enumerate(zip(args, kinds)):
        ok = (isinstance(value, str) if kind == "s"
              else isinstance(value, int) and 0 <= value <= _SIZE_T_MAX)
        if not ok:
            raise TypeError(f"{method}(): incompatible function arguments: arg{i} must be "
                            f"{'a str' if kind == 's' else 'a non-negative int'}, "
                            f"got {value!r}")


class MooncakeDistributedNoFRegister:
    """Registers NVMe-oF SSD namespaces with a master: not available in tidewire (every call
    returns -1, as Mooncake does without NVMe-oF)."""

    def __init__(self) -> None:
        pass

    def real_register(self, arg0: str, arg1: int, arg2: str, arg3: int, arg4: int, arg5: int,
                      arg6: str, /) -> int:
        """``real_register(nqn, nsid, traddr, trsvcid, base, size, master_server_addr)``:
        mounts the namespace's ``[base, base+size)`` as a NoF segment. Returns -1: tidewire
        has no NVMe-oF segments."""
        _check("real_register", (arg0, arg1, arg2, arg3, arg4, arg5, arg6), "sisiiis")
        _log.error("cannot register NVMe-oF SSD nqn=%s ns=%d at %s:%d with master %s: "
                   "tidewire has no NVMe-oF SSD segments", arg0, arg1, arg2, arg3, arg6)
        return OPERATION_FAILED

    def real_unregister_by_endpoint(self, arg0: str, arg1: int, arg2: str, arg3: int,
                                    arg4: str, /) -> int:
        """``real_unregister_by_endpoint(nqn, nsid, traddr, trsvcid, master_server_addr)``:
        unmounts the NoF segments of that endpoint. Returns -1: there are none in tidewire."""
        _check("real_unregister_by_endpoint", (arg0, arg1, arg2, arg3, arg4), "sisis")
        _log.error("no NVMe-oF segment for nqn=%s ns=%d at %s:%d on master %s: tidewire has "
                   "no NVMe-oF SSD segments", arg0, arg1, arg2, arg3, arg4)
        return OPERATION_FAILED
