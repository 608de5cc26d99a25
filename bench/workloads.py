"""The three measured workloads. Each point: warm-up, then `reps` timed repetitions whose raw
values are kept, summarised as median/min/max. Every point checks its bytes after the timed part:
the destination is cleared before timing and compared with the expected pattern afterwards, so a
call that returned 0 without moving the data fails the point.

  tput     batch_transfer_sync_{write,read}: `batch` blocks of `block` bytes per call, GB/s
  lat      transfer_sync_{read,write} of one small block: p50/p99 per call
  scatter  one batch_transfer_sync_read of N fragments: contiguous on the remote side, with a gap
           after each on the local side; ms per call
"""
import ctypes
import time

from meter import Meter, summary
from peers import pattern

MAX_WINDOWS = 8  # a point cycles over up to 8 disjoint buffer windows


def say(*parts):
    print(*parts, flush=True)


def per_rep(d, ops, nbytes):
    d["ops"] = ops
    d["bytes"] = nbytes
    d["gbps"] = nbytes / d["wall_s"] / 1e9
    d["ms_per_op"] = d["wall_s"] / ops * 1e3
    d["thread_cpu_ms_per_op"] = d["thread_cpu_s"] / ops * 1e3
    d["proc_cpu_ms_per_op"] = d["proc_cpu_s"] / ops * 1e3
    d["total_cpu_ms_per_op"] = d["total_cpu_s"] / ops * 1e3
    d["cpu_s_per_gb"] = d["total_cpu_s"] / (nbytes / 1e9)
    d["lo_ratio"] = d["lo_rx_bytes"] / nbytes
    return d


def summarise(rec, reps, keys):
    rec["reps"] = reps
    for k in keys:
        rec[k] = summary([r[k] for r in reps])


# -- throughput --------------------------------------------------------------------------------

def windows(pair, block, batch):
    """Argument lists (local addrs, remote addrs, lengths) for each disjoint window."""
    span = block * batch
    out = []
    for w in range(max(1, min(MAX_WINDOWS, pair.size // span))):
        base = w * span
        out.append(([pair.local + base + i * block for i in range(batch)],
                    [pair.remote + base + i * block for i in range(batch)],
                    [block] * batch))
    return out


def calibrate(call, arglists, warm_s, rep_s, cap_s):
    """Warm up for warm_s (at least 2 calls); return calls per rep_s, or raise on failure."""
    t0 = time.perf_counter()
    n = 0
    while True:
        rc = call(*arglists[n % len(arglists)])
        n += 1
        elapsed = time.perf_counter() - t0
        if rc != 0:
            raise RuntimeError(f"warm-up rc={rc} after {elapsed:.3f}s")
        if (elapsed >= warm_s and n >= 2) or elapsed > cap_s:
            return max(1, round(rep_s / (elapsed / n)))


def set_remote(pair, arglists, data):
    """Make the remote windows hold `data` (WRITE from the local windows)."""
    ctypes.memmove(pair.local, data, len(data))
    for loc, rem, lens in arglists:
        rc = pair.engine.batch_transfer_sync_write(pair.target, loc, rem, lens)
        if rc != 0:
            raise RuntimeError(f"preparing the remote windows: rc={rc}")


def fetch_remote(pair, arglists, nbytes):
    ctypes.memset(pair.local, 0, nbytes)
    for loc, rem, lens in arglists:
        rc = pair.engine.batch_transfer_sync_read(pair.target, loc, rem, lens)
        if rc != 0:
            raise RuntimeError(f"reading the remote windows back: rc={rc}")
    return ctypes.string_at(pair.local, nbytes)


def tput_point(pair, a, op, block, batch):
    e = pair.engine
    fn = e.batch_transfer_sync_write if op == "write" else e.batch_transfer_sync_read
    arglists = windows(pair, block, batch)
    area = len(arglists) * block * batch
    want = pattern(area, block % 251 + batch)

    def call(loc, rem, lens):
        return fn(pair.target, loc, rem, lens)

    set_remote(pair, arglists, want)  # READ points: the source the reads must deliver
    iters = calibrate(call, arglists, a.warmup_seconds, a.rep_seconds, a.max_point_seconds)
    # Clear the destination, so that only the timed calls can put the pattern there.
    if op == "write":
        set_remote(pair, arglists, bytes(area))
        ctypes.memmove(pair.local, want, area)
    else:
        ctypes.memset(pair.local, 0, area)
    reps = []
    for _ in range(a.reps):
        s = pair.meter.snapshot()
        for i in range(iters):
            rc = call(*arglists[i % len(arglists)])
            if rc != 0:
                raise RuntimeError(f"rc={rc} at call {i}")
        d = Meter.between(s, pair.meter.snapshot())
        reps.append(per_rep(d, iters, iters * block * batch))
        if d["wall_s"] * a.reps > a.max_point_seconds * 3:
            break
    touched = min(len(arglists), iters) * block * batch
    if op == "write":
        got = fetch_remote(pair, arglists, area)
    else:
        got = ctypes.string_at(pair.local, area)
    if got[:touched] != want[:touched]:
        raise RuntimeError("data mismatch after the timed calls")
    return reps, iters


def sec_tput(pair, a, res):
    for op in a.ops:
        for block in a.blocks:
            for batch in a.batches:
                if block * batch > pair.size:
                    continue
                rec = {"section": "tput", "op": op, "block": block, "batch": batch,
                       "api": f"batch_transfer_sync_{op}", "error": None}
                try:
                    reps, iters = tput_point(pair, a, op, block, batch)
                    rec["iters_per_rep"] = iters
                    summarise(rec, reps, ("gbps", "cpu_s_per_gb", "lo_ratio", "bg_cores",
                                          "thread_cpu_s", "total_cpu_s", "wall_s"))
                except RuntimeError as err:
                    rec["error"] = str(err)
                res["points"].append(rec)
                line = f"tput {op:5s} block={block:>9d} batch={batch:>3d}"
                if rec["error"] is None:
                    g = rec["gbps"]
                    line += (f" GB/s med={g['median']:.3f} min={g['min']:.3f} max={g['max']:.3f}"
                             f" cpu_s/GB={rec['cpu_s_per_gb']['median']:.2f}"
                             f" lo_ratio={rec['lo_ratio']['median']:.3f}"
                             f" bg={rec['bg_cores']['median']:.2f} data_ok=True")
                else:
                    line += f" ERROR {rec['error']}"
                say(line)


# -- latency -----------------------------------------------------------------------------------

def lat_point(pair, a, op, size):
    e = pair.engine
    fn = e.transfer_sync_write if op == "write" else e.transfer_sync_read
    want = pattern(size, size % 251 + (op == "write"))
    for _ in range(a.lat_warmup):
        rc = fn(pair.target, pair.local, pair.remote, size)
        if rc != 0:
            raise RuntimeError(f"warm-up rc={rc}")
    if op == "read":
        ctypes.memmove(pair.local, want, size)
        if e.transfer_sync_write(pair.target, pair.local, pair.remote, size) != 0:
            raise RuntimeError("preparing the remote block failed")
        ctypes.memset(pair.local, 0, size)
    else:
        ctypes.memset(pair.local, 0, size)
        if e.transfer_sync_write(pair.target, pair.local, pair.remote, size) != 0:
            raise RuntimeError("clearing the remote block failed")
        ctypes.memmove(pair.local, want, size)
    reps = []
    clock = time.perf_counter_ns
    for _ in range(a.reps):
        samples = []
        s = pair.meter.snapshot()
        end = clock() + int(a.lat_seconds * 1e9)
        while len(samples) < a.lat_max_samples:
            t1 = clock()
            rc = fn(pair.target, pair.local, pair.remote, size)
            t2 = clock()
            if rc != 0:
                raise RuntimeError(f"rc={rc}")
            samples.append(t2 - t1)
            if t2 > end:
                break
        d = Meter.between(s, pair.meter.snapshot())
        samples.sort()
        n = len(samples)
        d.update({
            "samples": n,
            "p50_us": samples[n // 2] / 1e3,
            "p99_us": samples[min(n - 1, int(n * 0.99))] / 1e3,
            "mean_us": sum(samples) / n / 1e3,
            "min_us": samples[0] / 1e3,
            "max_us": samples[-1] / 1e3,
            "thread_cpu_us_per_op": d["thread_cpu_s"] / n * 1e6,
            "total_cpu_us_per_op": d["total_cpu_s"] / n * 1e6,
            "lo_pkts_per_op": d["lo_rx_pkts"] / n,
        })
        reps.append(d)
    if op == "write":
        ctypes.memset(pair.local, 0, size)
        if e.transfer_sync_read(pair.target, pair.local, pair.remote, size) != 0:
            raise RuntimeError("reading the remote block back failed")
    if ctypes.string_at(pair.local, size) != want:
        raise RuntimeError("data mismatch after the timed calls")
    return reps


def sec_lat(pair, a, res):
    for op in a.lat_ops:
        for size in a.lat_sizes:
            rec = {"section": "lat", "op": op, "size": size, "api": f"transfer_sync_{op}",
                   "error": None}
            try:
                summarise(rec, lat_point(pair, a, op, size),
                          ("p50_us", "p99_us", "mean_us", "min_us", "thread_cpu_us_per_op",
                           "total_cpu_us_per_op", "lo_pkts_per_op", "bg_cores"))
            except RuntimeError as err:
                rec["error"] = str(err)
            res["points"].append(rec)
            if rec["error"] is None:
                say(f"lat  {op:5s} size={size:>6d} p50={rec['p50_us']['median']:.1f}us"
                    f" p99={rec['p99_us']['median']:.1f}us mean={rec['mean_us']['median']:.1f}us"
                    f" cpu/op={rec['total_cpu_us_per_op']['median']:.1f}us"
                    f" pkts/op={rec['lo_pkts_per_op']['median']:.1f}"
                    f" bg={rec['bg_cores']['median']:.2f} data_ok=True")
            else:
                say(f"lat  {op:5s} size={size:>6d} ERROR {rec['error']}")


# -- scatter READ ------------------------------------------------------------------------------

def scatter_ok(pair, n, frag, stride, want):
    """Each fragment landed at its local slot, and the gaps after them stayed zero."""
    got = ctypes.string_at(pair.local, n * stride)
    gap = bytes(stride - frag)
    for i in range(n):
        at = i * stride
        if got[at:at + frag] != want[i * frag:(i + 1) * frag] or got[at + frag:at + stride] != gap:
            return False
    return True


def scatter_point(pair, a, n, rec):
    frag, stride = a.scatter_frag, a.scatter_stride
    fn = pair.engine.batch_transfer_sync_read
    loc = [pair.local + i * stride for i in range(n)]
    rem = [pair.remote + i * frag for i in range(n)]
    lens = [frag] * n

    def call():
        return fn(pair.target, loc, rem, lens)

    # The remote source: n*frag contiguous bytes, written from the local buffer's upper half.
    want = pattern(n * frag, 3)
    staging = pair.local + pair.size // 2
    ctypes.memmove(staging, want, len(want))
    if pair.engine.transfer_sync_write(pair.target, staging, pair.remote, len(want)) != 0:
        raise RuntimeError("preparing the remote source failed")
    ctypes.memset(pair.local, 0, n * stride)
    t0 = time.perf_counter()
    rc = call()
    first_ms = (time.perf_counter() - t0) * 1e3
    ok = rc == 0 and scatter_ok(pair, n, frag, stride, want)
    rec["first_call"] = {"rc": rc, "ms": first_ms, "data_ok": ok}
    if rc != 0:
        raise RuntimeError(f"first call rc={rc} after {first_ms:.1f} ms")
    if not ok:
        raise RuntimeError("data mismatch after the first call")
    # The Python binding's share: the same lists with one length missing are converted, then
    # rejected before anything is sent.
    short = lens[:-1]
    floor = []
    for _ in range(3):
        t1 = time.perf_counter()
        fn(pair.target, loc, rem, short)
        floor.append((time.perf_counter() - t1) * 1e3)
    rec["binding_overhead_ms"] = summary(floor)
    if call() != 0:
        raise RuntimeError("warm-up call failed")
    ctypes.memset(pair.local, 0, n * stride)
    reps = []
    for _ in range(a.reps):
        s = pair.meter.snapshot()
        ops = 0
        while True:
            rc = call()
            if rc != 0:
                raise RuntimeError(f"rc={rc}")
            ops += 1
            elapsed = time.perf_counter() - s["wall"]
            if ((elapsed >= a.scatter_rep_seconds and ops >= a.scatter_min_ops)
                    or ops >= a.scatter_max_ops or elapsed > a.max_point_seconds):
                break
        d = Meter.between(s, pair.meter.snapshot())
        d.update({
            "ops": ops,
            "ms_per_op": d["wall_s"] / ops * 1e3,
            "thread_cpu_ms_per_op": d["thread_cpu_s"] / ops * 1e3,
            "proc_cpu_ms_per_op": d["proc_cpu_s"] / ops * 1e3,
            "peer_cpu_ms_per_op": d["peer_cpu_s"] / ops * 1e3,
            "total_cpu_ms_per_op": d["total_cpu_s"] / ops * 1e3,
            "us_per_fragment": d["wall_s"] / ops / n * 1e6,
            "lo_pkts_per_op": d["lo_rx_pkts"] / ops,
        })
        reps.append(d)
    if not scatter_ok(pair, n, frag, stride, want):
        raise RuntimeError("data mismatch after the timed calls")
    return reps


def sec_scatter(pair, a, res):
    for n in a.scatter_n:
        rec = {"section": "scatter", "op": "read", "n": n, "frag": a.scatter_frag,
               "local_stride": a.scatter_stride, "api": "batch_transfer_sync_read", "error": None}
        if n * max(a.scatter_stride, a.scatter_frag) > pair.size // 2:
            rec["error"] = "buffer too small"
        else:
            try:
                summarise(rec, scatter_point(pair, a, n, rec),
                          ("ms_per_op", "thread_cpu_ms_per_op", "proc_cpu_ms_per_op",
                           "peer_cpu_ms_per_op", "total_cpu_ms_per_op", "us_per_fragment",
                           "lo_pkts_per_op", "bg_cores"))
            except RuntimeError as err:
                rec["error"] = str(err)
        res["points"].append(rec)
        line = f"scat N={n:>6d}"
        if rec["error"] is None:
            m = rec["ms_per_op"]
            line += (f" ms/op med={m['median']:.3f} (min {m['min']:.3f} max {m['max']:.3f})"
                     f" thread_cpu={rec['thread_cpu_ms_per_op']['median']:.3f}ms"
                     f" proc_cpu={rec['proc_cpu_ms_per_op']['median']:.3f}ms"
                     f" peer_cpu={rec['peer_cpu_ms_per_op']['median']:.3f}ms"
                     f" binding={rec['binding_overhead_ms']['median']:.3f}ms"
                     f" bg={rec['bg_cores']['median']:.2f} data_ok=True")
        else:
            line += f" ERROR {rec['error']}"
        say(line)
