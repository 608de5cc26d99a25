"""Buffer pools, the host allocator pair, EngramStore and the NoF register client on tidewire
(test_store_differential.py compares their answers with Mooncake's; here: what needs threads,
many leases, memory contents, or tidewire's own side of things)."""

import ctypes
import gc
import threading
import time

import pytest

from store_util import Master, connect

import tidewire.store as ts

MiB = 1 << 20


@pytest.fixture
def store():
    m = Master("--default_kv_lease_ttl=500")
    s = connect(m, segment=64 * MiB, local_buffer=4 * MiB)
    try:
        yield s
    finally:
        s.close()
        m.stop()


def test_leases_are_registered_memory_that_put_from_and_get_into_use(store):
    pool = ts.BufferPool(store)
    payloads = {f"k{i}": bytes([i]) * (1000 + 4096 * i) for i in range(8)}
    leases = []
    for key, data in payloads.items():
        lease = pool.acquire(len(data))
        assert lease.size == len(data) and lease.ptr % 4096 == 0
        lease.buffer[:] = data
        assert store.put_from(key, lease.ptr, len(data)) == 0
        leases.append(lease)
    assert len({le.ptr for le in leases}) == len(leases)
    for le in leases:
        le.release()
    for key, data in payloads.items():
        with pool.acquire(len(data)) as lease:
            assert store.get_into(key, lease.ptr, len(data)) == len(data)
            assert bytes(lease.buffer) == data
    pool.close()


def test_regions_past_the_local_buffer_take_the_alignment(store):
    pool = ts.RegisteredBufferPool(store, alignment=1 * MiB)
    inside = pool.acquire(3 * MiB)  # within the 4 MiB local buffer size
    past = pool.acquire(2 * MiB)  # past it: an overflow region
    assert past.ptr % MiB == 0
    data = b"p" * (2 * MiB)
    past.buffer[:] = data
    assert store.put_from("past", past.ptr, len(data)) == 0
    assert store.get("past") == data
    inside.release()
    past.release()
    pool.close()


def test_capacity_waits_until_a_release(store):
    pool = ts.BufferPool(store)  # 8 MiB: twice the local buffer
    held = [pool.acquire(2 * MiB) for _ in range(4)]
    got = []

    def waiter():
        lease = pool.acquire(2 * MiB, timeout=5)
        got.append(time.monotonic())
        lease.release()

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    assert got == []
    released = time.monotonic()
    held.pop().release()
    for t in threads:
        t.join(10)
    assert len(got) == 3 and min(got) >= released
    for le in held:
        le.release()
    pool.close()


def test_many_threads_never_exceed_the_capacity(store):
    pool = ts.BufferPool(store, max_bytes=8 * MiB, max_regions=6)
    in_use = [0, 0]
    lock = threading.Lock()
    errors = []

    def worker(seed):
        try:
            for i in range(40):
                size = (seed * 7919 + i * 104729) % (3 * MiB) + 1
                with pool.acquire(size, timeout=10) as lease:
                    with lock:
                        in_use[0] += max(size, 1)
                        in_use[1] = max(in_use[1], in_use[0])
                        assert in_use[0] <= 8 * MiB
                    lease.buffer[0] = seed
                    with lock:
                        in_use[0] -= max(size, 1)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    pool.close()


def test_a_collected_lease_gives_its_memory_back(store):
    pool = ts.BufferPool(store, max_regions=1)
    lease = pool.acquire(100)
    view = lease.buffer
    del lease
    gc.collect()
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.acquire(100, block=False)  # the view keeps the lease
    del view
    gc.collect()
    pool.acquire(100, block=False).release()
    pool.close()


def test_close_refuses_active_leases_and_the_pool_stays_open(store):
    pool = ts.BufferPool(store)
    lease = pool.acquire(10)
    with pytest.raises(RuntimeError, match="active leases"):
        pool.close()
    lease.release()  # the pool stayed open
    pool.acquire(10).release()
    pool.close()
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.acquire(10)


def test_pool_refusals():
    with pytest.raises(RuntimeError, match="not initialized"):
        ts.BufferPool(ts.MooncakeDistributedStore())
    with pytest.raises(RuntimeError, match="_get_pyclient_capsule"):
        ts.BufferPool(object())
    with pytest.raises(TypeError):
        ts.BufferPool(None, max_bytes=-1)
    with pytest.raises(TypeError):
        ts.BufferLease()
    with pytest.raises(TypeError):
        ts.BufferLeaseView()


def test_pool_needs_a_local_buffer():
    m = Master()
    s = connect(m, segment=16 * MiB, local_buffer=0)
    try:
        with pytest.raises(RuntimeError, match="local buffer"):
            ts.BufferPool(s)
    finally:
        s.close()
        m.stop()


def test_host_allocator_pair():
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)(ts.get_alloc_func_addr())
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ts.get_free_func_addr())
    p = alloc(3 * MiB)
    assert p and p % 4096 == 0
    ctypes.memset(p, 0x5A, 3 * MiB)
    assert ctypes.string_at(p + 3 * MiB - 4, 4) == b"ZZZZ"
    free(p)
    assert alloc(0) is None
    free(None)


def test_engram_round_trip_and_cleanup(store):
    np = pytest.importorskip("numpy")
    cfg = ts.EngramStoreConfig()
    cfg.table_vocab_sizes = [50, 3, 17]
    cfg.embedding_dim = 8
    eng = ts.EngramStore(7, cfg, store)
    rng = np.random.default_rng(1)
    tables = [rng.standard_normal((n, 8)).astype(np.float32) for n in (50, 3, 17)]
    eng.populate(tables)
    ids = np.stack([rng.integers(0, n, size=(4, 6)) for n in (50, 3, 17)], axis=-1)
    out = eng.lookup(ids)
    assert out.shape == (4, 6, 3, 8) and out.dtype == np.float32
    want = np.stack([tables[h][ids[..., h]] for h in range(3)], axis=2)
    assert np.array_equal(out, want)
    time.sleep(0.6)  # the reads' leases run out
    assert eng.remove_from_store() == 3
    assert eng.remove_from_store() == 0
    with pytest.raises(RuntimeError, match="lookup failed"):
        eng.lookup(ids)


def test_engram_populate_rolls_back_on_a_taken_key(store):
    np = pytest.importorskip("numpy")
    cfg = ts.EngramStoreConfig()
    cfg.table_vocab_sizes = [4, 4]
    cfg.embedding_dim = 2
    eng = ts.EngramStore(1, cfg, store)
    assert store.put("engram:l1:h1", b"taken") == 0
    with pytest.raises(RuntimeError, match="populate failed"):
        eng.populate([np.zeros((4, 2), np.float32)] * 2)
    assert store.batch_is_exist(eng.get_store_keys()) == [0, 1]


def test_engram_config_and_layout_need_no_store():
    cfg = ts.EngramStoreConfig()
    assert (cfg.table_vocab_sizes, cfg.embedding_dim) == ([1024], 64)
    cfg.table_vocab_sizes.append(5)  # a copy
    assert cfg.table_vocab_sizes == [1024]
    eng = ts.EngramStore(-2, cfg)
    assert eng.get_store_keys() == ["engram:l-2:h0"]
    with pytest.raises(RuntimeError, match="rc=-600"):
        eng.remove_from_store()
    with pytest.raises(TypeError):
        cfg.embedding_dim = 1.5


def test_nof_register_answers_minus_one():
    n = ts.MooncakeDistributedNoFRegister()
    assert n.real_register("nqn", 1, "127.0.0.1", 4420, 0, 1024, "127.0.0.1:1") == -1
    assert n.real_unregister_by_endpoint("nqn", 1, "127.0.0.1", 4420, "127.0.0.1:1") == -1
    with pytest.raises(TypeError):
        n.real_register(nqn="x")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        n.real_unregister_by_endpoint("nqn", -1, "a", 1, "m")
