"""Mooncake-Store-compatible client on top of tidewire.

A drop-in for ``mooncake.store``: ``MooncakeDistributedStore`` and ``ReplicateConfig`` with
Mooncake's method names, argument orders, defaults and return conventions, talking to a
``tidewire-master`` (which accepts ``mooncake_master``'s flags)::

    from tidewire.store import MooncakeDistributedStore, ReplicateConfig

The code lives in :mod:`tidewire.mooncake_store` (the client class in
:mod:`~tidewire.mooncake_store.client`); this module is the public path, Mooncake's
``mooncake.store`` under tidewire's name, and :func:`install_as_mooncake` serves it as
``mooncake.store``.

Return conventions (as Mooncake's Python API):

- ``put*``/``upsert*``/``put_from``/``register_buffer``/...: ``0`` or a negative code;
  ``put_batch``/``upsert_batch`` return one code for the whole batch; ``batch_*`` return a list
  with one code per key. A create-only ``put`` of an existing key returns 0 and keeps the old
  value; ``upsert`` replaces it.
- ``get``/``get_batch``: ``bytes``, ``b''`` for a missing key. ``get_into``/``batch_get_into``:
  bytes read, or ``-704`` (missing) / ``-600`` (buffer too small or bad arguments).
- ``batch_put_from_multi_buffers``/``batch_get_into_multi_buffers``: values in several
  ``(ptr, size)`` pieces, concatenated; per key 0 / the value's size, or a negative code.
- ``get_size``: the size or ``-704``. ``is_exist``: 1/0/-1. ``remove``: 0, -704, -706 (leased,
  unless ``force``). ``remove_by_regex``/``remove_all``: the count removed.

Keys are ``str`` (``bytes`` and ``bytearray`` are taken too, as Mooncake's binding does), used
as byte strings of their full UTF-8 length: ``"k\0a"`` and ``"k\0b"`` are two keys, and neither
is ``"k"``. Any other type raises ``TypeError`` in every method, before anything else is checked
(Mooncake raises ``TypeError`` too), and so does a ``str`` or ``bytes`` given where a list of
keys is expected. A key that is empty, longer than ``MAX_KEY_LEN`` (1 MiB, Mooncake's limit)
bytes or not valid UTF-8 (a ``str`` with lone surrogates, or such ``bytes``) fails on its own, as
every method reports a bad key: ``-600`` where a code is returned (``put*``, ``upsert*``,
``get_into``, ``get_size``, ``remove``, each per key of the ``batch_*`` forms and per fragment
of ``get_into_ranges``), ``b''`` from ``get``/``get_batch``, ``None`` from ``get_buffer``, ``-1``
from ``is_exist``.

Codes: -1 internal, -10 buffer overflow, -101 segment not found, -200 no space,
-600 invalid parameters, -703 being written, -704 not found, -706 has lease, -707 lease
expired, -800 transfer failed, -900 master unreachable, -901 master timeout.

Every call into the library releases the GIL (ctypes), so threads overlap their transfers.
"""

from types import ModuleType

from .mooncake_store.buffer_pool import (
    BufferLease,
    BufferLeaseView,
    BufferPool,
    RegisteredBufferLease,
    RegisteredBufferLeaseView,
    RegisteredBufferPool,
)
from .mooncake_store.client import MAX_KEY_LEN as MAX_KEY_LEN
from .mooncake_store.client import MooncakeDistributedStore
from .mooncake_store.config import ObjectDataType, ReplicateConfig, SoftPinAction
from .mooncake_store.engram import EngramStore, EngramStoreConfig
from .mooncake_store.host_memory import get_alloc_func_addr, get_free_func_addr
from .mooncake_store.nof_register import MooncakeDistributedNoFRegister
from .mooncake_store.parallel import ParallelAxis, ReadTarget, TensorParallelism
from .mooncake_store.tasks import QueryTaskResponse, TaskStatus, TaskType
from .mooncake_store.values import (
    BufferHandle,
    Descriptor,
    DiskDescriptor,
    MemoryDescriptor,
    MooncakeHostMemAllocator,
    ReplicaDescriptor,
    ReplicaStatus,
    bind_to_numa_node,
)

__all__ = [
    "MooncakeDistributedStore", "ReplicateConfig", "BufferHandle", "SoftPinAction",
    "ObjectDataType", "ReplicaDescriptor", "MemoryDescriptor", "Descriptor", "DiskDescriptor",
    "ReplicaStatus", "MooncakeHostMemAllocator", "bind_to_numa_node", "ParallelAxis",
    "TensorParallelism", "ReadTarget", "TaskType", "TaskStatus", "QueryTaskResponse",
    "BufferPool", "BufferLease", "BufferLeaseView", "RegisteredBufferPool",
    "RegisteredBufferLease", "RegisteredBufferLeaseView", "EngramStore", "EngramStoreConfig",
    "MooncakeDistributedNoFRegister", "get_alloc_func_addr", "get_free_func_addr",
]

# Mooncake's module exports its enums' members too (``export_values``); where two enums share
# a name the later one wins, as there: TaskStatus.PROCESSING / FAILED over ReplicaStatus's.
for _enum in (ObjectDataType, ReplicaStatus, TaskType, TaskStatus):
    globals().update(_enum.__members__)
del _enum


def install_as_mooncake() -> ModuleType:
    """Makes ``import mooncake.store`` (and ``from mooncake.store import ...``) resolve to this
    module, so code written for Mooncake Store (TransferQueue's ``MooncakeStoreClient``) runs on
    tidewire unchanged. Call it once before that code imports ``mooncake.store``. An installed
    ``mooncake`` package keeps its other modules; only ``mooncake.store`` is replaced."""
    import importlib
    import sys
    import types

    me = sys.modules[__name__]
    parent = sys.modules.get("mooncake")
    if parent is None:
        try:
            parent = importlib.import_module("mooncake")
        except ImportError:
            parent = types.ModuleType("mooncake")
            parent.__path__ = []
            sys.modules["mooncake"] = parent
    sys.modules["mooncake.store"] = me
    setattr(parent, "store", me)
    return me
