"""Dummy store clients (Mooncake's ``setup_dummy``): a client that owns no engine or segment and
sends its calls to a real client process on the same host (``python -m tidewire.store_server``).
Its buffers are memory from :class:`MooncakeHostMemAllocator`, which is shared with the real
client (memfd, opened by the real client through ``/proc``): zero-copy calls move the bytes
straight between that memory and the store, with no second copy. Copying calls (``put`` of
bytes, ``get``) carry the value in the call.

Only memory from ``MooncakeHostMemAllocator`` (or the pool ``setup_dummy`` makes) can be used
in a zero-copy call: any other address gives -600, with ``last_error`` saying why. The tensor
helpers are not available in a dummy client (-600). When the real client dies or stops
answering, every call fails within ``TW_DUMMY_TIMEOUT_S`` seconds (default 60) with -900 and
the client stays failed; it never hangs."""

import base64
import functools
import inspect
import os
import socket
import threading
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Set, TypeVar

from . import wire
from .arguments import _key_bytes, _key_list, _key_list_of_lists
from .codes import RPC_FAIL
from .values import ReplicaDescriptor, handle_of_bytes, shared_region

_C = TypeVar("_C", bound=type)


class NotShared(ValueError):
    """An address outside the memory shared with the real client."""


def _addr(ptr: Any, size: Any) -> List[int]:
    """``ptr .. ptr+size`` as ``[region id, offset]`` of shared memory, or ``NotShared``."""
    try:
        ptr, size = int(ptr), int(size)
    except (TypeError, ValueError):
        raise NotShared("addresses and sizes must be integers") from None
    r = shared_region(ptr, max(size, 0))
    if r is None:
        raise NotShared(
            f"{ptr:#x}+{size} is not memory shared with the real client: a dummy client can "
            "only use memory from MooncakeHostMemAllocator")
    return [r[0], ptr - r[1]]


def _config(cfg: Any) -> Optional[Dict[str, Any]]:
    if cfg is None:
        return None
    return {k: (v if not hasattr(v, "value") else int(v)) for k, v in vars(cfg).items()}


def _b64(v: Any) -> str:
    return base64.b64encode(bytes(memoryview(v))).decode()


def _keys(keys: Iterable[Any]) -> List[Any]:
    """Keys as JSON strings (a ``bytes`` key that is not UTF-8 stays invalid on the other side:
    lone surrogates)."""
    out = []
    for k in keys:
        if isinstance(k, (bytes, bytearray)):
            k = bytes(k).decode("utf-8", "surrogateescape")
        out.append(k)
    return out


def _key(k: Any) -> Any:
    return _keys([k])[0]


def _ptr_list(ptrs: Iterable[Any], sizes: Iterable[Any]) -> List[List[int]]:
    return [_addr(p, s) for p, s in zip(ptrs, sizes)]


def _ptr_lists(ptr_lists: Iterable[Iterable[Any]],
               size_lists: Iterable[Iterable[Any]]) -> List[List[List[int]]]:
    return [[_addr(p, s) for p, s in zip(ps, ss)] for ps, ss in zip(ptr_lists, size_lists)]


def _ranges(bases: Iterable[Any], all_dst: Iterable[Any],
            all_sizes: Iterable[Any]) -> List[List[int]]:
    out = []
    for b, dsts, sizes in zip(bases, all_dst, all_sizes):
        end = max((d + z for ds, zs in zip(dsts, sizes) for d, z in zip(ds, zs)), default=0)
        out.append(_addr(b, end))
    return out


#: Encoders of each forwarded method's arguments (keys already checked by the caller).
ENCODE: Dict[str, Callable[..., Any]] = {
    "put": lambda k, v, c=None: [_key(k), _b64(v), _config(c)],
    "upsert": lambda k, v, c=None: [_key(k), _b64(v), _config(c)],
    "put_batch": lambda ks, vs, c=None: [_keys(ks), [_b64(v) for v in vs], _config(c)],
    "upsert_batch": lambda ks, vs, c=None: [_keys(ks), [_b64(v) for v in vs], _config(c)],
    "put_from": lambda k, p, n, c=None: [_key(k), _addr(p, n), n, _config(c)],
    "upsert_from": lambda k, p, n, c=None: [_key(k), _addr(p, n), n, _config(c)],
    "batch_put_from": lambda ks, ps, ns, c=None: [_keys(ks), _ptr_list(ps, ns), list(ns),
                                                  _config(c)],
    "batch_upsert_from": lambda ks, ps, ns, c=None: [_keys(ks), _ptr_list(ps, ns), list(ns),
                                                     _config(c)],
    "batch_put_from_multi_buffers": lambda ks, pl, sl, c=None: [
        _keys(ks), _ptr_lists(pl, sl), [list(s) for s in sl], _config(c)],
    "batch_get_into_multi_buffers": lambda ks, pl, sl, prefer=False: [
        _keys(ks), _ptr_lists(pl, sl), [list(s) for s in sl], bool(prefer)],
    "get_into": lambda k, p, n: [_key(k), _addr(p, n), n],
    "batch_get_into": lambda ks, ps, ns: [_keys(ks), _ptr_list(ps, ns), list(ns)],
    "get": lambda k: [_key(k)],
    "get_batch": lambda ks: [_keys(ks)],
    "get_buffer": lambda k: [_key(k)],
    "batch_get_buffer": lambda ks: [_keys(ks)],
    "get_size": lambda k: [_key(k)],
    "is_exist": lambda k: [_key(k)],
    "batch_is_exist": lambda ks: [_keys(ks)],
    "remove": lambda k, force=False: [_key(k), bool(force)],
    "batch_remove": lambda ks, force=False: [_keys(ks), bool(force)],
    "remove_by_regex": lambda p, force=False: [_key(p), bool(force)],
    "remove_all": lambda force=False: [bool(force)],
    "batch_get_session_start": lambda ks: [_keys(ks)],
    "batch_get_session_end": lambda ks: [_keys(ks)],
    "batch_get_into_multi_buffer_ranges": lambda ks, pl, sl, ol: [
        _keys(ks), _ptr_lists(pl, sl), [list(s) for s in sl], [list(o) for o in ol]],
    "get_into_ranges": lambda bs, ak, ad, asrc, az: [
        _ranges(bs, ad, az), [_keys(k) for k in ak], ad, asrc, az],
    "batch_get_replica_desc": lambda ks: [_keys(ks)],
    "health_check": lambda: [],
}


class DummyLink:
    """The connection of one dummy client to its real client."""

    def __init__(self, address: str, timeout: Optional[float] = None) -> None:
        host, _, port = address.rpartition(":")
        self.timeout = timeout or float(os.environ.get("TW_DUMMY_TIMEOUT_S", "60"))
        self.sock = socket.create_connection((host or "127.0.0.1", int(port)),
                                             timeout=min(self.timeout, 10))
        self.sock.settimeout(self.timeout)
        self.lock = threading.Lock()
        self.failed: Optional[str] = None
        self.shared: Set[int] = set()

    def request(self, msg: Dict[str, Any]) -> Any:
        """One request and its reply; ``WireError`` once the link has failed."""
        with self.lock:
            if self.failed:
                raise wire.WireError(self.failed)
            try:
                wire.send(self.sock, msg)
                return wire.recv(self.sock)
            except wire.WireError as e:
                self.failed = f"the real client is gone: {e}"
                self.sock.close()
                raise wire.WireError(self.failed) from None

    def share(self, region_id: int, fd: int, size: int) -> Any:
        """Tells the real client about shared memory (once per region)."""
        if region_id in self.shared:
            return 0
        rep = self.request({"op": "share", "pid": os.getpid(), "fd": fd, "size": size,
                            "id": region_id})
        if rep.get("rc") == 0:
            self.shared.add(region_id)
        return rep.get("rc", RPC_FAIL)

    def close(self) -> None:
        """Closes the connection; later requests fail."""
        with self.lock:
            if not self.failed:
                self.failed = "closed"
                try:
                    self.sock.close()
                except OSError:
                    pass


#: Methods a dummy client runs itself.
def forwarded_in_dummy(runs_locally: FrozenSet[str]) -> Callable[[_C], _C]:
    """Class decorator for the store client: in a dummy client (``self._dummy`` set) each
    public method not named in ``runs_locally`` sends its call to the real client
    (``self._forward(name, args, kwargs)``) instead of running."""

    def decorate(cls: _C) -> _C:
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_") and name not in runs_locally:
                setattr(cls, name, _forwarding(name, fn))
        return cls

    return decorate


def _forwarding(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self._dummy is not None:
            return self._forward(name, args, kwargs)
        return fn(self, *args, **kwargs)

    return call

#: Result shapes by method, for a call that fails as a whole (see ``_failed``).
_LIST_CODE = {
    "batch_put_from", "batch_upsert_from", "batch_put_from_multi_buffers",
    "batch_get_into_multi_buffers", "batch_get_into", "batch_remove", "batch_get_session_start",
    "batch_get_into_multi_buffer_ranges", "batch_put_tensor", "batch_upsert_tensor",
    "batch_pub_tensor", "batch_upsert_pub_tensor", "batch_put_tensor_from",
    "batch_upsert_tensor_from",
}
_LIST_NONE = {"batch_get_buffer", "batch_get_tensor", "batch_get_tensor_into"}
_NONE = {"get_buffer", "get_tensor", "get_tensor_into"}


def _failed(name: str, args: Any, code: int) -> Any:
    """What method ``name`` returns when the whole call fails with ``code``."""
    n = len(args[0]) if args and isinstance(args[0], (list, tuple)) else 1
    if name in _LIST_CODE:
        return [code] * n
    if name == "batch_is_exist":
        return [-1] * n
    if name in _LIST_NONE:
        return [None] * n
    if name == "get_batch":
        return [b""] * n
    if name in _NONE:
        return None
    if name == "get":
        return b""
    if name == "is_exist":
        return -1
    if name == "batch_get_replica_desc":
        return {}
    if name == "get_replica_desc":
        return []
    return code


def _check_keys(name: str, args: Any, kwargs: Dict[str, Any]) -> None:
    """The ``TypeError`` a call with keys of the wrong type raises, before anything else."""
    if name == "get_into_ranges":
        for ks in _key_list_of_lists(args[1] if len(args) > 1 else kwargs.get("all_keys", [])):
            _key_list(ks)
    elif name in ("remove_all", "health_check", "remove_by_regex"):
        return
    elif args:
        (_key_list if name.startswith("batch_") or name in ("put_batch", "upsert_batch",
                                                           "get_batch") else _key_bytes)(args[0])


def _decode(name: str, r: Any) -> Any:
    """A dummy call's result as the method returns it."""
    if name == "get":
        return base64.b64decode(r)
    if name == "get_batch":
        return [base64.b64decode(v) for v in r]
    if name == "get_buffer":
        return None if r is None else handle_of_bytes(base64.b64decode(r))
    if name == "batch_get_buffer":
        return [None if v is None else handle_of_bytes(base64.b64decode(v)) for v in r]
    if name == "batch_get_replica_desc":
        return {k: [ReplicaDescriptor.of(*d) for d in reps]
                for k, reps in r.items()}
    return r
