"""Hostile row 10: a real Mooncake target, 4,096 requests in one batch, every 64th out of range.
Exactly the bad requests fail; every valid one completes with its bytes in place. (The Mooncake
server resets the connection after each rejection, so the valid requests queued behind a bad one
must be re-sent, with several rejections in flight at once.)"""

import ctypes

import pytest

import tidewire
from conftest import BACKGROUND, KiB, MiB, Side, random_bytes, sha256

N = 4096
LEN = 1 * KiB
EVERY = 64


@pytest.fixture(scope="module")
def target(mooncake_p2p):
    return Side(mooncake_p2p, N * LEN)


@pytest.mark.parametrize("op", ["write", "read"])
def test_every_64th_out_of_range_exactly_those_fail(target, op):
    data = random_bytes(N * LEN, 10)
    if op == "write":
        target.peer.fill(target.base, target.size, BACKGROUND)
        local = ctypes.create_string_buffer(data, N * LEN)
    else:
        target.peer.fill_random(target.base, target.size, 10)
        local = ctypes.create_string_buffer(N * LEN)
    bad = {i for i in range(N) if i % EVERY == EVERY - 1}
    opcode = tidewire.Opcode.WRITE if op == "write" else tidewire.Opcode.READ
    with tidewire.Engine(local_server_name="127.0.0.1", same_host=0, rdma="off") as e:
        reg = e.register(local, N * LEN)  # noqa: F841 (kept registered)
        seg = e.open_segment(target.peer.segment)
        reqs = []
        for i in range(N):
            remote = target.base + i * LEN
            if i in bad:
                remote = target.base + target.size + i * LEN  # past the registered buffer
            reqs.append(tidewire.Request(opcode, seg, ctypes.addressof(local) + i * LEN,
                                         remote, LEN))
        with e.batch(N) as b:
            b.submit(reqs)
            with pytest.raises(tidewire.TidewireError):
                b.wait(60)
            states = [b.status(i).state for i in range(N)]
        failed = {i for i, s in enumerate(states) if s == tidewire.TaskState.FAILED}
        waiting = [i for i, s in enumerate(states) if s == tidewire.TaskState.WAITING]
        assert not waiting
        assert failed == bad, "%d valid requests failed, %d bad ones did not" % (
            len(failed - bad), len(bad - failed))
    got = local.raw if op == "read" else None
    for i in range(N):
        if i in bad:
            continue
        want = data[i * LEN:(i + 1) * LEN]
        if op == "read":
            assert got[i * LEN:(i + 1) * LEN] == want, "task %d" % i
    if op == "write":
        expect = bytearray(data)
        for i in bad:
            expect[i * LEN:(i + 1) * LEN] = bytes([BACKGROUND]) * LEN
        assert target.peer.digest(target.base, target.size) == sha256(bytes(expect))
