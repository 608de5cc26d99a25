"""Engines with etcd metadata through the Python API: a real etcd (``etcd`` from PATH) on
127.0.0.1 with free ports; Mooncake's connection-string forms; segments opened by name,
bytes checked both ways; keys gone after close; a clear error when etcd is unreachable."""

import os

import pytest

import tidewire as tw
from conftest import pattern
from etcd_util import Etcd, free_port as _free_port
from tidewire.engine import TransferEngine


@pytest.fixture
def etcd():
    e = Etcd()
    yield e
    e.close()


def test_pythonic_engines_on_etcd(etcd):
    opts = dict(bind_address="127.0.0.1", same_host=0)
    a = tw.Engine(metadata="etcd://" + etcd.endpoint, local_server_name="py-a", **opts)
    # An endpoint list whose first member is down: the client moves on to the next.
    b = tw.Engine(metadata="127.0.0.1:%d;%s" % (_free_port(), etcd.endpoint),
                  local_server_name="py-b", **opts)
    try:
        assert etcd.keys() == ["mooncake/ram/py-a", "mooncake/ram/py-b",
                               "mooncake/rpc_meta/py-a", "mooncake/rpc_meta/py-b"]
        remote = bytearray(pattern(1 << 20, seed=3))
        local = bytearray(1 << 20)
        rr = b.register(remote)
        la = a.register(local)  # noqa: F841 (kept: dropping it unregisters)
        seg = a.open_segment("py-b")
        a.read(seg, local, rr.addr)
        assert local == remote
        local[:] = pattern(1 << 20, seed=4)
        a.write(seg, local, rr.addr)
        assert remote == local
        b.close()
        assert etcd.keys() == ["mooncake/ram/py-a", "mooncake/rpc_meta/py-a"]
    finally:
        a.close()
        b.close()
    assert etcd.keys() == []


def test_mooncake_api_on_etcd(etcd, mbuf):
    a, b = TransferEngine(), TransferEngine()
    os.environ["MC_TCP_BIND_ADDRESS"] = "127.0.0.1"
    try:
        # Mooncake's forms: a bare host:port means etcd; initialize_ext names the scheme apart.
        assert a.initialize("nodeA", etcd.endpoint, "tcp", "") == 0
        assert b.initialize_ext("nodeB", etcd.endpoint, "tcp", "", "etcd") == 0
        rb, la = mbuf(65536), mbuf(65536)
        assert b.register_memory(rb.addr, rb.size) == 0
        assert a.register_memory(la.addr, la.size) == 0
        data = pattern(4096, seed=8)
        la.put(0, data)
        assert a.transfer_sync_write("nodeB", la.addr, rb.addr + 100, 4096) == 0
        assert rb.get(100, 4096) == data
        rb.put(8192, pattern(4096, seed=9))
        assert a.transfer_sync_read("nodeB", la.addr + 4096, rb.addr + 8192, 4096) == 0
        assert la.get(4096, 4096) == pattern(4096, seed=9)
        assert a.transfer_sync_read("nodeC", la.addr, rb.addr, 8) == -1  # not published
        b.close()
        assert "mooncake/ram/nodeB" not in etcd.keys()
    finally:
        os.environ.pop("MC_TCP_BIND_ADDRESS", None)
        a.close()
        b.close()


def test_unreachable_etcd_fails_clearly():
    port = _free_port()
    with pytest.raises(tw.TidewireError) as ei:
        tw.Engine(metadata="etcd://127.0.0.1:%d" % port, local_server_name="x",
                  bind_address="127.0.0.1")
    assert "127.0.0.1:%d" % port in str(ei.value)
    te = TransferEngine()
    assert te.initialize("nodeX", "127.0.0.1:%d" % port, "tcp", "") == -1
