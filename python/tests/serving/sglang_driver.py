"""Drives SGLang's own HiCache L3 backend for Mooncake Store (sglang 0.5.23,
``sglang.srt.mem_cache.storage.mooncake_store.mooncake_store.MooncakeStore``, unchanged) the way
``HiCacheController`` does: ``StorageBackendFactory.create_backend("mooncake", config,
host_pool)`` (whose ``__init__`` runs the backend's ``check_server`` when configured and its
put / is_exist / get warm-up), ``register_mem_pool_host``, then ``batch_set_v1``,
``batch_exists`` and ``batch_get_v1`` in chunks of ``STORAGE_BATCH_SIZE`` (128) pages, and
``clear``.

``--store tidewire`` puts the shim package first on ``sys.path``, so the backend's
``from mooncake.store import MooncakeDistributedStore`` loads ``tidewire.store``;
``--store mooncake`` leaves the real Mooncake wheel in place (run that inside a private network
namespace: Mooncake's listeners bind every address).

    sglang_driver.py --store S --master HOST:PORT --metrics-port N --pool mha|mla writer
    sglang_driver.py --store S --master HOST:PORT --metrics-port N --pool mha|mla reader

Pools, built from CPU tensors with ``pin_memory=False`` through SGLang's own device and host pool
classes:

- ``mha``: ``MHATokenToKVPool`` -> ``MHATokenToKVPoolHost``, ``page_first`` layout: each page is
  two objects (K and V, 128 KiB each), written with ``batch_put_from`` and read with
  ``batch_get_into`` (the single-buffer path); 256 pages (64 MiB) per round, two chunks.
- ``mla``: ``MLATokenToKVPool`` -> ``MLATokenToKVPoolHost``, ``layer_first`` layout: each page is
  one object in 8 pieces (one per layer, 36 KiB each), so the backend calls
  ``batch_put_from_multi_buffers`` / ``batch_get_into_multi_buffers``; 224 pages (63 MiB) per
  round, chunks of 128 and 96.

The writer owns the only segment (the reader mounts none), so every page the reader gets crosses
processes. The writer's store config comes from the environment (``MOONCAKE_MASTER``,
``MOONCAKE_PROTOCOL=tcp``, ...), the reader's from a JSON file
(``SGLANG_HICACHE_MOONCAKE_CONFIG_PATH``) with ``check_server`` on: the backend then waits for
the master's ``GET /get_all_segments`` (metrics port) to list the writer's segment.

Writer: builds its backend (warm-up), then for each round fills its host pages with bytes derived
from (pool, round), sets them (``batch_set_v1``), checks ``batch_exists``, sets round 0 again (the
backend skips pages that exist), prints ``{"step": "written", ...}`` and holds its segment until
stdin closes. Reader: prints ``{"step": "ready"}`` once imported, waits for the writer's line on
stdin, builds its own backend and host pool (its pages at other host indices, filled with a
sentinel), checks ``batch_exists`` and ``batch_get_v1`` of every round and compares every byte;
then a miss (pages never written: ``batch_exists`` 0, every ``batch_get_v1`` result False, the
host pages untouched) and ``clear()``: once right after a ``batch_exists`` of every page (the
count of pages it keeps is reported: Mooncake's ``remove_all`` without force keeps keys under a
read lease, and an exist query grants one), and once after the lease (``--lease-ms``): then no
page exists and the master lists no key. Both print one JSON object per step and a final
``{"step": "time", ...}`` with the medians over the rounds, in ms, of the whole round's calls
(64 MiB: set, exists, get); a failure prints ``{"error": ...}`` and exits 1.

Stand-in: SGLang's page hash (``sglang.srt.mem_cache.utils.get_hash_str``) JIT-compiles a C++
extension (``cpp_utils/hash_binding.cpp`` through torch's cpp_extension loader); the page keys
here are SHA-256 chained over the pages' token ids instead (``page_hashes``), 64 hex characters
as SGLang's are. Nothing else is replaced: no GPU is needed by the code paths driven here.
"""

import argparse
import hashlib
import json
import os
import random
import statistics
import struct
import sys
import tempfile
import time
import traceback
import urllib.request

STARTED = time.monotonic()
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

PAGE_SIZE = 32  # tokens per page
ROUNDS = 5  # fresh keys each round: 5 x 64 MiB in the writer's 512 MiB segment
GEOMETRY = {
    # 32 tokens x 4 layers x 8 heads x 64 dims x 2 bytes = 128 KiB for K and for V.
    "mha": dict(pages=256, layers=4, heads=8, head_dim=64),
    # 32 tokens x (512 + 64) dims x 2 bytes = 36 KiB per layer, 8 layers = 288 KiB per page.
    "mla": dict(pages=224, layers=8, kv_lora_rank=512, qk_rope_head_dim=64),
}
MODEL_NAME = "tidewire-ci/tiny-model"  # the backend prefixes every key with it
WARMUP_PREFIX = "sglang_mooncake_store_warmup_key"  # MooncakeStore.warmup's key prefix
SENTINEL = 0xA5


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, choices=["tidewire", "mooncake"])
    ap.add_argument("--master", required=True, help="master RPC address HOST:PORT")
    ap.add_argument("--metrics-port", type=int, required=True,
                    help="the master's metrics / admin HTTP port")
    ap.add_argument("--pool", required=True, choices=sorted(GEOMETRY))
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--segment", type=int, default=512 << 20,
                    help="the writer's global segment, bytes")
    ap.add_argument("--offload-dir", default="",
                    help="the writer's disk tier: set MOONCAKE_ENABLE_SSD_OFFLOAD=true and "
                    "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH=DIR, as SGLang users do (the backend "
                    "adds a rank_<dp>_<tp>_<pp>_<cp> subdirectory)")
    ap.add_argument("--lease-ms", type=int, default=3000,
                    help="the master's default_kv_lease_ttl, waited out before the last clear")
    ap.add_argument("role", choices=["writer", "reader"])
    return ap.parse_args(argv)


ARGS = parse_args()
if ARGS.store == "tidewire":
    # The shim first: `mooncake.store` is tidewire.store.
    sys.path[:0] = [os.path.join(REPO, "python", "tidewire", "shim"), os.path.join(REPO, "python")]

# JSON lines go to the real stdout; anything else that writes to fd 1 (native libraries, prints
# in imported modules) goes to stderr instead.
_OUT = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)


def emit(**kw):
    _OUT.write(json.dumps(kw) + "\n")
    _OUT.flush()


import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import (  # noqa: E402
    STORAGE_BATCH_SIZE,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
)
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

IMPORT_S = round(time.monotonic() - STARTED, 1)  # SGLang's import chain (most of a run)


# ------------------------------------------------------------------------------------------
# Keys and contents, the same in every process
# ------------------------------------------------------------------------------------------
def page_tokens(pool, round_name, pages):
    rnd = random.Random(f"sglang-driver/{pool}/{round_name}")
    return [[rnd.randrange(151936) for _ in range(PAGE_SIZE)] for _ in range(pages)]


def page_hashes(pages_tokens):
    """STAND-IN for SGLang's page hash (``get_hash_str``, a JIT-compiled C++ extension): each
    page's key is the SHA-256 of the previous page's digest followed by this page's token ids
    (int64, little-endian), as hex."""
    prior, keys = b"", []
    for tokens in pages_tokens:
        digest = hashlib.sha256(prior + struct.pack(f"<{len(tokens)}q", *tokens)).digest()
        keys.append(digest.hex())
        prior = digest
    return keys


def round_keys(pool, round_name):
    return page_hashes(page_tokens(pool, round_name, GEOMETRY[pool]["pages"]))


def expected_bytes(pool, round_no, shape):
    """The bytes of every page of a round, as the host pool's uint8 view indexed by token."""
    gen = torch.Generator().manual_seed(1_000_003 * (1 + round_no) + (7 if pool == "mla" else 0))
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)


# ------------------------------------------------------------------------------------------
# SGLang objects
# ------------------------------------------------------------------------------------------
def build_host_pool(pool):
    """A device pool on the CPU and its host pool, as SGLang's pool assembler builds them
    (``_build_mha_mla_host_pool``), with ``pin_memory=False`` and room for one round plus a
    page."""
    g = GEOMETRY[pool]
    tokens = g["pages"] * PAGE_SIZE
    ratio = 1.0 + 2.0 / g["pages"]  # host capacity: one round and two spare pages
    if pool == "mha":
        dev = MHATokenToKVPool(size=tokens, page_size=PAGE_SIZE, dtype=torch.bfloat16,
                               head_num=g["heads"], head_dim=g["head_dim"],
                               layer_num=g["layers"], device="cpu", enable_memory_saver=False,
                               enable_alt_stream=False)
        host = MHATokenToKVPoolHost(
            dev.get_device_pool_infos()[0].buffer_info, ratio, 0, PAGE_SIZE, "page_first",
            pin_memory=False, device="cpu", device_capacity_tokens=dev.size,
            start_layer=dev.start_layer, end_layer=dev.end_layer)
    else:
        dev = MLATokenToKVPool(size=tokens, page_size=PAGE_SIZE, dtype=torch.bfloat16,
                               kv_lora_rank=g["kv_lora_rank"],
                               qk_rope_head_dim=g["qk_rope_head_dim"], layer_num=g["layers"],
                               device="cpu", enable_memory_saver=False)
        host = MLATokenToKVPoolHost(
            dev.get_device_pool_infos()[0].buffer_info, ratio, 0, PAGE_SIZE, "layer_first",
            pin_memory=False, device="cpu", override_kv_cache_dim=dev.kv_cache_dim,
            device_capacity_tokens=dev.size, start_layer=dev.start_layer,
            end_layer=dev.end_layer, target_layer_num=dev.layer_num)
    return dev, host


def storage_config(pool, host):
    # What HiCacheController._generate_storage_config gives a single-rank server.
    return HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=pool == "mla", enable_storage_metrics=False,
        is_page_first_layout=host.layout == "page_first", model_name=MODEL_NAME)


def configure(role):
    """The writer's store config through the environment, the reader's through a config file
    (with check_server), each exactly as the backend reads it."""
    for k in list(os.environ):
        if k.startswith("MOONCAKE_") or k in ("SGLANG_HICACHE_MOONCAKE_CONFIG_PATH",
                                              "LOCAL_HOSTNAME"):
            del os.environ[k]
    if role == "writer":
        os.environ.update({
            "MOONCAKE_MASTER": ARGS.master,
            "MOONCAKE_LOCAL_HOSTNAME": "127.0.0.1",
            "MOONCAKE_TE_META_DATA_SERVER": "P2PHANDSHAKE",
            "MOONCAKE_GLOBAL_SEGMENT_SIZE": str(ARGS.segment),
            "MOONCAKE_PROTOCOL": "tcp",
            "MOONCAKE_DEVICE": "",
            "MOONCAKE_MASTER_METRICS_PORT": str(ARGS.metrics_port),
        })
        if ARGS.offload_dir:
            # SGLang's own settings for Mooncake's SSD offload (sglang/srt/environ.py): the
            # backend passes them to setup() as enable_ssd_offload / ssd_offload_path.
            os.environ.update({"MOONCAKE_ENABLE_SSD_OFFLOAD": "true",
                               "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": ARGS.offload_dir})
        return None
    fd, path = tempfile.mkstemp(prefix="sglang-mooncake-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({
            "local_hostname": "127.0.0.1",
            "metadata_server": "P2PHANDSHAKE",
            "global_segment_size": 0,  # a pure reader: every page it gets crosses processes
            "protocol": "tcp",
            "device_name": "",
            "master_server_address": ARGS.master,
            "master_metrics_port": ARGS.metrics_port,
            "check_server": True,
        }, f)
    os.environ["SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"] = path
    return path


def admin_get(route):
    host = ARGS.master.rsplit(":", 1)[0]
    with urllib.request.urlopen(f"http://{host}:{ARGS.metrics_port}/{route}", timeout=5) as r:
        return r.read().decode()


def rss_mib():
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return round(kib / 1024)


def make_backend(pool, role):
    path = configure(role)
    dev, host = build_host_pool(pool)
    t0 = time.perf_counter()
    backend = StorageBackendFactory.create_backend("mooncake", storage_config(pool, host), host)
    init_ms = (time.perf_counter() - t0) * 1000
    backend.register_mem_pool_host(host)
    if path:
        os.unlink(path)
    warm = [k for k in admin_get("get_all_keys").splitlines() if k.startswith(WARMUP_PREFIX)]
    store_module = type(backend.store).__module__
    emit(step="backend", role=role, pool=pool, store=store_module,
         backend=f"{type(backend).__module__}.{type(backend).__name__}",
         layout=host.layout, host_tokens=host.size, import_s=IMPORT_S, init_ms=round(init_ms, 1),
         warmup_keys_on_master=len(warm), rss_mib=rss_mib())
    if not warm:
        raise AssertionError("no warm-up key on the master after the backend's init")
    return dev, host, backend


def chunks(keys, indices):
    """(prefix keys, chunk keys, chunk host indices), 128 pages at a time, as the controller
    cuts a request."""
    for start in range(0, len(keys), STORAGE_BATCH_SIZE):
        end = start + STORAGE_BATCH_SIZE
        yield keys[:start], keys[start:end], indices[start * PAGE_SIZE:end * PAGE_SIZE]


def over_chunks(call, keys, indices):
    """``call(chunk keys, chunk host indices, extra_info)`` per chunk (``batch_set_v1`` or
    ``batch_get_v1``): (every page's result, ms in the calls)."""
    results, ms = [], 0.0
    for prefix, ck, ci in chunks(keys, indices):
        t0 = time.perf_counter()
        results += call(ck, ci, HiCacheStorageExtraInfo(prefix_keys=prefix))
        ms += (time.perf_counter() - t0) * 1000
    return results, ms


def exists_all(backend, keys, indices):
    """``batch_exists`` per chunk until one falls short: (pages found, ms in the calls)."""
    found, ms = 0, 0.0
    for prefix, ck, _ in chunks(keys, indices):
        t0 = time.perf_counter()
        n = backend.batch_exists(ck, HiCacheStorageExtraInfo(prefix_keys=prefix))
        found, ms = found + n, ms + (time.perf_counter() - t0) * 1000
        if n < len(ck):
            break
    return found, ms


def pages_present(backend, keys):
    """How many of ``keys`` exist, page by page (batch_exists of one page each)."""
    return sum(backend.batch_exists([k]) for k in keys)


def summary(times):
    return {k: round(statistics.median(v), 1) for k, v in times.items()}


# ------------------------------------------------------------------------------------------
# Roles
# ------------------------------------------------------------------------------------------
def writer():
    pool = ARGS.pool
    _dev, host, backend = make_backend(pool, "writer")
    g = GEOMETRY[pool]
    indices = host.alloc(g["pages"] * PAGE_SIZE)
    kv8 = host.kv_buffer.view(torch.uint8)
    page_bytes = kv8[:, indices[:PAGE_SIZE]].numel()
    times = {"set_ms": [], "exists_ms": []}
    for r in range(ARGS.rounds):
        keys = round_keys(pool, r)
        kv8[:, indices] = expected_bytes(pool, r, kv8[:, indices].shape)
        ok, ms = over_chunks(backend.batch_set_v1, keys, indices)
        if not all(ok):
            raise AssertionError(f"round {r}: batch_set_v1 failed for {ok.count(False)} of "
                                 f"{len(ok)} pages, first at page {ok.index(False)}")
        found, ems = exists_all(backend, keys, indices)
        if found != len(keys):
            raise AssertionError(f"round {r}: batch_exists found {found} of {len(keys)} pages")
        times["set_ms"].append(ms)
        times["exists_ms"].append(ems)
        emit(step="set", round=r, pages=len(keys), mib=round(len(keys) * page_bytes / 2**20, 1),
             set_ms=round(ms, 1), exists_ms=round(ems, 1))
    # Pages that exist are not put again: the backend answers True without a write.
    again, _ = over_chunks(backend.batch_set_v1, round_keys(pool, 0), indices)
    if not all(again):
        raise AssertionError(f"setting existing pages again gave {again.count(False)} False")
    emit(step="set_again", pages=len(again))
    emit(step="written", pool=pool, rounds=ARGS.rounds, pages=g["pages"],
         page_bytes=page_bytes, store=type(backend.store).__module__)
    emit(step="time", role="writer", **summary(times))
    sys.stdin.read()  # hold the segment until the test is done with it
    backend.close()
    emit(step="closed")


def reader():
    pool = ARGS.pool
    emit(step="ready")
    written = json.loads(sys.stdin.readline())
    if written.get("step") != "written":
        raise AssertionError(f"expected the writer's 'written' line, got {written}")
    _dev, host, backend = make_backend(pool, "reader")
    g = GEOMETRY[pool]
    host.alloc(PAGE_SIZE)  # one page first: the reader's pages sit at other host indices
    indices = host.alloc(g["pages"] * PAGE_SIZE)
    kv8 = host.kv_buffer.view(torch.uint8)
    times = {"exists_ms": [], "get_ms": []}
    checked = 0
    for r in range(written["rounds"]):
        keys = round_keys(pool, r)
        kv8[:, indices] = SENTINEL
        found, ems = exists_all(backend, keys, indices)
        if found != len(keys):
            raise AssertionError(f"round {r}: batch_exists found {found} of {len(keys)} pages")
        ok, ms = over_chunks(backend.batch_get_v1, keys, indices)
        if not all(ok):
            raise AssertionError(f"round {r}: batch_get_v1 failed for {ok.count(False)} of "
                                 f"{len(ok)} pages, first at page {ok.index(False)}")
        got = kv8[:, indices]
        want = expected_bytes(pool, r, got.shape)
        if not torch.equal(got, want):
            per_page = (got != want).reshape(got.shape[0], len(keys), -1).any(-1).any(0)
            bad = per_page.nonzero().flatten().tolist()
            raise AssertionError(f"round {r}: {len(bad)} of {len(keys)} pages differ, "
                                 f"first {bad[:5]}")
        checked += got.numel()
        times["exists_ms"].append(ems)
        times["get_ms"].append(ms)
        emit(step="get", round=r, pages=len(keys), mib=round(got.numel() / 2**20, 1),
             exists_ms=round(ems, 1), get_ms=round(ms, 1), bytes_checked=got.numel())

    # A miss: pages no one wrote.
    miss = round_keys(pool, "never-written")[:STORAGE_BATCH_SIZE]
    miss_idx = indices[:len(miss) * PAGE_SIZE]
    kv8[:, miss_idx] = SENTINEL
    n_exist = backend.batch_exists(miss, HiCacheStorageExtraInfo(prefix_keys=[]))
    res = backend.batch_get_v1(miss, miss_idx, HiCacheStorageExtraInfo(prefix_keys=[]))
    untouched = bool((kv8[:, miss_idx] == SENTINEL).all())
    emit(step="miss", pages=len(miss), exists=n_exist, get_true=sum(map(bool, res)),
         host_untouched=untouched)
    if n_exist != 0 or any(res) or not untouched:
        raise AssertionError(f"miss: batch_exists {n_exist}, batch_get_v1 True for "
                             f"{sum(map(bool, res))} pages, host pages untouched: {untouched}")

    # clear(): right after a lookup of every page (as a prefetch's batch_exists would), and
    # again once the read leases that lookup granted have run out.
    every = [k for r in range(written["rounds"]) for k in round_keys(pool, r)]
    looked_up = sum(exists_all(backend, round_keys(pool, r), indices)[0]
                    for r in range(written["rounds"]))
    backend.clear()
    left_now = pages_present(backend, every)
    last_query = time.monotonic()
    emit(step="clear_now", pages=len(every), looked_up=looked_up, pages_left=left_now)
    time.sleep(max(0.0, last_query + ARGS.lease_ms / 1000 + 0.5 - time.monotonic()))
    backend.clear()
    left = pages_present(backend, every)
    prefix_hits = [exists_all(backend, round_keys(pool, r), indices)[0]
                   for r in range(written["rounds"])]
    keys_left = admin_get("get_all_keys").splitlines()
    emit(step="clear", pages=len(every), pages_left=left, exists_per_round=prefix_hits,
         master_keys_left=len(keys_left))
    if left or any(prefix_hits) or keys_left:
        raise AssertionError(f"after clear(): {left} pages exist, batch_exists per round "
                             f"{prefix_hits}, the master lists {len(keys_left)} keys "
                             f"(first {keys_left[:3]})")
    emit(step="checked", pages=len(every), bytes_checked=checked)
    emit(step="time", role="reader", **summary(times))
    backend.close()


def main():
    try:
        (writer if ARGS.role == "writer" else reader)()
    except Exception as e:  # reported to the test, which fails on it
        emit(error=f"{type(e).__name__}: {e}", where=traceback.format_exc()[-1500:])
        sys.exit(1)


if __name__ == "__main__":
    main()
