"""Hostile row 9: ``transfer_check_status`` polled on 1,000 successful async 4 KiB writes over
TCP must never answer -1 (failed) for a write whose bytes landed. It used to race a zero-timeout
wait against completion."""

import time

from conftest import pattern

KiB = 1024
N = 1000


def test_row09_check_status_never_fails_a_completed_write(te_pair, mbuf):
    a, b = te_pair
    la, rb = mbuf(N * 4 * KiB), mbuf(N * 4 * KiB)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    tgt = b.get_segment_name()
    data = pattern(N * 4 * KiB, seed=9)
    la.put(0, data)
    answers = {}
    deadline = time.monotonic() + 60
    for i in range(N):
        off = i * 4 * KiB
        bid = a.transfer_submit_write(tgt, la.addr + off, rb.addr + off, 4 * KiB)
        assert bid > 0
        # Poll without sleeping: the first answers land right at completion time.
        while (r := a.transfer_check_status(bid)) == 0 and time.monotonic() < deadline:
            pass
        answers[r] = answers.get(r, 0) + 1
    assert answers == {1: N}, answers
    assert rb.get(0, N * 4 * KiB) == data


def test_row09_completion_between_wait_and_status_is_success(te_pair, mbuf, monkeypatch):
    """The exact interleaving of the race, made deterministic: every zero-timeout wait reports
    "still running" (the batch latch is released a moment after the last task ends) although the
    write has completed, as the per-task look then shows."""
    from tidewire import _ffi

    a, b = te_pair
    la, rb = mbuf(64 * KiB), mbuf(64 * KiB)
    assert a.register_memory(la.addr, la.size) == 0
    assert b.register_memory(rb.addr, rb.size) == 0
    la.put(0, pattern(4 * KiB, seed=3))
    real = a._engine._lib

    class ZeroWaitsLoseTheRace:
        def __getattr__(self, name):
            return getattr(real, name)

        def tw_batch_wait(self, h, bid, timeout_ms):
            if timeout_ms == 0:
                assert real.tw_batch_wait(h, bid, 5000) == 0  # the write completes meanwhile
                return _ffi.TW_ERR_TIMEOUT
            return real.tw_batch_wait(h, bid, timeout_ms)

    monkeypatch.setattr(a._engine, "_lib", ZeroWaitsLoseTheRace())
    bid = a.transfer_submit_write(b.get_segment_name(), la.addr, rb.addr, 4 * KiB)
    assert bid > 0
    assert a.transfer_check_status(bid) == 1
    assert rb.get(0, 4 * KiB) == pattern(4 * KiB, seed=3)
