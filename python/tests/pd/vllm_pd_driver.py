"""Drives vLLM's own P/D connector (vllm 0.33.0, ``MooncakeConnector`` from
``vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py``, unchanged, both
its scheduler and its worker side) between a prefill (``kv_producer``) and a decode
(``kv_consumer``) process over TCP (``mooncake_protocol: tcp``).

    vllm_pd_driver.py --engine tidewire|mooncake [--bootstrap-port N] prefill|decode

Each process is a one-rank vLLM engine built with vLLM's code, less the model: ``VllmConfig``
(a Llama-shaped model directory with only ``config.json``: 8 layers, 8 KV heads of 64, bf16;
blocks of 32 tokens, prefix caching off; ``KVTransferConfig(kv_connector="MooncakeConnector",
kv_connector_extra_config={"mooncake_protocol": "tcp", "bootstrap_server_address": ...})``), a
gloo world of one rank, the KV cache plan and CPU KV tensors (``get_kv_cache_configs``,
``allocate_kv_cache`` in the layout the connector asks for), the worker-side connector
(``ensure_kv_transfer_initialized`` + ``register_kv_caches``: engine set-up,
``batch_register_memory``, the ZMQ side channel) and vLLM's ``Scheduler``, which creates the
scheduler-side connector. The prefill process also runs vLLM's ``MooncakeBootstrapServer`` on
127.0.0.1 (named by ``bootstrap_server_address``, so the worker does not start its own on
0.0.0.0).

An engine thread steps like vLLM's engine core: ``schedule()``; the model-runner step through
``KVConnectorModelRunnerMixin`` (``set_forward_context`` and ``_get_kv_connector_output``:
``bind_connector_metadata``, ``start_load_kv``, ``get_transfer_results``,
``get_block_ids_with_load_errors``); ``update_from_output``.

- prefill ``add``: requests with ``kv_transfer_params = {"do_remote_decode": True,
  "transfer_id": ...}`` and ``max_tokens=1``; the forward pass is the stand-in: it writes each
  scheduled block's bytes (seeded by the request's tag and the block's place in the prompt) and
  samples one token. The request finishes, ``request_finished`` keeps its blocks for the
  decode side, and the connector's sender thread writes them when the decode asks.
- decode ``add``: the same prompts with ``{"do_remote_prefill": True, "remote_engine_id",
  "remote_bootstrap_addr", "transfer_id"}`` (what vLLM's P/D proxy passes); the scheduler parks
  them in ``WAITING_FOR_REMOTE_KVS`` and the worker pulls over the side channel. The moment a
  request shows in ``finished_recving`` every byte of every block it got is compared (all layers,
  K and V), then it runs its one decode step (the stand-in samples a token) and finishes.
  A request whose load fails (``invalid_block_ids`` / ``failed_recving``) is checked for blocks
  left untouched.
- decode ``unregister`` / ``restore``: the connector's ``unregister_kv_caches`` /
  ``restore_kv_caches`` (its sleep-mode pair: ``batch_unregister_memory`` /
  ``batch_register_memory`` of the KV caches).

Stand-ins: the model (its forward pass writes seeded bytes into the scheduled KV blocks and
samples a fixed token) and the GPU (CPU KV tensors; ``torch.accelerator.current_device_index``,
which raises in the CUDA build without a driver, returns 0).
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
import time
from typing import Any, Dict, List, Optional, Set

import pd_driver_util as du

BLOCK = 32  # tokens per block (vLLM's CPU attention takes multiples of 32)
LAYERS = 8
KV_HEADS = 8
HEAD_DIM = 64
VOCAB = 32000
NUM_BLOCKS = 320
MODEL_NAME = "tidewire-llama-8l-kv8"
SENTINEL = 0x5A
STEP_IDLE_S = 0.0005
REQUEST_TIMEOUT_S = 90


def set_environment(tmp: str) -> str:
    """What vLLM reads from the environment, and the model directory; before vLLM imports."""
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ["VLLM_HOST_IP"] = "127.0.0.1"  # the engine's and the side channel's address
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["VLLM_RPC_BASE_PATH"] = tmp
    os.environ.setdefault("GLOG_minloglevel", "1")
    model_dir = os.path.join(tmp, MODEL_NAME)
    os.makedirs(model_dir)
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
            "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
            "num_hidden_layers": LAYERS, "vocab_size": VOCAB, "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "bfloat16"}, f)
    return model_dir


def stand_in_for_the_cuda_device() -> None:
    """STAND-IN: the connector worker asks ``torch.accelerator.current_device_index()``, which
    raises in the CUDA build of torch without a driver; there is no device here: index 0."""
    import torch

    torch.accelerator.current_device_index = lambda: 0


def block_bytes(tag: str, index: int, nbytes: int) -> Any:
    """The bytes block ``index`` of request ``tag`` holds on one layer (uint8 tensor)."""
    import torch

    seed = int.from_bytes(hashlib.sha256(f"vllm-pd/{tag}/{index}".encode()).digest()[:7],
                          "little")
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8,
                         generator=torch.Generator().manual_seed(seed))


def prompt(tag: str, blocks: int) -> List[int]:
    import random

    rnd = random.Random(f"vllm-pd/prompt/{tag}")
    return [rnd.randrange(VOCAB) for _ in range(blocks * BLOCK)]


class Engine:
    """One vLLM engine, less the model: config, world, KV caches, connector, scheduler."""

    def __init__(self, role: str, model_dir: str, tmp: str, bootstrap: str, engine_id: str):
        import torch
        from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig,
                                 SchedulerConfig, VllmConfig, set_current_vllm_config)
        from vllm.distributed import init_distributed_environment, initialize_model_parallel
        from vllm.distributed.kv_transfer.kv_transfer_state import (
            ensure_kv_transfer_initialized, get_kv_transfer_group)
        from vllm.v1.attention.backends.utils import (get_supported_kv_cache_layouts,
                                                      resolve_kv_cache_layout)
        from vllm.v1.core.kv_cache_planning import (get_global_kv_cache_groups,
                                                    get_kv_cache_configs)
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import FullAttentionSpec
        from vllm.v1.structured_output import StructuredOutputManager
        from vllm.v1.worker.utils import allocate_kv_cache

        self.torch = torch
        self.role = role
        kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
        model = ModelConfig(model=model_dir, skip_tokenizer_init=True, dtype="bfloat16",
                            max_model_len=4096)
        self.cfg = VllmConfig(
            model_config=model, device_config=DeviceConfig(device="cpu"),
            cache_config=CacheConfig(block_size=BLOCK, num_gpu_blocks_override=NUM_BLOCKS,
                                     enable_prefix_caching=False),
            scheduler_config=SchedulerConfig(max_num_batched_tokens=16384, max_num_seqs=64,
                                             max_model_len=4096, is_encoder_decoder=False),
            kv_transfer_config=KVTransferConfig(
                kv_connector="MooncakeConnector", kv_role=kv_role, engine_id=engine_id,
                kv_connector_extra_config={"mooncake_protocol": "tcp",
                                           "bootstrap_server_address": bootstrap}))
        from vllm.logger import configure_logging

        configure_logging(self.cfg.logging_config)  # as the engine and its workers do at start
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"file://{tmp}/dist-init")
        with set_current_vllm_config(self.cfg):
            initialize_model_parallel(1, 1)
        specs = {f"model.layers.{i}.self_attn.attn":
                 FullAttentionSpec(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD_DIM,
                                   dtype=torch.bfloat16) for i in range(LAYERS)}
        self.layout = resolve_kv_cache_layout(
            self.cfg, [[lay.name for lay in get_supported_kv_cache_layouts([])]],
            specs.values())
        groups = get_global_kv_cache_groups(self.cfg, [specs])
        page = LAYERS * 2 * BLOCK * KV_HEADS * HEAD_DIM * 2
        self.kv_cache_config = get_kv_cache_configs(self.cfg, [specs], [NUM_BLOCKS * page],
                                                    groups)[0]
        self.cfg.cache_config.num_gpu_blocks = self.kv_cache_config.num_blocks
        self.num_blocks = self.kv_cache_config.num_blocks
        with set_current_vllm_config(self.cfg):
            self.kv_caches = allocate_kv_cache(self.kv_cache_config, torch.device("cpu"),
                                               self.layout)
            ensure_kv_transfer_initialized(self.cfg, self.kv_cache_config)
            self.connector = get_kv_transfer_group()
            self.connector.register_kv_caches(self.kv_caches)
            self.scheduler = Scheduler(self.cfg, self.kv_cache_config,
                                       StructuredOutputManager(self.cfg), block_size=BLOCK)
        self.layer_names = sorted(self.kv_caches, key=lambda n: int(n.split(".")[2]))
        self.block_dim = self.find_block_dim()
        self.block_nbytes = self.block_view(self.layer_names[0], 0).numel() * 2

    # -- blocks -----------------------------------------------------------------------------
    def find_block_dim(self) -> int:
        tensor = self.kv_caches[self.layer_names[0]]
        dims = [d for d, size in enumerate(tensor.shape) if size == self.num_blocks]
        if len(dims) != 1:
            raise RuntimeError(f"no single block dimension in {tuple(tensor.shape)}")
        return dims[0]

    def block_view(self, layer: str, block: int) -> Any:
        """Block ``block`` of one layer (K and V), whatever the layout puts around it."""
        return self.kv_caches[layer].select(self.block_dim, block)

    def write_block(self, tag: str, index: int, block: int) -> None:
        for li, layer in enumerate(self.layer_names):
            view = self.block_view(layer, block)
            data = block_bytes(f"{tag}/L{li}", index, self.block_nbytes)
            view.copy_(data.view(self.torch.bfloat16).view(view.shape))

    def block_is(self, tag: str, index: int, block: int) -> bool:
        torch = self.torch
        for li, layer in enumerate(self.layer_names):
            view = self.block_view(layer, block)
            data = block_bytes(f"{tag}/L{li}", index, self.block_nbytes)
            if not torch.equal(view.contiguous().view(torch.uint8).reshape(-1), data):
                return False
        return True

    def fill_blocks(self, blocks: List[int], value: int) -> None:
        for layer in self.layer_names:
            for block in blocks:
                self.block_view(layer, block).view(self.torch.uint8).fill_(value)

    def blocks_untouched(self, blocks: List[int]) -> bool:
        return all(bool((self.block_view(layer, b).view(self.torch.uint8) == SENTINEL).all())
                   for layer in self.layer_names for b in blocks)

    def block_ids(self, req_id: str) -> List[int]:
        return list(self.scheduler.kv_cache_manager.get_block_ids(req_id)[0])

    # -- one engine step ----------------------------------------------------------------------
    def step(self, forward: Any, before_load: Any) -> Any:
        """``schedule()``, the model-runner step (``forward`` stands in for the model;
        ``before_load`` sees the output before the connector starts this step's loads), and
        ``update_from_output``; returns (scheduler output, KV connector output)."""
        from vllm.forward_context import set_forward_context
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.worker.kv_connector_model_runner_mixin import KVConnectorModelRunnerMixin

        out = self.scheduler.schedule()
        sampled: Dict[str, List[int]] = {}
        with set_forward_context(None, self.cfg):
            with KVConnectorModelRunnerMixin._get_kv_connector_output(out) as kvo:
                before_load(out)
                if out.total_num_scheduled_tokens > 0:
                    sampled = forward(out)
        req_ids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(
            req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=[sampled.get(r, []) for r in req_ids],
            kv_connector_output=kvo)
        self.scheduler.update_from_output(out, mro)
        return out, kvo


class Role:
    """A prefill or decode engine stepping on its own thread; requests arrive by command."""

    role_name = ""

    def __init__(self, engine: Engine, args: Any):
        self.engine = engine
        self.args = args
        self.incoming: "queue.Queue[Any]" = queue.Queue()
        self.lock = threading.Lock()
        self.times: Dict[str, List[float]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, name="pd-engine", daemon=True)
        self.error: Optional[str] = None
        self.thread.start()

    def loop(self) -> None:
        try:
            while not self.stop.is_set():
                while not self.incoming.empty():
                    self.engine.scheduler.add_request(self.incoming.get())
                if not self.engine.scheduler.has_requests() and self.incoming.empty():
                    self.idle()
                    time.sleep(STEP_IDLE_S)
                    continue
                _, kvo = self.engine.step(self.forward, self.before_load)
                self.after_step(kvo)
                time.sleep(STEP_IDLE_S)
        except Exception as exc:  # reported by the next command
            import traceback

            traceback.print_exc()
            self.error = f"engine thread: {type(exc).__name__}: {exc}"

    def idle(self) -> None:
        pass

    def forward(self, out: Any) -> Dict[str, List[int]]:
        raise NotImplementedError

    def before_load(self, out: Any) -> None:
        pass

    def after_step(self, kvo: Any) -> None:
        pass

    def request(self, req_id: str, tokens: List[int], params: Dict[str, Any],
                max_tokens: int) -> Any:
        from vllm import SamplingParams
        from vllm.v1.request import Request

        sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True,
                                  extra_args={"kv_transfer_params": params})
        return Request(req_id, tokens, sampling, None)

    def check_alive(self) -> None:
        if self.error:
            raise RuntimeError(self.error)

    def report(self, command: Dict[str, Any]) -> None:
        self.check_alive()
        with self.lock:
            du.emit(times={f"{k}_{self.role_name}_ms" if not k.endswith("_mib")
                           else f"{k}_{self.role_name}": du.median(v)
                           for k, v in self.times.items()})

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


# ------------------------------------------------------------------------------------------
# prefill
# ------------------------------------------------------------------------------------------
class Prefill(Role):
    """Prefills requests for remote decode; the connector keeps their blocks for the decode
    side until it has pulled them (``finished_sending``)."""

    role_name = "prefill"

    def __init__(self, engine: Engine, args: Any):
        self.tags: Dict[str, str] = {}
        self.sent: Set[str] = set()
        self.label = ""
        super().__init__(engine, args)

    def add(self, command: Dict[str, Any]) -> None:
        self.check_alive()
        with self.lock:
            self.label = command["label"]
        for req in command["requests"]:
            tag = req["tag"]
            self.tags[tag] = tag
            params = {"do_remote_decode": True, "transfer_id": req["transfer_id"]}
            self.incoming.put(self.request(tag, prompt(tag, req["blocks"]), params, 1))
        du.emit(step="added", label=command["label"], count=len(command["requests"]))

    def forward(self, out: Any) -> Dict[str, List[int]]:
        """STAND-IN for the model: the KV bytes of every scheduled prompt block, one token."""
        sampled: Dict[str, List[int]] = {}
        for new in out.scheduled_new_reqs:
            blocks = list(new.block_ids[0])
            for index, block in enumerate(blocks):
                self.engine.write_block(new.req_id, index, block)
            sampled[new.req_id] = [7]
        return sampled

    def after_step(self, kvo: Any) -> None:
        """Requests the connector reports sent, and the time of each of its
        ``batch_transfer_sync_write`` calls (its own stats), under the current label."""
        stats = kvo.kv_connector_stats
        with self.lock:
            self.sent.update(kvo.finished_sending or ())
            if stats is not None and stats.data.get("transfer_duration"):
                durations = [d * 1e3 for d in stats.data["transfer_duration"]]
                self.times.setdefault(f"{self.label}_write", []).extend(durations)
                self.times.setdefault(f"{self.label}_write_mib", []).extend(
                    b / (1 << 20) for b in stats.data["bytes_transferred"])

    def wait_sent(self, command: Dict[str, Any]) -> None:
        """Until the connector reports the decode side has pulled every named request."""
        tags = set(command["tags"])
        with du.case(f"{command['label']}/prefill"):
            ok = du.wait_until(lambda: tags <= self.sent, REQUEST_TIMEOUT_S, 0.01)
            self.check_alive()
            du.expect(ok, f"not reported sent: {sorted(tags - self.sent)}")


# ------------------------------------------------------------------------------------------
# decode
# ------------------------------------------------------------------------------------------
class Decode(Role):
    """Receives prefilled requests; checks each the moment its KV is reported received."""

    role_name = "decode"

    def __init__(self, engine: Engine, args: Any, bootstrap: str, prefill_engine: str):
        self.bootstrap = bootstrap
        self.prefill_engine = prefill_engine
        self.pending: Dict[str, Dict[str, Any]] = {}
        self.results: Dict[str, Dict[str, Any]] = {}
        super().__init__(engine, args)

    def add(self, command: Dict[str, Any]) -> None:
        """Adds requests, ``stagger_ms`` apart (0: all at once)."""
        self.check_alive()
        for k, req in enumerate(command["requests"]):
            if k and command.get("stagger_ms"):
                time.sleep(command["stagger_ms"] / 1e3)
            tag = req["tag"]
            params = {"do_remote_prefill": True, "remote_engine_id": self.prefill_engine,
                      "remote_bootstrap_addr": f"http://{self.bootstrap}",
                      "transfer_id": req["transfer_id"]}
            with self.lock:
                self.pending[tag] = {"label": command["label"], "blocks": req["blocks"],
                                     "t0": time.perf_counter(), "expect": command["expect"]}
            self.incoming.put(self.request(tag, prompt(tag, req["blocks"]), params, 1))
        du.emit(step="added", label=command["label"], count=len(command["requests"]))

    def forward(self, out: Any) -> Dict[str, List[int]]:
        """STAND-IN for the model: one sampled token for every scheduled request."""
        return {r: [11] for r in out.num_scheduled_tokens}

    def before_load(self, out: Any) -> None:
        """The blocks the scheduler gave each request to load into (from the connector's own
        metadata) are set to the sentinel before the connector starts pulling."""
        meta = out.kv_connector_metadata
        for reqs in getattr(meta, "reqs_to_recv", {}).values():
            for req_id, pull in reqs.items():
                ids = list(pull.local_block_ids[0]) if pull.local_block_ids else []
                self.engine.fill_blocks(ids, SENTINEL)
                with self.lock:
                    if req_id in self.pending:
                        self.pending[req_id]["blocks_ids"] = ids

    def after_step(self, kvo: Any) -> None:
        """Checks each request the moment it is reported received (or failed)."""
        now = time.perf_counter()
        with self.lock:
            received = set(kvo.finished_recving or ())
            failed = set(kvo.failed_recving or ())
            invalid = set(kvo.invalid_block_ids or ())
            for tag in list(self.pending):
                ids = self.pending[tag].get("blocks_ids") or []
                if tag in failed or (invalid and invalid & set(ids)):
                    self.finish(tag, "failed", invalid & set(ids), now)
                elif tag in received:
                    self.finish(tag, "received", set(), now)

    def finish(self, tag: str, outcome: str, invalid: Set[int], now: float) -> None:
        info = self.pending.pop(tag)
        took = round((now - info["t0"]) * 1e3, 3)
        ids = info.get("blocks_ids") or []
        wrong: List[int] = []
        if outcome == "received":
            wrong = [i for i, b in enumerate(ids) if not self.engine.block_is(tag, i, b)]
        untouched = self.engine.blocks_untouched(ids) if outcome == "failed" else None
        self.results[tag] = {"label": info["label"], "outcome": outcome, "ms": took,
                             "blocks": len(ids), "wrong": wrong, "invalid": len(invalid),
                             "untouched": untouched, "expect": info["expect"]}

    def wait(self, command: Dict[str, Any]) -> None:
        """Until every named request has a verdict; then one checked case per request."""
        tags = list(command["tags"])
        du.wait_until(lambda: all(t in self.results for t in tags) or bool(self.error),
                      REQUEST_TIMEOUT_S, 0.01)
        self.check_alive()
        for tag in tags:
            with du.case(f"{command['label']}/decode/{tag}"):
                res = self.results.get(tag)
                if res is None:
                    raise du.CheckFailed(f"{tag}: no verdict in {REQUEST_TIMEOUT_S} s")
                du.emit(step="request", tag=tag, **res)
                if res["expect"] == "success":
                    du.expect(res["outcome"] == "received", f"{tag}: load failed")
                    du.expect(not res["wrong"], f"{tag}: {len(res['wrong'])} of "
                                                f"{res['blocks']} blocks wrong "
                                                f"({res['wrong'][:6]})")
                    self.times.setdefault(res["label"], []).append(res["ms"])
                else:
                    du.expect(res["outcome"] == "failed", f"{tag}: loaded, want a failure")
                    du.expect(res["invalid"] > 0 or res["blocks"] == 0,
                              f"{tag}: failed without load-error blocks")
                    du.expect(bool(res["untouched"]), f"{tag}: a failed load wrote blocks")

    def unregister(self, command: Dict[str, Any]) -> None:
        self.engine.connector.unregister_kv_caches()
        du.emit(step="unregistered")

    def restore(self, command: Dict[str, Any]) -> None:
        self.engine.connector.restore_kv_caches()
        du.emit(step="restored")


def main() -> None:
    args = du.parse_args(__doc__.split("\n\n")[0],
                         lambda p: p.add_argument("--bootstrap-port", type=int, default=0))
    du.start(args.engine)
    tmp = du.temp_dir(f"vllm-pd-{args.role}-")
    model_dir = set_environment(tmp)
    stand_in_for_the_cuda_device()
    if args.role == "prefill":
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_connector import (
            MooncakeBootstrapServer)

        port = du.free_port()
        bootstrap = f"127.0.0.1:{port}"
        server = MooncakeBootstrapServer("127.0.0.1", port)
        server.start()
        engine = Engine("prefill", model_dir, tmp, bootstrap, "pd-prefill")
        role = Prefill(engine, args)
        du.emit(ready={"bootstrap": bootstrap, "engine_id": "pd-prefill",
                       "engine": du.engine_module(), "layout": str(engine.layout),
                       "num_blocks": engine.num_blocks})
        du.serve({"add": role.add, "wait_sent": role.wait_sent, "report": role.report},
                 close=role.close)
    else:
        du.emit(step="started")
        state: Dict[str, Any] = {}

        def connect(command: Dict[str, Any]) -> None:
            engine = Engine("decode", model_dir, tmp, command["bootstrap"], "pd-decode")
            state["role"] = Decode(engine, args, command["bootstrap"], command["engine_id"])
            du.emit(step="connected", engine=du.engine_module(), layout=str(engine.layout),
                    num_blocks=engine.num_blocks, block_bytes=engine.block_nbytes)

        def call(name: str) -> Any:
            return lambda command: getattr(state["role"], name)(command)

        du.serve({"connect": connect, "add": call("add"), "wait": call("wait"),
                  "unregister": call("unregister"), "restore": call("restore"),
                  "report": call("report")},
                 close=lambda: state["role"].close() if "role" in state else None)



if __name__ == "__main__":
    du.run_main(main)
