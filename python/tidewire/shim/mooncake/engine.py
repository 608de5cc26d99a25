"""``mooncake.engine`` served by :mod:`tidewire.engine`."""

from tidewire.engine import *  # noqa: F401,F403
from tidewire.engine import TransferEngine  # noqa: F401
