"""Drives vLLM's own MooncakeStoreConnector worker (vllm 0.33.0, ``MooncakeStoreWorker`` from
``vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/worker.py``, unchanged) against
``mooncake.store``: tidewire's (the shim first on sys.path) or the real Mooncake wheel.

    vllm_driver.py --store tidewire|mooncake --master HOST:PORT [--metrics-port N] writer|reader

Each process builds what a vLLM engine builds, with vLLM's code: a ``VllmConfig`` (a Llama-shaped
model directory holding only ``config.json``: 8 layers, 8 KV heads of 64, bf16, blocks of 16
tokens), a single-rank world (``init_distributed_environment`` on gloo and
``initialize_model_parallel(1, 1)``: the tensor/pipeline/context group getters give single-rank
answers), the KV cache plan (``get_kv_cache_configs``), CPU KV tensors (``allocate_kv_cache``,
layout LBNHC as the engine core resolves it for FlashAttention) and the store config file
(``MOONCAKE_CONFIG_PATH``). A ``MooncakeStoreWorker`` registers the KV cache and starts its send
and receive threads and ``LookupKeyServer``; lookups go through a ``LookupKeyClient`` over ZMQ.

writer: 3 rounds of 4 requests x 1,029 tokens (64 full blocks each: 256 keys of 8 pieces of
32 KiB, 64 MiB a round) saved, looked up; misses, a shared prefix, vLLM's dedup on a second
save; prints ``{"meta": ...}``, then on ``after-reset`` (stdin) checks every lookup is absent.
reader (its own segment and KV tensors, other block ids): lookups, loads of every round with
every byte of its KV cache compared, a load whose last blocks were never saved (exactly those
must be load errors, untouched), a load with ``VLLM_MOONCAKE_STORE_TIER_LOG=1``
(``batch_get_replica_desc``), and the reset through the LookupKey channel
(``remove_all(force=True)``) after which nothing is found, nor listed by the master.

Stand-in (the only one): ``wait_for_save`` records a ``torch.cuda.Event`` that the send thread
synchronizes on before reading the KV cache. The KV tensors here are CPU tensors written
synchronously, so ``Engine.save_batch`` puts the same requests on the same send thread with
``current_event = None``, a value the send thread accepts.

Each step prints one JSON line on stdout (all logging goes to stderr), ``{"step": ...,
"failed": ...}`` when a check fails (the run goes on). The last lines are ``{"time": ...}``
(medians over the rounds), then ``{"closed": true}``, or ``{"error": ..., "failures": [...]}``
and exit status 1.
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

import vllm_parts  # beside this file: the driver runs as a script from this folder
from vllm_parts import (
    REPO, BLOCK, REQUESTS, FULL_BLOCKS, ROUNDS, SENTINEL, MODEL_NAME, FAILURES, Engine, Prompts,
    WorkerLog, admin_keys, check_lookups, emit, expect, expected_pages, median, ms, request_tag,
    step,
)


def writer(args, tmp):
    e = Engine("writer", args, tmp)
    save_ms, lookup_ms = [], []
    full = FULL_BLOCKS * BLOCK
    keys = REQUESTS * FULL_BLOCKS
    for rnd in range(ROUNDS):
        with step("save"):
            reqs = []
            for q in range(REQUESTS):
                tag = request_tag(rnd, q)
                data = expected_pages(tag)
                ids = e.alloc(q, FULL_BLOCKS)
                for layer, rows in enumerate(e.rows):
                    rows[ids] = data[layer]
                reqs.append(e.save_meta(tag, q, Prompts.tokens(tag)))
            took = e.save_batch(reqs)
            st = e.stats()
            emit(step="save", round=rnd, ms=took, keys=keys, pieces_per_key=len(e.rows),
                 bytes=keys * e.page, put_rpc_ms=st.get("save_put_avg_ms"),
                 exists_rpc_ms=st.get("save_exists_avg_ms"))
            expect(st.get("save_put_total_keys") == keys and st.get("save_put_failed_keys") == 0
                   and st.get("save_put_error_count") == 0, f"round {rnd}: put stats {st}")
            expect(st.get("save_put_total_bytes") == keys * e.page, f"round {rnd}: bytes {st}")
            save_ms.append(took)
        with step("lookup"):
            took, hits = check_lookups(e, rnd, full)
            lookup_ms.append(took)
            emit(step="lookup", round=rnd, ms=took, hits=hits)
    # Misses: a prompt never saved; a prompt sharing only its first 10 blocks with one saved.
    with step("miss"):
        t0 = time.perf_counter()
        never = Prompts.tokens("never-saved")
        h_never = e.lookup("never", never).hit_length
        shared = (Prompts.tokens(request_tag(0, 0))[:10 * BLOCK]
                  + Prompts.tokens("other")[10 * BLOCK:])
        h_shared = e.lookup("shared", shared).hit_length
        exist = e.worker.store.batch_is_exist(e.keys(never))
        emit(step="miss", ms=ms(t0), never_saved_hit=h_never, shared_prefix_hit=h_shared,
             never_saved_exist=sorted(set(exist)))
        expect(h_never == 0, f"never-saved prompt: hit {h_never}")
        expect(h_shared == 10 * BLOCK, f"shared prefix: hit {h_shared}, want {10 * BLOCK}")
        expect(list(exist) == [0] * FULL_BLOCKS, f"never-saved keys: {sorted(set(exist))}")
    # Dedup: saving round 0 again finds every block and puts nothing.
    with step("dedup"):
        e.stats()
        t0 = time.perf_counter()
        e.save_batch([e.save_meta(request_tag(0, q) + "/again", q,
                                  Prompts.tokens(request_tag(0, q))) for q in range(REQUESTS)])
        st = e.stats()
        emit(step="dedup", ms=ms(t0), exists_keys=st.get("save_exists_total_keys"),
             put_keys=st.get("save_put_total_keys", 0))
        expect("save_put_count" not in st and st.get("save_exists_total_keys") == keys,
               f"second save of saved blocks: {st}")
    emit(meta={"rounds": ROUNDS, "requests": REQUESTS, "full_blocks": FULL_BLOCKS,
               "hit": full, "model": MODEL_NAME})
    for line in sys.stdin:  # the segment stays mounted until the test is done with it
        if line.strip() != "after-reset":
            continue
        with step("after_reset"):
            t0 = time.perf_counter()
            for rnd in range(ROUNDS):
                check_lookups(e, rnd, 0)
            left = sum(sum(e.worker.store.batch_is_exist(e.keys(Prompts.tokens(
                request_tag(rnd, q))))) for rnd in range(ROUNDS) for q in range(REQUESTS))
            emit(step="after_reset", ms=ms(t0), keys_left=left)
            expect(left == 0, f"the writer sees {left} keys after the reset")
    emit(time={"role": "writer", "save_ms": median(save_ms), "lookup_ms": median(lookup_ms),
               "rounds": ROUNDS, "keys": keys, "bytes": keys * e.page,
               "save_ms_all": save_ms, "lookup_ms_all": lookup_ms})
    e.close()


def reader(args, tmp):
    import torch

    meta = json.loads(sys.stdin.readline())["meta"]
    expect(meta["model"] == MODEL_NAME and meta["hit"] == FULL_BLOCKS * BLOCK, f"meta {meta}")
    e = Engine("reader", args, tmp)
    load_ms, lookup_ms = [], []
    full = FULL_BLOCKS * BLOCK
    keys = REQUESTS * FULL_BLOCKS

    def reset_kv():
        for rows in e.rows:
            rows.fill_(SENTINEL)

    def check_kv(loaded):
        """``loaded``: {block id: (tag, block index)}. Every byte of every block."""
        bad = []
        for tag in sorted({t for t, _ in loaded.values()}):
            idx = sorted((j, b) for b, (t, j) in loaded.items() if t == tag)
            want = expected_pages(tag)
            ids = torch.tensor([b for _, b in idx])
            js = torch.tensor([j for j, _ in idx])
            for layer, rows in enumerate(e.rows):
                got, exp = rows[ids], want[layer][js]
                if not torch.equal(got, exp):
                    diff = (got != exp).nonzero()
                    j, off = int(js[diff[0][0]]), int(diff[0][1])
                    bad.append(f"{tag} block {j} layer {layer}: {len(diff)} bytes differ, "
                               f"first at {off}")
        others = torch.ones(e.num_blocks, dtype=torch.bool)
        others[list(loaded)] = False
        for layer, rows in enumerate(e.rows):
            if not bool((rows[others] == SENTINEL).all()):
                bad.append(f"layer {layer}: bytes written outside the loaded blocks")
        expect(not bad, "; ".join(bad[:5]))
        return len(loaded) * e.page

    for rnd in range(ROUNDS):
        with step("load"):
            t0 = time.perf_counter()
            hits = {}
            for q in range(REQUESTS):
                tag = request_tag(rnd, q)
                hits[tag] = e.lookup(tag, Prompts.tokens(tag))
            took_lookup = ms(t0)
            got = [h.hit_length for h in hits.values()]
            expect(got == [full] * REQUESTS, f"round {rnd}: reader lookup hits {got}")
            lookup_ms.append(took_lookup)
            reset_kv()
            reqs = [e.load_meta(tag, q, Prompts.tokens(tag), hits[tag])
                    for q, tag in enumerate(hits)]
            took, errors = e.load_batch(reqs)
            st = e.stats()
            emit(step="load", round=rnd, ms=took, lookup_ms=took_lookup, keys=keys,
                 get_rpc_ms=st.get("load_get_avg_ms"), error_blocks=len(errors))
            expect(not errors, f"round {rnd}: load errors on blocks {sorted(errors)[:8]}")
            expect(st.get("load_get_total_keys") == keys and st.get("load_get_failed_keys") == 0,
                   f"round {rnd}: load stats {st}")
            checked = check_kv({b: (tag, j) for q, tag in enumerate(hits)
                                for j, b in enumerate(e.alloc(q, FULL_BLOCKS))})
            load_ms.append(took)
            emit(step="load_checked", round=rnd, bytes_checked=checked)

    # A load whose last blocks were never saved (the lookup said 4 blocks, the store has 2, as
    # when blocks go between lookup and load): vLLM must report those blocks, untouched.
    with step("load_miss"):
        t0 = time.perf_counter()
        base = request_tag(0, 0)
        tokens = (Prompts.tokens(base)[:2 * BLOCK]
                  + Prompts.tokens("unsaved")[2 * BLOCK:4 * BLOCK + 1])
        hit = e.lookup("partial", tokens)
        expect(hit.hit_length == 2 * BLOCK, f"partial prompt: hit {hit.hit_length}")
        # What the scheduler would hold had the lookup seen 4 blocks (one tail key per group).
        claimed = e.w.MooncakeLookupResult(4 * BLOCK, (e.w.TailKeyBoundary(0, 4 * BLOCK),))
        reset_kv()
        with WorkerLog(e.w, "Failed to get") as log:
            _, errors = e.load_batch([e.load_meta("partial", 0, tokens, claimed)])
        st = e.stats()
        ids = e.alloc(0, 4)
        present = [b for b in ids[:2] if b not in errors]
        codes = sorted(set(re.findall(r"', (-\d+)\)", " ".join(log.records))))
        emit(step="load_miss", ms=ms(t0), error_blocks=sorted(ids.index(b) for b in errors),
             failed_keys=st.get("load_get_failed_keys"), codes=codes)
        # The receive thread stops a request at its first failed batch: the present blocks of
        # that batch may be read or not, the missing ones must be reported and left alone.
        expect(set(ids[2:]) <= errors <= set(ids),
               f"load errors on blocks {sorted(ids.index(b) for b in errors if b in ids)} "
               f"(of {len(errors)}), want 2 and 3")
        expect(codes == ["-704"], f"codes of the missing keys {codes}, Mooncake's is -704 "
                                  "(OBJECT_NOT_FOUND)")
        for rows in e.rows:
            expect(bool((rows[ids[2:]] == SENTINEL).all()), "missing blocks were written")
        if len(present) == 2:
            check_kv({b: (base, j) for j, b in enumerate(present)})

    # vLLM's replica-tier log: batch_get_replica_desc before the load, each key classified by
    # is_memory_replica() / is_disk_replica() / is_local_disk_replica().
    with step("tier_log"):
        os.environ["VLLM_MOONCAKE_STORE_TIER_LOG"] = "1"
        try:
            tag = request_tag(0, 1)
            hit = e.lookup(tag + "/tier", Prompts.tokens(tag))
            reset_kv()
            with WorkerLog(e.w, "tier summary", "replica descriptors") as tier:
                took, errors = e.load_batch([e.load_meta(tag, 1, Prompts.tokens(tag), hit)])
        finally:
            os.environ.pop("VLLM_MOONCAKE_STORE_TIER_LOG", None)
        e.stats()
        emit(step="tier_log", ms=took, log=tier.records)
        expect(not errors, f"tier-log load errors {sorted(errors)[:8]}")
        check_kv({b: (tag, j) for j, b in enumerate(e.alloc(1, FULL_BLOCKS))})
        summary = " ".join(tier.records)
        if args.disk:
            # Round 0 was written before 128 MiB more went through the tier owner's 64 MiB:
            # its keys are read from memory or from disk, every one of them known.
            mem = re.search(r"memory_keys=(\d+) disk_keys=(\d+) unknown_keys=0 ", summary)
            expect(mem is not None and int(mem[1]) + int(mem[2]) == FULL_BLOCKS,
                   f"tier summary: {tier.records}")
            # Where every round's keys are now (the first replica, as vLLM classifies them).
            per_round = []
            for rnd in range(ROUNDS):
                round_keys = [k for q in range(REQUESTS)
                              for k in e.keys(Prompts.tokens(request_tag(rnd, q)))]
                descs = e.worker.store.batch_get_replica_desc(round_keys)
                first = [descs[k][0] if descs.get(k) else None for k in round_keys]
                per_round.append({
                    "memory": sum(1 for d in first if d is not None and d.is_memory_replica()),
                    "disk": sum(1 for d in first if d is not None and not d.is_memory_replica()
                                and (d.is_disk_replica() or d.is_local_disk_replica())),
                    "none": sum(1 for d in first if d is None)})
            emit(step="tier_disk", memory_keys=int(mem[1]), disk_keys=int(mem[2]),
                 per_round=per_round)
            expect(all(r["none"] == 0 for r in per_round), f"keys without replicas {per_round}")
            expect(sum(r["disk"] for r in per_round) > 0, f"no key on disk alone {per_round}")
        else:
            expect(f"memory_keys={FULL_BLOCKS} " in summary and "unknown_keys=0" in summary,
                   f"tier summary: {tier.records}")

    # Reset through the LookupKey admin channel: remove_all(force=True) on the worker.
    with step("reset"):
        all_keys = [k for rnd in range(ROUNDS) for q in range(REQUESTS)
                    for k in e.keys(Prompts.tokens(request_tag(rnd, q)))]
        listed_before = None
        if args.metrics_port:  # the listing shows every saved key before the reset
            body = admin_keys(args.metrics_port)
            listed_before = sum(1 for k in all_keys if k in body)
            expect(listed_before == len(all_keys),
                   f"the master lists {listed_before} of {len(all_keys)} saved keys")
        t0 = time.perf_counter()
        ok = e.client.reset()
        reset_ms = ms(t0)
        hits = [e.lookup(f"{request_tag(rnd, q)}/after", Prompts.tokens(request_tag(rnd, q)))
                .hit_length for rnd in range(ROUNDS) for q in range(REQUESTS)]
        left = sum(e.worker.store.batch_is_exist(all_keys))
        listed = None
        if args.metrics_port:
            body = admin_keys(args.metrics_port)
            listed = sum(1 for k in all_keys if k in body)
        emit(step="reset", ms=reset_ms, acked=ok, max_hit=max(hits),
             keys_checked=len(all_keys), keys_left=left, master_listed_before=listed_before,
             master_lists=listed)
        expect(ok is True, "LookupKeyClient.reset() was refused")
        expect(max(hits) == 0, f"lookups after the reset hit up to {max(hits)} tokens")
        expect(left == 0, f"{left} of {len(all_keys)} keys exist after the reset")
        expect(not listed, f"the master still lists {listed} keys after the reset")
    emit(time={"role": "reader", "load_ms": median(load_ms), "lookup_ms": median(lookup_ms),
               "rounds": ROUNDS, "keys": keys, "bytes": keys * e.page,
               "load_ms_all": load_ms, "lookup_ms_all": lookup_ms})
    e.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", choices=["tidewire", "mooncake"], required=True)
    p.add_argument("--master", required=True, help="the store master's HOST:PORT")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="the master's admin HTTP port (reset is also checked there)")
    p.add_argument("--disk", action="store_true",
                   help="mode standalone-store with enable_offload (no segment of its own): "
                   "the test runs a tier owner")
    p.add_argument("role", choices=["writer", "reader"])
    args = p.parse_args()
    # A test may ask for every thread's Python stack (test_vllm_disk.py's memory guard).
    import faulthandler
    import signal
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # Our JSON lines keep the real stdout; fd 1 becomes stderr for everyone else.
    vllm_parts.OUT = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if args.store == "tidewire":
        # The shim first: `mooncake.store` is tidewire.store.
        sys.path[:0] = [os.path.join(REPO, "python", "tidewire", "shim"),
                        os.path.join(REPO, "python")]
    tmp = tempfile.mkdtemp(prefix=f"vllm-{args.role}-")
    code = 0
    try:
        (writer if args.role == "writer" else reader)(args, tmp)
        if FAILURES:
            emit(error="; ".join(FAILURES), failures=FAILURES)
            code = 1
        else:
            emit(closed=True)
    except Exception as e:  # reported to the test, which fails on it
        import traceback

        traceback.print_exc()
        emit(error=f"{type(e).__name__}: {e}", failures=FAILURES)
        code = 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    vllm_parts.OUT.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown of torch/vLLM threads (the store is closed)


if __name__ == "__main__":
    main()
