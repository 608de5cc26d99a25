"""Addresses the target has not registered are refused in both directions, nothing outside the
registered memory is touched, and both engines keep working afterwards."""

import time

import pytest

from conftest import (BACKGROUND, KiB, MiB, Side, TidewirePeer, random_bytes, sha256,
                      verified_transfer)

BUF = 1 * MiB
REJECT_DEADLINE_S = 10


@pytest.fixture(scope="module")
def sides(tidewire_p2p, mooncake_p2p):
    return {"tw": Side(tidewire_p2p, BUF), "mc": Side(mooncake_p2p, BUF)}


@pytest.fixture(params=["tw->mc", "mc->tw"])
def direction(request, sides):
    a, b = request.param.split("->")
    return sides[a], sides[b]


def _attempts(initiator):
    """Tries allowed for the first valid transfer after a rejection.

    Mooncake's own TCP client (wheel 0.3.13.post1) fails one request instantly, without
    touching the network, after every few refused requests to the same peer: the same
    sequence between two Mooncake engines (4 rejected requests, then a valid READ) gives -1
    too, and the request after it succeeds. So a Mooncake initiator gets a second try; a
    tidewire initiator gets none.
    """
    return 1 if isinstance(initiator.peer, TidewirePeer) else 3


def _bad_ranges(target):
    return {
        # Starts inside the registered buffer, ends 3996 bytes past it.
        "straddles-end": (target.base + target.size - 100, 4 * KiB),
        # One byte past the end.
        "just-past-end": (target.base + target.size, 1),
        # Far away from anything registered.
        "unregistered": (0x10000, 128),
    }


@pytest.mark.parametrize("op", ["write", "read"])
@pytest.mark.parametrize("case", ["straddles-end", "just-past-end", "unregistered"])
def test_rejected_then_recovers(direction, op, case):
    initiator, target = direction
    remote, length = _bad_ranges(target)[case]
    local = initiator.base + 64 * KiB
    # Known contents on both sides, to prove that nothing was written.
    initiator.peer.fill_random(initiator.base, initiator.size, 11)
    target.peer.fill(target.base, target.size, BACKGROUND)
    fn = initiator.peer.write if op == "write" else initiator.peer.read
    t0 = time.monotonic()
    rc = fn(target.peer.segment, local, remote, length)
    elapsed = time.monotonic() - t0
    assert rc == -1, "%s of [0x%x, +%d) on %s returned %r, expected -1%s" % (
        op, remote, length, target.peer, rc, target.peer.log_tail())
    assert elapsed < REJECT_DEADLINE_S, "rejection took %.1fs" % elapsed
    assert target.peer.digest(target.base, target.size) == sha256(
        bytes([BACKGROUND]) * target.size), "the target's registered memory changed"
    assert initiator.peer.digest(initiator.base, initiator.size) == sha256(
        random_bytes(initiator.size, 11)), "the initiator's buffer changed"
    # Both engines still work, on the same pair of peers, in both directions.
    verified_transfer(initiator, target, op, [(4 * KiB, 8 * KiB, 200 * KiB)], seed=12,
                      attempts=_attempts(initiator))
    verified_transfer(target, initiator, op, [(4 * KiB, 8 * KiB, 200 * KiB)], seed=13,
                      attempts=_attempts(target))


@pytest.mark.parametrize("op", ["write", "read"])
def test_batch_with_one_bad_entry(direction, op):
    """One bad entry fails the whole batch (-1); the good entries do not make it succeed."""
    initiator, target = direction
    fn = initiator.peer.batch_write if op == "write" else initiator.peer.batch_read
    locals_ = [initiator.base + i * 64 * KiB for i in range(4)]
    remotes = [target.base + i * 64 * KiB for i in range(4)]
    lengths = [32 * KiB] * 4
    remotes[2] = target.base + target.size - 16  # straddles the end
    initiator.peer.fill_random(initiator.base, initiator.size, 16)
    target.peer.fill(target.base, target.size, BACKGROUND)
    t0 = time.monotonic()
    rc = fn(target.peer.segment, locals_, remotes, lengths)
    assert rc == -1, "batch %s with a bad entry returned %r" % (op, rc)
    assert time.monotonic() - t0 < REJECT_DEADLINE_S
    if op == "write":
        # The bad entry's first 16 bytes are inside the buffer: they must not be written.
        assert target.peer.digest(target.base + target.size - 16, 16) == sha256(
            bytes([BACKGROUND]) * 16), "a rejected entry wrote into the target"
    verified_transfer(initiator, target, op,
                      [(i * 64 * KiB, i * 64 * KiB, 32 * KiB) for i in range(4)], seed=14,
                      batch=True, attempts=_attempts(initiator))


def test_unknown_segment_then_recovers(sides):
    """A target name nobody serves fails (-1) in bounded time; the engine keeps working."""
    tw, mc = sides["tw"], sides["mc"]
    t0 = time.monotonic()
    rc = tw.peer.write("127.0.0.1:1", tw.base, 0x10000, 128)
    assert rc == -1
    assert time.monotonic() - t0 < REJECT_DEADLINE_S
    verified_transfer(tw, mc, "write", [(0, 0, 64 * KiB)], seed=15)
