"""Put sessions (:class:`PutSessionMixin`): Mooncake's ``batch_put_session_start``,
``batch_put_from_multi_buffer_ranges``, ``batch_put_session_end`` and
``batch_put_session_revoke``. A session reserves a key's buffers on the master without writing
(the key stays unreadable), takes ranged writes from any number of buffers and calls, and is
published at ``end`` or dropped at ``revoke``; a writer that dies leaves it to the master's
discard timeout."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Sequence

from . import native as _core
from .arguments import Key, _ints, _key_list, _pack_ranges
from .codes import INVALID_PARAMS
from .config import ReplicateConfig

Pieces = Sequence[Sequence[int]]


class PutSessionMixin:
    """Put sessions, for ``MooncakeDistributedStore``."""

    if TYPE_CHECKING:
        _h: Any

    def batch_put_session_start(self, keys: Sequence[Key], sizes: Sequence[int],
                                config: Optional[ReplicateConfig] = None) -> List[int]:
        """Reserves ``sizes[i]`` bytes for ``keys[i]`` (a create-only put's placement, with
        ``config``) without writing: per key 0, -600 (a session already open for the key, a
        bad key or size, lists of different lengths), or the master's code (-705 exists,
        -200 no space)."""
        enc = _key_list(keys)
        n = len(enc)
        if self._h is None:
            return [INVALID_PARAMS] * n
        size_list = _ints(list(sizes), 1 << 63) if not isinstance(sizes, (str, bytes)) else None
        if size_list is None or len(size_list) != n:
            return [INVALID_PARAMS] * n
        if n == 0:
            return []
        cfg = (config or ReplicateConfig())._c()
        if cfg is None:
            return [INVALID_PARAMS] * n
        return _core.put_session_start(self._h, enc, size_list, cfg)

    def batch_put_from_multi_buffer_ranges(self, keys: Sequence[Key], all_buffer_ptrs: Pieces,
                                           all_sizes: Pieces,
                                           all_dst_offsets: Pieces) -> List[int]:
        """Ranged writes into open put sessions: for key ``i``, fragment ``j`` writes
        ``all_sizes[i][j]`` bytes from ``all_buffer_ptrs[i][j]`` at offset
        ``all_dst_offsets[i][j]`` of the object, in every replica. All fragments of all keys go
        in one transfer batch. Per key: the bytes written, or -600 (no open session, a fragment
        past the object, lists of different lengths, a NULL or unmapped source) or -800."""
        enc = _key_list(keys)
        n = len(enc)
        if self._h is None:
            return [INVALID_PARAMS] * n
        packed = _pack_ranges(n, all_buffer_ptrs, all_sizes, all_dst_offsets)
        if packed is None:
            return [INVALID_PARAMS] * n
        good, counts, ptrs, sizes, offs = packed
        results = [INVALID_PARAMS] * n
        if good:
            res = _core.put_session_ranges(self._h, [enc[i] for i in good], counts, ptrs,
                                           sizes, offs)
            for j, i in enumerate(good):
                results[i] = res[j]
        return results

    def batch_put_session_end(self, keys: Sequence[Key]) -> List[int]:
        """Publishes the put sessions of ``keys`` once their running writes end: per key 0
        (readable from now on), -600 (no open session), or the master's code."""
        return self._close_put_sessions(keys, True)

    def batch_put_session_revoke(self, keys: Sequence[Key]) -> List[int]:
        """Drops the put sessions of ``keys`` (their space is freed; an older value stays):
        per key 0, -600 (no open session), or the master's code."""
        return self._close_put_sessions(keys, False)

    def _close_put_sessions(self, keys: Sequence[Key], publish: bool) -> List[int]:
        enc = _key_list(keys)
        if self._h is None:
            return [INVALID_PARAMS] * len(enc)
        if not enc:
            return []
        return _core.put_session_close(self._h, enc, publish)
