"""A ``mooncake`` package that points at tidewire: put ``python/tidewire/shim`` first on
``PYTHONPATH`` and ``from mooncake.store import MooncakeDistributedStore`` loads
:mod:`tidewire.store`, ``from mooncake.engine import TransferEngine`` loads
:mod:`tidewire.engine`, with no code change in the caller."""
