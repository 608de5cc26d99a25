"""The Store's stress and fault suite (store_stress.py) on tidewire: mixed calls from 8 threads
and from 4 processes with every read checked, eviction of 512 MiB (2 GiB) through a 256 MiB
segment, a segment owner / a reader / the master SIGKILLed, put/get/remove cycles with RSS, fds
and threads flat, a 256 MiB (1 GiB) value, and 64 threads (512 in 8 processes) of batch calls.

Each case runs in its own process group with a time bound, so a crash or a hang fails that
case and nothing it started is left running. The short variant runs in `make test`; the long
one with TIDEWIRE_STORE_STRESS=long (`make store-stress`). The same cases run against the real
Mooncake wheel with `python python/tests/store_stress.py --target mooncake`.
"""

import faulthandler

import pytest

import store_stress as ss
from conftest import SUITE_DEADLINE_S

LONG = ss.long_mode()
PROFILE = ss.Profile(LONG)


@pytest.fixture(autouse=True)
def case_deadline():
    """Each case is bounded by run_isolated's timeout; the suite-wide watchdog is re-armed so
    that this module's minutes do not use up the other tests' deadline."""
    faulthandler.dump_traceback_later(PROFILE.case_timeout + 60, exit=True)
    yield
    faulthandler.dump_traceback_later(SUITE_DEADLINE_S, exit=True)


@pytest.mark.parametrize("case", ss.CASE_NAMES)
def test_store_stress(case):
    r = ss.run_isolated("tidewire", case, LONG)
    assert r["case"] == case and r["target"] == "tidewire"
    assert r["ok"], ss.describe(r)
    assert r["seconds"] <= PROFILE.case_limit, (
        f"{case} took {r['seconds']} s, over its {PROFILE.case_limit} s bound\n" + ss.describe(r))


def test_values_catch_torn_and_foreign_reads():
    """The checker itself: a value passes only as exactly one version of its own key."""
    v = ss.value("k", 7, 4096)
    assert ss.check("k", v) == (7, None)
    assert ss.check("other", v)[1] == "another key's value"
    torn = v[:2048] + ss.value("k", 8, 4096)[2048:]
    assert ss.check("k", torn)[0] is None and "torn" in ss.check("k", torn)[1]
    assert ss.check("k", v[:4000])[1] == "length 4000, header says 4096"
    assert ss.check("k", bytes(4096))[1].startswith("no value header")
    head = bytearray(v)
    head[20] ^= 1
    assert ss.check("k", bytes(head))[1] == "torn header"
    assert ss.value("k", 7, 4096) == v and ss.value("k", 8, 4096) != v
    big = ss.Buf(9 << 20)
    try:
        ss.write_into(big, 0, "b", 3, big.size)
        assert ss.check_in(big, 0, "b", big.size, 3) == (3, None)
        big.put(5 << 20, b"\0")
        assert ss.check_in(big, 0, "b", big.size, 3)[1].startswith("bytes differ")
    finally:
        big.close()
