"""The one call guard: a native handle is never freed under a running call.

Every class whose methods use a native handle (the pythonic :class:`~tidewire.Engine` and the
objects it hands out, and :class:`~tidewire.store.MooncakeDistributedStore`) is decorated with
:func:`guarded`. Each instance holds a :class:`CallGuard` in its ``_guard`` attribute (objects
made by an engine share the engine's). The decorator wraps every public method and the getter
of every public property: the call counts itself in before it starts and out when it returns.
The one method marked :func:`closes` (``close``) is wrapped without being counted, since it
waits for the others: it marks the guard closing, waits for the calls in flight and frees the
handle once none is left; if they outlast the wait, the last of them to return frees it.

A call that starts once the guard is closing runs uncounted. It must not use the handle, and
does not: the classes read the handle through an accessor that fails once the guard is
closing (the engine raises :class:`~tidewire.Shutdown`; the store finds no handle and returns
its error code), so a closed object behaves exactly as it did before the close, with no
handle under it.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Optional, Type, TypeVar

__all__ = ["CallGuard", "guarded", "closes", "guard_mark", "GUARD_MARK"]

_C = TypeVar("_C", bound=type)
_F = TypeVar("_F", bound=Callable[..., Any])

#: Attribute set on each wrapper :func:`guarded` makes: ``"counted"`` for the methods and
#: property getters whose calls are counted, ``"closes"`` for the method marked :func:`closes`.
GUARD_MARK = "__tidewire_guard__"
#: Attribute :func:`closes` sets on the method it marks.
_CLOSES_MARK = "__tidewire_closes_guard__"


class CallGuard:
    """A count of calls in flight and a closing flag, under one lock."""

    __slots__ = ("_cond", "_calls", "closing", "_release")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._calls = 0
        self.closing = False
        # Set by close(): frees the handle; run once, by close or by the last call to return.
        self._release: Optional[Callable[[], None]] = None

    @property
    def calls(self) -> int:
        """The calls in flight now."""
        return self._calls

    def enter(self) -> bool:
        """Counts a call in and returns True; returns False, counting nothing, once the guard
        is closing (the call then must not use the handle)."""
        with self._cond:
            if self.closing:
                return False
            self._calls += 1
            return True

    def leave(self) -> None:
        """Counts a call out; the last call out of a closing guard runs the release that
        :meth:`close` left to it."""
        release = None
        with self._cond:
            self._calls -= 1
            if self._calls == 0 and self.closing:
                release, self._release = self._release, None
                self._cond.notify_all()
        if release is not None:
            release()

    def try_enter(self) -> bool:
        """:meth:`enter` for finalizers: False, without waiting, when the lock is taken (this
        thread may hold it below the finalizer) or the guard is closing."""
        if not self._cond.acquire(blocking=False):
            return False
        try:
            if self.closing:
                return False
            self._calls += 1
            return True
        finally:
            self._cond.release()

    def leave_nowait(self) -> None:
        """:meth:`leave` for finalizers: when this was the last call of a closing guard, the
        release (which may wait for work in flight) runs on a thread of its own."""
        release = None
        with self._cond:  # held only for counter updates elsewhere, never across a call
            self._calls -= 1
            if self._calls == 0 and self.closing:
                release, self._release = self._release, None
                self._cond.notify_all()
        if release is not None:
            threading.Thread(target=release, name="tw-engine-release", daemon=True).start()

    def counted(self) -> "_Counted":
        """A context manager counting the block as one call (for constructors, which the
        decorator does not wrap); it raises nothing, like :meth:`enter`."""
        return _Counted(self)

    def close(self, release: Callable[[], None], timeout: Optional[float]) -> bool:
        """Refuses to count new calls, waits up to ``timeout`` seconds for those in flight,
        then runs ``release`` (here, or later on the thread of the last call to return).
        Returns True when it ran here. Only the first close runs ``release``."""
        with self._cond:
            if self.closing:
                return False
            self.closing = True
            self._release = release
            self._cond.wait_for(lambda: self._calls == 0, timeout)
            if self._calls != 0:
                return False  # the last call to return frees it
            run, self._release = self._release, None
        if run is not None:
            run()
        return True


class _Counted:
    """The block of :meth:`CallGuard.counted`."""

    __slots__ = ("_guard", "_in")

    def __init__(self, guard: CallGuard) -> None:
        self._guard = guard
        self._in = False

    def __enter__(self) -> bool:
        self._in = self._guard.enter()
        return self._in

    def __exit__(self, *exc: object) -> None:
        if self._in:
            self._guard.leave()


def closes(fn: _F) -> _F:
    """Marks the method that closes the instance's guard: :func:`guarded` wraps it uncounted
    (it waits for the counted calls, so counting itself would make it wait for itself)."""
    setattr(fn, _CLOSES_MARK, True)
    return fn


def _counted_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        guard: CallGuard = self._guard
        if not guard.enter():
            return fn(self, *args, **kwargs)  # closing: the method finds no handle
        try:
            return fn(self, *args, **kwargs)
        finally:
            guard.leave()

    setattr(call, GUARD_MARK, "counted")
    return call


def _closing_method(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(self, *args, **kwargs)

    setattr(call, GUARD_MARK, "closes")
    return call


def guarded(cls: _C) -> _C:
    """Class decorator: wraps every public method (functions, including inherited ones) and
    the getter of every public property of ``cls`` in the instance's :class:`CallGuard`
    (``self._guard``). Names starting with ``_`` are left alone: dunders run through the public
    methods (``__exit__`` calls ``close``), and private helpers run inside a public call."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = None
        for klass in cls.__mro__:
            if name in vars(klass):
                attr = vars(klass)[name]
                break
        if isinstance(attr, property):
            fget = attr.fget
            if fget is not None and getattr(fget, GUARD_MARK, None) is None:
                setattr(cls, name, property(_counted_method(fget), attr.fset, attr.fdel,
                                            attr.__doc__))
        elif isinstance(attr, (staticmethod, classmethod)):
            raise TypeError(f"{cls.__name__}.{name}: a public static or class method cannot "
                            "be guarded (it has no instance); make it private or a function")
        elif callable(attr) and not isinstance(attr, type):
            if getattr(attr, GUARD_MARK, None) is not None:
                continue  # wrapped already (inherited from a guarded class)
            if getattr(attr, _CLOSES_MARK, False):
                setattr(cls, name, _closing_method(attr))
            else:
                setattr(cls, name, _counted_method(attr))
    return cls


def guard_mark(cls: Type[Any], name: str) -> Optional[str]:
    """How :func:`guarded` wrapped ``cls.name``: ``"counted"``, ``"closes"``, or None."""
    attr = None
    for klass in cls.__mro__:
        if name in vars(klass):
            attr = vars(klass)[name]
            break
    if isinstance(attr, property):
        attr = attr.fget
    mark = getattr(attr, GUARD_MARK, None)
    return mark if isinstance(mark, str) else None
