"""ctypes declarations of the Store's C API (``tw_store_*`` in ``include/tidewire.h``)."""

from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char,
    c_char_p,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint8,
    c_uint64,
    c_void_p,
)


class ReplicateConfigC(Structure):
    """``tw_store_replicate_config``."""

    _fields_ = [
        ("replica_num", c_uint32),
        ("with_hard_pin", c_bool),
        ("with_soft_pin", c_bool),
        ("preferred_segments", c_char_p),
    ]


#: ``TW_STORE_MAX_TASK_MESSAGE_LEN``.
TASK_MESSAGE_LEN = 1024


class TaskInfoC(Structure):
    """``tw_store_task_info``: a replica task's state."""

    _fields_ = [
        ("id", c_uint64 * 2),
        ("kind", c_int32),
        ("status", c_int32),
        ("created_ms", c_uint64),
        ("updated_ms", c_uint64),
        ("assigned_client", c_uint64 * 2),
        ("message", c_char * TASK_MESSAGE_LEN),
    ]


class StoreValue(Structure):
    """``tw_store_value``: bytes owned by the library until released."""

    _fields_ = [("data", c_void_p), ("len", c_uint64), ("owner", c_void_p)]


class ReplicaC(Structure):
    """``tw_store_replica``: where one complete replica lies."""

    _fields_ = [("endpoint", c_char * 513), ("addr", c_uint64), ("size", c_uint64)]


#: The C API's numbers for Mooncake's INTERNAL_ERROR (-1) and BUFFER_OVERFLOW (-10): the
#: ``tw_result`` codes of the same meaning, ``TW_ERR_INTERNAL`` and ``TW_ERR_BUFFER_TOO_SMALL``
#: (one code space; every other store code is Mooncake's number). See
#: :mod:`tidewire.mooncake_store.codes`.
TW_STORE_INTERNAL_ERROR = -17
TW_STORE_BUFFER_OVERFLOW = -15

#: ``TW_STORE_MAX_REPLICAS``: replica slots per key in ``tw_store_get_replicas``.
MAX_REPLICAS = 8

#: ``tw_store_alloc_fn``: (ctx, index, size) -> address writable for size bytes, or NULL.
AllocFn = CFUNCTYPE(c_void_p, c_void_p, c_size_t, c_uint64)

_p = POINTER
# A key array is followed by its lengths (NULL: NUL-terminated keys; the package always passes
# lengths, so keys keep their NUL bytes).
_keys = _p(c_char_p)
_lens = _p(c_size_t)

#: name -> (argtypes, restype) for every ``tw_store_*`` function.
STORE_SIGNATURES = {
    "tw_store_setup": (
        [c_char_p, c_char_p, c_uint64, c_uint64, c_char_p, c_char_p, c_char_p, _p(c_void_p)],
        c_int32,
    ),
    "tw_store_setup_disk": (
        [c_char_p, c_char_p, c_uint64, c_uint64, c_char_p, c_char_p, c_char_p, c_char_p,
         _p(c_void_p)],
        c_int32,
    ),
    "tw_store_free": ([c_void_p], None),
    "tw_store_hostname": ([c_void_p, c_void_p, c_size_t], c_int32),
    "tw_store_health_check": ([c_void_p], c_int32),
    "tw_store_unmount_local_disk": ([c_void_p, c_uint32], c_int32),
    "tw_store_disk_read_count": ([c_void_p], c_uint64),
    "tw_store_register_buffer": ([c_void_p, c_void_p, c_uint64], c_int32),
    "tw_store_unregister_buffer": ([c_void_p, c_void_p], c_int32),
    "tw_store_put": (
        [c_void_p, _keys, _lens, _p(c_void_p), _p(c_uint64), c_size_t, c_int32, c_int32,
         _p(ReplicateConfigC), _p(c_int32)],
        c_int32,
    ),
    "tw_store_get_into": (
        [c_void_p, _keys, _lens, _p(c_void_p), _p(c_uint64), c_size_t, _p(c_int64)],
        c_int32,
    ),
    "tw_store_get_copy": (
        [c_void_p, _keys, _lens, c_size_t, _p(StoreValue), _p(c_int64)], c_int32
    ),
    "tw_store_value_release": ([_p(StoreValue)], None),
    "tw_store_get_sized": (
        [c_void_p, _keys, _lens, c_size_t, AllocFn, c_void_p, _p(c_int64)], c_int32
    ),
    "tw_store_get_ranges": (
        [c_void_p, _keys, _lens, _p(c_void_p), _p(c_uint64), _p(c_uint64), c_size_t, _p(c_int64)],
        c_int32,
    ),
    "tw_store_put_multi": (
        [c_void_p, _keys, _lens, _p(c_size_t), c_size_t, _p(c_void_p), _p(c_uint64), c_size_t,
         c_int32, _p(ReplicateConfigC), _p(c_int32)],
        c_int32,
    ),
    "tw_store_get_into_multi": (
        [c_void_p, _keys, _lens, _p(c_size_t), c_size_t, _p(c_void_p), _p(c_uint64), c_size_t,
         _p(c_int64)],
        c_int32,
    ),
    "tw_store_get_session_start": ([c_void_p, _keys, _lens, c_size_t, _p(c_int32)], c_int32),
    "tw_store_get_session_end": ([c_void_p, _keys, _lens, c_size_t], c_int32),
    "tw_store_get_session_ranges": (
        [c_void_p, _keys, _lens, _p(c_size_t), c_size_t, _p(c_void_p), _p(c_uint64),
         _p(c_uint64), c_size_t, _p(c_int64)],
        c_int32,
    ),
    "tw_store_put_session_start": (
        [c_void_p, _keys, _lens, _p(c_uint64), c_size_t, _p(ReplicateConfigC), _p(c_int32)],
        c_int32,
    ),
    "tw_store_put_session_ranges": (
        [c_void_p, _keys, _lens, _p(c_size_t), c_size_t, _p(c_void_p), _p(c_uint64),
         _p(c_uint64), c_size_t, _p(c_int64)],
        c_int32,
    ),
    "tw_store_put_session_end": ([c_void_p, _keys, _lens, c_size_t, _p(c_int32)], c_int32),
    "tw_store_put_session_revoke": ([c_void_p, _keys, _lens, c_size_t, _p(c_int32)], c_int32),
    "tw_store_mount_file_segment": (
        [c_void_p, c_char_p, c_uint64, c_uint64, c_char_p, c_size_t], c_int32),
    "tw_store_allocate_segment": ([c_void_p, c_uint64, c_char_p, c_size_t], c_int32),
    "tw_store_unmount_segments": (
        [c_void_p, _p(c_char_p), c_size_t, c_uint64, c_int32], c_int32),
    "tw_store_get_replicas": (
        [c_void_p, _keys, _lens, c_size_t, _p(ReplicaC), _p(c_int64)], c_int32
    ),
    "tw_store_get_size": ([c_void_p, c_char_p, c_size_t], c_int64),
    "tw_store_exist": ([c_void_p, _keys, _lens, c_size_t, _p(c_int32)], c_int32),
    "tw_store_split_keys": ([c_char_p, c_size_t, c_size_t, _keys, _lens], c_int32),
    "tw_store_remove": ([c_void_p, _keys, _lens, c_size_t, c_bool, _p(c_int32)], c_int32),
    "tw_store_remove_by_regex": ([c_void_p, c_char_p, c_bool], c_int64),
    "tw_store_remove_all": ([c_void_p, c_bool], c_int64),
    "tw_store_replica_clear": (
        [c_void_p, _keys, _lens, c_size_t, c_char_p, _p(c_uint8)], c_int32
    ),
    "tw_store_create_copy_task": (
        [c_void_p, c_char_p, c_size_t, _p(c_char_p), c_size_t, _p(c_uint64)], c_int32
    ),
    "tw_store_create_move_task": (
        [c_void_p, c_char_p, c_size_t, c_char_p, c_char_p, _p(c_uint64)], c_int32
    ),
    "tw_store_query_task": ([c_void_p, c_uint64, c_uint64, _p(TaskInfoC)], c_int32),
    "tw_store_host_alloc": ([c_size_t], c_void_p),
    "tw_store_host_alloc_aligned": ([c_size_t, c_size_t], c_void_p),
    "tw_store_host_free": ([c_void_p], None),
}
del _p, _keys, _lens
