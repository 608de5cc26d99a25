"""The pieces of ``vllm_driver.py``: the model shape, the JSON-line reporting, and the engine's
parts built with vLLM's own code (config, world, KV cache plan, ``MooncakeStoreWorker``)."""

import contextlib
import hashlib
import http.client
import json
import logging
import os
import random
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))

BLOCK = 16  # tokens per block
LAYERS = 8
KV_HEADS = 8
HEAD_DIM = 64
VOCAB = 32000
REQUESTS = 4  # requests per round
FULL_BLOCKS = 64  # full blocks per request: 4 x 64 x 8 layers x 32 KiB = 64 MiB per round
TAIL = 5  # tokens past the last full block (never saved: not a full block)
ROUNDS = 3
SENTINEL = 0x5A
MODEL_NAME = "tidewire-llama-8l-kv8"  # the store keys carry the model directory's name

# JSON lines go to the real stdout; everything else (vLLM's logging, native prints) to stderr.
OUT = None


def emit(**kw):
    OUT.write(json.dumps(kw) + "\n")
    OUT.flush()


def ms(t0):
    return round((time.perf_counter() - t0) * 1e3, 2)


class Failed(Exception):
    pass


def expect(cond, what):
    if not cond:
        raise Failed(what)


FAILURES = []  # checks that failed, "step: what"; the run goes on to the next step


@contextlib.contextmanager
def step(name):
    """One step: a failed check is printed, recorded and ends only this step."""
    try:
        yield
    except Failed as f:
        FAILURES.append(f"{name}: {f}")
        emit(step=name, failed=str(f))


# ------------------------------------------------------------------------------------------
# The engine's pieces, built with vLLM's own code
# ------------------------------------------------------------------------------------------
def prepare_env(tmp, role, args):
    """Environment read by vLLM and its store config; set before vLLM is imported."""
    model_dir = os.path.join(tmp, MODEL_NAME)
    os.makedirs(model_dir)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
            "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
            "num_hidden_layers": LAYERS, "vocab_size": VOCAB, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "bfloat16"}, f)
    # The writer's segment holds every round (3 x 64 MiB); the reader mounts a small one.
    segment = "512mb" if role == "writer" else "32mb"
    store = {"metadata_server": "P2PHANDSHAKE", "master_server_address": args.master,
             "protocol": "tcp", "device_name": "", "mode": "embedded",
             "global_segment_size": segment, "local_buffer_size": "64mb"}
    if getattr(args, "disk", False):
        # vLLM's configuration for Mooncake's SSD tier: `standalone-store` (the ranks mount no
        # segment; an external client owns the memory and the tier) with `enable_offload`.
        store.update(mode="standalone-store", global_segment_size=0, enable_offload=True)
    config_path = os.path.join(tmp, "mooncake.json")
    with open(config_path, "w") as f:
        json.dump(store, f)
    os.environ["MOONCAKE_CONFIG_PATH"] = config_path
    os.environ["VLLM_HOST_IP"] = "127.0.0.1"  # the store's local_hostname; no route lookup
    os.environ["VLLM_RPC_BASE_PATH"] = tmp  # each process its own LookupKey IPC socket
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("GLOG_minloglevel", "1")
    os.environ.pop("VLLM_MOONCAKE_STORE_TIER_LOG", None)
    return model_dir


def build_engine(tmp, model_dir, role, num_blocks):
    import torch
    from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig,
                             VllmConfig, set_current_vllm_config)
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.logger import configure_logging
    from vllm.v1.attention.backends.utils import (get_supported_kv_cache_layouts,
                                                  resolve_kv_cache_layout)
    from vllm.v1.core.kv_cache_planning import (get_global_kv_cache_groups,
                                                get_kv_cache_configs)
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.worker.utils import allocate_kv_cache

    model = ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype="bfloat16",
                        max_model_len=2048)
    kv_role = "kv_producer" if role == "writer" else "kv_consumer"
    cfg = VllmConfig(
        model_config=model, device_config=DeviceConfig(device="cpu"),
        cache_config=CacheConfig(block_size=BLOCK, num_gpu_blocks_override=num_blocks),
        kv_transfer_config=KVTransferConfig(kv_connector="MooncakeStoreConnector",
                                            kv_role=kv_role))
    configure_logging(cfg.logging_config)  # as the engine and its workers do at start
    # One rank: vLLM's own world of size 1 on gloo (no GPU, no NCCL).
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                 distributed_init_method=f"file://{tmp}/dist-init")
    with set_current_vllm_config(cfg):
        initialize_model_parallel(1, 1)
    specs = {f"model.layers.{i}.self_attn.attn":
             FullAttentionSpec(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD_DIM,
                               dtype=torch.bfloat16) for i in range(LAYERS)}
    # The engine core resolves one layout from the backends' preferences (FlashAttention
    # declares none: vLLM's default order, LBNHC first).
    layout = resolve_kv_cache_layout(
        cfg, [[lay.name for lay in get_supported_kv_cache_layouts([])]], specs.values())
    groups = get_global_kv_cache_groups(cfg, [specs])
    page = LAYERS * 2 * BLOCK * KV_HEADS * HEAD_DIM * 2
    kv_cache_config = get_kv_cache_configs(cfg, [specs], [num_blocks * page], groups)[0]
    cfg.cache_config.num_gpu_blocks = kv_cache_config.num_blocks  # as after profiling
    kv_caches = allocate_kv_cache(kv_cache_config, torch.device("cpu"), layout)
    return cfg, kv_cache_config, kv_caches, layout


def block_rows(kv_caches):
    """Per layer, the (num_blocks, page_bytes) uint8 view of its pages: the bytes vLLM's
    store layout sends as that layer's piece of a block."""
    import torch
    from vllm.utils.torch_utils import is_non_overlapping_and_dense

    rows = []
    for name in sorted(kv_caches, key=lambda n: int(n.split(".")[2])):
        t = kv_caches[name]
        expect(is_non_overlapping_and_dense(t[0]), f"{name}: a page is not dense")
        page = t[0].numel()
        expect(t.stride(0) == page, f"{name}: blocks are not one dense page apart")
        rows.append(torch.as_strided(t, (t.shape[0], page), (t.stride(0), 1))
                    .view(torch.uint8))
    return rows


class Prompts:
    """Token ids and vLLM block hashes (``hash_block_tokens``, chained, the engine's hash)."""

    def __init__(self, cfg):
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core import kv_cache_utils

        self.hash_fn = get_hash_fn_by_name(cfg.cache_config.prefix_caching_hash_algo)
        kv_cache_utils.init_none_hash(self.hash_fn)
        self.kcu = kv_cache_utils

    @staticmethod
    def tokens(tag, n=FULL_BLOCKS * BLOCK + TAIL):
        rnd = random.Random(f"tokens/{tag}")
        return [rnd.randrange(VOCAB) for _ in range(n)]

    def hashes(self, tokens):
        out, parent = [], None
        for i in range(len(tokens) // BLOCK):
            parent = self.kcu.hash_block_tokens(self.hash_fn, parent,
                                                tokens[i * BLOCK:(i + 1) * BLOCK])
            out.append(parent)
        return out


def request_tag(rnd, q):
    return f"round{rnd}/req{q}"


def expected_pages(tag):
    """The bytes of request ``tag``'s full blocks: (LAYERS, FULL_BLOCKS, page) uint8."""
    import torch

    seed = int.from_bytes(hashlib.sha256(f"pages/{tag}".encode()).digest()[:7], "little")
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (LAYERS, FULL_BLOCKS, 2 * BLOCK * KV_HEADS * HEAD_DIM * 2),
                         dtype=torch.uint8, generator=g)


class Engine:
    """The worker side of one vLLM engine plus the scheduler's LookupKeyClient."""

    def __init__(self, role, args, tmp):
        model_dir = prepare_env(tmp, role, args)
        t0 = time.perf_counter()
        import torch  # noqa: F401
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import worker as w
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.data import (
            LoadSpec, MooncakeStoreConnectorMetadata, ReqMeta, RequestTracker)

        self.w, self.LoadSpec, self.ReqMeta, self.RequestTracker = w, LoadSpec, ReqMeta, \
            RequestTracker
        self.Meta = MooncakeStoreConnectorMetadata
        import_ms = ms(t0)
        t0 = time.perf_counter()
        # Writer: every request of a round plus the null block 0 and spare; reader: more, so
        # its block ids differ from the writer's.
        num_blocks = REQUESTS * (FULL_BLOCKS + 1) + (24 if role == "writer" else 60)
        self.cfg, kcc, self.kv_caches, layout = build_engine(tmp, model_dir, role, num_blocks)
        self.num_blocks = kcc.num_blocks
        self.rows = block_rows(self.kv_caches)
        self.page = self.rows[0].shape[1] * len(self.rows)  # bytes of one key: every layer
        config_ms = ms(t0)
        t0 = time.perf_counter()
        self.worker = w.MooncakeStoreWorker(self.cfg, kcc)
        self.worker.register_kv_caches(self.kv_caches)
        self.client = w.LookupKeyClient(self.cfg)
        self.prompts = Prompts(self.cfg)
        self.db = self.worker.token_dbs[0]
        self.next_job = 0
        store = self.worker.store
        emit(step="setup", ms=ms(t0), import_ms=import_ms, config_ms=config_ms, role=role,
             store=type(store).__module__, layout=layout.name, num_blocks=self.num_blocks,
             key_bytes=self.page, layers=len(self.rows),
             piece_bytes=sorted(set(self.db.block_len)),
             pieces=len(self.db.kv_caches_base_addr),
             metrics_port=args.metrics_port)
        # Block ids this engine hands to requests: a shuffled pool without the null block 0.
        pool = list(range(1, self.num_blocks))
        random.Random(f"pool/{role}").shuffle(pool)
        self.pool = pool

    # -- requests, as the scheduler builds them ----------------------------------------------
    def alloc(self, q, nblocks):
        span = FULL_BLOCKS + 1
        return self.pool[q * span:q * span + nblocks]

    def save_meta(self, tag, q, tokens):
        hashes = self.prompts.hashes(tokens)
        tracker = self.RequestTracker(
            req_id=tag, token_len=len(tokens),
            allocated_block_ids=(self.alloc(q, -(-len(tokens) // BLOCK)),),
            prefill_end_tokens=len(tokens))
        req = self.ReqMeta.from_request_tracker(tracker, BLOCK, block_hashes=hashes,
                                                num_prompt_tokens=len(tokens))
        req.store_job_id = self.next_job  # the scheduler numbers store jobs the same way
        self.next_job += 1
        return req

    def load_meta(self, tag, q, tokens, hit):
        hashes = self.prompts.hashes(tokens)
        spec = self.LoadSpec(vllm_cached_tokens=0, kvpool_cached_tokens=hit.hit_length,
                             can_load=True, tail_key_boundaries=hit.tail_key_boundaries)
        tracker = self.RequestTracker(
            req_id=tag, token_len=len(tokens),
            allocated_block_ids=(self.alloc(q, -(-len(tokens) // BLOCK)),),
            prefill_end_tokens=len(tokens))
        return self.ReqMeta.from_request_tracker(tracker, BLOCK, load_spec=spec,
                                                 skip_save=True, block_hashes=hashes,
                                                 num_prompt_tokens=len(tokens))

    def lookup(self, tag, tokens):
        return self.client.lookup(tag, len(tokens), self.prompts.hashes(tokens))

    def keys(self, tokens):
        return [self.db.key_for(h) for h in self.prompts.hashes(tokens)]

    def stats(self):
        s = self.worker.get_kv_connector_stats()
        return s.reduce() if s is not None else {}

    # -- the worker's save and load steps ---------------------------------------------------
    def save_batch(self, reqs):
        """``wait_for_save`` without its CUDA event (the stand-in), then wait for the send
        thread as vLLM's reset does (``request_queue.join``) and retire the requests."""
        meta = self.Meta({r.req_id for r in reqs}, set())
        for r in reqs:
            meta.add_request(r)
        t0 = time.perf_counter()
        for r in meta.requests:
            if not r.can_save:
                continue
            r.current_event = None  # stand-in for torch.cuda.Event().record(): nothing to fence
            self.worker.kv_send_thread.add_request(r)
        self.worker.kv_send_thread.request_queue.join()
        took = ms(t0)
        done = self.worker.build_connector_worker_meta()
        want = {r.store_job_id: 1 for r in reqs}
        expect(done is not None and done.completed_saves == want,
               f"completed saves {done and done.completed_saves}, want {want}")
        self.worker.get_finished({r.req_id for r in reqs}, meta)
        return took

    def load_batch(self, reqs):
        meta = self.Meta({r.req_id for r in reqs}, set())
        for r in reqs:
            meta.add_request(r)
        t0 = time.perf_counter()
        self.worker.start_load_kv(meta)
        self.worker.recv_request_queue.join()
        took = ms(t0)
        _, done = self.worker.get_finished(set(), meta)
        expect(done == {r.req_id for r in reqs}, f"finished loads {done}")
        return took, self.worker.get_block_ids_with_load_errors()

    def close(self):
        """As vLLM's connector shuts down: ``worker.close()`` (the store); vLLM closes neither
        the LookupKey server nor its client (closing the server's socket under its thread
        aborts in ZMQ)."""
        from vllm.distributed import destroy_distributed_environment, destroy_model_parallel

        self.worker.close()
        destroy_model_parallel()
        destroy_distributed_environment()


def admin_keys(port):
    """The master's own key listing (``/get_all_keys``, served by Mooncake's master and
    tidewire's): an independent view of what the store holds."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/get_all_keys")
        reply = conn.getresponse()
        body = reply.read().decode(errors="replace")
    finally:
        conn.close()
    expect(reply.status == 200, f"/get_all_keys: HTTP {reply.status}")
    return body


# ------------------------------------------------------------------------------------------
# Roles
# ------------------------------------------------------------------------------------------
def check_lookups(e, rnd, want):
    t0 = time.perf_counter()
    hits = [e.lookup(request_tag(rnd, q), Prompts.tokens(request_tag(rnd, q))).hit_length
            for q in range(REQUESTS)]
    took = ms(t0)
    expect(hits == [want] * REQUESTS, f"round {rnd}: lookup hits {hits}, want {want}")
    return took, hits


def median(values):
    return statistics.median(values) if values else None


class WorkerLog(logging.Handler):
    """Collects the worker's log records that contain one of ``marks`` (vLLM logs the codes of
    failed keys and the tier summary; it returns neither)."""

    def __init__(self, w, *marks):
        super().__init__()
        self.log, self.marks, self.records = logging.getLogger(w.__name__), marks, []

    def emit(self, record):
        msg = record.getMessage()
        if any(m in msg for m in self.marks):
            self.records.append(msg)

    def __enter__(self):
        self.log.addHandler(self)
        return self

    def __exit__(self, *exc):
        self.log.removeHandler(self)
