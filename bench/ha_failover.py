#!/usr/bin/env python3
"""Leader failover with the journal at scale: tidewire-master next to mooncake_master, same run.

    bench/ha_failover.py                                  # 1 M objects, 3 kills, both stores
    bench/ha_failover.py --objects 200000 --stores tidewire

For each store: one etcd (loopback, ``--unsafe-no-fsync``), three masters with
``--enable_ha --enable_oplog`` (tidewire also ``--ha_lease_ttl=--ttl``; Mooncake's lease has no
flag), one client process lending a segment that puts --objects values of 64 bytes in batches of
1,000 (each value derived from its key). Then, --kills times: the leader (as etcd's
``master_view`` key names it) is SIGKILLed and a replacement master started, as a supervisor
would; measured from the kill: a different leader in etcd, and the first acknowledged put
(a probe put every 20 ms). At the end every key is checked (``batch_is_exist``, every 1,009th
read back byte for byte): objects that were acknowledged and are gone are reported as lost.
etcd's database size is read after the fill and at the end.

How it runs: the script re-executes itself inside ``unshare -n`` (a private network namespace
with only ``lo``; Mooncake's listeners bind every address) with the Python of
``.venv-mooncake`` (the Mooncake wheel; tidewire comes from ``python/``). Each store's client is
a worker process of its own; every process is started and stopped by PID. Results: a table on
stdout and ``result.json`` in --outdir (default target/bench/results/ha_failover-<UTC>).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(PROJECT, "python", "tests"))
from etcd_util import Etcd, free_port  # noqa: E402

HOST = "127.0.0.1"
STORES = ("tidewire", "mooncake")
VIEW_KEY = "mooncake-store/mooncake_cluster/master_view"
VALUE_LEN = 64
BATCH = 1000


def key(i):
    return f"ha-{i:016x}{i * 0x9E3779B97F4A7C15 % (1 << 64):016x}"


def value(k):
    b = k.encode()
    return (b * (VALUE_LEN // len(b) + 1))[:VALUE_LEN]


# -- the client worker (one process per store) -------------------------------------------------

def worker(args):
    """Reads commands on stdin, one JSON line each; answers one JSON line each."""
    if args.worker == "tidewire":
        from tidewire.store import MooncakeDistributedStore
    else:
        from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    seg = max(256 << 20, args.objects * VALUE_LEN * 4)
    rc = s.setup(HOST, "P2PHANDSHAKE", seg, 64 << 20, "tcp", "", args.master)
    print(json.dumps({"ready": rc == 0, "rc": rc}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "fill":
            t0, failed = time.monotonic(), 0
            for lo in range(0, args.objects, BATCH):
                ks = [key(i) for i in range(lo, min(lo + BATCH, args.objects))]
                for attempt in range(50):
                    if s.put_batch(ks, [value(k) for k in ks]) == 0:
                        break
                    failed += 1
                    time.sleep(0.2)
                else:
                    raise SystemExit(f"fill: batch at {lo} keeps failing")
            out = {"seconds": time.monotonic() - t0, "failed_batches": failed}
        elif cmd["op"] == "probe":
            t0, deadline, rc = time.monotonic(), time.monotonic() + cmd["limit"], None
            while time.monotonic() < deadline:
                rc = s.put(cmd["key"], b"p" * VALUE_LEN)
                if rc == 0:
                    break
                time.sleep(0.02)
            out = {"rc": rc, "seconds": time.monotonic() - t0}
        elif cmd["op"] == "check":
            missing, wrong = 0, 0
            for lo in range(0, args.objects, BATCH):
                ks = [key(i) for i in range(lo, min(lo + BATCH, args.objects))]
                missing += sum(1 for r in s.batch_is_exist(ks) if r != 1)
            for i in range(0, args.objects, 1009):
                got = s.get(key(i))
                if got and got != value(key(i)):
                    wrong += 1
            out = {"missing": missing, "wrong": wrong}
        else:
            out = {"error": f"unknown op {cmd['op']}"}
        print(json.dumps(out), flush=True)
    s.close()


# -- the orchestrator ------------------------------------------------------------------------

class Cluster:
    def __init__(self, store, args, log):
        self.store, self.args, self.log = store, args, log
        self.etcd = Etcd()
        self.masters = []  # (proc, "host:port")
        for _ in range(3):
            self.start_master()

    def start_master(self):
        errf = open(os.path.join(self.args.outdir, f"{self.store}.masters.stderr"), "ab")
        ha = [f"--rpc_address={HOST}", "--enable_ha=true", "--enable_oplog=true",
              f"--etcd_endpoints={self.etcd.endpoint}"]
        if self.store == "tidewire":
            p = subprocess.Popen([self.args.tw_master, "--rpc_port=0", "--metrics_port=0",
                                  f"--metrics_host={HOST}", f"--ha_lease_ttl={self.args.ttl}",
                                  *ha], stdout=subprocess.PIPE, stderr=errf, text=True)
            info = json.loads(p.stdout.readline() or "{}")
            addr = f"{HOST}:{info['rpc_port']}"
        else:
            port = free_port()
            exe = os.path.join(os.path.dirname(sys.executable), "mooncake_master")
            p = subprocess.Popen([exe, f"--rpc_port={port}", f"--metrics_port={free_port()}",
                                  "--enable_http_metadata_server=false", *ha],
                                 stdout=subprocess.DEVNULL, stderr=errf,
                                 env=dict(os.environ, GLOG_minloglevel="2"))
            addr = f"{HOST}:{port}"
        self.masters.append((p, addr))

    def leader(self):
        v = self.etcd.get(VIEW_KEY)
        return v.strip() if v else None

    def wait_leader(self, not_this=None, limit=120):
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            lead = self.leader()
            if lead and lead != not_this and any(a == lead for _, a in self.masters):
                return lead, time.monotonic() - t0
            time.sleep(0.02)
        raise RuntimeError(f"{self.store}: no leader within {limit} s")

    def kill_leader(self):
        """SIGKILLs the leader and starts a replacement; (the kill's time, seconds from it
        until etcd named another leader)."""
        lead, _ = self.wait_leader()
        i = next(i for i, (_, a) in enumerate(self.masters) if a == lead)
        p, _ = self.masters.pop(i)
        t0 = time.monotonic()
        p.send_signal(signal.SIGKILL)
        p.wait()
        self.start_master()
        self.wait_leader(not_this=lead)
        return t0, time.monotonic() - t0

    def close(self):
        for p, _ in self.masters:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        self.etcd.close()


def run_store(store, args, log):
    c = Cluster(store, args, log)
    w = None
    try:
        c.wait_leader()
        env = dict(os.environ, PYTHONPATH=os.path.join(PROJECT, "python"),
                   GLOG_minloglevel="2")
        w = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", store,
                              "--master", f"etcd://{c.etcd.endpoint}",
                              "--objects", str(args.objects)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                             stderr=open(os.path.join(args.outdir, f"{store}.client.stderr"),
                                         "wb"))

        def ask(**cmd):
            if cmd:
                w.stdin.write(json.dumps(cmd) + "\n")
                w.stdin.flush()
            line = w.stdout.readline()
            if not line:
                raise RuntimeError(f"{store}: the client exited")
            return json.loads(line)

        ready = ask()
        if not ready.get("ready"):
            raise RuntimeError(f"{store}: client setup failed: {ready}")
        fill = ask(op="fill")
        log(f"{store}: {args.objects} objects in {fill['seconds']:.1f} s")
        res = {"fill_s": fill["seconds"], "etcd_after_fill": c.etcd.db_size(), "kills": []}
        for k in range(args.kills):
            time.sleep(args.settle)
            t0, elected = c.kill_leader()
            probe = ask(op="probe", key=f"probe-{k}", limit=120)
            first_put = time.monotonic() - t0
            ok = probe["rc"] == 0
            res["kills"].append({"elected_s": elected, "first_put_s": first_put if ok else None,
                                 "probe_rc": probe["rc"]})
            log(f"{store}: kill {k + 1}: new leader after {elected:.2f} s, first put "
                + (f"after {first_put:.2f} s" if ok else f"failed ({probe['rc']}) for 120 s"))
        check = ask(op="check")
        res.update(lost=check["missing"], wrong=check["wrong"], etcd_at_end=c.etcd.db_size())
        log(f"{store}: lost {check['missing']} of {args.objects} acknowledged objects, "
            f"{check['wrong']} read back wrong; etcd db {res['etcd_at_end'][0] >> 20} MiB")
        return res
    finally:
        if w is not None:
            try:
                w.stdin.close()
                w.wait(timeout=30)
            except Exception:
                w.kill()
                w.wait()
        c.close()


def table(results, args):
    rows = [f"| {args.objects:,} objects | " + " | ".join(results) + " |",
            "|---|" + "---|" * len(results)]
    fmt = lambda v: "failed" if v is None else f"{v:.1f} s"  # noqa: E731
    for k in range(args.kills):
        rows.append(f"| kill {k + 1}: new leader / first put | " + " | ".join(
            f"{fmt(r['kills'][k]['elected_s'])} / {fmt(r['kills'][k]['first_put_s'])}"
            if "kills" in r and len(r["kills"]) > k else "-" for r in results.values()) + " |")
    rows.append("| acknowledged objects lost | " + " | ".join(
        f"{r.get('lost', '-'):,}" if isinstance(r.get("lost"), int) else "-"
        for r in results.values()) + " |")
    rows.append("| fill (one client, batches of 1,000) | " + " | ".join(
        f"{r['fill_s']:.0f} s" if "fill_s" in r else "-" for r in results.values()) + " |")
    rows.append("| etcd database after fill / at end | " + " | ".join(
        f"{r['etcd_after_fill'][0] >> 20} / {r['etcd_at_end'][0] >> 20} MiB"
        if "etcd_at_end" in r else "-" for r in results.values()) + " |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objects", type=int, default=1_000_000)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--ttl", type=int, default=2, help="tidewire's --ha_lease_ttl (seconds)")
    ap.add_argument("--settle", type=float, default=2.0,
                    help="seconds between the fill (or a failover) and the next kill")
    ap.add_argument("--stores", default=",".join(STORES))
    ap.add_argument("--outdir")
    ap.add_argument("--python", default=os.path.join(PROJECT, ".venv-mooncake", "bin", "python"))
    ap.add_argument("--in-namespace", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not args.in_namespace:
        if not os.path.exists(args.python):
            raise SystemExit(f"ha_failover.py: {args.python} is missing "
                             "(scripts/setup_mooncake_venv.sh creates .venv-mooncake)")
        cmd = ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"',
               args.python, os.path.abspath(__file__), *sys.argv[1:], "--in-namespace"]
        os.execvp("unshare", cmd)
    args.tw_master = os.path.join(PROJECT, "target", "release", "tidewire-master")
    args.outdir = args.outdir or os.path.join(
        PROJECT, "target", "bench", "results",
        "ha_failover-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    os.makedirs(args.outdir, exist_ok=True)

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    results = {}
    for store in args.stores.split(","):
        try:
            results[store] = run_store(store, args, log)
        except Exception as e:  # a store that fails is reported, the other still runs
            log(f"{store}: {e}")
            results[store] = {"error": str(e)}
    with open(os.path.join(args.outdir, "result.json"), "w") as f:
        json.dump({"args": {k: v for k, v in vars(args).items() if k != "python"},
                   "results": results}, f, indent=1)
    print(table(results, args))
    print(f"results: {args.outdir}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(128 + s))
    main()
