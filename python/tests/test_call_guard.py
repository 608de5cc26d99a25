"""The one call guard (tidewire._call_guard): every public method and property of each class
that uses a native handle is wrapped by the class decorator (found by introspection, so a new
method cannot be forgotten), and close() never frees a handle under a running call."""

import inspect
import threading
import time
import types

import pytest

import tidewire as tw
from tidewire import _call_guard
from tidewire._call_guard import CallGuard, closes, guard_mark, guarded
from tidewire.core.owned import Batch, Registration, StreamOp
from tidewire.core.scatter import ScatterOp
from tidewire.core.values import Segment
from tidewire.mooncake_store import native
from tidewire.mooncake_store.client import _RUN_BY_DUMMY, MooncakeDistributedStore

#: Every class whose methods use a native handle, and the method of each that closes it (None:
#: the object uses its engine's guard and closes nothing).
GUARDED = {
    tw.Engine: "close",
    Batch: None,
    StreamOp: None,
    ScatterOp: None,
    Segment: None,
    Registration: None,
    MooncakeDistributedStore: "close",
}


def public_members(cls):
    """``{name: attribute}`` of every public name of ``cls`` (inherited ones included), looked
    up without running descriptors."""
    return {name: inspect.getattr_static(cls, name) for name in dir(cls)
            if not name.startswith("_")}


@pytest.mark.parametrize("cls", list(GUARDED), ids=lambda c: c.__name__)
def test_every_public_callable_passes_through_the_guard(cls):
    closer = GUARDED[cls]
    members = public_members(cls)
    callables = {n: a for n, a in members.items()
                 if isinstance(a, (types.FunctionType, property, staticmethod, classmethod))}
    # Whatever else is public is plain data or a type, never something callable on an instance.
    for name, attr in members.items():
        if name not in callables:
            assert not callable(attr) or isinstance(attr, type), (cls.__name__, name)
    assert callables, cls.__name__
    for name, attr in callables.items():
        assert not isinstance(attr, (staticmethod, classmethod)), (cls.__name__, name)
        want = "closes" if name == closer else "counted"
        assert guard_mark(cls, name) == want, (cls.__name__, name, guard_mark(cls, name))


def test_the_store_client_guards_all_of_mooncakes_methods():
    names = set(public_members(MooncakeDistributedStore))
    # The calls the hand-kept list used to count, and those it left out, all go through it now.
    for name in ("put", "get", "batch_get_into", "get_tensor", "get_into_ranges", "remove_all",
                 "setup", "setup_dummy", "alloc_from_mem_pool", "get_hostname",
                 "get_replica_desc", "health_check"):
        assert name in names
        assert guard_mark(MooncakeDistributedStore, name) == "counted", name
    assert _RUN_BY_DUMMY <= names


def test_a_public_static_method_is_refused():
    with pytest.raises(TypeError, match="static or class method"):
        @guarded
        class Bad:
            @staticmethod
            def helper():
                return 1


@guarded
class _Handle:
    """A stand-in for a class with a native handle: ``work`` holds the handle until released."""

    def __init__(self):
        self._guard = CallGuard()
        self.handle = "open"
        self.events = []
        self.entered = threading.Event()
        self.go_on = threading.Event()

    def work(self):
        self.entered.set()
        self.go_on.wait(10)
        self.events.append(("work returned", self.handle))
        return self.handle

    @property
    def state(self):
        return self.handle

    @closes
    def close(self, timeout=10.0):
        def release():
            self.events.append(("freed", None))
            self.handle = "freed"

        return self._guard.close(release, timeout)


def test_close_waits_for_a_running_call():
    h = _Handle()
    t = threading.Thread(target=h.work)
    t.start()
    assert h.entered.wait(10)
    assert h._guard.calls == 1
    closer = threading.Thread(target=h.close)
    closer.start()
    time.sleep(0.2)
    assert h.events == []  # close waits
    h.go_on.set()
    t.join(10)
    closer.join(10)
    assert h.events == [("work returned", "open"), ("freed", None)]
    # Later calls run uncounted and find the handle gone.
    assert h.state == "freed" and h._guard.calls == 0


def test_a_call_outlasting_the_wait_frees_the_handle_itself():
    h = _Handle()
    t = threading.Thread(target=h.work)
    t.start()
    assert h.entered.wait(10)
    assert h.close(timeout=0.05) is False  # the call is still running: not freed here
    assert h.events == []
    h.go_on.set()
    t.join(10)
    assert h.events == [("work returned", "open"), ("freed", None)]


class _CountingGuard(CallGuard):
    __slots__ = ("entered",)

    def __init__(self):
        super().__init__()
        self.entered = 0

    def enter(self):
        self.entered += 1
        return super().enter()


def test_properties_are_counted_and_close_is_not():
    h = _Handle()
    h._guard = guard = _CountingGuard()
    assert h.state == "open"
    assert guard.entered == 1
    assert h.close() is True
    assert guard.entered == 1 and guard.closing


def test_store_close_never_frees_the_handle_under_a_running_call(monkeypatch):
    events = []
    inside = threading.Event()
    go_on = threading.Event()

    def slow_health_check(handle):
        inside.set()
        go_on.wait(10)
        events.append("health_check returned")
        return 0

    monkeypatch.setattr(native, "health_check", slow_health_check)
    monkeypatch.setattr(native, "free", lambda handle: events.append(f"freed {handle}"))
    s = MooncakeDistributedStore()
    s._h = "handle"  # a stand-in: the library is never reached
    t = threading.Thread(target=s.health_check)
    t.start()
    assert inside.wait(10)
    closer = threading.Thread(target=s.close)
    closer.start()
    time.sleep(0.2)
    assert events == []
    assert s.health_check() == 1  # started after close: no handle, not initialised
    go_on.set()
    t.join(10)
    closer.join(10)
    assert events == ["health_check returned", "freed handle"]


def test_engine_calls_after_close_raise_shutdown():
    e = tw.Engine(metadata="P2PHANDSHAKE", local_server_name="127.0.0.1")
    seg_name = e.name
    e.close()
    assert e.closed
    with pytest.raises(tw.Shutdown):
        e.open_segment(seg_name)
    with pytest.raises(tw.Shutdown):
        e.batch(1)
    assert e.reap() == 0


def test_module_documents_itself():
    assert _call_guard.__doc__ and "close" in _call_guard.__doc__
