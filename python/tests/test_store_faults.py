"""The Store under faults, each a regression test of a defect that lost data or space: a reader
killed mid-read, concurrent upserts of one key, a replica owner that died, a reader whose read
outlives its lease, and a client that misses heartbeats (SIGSTOP) but comes back."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from conftest import REPO, MBuf
from store_util import Master, Peer, connect, wait_until
from tidewire.store import ReplicateConfig

MiB = 1 << 20

READER = textwrap.dedent("""
    import sys
    from conftest import MBuf
    from tidewire.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", sys.argv[1]) == 0
    buf = MBuf(64 << 20)
    print("reading", flush=True)
    while True:
        s.get_into("big", buf.addr, buf.size)
""")


def _env():
    env = dict(os.environ)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python"), here]
                                        + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def test_a_reader_killed_inside_get_into_does_not_pin_its_object():
    """Regression: the master counted a reader at every get and uncounted it only at the
    client's ReadDone, so a reader SIGKILLed mid-read left its object unevictable forever."""
    m = Master("--default_kv_lease_ttl=1500", "--client_ttl=30")
    owner = connect(m, segment=256 * MiB)
    reader = None
    try:
        assert owner.put("big", b"\x5a" * (64 * MiB)) == 0
        reader = subprocess.Popen([sys.executable, "-c", READER, m.address], env=_env(),
                                  stdout=subprocess.PIPE, text=True)
        assert reader.stdout.readline().strip() == "reading"
        time.sleep(0.5)  # several reads in flight and done; one in flight when killed
        reader.send_signal(signal.SIGKILL)
        reader.wait(10)
        # Past the lease and the heartbeat grace: the dead reader's hold is over.
        time.sleep(3.5)
        one = b"\x01" * MiB
        codes = [owner.put(f"fill{i}", one) for i in range(600)]
        assert codes.count(0) >= 550, sorted(set(codes))
        assert owner.get_size("big") == -704, "the killed reader still pins the 64 MiB object"
    finally:
        if reader and reader.poll() is None:
            reader.kill()
        owner.close()
        m.stop()


def test_concurrent_upserts_of_one_key_give_their_space_back():
    """Regression: 2 threads x 200 upserts of one key pre-empted each other; the loser's End got
    -601 and its buffer stayed allocated for put_start_release_timeout (600 s)."""
    m = Master("--default_kv_lease_ttl=200")
    s = connect(m, segment=64 * MiB)
    try:
        codes = []

        def upserts(t):
            v = bytes([t]) * MiB
            for _ in range(200):
                codes.append(s.upsert("hot", v))

        ts = [threading.Thread(target=upserts, args=(t,)) for t in (1, 2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        assert set(codes) <= {0, -601, -703}, sorted(set(codes))
        assert -200 not in codes
        assert s.get("hot") in (b"\x01" * MiB, b"\x02" * MiB)
        time.sleep(0.3)
        assert s.remove_all(True) >= 1
        # The whole segment is usable again at once.
        fits = sum(s.put(f"after{i}", b"\x03" * MiB) == 0 for i in range(56))
        assert fits == 56, f"only {fits} MiB fit after remove_all"
    finally:
        s.close()
        m.stop()


def test_replicas_serve_when_one_owner_died():
    """Regression: with replica_num=2 and one owner dead (not yet dropped by the master), gets
    took the first replica and returned b'' on -800, and new puts kept landing on the dead
    segment. Now a failed read tries the next replica, and the failed segment is reported and
    skipped for placements."""
    m = Master("--client_ttl=60", "--default_kv_lease_ttl=200")
    a, b = Peer(m), Peer(m)
    s = connect(m)
    two = ReplicateConfig()
    two.replica_num = 2
    try:
        vals = {f"r{i}": bytes([i % 251]) * (64 << 10) for i in range(60)}
        for k, v in vals.items():
            assert s.put(k, v, two) == 0
        a.kill()
        got = [s.get(k) == v for k, v in vals.items()]
        assert all(got), f"{got.count(False)} of 60 gets failed with a live replica"
        buf = MBuf(64 << 10)
        try:
            keys = list(vals)
            rc = s.batch_get_into(keys, [buf.addr] * 60, [buf.size] * 60)
            assert rc == [64 << 10] * 60, sorted(set(rc))
        finally:
            buf.close()
        codes = [s.put(f"new{i}", b"n" * 4096) for i in range(80)]
        assert codes == [0] * 80, f"{80 - codes.count(0)} of 80 puts failed: {sorted(set(codes))}"
        assert all(s.get(f"new{i}") == b"n" * 4096 for i in range(80))
    finally:
        s.close()
        a.kill()
        b.close()
        m.stop()


def test_a_read_that_outlives_its_lease_still_succeeds():
    """Mooncake fails whole batches with -707 when the transfer outlasts the lease (#3076,
    #4239). Here the read hold lasts while the reader's heartbeats arrive: a 1 ms lease still
    gives a 32 MiB read over TCP its bytes, intact."""
    m = Master("--default_kv_lease_ttl=1")
    peer = Peer(m)
    s = connect(m)
    buf = MBuf(32 * MiB)
    try:
        time.sleep(1.2)  # a heartbeat or two on record
        value = bytes(range(256)) * (128 * 1024)
        assert s.upsert("slow", value) == 0
        assert s.get_into("slow", buf.addr, buf.size) == len(value)
        assert buf.get(0, len(value)) == value
    finally:
        buf.close()
        s.close()
        peer.close()
        m.stop()


def test_a_client_that_misses_heartbeats_keeps_its_objects_within_the_grace():
    """Mooncake unmounts a client's segments at the first missed client_ttl (#2953, #3688), so a
    busy process loses every object it held. Here a stopped owner (SIGSTOP past its TTL) that
    resumes within the grace keeps them; one that stays silent past TTL + grace loses them."""
    m = Master("--client_ttl=1", "--client_grace_sec=4")
    owner = Peer(m)
    s = connect(m)
    try:
        for i in range(20):
            assert s.put(f"g{i}", bytes([i]) * 1000) == 0
        owner.proc.send_signal(signal.SIGSTOP)
        time.sleep(2.5)  # past client_ttl, within the grace
        owner.proc.send_signal(signal.SIGCONT)
        time.sleep(1.5)
        assert all(s.get(f"g{i}") == bytes([i]) * 1000 for i in range(20)), "objects lost"
        owner.proc.send_signal(signal.SIGSTOP)
        assert wait_until(lambda: s.is_exist("g0") == 0, 15), "kept past TTL + grace"
        owner.proc.send_signal(signal.SIGCONT)
    finally:
        s.close()
        owner.kill()
        m.stop()
