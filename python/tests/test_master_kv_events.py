"""KV events from a real tidewire-master, read by a real ZMQ subscriber (pyzmq + msgpack).

The subscriber keeps a view of the keys from the stream alone, resuming through the master's
recovery routes (``/kv_events/snapshot``, ``/kv_events/replay``) as docs/master.md describes,
and the view is compared with the master's own key list (``/get_all_keys``) after a mixed
workload (puts, upserts in place and resized, removals, remove_by_regex, remove_all,
evictions), after a subscriber that joins late, one that misses messages, one that
follows a master whose queue overflows (dropped events: a sequence gap, then the snapshot),
and one that follows an HA failover (the new leader numbers above the old one: a gap, then its
snapshot).

Needs the pip packages ``pyzmq`` and ``msgpack`` (scripts/setup_mooncake_venv.sh installs
them)."""

import json
import socket
import time
import types
import urllib.error
import urllib.request

import pytest

from etcd_util import Etcd
from store_util import Master, Peer, connect, wait_until

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")

pytestmark = pytest.mark.usefixtures("store_master_built")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(master, path):
    """(status, body bytes) of GET path on the admin port."""
    url = f"http://127.0.0.1:{master.metrics_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def status(master):
    code, body = http_get(master, "/kv_events/status")
    assert code == 200, body
    return json.loads(body)


def master_keys(master):
    code, body = http_get(master, "/get_all_keys")
    assert code == 200
    return set(k for k in body.decode().split("\n") if k)


def settled_keys(master, *subs):
    """The master's keys once they stay put (the sweep may still evict) and every subscriber
    has caught up with them."""
    for _ in range(20):
        before = master_keys(master)
        for sub in subs:
            sub.settle()
        after = master_keys(master)
        if before == after:
            return after
        time.sleep(0.5)
    raise AssertionError("the master's keys kept changing")


class Subscriber:
    """Keeps the set of keys from the event stream, recovering from gaps."""

    def __init__(self, endpoint, master):
        self.master = master
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.connect(endpoint)
        self.view = {}
        self.last = None  # last sequence applied; None before the first snapshot
        self.pending = {}  # seq -> payload received ahead of `last + 1`
        self.snapshots = 0
        self.replays = 0
        self.replayed = 0
        self.events = 0
        self.drop_next = 0  # test hook: lose this many received messages

    def close(self):
        self.sock.close(0)
        self.ctx.term()

    def check_message(self, frames):
        assert len(frames) == 3, len(frames)
        assert frames[0] == b""
        assert len(frames[1]) == 8
        seq = int.from_bytes(frames[1], "big")
        ts, events, dp_rank = msgpack.unpackb(frames[2], raw=False)
        assert isinstance(ts, int) and ts > 1_600_000_000_000
        assert 1 <= len(events) <= 64
        assert dp_rank == 0
        return seq

    def apply(self, payload):
        ts, events, _ = msgpack.unpackb(payload, raw=False)
        for ev in events:
            self.events += 1
            kind = ev["event_type"]
            assert ev["timestamp"] == ts
            assert ev["backend_id"] == "pool-a"
            assert ev["tenant_id"] == "default"
            if kind == "cleared":
                assert ev["type"] == "AllBlocksCleared" and ev["medium"] is None
                self.view.clear()
                continue
            key = ev["object_key"]
            assert ev["medium"] in ("cpu", "disk")
            assert ev["seq_hashes"] == ev["block_hashes"]
            if kind == "stored":
                assert ev["type"] == "BlockStored"
                assert ev["parent_hash"] is None and ev["token_ids"] is None
                self.view[key] = ev["medium"]
            else:
                assert kind == "removed" and ev["type"] == "BlockRemoved"
                self.view.pop(key, None)

    def snapshot(self):
        """Step 2: the inventory as of its `seq`."""
        self.snapshots += 1
        shard, view, seq = 0, {}, None
        while shard is not None:
            code, body = http_get(self.master, f"/kv_events/snapshot?shard={shard}")
            assert code == 200, body
            page = msgpack.unpackb(body, raw=False)
            if seq is None:
                seq = page["seq"]
            for key, medium in page["keys"]:
                view[key] = medium
            shard = page["next"]
        self.view, self.last = view, seq
        self.pending = {s: p for s, p in self.pending.items() if s > seq}

    def replay(self, upto):
        """Fetches `last + 1 ..= upto`; False when the master says 410 (take the snapshot)."""
        self.replays += 1
        while self.last < upto:
            code, body = http_get(self.master, f"/kv_events/replay?from={self.last + 1}")
            reply = msgpack.unpackb(body, raw=False)
            if code == 410:
                return False
            assert code == 200, reply
            if not reply["batches"]:
                return self.last >= upto
            for seq, payload in reply["batches"]:
                assert seq == self.last + 1
                self.apply(payload)
                self.replayed += 1
                self.last = seq
        return True

    def advance(self):
        """Applies what is pending in order, recovering across gaps."""
        while self.pending:
            nxt = self.last + 1
            if nxt in self.pending:
                self.apply(self.pending.pop(nxt))
                self.last = nxt
                continue
            first = min(self.pending)
            if first <= self.last:
                del self.pending[first]
                continue
            if not self.replay(first - 1):
                self.snapshot()

    def pump(self, timeout=0.2):
        """Receives what arrives within `timeout`; returns the number of messages."""
        n = 0
        while self.sock.poll(int(timeout * 1000)):
            frames = self.sock.recv_multipart()
            seq = self.check_message(frames)
            n += 1
            if self.drop_next > 0:
                self.drop_next -= 1
                continue
            self.pending[seq] = frames[2]
            if self.last is not None:
                self.advance()
        return n

    def settle(self, timeout=30):
        """Catches up with everything the master has published (its status stays put)."""
        deadline = time.time() + timeout
        seen = None
        while time.time() < deadline:
            self.pump(0.2)
            st = status(self.master)
            if self.last is not None and self.last < st["last_seq"] and not self.pending:
                # The last messages never came (lost ones): fetch them.
                if not self.replay(st["last_seq"]):
                    self.snapshot()
            cur = (st["last_seq"], st["published_events"], st["dropped_events"])
            if self.last == st["last_seq"] and cur == seen:
                return st
            seen = cur
        raise AssertionError(f"subscriber did not catch up: last={self.last} status={st}")

    def start(self):
        time.sleep(0.3)  # the SUB's connection settles before the snapshot
        self.pump(0.05)
        self.snapshot()
        self.advance()


@pytest.fixture
def endpoint():
    return f"tcp://127.0.0.1:{free_port()}"


def kv_master(endpoint, *flags):
    return Master("--enable_kv_events", f"--kv_events_bind_endpoint={endpoint}",
                  "--kv_events_backend_id=pool-a", "--kv_events_block_size=16",
                  "--kv_events_model_name=m", *flags)


def test_status_is_off_without_the_flag():
    m = Master()
    try:
        assert status(m) == {"enabled": False, "published_batches": 0, "published_events": 0,
                             "dropped_events": 0, "skipped_unparsed_keys": 0,
                             "invalid_event_hashes": 0}
        assert http_get(m, "/kv_events/snapshot")[0] == 404
    finally:
        m.stop()


def test_a_subscriber_view_matches_the_master_after_a_mixed_workload(endpoint):
    m = kv_master(endpoint)
    # A 24 MiB segment: the 1 MiB puts below overflow it, so eviction removes objects.
    peer = Peer(m, "server", 24 << 20)
    sub = Subscriber(endpoint, m)
    late = None
    try:
        sub.start()
        s = connect(m)
        try:
            for i in range(200):
                assert s.put(f"a/{i}", b"x" * (100 + i)) == 0
            for i in range(0, 200, 3):
                assert s.upsert(f"a/{i}", b"y" * (100 + i)) == 0  # same size: in place
            for i in range(1, 200, 3):
                assert s.upsert(f"a/{i}", b"z" * 999) == 0  # resized
            assert s.put_batch([str(i) for i in range(1000, 1100)],
                               [b"h" * 64] * 100) == 0  # decimal keys: seq_hashes
            for i in range(0, 200, 7):
                assert s.remove(f"a/{i}") == 0
            assert s.remove_by_regex(r"^a/1\d$") > 0
            sub.settle()
            assert set(sub.view) == master_keys(m)

            # A subscriber that joins now starts from the inventory.
            late = Subscriber(endpoint, m)
            late.start()

            # Evictions: 40 x 1 MiB into 24 MiB.
            for i in range(40):
                assert s.put(f"big/{i}", b"e" * (1 << 20)) == 0
            wait_until(lambda: len([k for k in master_keys(m) if k.startswith("big/")]) < 40, 20)
            time.sleep(1.5)  # the sweep's eviction above the watermark, too
            keys = settled_keys(m, sub, late)
            assert len([k for k in keys if k.startswith("big/")]) < 40, "nothing was evicted"
            assert set(sub.view) == keys
            assert set(late.view) == keys
            assert all(v == "cpu" for v in sub.view.values())

            # A subscriber that misses messages gets them back from the replay buffer.
            late.drop_next = 3
            for i in range(300):
                assert s.put(f"c/{i}", b"c" * 10) == 0
            sub.settle()
            late.settle()
            assert late.replayed >= 3 and late.snapshots == 1, vars(late)
            assert set(late.view) == set(sub.view) == master_keys(m)

            # remove_all: one `removed` per object, then `cleared` (nothing is left).
            assert s.remove_all() > 0
            st = sub.settle()
            assert sub.view == {} and master_keys(m) == set()
            late.settle()
            assert late.view == {}
            assert st["dropped_events"] == 0
            assert st["published_events"] == sub.events
            assert sub.snapshots == 1, "no gap in the live stream"
            # After the clear the stream goes on.
            assert s.put("after", b"1") == 0
            sub.settle()
            assert set(sub.view) == {"after"} == master_keys(m)
        finally:
            s.close()
    finally:
        sub.close()
        if late:
            late.close()
        peer.close()
        m.stop()


def test_dropped_events_leave_a_gap_and_the_snapshot_recovers(endpoint):
    # A queue of 8 events: a batch of puts overflows it.
    m = kv_master(endpoint, "--kv_events_queue_capacity=8")
    peer = Peer(m, "server", 64 << 20)
    sub = Subscriber(endpoint, m)
    try:
        sub.start()
        s = connect(m)
        try:
            for round_ in range(20):
                keys = [f"d/{round_}/{i}" for i in range(500)]
                assert s.put_batch(keys, [b"v" * 16] * len(keys)) == 0
                if status(m)["dropped_events"] > 0:
                    break
            assert s.remove_by_regex(r"^d/0/") > 0
            st = sub.settle()
            assert st["dropped_events"] > 0, st
            assert sub.snapshots >= 2, "the gap sent the subscriber back to the snapshot"
            assert set(sub.view) == master_keys(m)
            # Replay cannot reach across the gap.
            code, body = http_get(m, "/kv_events/replay?from=1")
            assert code == 410, body
            # A later put still reaches the view.
            assert s.put("z", b"1") == 0
            sub.settle()
            assert set(sub.view) == master_keys(m)
        finally:
            s.close()
    finally:
        sub.close()
        peer.close()
        m.stop()


def leader_of(masters):
    """The master that says it leads (its /leader names itself), or None."""
    for m in masters:
        if m.proc.poll() is not None:
            continue
        code, body = http_get(m, "/leader")
        if code == 200 and json.loads(body).get("leader_address") == m.address:
            return m
    return None


def test_a_subscriber_follows_a_failover_to_the_new_leaders_inventory():
    etcd = Etcd()
    ends = [f"tcp://127.0.0.1:{free_port()}" for _ in range(2)]
    ha = ("--enable_ha=true", f"--etcd_endpoints={etcd.endpoint}", "--ha_lease_ttl=2",
          "--enable_oplog=true")
    masters = [kv_master(e, *ha) for e in ends]
    peer = sub = s = None
    try:
        assert wait_until(lambda: leader_of(masters) is not None, 20), "no leader"
        first = leader_of(masters)
        # Clients find the leader through etcd; the subscriber listens to both publishers
        # (only a leader publishes) and asks the leader's admin routes, as a router would.
        cluster = types.SimpleNamespace(address=f"etcd://{etcd.endpoint}",
                                        metadata="P2PHANDSHAKE")
        peer = Peer(cluster, "server", 64 << 20)
        sub = Subscriber(ends[0], first)
        sub.sock.connect(ends[1])
        sub.start()
        s = connect(cluster)
        for i in range(300):
            assert s.put(f"f/{i}", b"f" * 64) == 0
        for i in range(0, 300, 4):
            assert s.remove(f"f/{i}") == 0
        sub.settle()
        assert set(sub.view) == master_keys(first)
        old_last = sub.last

        first.stop()  # SIGKILL
        assert wait_until(lambda: leader_of(masters) is not None, 30), "no new leader"
        second = leader_of(masters)
        assert second is not first
        # The journal kept the objects; events go on from the new leader.
        assert wait_until(lambda: s.put("after-failover", b"a") == 0, 30)
        for i in range(1, 300, 4):
            assert s.remove(f"f/{i}") == 0
        for i in range(300, 400):
            assert s.put(f"f/{i}", b"g" * 64) == 0
        sub.master = second
        st = sub.settle()
        assert st["last_seq"] > old_last + 300, (st, old_last)
        assert sub.snapshots == 2, "the gap sent the subscriber to the new leader's inventory"
        keys = master_keys(second)
        assert len(keys) == 300 - 75 - 75 + 100 + 1
        assert set(sub.view) == keys
    finally:
        if s is not None:
            s.close()
        if sub is not None:
            sub.close()
        if peer is not None:
            peer.close()
        for m in masters:
            m.stop()
        etcd.close()
