"""LMCache's own P2P transfer channel (lmcache 0.5.6, ``mooncake_te``, unchanged) between a
prefill and a decode process over TCP, on tidewire and on the real Mooncake wheel (the control).

What runs (``lmcache_pd_driver.py``, both processes under the serving environment): LMCache's
``L1MemoryManager`` arenas with objects of mixed sizes (1,000 B to 4 MiB - 3 B), its
``initialize_transfer_channel_context("mooncake_te", ...)`` on each side (engine set-up,
``register_memory`` of the arena, the ZMQ handshake server), ``get_transfer_channel_client``
(its msgpack handshake), ``submit_read`` (``batch_transfer_async_read``) and
``query_read_status`` (``transfer_check_status``). Cases: 8 reads of 48 objects, every byte
checked the moment the read is reported finished; 4 reads in flight at once, each checked when
it finishes; a read after the decode arena is unregistered (a clean failure through the
channel's own error path, the destination untouched); then the arena registered again and a
read that must succeed.

What stands in: nothing on the transfer path. The object bytes are seeded random bytes (no
model produced them) and there is no GPU (LMCache's L1 arena is host memory). The channel is
driven directly, as LMCache's own ``transfer_channel_benchmark`` does: the P2P adapter above it
needs ``lmcache.lmcache_native`` (not in the PyPI wheel) and a coordinator.

The Mooncake control runs the same drivers with the wheel inside a private network namespace.
A check Mooncake fails is printed and that test is xfailed with the reasons (Mooncake 0.3.13's
``transfer_check_status`` looks at the first task only, and its TCP transport reads into
unregistered local memory). Times: ``PD-TIME lmcache CASE ENGINE MS`` lines (medians).

    python test_lmcache_pd.py --run tidewire|mooncake     # one run by hand, as JSON
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import pd_util  # noqa: E402
from pd_util import pd_test_deadline  # noqa: E402,F401  (autouse)

DRIVER = os.path.join(HERE, "lmcache_pd_driver.py")
CASES = ["read0", "read7", "concurrent", "unregistered", "recovery"]

_REASON = None if __name__ == "__main__" else pd_util.environment_problem(
    "lmcache", "0.5.6", ["msgspec"])
pytestmark = pd_util.module_marks(_REASON)


def scenario(pair: pd_util.Pair) -> None:
    """The prefill publishes its catalog; the decode connects and runs every case."""
    ready = pair.prefill.until("ready")
    if ready is None or pair.decode.until("step") is None:
        return
    pair.decode.send(cmd="connect", **ready["ready"])
    if pair.decode.until("step") is None:
        return
    for name in ("reads", "concurrent", "unregistered", "recovery", "report"):
        pair.decode.send(cmd=name)
        key = "times" if name == "report" else "case"
        last = {"reads": "read7"}.get(name, name)
        while True:
            msg = pair.decode.until(key)
            if msg is None or key == "times" or msg.get("case") == last:
                break


def run(engine: str) -> Dict[str, Any]:
    return pd_util.run_pair(DRIVER, engine, scenario)


def check_shape(result: Dict[str, Any]) -> None:
    """What a run with no failed check must also show."""
    passed = pd_util.cases_seen(result, "decode")
    assert set(CASES) <= set(passed), f"cases passed: {passed}"
    pd_util.check_engine_modules(result)
    reads = [m for m in result["decode"] if str(m.get("step", "")).startswith("read")]
    assert len(reads) == 8 and all(m["objects"] == 48 for m in reads), reads
    assert {"read_ms", "read_landed_ms", "concurrent_ms", "recovery_ms"} <= set(result["times"]), \
        result["times"]


def test_lmcache_pd_channel_on_tidewire() -> None:
    result = run("tidewire")
    pd_util.print_times("lmcache", result)
    assert not result["failures"], "\n".join(result["failures"])
    check_shape(result)


def test_lmcache_pd_channel_on_mooncake_control() -> None:
    pd_util.require_netns()
    result = pd_util.run_in_netns(os.path.abspath(__file__))
    pd_util.print_times("lmcache", result)
    pd_util.check_control(result)
    check_shape(result)


if __name__ == "__main__":
    pd_util.main_for(os.path.abspath(__file__), run)
