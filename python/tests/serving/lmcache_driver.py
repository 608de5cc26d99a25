"""Drives LMCache's own ``mooncakestore://`` remote backend (PyPI ``lmcache`` 0.5.6, the
``MooncakestoreConnector`` in ``lmcache/v1/storage_backend/connector/mooncakestore_connector.py``
and the ``MooncakeLookupClient`` in ``lmcache/v1/lookup_client/mooncake_lookup_client.py``,
unchanged) through LMCache's ``StorageManager`` (a ``LocalCPUBackend`` plus a ``RemoteBackend``
with ``remote_url = mooncakestore://HOST:PORT/``), with ``mooncake.store`` being either
tidewire.store (through the shim package) or the real Mooncake wheel.

    lmcache_driver.py --store tidewire|mooncake --master HOST:PORT [--metrics-port N]
                      [--mode meta|zerocopy] writer|reader|probe

- ``meta`` is LMCache's default (``save_chunk_meta`` True): every chunk is written with
  ``put_parts(key, 28-byte header, kv bytes)`` and read with ``batch_get_buffer(keys)``, whose
  handles LMCache uses as buffers (``memoryview(h)``, ``torch.frombuffer(h)``, ``len(h)``).
- ``zerocopy`` (``save_chunk_meta`` False): ``batch_put_from`` / ``batch_get_into`` on the CPU
  pool that the connector registered with ``register_buffer``.

The writer owns the segment: it puts ROUNDS requests of N_CHUNKS chunks of 1 MiB (keys made by
LMCache's ``ChunkedTokenDatabase`` from token ids) with ``StorageManager.batched_put``, which is
fire-and-forget, so each round waits (bounded) until every key is visible through the remote
backend and no put task is left; then the first request again with other bytes (a put of
existing keys must keep the stored values), and a two-chunk request whose last chunk is
partial; with ``--metrics-port`` every key must be in the master's ``/get_all_keys``. It prints
``{"step": "ready"}``, waits for end of input, closes, and prints its TIME line. The reader (no
segment of its own, so every byte crosses processes) starts after ``ready``: misses (keys
never put: contains 0, an empty block mapping, ``batched_get`` None, lookup 0), then per round
``batched_contains``,
``get_block_mapping``, ``batched_get`` from the remote backend (every byte compared with what
the writer wrote, and the shapes, dtypes and format), LMCache's ``MooncakeLookupClient.lookup``
on the same tokens, prefix hits, the partial chunk, and removal (``StorageManager.remove`` and
``clear`` on the remote backend: the mooncakestore connector offers neither, which is checked
as such: nothing is removed), then the local CPU cache cleared while the remote copy stays.

``probe`` runs LMCache's setup path alone with ``--master`` as ``master_server_address`` and
reports whether the client reached a master (Mooncake ignores that key and dials
127.0.0.1:50051).

All roles print one JSON object per line per step; a failure is ``{"error": ...}`` and exit
status 1. The last line of a writer or reader is ``{"step": "time", ...}`` with medians in ms
over the rounds.

Nothing in LMCache needs a GPU on this path: it runs on LMCache's CPU device (``StubCPUDevice``)
and its pure-Python pinned-memory fallback (``lmcache.v1.platform.torch_ops``), both LMCache's
own; no stand-in of ours is used.
"""

import argparse
import json
import os
import statistics
import struct
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

N_CHUNKS = 64  # one request of 64 chunks of 256 tokens, 1 MiB each
ROUNDS = 3
CHUNK_TOKENS = 256
# kv_shape (num_layer, 2, chunk_size, num_kv_head, head_size) in bfloat16:
# 4 * 2 * 256 * 2 * 128 * 2 bytes = 1 MiB per chunk.
KV_SHAPE = (4, 2, CHUNK_TOKENS, 2, 128)
PARTIAL_TOKENS = CHUNK_TOKENS + 44  # a full chunk, then one of 44 tokens
VISIBLE_TIMEOUT_S = 60.0
MiB = 1 << 20


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, choices=["tidewire", "mooncake"])
    ap.add_argument("--master", required=True, help="HOST:PORT of the store master")
    ap.add_argument("--metrics-port", type=int, default=0,
                    help="the master's admin HTTP port: the writer also checks /get_all_keys")
    ap.add_argument("--mode", default="meta", choices=["meta", "zerocopy"])
    ap.add_argument("--segment-mib", type=int, default=512,
                    help="the writer's global_segment_size, MiB")
    ap.add_argument("--offload-dir", default="",
                    help="the writer's disk tier: LMCache's extra_config keys "
                    "mooncake_enable_ssd_offload / mooncake_ssd_offload_path, which its "
                    "connector hands to setup(dict) as enable_ssd_offload / ssd_offload_path")
    ap.add_argument("role", choices=["writer", "reader", "probe"],
                    help="probe: LMCache's setup with --master as master_server_address, "
                    "then the client's health_check (is a master reached?)")
    return ap.parse_args(argv)


ARGS = parse_args(sys.argv[1:])

# LMCache keys chain Python hashes of token chunks: writer and reader must agree on them, as
# LMCache itself tells a shared remote cache to do (PYTHONHASHSEED=0).
if os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:])

if ARGS.store == "tidewire":
    # The shim first: `mooncake.store` is tidewire.store.
    sys.path[:0] = [os.path.join(REPO, "python", "tidewire", "shim"), os.path.join(REPO, "python")]
    os.environ.setdefault("TIDEWIRE_LIB", os.path.join(REPO, "target", "release", "libtidewire.so"))
else:
    os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("LMCACHE_LOG_LEVEL", "WARNING")

import torch  # noqa: E402

import mooncake.store  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.event_manager import EventManager  # noqa: E402
from lmcache.v1.lookup_client.mooncake_lookup_client import MooncakeLookupClient  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector  # noqa: E402
from lmcache.v1.storage_backend.connector.mooncakestore_connector import (  # noqa: E402
    MooncakeStoreConfig,
    setup_mooncake_store,
)
from lmcache.v1.storage_backend.storage_manager import StorageManager  # noqa: E402
from lmcache.v1.token_database import ChunkedTokenDatabase  # noqa: E402

REMOTE = "RemoteBackend"
LOCAL = "LocalCPUBackend"
DTYPE = torch.bfloat16


def emit(**kw):
    print(json.dumps(kw), flush=True)


def ms_since(t0):
    return round((time.perf_counter() - t0) * 1000, 2)


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


# ------------------------------------------------------------------------------------------
# Deterministic tokens and chunk bytes (the same in both processes)
# ------------------------------------------------------------------------------------------
_POOL = torch.randint(0, 256, (4 * MiB,), dtype=torch.uint8,
                      generator=torch.Generator().manual_seed(0x1C4C4E))


def tokens_for(tag, n):
    """Token ids of one request; ``tag`` selects the request."""
    g = torch.Generator().manual_seed(1000 + tag)
    return torch.randint(0, 32000, (n,), dtype=torch.int64, generator=g).tolist()


def round_tokens(r):
    return tokens_for(r, N_CHUNKS * CHUNK_TOKENS)


MISS_TOKENS = 900  # a request that is never put
PARTIAL_TAG = 500
REPUT_TAG = 77


def chunk_bytes(tag, i, n):
    """``n`` bytes of chunk ``i`` of request ``tag``: cut from a random pool at an offset of
    their own, the first 16 bytes stamped with (tag, i), so no two chunks are alike."""
    off = (tag * 7919 + i * 104729) % (_POOL.numel() - n)
    t = _POOL[off:off + n].clone()
    t[:16] = torch.frombuffer(bytearray(struct.pack("<QQ", tag, i)), dtype=torch.uint8)
    return t


# ------------------------------------------------------------------------------------------
# LMCache set-up: its config, metadata, StorageManager and token database
# ------------------------------------------------------------------------------------------
def lmcache_config(role):
    writer = role == "writer"
    extra = {
        # The connector's setup keys (MooncakeStoreConfig._build_setup_dict forwards these and
        # any mooncake_<k> key as <k>; values are strings).
        "local_hostname": "127.0.0.1",
        "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": str((ARGS.segment_mib if writer else 0) * MiB),
        # Default mode reads a whole batch through the local buffer: it must hold 64 chunks.
        "local_buffer_size": str((64 if writer else 160) * MiB),
        "protocol": "tcp",
        "device_name": "",
        "master_server_address": ARGS.master,
        # A mooncake_<k> key goes to setup as <k>: Mooncake's own name for the device list.
        "mooncake_rdma_devices": "",
        # Read by LMCache's RemoteConnector, not sent to the store.
        "save_chunk_meta": ARGS.mode == "meta",
    }
    if writer and ARGS.offload_dir:
        # Mooncake's own setup-dict keys for SSD offload, through LMCache's mooncake_ prefix.
        extra["mooncake_enable_ssd_offload"] = "true"
        extra["mooncake_ssd_offload_path"] = ARGS.offload_dir
    return LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK_TOKENS,
        local_cpu=True,
        max_local_cpu_size=0.5,  # GB: the pool the connector registers
        remote_url=f"mooncakestore://{ARGS.master}/",
        remote_serde="naive",
        save_unfull_chunk=True,  # the partial last chunk of a request gets a key too
        extra_config=extra,
    )


# The dict the connector hands to store.setup(dict) (values are strings).
SETUP_KEYS = ["local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
              "protocol", "device_name", "master_server_address", "rdma_devices"]


def lmcache_metadata():
    return LMCacheMetadata(
        model_name="tidewire/lmcache-driver",
        world_size=1,
        local_world_size=1,
        worker_id=0,
        local_worker_id=0,
        kv_dtype=DTYPE,
        kv_shape=KV_SHAPE,
        use_mla=False,
        role="worker",
        chunk_size=CHUNK_TOKENS,
    )


class Lmcache:
    def __init__(self, role):
        t0 = time.perf_counter()
        self.config = lmcache_config(role)
        self.metadata = lmcache_metadata()
        # The backends, the connector and the store's setup.
        self.sm = StorageManager(self.config, self.metadata, EventManager())
        self.setup_ms = ms_since(t0)
        t0 = time.perf_counter()
        # LMCache's token database (it imports vLLM, when installed, for its hash function).
        self.tdb = ChunkedTokenDatabase(self.config, self.metadata)
        self.token_db_ms = ms_since(t0)
        backends = list(self.sm.storage_backends)
        check(backends == [LOCAL, REMOTE], f"backends {backends}")
        self.remote = self.sm.storage_backends[REMOTE]
        check(self.remote.connection is not None, "the remote backend has no connection "
              "(the connector failed to start: see stderr)")
        conn = self.remote.connection
        self.connector = conn.getWrappedConnector() if hasattr(conn, "getWrappedConnector") \
            else conn
        self.store = self.connector.store
        keys = sorted(self.connector.config.setup_config)
        want_keys = SETUP_KEYS + (["enable_ssd_offload", "ssd_offload_path"]
                                  if role == "writer" and ARGS.offload_dir else [])
        check(keys == sorted(want_keys), f"setup dict keys {keys}")
        check(self.connector.save_chunk_meta == (ARGS.mode == "meta"),
              f"save_chunk_meta is {self.connector.save_chunk_meta}")
        pool = self.sm.storage_backends[LOCAL].memory_allocator.pin_allocator.buffer
        self.pool = (pool.data_ptr(), pool.numel())
        check(self.connector.registered_buffer_ptr == self.pool[0],
              "the connector did not register LMCache's CPU pool "
              f"(register_buffer: {self.connector.registered_buffer_ptr}; see stderr)")

    def in_pool(self, objs):
        """Whether every object lies in the registered CPU pool (zero-copy source/target)."""
        lo, n = self.pool
        return all(lo <= o.data_ptr and o.data_ptr + o.get_size() <= lo + n for o in objs)

    def describe(self):
        return {
            "token_db_ms": self.token_db_ms,
            "store_module": type(self.store).__module__,
            "connector": type(self.connector).__name__,
            "backends": list(self.sm.storage_backends),
            "save_chunk_meta": self.connector.save_chunk_meta,
            "registered_pool_mib": self.pool[1] / MiB,
            "remote_metadata_bytes": self.connector.remote_metadata_bytes,
        }

    def chunks(self, tokens):
        """[(key, start, end)] as LMCache's token database makes them."""
        return [(k, s, e) for s, e, k in self.tdb.process_tokens(tokens)]

    def remote_hits(self, keys):
        hits, _ = self.sm.batched_contains(keys, search_range=[REMOTE])
        return hits

    def close(self):
        self.sm.close()


def expected_shape(ntok):
    return torch.Size([KV_SHAPE[1], KV_SHAPE[0], ntok, KV_SHAPE[3] * KV_SHAPE[4]])


# ------------------------------------------------------------------------------------------
# Writer
# ------------------------------------------------------------------------------------------
def put_request(lm, tag, tokens, data_tag=None):
    """Allocates one memory object per chunk from LMCache's pool, fills it with the chunk's
    bytes (those of ``data_tag`` when given), ``batched_put``s the request and waits until
    every key is visible remotely and no put task is left. Returns (keys, ms)."""
    chunks = lm.chunks(tokens)
    keys, objs = [], []
    for i, (key, s, e) in enumerate(chunks):
        shape = expected_shape(e - s)
        obj = lm.sm.allocate(shape, DTYPE, MemoryFormat.KV_2LTD)
        check(obj is not None, f"allocate {shape} failed")
        n = obj.get_size()
        check(n == shape.numel() * DTYPE.itemsize, f"object size {n} for {shape}")
        obj.raw_tensor[:n].copy_(chunk_bytes(tag if data_tag is None else data_tag, i, n))
        keys.append(key)
        objs.append(obj)
    check(lm.in_pool(objs), f"request {tag}: objects outside the registered pool")
    t0 = time.perf_counter()
    lm.sm.batched_put(keys, objs)
    deadline = time.monotonic() + VISIBLE_TIMEOUT_S
    while True:
        pending = len(lm.remote.put_tasks)
        hits = lm.remote_hits(keys)
        if hits == len(keys) and pending == 0:
            break
        if time.monotonic() > deadline:
            raise Failure(f"request {tag}: {hits}/{len(keys)} keys visible and {pending} put "
                          f"tasks pending after {VISIBLE_TIMEOUT_S} s")
        time.sleep(0.002)
    ms = ms_since(t0)
    check(lm.remote.put_failed_count == 0, f"{lm.remote.put_failed_count} remote puts failed")
    return keys, ms


def master_lists(keys):
    """Every key in the master's /get_all_keys (a check independent of LMCache)."""
    host = ARGS.master.rsplit(":", 1)[0]
    with urllib.request.urlopen(f"http://{host}:{ARGS.metrics_port}/get_all_keys",
                                timeout=10) as r:
        body = r.read().decode(errors="replace")
    listed = set(body.split())
    missing = [k for k in keys if k not in listed and k not in body]
    return missing


def writer():
    lm = Lmcache("writer")
    emit(step="setup", ms=lm.setup_ms, role="writer", mode=ARGS.mode, **lm.describe())
    put_ms, all_keys = [], []
    for r in range(ROUNDS):
        keys, ms = put_request(lm, r, round_tokens(r))
        put_ms.append(ms)
        all_keys += [k.to_string() for k in keys]
        emit(step="put", round=r, ms=ms, chunks=len(keys), mib=len(keys) * lm.connector.
             full_chunk_size_bytes / MiB)
    # Another engine saving the same prefix with other bytes: a put of existing keys leaves the
    # stored values (the reader checks round 0's original bytes).
    keys, ms = put_request(lm, 0, round_tokens(0), data_tag=REPUT_TAG)
    emit(step="reput", ms=ms, chunks=len(keys))
    keys, ms = put_request(lm, PARTIAL_TAG, tokens_for(PARTIAL_TAG, PARTIAL_TOKENS))
    all_keys += [k.to_string() for k in keys]
    emit(step="put_partial", ms=ms, chunks=len(keys), tokens=PARTIAL_TOKENS)
    if ARGS.metrics_port:
        missing = master_lists(all_keys)
        check(not missing, f"{len(missing)} keys not in the master's /get_all_keys, "
              f"first {missing[:2]}")
        emit(step="master_keys", listed=len(all_keys))
    emit(step="ready", rounds=ROUNDS, chunks=N_CHUNKS)
    sys.stdin.read()  # hold the segment until the reader is done
    t0 = time.perf_counter()
    lm.close()
    emit(step="closed", ms=ms_since(t0))
    emit(step="time", role="writer", store=ARGS.store, mode=ARGS.mode, chunks=N_CHUNKS,
         chunk_mib=1, put_ms=statistics.median(put_ms), put_rounds_ms=put_ms)


# ------------------------------------------------------------------------------------------
# Reader
# ------------------------------------------------------------------------------------------
def check_objects(tag, chunks, objs, what):
    check(len(objs) == len(chunks), f"{what}: {len(objs)} results for {len(chunks)} keys")
    nbytes = 0
    for i, ((key, s, e), obj) in enumerate(zip(chunks, objs)):
        check(obj is not None, f"{what}: chunk {i} ({key.to_string()}) came back None")
        shape = expected_shape(e - s)
        n = shape.numel() * DTYPE.itemsize
        check(obj.get_size() == n, f"{what}: chunk {i} is {obj.get_size()} bytes, want {n}")
        check(obj.get_shape() == shape, f"{what}: chunk {i} shape {obj.get_shape()}, want "
              f"{shape}")
        check(obj.get_dtype() == DTYPE, f"{what}: chunk {i} dtype {obj.get_dtype()}")
        check(obj.get_memory_format() == MemoryFormat.KV_2LTD,
              f"{what}: chunk {i} format {obj.get_memory_format()}")
        got = obj.raw_tensor[:n]
        want = chunk_bytes(tag, i, n)
        if not torch.equal(got, want):
            bad = int((got != want).nonzero()[0].item())
            raise Failure(f"{what}: chunk {i} ({key.to_string()}) differs from byte {bad} "
                          f"(got {int(got[bad])}, want {int(want[bad])})")
        nbytes += n
    return nbytes


def release(objs):
    for o in objs:
        if o is not None:
            o.ref_count_down()


def reader():
    sys.stdin.readline()  # the writer's "ready"
    lm = Lmcache("reader")
    emit(step="setup", ms=lm.setup_ms, role="reader", mode=ARGS.mode, **lm.describe())
    t0 = time.perf_counter()
    lookup = MooncakeLookupClient(lm.config, lm.metadata, ARGS.master)
    emit(step="lookup_client", ms=ms_since(t0),
         store_module=type(lookup.store).__module__)

    # Misses: a request that was never put.
    miss_tokens = tokens_for(MISS_TOKENS, 8 * CHUNK_TOKENS)
    miss = lm.chunks(miss_tokens)
    miss_keys = [k for k, _, _ in miss]
    t0 = time.perf_counter()
    hits, mapping = lm.sm.batched_contains(miss_keys)
    check((hits, mapping) == (0, {}), f"misses: batched_contains gave {hits}, {mapping}")
    check(lm.sm.get_block_mapping(miss) == {}, "misses: a block mapping for absent keys")
    check(not lm.remote.contains(miss_keys[0]), "misses: contains is True")
    objs = lm.sm.batched_get(miss_keys, location=REMOTE)
    check(objs == [None] * len(miss_keys), f"misses: batched_get gave {objs}")
    check(lookup.lookup(miss_tokens) == 0, "misses: lookup is not 0")
    emit(step="misses", ms=ms_since(t0), keys=len(miss_keys))

    contains_ms, mapping_ms, get_ms, lookup_ms = [], [], [], []
    for r in range(ROUNDS):
        tokens = round_tokens(r)
        chunks = lm.chunks(tokens)
        keys = [k for k, _, _ in chunks]
        t0 = time.perf_counter()
        hits, mapping = lm.sm.batched_contains(keys)
        contains_ms.append(ms_since(t0))
        check(hits == len(keys), f"round {r}: batched_contains {hits}/{len(keys)}")
        check(list(mapping) == [REMOTE] and mapping[REMOTE] == keys,
              f"round {r}: batched_contains mapping {list(mapping)}")
        t0 = time.perf_counter()
        block = lm.sm.get_block_mapping(chunks)
        mapping_ms.append(ms_since(t0))
        check(list(block) == [REMOTE] and block[REMOTE] == chunks,
              f"round {r}: block mapping {list(block)}")
        t0 = time.perf_counter()
        objs = lm.sm.batched_get([k for k, _, _ in block[REMOTE]], location=REMOTE)
        get_ms.append(ms_since(t0))
        nbytes = check_objects(r, chunks, objs, f"round {r}")
        check(lm.in_pool(objs), f"round {r}: objects outside the registered pool")
        release(objs)
        t0 = time.perf_counter()
        n = lookup.lookup(tokens)
        lookup_ms.append(ms_since(t0))
        check(n == len(tokens), f"round {r}: lookup {n}, want {len(tokens)}")
        # Prefix matching: half the request, then a chunk that was never put.
        half = N_CHUNKS // 2
        mixed = keys[:half] + miss_keys[:2] + keys[half:]
        check(lm.remote_hits(mixed) == half, f"round {r}: prefix hits on the remote backend")
        n = lookup.lookup(tokens[:half * CHUNK_TOKENS] + miss_tokens[:CHUNK_TOKENS])
        check(n == half * CHUNK_TOKENS, f"round {r}: prefix lookup {n}")
        emit(step="get", round=r, contains_ms=contains_ms[-1], get_ms=get_ms[-1],
             lookup_ms=lookup_ms[-1], chunks=len(objs), bytes_checked=nbytes)

    # The partial last chunk of a request.
    ptoks = tokens_for(PARTIAL_TAG, PARTIAL_TOKENS)
    pchunks = lm.chunks(ptoks)
    check([e - s for _, s, e in pchunks] == [CHUNK_TOKENS, PARTIAL_TOKENS - CHUNK_TOKENS],
          f"partial: chunks {[(s, e) for _, s, e in pchunks]}")
    pkeys = [k for k, _, _ in pchunks]
    check(lm.sm.batched_contains(pkeys)[0] == 2, "partial: not both chunks present")
    t0 = time.perf_counter()
    objs = lm.sm.batched_get(pkeys, location=REMOTE)
    nbytes = check_objects(PARTIAL_TAG, pchunks, objs, "partial")
    release(objs)
    check(lookup.lookup(ptoks) == PARTIAL_TOKENS, "partial: lookup")
    emit(step="partial", ms=ms_since(t0), bytes_checked=nbytes,
         tokens=[e - s for _, s, e in pchunks])

    # Removal: StorageManager.remove / clear on the remote backend. The mooncakestore
    # connector implements neither remove_sync nor clear, so both remove nothing (LMCache logs
    # the NotImplementedError and returns False / 0), and the key stays in the store.
    key0 = lm.chunks(round_tokens(0))[0][0]
    removed = lm.sm.remove(key0, locations=[REMOTE])
    cleared = lm.sm.clear(locations=[REMOTE])
    check(removed == 0 and cleared == 0, f"remote remove {removed}, clear {cleared}")
    check(lm.remote.contains(key0), "remote: the key went away although remove is not offered")
    # The local CPU cache (filled by batched_get's write-back) clears; the remote copy stays.
    all_keys = [k for r in range(ROUNDS) for k, _, _ in lm.chunks(round_tokens(r))]
    local_hits, _ = lm.sm.batched_contains(all_keys[:N_CHUNKS], search_range=[LOCAL])
    local_cleared = lm.sm.clear(locations=[LOCAL])
    check(local_cleared > 0, f"local clear cleared {local_cleared}")
    check(lm.sm.batched_contains(all_keys, search_range=[LOCAL])[0] == 0,
          "local cache not empty after clear")
    hits, mapping = lm.sm.batched_contains(all_keys)
    check(hits == len(all_keys) and list(mapping) == [REMOTE],
          f"after the local clear: {hits}/{len(all_keys)} hits in {list(mapping)}")
    emit(step="remove",
         remote_remove_offered=type(lm.connector).remove_sync is not RemoteConnector.remove_sync,
         remote_removed=removed, remote_cleared=cleared, local_hits_before=local_hits,
         local_cleared_tokens=local_cleared, remote_hits_after=hits)

    t0 = time.perf_counter()
    lookup.close()
    lm.close()
    emit(step="closed", ms=ms_since(t0))
    emit(step="time", role="reader", store=ARGS.store, mode=ARGS.mode, chunks=N_CHUNKS,
         chunk_mib=1, contains_ms=statistics.median(contains_ms),
         block_mapping_ms=statistics.median(mapping_ms), get_ms=statistics.median(get_ms),
         lookup_ms=statistics.median(lookup_ms), contains_rounds_ms=contains_ms,
         get_rounds_ms=get_ms)


# ------------------------------------------------------------------------------------------
# Probe: does the store honour LMCache's `master_server_address` key?
# ------------------------------------------------------------------------------------------
def probe():
    """LMCache's own setup path (``MooncakeStoreConfig.load_from_lmcache_config`` and
    ``setup_mooncake_store``, which ignores setup's return code) with ``--master`` as
    ``master_server_address``. Pointed at an address where no master listens, a store that
    honours the key is not connected afterwards (health_check != 0); Mooncake, which ignores the
    key and dials 127.0.0.1:50051, is connected when a master listens there."""
    cfg = MooncakeStoreConfig.load_from_lmcache_config(lmcache_config("reader"))
    check(cfg.setup_config.get("master_server_address") == ARGS.master,
          f"setup dict {cfg.setup_config}")
    store = mooncake.store.MooncakeDistributedStore()
    t0 = time.perf_counter()
    setup_mooncake_store(store, cfg)
    ms = ms_since(t0)
    health = store.health_check()
    emit(step="probe", ms=ms, store_module=type(store).__module__,
         master_server_address=ARGS.master, setup_keys=sorted(cfg.setup_config),
         health_check=health, connected=health == 0)
    store.close()


def main():
    try:
        {"writer": writer, "reader": reader, "probe": probe}[ARGS.role]()
    except Exception as e:  # reported to the test, which fails on it
        import traceback

        traceback.print_exc()
        emit(error=f"{type(e).__name__}: {e}")
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    # A native thread of the store client must not keep a finished driver alive.
    os._exit(0)


if __name__ == "__main__":
    main()
