"""The Mooncake-compatible transfer engine: :class:`TransferEngine`, a drop-in for
``mooncake.engine.TransferEngine`` built on the pythonic :class:`tidewire.Engine`.

Callers import it as ``tidewire.engine`` (the path that mirrors ``mooncake.engine``); this
package holds the class (:mod:`~tidewire.mooncake_engine.transfer_engine`) and Mooncake's
conventions around it: return codes, timeouts, metadata strings
(:mod:`~tidewire.mooncake_engine.conventions`).
"""

from .conventions import P2PHANDSHAKE, mooncake_code
from .transfer_engine import (
    SUPPORT_CUDA,
    SUPPORT_EFA,
    SUPPORT_HIP,
    SUPPORT_INTRA_NVLINK,
    SUPPORT_MNNVL,
    SUPPORT_MUSA,
    Read,
    TransferEngine,
    TransferNotify,
    TransferOpcode,
    Write,
)

__all__ = [
    "TransferEngine",
    "TransferNotify",
    "TransferOpcode",
    "Read",
    "Write",
    "SUPPORT_CUDA",
    "SUPPORT_EFA",
    "SUPPORT_HIP",
    "SUPPORT_MNNVL",
    "SUPPORT_MUSA",
    "SUPPORT_INTRA_NVLINK",
    "P2PHANDSHAKE",
    "mooncake_code",
]
