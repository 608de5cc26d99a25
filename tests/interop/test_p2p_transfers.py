"""READ and WRITE between tidewire and a real Mooncake engine (P2PHANDSHAKE), both directions,
single requests and batches, every destination byte verified."""

import random

import pytest

from conftest import KiB, MiB, ProcessPeer, Side, child_env, verified_transfer

GUARD = 8 * KiB
BUF = 64 * MiB + 4 * GUARD

SIZES = [128, 4 * KiB, 1 * MiB, 64 * MiB]


@pytest.fixture(scope="module")
def sides(tidewire_p2p, mooncake_p2p):
    # Every buffer is registered before the first transfer, so no segment cache goes stale.
    return {"tw": Side(tidewire_p2p, BUF), "mc": Side(mooncake_p2p, BUF)}


@pytest.fixture(params=["tw->mc", "mc->tw"])
def direction(request, sides):
    a, b = request.param.split("->")
    return sides[a], sides[b]


@pytest.mark.parametrize("op", ["write", "read"])
@pytest.mark.parametrize("size", SIZES, ids=lambda n: "%dB" % n)
def test_single(direction, op, size):
    initiator, target = direction
    # Odd offsets: nothing may depend on alignment.
    verified_transfer(initiator, target, op, [(GUARD + 3, GUARD + 5, size)],
                      seed=size * 2 + (op == "read"))


def _scattered(count, length, seed, gap_local=96, gap_remote=160):
    """count entries of length bytes; remote slots in shuffled order, gaps between slots."""
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return [(GUARD + i * (length + gap_local), GUARD + order[i] * (length + gap_remote), length)
            for i in range(count)]


@pytest.mark.parametrize("op", ["write", "read"])
@pytest.mark.parametrize("count,length", [(32, 64 * KiB), (256, 4 * KiB)],
                         ids=["32x64KiB", "256x4KiB"])
def test_batch(direction, op, count, length):
    initiator, target = direction
    entries = _scattered(count, length, seed=count)
    verified_transfer(initiator, target, op, entries, seed=count + (op == "read"), batch=True)


@pytest.mark.parametrize("op", ["write", "read"])
def test_batch_mixed_lengths(direction, op):
    """64 entries from 1 byte to 300 KiB, adjacent and separated, in one batch."""
    initiator, target = direction
    rng = random.Random(7)
    entries, lo, ro = [], GUARD, GUARD
    for i in range(64):
        n = rng.choice([1, 7, 128, 4095, 4096, 65537, 300 * KiB, rng.randint(1, 20000)])
        entries.append((lo, ro, n))
        lo += n + (0 if i % 3 == 0 else rng.randint(1, 999))
        ro += n + (0 if i % 4 == 0 else rng.randint(1, 999))
    verified_transfer(initiator, target, op, entries, seed=64 + (op == "read"), batch=True)


def test_batch_single_entry(direction):
    initiator, target = direction
    verified_transfer(initiator, target, "write", [(GUARD, GUARD + 1, 3 * MiB + 1)], seed=9,
                      batch=True)


def test_descriptor_and_probe_both_ways(sides):
    """Each side reads the other's descriptor (first buffer) and probes its RPC port."""
    tw, mc = sides["tw"], sides["mc"]
    assert mc.peer.call("first_buffer", segment=tw.peer.segment)["addr"] == tw.base
    assert tw.peer.engine.get_first_buffer_address(mc.peer.segment) == mc.base
    assert mc.peer.call("probe", segment=tw.peer.segment)["rc"] == 0
    assert tw.peer.engine.send_probe(mc.peer.segment) == 0


def test_tidewire_process_forced_v1(cleanup):
    """A tidewire engine in its own process with MC_TCP_PROTO=1 (read before initialize)
    against a fresh Mooncake engine, both directions."""
    tw1 = ProcessPeer("tidewire-proc-v1", impl="tidewire", env=child_env(MC_TCP_PROTO=1))
    cleanup(tw1.close)
    mc = ProcessPeer("mooncake-v1-peer")
    cleanup(mc.close)
    a, b = Side(tw1, 4 * MiB), Side(mc, 4 * MiB)
    for ini, tgt in ((a, b), (b, a)):
        # v1 WRITEs complete once sent: let the bytes land before checking.
        verified_transfer(ini, tgt, "write", [(1, 2, 3 * MiB + 7)], seed=41, settle_s=5)
        verified_transfer(ini, tgt, "read", [(5, 3, 3 * MiB + 7)], seed=42)
        verified_transfer(ini, tgt, "write", _scattered(32, 64 * KiB, 43), seed=44,
                          batch=True, settle_s=5)
