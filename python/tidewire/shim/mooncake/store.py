"""``mooncake.store`` served by :mod:`tidewire.store`."""

from tidewire.store import *  # noqa: F401,F403
from tidewire.store import BufferHandle, MooncakeDistributedStore, ReplicateConfig  # noqa: F401
