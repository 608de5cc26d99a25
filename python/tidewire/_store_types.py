"""Value types of ``tidewire.store`` beside the client: buffer handles, replica descriptors,
the host-memory allocator and NUMA binding (Mooncake's names and methods)."""

import ctypes
import enum
import functools
import mmap
import os
import threading

from . import _store_core

__all__ = [
    "BufferHandle", "ReplicaStatus", "Descriptor", "MemoryDescriptor", "DiskDescriptor",
    "ReplicaDescriptor", "MooncakeHostMemAllocator", "bind_to_numa_node",
]


class BufferHandle:
    """A value read by ``get_buffer``/``batch_get_buffer``, held in library memory until the
    handle is released or collected. It is a buffer (``memoryview(h)``, ``torch.frombuffer(h,
    dtype=torch.uint8)``, ``bytes(h)``; writable, unsigned bytes), ``len(h)`` is its size, and
    ``ptr()``/``size()`` give its address and length as in Mooncake. A view taken from it keeps
    it (and the memory) alive.

    Each handle is an instance of a subclass of this class and of a ctypes byte array of the
    value's length (that is what makes it a buffer on every Python version)."""

    def ptr(self):
        """Address of the bytes (0 for an empty value)."""
        return ctypes.addressof(self) if len(self) else 0

    def size(self):
        """Length in bytes."""
        return len(self)

    def view(self):
        """A writable ``memoryview`` of unsigned bytes (format ``B``) over the value."""
        return memoryview(self).cast("B")

    def tobytes(self):
        """A copy of the bytes."""
        return bytes(memoryview(self))

    def release(self):
        """Returns the memory to the library now (idempotent). Views taken earlier must not be
        used afterwards; without this call the memory goes back when the handle is collected."""
        v = self.__dict__.pop("_value", None)
        if v is not None and v.owner:
            _store_core.value_release(v)

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self):
        return f"<BufferHandle size={len(self)}>"


_EMPTY = (ctypes.c_ubyte * 1)()


@functools.lru_cache(maxsize=512)
def _handle_class(n):
    return type("BufferHandle", (BufferHandle, ctypes.c_ubyte * n), {})


def handle_of(value):
    """A :class:`BufferHandle` taking ownership of a ``StoreValue`` the library filled."""
    n = int(value.len)
    addr = value.data if n else ctypes.addressof(_EMPTY)
    h = _handle_class(n).from_address(addr)
    h.__dict__["_value"] = value
    return h


def handle_of_bytes(data):
    """A :class:`BufferHandle` over a copy of ``data`` held in Python memory (a dummy client's
    ``get_buffer``)."""
    buf = bytearray(data) or bytearray(1)
    h = _handle_class(len(data)).from_buffer(buf)
    h.__dict__["_keep"] = buf
    return h


class ReplicaStatus(enum.IntEnum):
    """State of a replica (Mooncake's values). Descriptors list complete replicas only."""

    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class Descriptor:
    """Where a memory replica's bytes are: ``transport_endpoint`` (the owning segment,
    ``host:port``), ``buffer_address`` in the owner's memory and ``size``."""

    def __init__(self, transport_endpoint, buffer_address, size):
        self.transport_endpoint = transport_endpoint
        self.buffer_address = buffer_address
        self.size = size

    def __repr__(self):
        return (f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
                f"transport_endpoint={self.transport_endpoint}>")


class MemoryDescriptor:
    """A memory replica: its ``buffer_descriptor`` (:class:`Descriptor`)."""

    def __init__(self, buffer_descriptor):
        self.buffer_descriptor = buffer_descriptor


class DiskDescriptor:
    """A disk replica (``file_path``, ``object_size``). tidewire has no disk tier, so no
    descriptor it returns is one; the class exists for code that names it."""

    def __init__(self, file_path="", object_size=0):
        self.file_path = file_path
        self.object_size = object_size


class ReplicaDescriptor:
    """One replica of an object (Mooncake's ``ReplicaDescriptor``). tidewire keeps replicas in
    memory only: ``is_memory_replica()`` is True, the disk forms False, ``status`` COMPLETE."""

    def __init__(self, memory):
        self._memory = memory
        self.status = ReplicaStatus.COMPLETE

    def is_memory_replica(self):
        return True

    def is_disk_replica(self):
        return False

    def is_local_disk_replica(self):
        return False

    def get_memory_descriptor(self):
        return self._memory

    def get_disk_descriptor(self):
        raise RuntimeError("not a disk replica (tidewire keeps replicas in memory)")

    def __repr__(self):
        return f"<ReplicaDescriptor memory {self._memory.buffer_descriptor!r}>"


# Memory from MooncakeHostMemAllocator, by region id: (address, size, memfd, mapping). It is
# memfd-backed so that a real client process can map it (for dummy clients).
_REGIONS: dict = {}
_REGIONS_LOCK = threading.Lock()
_NEXT_ID = [1]


def shared_regions():
    """``{id: (address, size, fd)}`` of the shareable memory this process has allocated."""
    with _REGIONS_LOCK:
        return {k: (v[0], v[1], v[2]) for k, v in _REGIONS.items()}


def shared_region(addr, size):
    """``(id, base)`` of the shareable region holding ``[addr, addr+size)``, or None."""
    with _REGIONS_LOCK:
        for k, (base, n, _fd, _m) in _REGIONS.items():
            if base <= addr and addr + size <= base + n:
                return k, base
    return None


def alloc_shared(size):
    """Page-aligned memory that another process may map: ``(id, address)``, or None."""
    try:
        size = int(size)
        if size <= 0:
            return None
        fd = os.memfd_create("tidewire-host-mem", os.MFD_CLOEXEC)
    except (OverflowError, OSError, ValueError, TypeError, AttributeError):
        return None
    try:
        os.ftruncate(fd, size)
        m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
    except (OSError, ValueError, OverflowError):
        os.close(fd)
        return None
    view = ctypes.c_char.from_buffer(m)
    addr = ctypes.addressof(view)
    del view
    with _REGIONS_LOCK:
        rid = _NEXT_ID[0]
        _NEXT_ID[0] += 1
        _REGIONS[rid] = (addr, size, fd, m)
    return rid, addr


def free_shared(addr):
    """Frees memory from ``alloc_shared`` by address: True, or False when it is not ours."""
    with _REGIONS_LOCK:
        rid = next((k for k, v in _REGIONS.items() if v[0] == addr), None)
        if rid is None:
            return False
        _addr, _n, fd, m = _REGIONS.pop(rid)
    try:
        m.close()
    except BufferError:  # still exported: the mapping goes when the last view does
        pass
    os.close(fd)
    return True


class MooncakeHostMemAllocator:
    """Page-aligned host memory for buffers handed to the store (Mooncake's allocator for
    SGLang's host KV pool). ``alloc(size)`` returns an address (0 when the memory cannot be
    had, or ``size`` is not positive); ``free(address)`` returns 0, or -1 for an address it did
    not give (or gave and already freed). The memory is shareable: a dummy client
    (``setup_dummy``) passes it to its real client, which moves the bytes in and out of it
    directly. Thread-safe."""

    def __init__(self):
        self._mine = set()
        self._lock = threading.Lock()

    def alloc(self, size):
        got = alloc_shared(size)
        if got is None:
            return 0
        with self._lock:
            self._mine.add(got[1])
        return got[1]

    def free(self, addr):
        with self._lock:
            if addr not in self._mine:
                return -1
            self._mine.discard(addr)
        return 0 if free_shared(addr) else -1


def _node_cpus(node):
    try:
        with open(f"/sys/devices/system/node/node{int(node)}/cpulist") as f:
            spec = f.read().strip()
    except (OSError, ValueError):
        return None
    cpus = set()
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def bind_to_numa_node(node):
    """Runs the calling thread on the CPUs of NUMA node ``node`` (as Mooncake's function does
    for its thread); memory the thread touches first is then placed on that node by the
    kernel's first-touch policy. Raises ``ValueError`` for a node this machine does not have."""
    cpus = _node_cpus(node)
    if not cpus:
        raise ValueError(f"no NUMA node {node} on this machine")
    os.sched_setaffinity(0, cpus)
