"""tidewire.Store, the pythonic store: exceptions that carry the code and message, context
managers for the client and its registrations, against a real tidewire-master."""

import pytest

import tidewire
from store_util import Master
from tidewire import kv

pytestmark = pytest.mark.usefixtures("store_master_built")

MiB = 1 << 20


@pytest.fixture
def master():
    m = Master("--default_kv_lease_ttl=500")  # reads hold a key for 0.5 s
    yield m
    m.stop()


def test_put_get_remove_raise_with_codes(master):
    with tidewire.Store(master.address, segment_size=16 * MiB) as s:
        assert s.healthy() and ":" in s.name
        s.put("k", b"value")
        s.put("k", b"other")  # create-only, as Mooncake: the old value stays
        assert s.get("k") == b"value" and s["k"] == b"value"
        with pytest.raises(tidewire.ObjectExists):
            s.put("k", b"x", exist_ok=False)
        s.upsert("k", b"replaced!")
        assert s.get("k") == b"replaced!" and s.size("k") == 9
        assert "k" in s and "nope" not in s
        with pytest.raises(tidewire.ObjectNotFound) as ei:
            s.get("nope")
        assert ei.value.code == -704 and ei.value.name == "OBJECT_NOT_FOUND"
        assert isinstance(ei.value, KeyError) and isinstance(ei.value, tidewire.StoreError)
        with pytest.raises(tidewire.ObjectNotFound):
            s.size("nope")
        with pytest.raises(tidewire.InvalidParams) as ei:
            s.put("", b"x")
        assert ei.value.code == -600 and "-600" in str(ei.value)
        s["m"] = b"mapping"
        del s["m"]
        with pytest.raises(tidewire.ObjectNotFound):
            s.remove("m")
        with pytest.raises(tidewire.ObjectHasLease) as ei:
            s.remove("k")  # just read: leased
        assert ei.value.code == -706
        s.remove("k", force=True)
        assert "k" not in s
        for i in range(3):
            s.put(f"r{i}", b"x")
        assert s.remove_by_regex("^r[01]$") == 2
        assert s.remove_all() == 1
    assert s.closed
    with pytest.raises(tidewire.StoreError):
        s.get("k")
    s.close()  # idempotent


def test_no_space_is_its_own_exception(master):
    with tidewire.Store(master.address, segment_size=1 * MiB) as s:
        with pytest.raises(tidewire.NoSpace) as ei:
            s.put("big", bytes(4 * MiB))
        assert ei.value.code == -200


def test_zero_copy_through_a_registration(master):
    with tidewire.Store(master.address, segment_size=16 * MiB) as s:
        src = bytearray(b"z" * 65536)
        dst = bytearray(65536)
        with s.register(src) as r1, s.register(dst):
            assert r1.size == 65536
            s.put_from("zc", src)
            assert s.get_into("zc", dst) == 65536
            assert dst == src
            with pytest.raises(tidewire.InvalidParams):
                s.get_into("zc", memoryview(dst)[:100])  # too small for the value
            s.put_from("zc", memoryview(src)[:10], upsert=True)
            assert s.get("zc") == b"z" * 10
        r1.close()  # idempotent


def test_an_unreachable_master_raises_at_start():
    with pytest.raises(tidewire.StoreError) as ei:
        tidewire.Store("127.0.0.1:1", segment_size=0)
    assert ei.value.code in (-900, -901, -1)
    assert isinstance(ei.value, kv.StoreError)


def test_codes_without_a_subclass_keep_their_name():
    e = kv.StoreError.from_code(-707, "late")
    assert type(e) is kv.StoreError and e.name == "LEASE_EXPIRED" and e.message == "late"
    assert isinstance(kv.StoreError.from_code(-901), tidewire.MasterUnavailable)
