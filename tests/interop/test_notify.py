"""Notifications attached to a WRITE, both directions: Mooncake transfer_sync(..., notify)
→ tidewire get_notifies(), and tidewire transfer_sync(..., notify=TransferNotify) → Mooncake."""

import pytest

from conftest import BACKGROUND, KiB, MiB, Side, random_bytes, sha256, wait_until

BUF = 1 * MiB
DELIVERY_S = 10

MESSAGES = {
    "plain": ("kv-ready", "layer=3 blocks=17"),
    "json-specials": ('name "quoted" \\ slash', '{"a": [1, 2]}\n\ttab \u0001 ctl'),
    "unicode": ("\u00fcber-\u65e5\u672c", "\u2603 snow \U0001F680 rocket"),
    "empty-msg": ("empty", ""),
    "long": ("long", "x" * (16 * KiB) + "end"),
}


@pytest.fixture(scope="module")
def sides(tidewire_p2p, mooncake_p2p):
    return {"tw": Side(tidewire_p2p, BUF), "mc": Side(mooncake_p2p, BUF)}


@pytest.fixture(params=["tw->mc", "mc->tw"])
def direction(request, sides):
    a, b = request.param.split("->")
    # Start from an empty queue on the receiving side.
    sides[b].peer.get_notifies()
    return sides[a], sides[b]


def _collect(peer, want, timeout=DELIVERY_S):
    got = []

    def enough():
        got.extend(peer.get_notifies())
        return len(got) >= want

    wait_until(enough, timeout, 0.02)
    return got


@pytest.mark.parametrize("kind", list(MESSAGES))
def test_notify_with_write(direction, kind):
    sender, receiver = direction
    name, msg = MESSAGES[kind]
    size = 100 * KiB + 1
    sender.peer.fill_random(sender.base, size, 21)
    receiver.peer.fill(receiver.base, BUF, BACKGROUND)
    rc = sender.peer.notify(receiver.peer.segment, name, msg, sender.base,
                            receiver.base + 4 * KiB, size)
    assert rc == 0, "transfer_sync with notify returned %r" % rc
    assert receiver.peer.digest(receiver.base + 4 * KiB, size) == sha256(
        random_bytes(size, 21)), "the data written with the notify is wrong"
    got = _collect(receiver.peer, 1)
    assert got == [(name, msg)], "%s received %r, expected [%r]" % (
        receiver.peer, got, (name, msg))


def test_notifies_in_order(direction):
    sender, receiver = direction
    sent = [("seq", "message %d" % i) for i in range(8)]
    for i, (name, msg) in enumerate(sent):
        rc = sender.peer.notify(receiver.peer.segment, name, msg, sender.base,
                                receiver.base + i * 128, 128)
        assert rc == 0
    got = _collect(receiver.peer, len(sent))
    assert got == sent
    # The queue is drained: nothing more arrives.
    assert receiver.peer.get_notifies() == []
