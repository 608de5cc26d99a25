"""Keeps an engine handle alive while calls use it.

Every library call an :class:`~tidewire.Engine` (and the objects made from it) makes goes
through :class:`GuardedLib`: the call counts itself in before it starts and out when it
returns. ``close()`` marks the engine closing (calls that start later raise
:class:`~tidewire.Shutdown` without touching the handle), waits for the calls in flight, and
frees the handle once none is left. When they outlast the wait, the last one to return frees
it: the handle is never freed under a running call.
"""

import threading

from . import _ffi
from ._errors import Shutdown


class CallGuard:
    """A count of calls in flight and a closing flag, under one lock."""

    __slots__ = ("_cond", "_calls", "closing", "_release")

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._calls = 0
        self.closing = False
        self._release = None  # set by close(): frees the handle; run once, by whoever is last

    def enter(self):
        with self._cond:
            if self.closing:
                raise Shutdown(_ffi.TW_ERR_SHUTDOWN, "engine is closed")
            self._calls += 1

    def leave(self):
        release = None
        with self._cond:
            self._calls -= 1
            if self._calls == 0 and self.closing:
                release, self._release = self._release, None
                self._cond.notify_all()
        if release is not None:
            release()

    def try_enter(self):
        """:meth:`enter` for finalizers: False, without waiting, when the lock is taken (this
        thread may hold it below the finalizer) or the engine is closing."""
        if not self._cond.acquire(blocking=False):
            return False
        try:
            if self.closing:
                return False
            self._calls += 1
            return True
        finally:
            self._cond.release()

    def leave_nowait(self):
        """:meth:`leave` for finalizers: when this was the last call of a closing engine, the
        release (which may wait for work in flight) runs on a thread of its own."""
        release = None
        with self._cond:  # held only for counter updates elsewhere, never across a call
            self._calls -= 1
            if self._calls == 0 and self.closing:
                release, self._release = self._release, None
                self._cond.notify_all()
        if release is not None:
            threading.Thread(target=release, name="tw-engine-release", daemon=True).start()

    def close(self, release, timeout):
        """Refuses new calls, waits up to ``timeout`` seconds for those in flight, then runs
        ``release`` (here, or later on the thread of the last call to return). Returns True
        when it ran here. Only the first close runs ``release``."""
        with self._cond:
            if self.closing:
                return False
            self.closing = True
            self._release = release
            self._cond.wait_for(lambda: self._calls == 0, timeout)
            if self._calls != 0:
                return False  # the last call to return frees it
            release, self._release = self._release, None
        if release is not None:
            release()
        return True


class GuardedLib:
    """The library's functions, each call counted by a :class:`CallGuard` (wrappers are made
    on first use and cached on the instance)."""

    def __init__(self, lib, guard):
        self._raw = lib
        self._guard = guard

    def __getattr__(self, name):
        fn = getattr(self._raw, name)
        guard = self._guard

        def call(*args):
            guard.enter()
            try:
                return fn(*args)
            finally:
                guard.leave()

        call.__name__ = name
        setattr(self, name, call)
        return call
