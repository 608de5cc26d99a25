"""Value types of the store beside the client (re-exported by ``tidewire.store``): buffer
handles, replica descriptors, the host-memory allocator and NUMA binding (Mooncake's names and
methods)."""

import ctypes
import enum
import functools
import mmap
import os
import threading
from typing import Any, Dict, Optional, Set, Tuple, Type

from . import native
from .signatures import StoreValue

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

    def _array(self) -> Any:
        """This handle as the ctypes byte array it also is (typed as such nowhere else)."""
        return self

    def ptr(self) -> int:
        """Address of the bytes (0 for an empty value)."""
        arr = self._array()
        return ctypes.addressof(arr) if len(arr) else 0

    def size(self) -> int:
        """Length in bytes."""
        return len(self._array())

    def view(self) -> memoryview:
        """A writable ``memoryview`` of unsigned bytes (format ``B``) over the value."""
        return memoryview(self._array()).cast("B")

    def tobytes(self) -> bytes:
        """A copy of the bytes."""
        return bytes(memoryview(self._array()))

    def release(self) -> None:
        """Returns the memory to the library now (idempotent). Views taken earlier must not be
        used afterwards; without this call the memory goes back when the handle is collected."""
        v = self.__dict__.pop("_value", None)
        if v is not None and v.owner:
            native.value_release(v)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"<BufferHandle size={len(self._array())}>"


_EMPTY = (ctypes.c_ubyte * 1)()


@functools.lru_cache(maxsize=512)
def _handle_class(n: int) -> Type[Any]:
    return type("BufferHandle", (BufferHandle, ctypes.c_ubyte * n), {})


def handle_of(value: StoreValue) -> BufferHandle:
    """A :class:`BufferHandle` taking ownership of a ``StoreValue`` the library filled."""
    n = int(value.len)
    addr = value.data if n else ctypes.addressof(_EMPTY)
    h: BufferHandle = _handle_class(n).from_address(addr)
    h.__dict__["_value"] = value
    return h


def handle_of_bytes(data: bytes) -> BufferHandle:
    """A :class:`BufferHandle` over a copy of ``data`` held in Python memory (a dummy client's
    ``get_buffer``)."""
    buf = bytearray(data) or bytearray(1)
    h: BufferHandle = _handle_class(len(data)).from_buffer(buf)
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

    def __init__(self, transport_endpoint: str, buffer_address: int, size: int) -> None:
        self.transport_endpoint = transport_endpoint
        self.buffer_address = buffer_address
        self.size = size

    def __repr__(self) -> str:
        return (f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
                f"transport_endpoint={self.transport_endpoint}>")


class MemoryDescriptor:
    """A memory replica: its ``buffer_descriptor`` (:class:`Descriptor`)."""

    def __init__(self, buffer_descriptor: Descriptor) -> None:
        self.buffer_descriptor = buffer_descriptor


class DiskDescriptor:
    """A disk replica: ``file_path`` (the record file in its tier's directory, on the tier
    owner's host) and ``object_size``."""

    def __init__(self, file_path: str = "", object_size: int = 0) -> None:
        self.file_path = file_path
        self.object_size = object_size

    def __repr__(self) -> str:
        return f"<DiskDescriptor file_path={self.file_path} object_size={self.object_size}>"


#: Segment names of disk tiers start with this (``disk://<id>@<owner><directory>``).
TIER_PREFIX = "disk://"


class ReplicaDescriptor:
    """One complete replica of an object (Mooncake's ``ReplicaDescriptor``): in a memory
    segment, or a record of a client's disk tier (Mooncake's LOCAL_DISK, the SSD offload:
    ``is_local_disk_replica()``, with a :class:`DiskDescriptor`). ``status`` is COMPLETE."""

    def __init__(self, memory: Optional[MemoryDescriptor] = None,
                 disk: Optional[DiskDescriptor] = None) -> None:
        self._memory = memory
        self._disk = disk
        self.status = ReplicaStatus.COMPLETE

    @classmethod
    def of(cls, endpoint: str, address: int, size: int) -> "ReplicaDescriptor":
        """The descriptor of a replica as the master lists it (a disk tier's address is its
        record's locator: the file number in the high 32 bits)."""
        if endpoint.startswith(TIER_PREFIX):
            rest = endpoint[len(TIER_PREFIX):].split("@", 1)[-1]
            directory = rest[rest.find("/"):] if "/" in rest else ""
            path = f"{directory}/{address >> 32:010d}.twd"
            return cls(disk=DiskDescriptor(path, size))
        return cls(memory=MemoryDescriptor(Descriptor(endpoint, address, size)))

    def is_memory_replica(self) -> bool:
        """Whether the replica is in a memory segment."""
        return self._memory is not None

    def is_disk_replica(self) -> bool:
        """False: tidewire has no shared-filesystem (DFS) replicas."""
        return False

    def is_local_disk_replica(self) -> bool:
        """Whether the replica is a record of a client's disk tier (SSD offload)."""
        return self._disk is not None

    def get_memory_descriptor(self) -> MemoryDescriptor:
        """Where the replica's bytes are; ``RuntimeError`` for a disk replica."""
        if self._memory is None:
            raise RuntimeError("not a memory replica")
        return self._memory

    def get_disk_descriptor(self) -> DiskDescriptor:
        """The record's file and size; ``RuntimeError`` for a memory replica."""
        if self._disk is None:
            raise RuntimeError("not a disk replica")
        return self._disk

    def __repr__(self) -> str:
        if self._disk is not None:
            return f"<ReplicaDescriptor local disk {self._disk!r}>"
        return f"<ReplicaDescriptor memory {self.get_memory_descriptor().buffer_descriptor!r}>"


# Memory from MooncakeHostMemAllocator, by region id: (address, size, memfd, mapping). It is
# memfd-backed so that a real client process can map it (for dummy clients).
_REGIONS: Dict[int, Tuple[int, int, int, mmap.mmap]] = {}
_REGIONS_LOCK = threading.Lock()
_NEXT_ID = [1]


def shared_regions() -> Dict[int, Tuple[int, int, int]]:
    """``{id: (address, size, fd)}`` of the shareable memory this process has allocated."""
    with _REGIONS_LOCK:
        return {k: (v[0], v[1], v[2]) for k, v in _REGIONS.items()}


def shared_region(addr: int, size: int) -> Optional[Tuple[int, int]]:
    """``(id, base)`` of the shareable region holding ``[addr, addr+size)``, or None."""
    with _REGIONS_LOCK:
        for k, (base, n, _fd, _m) in _REGIONS.items():
            if base <= addr and addr + size <= base + n:
                return k, base
    return None


def alloc_shared(size: Any) -> Optional[Tuple[int, int]]:
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


def free_shared(addr: int) -> bool:
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

    def __init__(self) -> None:
        self._mine: Set[int] = set()
        self._lock = threading.Lock()

    def alloc(self, size: int) -> int:
        """An address of ``size`` bytes of shareable memory, or 0."""
        got = alloc_shared(size)
        if got is None:
            return 0
        with self._lock:
            self._mine.add(got[1])
        return got[1]

    def free(self, addr: int) -> int:
        """0, or -1 for an address this allocator did not give (or already freed)."""
        with self._lock:
            if addr not in self._mine:
                return -1
            self._mine.discard(addr)
        return 0 if free_shared(addr) else -1


def _node_cpus(node: int) -> Optional[Set[int]]:
    try:
        with open(f"/sys/devices/system/node/node{int(node)}/cpulist") as f:
            spec = f.read().strip()
    except (OSError, ValueError):
        return None
    cpus: Set[int] = set()
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def bind_to_numa_node(node: int) -> None:
    """Runs the calling thread on the CPUs of NUMA node ``node`` (as Mooncake's function does
    for its thread); memory the thread touches first is then placed on that node by the
    kernel's first-touch policy. Raises ``ValueError`` for a node this machine does not have."""
    cpus = _node_cpus(node)
    if not cpus:
        raise ValueError(f"no NUMA node {node} on this machine")
    os.sched_setaffinity(0, cpus)
