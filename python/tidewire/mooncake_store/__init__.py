"""The Mooncake-Store-compatible client, by concept. Callers import it from
:mod:`tidewire.store` (Mooncake's ``mooncake.store`` under tidewire's name); this package holds
the code:

- :mod:`~tidewire.mooncake_store.client`: :class:`MooncakeDistributedStore`, the one class;
- :mod:`~tidewire.mooncake_store.native`: every ``tw_store_*`` call of the package, over the
  ctypes declarations of :mod:`~tidewire.mooncake_store.signatures`;
- :mod:`~tidewire.mooncake_store.codes`, :mod:`~tidewire.mooncake_store.arguments`,
  :mod:`~tidewire.mooncake_store.config`, :mod:`~tidewire.mooncake_store.setup_args`: Mooncake's
  return codes, argument checks, ``ReplicateConfig`` and ``setup`` arguments;
- :mod:`~tidewire.mooncake_store.values`: buffer handles, replica descriptors, host memory;
- :mod:`~tidewire.mooncake_store.tensor_format`: Mooncake's tensor layout;
- :mod:`~tidewire.mooncake_store.dummy`, :mod:`~tidewire.mooncake_store.wire`,
  :mod:`~tidewire.mooncake_store.server`: dummy clients and the real client that serves them
  (``python -m tidewire.store_server``).

Nothing is imported here: :mod:`tidewire._ffi` loads the signatures module while it is being
imported itself.
"""
