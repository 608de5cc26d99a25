"""SGLang's own PD disaggregation transfer (sglang 0.5.23, Mooncake backend, unchanged) between a
prefill and a decode process over TCP, on tidewire and on the real Mooncake wheel (the control).

What runs (``sglang_pd_driver.py``, both processes under the serving environment):
``MooncakeKVManager`` on each side (prefill with its ``MooncakeKVBootstrapServer`` started by
``start_disagg_service``), SGLang's shared Mooncake engine, CPU ``MHATokenToKVPool`` KV caches,
``MooncakeKVSender`` / ``MooncakeKVReceiver`` per bootstrap room, ``MOONCAKE_PROTOCOL=tcp``.

Cases, every byte of every K/V page and the metadata row compared on the decode side:

- ``rooms``: 3 rounds of 6 rooms at once, 64 pages each (8 layers x K/V x 16 KiB: 16 MiB a
  room), the decode pages scattered by a used pool (about a thousand descriptors a room);
- ``large``: one room of 320 scattered pages (5,120 descriptors in one batch);
- ``unregistered``: the decode manager's ``deregister_buffer_to_engine()`` and then a room: it
  must fail on both sides through SGLang's own path (``KVPoll.Failed`` with a failure record;
  the decode pages untouched); then ``register_buffer_to_engine()``;
- ``recovery``: once SGLang's failed-session probe (``send_probe``) has lifted the blacklist of
  the decode session, 2 rooms must succeed again.

What stands in: the KV bytes are seeded random bytes written where the forward pass would write
them (no model, ``model_path="dummy"``); the KV pool lives in CPU memory (no GPU). Everything
between the pools is SGLang's code and the engine.

The Mooncake control runs the same drivers with the wheel inside a private network namespace; a
check Mooncake fails is printed and that test is xfailed with the reasons. Times: ``PD-TIME
sglang CASE ENGINE MS`` lines, medians over the rooms (prefill: ``send`` to ``Success``; decode:
``send_metadata`` to ``Success``).

    python test_sglang_pd.py --run tidewire|mooncake     # one run by hand, as JSON
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import pd_util  # noqa: E402
from pd_util import pd_test_deadline  # noqa: E402,F401  (autouse)

DRIVER = os.path.join(HERE, "sglang_pd_driver.py")
ROOMS_PER_ROUND, ROUNDS, PAGES = 6, 3, 64
LARGE_PAGES = 320

_REASON = None if __name__ == "__main__" else pd_util.environment_problem("sglang", "0.5.23")
pytestmark = pd_util.module_marks(_REASON)


def plan() -> List[Tuple[str, List[List[int]], str]]:
    """(label, [[room, pages], ...], expected outcome) in the order they run."""
    steps: List[Tuple[str, List[List[int]], str]] = []
    room = 1000
    for rnd in range(ROUNDS):
        steps.append(("rooms", [[room + k, PAGES] for k in range(ROOMS_PER_ROUND)], "success"))
        room += ROOMS_PER_ROUND
    steps.append(("large", [[room, LARGE_PAGES]], "success"))
    steps.append(("unregistered", [[room + 1, PAGES]], "failure"))
    steps.append(("recovery", [[room + 2, PAGES], [room + 3, PAGES]], "success"))
    return steps


def exchange(pair: pd_util.Pair, label: str, rooms: List[List[int]], outcome: str) -> bool:
    """One step: the prefill's senders, then the decode's receivers; waits for every room's
    verdict on both sides. False when a driver stopped answering."""
    pair.prefill.send(cmd="send", label=label, rooms=rooms, expect=outcome)
    pair.decode.send(cmd="receive", label=label, rooms=rooms, expect=outcome)
    for driver, side in ((pair.decode, "decode"), (pair.prefill, "prefill")):
        for room, _ in rooms:
            want = f"{label}/{side}/{room}"
            while True:
                msg = driver.until("case")
                if msg is None:
                    return False
                if msg["case"] == want:
                    break
    return True


def scenario(pair: pd_util.Pair) -> None:
    ready = pair.prefill.until("ready")
    if ready is None or pair.decode.until("step") is None:
        return
    pair.decode.send(cmd="connect", bootstrap=ready["ready"]["bootstrap"])
    if pair.decode.until("step") is None:
        return
    for label, rooms, outcome in plan():
        if label == "unregistered":
            pair.decode.send(cmd="unregister")
            if pair.decode.until("step") is None:
                return
        if label == "recovery":
            pair.decode.send(cmd="register")
            pair.prefill.send(cmd="wait_unblocked")
            if pair.decode.until("step") is None or pair.prefill.until("case") is None:
                return
        if not exchange(pair, label, rooms, outcome):
            return
    for driver in pair.both():
        driver.send(cmd="report")
        driver.until("times")


def run(engine: str) -> Dict[str, Any]:
    return pd_util.run_pair(DRIVER, engine, scenario)


def check_shape(result: Dict[str, Any]) -> None:
    """What a run with no failed check must also show."""
    pd_util.check_engine_modules(result)
    want = {f"{label}/{side}/{room}" for label, rooms, _ in plan() for room, _ in rooms
            for side in ("prefill", "decode")}
    passed = set(pd_util.cases_seen(result, "prefill") + pd_util.cases_seen(result, "decode"))
    assert want <= passed, f"rooms not passed: {sorted(want - passed)[:10]}"
    received = [m for m in result["decode"] if m.get("step") == "received"
                and m["label"] == "rooms"]
    assert len(received) == ROOMS_PER_ROUND * ROUNDS, len(received)
    assert all(m["scattered"] > PAGES // 2 for m in received), \
        [m["scattered"] for m in received]
    for label in ("rooms", "large", "recovery"):
        assert f"{label}_prefill_ms" in result["times"], result["times"]


def test_sglang_pd_on_tidewire() -> None:
    result = run("tidewire")
    pd_util.print_times("sglang", result)
    assert not result["failures"], "\n".join(result["failures"])
    check_shape(result)


def test_sglang_pd_on_mooncake_control() -> None:
    pd_util.require_netns()
    result = pd_util.run_in_netns(os.path.abspath(__file__))
    pd_util.print_times("sglang", result)
    pd_util.check_control(result)
    check_shape(result)


if __name__ == "__main__":
    pd_util.main_for(os.path.abspath(__file__), run)
