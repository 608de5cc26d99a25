"""Stress and fault cases for the Store, runnable against tidewire or the real Mooncake wheel.

Every value is derived from (key, version): a 32-byte header (magic, a hash of the key, the
version, the length, a CRC of those) and then bytes cut from a fixed random pool at an offset
that depends on key and version. A read is checked byte for byte: it must be a miss (or an
error code), or exactly one version of that key. A torn value, another key's value or a wrong
length is a failure.

Cases (short variant; ``TIDEWIRE_STORE_STRESS=long`` or ``--long`` for the long one):

=====================  ==========================================================================
mixed_threads          8 threads, shared keys, put/upsert/put_from/upsert_from/get/get_into/
                       batch_get_into/remove/is_exist/get_size; then every key read back and
                       60 % of the segments filled with pinned values after remove_all
mixed_processes        the same from 4 processes (2 threads each), each with a segment
hot_upserts            2 threads x 200 (long: 1,000) upserts of one 1 MiB key and a reader, in
                       a 64 MiB segment: no -200, and the whole segment is free after remove_all
eviction               512 MiB (long: 2 GiB) of 1 MiB puts into a 256 MiB segment; survivors
                       checked; after remove_all 75 % of the segment fits pinned values again
kill_owner             a segment owner SIGKILLed while puts go to it: errors, no hangs, puts
                       work again within client_ttl + 8 s; keys with 2 replicas stay readable
kill_reader            a process looping get_into on a 64 MiB key SIGKILLed mid-read: the other
                       readers are unaffected and the key becomes evictable after the lease
kill_master            the master SIGKILLed (no HA) and restarted on the same port while both
                       clients work: errors, no hangs, recovery within 20 s, both segments back
cycles                 2,000 (long: 20,000) put/get/get_into/remove cycles after a warm-up, then
                       10 (100) setup/close cycles: this process's open fds and threads grow by
                       at most 2, its RSS by at most 16 MiB (long: 32 MiB; 32/64 MiB over the
                       setup/close cycles); the master's fds by at most 2, its RSS 16 (32) MiB
big_value              a 256 MiB (long: 1 GiB) value put_from, get_into, batch_get_into,
                       upserted in place and read again, every byte checked
batch_concurrency      64 threads (long: 512 in 8 processes) of batch_put_from/put_batch/
                       batch_upsert_from/batch_get_into/get_batch/batch_is_exist/batch_remove on
                       their own keys: every code and every byte exactly as expected
=====================  ==========================================================================

Each case runs in its own process group (``run_isolated``), so a crash or a hang is reported
as that case's failure and every process it started is killed. Script mode prints a table::

    python python/tests/store_stress.py --target tidewire|mooncake [--cases a,b] [--long]

Mooncake's listeners bind every address, so ``--target mooncake`` re-runs itself inside a
private network namespace (``unshare -n``, loopback up) unless it already is in one.

This file is the entry point (the case table, isolation, the command line); the harness lives
beside it: ``store_stress_base`` (profiles, values and their checks, buffers, targets, results),
``store_stress_work`` (agents and workloads), ``store_stress_cases`` and ``store_stress_faults``
(the cases). Their public names are importable from here, as before.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback

# The harness's public names, re-exported (callers use store_stress.<name>).
from store_stress_base import (
    Buf, check, check_in, describe, GiB, HANG_S, HEADER, header, HERE, key_hash, KiB,
    long_mode, MAGIC, MiB, MooncakeMaster, parse_header, POOL_SIZE, proc_stats, Profile, PYDIR,
    REPO, Result, RESULT_MARK, SCRIPT, Tally, Target, value, value_pieces, write_into)
from store_stress_work import (
    Agent, agent_main, BATCH_KEYS, BATCH_MAX, batch_workload, fill_check, MIX_OPS,
    MIX_READ_MISS, MIX_REMOVE_OK, mix_size, MIX_SIZES, MIX_SLOT, MIX_WEIGHTS, MIX_WRITE_OK,
    mixed_workload, probe, read_loop)
from store_stress_cases import (
    case_batch_concurrency, case_big_value, case_cycles, case_eviction, case_hot_upserts,
    case_mixed_processes, case_mixed_threads, Ctx, timed, wait_for)
from store_stress_faults import case_kill_master, case_kill_owner, case_kill_reader


CASES = {
    "mixed_threads": case_mixed_threads,
    "mixed_processes": case_mixed_processes,
    "hot_upserts": case_hot_upserts,
    "eviction": case_eviction,
    "kill_owner": case_kill_owner,
    "kill_reader": case_kill_reader,
    "kill_master": case_kill_master,
    "cycles": case_cycles,
    "big_value": case_big_value,
    "batch_concurrency": case_batch_concurrency,
}
CASE_NAMES = list(CASES)


def run_case(target_name, case, long):
    """Runs one case in this process; a result dict."""
    res = Result(case, target_name)
    t0 = time.monotonic()
    ctx = None
    try:
        ctx = Ctx(Target(target_name))
        CASES[case](ctx, Profile(long), res)
    except Exception:
        res.fail(f"exception: {traceback.format_exc(limit=6)}")
    finally:
        if ctx:
            ctx.cleanup()
        res.seconds = time.monotonic() - t0
    return res.as_dict()


def run_isolated(target_name, case, long, timeout=None):
    """Runs one case in a fresh process group; a crash or a hang is that case's failure, and
    every process the case started is killed afterwards."""
    timeout = timeout or Profile(long).case_timeout
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PYDIR, HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, os.path.abspath(__file__), "--target", target_name, "--run-case", case]
    if long:
        cmd.append("--long")
    t0 = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env,
                             start_new_session=True)
        hung = False
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # whatever the case left behind
            except (ProcessLookupError, PermissionError):
                pass
        err.seek(0)
        tail = err.read()[-3000:]
    for line in reversed(out.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    res = Result(case, target_name)
    res.seconds = time.monotonic() - t0
    if hung:
        res.fail(f"hung: the case did not finish within {timeout} s")
    else:
        rc = p.returncode
        how = f"signal {-rc} ({signal.Signals(-rc).name})" if rc < 0 else f"exit code {rc}"
        res.fail(f"crashed: the case process ended with {how}")
    res.info["stderr_tail"] = tail
    return res.as_dict()


def summary(r):
    """The few numbers of a result worth a table column."""
    i = r.get("info", {})
    c = r.get("counts", {})
    keys = {
        "mixed_threads": ["ops", "final_verified"],
        "mixed_processes": ["ops", "final_verified"],
        "hot_upserts": ["upserts_s", "fill_filled_mib"],
        "eviction": ["put_s", "survivors", "fill_filled_mib"],
        "kill_owner": ["puts_after_kill", "recovered_after_s", "failed_puts_started_after_kill",
                       "replicated_reads_right_after_kill", "max_put_s"],
        "kill_reader": ["surviving_reader", "big_key_exists_after_fill", "fill_filled_mib"],
        "kill_master": ["calls_while_down", "recovered_here_s", "recovered_peer_s",
                        "max_call_s", "fill_filled_mib"],
        "cycles": ["cycles_per_s", "client_start", "client_end", "setup_close_s"],
        "big_value": ["mib", "put_from_mib_s", "get_into_mib_s"],
        "batch_concurrency": ["threads", "calls", "mib_verified"],
    }.get(r["case"], [])
    parts = []
    for k in keys:
        if k in i:
            v = i[k]
            if isinstance(v, dict) and "rss" in v:
                v = f"rss {v['rss'] >> 20} MiB fds {v['fds']} thr {v['threads']}"
            parts.append(f"{k}={v}")
        elif k in c:
            parts.append(f"{k}={c[k]}")
    return ", ".join(parts)


def in_private_netns():
    try:
        with open("/proc/net/dev") as f:
            names = [ln.split(":")[0].strip() for ln in f.readlines()[2:]]
        return names == ["lo"]
    except OSError:
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="tidewire", choices=["tidewire", "mooncake"])
    ap.add_argument("--cases", default=",".join(CASE_NAMES))
    ap.add_argument("--long", action="store_true", default=long_mode())
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--run-case", help=argparse.SUPPRESS)
    ap.add_argument("--agent", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.agent:
        agent_main(json.loads(args.agent))
        return 0
    if args.run_case:
        r = run_case(args.target, args.run_case, args.long)
        sys.stdout.flush()
        print(RESULT_MARK + json.dumps(r), flush=True)
        os._exit(0)  # a stuck native thread must not keep the case alive
    if args.target == "mooncake" and not in_private_netns():
        script = ("ip link set lo up && exec " + " ".join(
            map(_quote, [sys.executable, os.path.abspath(__file__)] + (argv or sys.argv[1:]))))
        return subprocess.call(["unshare", "-n", "bash", "-c", script])
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}; known: {CASE_NAMES}")
    results = []
    print(f"store stress on {args.target} ({'long' if args.long else 'short'} variant)",
          flush=True)
    for c in cases:
        r = run_isolated(args.target, c, args.long)
        results.append(r)
        print(f"{c:18} {'PASS' if r['ok'] else 'FAIL':4} {r['seconds']:7.1f} s  {summary(r)}",
              flush=True)
        for p in r["problems"][:6]:
            print(f"{'':24} - {p.splitlines()[0] if p else p}", flush=True)
        if not r["ok"] and r["info"].get("stderr_tail") and r["problems"][0].startswith("crash"):
            print(r["info"]["stderr_tail"][-1500:], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    passed = sum(r["ok"] for r in results)
    print(f"{passed}/{len(results)} cases passed", flush=True)
    return 0 if passed == len(results) else 1


def _quote(s):
    import shlex

    return shlex.quote(s)


if __name__ == "__main__":
    sys.exit(main())
