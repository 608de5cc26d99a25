"""Mooncake's tensor helpers (``put_tensor``, ``get_tensor``, the ``batch_*``, ``*_into``,
``*_from``, ``upsert_*`` and ``pub_*`` forms) against a real tidewire-master with the segment in
another process: every dtype Mooncake stores, shapes from 0-d to 8-d, non-contiguous input, the
header laid out as Mooncake's, and bad input.

Needs torch: run under an environment that has it (``make serving-test`` runs it under the
serving environment). Without torch it is skipped with that reason, unless
``TIDEWIRE_REQUIRE_SERVING=1``, which makes it fail instead."""

import ctypes
import os
import struct

import pytest

from conftest import MBuf
from store_util import Master, Peer, connect

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None
    if os.environ.get("TIDEWIRE_REQUIRE_SERVING") == "1":
        raise

pytestmark = pytest.mark.skipif(torch is None, reason="torch is not installed here")

DTYPES = ["float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
          "uint64", "bool", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]


@pytest.fixture(scope="module")
def store():
    m = Master()
    peer = Peer(m, "server", 64 << 20)
    s = connect(m)
    yield s
    s.close()
    peer.close()
    m.stop()


def sample(name, shape, seed):
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (max(1, int(torch.tensor(shape).prod()) if shape else 1)
                                 * 8,), dtype=torch.uint8, generator=g)
    dt = getattr(torch, name)
    n = 1
    for d in shape:
        n *= d
    t = raw[: n * torch.empty((), dtype=dt).element_size()].view(dt)
    if name == "bool":
        t = raw[:n] % 2 == 1
    return t.reshape(shape)


def same(a, b):
    return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
            and a.contiguous().reshape(-1).view(torch.uint8).equal(
                b.contiguous().reshape(-1).view(torch.uint8)))


def test_every_dtype_round_trips(store):
    for i, name in enumerate(DTYPES):
        if not hasattr(torch, name):
            continue
        t = sample(name, (3, 5), i)
        assert store.put_tensor(f"t/{name}", t) == 0, name
        got = store.get_tensor(f"t/{name}")
        assert got is not None and same(got, t), name


def test_shapes_layout_and_batches(store):
    shapes = [(), (0,), (7,), (2, 3), (2, 1, 3, 1, 2, 1, 2, 1)]
    keys = [f"shape/{i}" for i in range(len(shapes))]
    ts = [sample("int32", s, 10 + i) for i, s in enumerate(shapes)]
    assert store.batch_put_tensor(keys, ts) == [0] * len(ts)
    for t, got in zip(ts, store.batch_get_tensor(keys + ["shape/missing"])[:-1]):
        assert same(got, t)
    assert store.batch_get_tensor(["shape/missing"]) == [None]
    # The bytes are Mooncake's layout: a 304-byte header, then the data.
    raw = store.get(keys[3])
    magic, version, hlen, code, ndim, _, off, nbytes = struct.unpack_from("<4sHHIIQQQ", raw)
    assert (magic, version, hlen, code, ndim, off, nbytes) == (b"NOOM", 1, 304, 6, 2, 304, 24)
    assert struct.unpack_from("<8q", raw, 40) == (2, 3, -1, -1, -1, -1, -1, -1)
    assert raw[304:] == ts[3].numpy().tobytes()
    assert len(raw) == 304 + 24
    # Non-contiguous input is stored in C order.
    nc = torch.arange(12, dtype=torch.int64).reshape(3, 4).t()
    assert store.put_tensor("shape/nc", nc) == 0
    assert same(store.get_tensor("shape/nc"), nc.contiguous())


def test_create_only_upsert_pub_and_bad_input(store):
    a, b = torch.ones(4), torch.zeros(6)
    assert store.put_tensor("cu/a", a) == 0
    assert store.put_tensor("cu/a", b) == 0  # create-only: the old value stays
    assert same(store.get_tensor("cu/a"), a)
    assert store.upsert_tensor("cu/a", b) == 0
    assert same(store.get_tensor("cu/a"), b)
    from tidewire.store import ReplicateConfig

    cfg = ReplicateConfig()
    cfg.replica_num = 1
    assert store.pub_tensor("cu/p", a, cfg) == 0 and same(store.get_tensor("cu/p"), a)
    assert store.upsert_pub_tensor("cu/p", b, cfg) == 0 and same(store.get_tensor("cu/p"), b)
    assert store.batch_upsert_tensor(["cu/p", "cu/q"], [a, a]) == [0, 0]
    assert store.batch_pub_tensor(["cu/r"], [a], cfg) == [0]
    assert store.batch_upsert_pub_tensor(["cu/r"], [b], cfg) == [0]
    assert same(store.get_tensor("cu/r"), b)
    assert store.put_tensor("cu/x", [1, 2]) == -600
    assert store.put_tensor("cu/c", torch.ones(2, dtype=torch.complex64)) == -600
    assert store.put_tensor("cu/9d", torch.ones((1,) * 9)) == -600
    assert store.batch_put_tensor(["cu/m1", "cu/m2"], [a]) == [-600, -600]
    assert store.put("cu/bytes", b"not a tensor" * 40) == 0
    assert store.get_tensor("cu/bytes") is None
    with pytest.raises(TypeError):
        store.put_tensor(3, a)


def test_into_and_from_caller_memory(store):
    t = sample("bfloat16", (4, 8), 3)
    assert store.put_tensor("into/a", t) == 0
    buf = MBuf(1 << 16)
    try:
        got = store.get_tensor_into("into/a", buf.addr, 1 << 16)
        assert same(got, t)
        assert got.data_ptr() == buf.addr + 304  # a view of the caller's memory
        assert store.get_tensor_into("into/a", buf.addr, 100) is None  # too small
        assert store.batch_get_tensor_into(["into/a", "into/none"], [buf.addr, buf.addr + 4096],
                                           [4096, 4096])[1] is None
        # put_tensor_from takes the same layout back.
        n = 304 + t.numel() * 2
        assert store.put_tensor_from("into/b", buf.addr, n) == 0
        assert same(store.get_tensor("into/b"), t)
        assert store.upsert_tensor_from("into/b", buf.addr, n) == 0
        assert store.batch_put_tensor_from(["into/c"], [buf.addr], [n]) == [0]
        assert store.batch_upsert_tensor_from(["into/c"], [buf.addr], [n]) == [0]
        assert same(store.get_tensor("into/c"), t)
        assert store.put_tensor_from("into/d", buf.addr, 100) == -600
        ctypes.memset(buf.addr, 0, 304)
        assert store.put_tensor_from("into/e", buf.addr, n) == 0
        assert store.get_tensor("into/e") is None  # no tensor header: not a tensor
    finally:
        buf.close()
