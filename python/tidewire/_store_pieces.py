"""The methods of :class:`~tidewire.store.MooncakeDistributedStore` that move values in pieces:
multi-buffer puts and gets, ranged reads, get sessions and replica descriptors (a mixin; the
class provides the handle ``_h``, ``_hostname`` and Mooncake's conventions)."""

from __future__ import annotations

from array import array
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _store_core as _core
from ._store_args import (
    _SIZE_CODE, Key, _ints, _key_bytes, _key_list, _key_list_of_lists, _ptrs_ok, _sizes_ok,
)
from ._store_codes import INTERNAL_ERROR, INVALID_PARAMS
from ._store_config import ReplicateConfig
from ._store_types import Descriptor, MemoryDescriptor, ReplicaDescriptor

#: Per key: a piece list of addresses, or of sizes (or of source offsets).
Pieces = Sequence[Sequence[int]]
#: ``_pieces``' checked arguments: results, good indices, counts, flat addresses, flat sizes.
_PieceArgs = Tuple[List[int], List[int], "array[int]", "array[int]", "array[int]"]


class PieceCalls:
    """Values in pieces, ranged reads, get sessions, replica descriptors."""

    _h: _core.Handle
    _hostname: str

    # ---------------------------------------------------------------- values in pieces
    def _pieces(self, enc: List[bytes], all_buffer_ptrs: Pieces, all_sizes: Pieces
                ) -> Tuple[Optional[List[int]], Optional[_PieceArgs]]:
        """A multi-buffer batch's arguments, checked: ``(settled, args)``. ``settled`` is the
        whole result when the arguments decide it (no handle, outer lengths that differ, no
        keys), else None; ``args`` is ``(results, good, counts, ptrs, sizes)``: the result list
        with -600 for each key whose own pieces are unusable (a ptr list and a size list of
        different lengths, or entries that are not addresses or sizes), the indices of the
        other keys, and their piece counts and flat addresses and sizes as arrays."""
        n = len(enc)
        if self._h is None:
            return [INTERNAL_ERROR] * n, None
        try:
            ptr_lists, size_lists = list(all_buffer_ptrs), list(all_sizes)
        except TypeError:
            return [INVALID_PARAMS] * n, None
        if not (n == len(ptr_lists) == len(size_lists)):
            return [INVALID_PARAMS] * n, None
        if n == 0:
            return [], None
        results = [INVALID_PARAMS] * n
        good: List[int] = []
        counts, flat_ptrs, flat_sizes = array(_SIZE_CODE), array("Q"), array("Q")
        for i in range(n):
            try:
                ps, ss = list(ptr_lists[i]), list(size_lists[i])
            except TypeError:
                continue
            if len(ps) != len(ss):
                continue
            pi, si = _ints(ps, 1 << 64), _ints(ss, 1 << 63)
            if pi is None or si is None:
                continue
            good.append(i)
            counts.append(len(pi))
            flat_ptrs.extend(pi)
            flat_sizes.extend(si)
        return None, (results, good, counts, flat_ptrs, flat_sizes)

    def batch_put_from_multi_buffers(self, keys: Sequence[Key], all_buffer_ptrs: Pieces,
                                     all_sizes: Pieces,
                                     config: Optional[ReplicateConfig] = None) -> List[int]:
        """Zero-copy create-only puts of values in pieces: key ``i``'s value is the
        concatenation of the ``all_sizes[i][j]`` bytes at each ``all_buffer_ptrs[i][j]``, in
        order. Every piece of every key goes straight to its replica buffers, in one transfer
        batch. One code per key: 0, or a negative code: -600 for outer lists of different
        lengths (every key gets it), for a key whose pieces are unusable (a pointer list and a
        size list of different lengths, NULL with a nonzero size, no bytes in all, unmapped
        memory) and for a config Mooncake refuses; -200 when no segment has room. Zero-size
        pieces are skipped. ``config.prefer_alloc_in_same_node`` places the value in this
        client's own segment when it has room (``replica_num`` must be 1)."""
        return self._put_pieces(_key_list(keys), all_buffer_ptrs, all_sizes, config, False)

    def _put_pieces(self, enc: List[bytes], all_buffer_ptrs: Pieces, all_sizes: Pieces,
                    config: Optional[ReplicateConfig], upsert: bool) -> List[int]:
        """``batch_put_from_multi_buffers`` of encoded keys, create-only or ``upsert``."""
        settled, args = self._pieces(enc, all_buffer_ptrs, all_sizes)
        if settled is not None:
            return settled
        assert args is not None  # not settled: the arguments to run
        results, good, counts, ptrs, sizes = args
        cfg = (config or ReplicateConfig())._c(local=self._hostname)
        if cfg is None:
            return [INVALID_PARAMS] * len(enc)
        if not good:
            return results
        res = _core.put_multi(self._h, [enc[i] for i in good], counts, ptrs, sizes, upsert, cfg)
        for j, i in enumerate(good):
            results[i] = res[j]
        return results

    def batch_get_into_multi_buffers(self, keys: Sequence[Key], all_buffer_ptrs: Pieces,
                                     all_sizes: Pieces,
                                     prefer_alloc_in_same_node: bool = False) -> List[int]:
        """Zero-copy reads into pieces: key ``i``'s value fills ``all_buffer_ptrs[i][j]``
        (``all_sizes[i][j]`` bytes each) in order; the pieces may hold more than the value,
        and what lies past its end is left as it was. Per key: the value's size in bytes, or a
        negative code: -704 missing; -600 for outer lists of different lengths (every key gets
        it), or for a key whose pieces are unusable or hold fewer bytes than the value.
        ``prefer_alloc_in_same_node`` is accepted and changes nothing (a replica in this
        process's own segment is always read by memcpy)."""
        del prefer_alloc_in_same_node  # accepted for Mooncake's signature; see above
        enc = _key_list(keys)
        settled, args = self._pieces(enc, all_buffer_ptrs, all_sizes)
        if settled is not None:
            return settled
        assert args is not None  # not settled: the arguments to run
        results, good, counts, ptrs, sizes = args
        if not good:
            return results
        res = _core.get_into_multi(self._h, [enc[i] for i in good], counts, ptrs, sizes)
        for j, i in enumerate(good):
            results[i] = res[j]
        return results

    def get_into_ranges(self, buffer_ptrs: Sequence[int], all_keys: Sequence[Sequence[Key]],
                        all_dst_offsets: Sequence[Pieces], all_src_offsets: Sequence[Pieces],
                        all_sizes: Sequence[Pieces]) -> Union[int, List[List[List[int]]]]:
        """Ranged reads, buffer-major: for buffer ``b`` and its ``k``-th key, fragment ``f``
        copies ``[src_offsets[b][k][f], +sizes[b][k][f])`` of the object to
        ``buffer_ptrs[b] + dst_offsets[b][k][f]``. Returns ``[b][k][f]`` bytes read or a code.

        Lists whose lengths disagree get Mooncake's answer, -600 in each place of the nested
        result rather than one bare code: every key of every buffer when the outer lists differ
        in length, every key of a buffer whose key and offset lists differ, and one key whose
        own three lists differ (the other keys are read). A key has as many places as it has
        destination offsets (one when it has none)."""
        groups = [_key_list(ks) for ks in _key_list_of_lists(all_keys)]
        flat_keys: List[bytes] = []
        dsts: List[int] = []
        srcs: List[int] = []
        lens: List[int] = []
        # Per buffer, per key: the number of fragments read, or -(places) for a refused key.
        shape: List[List[int]] = []
        n = len(buffer_ptrs)
        lists_agree = len(groups) == len(all_dst_offsets) == len(all_src_offsets) \
            == len(all_sizes) == n
        try:
            for b, base in enumerate(buffer_ptrs):
                keys = groups[b] if b < len(groups) else [b""]
                dst_b = all_dst_offsets[b] if b < len(all_dst_offsets) else []
                src_b = all_src_offsets[b] if b < len(all_src_offsets) else []
                len_b = all_sizes[b] if b < len(all_sizes) else []
                buffer_agrees = lists_agree and len(keys) == len(dst_b) == len(src_b) \
                    == len(len_b)
                kshape = []
                for k, key in enumerate(keys):
                    d = dst_b[k] if k < len(dst_b) else [0]
                    if not (buffer_agrees and len(d) == len(src_b[k]) == len(len_b[k])):
                        kshape.append(-max(len(d), 1))
                        continue
                    s_, z = src_b[k], len_b[k]
                    for i in range(len(d)):
                        flat_keys.append(key)
                        dsts.append(int(base) + int(d[i]))
                        srcs.append(int(s_[i]))
                        lens.append(int(z[i]))
                    kshape.append(len(d))
                shape.append(kshape)
        except (IndexError, TypeError, ValueError):
            return INVALID_PARAMS
        if self._h is None:
            return INTERNAL_ERROR
        if not _ptrs_ok(dsts) or not _sizes_ok(srcs) or not _sizes_ok(lens):
            return INVALID_PARAMS
        res: List[int] = []
        if flat_keys:
            rc, res = _core.get_ranges(self._h, flat_keys, dsts, srcs, lens)
            if rc != 0:
                return rc
        out: List[List[List[int]]] = []
        i = 0
        for kshape in shape:
            per_buf: List[List[int]] = []
            for m in kshape:
                if m < 0:
                    per_buf.append([INVALID_PARAMS] * -m)
                else:
                    per_buf.append(res[i:i + m])
                    i += m
            out.append(per_buf)
        return out

    # ---------------------------------------------------------------- get sessions
    def batch_get_session_start(self, keys: Sequence[Key]) -> List[int]:
        """Starts a get session per key: the replicas are looked up once and held, so the
        ranged reads that follow (``batch_get_into_multi_buffer_ranges``) need no master round
        trip and their bytes cannot be freed or replaced until ``batch_get_session_end``. Per
        key: 0, -704 missing, -600 bad key. The hold outlives the master's lease only while this
        client's heartbeats keep arriving, and never past its ``--max_read_hold_sec``."""
        enc = _key_list(keys)
        n = len(enc)
        if self._h is None:
            return [INTERNAL_ERROR] * n
        if n == 0:
            return []
        return _core.session_start(self._h, enc)

    def batch_get_session_end(self, keys: Sequence[Key]) -> int:
        """Ends the get sessions of ``keys`` (keys without one are ignored). Returns 0."""
        enc = _key_list(keys)
        if self._h is None:
            return INTERNAL_ERROR
        if not enc:
            return 0
        return _core.session_end(self._h, enc)

    def batch_get_into_multi_buffer_ranges(self, keys: Sequence[Key], all_buffer_ptrs: Pieces,
                                           all_sizes: Pieces,
                                           all_src_offsets: Pieces) -> List[int]:
        """Ranged reads under open get sessions: for key ``i``, fragment ``j`` copies
        ``all_sizes[i][j]`` bytes from offset ``all_src_offsets[i][j]`` of the object to
        ``all_buffer_ptrs[i][j]``. All fragments of all keys go in one transfer batch. Per key:
        the bytes read (the sum of its sizes), or a negative code: -600 for a key with no open
        session, a fragment past the object's end, lists of different lengths, a NULL or
        unmapped destination; -707 when the session's hold no longer protects the read."""
        enc = _key_list(keys)
        n = len(enc)
        if self._h is None:
            return [INTERNAL_ERROR] * n
        try:
            ptr_lists, size_lists, off_lists = (
                list(all_buffer_ptrs), list(all_sizes), list(all_src_offsets))
        except TypeError:
            return [INVALID_PARAMS] * n
        if not (n == len(ptr_lists) == len(size_lists) == len(off_lists)):
            return [INVALID_PARAMS] * n
        results = [INVALID_PARAMS] * n
        good: List[int] = []
        counts = array(_SIZE_CODE)
        ptrs, sizes, offs = array("Q"), array("Q"), array("Q")
        for i in range(n):
            try:
                ps, ss, os_ = list(ptr_lists[i]), list(size_lists[i]), list(off_lists[i])
            except TypeError:
                continue
            if not len(ps) == len(ss) == len(os_):
                continue
            pi, si, oi = _ints(ps, 1 << 64), _ints(ss, 1 << 63), _ints(os_, 1 << 63)
            if pi is None or si is None or oi is None:
                continue
            good.append(i)
            counts.append(len(pi))
            ptrs.extend(pi)
            sizes.extend(si)
            offs.extend(oi)
        if not good:
            return results
        res = _core.session_ranges(self._h, [enc[i] for i in good], counts, ptrs, sizes, offs)
        for j, i in enumerate(good):
            results[i] = res[j]
        return results

    # ---------------------------------------------------------------- replica descriptors
    def batch_get_replica_desc(self, keys: Sequence[Key]) -> Dict[Key, List[ReplicaDescriptor]]:
        """``{key: [ReplicaDescriptor, ...]}`` for the keys that exist (complete memory
        replicas; missing keys are left out, as in Mooncake). Nothing stays held: the bytes
        may move or be freed after the call."""
        key_list = list(keys) if not isinstance(keys, (str, bytes, bytearray)) else keys
        enc = _key_list(key_list)
        n = len(enc)
        if self._h is None or n == 0:
            return {}
        found = _core.get_replicas(self._h, enc)
        if found is None:
            return {}
        out: Dict[Key, List[ReplicaDescriptor]] = {}
        for key, reps in zip(key_list, found):
            if reps:
                out[key] = [ReplicaDescriptor(MemoryDescriptor(Descriptor(*r))) for r in reps]
        return out

    def get_replica_desc(self, key: Key) -> List[ReplicaDescriptor]:
        """The key's replicas as ``[ReplicaDescriptor]`` (empty when it does not exist)."""
        _key_bytes(key)
        return next(iter(self.batch_get_replica_desc([key]).values()), [])
