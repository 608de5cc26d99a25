"""Mooncake's parallel tensor requests (``ParallelAxis``, ``TensorParallelism``,
``ReadTarget``), checked as Mooncake checks them, and the key names and headers its
``*_with_tp`` / ``*_with_parallelism`` methods store shards under (the methods are in
:mod:`~tidewire.mooncake_store.parallel_client`).

Keys, for a base key ``k``:

- a single TP axis (the ``*_with_tp`` forms too): ``k_tp_<rank>``;
- any other axis list: ``k`` then, per axis in the order dp, tp, ep, pp,
  ``__<kind>_<rank>of<size>`` with ``_sd<split_dim>``, ``_eid<expert_id>``, ``_sid<stage_id>``
  for the fields that are set (``k__dp_0of2__tp_1of2_sd0``);
- a ``writer_partition`` shard: ``k__writer_<rank>of<size>_sd<split_dim>``;
- manifests (96 bytes: magic ``NAMW``, version 1, size 96, dtype, ndim, split dim, shard count,
  then the global shape as eight i64): ``k__parallelism_manifest`` and ``k__writer_manifest``.

Each shard is a tensor object whose header has layout kind 1, the global and the local shape,
and one layout axis per requested axis (see :mod:`~tidewire.mooncake_store.tensor_format`)."""

from __future__ import annotations

import copy
import struct
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

from .tensor_format import MAX_AXES, MAX_DIMS, LayoutAxis

__all__ = ["ParallelAxis", "TensorParallelism", "ReadTarget"]

#: Axis kinds as Mooncake numbers them (``LayoutAxisKind``), and their key order.
KINDS = {"DP": 0, "TP": 1, "EP": 2, "PP": 3}
_NAMES = {v: k.lower() for k, v in KINDS.items()}
TP = KINDS["TP"]
MODES = ("as_stored", "shard", "full")

MANIFEST_LEN = 96
_MANIFEST = struct.Struct("<4sHHiiiii4x8q")


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what} must be int, not {type(v).__name__}")
    return v


def _opt_int(v: Any, what: str) -> Optional[int]:
    return None if v is None else _int(v, what)


class ParallelAxis:
    """One axis of a shard's identity: ``kind`` (``"tp"``, ``"dp"``, ``"ep"``, ``"pp"``, any
    case), ``rank`` of ``size``, and ``split_dim`` (TP), ``expert_id`` (EP), ``stage_id`` (PP).
    Built empty and filled by attribute, as Mooncake's; a value of the wrong type raises
    ``TypeError``."""

    __slots__ = ("_kind", "_rank", "_size", "_split_dim", "_expert_id", "_stage_id")

    def __init__(self) -> None:
        self._kind = ""
        self._rank = 0
        self._size = 1
        self._split_dim: Optional[int] = None
        self._expert_id: Optional[int] = None
        self._stage_id: Optional[int] = None

    @property
    def kind(self) -> str:
        return self._kind

    @kind.setter
    def kind(self, v: str) -> None:
        if not isinstance(v, str):
            raise TypeError(f"kind must be str, not {type(v).__name__}")
        self._kind = v

    @property
    def rank(self) -> int:
        return self._rank

    @rank.setter
    def rank(self, v: int) -> None:
        self._rank = _int(v, "rank")

    @property
    def size(self) -> int:
        return self._size

    @size.setter
    def size(self, v: int) -> None:
        self._size = _int(v, "size")

    @property
    def split_dim(self) -> Optional[int]:
        return self._split_dim

    @split_dim.setter
    def split_dim(self, v: Optional[int]) -> None:
        self._split_dim = _opt_int(v, "split_dim")

    @property
    def expert_id(self) -> Optional[int]:
        return self._expert_id

    @expert_id.setter
    def expert_id(self, v: Optional[int]) -> None:
        self._expert_id = _opt_int(v, "expert_id")

    @property
    def stage_id(self) -> Optional[int]:
        return self._stage_id

    @stage_id.setter
    def stage_id(self, v: Optional[int]) -> None:
        self._stage_id = _opt_int(v, "stage_id")


class TensorParallelism:
    """A shard's identity as a list of :class:`ParallelAxis` (``axes``; at most one per kind,
    at most four). Like Mooncake's, ``axes`` holds copies: assign a new list to change it."""

    __slots__ = ("_axes",)

    def __init__(self) -> None:
        self._axes: List[ParallelAxis] = []

    @property
    def axes(self) -> List[ParallelAxis]:
        return [copy.copy(a) for a in self._axes]

    @axes.setter
    def axes(self, v: Sequence[ParallelAxis]) -> None:
        if isinstance(v, (str, bytes)) or not all(isinstance(a, ParallelAxis) for a in v):
            raise TypeError("axes must be a list of ParallelAxis")
        self._axes = [copy.copy(a) for a in v]


class ReadTarget:
    """What a read wants: ``mode`` ``"as_stored"`` (the object under the key), ``"shard"`` (the
    shard ``parallelism`` names, cut from the stored shards when they are laid out otherwise) or
    ``"full"`` (the whole tensor, put together from its shards). Setting another mode raises
    ``RuntimeError``, as Mooncake does."""

    __slots__ = ("_mode", "_parallelism")

    def __init__(self) -> None:
        self._mode = "as_stored"
        self._parallelism: Optional[TensorParallelism] = None

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, v: str) -> None:
        if not isinstance(v, str):
            raise TypeError(f"mode must be str, not {type(v).__name__}")
        if v.lower() not in MODES:
            raise RuntimeError("Unsupported ReadTarget mode")
        self._mode = v.lower()

    @property
    def parallelism(self) -> Optional[TensorParallelism]:
        return copy.deepcopy(self._parallelism)

    @parallelism.setter
    def parallelism(self, v: Optional[TensorParallelism]) -> None:
        if v is not None and not isinstance(v, TensorParallelism):
            raise TypeError("parallelism must be a TensorParallelism or None")
        self._parallelism = copy.deepcopy(v)


class Axis(NamedTuple):
    """A checked axis: kind number, rank, size and the optional fields."""

    kind: int
    rank: int
    size: int
    split_dim: Optional[int]
    expert_id: Optional[int]
    stage_id: Optional[int]


#: A checked axis list, in the caller's order.
Axes = Tuple[Axis, ...]


class Writer(NamedTuple):
    """A checked ``writer_partition``."""

    rank: int
    size: int
    split_dim: int


class BadRequest(Exception):
    """A request Mooncake refuses (-600 from a write, None from a read)."""


def _kind(name: Any) -> Optional[int]:
    return KINDS.get(name.upper()) if isinstance(name, str) else None


def parse_axes(obj: Any) -> Axes:
    """The axes of a ``TensorParallelism`` (or any object with ``axes`` whose items have
    ``kind``, ``rank``, ``size``, ``split_dim``, ``expert_id``, ``stage_id``), checked as
    Mooncake checks a write's or a read's parallelism; :class:`BadRequest` otherwise."""
    try:
        items = list(obj.axes)
        axes = []
        for a in items:
            kind = _kind(a.kind)
            if kind is None:
                raise BadRequest(f"unsupported axis kind {a.kind!r}")
            axes.append(Axis(kind, int(a.rank), int(a.size), _opt(a.split_dim),
                             _opt(a.expert_id), _opt(a.stage_id)))
    except (AttributeError, TypeError, ValueError) as e:
        raise BadRequest(f"not a TensorParallelism: {e}") from None
    if not axes or len(axes) > MAX_AXES:
        raise BadRequest("a parallelism needs one to four axes")
    if len({a.kind for a in axes}) != len(axes):
        raise BadRequest("duplicate axis kinds")
    for a in axes:
        if a.size <= 0 or not 0 <= a.rank < a.size:
            raise BadRequest("invalid rank/size")
        name = _NAMES[a.kind]
        if (name == "tp") != (a.split_dim is not None):
            raise BadRequest("a TP axis, and only it, gives split_dim")
        if name == "ep" and a.expert_id is None:
            raise BadRequest("an EP axis requires expert_id")
        if name == "pp" and a.stage_id is None:
            raise BadRequest("a PP axis requires stage_id")
    return tuple(axes)


def _opt(v: Any) -> Optional[int]:
    return None if v is None else int(v)


def parse_writer(obj: Any) -> Writer:
    """A checked ``writer_partition`` (any object with ``rank``, ``size``, ``split_dim``)."""
    try:
        w = Writer(int(obj.rank), int(obj.size), int(obj.split_dim))
    except (AttributeError, TypeError, ValueError):
        raise BadRequest("a writer_partition must provide rank, size and split_dim") from None
    if w.size <= 0 or not 0 <= w.rank < w.size or w.split_dim < 0:
        raise BadRequest("invalid writer partition")
    return w


def parse_target(obj: Any) -> Tuple[str, Optional[Axes]]:
    """``(mode, axes)`` of a ``ReadTarget`` (None: as stored); axes are parsed but not
    checked here (:class:`BadRequest` for what cannot be read at all)."""
    if obj is None:
        return "as_stored", None
    try:
        mode, par = obj.mode, obj.parallelism
    except AttributeError:
        raise BadRequest("a ReadTarget must provide mode and parallelism") from None
    if not isinstance(mode, str) or mode.lower() not in MODES:
        raise BadRequest("unsupported ReadTarget mode")
    return mode.lower(), None if par is None else parse_axes(par)


def tp_index(axes: Axes) -> Optional[int]:
    return next((i for i, a in enumerate(axes) if a.kind == TP), None)


def with_tp(axes: Axes, rank: int, size: Optional[int] = None) -> Axes:
    """``axes`` with the TP axis at ``rank`` (and ``size``)."""
    i = tp_index(axes)
    assert i is not None
    a = axes[i]
    return axes[:i] + (a._replace(rank=rank, size=a.size if size is None else size),) + axes[i + 1:]


def canonical(axes: Axes) -> Axes:
    return tuple(sorted(axes, key=lambda a: a.kind))


def shard_key(base: bytes, axes: Axes) -> bytes:
    """The key a shard with identity ``axes`` is stored under (see the module's text)."""
    if len(axes) == 1 and axes[0].kind == TP:
        return tp_key(base, axes[0].rank)
    out = base
    for a in canonical(axes):
        out += b"__%s_%dof%d" % (_NAMES[a.kind].encode(), a.rank, a.size)
        for tag, v in ((b"_sd", a.split_dim), (b"_eid", a.expert_id), (b"_sid", a.stage_id)):
            if v is not None:
                out += tag + b"%d" % v
    return out


def tp_key(base: bytes, rank: int) -> bytes:
    return base + b"_tp_%d" % rank


def writer_key(base: bytes, w: Writer) -> bytes:
    return base + b"__writer_%dof%d_sd%d" % (w.rank, w.size, w.split_dim)


def parallelism_manifest_key(base: bytes) -> bytes:
    return base + b"__parallelism_manifest"


def writer_manifest_key(base: bytes) -> bytes:
    return base + b"__writer_manifest"


def layout_axes(axes: Axes, local_shape: Sequence[int]) -> List[LayoutAxis]:
    """The header's layout axes for ``axes`` (caller's order)."""
    out = []
    for i, a in enumerate(axes):
        tag = a.expert_id if _NAMES[a.kind] == "ep" else a.stage_id if _NAMES[a.kind] == "pp" \
            else None
        sd = -1 if a.split_dim is None else a.split_dim
        extent = local_shape[sd] if a.split_dim is not None else 0
        out.append(LayoutAxis(a.kind, i, a.rank, a.size, sd, tag or 0, extent))
    return out


def stored_axes(axes: Sequence[LayoutAxis]) -> Axes:
    """A header's layout axes as a checked-axis list (Mooncake's ``parallelism_from_metadata``),
    in key order."""
    out = []
    for a in axes:
        name = _NAMES.get(a.kind, "")
        out.append(Axis(a.kind, a.rank, a.shards, a.split_dim if a.split_dim >= 0 else None,
                        a.tag if name == "ep" else None, a.tag if name == "pp" else None))
    return canonical(tuple(out))


def manifest(code: int, shape: Sequence[int], split_dim: int, count: int) -> bytes:
    dims = list(shape) + [-1] * (MAX_DIMS - len(shape))
    return _MANIFEST.pack(b"NAMW", 1, MANIFEST_LEN, code, len(shape), split_dim, count, 0, *dims)


def parse_manifest(data: bytes) -> Optional[Tuple[int, Tuple[int, ...], int, int]]:
    """``(dtype code, global shape, split_dim, shard count)`` of a manifest, or None."""
    if len(data) < MANIFEST_LEN:
        return None
    magic, ver, hlen, code, ndim, sd, count, _r, *dims = _MANIFEST.unpack_from(data, 0)
    if magic != b"NAMW" or ver != 1 or hlen != MANIFEST_LEN or not 0 <= ndim <= MAX_DIMS \
            or count <= 0 or not 0 <= sd < ndim:
        return None
    shape = tuple(dims[:ndim])
    if any(d < 0 for d in shape):
        return None
    return code, shape, sd, count


def shard_range(dim: int, rank: int, count: int) -> Tuple[int, int]:
    """``(start, extent)`` of shard ``rank`` of ``count`` along a dimension of ``dim``."""
    extent = dim // count
    return rank * extent, extent


def uniform(shape: Sequence[int], split_dim: int, count: int) -> bool:
    return 0 <= split_dim < len(shape) and count > 0 and shape[split_dim] % count == 0
