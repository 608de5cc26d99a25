"""``tidewire.engine``: the Mooncake-compatible ``TransferEngine``, at the module path that
mirrors ``mooncake.engine`` (``from tidewire.engine import TransferEngine``).

The code lives in :mod:`tidewire.mooncake_engine`; this module re-exports its public names
(``from tidewire.engine import *`` gives the same names as before the move).
"""

from .mooncake_engine.conventions import P2PHANDSHAKE as P2PHANDSHAKE
from .mooncake_engine.conventions import mooncake_code as mooncake_code
from .mooncake_engine.transfer_engine import (
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
]
