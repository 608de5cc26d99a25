"""HTTP metadata mode: tidewire ("tw-node") and Mooncake ("mc-node") share one metadata
server (ours, and the aiohttp server shipped in the Mooncake wheel), find each other by
segment name, and tidewire publishes and removes its keys like Mooncake does."""

import json

import pytest

from conftest import (Closers, KiB, MiB, MetadataServer, ProcessPeer, Side, TidewirePeer,
                      metadata_key as _key, verified_transfer, wait_until)

BUF = 2 * MiB
TW, MC = "tw-node", "mc-node"


class Cluster(Closers):
    def __init__(self, kind):
        super().__init__()
        try:
            self.server = self.opened(MetadataServer(kind))
            self.mc = self.opened(ProcessPeer("mooncake-http", metadata=self.server.url,
                                              name=MC))
            # Like Mooncake, a name that is not an address needs the address to advertise.
            self.tw = self.opened(TidewirePeer("tidewire-http", metadata=self.server.url,
                                               name=TW, env={"MC_TCP_BIND_ADDRESS": "127.0.0.1"}))
            self.tw_side = Side(self.tw, BUF)
            self.mc_side = Side(self.mc, BUF)
        except BaseException:
            self.close()
            raise


@pytest.fixture(scope="class", params=["ours", "wheel"])
def cluster(request):
    c = Cluster(request.param)
    yield c
    c.close()


class TestHttpMetadata:
    def test_keys_published(self, cluster):
        server = cluster.server
        if server.kind == "ours":
            keys = set(server.keys())
            for name in (TW, MC):
                assert {_key("ram", name), _key("rpc_meta", name)} <= keys, keys
        rpc = json.loads(server.get(_key("rpc_meta", TW)))
        assert rpc == {"ip_or_host_name": "127.0.0.1", "rpc_port": cluster.tw.rpc_port}
        desc = json.loads(server.get(_key("ram", TW)))
        assert desc["name"] == TW
        assert desc["protocol"] == "tcp"
        assert desc["tcp_proto_version"] == 2
        assert isinstance(desc["tcp_data_port"], int) and 0 < desc["tcp_data_port"] < 65536
        assert {"addr": cluster.tw_side.base, "length": BUF, "name": TW} in desc["buffers"]
        # Mooncake's own entries, as the reference for the shape.
        mc_rpc = json.loads(server.get(_key("rpc_meta", MC)))
        assert mc_rpc == {"ip_or_host_name": "127.0.0.1", "rpc_port": cluster.mc.rpc_port}
        mc_desc = json.loads(server.get(_key("ram", MC)))
        assert set(mc_desc) - {"timestamp"} <= set(desc) | {"rdma_server_name"}, (
            "tidewire's descriptor lacks keys Mooncake publishes: %s" % (
                set(mc_desc) - set(desc)))

    @pytest.mark.parametrize("op", ["write", "read"])
    @pytest.mark.parametrize("dirn", ["tw->mc", "mc->tw"])
    def test_transfers_by_name(self, cluster, dirn, op):
        sides = {"tw": cluster.tw_side, "mc": cluster.mc_side}
        a, b = dirn.split("->")
        seed = 100 + 4 * ["tw->mc", "mc->tw"].index(dirn) + 2 * (op == "read")
        verified_transfer(sides[a], sides[b], op, [(4 * KiB + 1, 8 * KiB + 3, 1 * MiB)], seed)
        verified_transfer(sides[a], sides[b], op,
                          [(i * 20 * KiB, (63 - i) * 20 * KiB, 16 * KiB) for i in range(64)],
                          seed + 1, batch=True)

    def test_unregister_republishes(self, cluster):
        extra = cluster.tw.alloc(64 * KiB)
        desc = json.loads(cluster.server.get(_key("ram", TW)))
        assert {"addr": extra, "length": 64 * KiB, "name": TW} in desc["buffers"]
        assert cluster.tw.free(extra) == 0
        desc = json.loads(cluster.server.get(_key("ram", TW)))
        assert all(b["addr"] != extra for b in desc["buffers"]), desc["buffers"]
        assert {"addr": cluster.tw_side.base, "length": BUF, "name": TW} in desc["buffers"]

    def test_destroy_removes_keys(self, cluster):
        server = cluster.server
        cluster.tw.close()
        gone = wait_until(lambda: server.get(_key("ram", TW)) is None
                          and server.get(_key("rpc_meta", TW)) is None, 5, 0.05)
        assert gone, "tidewire's keys are still on the metadata server after destroy"
        # Mooncake's keys are left alone.
        assert server.get(_key("ram", MC)) is not None
        assert server.get(_key("rpc_meta", MC)) is not None
