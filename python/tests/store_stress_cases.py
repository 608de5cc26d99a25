"""The Store stress cases without a SIGKILL (see store_stress.py): mixed calls from threads and
processes, hot upserts, eviction, put/get/remove and setup/close cycles, a big value, and
batch calls from many threads; with the context that stops what a case started."""

import random
import threading
import time
from collections import Counter

from store_stress_base import (
    Buf, check, check_in, HANG_S, HEADER, KiB, MiB, proc_stats, Tally, value, write_into)
from store_stress_work import (
    Agent, batch_workload, fill_check, MIX_OPS, MIX_READ_MISS, MIX_WRITE_OK, mixed_workload,
    _valid_version)

# ------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------
class Ctx:
    """What a case started (masters, agents, in-process clients), stopped at the end."""

    def __init__(self, target):
        self.t = target
        self.stores, self.agents, self.masters = [], [], []

    def master(self, *flags, port=0):
        m = self.t.master(*flags, port=port)
        self.masters.append(m)
        return m

    def agent(self, m, segment, local_buffer=64 * MiB):
        a = Agent(self.t, m, segment, local_buffer)
        self.agents.append(a)
        return a

    def connect(self, m, segment, local_buffer=64 * MiB):
        s = self.t.connect(m.address, m.metadata, segment, local_buffer)
        self.stores.append(s)
        return s

    def cleanup(self):
        for s in self.stores:
            try:
                s.close()
            except Exception:
                pass
        for a in self.agents:
            a.close()
        for m in self.masters:
            m.stop()


def wait_for(pred, within, step=0.1):
    """Seconds until ``pred()`` held, or None if it did not within ``within`` s."""
    t0 = time.monotonic()
    while True:
        if pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 > within:
            return None
        time.sleep(step)


def timed(fn, *args, **kwargs):
    t0 = time.monotonic()
    r = fn(*args, **kwargs)
    return r, time.monotonic() - t0


def _mixed_final(ctx, res, s, keys, writers, capacity):
    """After the mixed workload: every key read twice (equal, valid), then space check."""
    for k in keys:
        a, b = s.get(k), s.get(k)
        if a != b:
            res.fail(f"final: two reads of {k} differ with no writer")
        if a:
            v, err = check(k, a)
            if err or not _valid_version(v, writers):
                res.fail(f"final: {k}: {err or f'version {v:#x} never written'}")
            else:
                res.counts["final_verified"] += 1
    rc = s.remove_all(True)
    res.info["remove_all"] = rc
    fill_check(s, ctx.t, res, capacity, 0.6, "fill")


def case_mixed_threads(ctx, prof, res):
    m = ctx.master("--default_kv_lease_ttl=500")
    ctx.agent(m, 128 * MiB)
    s = ctx.connect(m, 128 * MiB)
    keys = [f"mix/{i}" for i in range(48)]
    out = mixed_workload(s, ctx.t, keys, list(range(8)), 8, prof.mix_seconds, 11)
    res.merge(out)
    _mixed_final(ctx, res, s, keys, 8, 256 * MiB)
    res.info["ops"] = sum(out["counts"].get(op, 0) for op in MIX_OPS)


def case_mixed_processes(ctx, prof, res):
    m = ctx.master("--default_kv_lease_ttl=500")
    agents = [ctx.agent(m, 64 * MiB) for _ in range(4)]
    keys = [f"mixp/{i}" for i in range(48)]
    for i, a in enumerate(agents):
        a.send({"cmd": "mixed", "keys": keys, "writer_ids": [2 * i, 2 * i + 1], "writers": 8,
                "seconds": prof.mix_seconds, "seed": 100 + i})
    ops = 0
    for i, a in enumerate(agents):
        out = a.read(prof.mix_seconds + 3 * HANG_S)
        if "counts" not in out:
            res.fail(f"process {i}: {out}")
            continue
        res.merge(out, prefix="")
        ops += sum(out["counts"].get(op, 0) for op in MIX_OPS)
    res.info["ops"] = ops
    res.expect(all(a.alive() for a in agents), "a worker process died")
    s = ctx.connect(m, 0)
    _mixed_final(ctx, res, s, keys, 8, 256 * MiB)


def case_hot_upserts(ctx, prof, res):
    """2 threads upserting one 1 MiB key (same size in place, and another size) while a third
    reads it, in a 64 MiB segment: only 1 MiB is live, so no upsert may fail for space, and
    after remove_all the whole segment is there again."""
    seg = 64 * MiB
    m = ctx.master()
    ctx.agent(m, seg)
    s = ctx.connect(m, 0)
    key, per = "hot", prof.hot_upserts
    done = threading.Event()
    tallies = [Tally() for _ in range(3)]

    def writer(w):
        t = tallies[w]
        for i in range(1, per + 1):
            ver = (w << 32) | i
            n = MiB if i % 4 else MiB - 4 * KiB
            rc = s.upsert(key, value(key, ver, n))
            t.counts[f"upsert:{rc}"] += 1
            if rc not in MIX_WRITE_OK:
                t.bad(f"upsert -> {rc}", f"{n} B")

    def reader():
        t = tallies[2]
        buf = Buf(2 * MiB)
        s.register_buffer(buf.addr, buf.size)
        try:
            while not done.is_set():
                buf.zero(0, HEADER)
                r = s.get_into(key, buf.addr, buf.size)
                t.counts[f"get_into:{min(r, 1)}"] += 1
                if r > 0:
                    v, err = check_in(buf, 0, key, r)
                    if err or not _valid_version(v, 2):
                        t.bad(f"get_into: {err or 'a version never written'}")
                elif r not in MIX_READ_MISS:
                    t.bad(f"get_into -> {r}")
        finally:
            s.unregister_buffer(buf.addr)
            buf.close()

    ws = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(2)]
    rd = threading.Thread(target=reader, daemon=True)
    t0 = time.monotonic()
    for th in ws + [rd]:
        th.start()
    for th in ws:
        th.join(per * 0.5 + HANG_S)
        res.expect(not th.is_alive(), "an upsert hung")
    done.set()
    rd.join(HANG_S)
    res.expect(not rd.is_alive(), "the reader hung")
    res.info["upserts_s"] = round(time.monotonic() - t0, 2)
    for t in tallies:
        res.merge(t.as_dict())
    v = s.get(key)
    res.expect(v and check(key, v)[1] is None, f"the hot key after the upserts: "
                                               f"{check(key, v)[1] if v else 'a miss'}")
    res.info["remove_all"] = s.remove_all(True)
    fill_check(s, ctx.t, res, seg, 0.75, "fill")


def case_eviction(ctx, prof, res):
    seg = 256 * MiB
    m = ctx.master()
    owner = ctx.agent(m, seg)
    s = ctx.connect(m, 0)
    n = prof.evict_total // MiB
    keys = [f"ev/{i}" for i in range(n)]
    batch = 8
    src, dst = Buf(batch * MiB), Buf(batch * MiB)
    s.register_buffer(src.addr, src.size)
    s.register_buffer(dst.addr, dst.size)
    codes = Counter()
    t0 = time.monotonic()
    try:
        for b in range(0, n, batch):
            ks = keys[b:b + batch]
            if (b // batch) % 2:
                for i, k in enumerate(ks):  # copying puts, one call per key
                    rc = s.put(k, value(k, 1, MiB - 64))
                    codes[rc] += 1
                    if rc != 0:
                        res.fail(f"put({k}) -> {rc}")
            else:
                for i, k in enumerate(ks):
                    src.put(i * MiB, value(k, 1, MiB - 64))
                got = s.batch_put_from(ks, [src.addr + i * MiB for i in range(len(ks))],
                                       [MiB - 64] * len(ks))
                codes.update(got)
                for k, rc in zip(ks, got):
                    if rc != 0:
                        res.fail(f"batch_put_from({k}) -> {rc}")
        res.info["put_s"] = round(time.monotonic() - t0, 2)
        res.info["put_codes"] = {str(k): v for k, v in codes.items()}
        survivors, newest = 0, []
        for b in range(0, n, batch):
            ks = keys[b:b + batch]
            dst.zero()
            got = s.batch_get_into(ks, [dst.addr + i * MiB for i in range(len(ks))],
                                   [MiB] * len(ks))
            for i, (k, r) in enumerate(zip(ks, got)):
                if r == -704:
                    continue
                if r != MiB - 64:
                    res.fail(f"batch_get_into({k}) -> {r}")
                    continue
                v, err = check_in(dst, i * MiB, k, r, 1)
                if err:
                    res.fail(f"survivor {k}: {err}")
                else:
                    survivors += 1
                    newest.append(b + i)
        res.info["survivors"] = survivors
        res.info["newest_survivor"] = max(newest) if newest else None
        # Eviction keeps the segment mostly full: at least a quarter of it survives, and never
        # more than fits.
        res.expect(seg // MiB // 4 <= survivors <= seg // MiB,
                   f"{survivors} survivors of {n} x 1 MiB in a {seg >> 20} MiB segment")
        res.expect(owner.alive(), "the segment owner died")
    finally:
        for b in (src, dst):
            s.unregister_buffer(b.addr)
            b.close()
    res.info["remove_all"] = s.remove_all(True)
    fill_check(s, ctx.t, res, seg, 0.75, "fill")
    # And the segment still takes evictable puts.
    k = "ev/after"
    res.expect(s.put(k, value(k, 2, 4096)) == 0 and check(k, s.get(k))[0] == 2,
               "a put after remove_all does not read back")


def case_cycles(ctx, prof, res):
    m = ctx.master()
    ctx.agent(m, 64 * MiB)
    s = ctx.connect(m, 64 * MiB)
    buf = Buf(256 * KiB)
    s.register_buffer(buf.addr, buf.size)
    rnd = random.Random(5)
    bad = Counter()

    def cycle(i):
        k = f"cy/{i}"
        n = rnd.randint(4 * KiB, 64 * KiB)
        v = value(k, i, n)
        if i % 2:
            rc = s.put(k, v)
        else:
            buf.put(0, v)
            rc = s.put_from(k, buf.addr, n)
        if rc != 0:
            bad[f"put {rc}"] += 1
            return
        g = s.get(k)
        if g != v:
            bad["get " + ("miss" if not g else check(k, g)[1] or "old version")] += 1
        r = s.get_into(k, buf.addr + 128 * KiB, 128 * KiB)
        if r != n or buf.get(128 * KiB, n) != v:
            bad[f"get_into {r}"] += 1
        rc = s.remove(k, force=True)
        if rc != 0:
            bad[f"remove {rc}"] += 1

    warm = max(200, prof.cycles // 10)
    for i in range(warm):
        cycle(i)
    mpid = m.proc.pid
    a0, m0 = proc_stats(), proc_stats(mpid)
    t0 = time.monotonic()
    for i in range(warm, warm + prof.cycles):
        cycle(i)
    dt = time.monotonic() - t0
    a1, m1 = proc_stats(), proc_stats(mpid)
    s.unregister_buffer(buf.addr)
    buf.close()
    res.info["cycles"] = prof.cycles
    res.info["cycles_per_s"] = round(prof.cycles / dt, 1)
    res.info["client_start"], res.info["client_end"] = a0, a1
    res.info["master_start"], res.info["master_end"] = m0, m1
    res.expect(not bad, f"cycle errors: {dict(bad)}")
    rss_tol = (32 if prof.long else 16) * MiB
    res.expect(a1["rss"] - a0["rss"] <= rss_tol,
               f"client RSS grew {(a1['rss'] - a0['rss']) >> 20} MiB over {prof.cycles} cycles "
               f"(tolerance {rss_tol >> 20} MiB)")
    res.expect(a1["fds"] - a0["fds"] <= 2, f"client fds {a0['fds']} -> {a1['fds']}")
    res.expect(a1["threads"] - a0["threads"] <= 2,
               f"client threads {a0['threads']} -> {a1['threads']}")
    res.expect(m1["fds"] - m0["fds"] <= 2, f"master fds {m0['fds']} -> {m1['fds']}")
    res.expect(m1["rss"] - m0["rss"] <= rss_tol,
               f"master RSS grew {(m1['rss'] - m0['rss']) >> 20} MiB")

    # setup/close cycles: a client that comes and goes leaves nothing behind.
    def reconnect(i):
        c = ctx.t.connect(m.address, m.metadata, 16 * MiB, 16 * MiB)
        k = f"rc/{i}"
        ok = c.put(k, value(k, i, 8 * KiB)) == 0 and check(k, c.get(k))[0] == i
        c.close()
        if not ok:
            bad[f"reconnect {i}"] += 1

    for i in range(2):
        reconnect(i)
    time.sleep(0.5)
    b0 = proc_stats()
    t0 = time.monotonic()
    for i in range(2, 2 + prof.reconnects):
        reconnect(i)
    res.info["setup_close_s"] = round((time.monotonic() - t0) / prof.reconnects, 3)
    time.sleep(1.0)
    b1 = proc_stats()
    res.info["reconnects"] = prof.reconnects
    res.info["reconnect_start"], res.info["reconnect_end"] = b0, b1
    res.expect(not any(k.startswith("reconnect") for k in bad), f"reconnect errors: {dict(bad)}")
    res.expect(b1["fds"] - b0["fds"] <= 2,
               f"fds {b0['fds']} -> {b1['fds']} over {prof.reconnects} setup/close")
    res.expect(b1["threads"] - b0["threads"] <= 2,
               f"threads {b0['threads']} -> {b1['threads']} over {prof.reconnects} setup/close")
    res.expect(b1["rss"] - b0["rss"] <= 2 * rss_tol,
               f"RSS grew {(b1['rss'] - b0['rss']) >> 20} MiB over {prof.reconnects} setup/close")


def case_big_value(ctx, prof, res):
    n = prof.big
    m = ctx.master()
    ctx.agent(m, n + 64 * MiB, local_buffer=16 * MiB)
    s = ctx.connect(m, 0)
    key = "big/value"
    src, dst = Buf(n), Buf(n)
    try:
        res.expect(s.register_buffer(src.addr, n) == 0, "register src")
        res.expect(s.register_buffer(dst.addr, n) == 0, "register dst")
        write_into(src, 0, key, 1, n)
        rc, t_put = timed(s.put_from, key, src.addr, n)
        res.info["put_from_mib_s"] = round((n >> 20) / t_put, 1)
        if not res.expect(rc == 0, f"put_from of {n >> 20} MiB -> {rc}"):
            return
        rc, t_get = timed(s.get_into, key, dst.addr, n)
        res.info["get_into_mib_s"] = round((n >> 20) / t_get, 1)
        res.expect(rc == n, f"get_into -> {rc}")
        v, err = check_in(dst, 0, key, n, 1)
        res.expect(err is None, f"get_into bytes: {err}")
        dst.zero()
        got, t_b = timed(s.batch_get_into, [key], [dst.addr], [n])
        res.expect(got == [n], f"batch_get_into -> {got}")
        v, err = check_in(dst, 0, key, n, 1)
        res.expect(err is None, f"batch_get_into bytes: {err}")
        write_into(src, 0, key, 2, n)
        rc, t_up = timed(s.upsert_from, key, src.addr, n)
        res.info["upsert_from_mib_s"] = round((n >> 20) / t_up, 1)
        res.expect(rc == 0, f"upsert_from (same size) -> {rc}")
        dst.zero()
        rc = s.get_into(key, dst.addr, n)
        res.expect(rc == n, f"get_into after upsert -> {rc}")
        v, err = check_in(dst, 0, key, n, 2)
        res.expect(err is None, f"bytes after upsert: {err}")
        res.expect(s.get_size(key) == n, f"get_size -> {s.get_size(key)}")
        res.expect(s.remove(key, force=True) == 0, "remove")
        res.info["mib"] = n >> 20
    finally:
        for b in (src, dst):
            s.unregister_buffer(b.addr)
            b.close()


def case_batch_concurrency(ctx, prof, res):
    m = ctx.master()
    if prof.batch_procs:
        agents = [ctx.agent(m, 128 * MiB) for _ in range(prof.batch_procs)]
        for i, a in enumerate(agents):
            a.send({"cmd": "batch", "threads": prof.batch_threads, "seconds": prof.batch_seconds,
                    "seed": i, "tag": f"bc{i}"})
        for i, a in enumerate(agents):
            out = a.read(prof.batch_seconds + 200)
            if "counts" not in out:
                res.fail(f"process {i}: {out}")
            else:
                res.merge(out)
        res.expect(all(a.alive() for a in agents), "a process crashed")
        threads = prof.batch_procs * prof.batch_threads
    else:
        ctx.agent(m, 256 * MiB)
        s = ctx.connect(m, 0)
        res.merge(batch_workload(s, ctx.t, prof.batch_threads, prof.batch_seconds, 1, "bc"))
        threads = prof.batch_threads
    res.info["threads"] = threads
    res.info["calls"] = sum(res.counts.get(op, 0) for op in
                            ("put", "upsert", "get_into", "get_batch", "is_exist", "remove"))
    res.info["mib_verified"] = res.counts.get("bytes_verified", 0) >> 20
    res.expect(res.counts.get("bytes_verified", 0) > 0, "nothing was read back")
