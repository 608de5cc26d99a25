"""The Store stress harness's workloads (see store_stress.py): agent processes of a target
driven by JSON lines (``store_stress.py --agent``), and the mixed, batch and fill workloads
they and the case processes run, with every read checked."""

import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter

from store_stress_base import (
    Buf, check, check_in, HANG_S, HEADER, HERE, key_hash, KiB, MiB, _mix, proc_stats, PYDIR,
    SCRIPT, Tally, Target, value, write_into)

# ------------------------------------------------------------------------------------------
# Agents: client processes of the same target driven by JSON lines on stdin/stdout
# ------------------------------------------------------------------------------------------
class Agent:
    """A client process (store_stress.py with ``--agent``) holding a segment and running
    commands."""

    def __init__(self, target, master, segment, local_buffer=64 * MiB):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [PYDIR, HERE] + [p for p in [env.get("PYTHONPATH")] if p])
        conf = {"target": target.name, "master": master.address, "metadata": master.metadata,
                "segment": segment, "local_buffer": local_buffer}
        self.proc = subprocess.Popen([sys.executable, SCRIPT, "--agent",
                                      json.dumps(conf)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=env)
        self.pid = self.proc.pid
        self._lines = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.ready = self.read(90)
        if not self.ready.get("ready"):
            raise RuntimeError(f"agent did not start: {self.ready}")
        self.hostname = self.ready.get("hostname", "")

    def _pump(self):
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    self._lines.put(json.loads(line))
                except ValueError:
                    pass
        self._lines.put({"ready": False, "error": f"agent exited ({self.proc.wait()})",
                         "exited": True})

    def send(self, cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def read(self, timeout):
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            return {"error": f"agent did not answer within {timeout} s", "timeout": True}

    def call(self, cmd, timeout):
        self.send(cmd)
        return self.read(timeout)

    def alive(self):
        return self.proc.poll() is None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except Exception:
                self.kill()


def agent_main(conf):
    target = Target(conf["target"])
    try:
        s = target.connect(conf["master"], conf["metadata"], conf["segment"],
                           conf["local_buffer"])
    except Exception as e:
        print(json.dumps({"ready": False, "error": str(e)}), flush=True)
        return
    print(json.dumps({"ready": True, "hostname": s.get_hostname(), "pid": os.getpid()}),
          flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("cmd")
        try:
            if op == "mixed":
                out = mixed_workload(s, target, **cmd)
            elif op == "batch":
                out = batch_workload(s, target, **cmd)
            elif op == "probe":
                out = probe(s, **cmd)
            elif op == "read_loop":
                read_loop(s, **cmd)  # never returns
            elif op == "stats":
                out = proc_stats()
            else:
                out = {"error": f"unknown command {op}"}
        except Exception:
            out = {"counts": {},
                   "kinds": {"agent exception": [1, [traceback.format_exc(limit=3)]]}}
        print(json.dumps(out), flush=True)
    s.close()


def read_loop(s, key, size, version):
    """get_into ``key`` in a loop until killed; says so after the first good read."""
    buf = Buf(size)
    s.register_buffer(buf.addr, size)
    told, reads = False, 0
    while True:
        r = s.get_into(key, buf.addr, size)
        if r == size:
            reads += 1
            if not told:
                got, err = check_in(buf, 0, key, size, version)
                print(json.dumps({"reading": True, "error": err}), flush=True)
                told = True
        elif not told:
            print(json.dumps({"reading": False, "rc": r}), flush=True)
            told = True


def probe(s, prefix, n=4, size=16 * KiB, within=30.0):
    """Puts and reads back ``n`` fresh keys until that works; how long it took."""
    t0 = time.monotonic()
    attempt, last = 0, None
    while True:
        attempt += 1
        keys = [f"{prefix}/{attempt}/{i}" for i in range(n)]
        codes = []
        for k in keys:
            rc = s.upsert(k, value(k, attempt, size))
            if rc == 0:
                v = s.get(k)
                rc = 0 if v and check(k, v)[1] is None and check(k, v)[0] == attempt else -1
            codes.append(rc)
        if all(c == 0 for c in codes):
            return {"ok": True, "after": time.monotonic() - t0, "attempts": attempt}
        last = codes
        if time.monotonic() - t0 > within:
            return {"ok": False, "after": time.monotonic() - t0, "last": last}
        time.sleep(0.2)


# ------------------------------------------------------------------------------------------
# Workloads (run in the case process or in agents)
# ------------------------------------------------------------------------------------------
MIX_SIZES = (4 * KiB, 64 * KiB, 192 * KiB)
MIX_SLOT = 256 * KiB
# Codes that are real answers under contention on one key, with why:
#   -601 INVALID_WRITE: this write was pre-empted by a newer write of the key (Mooncake too);
#   -703 REPLICA_IS_NOT_READY: the key is being written; -704: removed meanwhile;
#   -714 OBJECT_REPLICA_BUSY: a same-size upsert while a read holds the replica (Mooncake).
MIX_WRITE_OK = {0, -601, -703, -704, -714}
MIX_READ_MISS = {-704, -703}
MIX_REMOVE_OK = {0, -704, -706, -703, -714}
MIX_OPS = ("upsert", "upsert_from", "put", "put_from", "get", "get_into", "batch_get_into",
           "remove", "is_exist", "get_size")
MIX_WEIGHTS = (22, 10, 8, 5, 18, 15, 6, 8, 4, 4)


def mix_size(key, version):
    return MIX_SIZES[_mix(key_hash(key) * 31 + version) % len(MIX_SIZES)]


def _valid_version(v, writers):
    return (v >> 32) < writers and (v & 0xFFFFFFFF) >= 1


def mixed_workload(s, target, keys, writer_ids, writers, seconds, seed, lease_force=0.5):
    """Threads (one per writer id) doing mixed calls on shared ``keys`` for ``seconds``.
    Version = writer_id << 32 | counter, so versions are unique across threads and processes."""
    deadline = time.monotonic() + seconds
    parts = []

    def verify(t, op, key, data):
        got, err = check(key, data)
        if err:
            t.bad(f"{op}: {err}", key)
        elif not _valid_version(got, writers):
            t.bad(f"{op}: a version that was never written", f"{key} {got:#x}")
        else:
            t.counts[f"{op}:verified"] += 1
            t.counts["bytes_verified"] += len(data)

    def worker(wid):
        t = Tally()
        parts.append(t)
        rnd = random.Random(seed * 1000 + wid)
        buf = Buf(8 * MIX_SLOT)
        try:
            if s.register_buffer(buf.addr, buf.size) != 0:
                t.bad("register_buffer failed")
                return
            counter = 0
            while time.monotonic() < deadline:
                key = rnd.choice(keys)
                op = rnd.choices(MIX_OPS, MIX_WEIGHTS)[0]
                t.counts[op] += 1
                if op in ("upsert", "put", "upsert_from", "put_from"):
                    counter += 1
                    ver = (wid << 32) | counter
                    n = mix_size(key, ver)
                    if op in ("upsert", "put"):
                        rc = getattr(s, op)(key, value(key, ver, n))
                    else:
                        buf.put(0, value(key, ver, n))
                        rc = getattr(s, op)(key, buf.addr, n)
                    t.counts[f"{op}:{rc}"] += 1
                    if rc not in MIX_WRITE_OK:
                        t.bad(f"{op} -> {rc}", f"{key} {n} B")
                elif op == "get":
                    v = s.get(key)
                    if v:
                        verify(t, op, key, v)
                    else:
                        t.counts["get:miss"] += 1
                elif op == "get_into":
                    buf.zero(MIX_SLOT, HEADER)  # bytes a read reports but never wrote show
                    r = s.get_into(key, buf.addr + MIX_SLOT, MIX_SLOT)
                    if r > 0:
                        verify(t, op, key, buf.get(MIX_SLOT, r))
                    else:
                        t.counts[f"get_into:{r}"] += 1
                        if r not in MIX_READ_MISS:
                            t.bad(f"get_into -> {r}", key)
                elif op == "batch_get_into":
                    ks = rnd.sample(keys, 3)
                    ptrs = [buf.addr + (2 + i) * MIX_SLOT for i in range(3)]
                    for p in ptrs:
                        buf.zero(p - buf.addr, HEADER)
                    res = s.batch_get_into(ks, ptrs, [MIX_SLOT] * 3)
                    for i, (k, r) in enumerate(zip(ks, res)):
                        if r > 0:
                            verify(t, op, k, buf.get((2 + i) * MIX_SLOT, r))
                        else:
                            t.counts[f"batch_get_into:{r}"] += 1
                            if r not in MIX_READ_MISS:
                                t.bad(f"batch_get_into -> {r}", k)
                elif op == "remove":
                    rc = s.remove(key, force=rnd.random() < lease_force)
                    t.counts[f"remove:{rc}"] += 1
                    if rc not in MIX_REMOVE_OK:
                        t.bad(f"remove -> {rc}", key)
                elif op == "is_exist":
                    rc = s.is_exist(key)
                    t.counts[f"is_exist:{rc}"] += 1
                    if rc not in (0, 1):
                        t.bad(f"is_exist -> {rc}", key)
                else:
                    rc = s.get_size(key)
                    t.counts[f"get_size:{rc}" if rc < 0 else "get_size:ok"] += 1
                    if rc not in MIX_READ_MISS and rc not in MIX_SIZES:
                        t.bad(f"get_size -> {rc}" if rc < 0 else "get_size: a size never written",
                              f"{key} {rc}")
        except Exception:
            t.bad("exception", traceback.format_exc(limit=3))
        finally:
            s.unregister_buffer(buf.addr)
            buf.close()

    ts = [threading.Thread(target=worker, args=(w,), daemon=True) for w in writer_ids]
    for th in ts:
        th.start()
    hung = 0
    for th in ts:
        th.join(max(1.0, deadline - time.monotonic()) + HANG_S)
        hung += th.is_alive()
    total = Tally()
    for t in parts:
        total.add(t)
    if hung:
        total.bad(f"threads still inside a call {HANG_S} s after the deadline", str(hung))
    return total.as_dict()


BATCH_KEYS = 8
BATCH_MAX = 32 * KiB


def batch_workload(s, target, threads, seconds, seed, tag, keys=BATCH_KEYS, max_size=BATCH_MAX):
    """``threads`` threads, each on its own keys, doing every batch call; each knows exactly what
    its keys hold, so every code and every byte is checked against that."""
    deadline = time.monotonic() + seconds
    parts = []
    barrier = threading.Barrier(threads, timeout=120)

    def worker(ti):
        t = Tally()
        parts.append(t)
        rnd = random.Random(seed * 7919 + ti)
        ks = [f"{tag}/t{ti}/k{i}" for i in range(keys)]
        state = {k: None for k in ks}  # key -> (version, size) or None
        src, dst = Buf(keys * max_size), Buf(keys * max_size)
        ver = 0
        try:
            for b in (src, dst):
                if s.register_buffer(b.addr, b.size) != 0:
                    t.bad("register_buffer failed")
                    return
            barrier.wait()
            while time.monotonic() < deadline:
                op = rnd.choice(("put", "upsert", "get_into", "get_batch", "is_exist", "remove"))
                t.counts[op] += 1
                if op in ("put", "upsert"):
                    pick = ([k for k in ks if state[k] is None] if op == "put"
                            else rnd.sample(ks, rnd.randint(1, keys)))
                    if not pick:
                        continue
                    ver += 1
                    sizes = [rnd.randint(HEADER, max_size) for _ in pick]
                    copying = rnd.random() < 0.3
                    if copying:
                        vals = [value(k, ver, n) for k, n in zip(pick, sizes)]
                        fn = s.put_batch if op == "put" else s.upsert_batch
                        rc = fn(pick, vals)
                        codes = [rc] * len(pick)
                        name = "put_batch" if op == "put" else "upsert_batch"
                    else:
                        ptrs = []
                        for k, n in zip(pick, sizes):
                            off = ks.index(k) * max_size
                            src.put(off, value(k, ver, n))
                            ptrs.append(src.addr + off)
                        fn = s.batch_put_from if op == "put" else s.batch_upsert_from
                        codes = fn(pick, ptrs, sizes)
                        name = "batch_put_from" if op == "put" else "batch_upsert_from"
                    for k, n, rc in zip(pick, sizes, codes):
                        t.counts[f"{name}:{rc}"] += 1
                        if rc == 0:
                            state[k] = (ver, n)
                        else:
                            t.bad(f"{name} -> {rc}", k)
                            state[k] = "unknown"
                elif op == "get_into":
                    ptrs = [dst.addr + i * max_size for i in range(keys)]
                    for p in ptrs:
                        dst.zero(p - dst.addr, HEADER)
                    got = s.batch_get_into(ks, ptrs, [max_size] * keys)
                    for i, (k, r) in enumerate(zip(ks, got)):
                        st = state[k]
                        if st == "unknown":
                            continue
                        if st is None:
                            if r != -704:
                                t.bad(f"batch_get_into of a removed key -> {r}", k)
                            continue
                        if r != st[1]:
                            t.bad(f"batch_get_into of a stored key -> {min(r, 0) or 'wrong size'}",
                                  f"{k} {r} want {st[1]}")
                            continue
                        v, err = check(k, dst.get(i * max_size, r))
                        if err or v != st[0]:
                            t.bad(f"batch_get_into: {err or 'an old version'}",
                                  f"{k} {v} want {st[0]}")
                        else:
                            t.counts["bytes_verified"] += r
                elif op == "get_batch":
                    got = s.get_batch(ks)
                    for k, v in zip(ks, got):
                        st = state[k]
                        if st == "unknown":
                            continue
                        if st is None:
                            if v:
                                t.bad("get_batch of a removed key: bytes", f"{k} {len(v)}")
                            continue
                        ver_got, err = check(k, v) if v else (None, "a miss")
                        if err or ver_got != st[0]:
                            t.bad(f"get_batch: {err or 'an old version'}",
                                  f"{k} {ver_got} want {st[0]}")
                        else:
                            t.counts["bytes_verified"] += len(v)
                elif op == "is_exist":
                    got = s.batch_is_exist(ks)
                    for k, e in zip(ks, got):
                        st = state[k]
                        if st != "unknown" and e != (0 if st is None else 1):
                            t.bad(f"batch_is_exist -> {e}, want {0 if st is None else 1}", k)
                else:
                    pick = rnd.sample(ks, rnd.randint(1, keys))
                    got = s.batch_remove(pick, force=True)
                    for k, rc in zip(pick, got):
                        st = state[k]
                        want = -704 if st is None else 0
                        if st != "unknown" and rc != want:
                            t.bad(f"batch_remove -> {rc}, want {want}", k)
                        state[k] = None if rc in (0, -704) else "unknown"
            t.counts["threads_done"] += 1
        except threading.BrokenBarrierError:
            t.bad("threads did not all start")
        except Exception:
            t.bad("exception", traceback.format_exc(limit=3))
        finally:
            s.batch_remove(ks, force=True)
            for b in (src, dst):
                s.unregister_buffer(b.addr)
                b.close()

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for th in ts:
        th.start()
    hung = 0
    for th in ts:
        th.join(max(1.0, deadline - time.monotonic()) + 120 + HANG_S)
        hung += th.is_alive()
    total = Tally()
    for t in parts:
        total.add(t)
    if hung:
        total.bad(f"threads did not finish {HANG_S} s after the deadline", str(hung))
    if total.counts["threads_done"] != threads:
        total.bad("threads that did not run to the end",
                  str(threads - total.counts["threads_done"]))
    return total.as_dict()


def fill_check(s, target, res, capacity, frac, prefix, wait_s=5.0, value_size=MiB):
    """After remove_all: ``frac`` of ``capacity`` must take pinned values again (within
    ``wait_s``), and read back exactly. Space lost for good fails here."""
    n = int(capacity * frac) // value_size
    pin = target.config(hard_pin=True)
    batch = 16
    src, dst = Buf(batch * value_size), Buf(batch * value_size)
    s.register_buffer(src.addr, src.size)
    s.register_buffer(dst.addr, dst.size)
    keys = [f"{prefix}/{i}" for i in range(n)]
    stored, codes = 0, Counter()
    t0 = time.monotonic()
    waited = 0.0
    try:
        for b in range(0, n, batch):
            ks = keys[b:b + batch]
            for i, k in enumerate(ks):
                write_into(src, i * value_size, k, 1, value_size)
            todo = list(range(len(ks)))
            deadline = time.monotonic() + wait_s
            while todo:
                got = s.batch_put_from([ks[i] for i in todo],
                                       [src.addr + i * value_size for i in todo],
                                       [value_size] * len(todo), pin)
                codes.update(got)
                todo = [i for i, rc in zip(todo, got) if rc != 0]
                if not todo or time.monotonic() > deadline:
                    break
                tw = time.monotonic()
                time.sleep(0.5)
                waited += time.monotonic() - tw
            if todo:
                res.fail(f"space lost: after remove_all only {stored + len(ks) - len(todo)} of "
                         f"{n} x {value_size >> 20} MiB pinned values fit "
                         f"(capacity {capacity >> 20} MiB, codes {dict(codes)})")
                return
            stored += len(ks)
            dst.zero()
            got = s.batch_get_into(ks, [dst.addr + i * value_size for i in range(len(ks))],
                                   [value_size] * len(ks))
            for i, (k, r) in enumerate(zip(ks, got)):
                if r != value_size:
                    res.fail(f"fill: batch_get_into({k}) -> {r}")
                    return
                v, err = check_in(dst, i * value_size, k, value_size, 1)
                if err:
                    res.fail(f"fill: {k}: {err}")
                    return
        res.info[f"{prefix}_filled_mib"] = stored * value_size >> 20
        res.info[f"{prefix}_waited_s"] = round(waited, 2)
        res.info[f"{prefix}_s"] = round(time.monotonic() - t0, 2)
    finally:
        s.batch_remove(keys, force=True)
        for b in (src, dst):
            s.unregister_buffer(b.addr)
            b.close()
