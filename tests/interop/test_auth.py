"""Peer authentication against the real Mooncake engine: a tidewire engine with TW_AUTH_KEY
(in its own process, so its log can be read) refuses Mooncake peers, whether they come through
the P2P handshake or, with the descriptor public on a metadata server, straight to the data
port; and Mooncake refuses the keyed tidewire's first bytes just as fast. No byte moves either
way, and nothing hangs. Without a key (every other interop test) the wire is unchanged."""

import time

import pytest

from conftest import (BACKGROUND, Closers, KiB, MetadataServer, ProcessPeer, Side, child_env,
                      sha256, wait_until)

BUF = 256 * KiB
KEY = "interop-auth-key"
DEADLINE_S = 10


class Pair(Closers):
    def __init__(self, metadata):
        super().__init__()
        try:
            url = "P2PHANDSHAKE"
            if metadata == "http":
                url = self.opened(MetadataServer("ours")).url
            names = {"tw": "tw-keyed", "mc": "mc-plain"} if metadata == "http" else {}
            self.mc = self.opened(ProcessPeer("mooncake-plain", metadata=url,
                                              name=names.get("mc")))
            self.tw = self.opened(ProcessPeer(
                "tidewire-keyed", metadata=url, name=names.get("tw"), impl="tidewire",
                env=child_env(TW_AUTH_KEY=KEY, MC_TCP_BIND_ADDRESS="127.0.0.1")))
            self.mc_side = Side(self.mc, BUF)
            self.tw_side = Side(self.tw, BUF)
        except BaseException:
            self.close()
            raise


@pytest.fixture(scope="module", params=["p2p", "http"])
def pair(request):
    p = Pair(request.param)
    yield p
    p.close()


def _untouched(side):
    return side.peer.digest(side.base, side.size) == sha256(bytes([BACKGROUND]) * side.size)


@pytest.mark.parametrize("op", ["write", "read"])
def test_mooncake_is_refused_by_a_keyed_tidewire(pair, op):
    mc, tw = pair.mc_side, pair.tw_side
    mc.peer.fill_random(mc.base, mc.size, 5)
    fn = mc.peer.write if op == "write" else mc.peer.read
    t0 = time.monotonic()
    rc = fn(tw.peer.segment, mc.base, tw.base, 4 * KiB)
    assert rc != 0, "a keyless Mooncake %s succeeded" % op
    assert time.monotonic() - t0 < DEADLINE_S
    assert _untouched(tw), "the keyed target's memory changed"
    assert wait_until(lambda: "peer did not authenticate (auth_key is set)" in
                      tw.peer.log_tail(200), 5), tw.peer.log_tail()


@pytest.mark.parametrize("op", ["write", "read"])
def test_keyed_tidewire_is_refused_by_mooncake(pair, op):
    mc, tw = pair.mc_side, pair.tw_side
    mc.peer.fill(mc.base, mc.size, BACKGROUND)
    tw.peer.fill_random(tw.base, tw.size, 6)
    fn = tw.peer.write if op == "write" else tw.peer.read
    t0 = time.monotonic()
    rc = fn(mc.peer.segment, tw.base, mc.base, 4 * KiB)
    assert rc != 0, "a keyed tidewire %s to Mooncake succeeded" % op
    assert time.monotonic() - t0 < DEADLINE_S
    assert _untouched(mc), "Mooncake's memory changed"
    assert wait_until(lambda: "is auth_key set on both sides?" in tw.peer.log_tail(200), 5), (
        tw.peer.log_tail())
