"""Replica tasks (``create_copy_task``, ``create_move_task``, ``query_task``) and
``batch_replica_clear`` on tidewire's master and clients: success paths, bad input, a copy or
move to a target that vanished, and an object never left without a complete replica while its
replica moves back and forth under readers."""

import threading
import time

import pytest
import store_util as su
from store_util import Master, Peer, connect
from tidewire.store import ReplicateConfig, TaskStatus, TaskType



def _on(seg):
    c = ReplicateConfig()
    c.preferred_segments = [seg]
    return c


def _endpoints(s, key):
    return sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for d in s.get_replica_desc(key))


def _wait(s, tid, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        r, rc = s.query_task(tid)
        assert rc == 0 and r is not None, rc
        if r.status in (TaskStatus.SUCCESS, TaskStatus.FAILED) or time.monotonic() > deadline:
            return r
        time.sleep(0.1)


@pytest.fixture
def two():
    """A master (1 s lease) and two clients with segments."""
    m = Master("--default_kv_lease_ttl=1000")
    a = connect(m, segment=32 << 20)
    b = connect(m, segment=32 << 20)
    try:
        yield m, a, b
    finally:
        a.close()
        b.close()
        m.stop()


def test_copy_adds_a_replica_with_the_bytes(two):
    _, a, b = two
    ha, hb = a.get_hostname(), b.get_hostname()
    val = bytes(range(256)) * 40
    assert a.put("c1", val, _on(ha)) == 0
    assert _endpoints(a, "c1") == [ha]
    tid, rc = b.create_copy_task("c1", [hb])
    assert rc == 0 and isinstance(tid, tuple) and len(tid) == 2 and tid != (0, 0)
    r = _wait(b, tid)
    assert r.status == TaskStatus.SUCCESS, r
    assert r.type == TaskType.REPLICA_COPY and r.id == tid
    assert r.message == "Task completed successfully"
    assert r.created_at_ms_epoch <= r.last_updated_at_ms_epoch
    assert sorted(_endpoints(a, "c1")) == sorted([ha, hb])
    # The new replica holds the bytes: drop the source's, then read.
    time.sleep(1.1)
    assert a.batch_replica_clear(["c1"], ha) == ["c1"]
    assert _endpoints(a, "c1") == [hb]
    assert a.get("c1") == val
    # A target holding a replica already: nothing to do, success.
    tid, rc = a.create_copy_task("c1", [hb])
    assert rc == 0 and _wait(a, tid).status == TaskStatus.SUCCESS
    assert _endpoints(a, "c1") == [hb]


def test_move_moves_the_replica(two):
    _, a, b = two
    ha, hb = a.get_hostname(), b.get_hostname()
    val = b"m" * 5000 + b"end"
    assert a.put("mv", val, _on(ha)) == 0
    tid, rc = a.create_move_task("mv", ha, hb)
    assert rc == 0
    r = _wait(a, tid)
    assert r.status == TaskStatus.SUCCESS and r.type == TaskType.REPLICA_MOVE, r
    assert _endpoints(a, "mv") == [hb]
    assert a.get("mv") == val and b.get("mv") == val
    # And back again.
    tid, rc = b.create_move_task("mv", hb, ha)
    assert rc == 0 and _wait(b, tid).status == TaskStatus.SUCCESS
    assert _endpoints(a, "mv") == [ha] and b.get("mv") == val


def test_bad_input(two):
    m, a, b = two
    ha, hb = a.get_hostname(), b.get_hostname()
    assert a.put("bi", b"v" * 100, _on(ha)) == 0
    none = (0, 0)
    assert a.create_copy_task("bi", []) == (none, -600)
    assert a.create_copy_task("nosuch", [hb]) == (none, -704)
    assert a.create_copy_task("", [hb]) == (none, -704)
    assert a.create_copy_task("bi", ["127.0.0.1:1"]) == (none, -600)
    assert a.create_copy_task("bi", [hb, ""]) == (none, -600)
    assert a.create_move_task("nosuch", ha, hb) == (none, -704)
    assert a.create_move_task("bi", ha, ha) == (none, -600)
    assert a.create_move_task("bi", hb, ha) == (none, -600)  # no replica on hb
    assert a.create_move_task("bi", ha, "127.0.0.1:1") == (none, -600)
    assert a.query_task((1, 2)) == (None, -1400)
    assert a.query_task((0, 0)) == (None, -1400)
    with pytest.raises(TypeError):
        a.query_task("x")
    with pytest.raises(TypeError):
        a.query_task((1, 2, 3))
    with pytest.raises(TypeError):
        a.query_task((-1, 2))
    with pytest.raises(TypeError):
        a.create_copy_task("bi", hb)
    with pytest.raises(TypeError):
        a.create_move_task("bi", ha, None)
    # A closed client answers as one never set up.
    c = connect(m)
    c.close()
    assert c.create_copy_task("bi", [hb]) == (none, -600)
    assert c.create_move_task("bi", ha, hb) == (none, -600)
    assert c.query_task((1, 2)) == (None, -600)
    assert c.batch_replica_clear(["bi"]) == []
    # Nothing changed.
    assert _endpoints(a, "bi") == [ha]


def test_unmounted_target_is_refused(two):
    m, a, _ = two
    ha = a.get_hostname()
    gone = connect(m, segment=16 << 20)
    hg = gone.get_hostname()
    assert a.put("um", b"u" * 64, _on(ha)) == 0
    gone.close()
    assert a.create_copy_task("um", [hg]) == ((0, 0), -600)
    assert a.create_move_task("um", ha, hg) == ((0, 0), -600)
    assert _endpoints(a, "um") == [ha]


@pytest.mark.parametrize("kind", ["copy", "move"])
def test_target_that_vanished_fails_cleanly(kind):
    """The target's process dies (its segment stays mounted until its heartbeats are missed):
    the task fails with the transfer's code, and the object keeps its replica and bytes."""
    m = Master("--default_kv_lease_ttl=1000")
    a = connect(m, segment=32 << 20)
    peer = Peer(m, "server", 32 << 20)
    try:
        ha, hp = a.get_hostname(), peer.ready["hostname"]
        val = b"vanish" * 1000
        assert a.put("vk", val, _on(ha)) == 0
        peer.kill()
        if kind == "copy":
            tid, rc = a.create_copy_task("vk", [hp])
        else:
            tid, rc = a.create_move_task("vk", ha, hp)
        assert rc == 0
        r = _wait(a, tid)
        assert r.status == TaskStatus.FAILED, r
        assert "-800" in r.message or "-101" in r.message, r.message
        assert _endpoints(a, "vk") == [ha]
        assert a.get("vk") == val
        # The reserved space went back: the key can be copied elsewhere later, and a put of
        # the whole segment's worth still fits on the survivor.
        assert a.is_exist("vk") == 1
    finally:
        peer.kill()
        a.close()
        m.stop()


def test_moves_never_leave_the_object_without_a_replica(two):
    _, a, b = two
    ha, hb = a.get_hostname(), b.get_hostname()
    val = bytes(range(251)) * 200
    assert a.put("mm", val, _on(ha)) == 0
    stop = threading.Event()
    bad = []
    reads = [0]

    def reader():
        while not stop.is_set():
            got = b.get("mm")
            reads[0] += 1
            if got != val:
                bad.append(len(got))

    t = threading.Thread(target=reader)
    t.start()
    try:
        where = ha
        for _ in range(4):
            to = hb if where == ha else ha
            tid, rc = a.create_move_task("mm", where, to)
            assert rc == 0
            r = _wait(a, tid)
            assert r.status == TaskStatus.SUCCESS, r
            assert _endpoints(a, "mm") == [to]
            where = to
    finally:
        stop.set()
        t.join(30)
    assert not bad, bad[:5]
    assert reads[0] > 0


def test_batch_replica_clear(two):
    _, a, b = two
    ha, hb = a.get_hostname(), b.get_hostname()
    two_replicas = ReplicateConfig()
    two_replicas.replica_num = 2
    assert a.put("r2", b"2" * 300, two_replicas) == 0
    assert a.put("r1", b"1" * 300, _on(ha)) == 0
    assert a.put("leased", b"l" * 30, _on(ha)) == 0
    assert sorted(_endpoints(a, "r2")) == sorted([ha, hb])
    time.sleep(1.1)  # get_replica_desc granted leases
    assert a.is_exist("leased") == 1  # a fresh lease
    got = a.batch_replica_clear(["r2", "r1", "leased", "nosuch", ""], hb)
    assert got == ["r2"]
    assert _endpoints(a, "r2") == [ha] and a.get("r1") == b"1" * 300
    time.sleep(1.1)
    # The last replica cleared on its segment: the object goes.
    assert a.batch_replica_clear(["r2"], ha) == ["r2"]
    assert a.is_exist("r2") == 0
    # A segment not mounted clears nothing.
    assert a.batch_replica_clear(["r1"], "127.0.0.1:1") == []
    # Every replica: the whole object, keys in the order asked.
    assert a.batch_replica_clear(["leased", "r1", "r1"]) == ["leased", "r1"]
    assert a.is_exist("r1") == 0 and a.is_exist("leased") == 0
    # A key being written is left alone.
    assert a.batch_put_session_start(["w"], [10]) == [0]
    assert a.batch_replica_clear(["w"]) == []
    assert a.batch_put_session_revoke(["w"]) == [0]
    assert a.batch_replica_clear([]) == []
    with pytest.raises(TypeError):
        a.batch_replica_clear("r1")


def test_tasks_of_a_client_that_closes_fail(two):
    m, a, _ = two
    c = connect(m, segment=16 << 20)
    hc = c.get_hostname()
    assert c.put("cc", b"c" * 100, _on(hc)) == 0
    tid, rc = a.create_copy_task("cc", [a.get_hostname()])
    assert rc == 0
    c.close()
    r = _wait(a, tid)
    # It ran before the close, or the close failed it; either way it finished.
    assert r.status in (TaskStatus.SUCCESS, TaskStatus.FAILED), r
    assert su.wait_until(lambda: a.query_task(tid)[0].status != TaskStatus.PENDING, 5)
