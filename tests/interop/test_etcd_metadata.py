"""etcd metadata: tidewire ("tw-etcd") and Mooncake ("mc-etcd") share one real etcd, publish
their segments under Mooncake's keys, open each other's segments by name and transfer both
ways; tidewire's keys hang on a lease and go on destroy, Mooncake's stay."""

import json

import pytest

from conftest import (Closers, KiB, MiB, EtcdServer, ProcessPeer, Side, TidewirePeer,
                      metadata_key as _key, verified_transfer, wait_until)

BUF = 2 * MiB
TW, MC = "tw-etcd", "mc-etcd"


class Cluster(Closers):
    def __init__(self, spelling):
        super().__init__()
        try:
            self.etcd = self.opened(EtcdServer())
            # Mooncake gets etcd://h:p; tidewire either the same or a bare h:p (both mean etcd).
            self.mc = self.opened(ProcessPeer("mooncake-etcd", metadata=self.etcd.url, name=MC))
            tw_meta = self.etcd.url if spelling == "etcd-url" else self.etcd.endpoint
            self.tw = self.opened(TidewirePeer("tidewire-etcd", metadata=tw_meta, name=TW,
                                               env={"MC_TCP_BIND_ADDRESS": "127.0.0.1"}))
            self.tw_side = Side(self.tw, BUF)
            self.mc_side = Side(self.mc, BUF)
        except BaseException:
            self.close()
            raise


@pytest.fixture(scope="class", params=["etcd-url", "bare"])
def cluster(request):
    c = Cluster(request.param)
    yield c
    c.close()


class TestEtcdMetadata:
    def test_keys_published(self, cluster):
        etcd = cluster.etcd
        keys = set(etcd.keys())
        for name in (TW, MC):
            assert {_key("ram", name), _key("rpc_meta", name)} <= keys, keys
        rpc = json.loads(etcd.get(_key("rpc_meta", TW)))
        assert rpc == {"ip_or_host_name": "127.0.0.1", "rpc_port": cluster.tw.rpc_port}
        desc = json.loads(etcd.get(_key("ram", TW)))
        assert desc["name"] == TW and desc["protocol"] == "tcp"
        assert {"addr": cluster.tw_side.base, "length": BUF, "name": TW} in desc["buffers"]
        # tidewire's keys are on a lease; Mooncake's are not (it uses none).
        assert cluster.etcd.kv(_key("ram", TW))["lease"] != 0
        assert cluster.etcd.kv(_key("rpc_meta", TW))["lease"] != 0
        assert cluster.etcd.kv(_key("ram", MC))["lease"] == 0
        mc_rpc = json.loads(etcd.get(_key("rpc_meta", MC)))
        assert mc_rpc == {"ip_or_host_name": "127.0.0.1", "rpc_port": cluster.mc.rpc_port}
        mc_desc = json.loads(etcd.get(_key("ram", MC)))
        assert set(mc_desc) - {"timestamp"} <= set(desc) | {"rdma_server_name"}

    @pytest.mark.parametrize("op", ["write", "read"])
    @pytest.mark.parametrize("dirn", ["tw->mc", "mc->tw"])
    def test_transfers_by_name(self, cluster, dirn, op):
        sides = {"tw": cluster.tw_side, "mc": cluster.mc_side}
        a, b = dirn.split("->")
        seed = 300 + 4 * ["tw->mc", "mc->tw"].index(dirn) + 2 * (op == "read")
        verified_transfer(sides[a], sides[b], op, [(4 * KiB + 1, 8 * KiB + 3, 1 * MiB)], seed)
        verified_transfer(sides[a], sides[b], op,
                          [(i * 20 * KiB, (63 - i) * 20 * KiB, 16 * KiB) for i in range(64)],
                          seed + 1, batch=True)

    def test_register_republishes(self, cluster):
        extra = cluster.tw.alloc(64 * KiB)
        desc = json.loads(cluster.etcd.get(_key("ram", TW)))
        assert {"addr": extra, "length": 64 * KiB, "name": TW} in desc["buffers"]
        assert cluster.tw.free(extra) == 0
        desc = json.loads(cluster.etcd.get(_key("ram", TW)))
        assert all(b["addr"] != extra for b in desc["buffers"]), desc["buffers"]

    def test_destroy_removes_keys(self, cluster):
        etcd = cluster.etcd
        cluster.tw.close()
        gone = wait_until(lambda: etcd.get(_key("ram", TW)) is None
                          and etcd.get(_key("rpc_meta", TW)) is None, 5, 0.05)
        assert gone, "tidewire's keys are still in etcd after destroy"
        assert etcd.get(_key("ram", MC)) is not None
        assert etcd.get(_key("rpc_meta", MC)) is not None
