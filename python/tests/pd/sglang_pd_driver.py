"""Drives SGLang's own PD disaggregation over the Mooncake engine (sglang 0.5.23,
``sglang/srt/disaggregation/mooncake/conn.py``: ``MooncakeKVManager``, ``MooncakeKVSender``,
``MooncakeKVReceiver``, ``MooncakeKVBootstrapServer``, unchanged) between a prefill and a decode
process over TCP (``MOONCAKE_PROTOCOL=tcp``).

    sglang_pd_driver.py --engine tidewire|mooncake prefill|decode

Each process sets up what SGLang's scheduler sets up for a PD role, with SGLang's code:
``ServerArgs(disaggregation_mode=..., disaggregation_transfer_backend="mooncake",
disaggregation_bootstrap_port=..., host="127.0.0.1", page_size=16, device="cpu")`` published
with ``runtime_context.publish``; ``start_disagg_service()`` on the prefill side (the HTTP
bootstrap server); ``maybe_init_shared_mooncake_transfer_engine`` (the shared engine:
``initialize(SGLANG_HOST_IP, "P2PHANDSHAKE", "tcp", "")``); a CPU ``MHATokenToKVPool`` (8
layers, 8 KV heads of 64, bf16: 16 KiB per page per K or V buffer), a
``PagedTokenToKVPoolAllocator`` and ``MetadataBuffers``; ``KVArgs`` filled as the prefill and
decode queues' ``_init_kv_manager`` fill them; then ``MooncakeKVManager(kv_args, mode,
server_args, False)``, which registers every KV and aux buffer with the engine.

The decode pool is used before the test: every page allocated and freed back in a shuffled order,
so the pages a room gets are scattered (one descriptor per page per layer per K/V: a room of 64
pages is a batch of 1,024 descriptors).

Commands (JSON on stdin), per room as the prefill and decode queues do per request:

- prefill ``send``: a ``MooncakeKVSender`` per room; once it polls ``WaitingForInput``, pages
  from the allocator get the room's KV bytes (and its metadata row a marker), ``init(pages,
  aux_index)``, ``send(page_indices)`` in two chunks; polled to ``Success``/``Failed``.
- decode ``receive``: a ``MooncakeKVReceiver`` per room (``try_ensure_parallel_info``,
  ``init(0)``), pages from the used allocator set to a sentinel, ``send_metadata(page_indices,
  aux_index)``; polled to ``Success``/``Failed``; on success every byte of every page of every
  K and V buffer is compared, and the metadata row; on failure the pages must be untouched and
  the manager must hold a failure reason.
- decode ``unregister`` / ``register``: the manager's own ``deregister_buffer_to_engine`` /
  ``register_buffer_to_engine``.
- prefill ``wait_unblocked``: after a failed room SGLang blacklists the decode session until
  its probe (``send_probe``, every ``SGLANG_FAILED_SESSION_PROBE_INTERVAL_S``, 1 s here)
  succeeds; this waits (bounded) until the blacklist is empty.

Each room's line gives its status and time (prefill: ``send`` to ``Success``; decode:
``send_metadata`` to ``Success``); ``report`` prints the medians per case.

Stand-ins: the KV bytes are seeded random bytes written where the forward pass would write them
(no model); the KV pool is a CPU tensor pool (no GPU); the gloo world and the model
(``model_path="dummy"``) are the minimum SGLang needs to publish its configuration.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, Dict, List, Optional, Set

import numpy as np

import pd_driver_util as du

PAGE = 16  # tokens per page
LAYERS = 8
HEADS = 8
HEAD_DIM = 64
POOL_PAGES = 1024
AUX_SLOTS = 64
SENTINEL = -7  # what a decode page holds before its KV arrives (int16 view: 0xFFF9)
ROOM_TIMEOUT_S = 60
KV_DTYPE = "bfloat16"




def set_environment() -> None:
    """What SGLang reads from the environment on this path; before SGLang is imported."""
    os.environ["MOONCAKE_PROTOCOL"] = "tcp"
    os.environ["SGLANG_HOST_IP"] = "127.0.0.1"  # the engine's and the ZMQ sockets' address
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["SGLANG_FAILED_SESSION_PROBE_INTERVAL_S"] = "1"
    os.environ["SGLANG_FAILED_SESSION_PROBE_MAX_INTERVAL_S"] = "2"
    os.environ["SGLANG_DISAGGREGATION_WAITING_TIMEOUT"] = "120"
    os.environ["SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT"] = "120"
    os.environ.setdefault("GLOG_minloglevel", "1")


class Side:
    """One PD role: SGLang's configuration, KV pool, allocator, metadata buffers, manager."""

    def __init__(self, role: str, bootstrap_port: int):
        import torch
        from sglang.srt.disaggregation.base import KVArgs
        from sglang.srt.disaggregation.utils import (
            DisaggregationMode, MetadataBuffers, build_kv_layer_ids, get_kv_class,
            get_kv_transfer_buf_infos, get_pd_kv_layout, setup_state_kv_args, KVClassType,
            TransferBackend)
        from sglang.srt.distributed.device_communicators.mooncake_transfer_engine import (
            maybe_init_shared_mooncake_transfer_engine)
        from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
        from sglang.srt.runtime_context import SpawnRanks, get_disagg, get_parallel, publish
        from sglang.srt.server_args import ServerArgs

        self.role = role
        self.torch = torch
        self.server_args = ServerArgs(
            model_path="dummy", disaggregation_mode=role,
            disaggregation_transfer_backend="mooncake",
            disaggregation_bootstrap_port=bootstrap_port, host="127.0.0.1", page_size=PAGE,
            device="cpu")
        # One scheduler rank, as a launcher would place it (no data-parallel controller).
        publish(self.server_args, role="scheduler",
                ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0))
        # A single-rank world on gloo (SGLang's own groups: the manager reads the pipeline group).
        from sglang.srt.distributed.parallel_state import (init_distributed_environment,
                                                           initialize_model_parallel)

        # A file store: torch's TCP store would listen on every address.
        store_dir = du.temp_dir(f"sglang-pd-{role}-")
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"file://{store_dir}/dist-init")
        initialize_model_parallel(backend="gloo")
        self.bootstrap_server = None
        if role == "prefill":
            from sglang.srt.managers.disagg_service import start_disagg_service

            self.bootstrap_server = start_disagg_service()
        maybe_init_shared_mooncake_transfer_engine(gpu_id=0)
        self.pool = MHATokenToKVPool(
            size=POOL_PAGES * PAGE, page_size=PAGE, dtype=torch.bfloat16, head_num=HEADS,
            head_dim=HEAD_DIM, layer_num=LAYERS, device="cpu", enable_memory_saver=False,
            enable_alt_stream=False)
        self.allocator = PagedTokenToKVPoolAllocator(
            POOL_PAGES * PAGE, PAGE, torch.bfloat16, "cpu", self.pool, need_sort=False)
        self.metadata = MetadataBuffers(AUX_SLOTS, hidden_size=64,
                                        hidden_states_dtype=torch.float32,
                                        max_sampling_mask_tokens=16)
        self.free_aux = list(range(AUX_SLOTS))
        mode = DisaggregationMode.PREFILL if role == "prefill" else DisaggregationMode.DECODE
        backend = TransferBackend.MOONCAKE
        kv_args = KVArgs()
        kv_args.engine_rank = 0
        kv_args.pp_rank = 0
        kv_args.system_dp_rank = get_parallel().dp_rank or 0
        kv_args.rust_http_port = None
        kv_args.kv_cache_dtype_str = KV_DTYPE
        kv_args.kv_layout = get_pd_kv_layout(self.pool)
        ptrs, lens, item_lens = get_kv_transfer_buf_infos(self.pool)
        kv_args.kv_data_ptrs, kv_args.kv_data_lens, kv_args.kv_item_lens = ptrs, lens, \
            item_lens
        kv_args.num_draft_entries = 0
        kv_args.kv_layer_ids = build_kv_layer_ids(
            token_to_kv_pool=self.pool, draft_token_to_kv_pool=None, num_draft_entries=0,
            num_hidden_layers=LAYERS)
        if role == "prefill":
            kv_args.prefill_start_layer = self.pool.start_layer
            kv_args.prefill_end_layer = getattr(self.pool, "end_layer", None)
            kv_args.kv_head_num = self.pool.head_num
            kv_args.total_kv_head_num = HEADS
        kv_args.page_size = PAGE
        kv_args.aux_data_ptrs, kv_args.aux_data_lens, kv_args.aux_item_lens = \
            self.metadata.get_buf_infos()
        kv_args.ib_device = get_disagg().disaggregation_ib_device
        kv_args.gpu_id = 0
        setup_state_kv_args(kv_args, self.pool, None, total_kv_layers=LAYERS,
                            req_to_token_pool=None)
        self.manager = get_kv_class(backend, KVClassType.MANAGER)(
            kv_args, mode, self.server_args, False)
        self.sender_class = get_kv_class(backend, KVClassType.SENDER)
        self.receiver_class = get_kv_class(backend, KVClassType.RECEIVER)
        self.buffers = list(self.pool.k_buffer) + list(self.pool.v_buffer)

    # -- pages --------------------------------------------------------------------------
    def scatter_free_pages(self) -> None:
        """Uses the pool as a server would have: every page allocated, then freed back one by
        one in a shuffled order, so later allocations hand out scattered pages."""
        torch = self.torch
        tokens = self.allocator.alloc(self.allocator.available_size())
        pages = sorted({int(t) // PAGE for t in tokens.tolist()})
        random.Random(f"sglang-pd/{self.role}/free-order").shuffle(pages)
        for page in pages:
            self.allocator.free(torch.arange(page * PAGE, (page + 1) * PAGE))

    def alloc_pages(self, count: int) -> List[int]:
        tokens = self.allocator.alloc(count * PAGE)
        if tokens is None:
            raise RuntimeError(f"{self.role}: the KV pool has no {count} free pages")
        return [int(t) // PAGE for t in tokens[::PAGE].tolist()]

    def free_pages(self, pages: List[int]) -> None:
        torch = self.torch
        for page in pages:
            self.allocator.free(torch.arange(page * PAGE, (page + 1) * PAGE))

    def page_view(self, buffer: Any, page: int) -> Any:
        """The bytes of one page of one K or V buffer, as int16 (the bf16 bit patterns)."""
        return buffer[page * PAGE:(page + 1) * PAGE].view(self.torch.int16)

    def expected(self, room: int, index: int, count: int) -> Any:
        """The room's KV: (buffers, pages, PAGE*HEADS*HEAD_DIM) int16, seeded by the room."""
        torch = self.torch
        gen = torch.Generator().manual_seed(room * 7919 + index)
        return torch.randint(-32768, 32767, (len(self.buffers), count, PAGE, HEADS, HEAD_DIM),
                             dtype=torch.int16, generator=gen)

    def poll(self, sides: List[Any], timeout_s: float = ROOM_TIMEOUT_S) -> Dict[int, Any]:
        """Polls senders or receivers until each is Success or Failed (bounded); the time each
        got there (perf_counter) and its state."""
        from sglang.srt.disaggregation.base import KVPoll

        done: Dict[int, Any] = {}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(sides) and time.monotonic() < deadline:
            for i, side in enumerate(sides):
                if i in done:
                    continue
                state = side.poll()
                if state in (KVPoll.Success, KVPoll.Failed):
                    done[i] = (time.perf_counter(), state)
            time.sleep(0.0005)
        return done


# ------------------------------------------------------------------------------------------
# prefill
# ------------------------------------------------------------------------------------------
class Prefill:
    def __init__(self, side: Side, bootstrap: str):
        self.side = side
        self.bootstrap = bootstrap
        self.times: Dict[str, List[float]] = {}

    def send(self, command: Dict[str, Any]) -> None:
        """Senders for every room; their pages written (as the forward pass would) while the
        decode side bootstraps; once all wait for input, ``init`` and ``send`` in two chunks
        each, back to back; then every room polled to its end."""
        from sglang.srt.disaggregation.base import KVPoll

        side, label = self.side, command["label"]
        rooms = command["rooms"]  # [[room, pages], ...]
        senders = [side.sender_class(side.manager, self.bootstrap, room) for room, _ in rooms]
        allocations = [self.write_room(room, count) for room, count in rooms]
        waiting = self.wait_for_input(senders)
        sent_at: Dict[int, float] = {}
        for i, (sender, (pages, aux)) in enumerate(zip(senders, allocations)):
            if i not in waiting:
                continue
            half = len(pages) // 2
            sent_at[i] = time.perf_counter()
            sender.init(len(pages), aux)
            sender.send(np.asarray(pages[:half], dtype=np.int32))
            sender.send(np.asarray(pages[half:], dtype=np.int32))
        done = side.poll(senders)
        for i, ((room, count), sender) in enumerate(zip(rooms, senders)):
            with du.case(f"{label}/prefill/{room}"):
                du.expect(i in waiting, f"room {room}: never WaitingForInput "
                                        f"({int(sender.poll())})")
                du.expect(i in done, f"room {room}: neither Success nor Failed in "
                                     f"{ROOM_TIMEOUT_S} s")
                at, state = done[i]
                took = round((at - sent_at[i]) * 1e3, 3)
                reason = side.manager.failure_records.get(room)
                du.emit(step="sent", label=label, room=room, pages=count,
                        state=int(state), ms=took, reason=reason)
                if command.get("expect", "success") == "success":
                    du.expect(state == KVPoll.Success, f"room {room}: {int(state)} ({reason})")
                    self.times.setdefault(label, []).append(took)
                else:
                    du.expect(state == KVPoll.Failed, f"room {room}: {int(state)}, want Failed")
                    du.expect(bool(reason), f"room {room}: failed without a reason")
            pages, aux = allocations[i]
            sender.clear()
            side.free_pages(pages)
            side.free_aux.append(aux)

    def write_room(self, room: int, count: int) -> Any:
        """Pages and a metadata slot for ``room``, holding its KV bytes and marker."""
        side = self.side
        pages = side.alloc_pages(count)
        aux = side.free_aux.pop()
        data = side.expected(room, 0, count)
        for b, buffer in enumerate(side.buffers):
            for j, page in enumerate(pages):
                side.page_view(buffer, page).copy_(data[b, j].view(PAGE, HEADS, HEAD_DIM))
        side.metadata.output_ids[aux].fill_(room % 1_000_003)
        return pages, aux

    def wait_for_input(self, senders: List[Any]) -> Set[int]:
        """The senders that reached ``WaitingForInput`` (the decode side's metadata arrived),
        waiting (bounded) until each is there or ``Failed``."""
        from sglang.srt.disaggregation.base import KVPoll

        ready: Set[int] = set()
        settled: Set[int] = set()
        deadline = time.monotonic() + ROOM_TIMEOUT_S
        while len(settled) < len(senders) and time.monotonic() < deadline:
            for i, sender in enumerate(senders):
                if i in settled:
                    continue
                state = sender.poll()
                if state == KVPoll.WaitingForInput:
                    ready.add(i)
                    settled.add(i)
                elif state == KVPoll.Failed:
                    settled.add(i)
            time.sleep(0.0005)
        return ready

    def wait_unblocked(self, command: Dict[str, Any]) -> None:
        manager = self.side.manager
        with du.case("wait_unblocked"):
            t0 = time.perf_counter()
            blocked = sorted(manager.failed_sessions)
            ok = du.wait_until(lambda: not manager.failed_sessions, 30, 0.05)
            du.emit(step="unblocked", blacklisted=blocked, ms=du.ms_since(t0))
            du.expect(ok, f"sessions still blacklisted after 30 s: "
                          f"{sorted(manager.failed_sessions)}")

    def report(self, command: Dict[str, Any]) -> None:
        du.emit(times={f"{k}_prefill_ms": du.median(v) for k, v in self.times.items()})


# ------------------------------------------------------------------------------------------
# decode
# ------------------------------------------------------------------------------------------
class Decode:
    def __init__(self, side: Side, bootstrap: str):
        self.side = side
        self.bootstrap = bootstrap
        self.times: Dict[str, List[float]] = {}
        side.scatter_free_pages()
        ok = du.wait_until(lambda: side.manager.try_ensure_parallel_info(bootstrap), 60, 0.2)
        if not ok:
            raise RuntimeError(f"no prefill parallel info from {bootstrap}")

    def receive(self, command: Dict[str, Any]) -> None:
        from sglang.srt.disaggregation.base import KVPoll

        side, label = self.side, command["label"]
        rooms = command["rooms"]
        receivers = [side.receiver_class(side.manager, self.bootstrap, room)
                     for room, _ in rooms]
        allocations = []
        sent_at: List[float] = []
        for (room, count), receiver in zip(rooms, receivers):
            receiver.init(0)
            pages = side.alloc_pages(count)
            aux = side.free_aux.pop()
            for buffer in side.buffers:
                for page in pages:
                    side.page_view(buffer, page).fill_(SENTINEL)
            side.metadata.output_ids[aux].fill_(-1)
            allocations.append((pages, aux))
            sent_at.append(time.perf_counter())
            receiver.send_metadata(np.asarray(pages, dtype=np.int32), aux)
        done = side.poll(receivers)
        for i, ((room, count), receiver) in enumerate(zip(rooms, receivers)):
            pages, aux = allocations[i]
            with du.case(f"{label}/decode/{room}"):
                du.expect(i in done, f"room {room}: neither Success nor Failed in "
                                     f"{ROOM_TIMEOUT_S} s")
                at, state = done[i]
                took = round((at - sent_at[i]) * 1e3, 3)
                reason = side.manager.failure_records.get(room)
                wrong = self.wrong_pages(room, pages) if state == KVPoll.Success else None
                du.emit(step="received", label=label, room=room, pages=count,
                        state=int(state), ms=took, reason=reason,
                        scattered=sum(1 for a, b in zip(pages, pages[1:]) if b != a + 1))
                if command.get("expect", "success") == "success":
                    du.expect(state == KVPoll.Success, f"room {room}: {int(state)} ({reason})")
                    du.expect(not wrong, f"room {room}: {len(wrong or [])} of "
                                         f"{count * len(side.buffers)} pages wrong "
                                         f"({(wrong or [])[:4]})")
                    marker = side.metadata.output_ids[aux]
                    du.expect(bool((marker == room % 1_000_003).all()),
                              f"room {room}: metadata row {marker[:4].tolist()}")
                    self.times.setdefault(label, []).append(took)
                else:
                    du.expect(state == KVPoll.Failed, f"room {room}: {int(state)}, want Failed")
                    du.expect(bool(reason), f"room {room}: failed without a reason")
                    du.expect(self.untouched(pages), f"room {room}: a failed transfer wrote "
                                                     f"into its pages")
            receiver.clear()
            side.free_pages(pages)
            side.free_aux.append(aux)

    def wrong_pages(self, room: int, pages: List[int]) -> List[str]:
        side = self.side
        data = side.expected(room, 0, len(pages))
        wrong = []
        for b, buffer in enumerate(side.buffers):
            for j, page in enumerate(pages):
                if not side.torch.equal(side.page_view(buffer, page).reshape(-1),
                                        data[b, j].reshape(-1)):
                    wrong.append(f"buffer {b} page {j}")
        return wrong

    def untouched(self, pages: List[int]) -> bool:
        side = self.side
        return all(bool((side.page_view(buffer, page) == SENTINEL).all())
                   for buffer in side.buffers for page in pages)

    def unregister(self, command: Dict[str, Any]) -> None:
        self.side.manager.deregister_buffer_to_engine()
        du.emit(step="unregistered")

    def register(self, command: Dict[str, Any]) -> None:
        self.side.manager.register_buffer_to_engine()
        ok = du.wait_until(lambda: self.side.manager.try_ensure_parallel_info(self.bootstrap),
                           60, 0.2)
        du.emit(step="registered", parallel_info=ok)

    def report(self, command: Dict[str, Any]) -> None:
        du.emit(times={f"{k}_decode_ms": du.median(v) for k, v in self.times.items()})


def main() -> None:
    args = du.parse_args(__doc__.split("\n\n")[0],
                         lambda p: p.add_argument("--bootstrap-port", type=int, default=0))
    du.start(args.engine)
    set_environment()
    if args.role == "prefill":
        port = du.free_port()
        side = Side("prefill", port)
        prefill = Prefill(side, f"127.0.0.1:{port}")
        du.emit(ready={"bootstrap": f"127.0.0.1:{port}", "engine": du.engine_module(),
                       "session": side.manager.get_session_id()})
        du.serve({"send": prefill.send, "wait_unblocked": prefill.wait_unblocked,
                  "report": prefill.report})
    else:
        du.emit(step="started")
        state: Dict[str, Optional[Decode]] = {"decode": None}

        def connect(command: Dict[str, Any]) -> None:
            side = Side("decode", 0)
            state["decode"] = Decode(side, command["bootstrap"])
            du.emit(step="connected", engine=du.engine_module(),
                    session=side.manager.get_session_id())

        def call(name: str) -> Any:
            return lambda command: getattr(state["decode"], name)(command)

        du.serve({"connect": connect, "receive": call("receive"),
                  "unregister": call("unregister"), "register": call("register"),
                  "report": call("report")})


if __name__ == "__main__":
    du.run_main(main)
