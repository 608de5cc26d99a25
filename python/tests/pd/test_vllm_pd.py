"""vLLM's own P/D connector (vllm 0.33.0, ``MooncakeConnector``, scheduler and worker sides,
unchanged) between a prefill and a decode process over TCP, on tidewire and on the real Mooncake
wheel (the control).

What runs (``vllm_pd_driver.py``, both processes under the serving environment): in each, vLLM's
``Scheduler`` (with the connector's scheduler side: ``get_num_new_matched_tokens``,
``update_state_after_alloc``, ``build_connector_meta``, ``request_finished``), the connector's
worker side through ``KVConnectorModelRunnerMixin`` (``start_load_kv``,
``get_transfer_results``, ``get_block_ids_with_load_errors``), CPU KV caches registered with
``register_kv_caches``, the real ZMQ side channel, and vLLM's ``MooncakeBootstrapServer`` on
127.0.0.1 in the prefill process; ``mooncake_protocol: tcp``. Each request is 16 blocks of 32
tokens (8 layers, K and V: 8 MiB).

Cases, every byte of every block compared on the decode side the moment the request is reported
received:

- ``batch``: 2 rounds of 4 requests at once;
- ``staggered``: 5 requests added to the decode engine 30 ms apart, while earlier ones transfer;
- ``unregistered``: the decode connector's ``unregister_kv_caches()`` and then a request: its
  load must fail through the connector's own error path (the scheduler gets its blocks from
  ``get_block_ids_with_load_errors`` and fails the request: ``kv_load_failure_policy`` "fail",
  vLLM's default), the blocks untouched; then ``restore_kv_caches()``;
- ``recovery``: 2 requests that must load again.

What stands in: the model (its forward pass writes seeded bytes into the scheduled KV blocks of a
prefill and samples a fixed token) and the GPU (CPU KV tensors; ``torch.accelerator.
current_device_index`` returns 0, as it cannot in the CUDA build without a driver). Everything
from the scheduler to the KV tensors on the other side is vLLM's code and the engine.

The Mooncake control runs the same drivers with the wheel inside a private network namespace; a
check Mooncake fails is printed and that test is xfailed with the reasons. Times: ``PD-TIME vllm
CASE ENGINE MS`` lines, medians over the requests (decode side: from the request's arrival to
its KV reported received, with the engine loops' steps in between; prefill side: each
``batch_transfer_sync_write`` call, from the connector's own transfer stats).

    python test_vllm_pd.py --run tidewire|mooncake     # one run by hand, as JSON
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import pd_util  # noqa: E402
from pd_util import pd_test_deadline  # noqa: E402,F401  (autouse)

DRIVER = os.path.join(HERE, "vllm_pd_driver.py")
BLOCKS = 16
STAGGER_MS = 30

_REASON = None if __name__ == "__main__" else pd_util.environment_problem(
    "vllm", "0.33.0", ["uvicorn", "msgspec"])
pytestmark = pd_util.module_marks(_REASON)


def plan() -> List[Dict[str, Any]]:
    """The steps in order: label, request tags, decode stagger, expected outcome."""
    def reqs(label: str, n: int) -> List[str]:
        return [f"{label}-{k}" for k in range(n)]

    return [
        {"label": "batch", "tags": reqs("batch0", 4), "stagger_ms": 0, "expect": "success"},
        {"label": "batch", "tags": reqs("batch1", 4), "stagger_ms": 0, "expect": "success"},
        {"label": "staggered", "tags": reqs("staggered", 5), "stagger_ms": STAGGER_MS,
         "expect": "success"},
        {"label": "unregistered", "tags": reqs("unregistered", 1), "stagger_ms": 0,
         "expect": "failure"},
        {"label": "recovery", "tags": reqs("recovery", 2), "stagger_ms": 0,
         "expect": "success"},
    ]


def run_step(pair: pd_util.Pair, step: Dict[str, Any]) -> bool:
    """Prefill adds the requests, decode adds them (staggered or not) and waits for a verdict on
    each; the prefill then waits until the connector reports the sent ones done."""
    requests = [{"tag": t, "blocks": BLOCKS, "transfer_id": f"xfer-{t}"} for t in step["tags"]]
    pair.prefill.send(cmd="add", label=step["label"], requests=requests)
    if pair.prefill.until("step") is None:
        return False
    pair.decode.send(cmd="add", label=step["label"], requests=requests,
                     stagger_ms=step["stagger_ms"], expect=step["expect"])
    if pair.decode.until("step") is None:
        return False
    pair.decode.send(cmd="wait", label=step["label"], tags=step["tags"])
    for tag in step["tags"]:
        want = f"{step['label']}/decode/{tag}"
        while True:
            msg = pair.decode.until("case")
            if msg is None:
                return False
            if msg["case"] == want:
                break
    if step["expect"] == "success":
        pair.prefill.send(cmd="wait_sent", label=step["label"], tags=step["tags"])
        if pair.prefill.until("case") is None:
            return False
    return True


def scenario(pair: pd_util.Pair) -> None:
    ready = pair.prefill.until("ready")
    if ready is None or pair.decode.until("step") is None:
        return
    pair.decode.send(cmd="connect", bootstrap=ready["ready"]["bootstrap"],
                     engine_id=ready["ready"]["engine_id"])
    if pair.decode.until("step") is None:
        return
    for step in plan():
        if step["label"] == "unregistered":
            pair.decode.send(cmd="unregister")
            if pair.decode.until("step") is None:
                return
        if step["label"] == "recovery":
            pair.decode.send(cmd="restore")
            if pair.decode.until("step") is None:
                return
        if not run_step(pair, step):
            return
    for driver in pair.both():
        driver.send(cmd="report")
        driver.until("times")


def run(engine: str) -> Dict[str, Any]:
    return pd_util.run_pair(DRIVER, engine, scenario)


def check_shape(result: Dict[str, Any]) -> None:
    """What a run with no failed check must also show."""
    pd_util.check_engine_modules(result)
    want = {f"{s['label']}/decode/{t}" for s in plan() for t in s["tags"]}
    passed = set(pd_util.cases_seen(result, "decode"))
    assert want <= passed, f"requests not passed: {sorted(want - passed)}"
    checked = [m for m in result["decode"] if m.get("step") == "request"
               and m["outcome"] == "received"]
    assert len(checked) == 15 and all(m["blocks"] == BLOCKS for m in checked), checked
    for label in ("batch", "staggered", "recovery"):
        assert f"{label}_decode_ms" in result["times"], result["times"]
        assert f"{label}_write_prefill_ms" in result["times"], result["times"]


def test_vllm_pd_on_tidewire() -> None:
    result = run("tidewire")
    pd_util.print_times("vllm", result)
    assert not result["failures"], "\n".join(result["failures"])
    check_shape(result)


def test_vllm_pd_on_mooncake_control() -> None:
    pd_util.require_netns()
    result = pd_util.run_in_netns(os.path.abspath(__file__))
    pd_util.print_times("vllm", result)
    pd_util.check_control(result)
    check_shape(result)


if __name__ == "__main__":
    pd_util.main_for(os.path.abspath(__file__), run)
