"""The Store stress cases that SIGKILL a process (see store_stress.py): a segment owner, a
reader in the middle of a read, the master."""

import random
import threading
import time
from collections import Counter

from store_stress_base import Buf, check, check_in, HANG_S, KiB, MiB, value, write_into
from store_stress_work import fill_check, probe
from store_stress_cases import timed, wait_for

def case_kill_owner(ctx, prof, res):
    ttl = 2
    m = ctx.master(f"--client_ttl={ttl}")
    victim = ctx.agent(m, 256 * MiB)
    ctx.agent(m, 256 * MiB)
    s = ctx.connect(m, 0)
    pin2 = ctx.t.config(hard_pin=True, replicas=2)
    pin1 = ctx.t.config(hard_pin=True)
    rep_keys = [f"ko/rep{i}" for i in range(16)]
    one_keys = [f"ko/one{i}" for i in range(32)]
    for k in rep_keys:
        res.expect(s.put(k, value(k, 1, 256 * KiB), pin2) == 0, f"put 2 replicas of {k}")
    for k in one_keys:
        res.expect(s.put(k, value(k, 1, 256 * KiB), pin1) == 0, f"put {k}")
    for k in rep_keys + one_keys:
        res.expect(check(k, s.get(k))[0] == 1, f"{k} does not read back before the kill")

    size = 8 * MiB
    log, stop, inside = [], threading.Event(), threading.Event()
    started = threading.Semaphore(0)

    def writer(w):
        buf = Buf(size)
        s.register_buffer(buf.addr, size)
        i = 0
        try:
            while not stop.is_set():
                i += 1
                k = f"ko/w{w}/{i}"
                write_into(buf, 0, k, i, size)
                inside.set()
                t0 = time.monotonic()
                rc = s.put_from(k, buf.addr, size)
                dt = time.monotonic() - t0
                log.append((t0, dt, rc))
                started.release()
                if rc == 0:
                    s.remove(k, force=True)
        finally:
            s.unregister_buffer(buf.addr)
            buf.close()

    ws = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(2)]
    for w in ws:
        w.start()
    for _ in range(6):
        started.acquire(timeout=30)
    inside.clear()
    inside.wait(10)
    time.sleep(0.005)
    victim.kill()
    t_kill = time.monotonic()
    # Right after the kill (before the master can know): replicated keys must still read.
    buf = Buf(MiB)
    s.register_buffer(buf.addr, buf.size)
    early = Counter()
    for k in rep_keys:
        (r, dt) = timed(s.get_into, k, buf.addr, MiB)
        res.expect(dt < HANG_S, f"get_into({k}) took {dt:.1f} s")
        if r == 256 * KiB and check_in(buf, 0, k, r, 1)[1] is None:
            early["ok"] += 1
        else:
            early[str(r)] += 1
    res.info["replicated_reads_right_after_kill"] = dict(early)
    res.expect(early["ok"] == len(rep_keys),
               f"keys with 2 replicas right after the owner's death: {dict(early)} "
               f"(a read must fall back to the live replica)")
    recover_bound = ttl + 8
    time.sleep(max(0.0, t_kill + recover_bound - time.monotonic()))
    stop.set()
    for w in ws:
        w.join(HANG_S + 5)
        res.expect(not w.is_alive(), f"a writer is stuck in put_from > {HANG_S} s")
    after = [(t0 - t_kill, dt, rc) for t0, dt, rc in log if t0 + dt >= t_kill]
    res.info["puts_total"] = len(log)
    res.info["puts_after_kill"] = len(after)
    res.info["put_codes_after_kill"] = {str(k): v for k, v in
                                        Counter(rc for *_, rc in after).items()}
    res.info["max_put_s"] = round(max((dt for _, dt, _ in log), default=0), 2)
    res.expect(all(dt < HANG_S for _, dt, _ in log), "a put hung")
    # Recovery: from some time on, every put succeeded, and that time is bounded.
    last_bad = max((t0 + dt for t0, dt, rc in after if rc != 0), default=0.0)
    streak = [x for x in after if x[0] > last_bad]
    res.info["recovered_after_s"] = round(last_bad, 2)
    res.expect(last_bad <= ttl + 6 and len(streak) >= 4,
               f"puts did not recover: last failure {last_bad:.1f} s after the kill, "
               f"{len(streak)} good puts after it")
    failed_new = [x for x in after if x[0] > 0.05 and x[2] != 0]
    res.info["failed_puts_started_after_kill"] = len(failed_new)
    res.expect(len(failed_new) <= 2,
               f"{len(failed_new)} puts started after the kill failed (a put must move away "
               f"from a segment that just failed)")
    late = Counter()
    for k in rep_keys + one_keys:
        (r, dt) = timed(s.get_into, k, buf.addr, MiB)
        res.expect(dt < HANG_S, f"get_into({k}) took {dt:.1f} s")
        if r > 0:
            v, err = check_in(buf, 0, k, r, 1)
            late["ok" if err is None else "bad"] += 1
            if err:
                res.fail(f"after the kill {k}: {err}")
        else:
            late[str(r)] += 1
            if k in rep_keys:
                res.fail(f"{k} (2 replicas, one alive) -> {r} after the dead owner was dropped")
    res.info["reads_after_ttl"] = dict(late)
    s.unregister_buffer(buf.addr)
    buf.close()


def case_kill_reader(ctx, prof, res):
    lease_ms, ttl, seg, big = 2000, 3, 256 * MiB, 64 * MiB
    m = ctx.master(f"--default_kv_lease_ttl={lease_ms}", f"--client_ttl={ttl}")
    owner = ctx.agent(m, seg)
    s = ctx.connect(m, 0)
    key = "kr/big"
    src = Buf(big)
    s.register_buffer(src.addr, big)
    write_into(src, 0, key, 1, big)
    res.expect(s.put_from(key, src.addr, big) == 0, "put of the 64 MiB key")
    reader = ctx.agent(m, 0, local_buffer=16 * MiB)
    reader.send({"cmd": "read_loop", "key": key, "size": big, "version": 1})
    hello = reader.read(60)
    if not hello.get("reading") or hello.get("error"):
        res.fail(f"the reader did not read: {hello}")
        return
    stop, survivor = threading.Event(), Counter()

    def other_reader():
        while not stop.is_set():
            r, dt = timed(s.get_into, key, src.addr, big)
            survivor["max_ms"] = max(survivor["max_ms"], int(dt * 1000))
            if r == big and check_in(src, 0, key, big, 1)[1] is None:
                survivor["ok"] += 1
            else:
                survivor[f"rc {r}" if r != big else "bad bytes"] += 1

    th = threading.Thread(target=other_reader, daemon=True)
    th.start()
    time.sleep(random.uniform(0.2, 0.6))
    reader.kill()
    t_kill = time.monotonic()
    time.sleep(1.0)
    stop.set()
    th.join(HANG_S + 5)
    res.expect(not th.is_alive(), "the surviving reader hung")
    res.info["surviving_reader"] = dict(survivor)
    res.expect(survivor["ok"] > 0 and set(survivor) <= {"ok", "max_ms"},
               f"the surviving reader saw errors: {dict(survivor)}")
    res.expect(owner.alive(), "the segment owner died with the reader")
    s.unregister_buffer(src.addr)
    src.close()
    # A dead reader's hold must end by its lease (or its client's TTL): then the key is the
    # oldest object and 320 x 1 MiB of evictable puts into the 256 MiB segment evict it.
    wait = max(lease_ms / 1000, ttl) + 2
    time.sleep(max(0.0, t_kill + wait - time.monotonic()))
    codes = Counter()
    ks = [f"kr/fill{i}" for i in range(320)]
    for k in ks:
        rc = s.put(k, value(k, 1, MiB - 64))
        codes[rc] += 1
    res.info["fill_codes"] = {str(k): v for k, v in codes.items()}
    res.expect(codes[0] == len(ks), f"evictable puts after the reader's death: {dict(codes)}")
    still = s.is_exist(key)
    res.info["big_key_exists_after_fill"] = still
    res.expect(still == 0, f"the key a killed reader held is still not evicted "
                           f"{wait + 2:.0f}+ s after the kill (is_exist={still})")
    good = 0
    for k in ks:
        v = s.get(k)
        if v:
            got, err = check(k, v)
            if err:
                res.fail(f"{k}: {err}")
            good += 1
    res.info["fill_survivors"] = good
    res.info["remove_all"] = s.remove_all(True)
    fill_check(s, ctx.t, res, seg, 0.75, "fill")


def case_kill_master(ctx, prof, res):
    seg = 64 * MiB
    m = ctx.master()
    port = m.port
    s = ctx.connect(m, seg)
    peer = ctx.agent(m, seg)
    old = [f"km/old{i}" for i in range(16)]
    for k in old:
        res.expect(s.upsert(k, value(k, 1, 16 * KiB)) == 0, f"upsert {k}")
    log, stop = [], threading.Event()

    def worker(w):
        buf = Buf(64 * KiB)
        s.register_buffer(buf.addr, buf.size)
        i = 0
        try:
            while not stop.is_set():
                i += 1
                k = f"km/w{w}/{i}"
                t0 = time.monotonic()
                rc = s.upsert(k, value(k, i, 16 * KiB))
                t1 = time.monotonic()
                log.append((t0, t1 - t0, "upsert", rc))
                r = s.get_into(k, buf.addr, buf.size)
                log.append((t1, time.monotonic() - t1, "get_into", r if r <= 0 else 0))
                if r > 0:
                    v, err = check_in(buf, 0, k, r, i)
                    if err:
                        res.fail(f"get_into({k}): {err}")
                elif rc == 0 and r not in (-704, -900, -901, -800, -200):
                    res.fail(f"get_into({k}) -> {r}")
                time.sleep(0.01)
        finally:
            s.unregister_buffer(buf.addr)
            buf.close()

    ws = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(3)]
    for w in ws:
        w.start()
    time.sleep(1.5)
    m.stop()
    t_kill = time.monotonic()
    # Calls made while the master is down: an error each, in bounded time.
    k = "km/while-down"
    direct = {}
    for name, fn in (("upsert", lambda: s.upsert(k, value(k, 1, 4096))),
                     ("get_size", lambda: s.get_size(old[0])),
                     ("batch_is_exist", lambda: s.batch_is_exist(old[:2])),
                     ("health_check", s.health_check)):
        r, dt = timed(fn)
        direct[name] = [r, round(dt, 2)]
        res.expect(dt < HANG_S, f"{name} with the master down took {dt:.1f} s")
    res.info["calls_with_master_down"] = direct
    res.expect(direct["upsert"][0] != 0, f"upsert with the master down -> {direct['upsert'][0]}")
    res.expect(direct["get_size"][0] < 0, f"get_size with the master down -> {direct['get_size']}")
    res.expect(all(x != 1 for x in direct["batch_is_exist"][0]),
               f"batch_is_exist with the master down -> {direct['batch_is_exist']}")
    # health_check may go by the last heartbeat: it must say so within 3 s.
    sick = wait_for(lambda: s.health_check() != 0, 3.0)
    res.info["health_check_noticed_s"] = round(sick, 2) if sick is not None else None
    res.expect(sick is not None, "health_check still 0 3 s after the master died")
    time.sleep(max(0.0, t_kill + 2.0 - time.monotonic()))
    m2 = ctx.master(port=port)
    t_up = time.monotonic()
    res.info["down_s"] = round(t_up - t_kill, 2)
    mine = probe(s, "km/probe-here")
    theirs = peer.call({"cmd": "probe", "prefix": "km/probe-peer"}, 60)
    res.info["recovered_here_s"] = round(mine["after"], 2)
    res.info["recovered_peer_s"] = round(theirs.get("after", -1), 2)
    res.expect(mine["ok"] and mine["after"] < 20,
               f"this client did not recover within 20 s of the restart: {mine}")
    res.expect(theirs.get("ok") and theirs["after"] < 20,
               f"the peer process did not recover within 20 s of the restart: {theirs}")
    t_ok = time.monotonic()
    time.sleep(2.0)
    stop.set()
    for w in ws:
        w.join(HANG_S + 5)
        res.expect(not w.is_alive(), f"a worker is stuck in a call > {HANG_S} s")
    res.info["max_call_s"] = round(max((dt for _, dt, _, _ in log), default=0), 2)
    res.expect(all(dt < HANG_S for _, dt, _, _ in log), "a call hung")
    # The workers' calls that began and ended while the master was down must all have failed.
    down = [x for x in log if x[0] > t_kill and x[0] + x[1] < t_up]
    res.info["calls_while_down"] = len(down)
    res.info["codes_while_down"] = {f"{op}:{rc}": n for (op, rc), n in
                                    Counter((x[2], x[3]) for x in down).items()}
    res.expect(all(x[3] != 0 for x in down),
               "a call made while the master was down succeeded")
    late = [x for x in log if x[0] > t_ok]
    res.info["calls_after_recovery"] = len(late)
    bad_late = Counter((x[2], x[3]) for x in late if x[3] != 0)
    res.expect(late and not bad_late, f"errors after recovery: {dict(bad_late)}")
    # Without HA the objects are gone; a read is a miss, never other bytes.
    for k in old:
        v = s.get(k)
        if v and check(k, v)[1]:
            res.fail(f"{k} after the restart: {check(k, v)[1]}")
    # Both segments are back: 60 % of both fits pinned values.
    fill_check(s, ctx.t, res, 2 * seg, 0.6, "fill", wait_s=10)
    res.expect(m2.proc.poll() is None, "the restarted master died")
