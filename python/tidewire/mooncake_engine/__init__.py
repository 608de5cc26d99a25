"""The Mooncake-compatible transfer engine: :class:`TransferEngine`, a drop-in for
``mooncake.engine.TransferEngine`` built on the pythonic :class:`tidewire.Engine`.

Callers import it as ``tidewire.engine`` (the path that mirrors ``mooncake.engine``); this
package holds the class (:mod:`~tidewire.mooncake_engine.transfer_engine`) and Mooncake's
conventions around it: return codes, timeouts, metadata strings
(:mod:`~tidewire.mooncake_engine.conventions`).
"""

from .transfer_engine import *  # noqa: F401,F403  (its __all__: the class and Mooncake's names)
from .transfer_engine import __all__ as __all__
