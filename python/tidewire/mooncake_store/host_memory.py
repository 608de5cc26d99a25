"""Host memory from the library: Mooncake's ``get_alloc_func_addr``/``get_free_func_addr``
(the addresses of a C allocator pair) and the allocations the buffer pools make.

The pair is ``void *tw_store_host_alloc(size_t size)`` and ``void tw_store_host_free(void
*ptr)``, the C signatures of Mooncake's ``hugepage_memory_alloc``/``hugepage_memory_free``
whose addresses its functions return. They are not ``CUDAPluggableAllocator`` functions (that
takes ``void *(ssize_t, int, cudaStream_t)``), in Mooncake either. Mooncake's allocator gives
SPDK DMA memory in a build with NVMe-oF and NULL in one without (its wheels); tidewire's gives
page-aligned host memory (NULL for 0 bytes or when there is none), owned by the caller until it
passes it to the free function once; free takes NULL. Both are thread-safe."""

from __future__ import annotations

from . import native as _core

__all__ = ["get_alloc_func_addr", "get_free_func_addr", "host_alloc", "host_free"]


def get_alloc_func_addr() -> int:
    """Address of ``void *tw_store_host_alloc(size_t size)``: ``size`` bytes of host memory
    aligned to 4 KiB, NULL for 0 bytes or when none can be had."""
    return _core.host_function_address("tw_store_host_alloc")


def get_free_func_addr() -> int:
    """Address of ``void tw_store_host_free(void *ptr)``: frees memory from the allocator whose
    address :func:`get_alloc_func_addr` gives (NULL does nothing)."""
    return _core.host_function_address("tw_store_host_free")


def host_alloc(size: int, alignment: int) -> int:
    """``size`` bytes (> 0) aligned to ``alignment`` (a power of two of at least 8); 0 when the
    memory cannot be had. Free it with :func:`host_free`."""
    return _core.host_alloc(size, alignment)


def host_free(ptr: int) -> None:
    """Frees memory from :func:`host_alloc` (0 does nothing)."""
    _core.host_free(ptr)
