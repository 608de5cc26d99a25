"""Store keys are byte strings of their full length: keys that differ after a NUL byte are
distinct in every method; a key that is empty, over the 1 MiB limit or not UTF-8 gets the same
result in every method; a key of the wrong type raises TypeError in every method; a batch of
long keys larger than one master message still works. Run against a real tidewire-master, a
server process holding the segment and a client here (bytes cross processes)."""

import inspect

import pytest

from conftest import MBuf
from store_util import Master, Peer, connect
from tidewire.store import MAX_KEY_LEN, MooncakeDistributedStore

# Fails, not skips, without the master binary (see conftest.store_master_built).
pytestmark = pytest.mark.usefixtures("store_master_built")


@pytest.fixture(scope="module")
def cluster():
    m = Master("--default_kv_lease_ttl=5000")
    peer = Peer(m, "server", 256 << 20)
    s = connect(m)
    buf = MBuf(1 << 20)
    assert s.register_buffer(buf.addr, buf.size) == 0
    yield s, buf
    s.unregister_buffer(buf.addr)
    buf.close()
    s.close()
    peer.close()
    m.stop()


@pytest.fixture
def store(cluster):
    s, buf = cluster
    yield s, buf
    assert s.remove_all(True) >= 0


A, B, C = b"A" * 100, b"B" * 100, b"C" * 10


def test_keys_differing_after_a_nul_are_distinct(store):
    s, buf = store
    assert s.put("k\0a", A) == 0
    assert s.put("k\0b", B) == 0
    assert s.get("k\0a") == A and s.get("k\0b") == B
    assert s.get("k") == b"", "the part before the NUL is another key"
    assert s.get_size("k\0a") == 100 and s.get_size("k\0b") == 100
    assert s.get_size("k") == -704
    assert s.upsert("k\0b", C) == 0
    assert s.get("k\0a") == A, "an upsert of one does not change the other"
    assert s.get("k\0b") == C and s.get_size("k\0b") == 10
    assert s.put("k\0a", b"dup") == 0 and s.get("k\0a") == A, "create-only keeps the value"
    assert [s.is_exist(k) for k in ("k\0a", "k\0b", "k", "k\0")] == [1, 1, 0, 0]
    assert s.batch_is_exist(["k\0a", "k\0b", "k"]) == [1, 1, 0]
    assert s.get_batch(["k\0b", "k", "k\0a"]) == [C, b"", A]
    assert s.get_buffer("k\0a").tobytes() == A and s.get_buffer("k") is None
    assert [h and h.tobytes() for h in s.batch_get_buffer(["k\0a", "k\0b", "k"])] == [A, C, None]
    # Zero-copy reads into registered memory.
    assert s.get_into("k\0b", buf.addr, 4096) == 10 and buf.get(0, 10) == C
    assert s.batch_get_into(["k\0a", "k"], [buf.addr, buf.addr + 4096], [4096, 4096]) == [100,
                                                                                        -704]
    assert buf.get(0, 100) == A
    got = s.get_into_ranges([buf.addr], [["k\0a", "k\0b", "k"]], [[[0], [200], [300]]],
                            [[[90], [0], [0]]], [[[10], [10], [1]]])
    assert got == [[[10], [10], [-704]]]
    assert buf.get(0, 10) == A[:10] and buf.get(200, 10) == C
    # bytes keys are the same keys.
    assert s.get(b"k\0a") == A and s.get_size(bytearray(b"k\0b")) == 10
    # Removal of one leaves the other.
    assert s.remove("k\0a", force=True) == 0
    assert s.get("k\0a") == b"" and s.get("k\0b") == C
    assert s.remove("k", force=True) == -704
    assert s.batch_remove(["k\0a", "k\0b"], force=True) == [-704, 0]


def test_nul_keys_in_batch_and_zero_copy_forms(store):
    s, buf = store
    keys = ["b\0" + c for c in "xyz"]
    assert s.put_batch(keys, [b"1", b"22", b"333"]) == 0
    assert s.get_batch(keys + ["b"]) == [b"1", b"22", b"333", b""]
    assert s.upsert_batch(keys[:1], [b"one"]) == 0
    assert s.get_batch(keys) == [b"one", b"22", b"333"]
    buf.put(0, b"0123456789")
    zk = ["z\0" + c for c in "ab"]
    assert s.batch_put_from(zk, [buf.addr, buf.addr + 5], [5, 5]) == [0, 0]
    assert s.get_batch(zk) == [b"01234", b"56789"]
    assert s.batch_upsert_from(zk[1:], [buf.addr], [3]) == [0]
    assert s.get_batch(zk) == [b"01234", b"012"]
    assert s.put_from("f\0a", buf.addr, 2) == 0 and s.upsert_from("f\0b", buf.addr + 2, 2) == 0
    assert s.get_batch(["f\0a", "f\0b", "f"]) == [b"01", b"23", b""]
    assert s.put_parts("p\0a", b"ab", b"cd") == 0 and s.upsert_parts("p\0b", b"ef") == 0
    assert s.get_batch(["p\0a", "p\0b"]) == [b"abcd", b"ef"]
    assert s.batch_remove(keys + zk + ["b", "z"], force=True) == [0] * 5 + [-704, -704]


def _every_method(s, key, buf):
    """Each key-taking method called with `key`, by name."""
    a = buf.addr
    return {
        "put": s.put(key, b"v"),
        "upsert": s.upsert(key, b"v"),
        "put_batch": s.put_batch([key], [b"v"]),
        "upsert_batch": s.upsert_batch([key], [b"v"]),
        "put_parts": s.put_parts(key, b"v"),
        "upsert_parts": s.upsert_parts(key, b"v"),
        "put_from": s.put_from(key, a, 1),
        "upsert_from": s.upsert_from(key, a, 1),
        "batch_put_from": s.batch_put_from([key], [a], [1]),
        "batch_upsert_from": s.batch_upsert_from([key], [a], [1]),
        "batch_put_from_multi_buffers": s.batch_put_from_multi_buffers([key], [[a]], [[1]]),
        "batch_get_into_multi_buffers": s.batch_get_into_multi_buffers([key], [[a]], [[4096]]),
        "get_into": s.get_into(key, a, 4096),
        "batch_get_into": s.batch_get_into([key], [a], [4096]),
        "get": s.get(key),
        "get_batch": s.get_batch([key]),
        "get_buffer": s.get_buffer(key),
        "batch_get_buffer": s.batch_get_buffer([key]),
        "get_size": s.get_size(key),
        "get_into_ranges": s.get_into_ranges([a], [[key]], [[[0]]], [[[0]]], [[[1]]]),
        "is_exist": s.is_exist(key),
        "batch_is_exist": s.batch_is_exist([key]),
        "remove": s.remove(key),
        "batch_remove": s.batch_remove([key]),
        **{name: call() for name, call in _newer_calls(s, key, a).items()},
    }


def _newer_calls(s, key, a):
    """The session, replica-descriptor and tensor calls with `key`, by name (no torch needed: a bad
    key settles them before a tensor is looked at)."""
    return {
        "batch_get_session_start": lambda: s.batch_get_session_start([key]),
        "batch_get_session_end": lambda: s.batch_get_session_end([key]),
        "batch_get_into_multi_buffer_ranges": lambda: s.batch_get_into_multi_buffer_ranges(
            [key], [[a]], [[1]], [[0]]),
        "batch_get_replica_desc": lambda: s.batch_get_replica_desc([key]),
        "get_replica_desc": lambda: s.get_replica_desc(key),
        "put_tensor": lambda: s.put_tensor(key, None),
        "upsert_tensor": lambda: s.upsert_tensor(key, None),
        "pub_tensor": lambda: s.pub_tensor(key, None),
        "upsert_pub_tensor": lambda: s.upsert_pub_tensor(key, None),
        "batch_put_tensor": lambda: s.batch_put_tensor([key], [None]),
        "batch_upsert_tensor": lambda: s.batch_upsert_tensor([key], [None]),
        "batch_pub_tensor": lambda: s.batch_pub_tensor([key], [None]),
        "batch_upsert_pub_tensor": lambda: s.batch_upsert_pub_tensor([key], [None]),
        "put_tensor_from": lambda: s.put_tensor_from(key, a, 512),
        "upsert_tensor_from": lambda: s.upsert_tensor_from(key, a, 512),
        "batch_put_tensor_from": lambda: s.batch_put_tensor_from([key], [a], [512]),
        "batch_upsert_tensor_from": lambda: s.batch_upsert_tensor_from([key], [a], [512]),
        "get_tensor": lambda: s.get_tensor(key),
        "batch_get_tensor": lambda: s.batch_get_tensor([key]),
        "get_tensor_into": lambda: s.get_tensor_into(key, a, 4096),
        "batch_get_tensor_into": lambda: s.batch_get_tensor_into([key], [a], [4096]),
        "batch_put_session_start": lambda: s.batch_put_session_start([key], [10]),
        "batch_put_from_multi_buffer_ranges": lambda: s.batch_put_from_multi_buffer_ranges(
            [key], [[a]], [[1]], [[0]]),
        "batch_put_session_end": lambda: s.batch_put_session_end([key]),
        "batch_put_session_revoke": lambda: s.batch_put_session_revoke([key]),
        "batch_replica_clear": lambda: s.batch_replica_clear([key]),
        "create_copy_task": lambda: s.create_copy_task(key, ["nowhere"])[1],
        "create_move_task": lambda: s.create_move_task(key, "a", "b")[1],
    }


# What every method returns for an unusable key (as for the empty key): its own way of saying
# -600 (invalid parameters); the task calls say the object is not found (-704).
BAD_KEY = {
    "put": -600, "upsert": -600, "put_batch": -600, "upsert_batch": -600, "put_parts": -600,
    "upsert_parts": -600, "put_from": -600, "upsert_from": -600, "batch_put_from": [-600],
    "batch_upsert_from": [-600], "batch_put_from_multi_buffers": [-600],
    "batch_get_into_multi_buffers": [-600], "get_into": -600, "batch_get_into": [-600], "get": b"",
    "get_batch": [b""], "get_buffer": None, "batch_get_buffer": [None], "get_size": -600,
    "get_into_ranges": [[[-600]]], "is_exist": -1, "batch_is_exist": [-1], "remove": -600,
    "batch_remove": [-600], "batch_get_session_start": [-600], "batch_get_session_end": 0,
    "batch_get_into_multi_buffer_ranges": [-600], "batch_get_replica_desc": {},
    "get_replica_desc": [], "put_tensor": -600, "upsert_tensor": -600, "pub_tensor": -600,
    "upsert_pub_tensor": -600, "batch_put_tensor": [-600], "batch_upsert_tensor": [-600],
    "batch_pub_tensor": [-600], "batch_upsert_pub_tensor": [-600], "put_tensor_from": -600,
    "upsert_tensor_from": -600, "batch_put_tensor_from": [-600], "batch_upsert_tensor_from": [-600],
    "get_tensor": None, "batch_get_tensor": [None], "get_tensor_into": None,
    "batch_get_tensor_into": [None], "batch_put_session_start": [-600],
    "batch_put_from_multi_buffer_ranges": [-600], "batch_put_session_end": [-600],
    "batch_put_session_revoke": [-600], "batch_replica_clear": [], "create_copy_task": -704,
    "create_move_task": -704,
}
# The empty key is Mooncake's "not found" in the size, existence and removal calls.
EMPTY_KEY = dict(BAD_KEY, get_size=-704, is_exist=0, batch_is_exist=[0], remove=-704,
                 batch_remove=[-704])


# The tensor-parallel, safetensors and metadata methods (mixins beside client.py) check their
# keys through the core methods they call; they are not in these tables yet.
MIXIN_KEY_METHODS = {
    "batch_get_tensor_with_parallelism", "batch_get_tensor_with_parallelism_into",
    "batch_get_tensor_with_tp", "batch_get_tensor_with_tp_into", "batch_pub_tensor_with_tp",
    "batch_put_tensor_with_parallelism", "batch_put_tensor_with_parallelism_from",
    "batch_put_tensor_with_tp", "batch_put_tensor_with_tp_from",
    "batch_upsert_tensor_with_parallelism", "batch_upsert_tensor_with_parallelism_from",
    "get_tensor_with_parallelism", "get_tensor_with_parallelism_into", "get_tensor_with_tp",
    "get_tensor_with_tp_into", "pub_tensor_with_tp", "put_tensor_with_parallelism",
    "put_tensor_with_parallelism_from", "put_tensor_with_tp", "put_tensor_with_tp_from",
    "upsert_tensor_with_parallelism", "upsert_tensor_with_parallelism_from",
    "put_from_with_metadata", "get_tensor_into_cuda", "batch_get_tensor_into_cuda",
    "save_tensor_to_safetensor", "load_tensor_from_safetensor",
}


def _key_methods():
    """Every public method of the store that takes keys (but the mixins', listed above)."""
    out = set()
    for name, fn in inspect.getmembers(MooncakeDistributedStore, inspect.isfunction):
        params = set(inspect.signature(fn).parameters)
        if not name.startswith("_") and params & {"key", "keys", "all_keys"}:
            out.add(name)
    mixins = out & MIXIN_KEY_METHODS
    return out - mixins


def test_the_tables_cover_every_key_method():
    assert set(BAD_KEY) == _key_methods()


@pytest.mark.parametrize("key", [
    "", "x" * (MAX_KEY_LEN + 1), "é" * (MAX_KEY_LEN // 2 + 1), b"\xff\xfe", "bad\ud800",
    b"y" * (MAX_KEY_LEN + 1),
], ids=["empty", "over-long", "over-long-utf8", "invalid-utf8-bytes", "lone-surrogate",
        "over-long-bytes"])
def test_an_unusable_key_gets_the_same_result_in_every_method(store, key):
    s, buf = store
    assert _every_method(s, key, buf) == (EMPTY_KEY if key == "" else BAD_KEY)
    # In a batch it fails alone; the other keys go through.
    assert s.put_batch(["fine", key], [b"1", b"2"]) == -600
    assert s.get_batch(["fine", key]) == [b"1", b""]
    assert s.batch_is_exist([key, "fine"]) == [0 if key == "" else -1, 1]
    assert s.batch_remove([key, "fine"], force=True) == [-704 if key == "" else -600, 0]


def test_the_longest_key_works_in_every_method(store):
    s, buf = store
    buf.put(0, b"v")
    key = "k\0" + "x" * (MAX_KEY_LEN - 3) + "!"
    assert len(key.encode()) == MAX_KEY_LEN
    other = key[:-1] + "?"
    assert s.put(key, b"long") == 0 and s.get(key) == b"long"
    assert s.get(other) == b"" and s.get_size(other) == -704
    assert s.get_size(key) == 4 and s.is_exist(key) == 1
    assert s.upsert(key, b"v") == 0
    assert s.get_into(key, buf.addr + 100, 10) == 1 and buf.get(100, 1) == b"v"
    assert s.get_buffer(key).tobytes() == b"v"
    assert s.get_into_ranges([buf.addr], [[key]], [[[200]]], [[[0]]], [[[1]]]) == [[[1]]]
    assert s.remove(key, force=True) == 0 and s.is_exist(key) == 0
    assert s.batch_put_from([key], [buf.addr], [1]) == [0]
    assert s.batch_remove([key], force=True) == [0]
    assert s.batch_put_from_multi_buffers([key, other], [[buf.addr], [buf.addr, buf.addr]],
                                          [[1], [1, 1]]) == [0, 0]
    assert s.batch_get_into_multi_buffers([other, key], [[buf.addr + 300, buf.addr + 302]] * 2,
                                          [[1, 1]] * 2) == [2, 1]
    assert buf.get(300, 1) == b"v"
    assert s.batch_remove([key, other], force=True) == [0, 0]


def test_a_batch_of_long_keys_larger_than_one_message(store):
    """40 keys of 1 MiB (NUL bytes inside) are more than one 32 MiB master frame: the client
    splits the batch by key bytes, and every key keeps its own value."""
    s, _ = store
    keys = [("\0" + "k" * 4095) * (MAX_KEY_LEN // 4096 - 1) + f"{i:04096d}" for i in range(40)]
    assert all(len(k) == MAX_KEY_LEN for k in keys)
    vals = [bytes([65 + i % 26]) * (i + 1) for i in range(40)]
    assert s.put_batch(keys, vals) == 0
    assert s.get_batch(keys) == vals
    assert s.batch_is_exist(keys) == [1] * 40
    assert s.upsert_batch(keys[::2], [b"u"] * 20) == 0
    assert s.get_batch(keys) == [b"u" if i % 2 == 0 else v for i, v in enumerate(vals)]
    assert s.batch_remove(keys, force=True) == [0] * 40
    assert s.batch_is_exist(keys) == [0] * 40


def _call_with(s, name, key, addr):
    """`name` called with `key` wherever a key goes."""
    calls = {
        "put": lambda: s.put(key, b"v"),
        "upsert": lambda: s.upsert(key, b"v"),
        "put_batch": lambda: s.put_batch([key], [b"v"]),
        "upsert_batch": lambda: s.upsert_batch([key], [b"v"]),
        "put_parts": lambda: s.put_parts(key, b"v"),
        "upsert_parts": lambda: s.upsert_parts(key, b"v"),
        "put_from": lambda: s.put_from(key, addr, 1),
        "upsert_from": lambda: s.upsert_from(key, addr, 1),
        "batch_put_from": lambda: s.batch_put_from([key], [addr], [1]),
        "batch_upsert_from": lambda: s.batch_upsert_from([key], [addr], [1]),
        "batch_put_from_multi_buffers": lambda: s.batch_put_from_multi_buffers([key], [[addr]],
                                                                               [[1]]),
        "batch_get_into_multi_buffers": lambda: s.batch_get_into_multi_buffers([key], [[addr]],
                                                                               [[4096]]),
        "get_into": lambda: s.get_into(key, addr, 4096),
        "batch_get_into": lambda: s.batch_get_into([key], [addr], [4096]),
        "get": lambda: s.get(key),
        "get_batch": lambda: s.get_batch([key]),
        "get_buffer": lambda: s.get_buffer(key),
        "batch_get_buffer": lambda: s.batch_get_buffer([key]),
        "get_size": lambda: s.get_size(key),
        "get_into_ranges": lambda: s.get_into_ranges([addr], [[key]], [[[0]]], [[[0]]],
                                                     [[[1]]]),
        "is_exist": lambda: s.is_exist(key),
        "batch_is_exist": lambda: s.batch_is_exist([key]),
        "remove": lambda: s.remove(key),
        "batch_remove": lambda: s.batch_remove([key]),
    }
    calls.update(_newer_calls(s, key, addr))
    assert set(calls) == _key_methods()
    return calls[name]()


@pytest.mark.parametrize("name", sorted(BAD_KEY))
@pytest.mark.parametrize("key", [5, None, 1.5, ["k"], object()],
                         ids=["int", "None", "float", "list", "object"])
def test_a_non_str_key_raises_type_error_in_every_method(store, name, key):
    s, buf = store
    with pytest.raises(TypeError, match="must be str"):
        _call_with(s, name, key, buf.addr)
    # The same before setup: the key is checked first.
    with pytest.raises(TypeError, match="must be str"):
        _call_with(MooncakeDistributedStore(), name, key, buf.addr)


@pytest.mark.parametrize("keys", ["ab", b"ab", 5])
def test_a_batch_needs_a_list_of_keys(store, keys):
    s, buf = store
    batch = {
        "put_batch": lambda: s.put_batch(keys, [b"v", b"w"]),
        "upsert_batch": lambda: s.upsert_batch(keys, [b"v", b"w"]),
        "batch_put_from": lambda: s.batch_put_from(keys, [buf.addr] * 2, [1, 1]),
        "batch_upsert_from": lambda: s.batch_upsert_from(keys, [buf.addr] * 2, [1, 1]),
        "batch_get_into": lambda: s.batch_get_into(keys, [buf.addr] * 2, [1, 1]),
        "batch_put_from_multi_buffers": lambda: s.batch_put_from_multi_buffers(
            keys, [[buf.addr]] * 2, [[1]] * 2),
        "batch_get_into_multi_buffers": lambda: s.batch_get_into_multi_buffers(
            keys, [[buf.addr]] * 2, [[1]] * 2),
        "get_batch": lambda: s.get_batch(keys),
        "batch_get_buffer": lambda: s.batch_get_buffer(keys),
        "batch_is_exist": lambda: s.batch_is_exist(keys),
        "batch_remove": lambda: s.batch_remove(keys),
        "get_into_ranges": lambda: s.get_into_ranges([buf.addr], keys, [[[0]]], [[[0]]],
                                                     [[[1]]]),
    }
    for name, call in batch.items():
        with pytest.raises(TypeError):
            call()
    assert s.is_exist("a") == 0 and s.is_exist("ab") == 0, "nothing was written"


def test_a_non_str_pattern_raises_type_error(store):
    s, _ = store
    with pytest.raises(TypeError, match="must be str"):
        s.remove_by_regex(5)
    assert s.put("re\0x", b"1") == 0
    assert s.remove_by_regex("^re\\x00x$", True) == 1


@pytest.mark.parametrize("keys", [
    [""], ["", ""], ["", "a"], ["a", ""], ["ab", "cd"], ["é", "a\0b"], ["x", b"y"],
    ["%064x" % i for i in range(100)], [f"k{i}" for i in range(300)],
])
def test_packed_keys_point_at_every_key(keys):
    """The key arrays the library reads (one NUL-joined buffer for lists of str, fixed-length
    keys split by the library) hold every key's bytes at its pointer, empty keys included."""
    import ctypes
    from tidewire.mooncake_store.arguments import _key_list
    from tidewire.mooncake_store.native import _c_keys
    enc = _key_list(keys)
    assert enc == [k.encode("utf-8", "surrogatepass") if isinstance(k, str) else k
                   for k in keys]
    ptrs, lens, keep = _c_keys(enc)
    blob, ptr_array, len_array = keep
    assert len(ptr_array) == len(len_array) == len(enc)
    at = ctypes.cast(ptrs, ctypes.POINTER(ctypes.c_void_p))
    got = [ctypes.string_at(at[i] or 0, lens[i]) for i in range(len(enc))]
    assert got == enc
