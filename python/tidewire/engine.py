"""``tidewire.engine``: the Mooncake-compatible ``TransferEngine``, at the module path that
mirrors ``mooncake.engine`` (``from tidewire.engine import TransferEngine``).

The code lives in :mod:`tidewire.mooncake_engine`; this module re-exports its public names
(``from tidewire.engine import *`` gives the same names as before the move).
"""

from .mooncake_engine import *  # noqa: F401,F403  (every public name of the package)
from .mooncake_engine import __all__ as __all__
