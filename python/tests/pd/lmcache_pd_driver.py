"""Drives LMCache's own ``mooncake_te`` transfer channel (lmcache 0.5.6,
``lmcache/v1/distributed/transfer_channel/impl/mooncake_te_impl.py``, unchanged) between a
prefill process that holds KV objects and a decode process that reads them, over TCP
(``MC_TE_PROTOCOL=tcp``).

    lmcache_pd_driver.py --engine tidewire|mooncake prefill|decode

Both sides build what LMCache's multiprocess server builds: an ``L1MemoryManager`` arena
(``L1MemoryManagerConfig``, not lazy), objects allocated in it with ``allocate`` (one uint8
``MemoryLayoutDesc`` per size: mixed sizes from 1,000 B to 4 MiB - 3 B), and the channel context
through ``initialize_transfer_channel_context("mooncake_te", l1_memory_desc, url, url)``, which
registers the arena with the engine and binds its ZMQ handshake server on 127.0.0.1.

prefill: fills each object with its own bytes, prints ``{"ready": {"url", "catalog"}}`` (the
catalog: offset, size and index of every object) and holds its arena until stdin closes.
decode: on ``connect`` allocates a destination object per catalog entry, connects with
``get_transfer_channel_client`` (LMCache's msgpack handshake over ZMQ) and then runs:

- ``reads``: rounds of one ``submit_read`` of 48 objects of mixed sizes (a different shuffled
  choice each round), ``query_read_status`` polled until finished; every byte of every object
  is compared the moment the read is reported finished (Mooncake 0.3.13 reports a batch done
  when its first task is), then the objects are reset to a sentinel;
- ``concurrent``: 4 reads of 24 objects each submitted back to back, each checked when it is
  reported finished;
- ``unregistered``: the decode arena unregistered from the engine (what
  ``MooncakeTeTransferChannelContext.close`` does), then a read into it: it must fail through
  the channel's own error path (``submit_read`` raising, or ``query_read_status`` finished with
  every object marked failed), leaving the destination untouched;
- ``recovery``: the arena registered again as the context registers it, then a read of 48
  objects must succeed with every byte right.

Times (``report``: medians over the reads, ms): ``read`` from ``submit_read`` until
``query_read_status`` says finished; ``read_landed`` until every byte is there (the same, when
nothing was missing at the report; otherwise when a cheap sampled look polled in a tight loop
first passed, then confirmed by a full comparison: the fair figure for an engine that reports a
read finished before its bytes are there). The same for ``concurrent`` and ``recovery``.

Stand-ins: none for the transfer path; the KV bytes stand in for a model's output (seeded random
bytes per object), and there is no GPU (LMCache's L1 arena is host memory anyway).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any, Dict, List, Set, Tuple

import pd_driver_util as du
from pd_driver_util import wait_until

OBJECT_SIZES = [1000, 4096, 65_553, 262_144, 1 << 20, (4 << 20) - 3]
OBJECTS = 96  # 16 of each size: 89 MiB
PER_READ = 48
ROUNDS = 8
CONCURRENT_READS = 4
ARENA_BYTES = 160 << 20
SENTINEL = 0x5A
READ_TIMEOUT_S = 60




def object_sizes() -> List[int]:
    return [OBJECT_SIZES[i % len(OBJECT_SIZES)] for i in range(OBJECTS)]


def object_bytes(index: int, size: int) -> bytes:
    return du.pattern_bytes(f"lmcache-pd/object/{index}", size)


class Arena:
    """An ``L1MemoryManager`` and the objects allocated in it, one per catalog entry."""

    def __init__(self, sizes: List[int]):
        import torch
        from lmcache.v1.distributed.api import MemoryLayoutDesc
        from lmcache.v1.distributed.config import L1MemoryManagerConfig
        from lmcache.v1.distributed.error import L1Error
        from lmcache.v1.distributed.memory_manager import L1MemoryManager

        self.manager = L1MemoryManager(L1MemoryManagerConfig(
            size_in_bytes=ARENA_BYTES, use_lazy=False, align_bytes=4096, shm_name=""))
        self.objects: List[Any] = []
        for size in sizes:
            layout = MemoryLayoutDesc(shapes=[torch.Size([size])], dtypes=[torch.uint8])
            err, objs = self.manager.allocate(layout, 1)
            if err != L1Error.SUCCESS:
                raise RuntimeError(f"L1 allocate of {size} B failed: {err}")
            self.objects.append(objs[0])

    def desc(self) -> Any:
        return self.manager.get_l1_memory_desc()

    def tensor(self, index: int) -> Any:
        return self.objects[index].tensor.view(-1)

    def address(self, index: int) -> Tuple[int, int]:
        obj = self.objects[index]
        return obj.shm_offset, obj.shm_byte_length


# ------------------------------------------------------------------------------------------
# prefill
# ------------------------------------------------------------------------------------------
def run_prefill() -> None:
    import torch
    from lmcache.v1.distributed.transfer_channel import initialize_transfer_channel_context

    sizes = object_sizes()
    arena = Arena(sizes)
    for i, size in enumerate(sizes):
        arena.tensor(i).copy_(torch.frombuffer(bytearray(object_bytes(i, size)),
                                               dtype=torch.uint8))
    url = f"127.0.0.1:{du.free_port()}"
    ctx = initialize_transfer_channel_context("mooncake_te", l1_memory_desc=arena.desc(),
                                              listen_url=url, advertise_url=url)
    catalog = [[*arena.address(i), i] for i in range(len(sizes))]
    du.emit(ready={"url": url, "catalog": catalog, "engine": du.engine_module()})
    du.serve({}, close=ctx.close)


# ------------------------------------------------------------------------------------------
# decode
# ------------------------------------------------------------------------------------------
class Reader:
    """The decode side: its arena, the channel client, and the expected bytes."""

    def __init__(self, command: Dict[str, Any]):
        import torch
        from lmcache.v1.distributed.transfer_channel import (
            TransferChannelAddress, initialize_transfer_channel_context)

        self.torch = torch
        self.Address = TransferChannelAddress
        self.catalog = command["catalog"]
        sizes = [size for _, size, _ in self.catalog]
        self.arena = Arena(sizes)
        self.expected = [torch.frombuffer(bytearray(object_bytes(i, s)), dtype=torch.uint8)
                         for i, s in enumerate(sizes)]
        url = f"127.0.0.1:{du.free_port()}"
        self.ctx = initialize_transfer_channel_context(
            "mooncake_te", l1_memory_desc=self.arena.desc(), listen_url=url,
            advertise_url=url)
        t0 = time.perf_counter()
        self.client = self.ctx.get_transfer_channel_client(command["url"])
        self.rng = random.Random("lmcache-pd/choices")
        self.times: Dict[str, List[float]] = {}
        self.reset(list(range(len(sizes))))
        du.emit(step="connected", ms=du.ms_since(t0), engine=du.engine_module(),
                objects=len(sizes), arena_bytes=ARENA_BYTES)

    def reset(self, indices: List[int]) -> None:
        for i in indices:
            self.arena.tensor(i).fill_(SENTINEL)

    def submit(self, indices: List[int]) -> int:
        local = self.ctx.get_transfer_channel_address([self.arena.address(i) for i in indices])
        remote = [self.Address(offset=self.catalog[i][0], size=self.catalog[i][1])
                  for i in indices]
        return int(self.client.submit_read(local, remote))

    def poll(self, task: int) -> Any:
        """``query_read_status`` until finished (bounded); the result, or None on timeout."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            result = self.client.query_read_status(task)
            if result.is_finished():
                return result
            time.sleep(0.0002)
        return None

    def wrong_objects(self, indices: List[int]) -> List[int]:
        """The objects whose bytes differ from the prefill's, right now."""
        import torch

        return [i for i in indices if not torch.equal(self.arena.tensor(i), self.expected[i])]

    def untouched(self, indices: List[int]) -> bool:
        return all(bool((self.arena.tensor(i) == SENTINEL).all()) for i in indices)

    def choose(self, count: int) -> List[int]:
        return self.rng.sample(range(len(self.catalog)), count)

    def sampled_wrong(self, indices: List[int]) -> List[int]:
        """A cheap look: the objects whose last byte of some 4 KiB page, or whose own last
        byte, is not yet the prefill's."""
        torch = self.torch
        bad = []
        for i in indices:
            got, want = self.arena.tensor(i), self.expected[i]
            if not (torch.equal(got[4095::4096], want[4095::4096]) and got[-1] == want[-1]):
                bad.append(i)
        return bad

    def check_at_report(self, indices: List[int], t0: float,
                        finished: float) -> Tuple[List[int], float]:
        """Right when a read is reported finished: the objects not all there (the sampled look
        first, the last objects of the batch first; then, if it passed, every byte), and the ms
        from submit until every byte is there (the report itself when nothing was missing;
        otherwise when the sampled look, polled in a tight loop, first passed, confirmed by a
        full comparison; bounded)."""
        wrong = self.sampled_wrong(indices[::-1]) or self.wrong_objects(indices[::-1])
        if not wrong:
            return wrong, finished
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.sampled_wrong(indices):
                at = du.ms_since(t0)
                if not self.wrong_objects(indices):
                    return wrong, at
        return wrong, du.ms_since(t0)

    def record(self, label: str, finished: float, landed: float) -> None:
        name = label.rstrip("0123456789")
        self.times.setdefault(name, []).append(finished)
        self.times.setdefault(f"{name}_landed", []).append(landed)

    def read_and_check(self, indices: List[int], label: str) -> None:
        """One read of ``indices``, checked the moment it is reported finished (the last
        objects of the batch first: a too-early report shows there)."""
        try:
            t0 = time.perf_counter()
            task = self.submit(indices)
            result = self.poll(task)
            finished = du.ms_since(t0)
            du.expect(result is not None, f"{label}: not finished in {READ_TIMEOUT_S} s")
            wrong, landed = self.check_at_report(indices, t0, finished)
            self.record(label, finished, landed)
            du.expect(list(result.succeeded_mask) == [True] * len(indices),
                      f"{label}: succeeded_mask {result.succeeded_mask}")
            size = sum(self.catalog[i][1] for i in indices)
            du.emit(step=label, ms=finished, landed_ms=landed, objects=len(indices),
                    bytes=size)
            du.expect(not wrong,
                      f"{label}: {len(wrong)} of {len(indices)} objects not (all) there when "
                      f"the read was reported finished (objects {du.list_ranges(wrong)}, "
                      f"positions {du.list_ranges(sorted(indices.index(i) for i in wrong))})")
        finally:  # every destination back to the sentinel, whatever the outcome
            self.reset(indices)

    # -- the cases ------------------------------------------------------------------------
    def reads(self, command: Dict[str, Any]) -> None:
        for rnd in range(command.get("rounds", ROUNDS)):
            with du.case(f"read{rnd}"):
                self.read_and_check(self.choose(PER_READ), f"read{rnd}")

    def concurrent(self, command: Dict[str, Any]) -> None:
        chosen = self.choose(CONCURRENT_READS * (PER_READ // 2))
        with du.case("concurrent"):
            try:
                self.concurrent_reads(chosen)
            finally:  # every destination back to the sentinel, whatever the outcome
                self.reset(chosen)

    def concurrent_reads(self, chosen: List[int]) -> None:
        """Reads of ``chosen`` in flight at once, each checked when reported finished. A
        thread polls ``query_read_status`` and notes when each read is reported, so that the
        checks of the reads reported first do not delay noticing the others."""
        groups = [chosen[k::CONCURRENT_READS] for k in range(CONCURRENT_READS)]
        t0 = time.perf_counter()
        tasks = dict(zip([self.submit(g) for g in groups], groups))
        reported: Dict[int, Tuple[float, Any]] = {}  # task -> (when, result)
        deadline = time.monotonic() + READ_TIMEOUT_S

        def poll_all() -> None:
            while len(reported) < len(tasks) and time.monotonic() < deadline:
                for task in tasks:
                    if task not in reported:
                        result = self.client.query_read_status(task)
                        if result.is_finished():
                            reported[task] = (time.perf_counter(), result)
                time.sleep(0.0002)

        poller = threading.Thread(target=poll_all, name="pd-poll", daemon=True)
        poller.start()
        bad: List[str] = []
        checked: Set[int] = set()
        while len(checked) < len(tasks) and time.monotonic() < deadline:
            for task in [t for t in list(reported) if t not in checked]:
                checked.add(task)
                group, result = tasks[task], reported[task][1]
                wrong = self.sampled_wrong(group[::-1]) or self.wrong_objects(group[::-1])
                if wrong or list(result.succeeded_mask) != [True] * len(group):
                    bad.append(f"task {task}: mask {result.succeeded_mask}, "
                               f"{len(wrong)} objects not there when finished")
            time.sleep(0.0002)
        poller.join(timeout=READ_TIMEOUT_S)
        done = len(reported) == len(tasks)
        finished = round((max(at for at, _ in reported.values()) - t0) * 1e3, 3) if done \
            else du.ms_since(t0)
        landed = self.check_at_report(chosen, t0, finished)[1] if bad else finished
        self.record("concurrent", finished, landed)
        du.emit(step="concurrent", ms=finished, landed_ms=landed, reads=len(groups),
                objects=len(chosen))
        du.expect(done, f"{len(tasks) - len(reported)} reads not finished in "
                        f"{READ_TIMEOUT_S} s")
        du.expect(not bad, "; ".join(bad))

    def unregistered(self, command: Dict[str, Any]) -> None:
        indices = self.choose(PER_READ)
        with du.case("unregistered"):
            desc = self.arena.desc()
            rc = self.ctx.mooncake_te_engine.unregister_memory(desc.ptr)
            du.expect(rc == 0, f"unregister_memory of the decode arena returned {rc}")
            try:
                du.emit(step="unregistered", outcome=self.read_unregistered(indices))
            finally:  # every destination back to the sentinel, whatever the outcome
                self.reset(indices)

    def read_unregistered(self, indices: List[int]) -> str:
        """A read into the unregistered arena: how the channel failed it (a check fails when
        it did not, or when it wrote anything)."""
        outcome = ""
        try:
            task = self.submit(indices)
        except RuntimeError as exc:  # the channel's own refusal
            outcome = f"submit_read raised: {exc}"
        else:
            result = self.poll(task)
            du.expect(result is not None, "read into unregistered memory never finished")
            du.expect(not any(result.succeeded_mask),
                      f"read into unregistered memory reported success "
                      f"(mask {result.succeeded_mask[:4]}...)")
            outcome = "query_read_status: finished, every object failed"
        du.expect(self.untouched(indices), "a failed read wrote into the destination")
        return outcome

    def recovery(self, command: Dict[str, Any]) -> None:
        with du.case("recovery"):
            desc = self.arena.desc()
            rc = self.ctx.mooncake_te_engine.register_memory(desc.ptr, desc.size)
            du.expect(rc == 0, f"register_memory of the decode arena again returned {rc}")
            self.read_and_check(self.choose(PER_READ), "recovery")

    def report(self, command: Dict[str, Any]) -> None:
        du.emit(times={f"{name}_ms": du.median(values)
                       for name, values in self.times.items() if values})


def run_decode() -> None:
    state: Dict[str, Reader] = {}

    def connect(command: Dict[str, Any]) -> None:
        state["reader"] = Reader(command)

    def call(name: str) -> Any:
        return lambda command: getattr(state["reader"], name)(command)

    du.emit(step="started")
    du.serve({"connect": connect, "reads": call("reads"), "concurrent": call("concurrent"),
              "unregistered": call("unregistered"), "recovery": call("recovery"),
              "report": call("report")},
             close=lambda: state["reader"].ctx.close() if "reader" in state else None)


def main() -> None:
    args = du.parse_args(__doc__.split("\n\n")[0])
    du.start(args.engine)
    import os

    os.environ.setdefault("MC_TE_PROTOCOL", "tcp")
    os.environ.setdefault("GLOG_minloglevel", "1")
    import lmcache.v1.distributed.transfer_channel  # noqa: F401  (registers mooncake_te)

    run_prefill() if args.role == "prefill" else run_decode()


if __name__ == "__main__":
    du.run_main(main)
