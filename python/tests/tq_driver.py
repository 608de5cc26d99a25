"""Drives TransferQueue's own ``MooncakeStoreClient`` (the ``transferqueue`` package, unchanged)
with ``mooncake.store`` resolved to ``tidewire.store`` through the shim package. Runs in the
TransferQueue virtual environment (torch, transfer_queue), started by test_tq_client.py.

    tq_driver.py writer MASTER METADATA   # puts, prints {"meta": ...}, waits on stdin, closes
    tq_driver.py reader MASTER METADATA   # reads stdin's meta, gets, checks, clears, checks
    tq_driver.py writer|reader MASTER METADATA --disk   # the disk-tier working set (below)

``--disk``: the client is configured as TransferQueue's SSD-offload deployment configures it
(``offload: {enabled: true}``, so its puts are not hard-pinned and may be evicted to disk) with
no segment of its own: every value lives in the segment of the tier owner the test starts (the
stand-in for TransferQueue's ``mooncake_client -enable_offload=true``). The working set is
``N_BIG`` float32 tensors of 256 KiB (150 MiB, several times the owner's segment) and the 450
non-tensors, put ``STEP`` keys per ``put`` call (as training steps put their batches), in the
same three generations; after each generation the writer reads all of it back (most of it from
disk), the reader the last one.

Both print one JSON line per step; a failure is {"error": ...} and exit status 1.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# The shim first: `mooncake.store` is tidewire.store (no Mooncake wheel in this environment).
sys.path[:0] = [os.path.join(REPO, "python", "tidewire", "shim"), os.path.join(REPO, "python")]

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transfer_queue.storage.clients import mooncake_client  # noqa: E402
from transfer_queue.storage.clients.mooncake_client import MooncakeStoreClient  # noqa: E402

N_TENSORS = 900  # above TransferQueue's 400-key batch: three batches on its 4 worker threads
N_OBJECTS = 450
DISK = "--disk" in sys.argv[4:]
N_BIG = 600  # --disk: float32 tensors of 64 x 1024 (256 KiB), 150 MiB a generation
STEP = 100  # --disk: keys per put / get call (25 MiB of tensors)


def tensor(i, gen):
    kind = i % 5
    if kind == 0:
        return torch.randn((i % 7 + 1, 33), generator=gen)
    if kind == 1:
        return torch.randint(-(2**40), 2**40, (i % 13 + 2,), dtype=torch.int64, generator=gen)
    if kind == 2:
        return torch.randn((4, i % 5 + 1), generator=gen).to(torch.bfloat16)
    if kind == 3:
        return torch.randint(0, 255, (i % 300 + 1,), dtype=torch.uint8, generator=gen)
    return torch.tensor(float(i) * 0.5)  # a 0-d tensor (scalar)


def obj(i, rnd):
    kind = i % 4
    if kind == 0:
        return {"prompt": f"sample {i}", "score": float(rnd.random()), "ids": list(range(i % 9))}
    if kind == 1:
        return "x" * (i % 50) + f"#{i}"
    if kind == 2:
        return rnd.integers(0, 1000, size=(i % 6 + 1, 3))
    return [i, None, {"nested": [i, str(i)]}]  # msgpack carries tuples as lists


def dataset(generation, shift=0):
    """Deterministic keys and values; ``generation`` changes the contents, ``shift`` the sizes."""
    gen = torch.Generator().manual_seed(1000 + generation)
    rnd = np.random.default_rng(2000 + generation)
    keys, vals = [], []
    if DISK:
        for i in range(N_BIG):
            keys.append(f"{i}@big")
            vals.append(torch.randn((64, 1024 + 16 * shift), generator=gen))
    for i in range(0 if DISK else N_TENSORS):
        keys.append(f"{i}@tensor")
        t = tensor(i + shift, gen)
        vals.append(t)
    for i in range(N_OBJECTS):
        keys.append(f"{i}@obj")
        vals.append(obj(i + shift, rnd))
    return keys, vals


def as_bytes(t):
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.dim() else \
        t.reshape(1).view(torch.uint8).numpy().tobytes()


def same(a, b):
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and as_bytes(a) == as_bytes(b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def client(master, metadata):
    cfg = {
        "local_hostname": "127.0.0.1",
        "metadata_server": metadata,
        "master_server_address": master,
        "global_segment_size": 256 << 20,
        "local_buffer_size": 16 << 20,
        "protocol": "tcp",
    }
    if DISK:
        # TransferQueue's offload deployment: its clients' puts are not hard-pinned; the
        # segment (and tier) is the owner's.
        cfg["global_segment_size"] = 0
        cfg["offload"] = {"enabled": True}
    return MooncakeStoreClient(cfg)


def emit(**kw):
    print(json.dumps(kw), flush=True)


def check_get(c, generation, shift, meta):
    keys, want = dataset(generation, shift)
    shapes = [list(v.shape) if isinstance(v, torch.Tensor) else None for v in want]
    dtypes = [v.dtype if isinstance(v, torch.Tensor) else None for v in want]
    step = STEP if DISK else len(keys)
    got = []
    for i in range(0, len(keys), step):
        got += c.get(keys[i:i + step], shapes=shapes[i:i + step], dtypes=dtypes[i:i + step],
                     custom_backend_meta=meta[i:i + step])
    bad = [k for k, a, b in zip(keys, want, got) if not same(a, b)]
    if bad:
        raise AssertionError(f"generation {generation}: {len(bad)} values differ, first {bad[:3]}")
    return len(keys)


def writer(master, metadata):
    c = client(master, metadata)
    metas = {}
    # Generation 0, then 1 with the same sizes (in-place upserts), then 2 with other sizes.
    for generation, shift in ((0, 0), (1, 0), (2, 3)):
        keys, vals = dataset(generation, shift)
        step = STEP if DISK else len(keys)
        metas[generation] = []
        for i in range(0, len(keys), step):
            metas[generation] += c.put(keys[i:i + step], vals[i:i + step])
        # The writer reads back through its own segment (memcpy path) too.
        check_get(c, generation, shift, metas[generation])
    emit(meta=metas[2], keys=len(keys), batch=mooncake_client.BATCH_SIZE_LIMIT,
         store=type(c._store).__module__, hard_pin=c.replica_config.with_hard_pin,
         bytes=sum(len(as_bytes(v)) for v in vals if isinstance(v, torch.Tensor)))
    sys.stdin.read()  # hold the segment until the test is done with it
    c.close()
    emit(closed=True)


def reader(master, metadata):
    meta = json.loads(sys.stdin.readline())["meta"]
    c = client(master, metadata)
    n = check_get(c, 2, 3, meta)
    emit(checked=n)
    keys, _ = dataset(2, 3)
    c.clear(keys, custom_backend_meta=meta)
    left = [k for k, e in zip(keys, c._store.batch_is_exist(keys)) if e != 0]
    if left:
        raise AssertionError(f"{len(left)} keys left after clear, first {left[:3]}")
    emit(cleared=len(keys))
    c.close()


def main():
    role, master, metadata = sys.argv[1:4]
    try:
        (writer if role == "writer" else reader)(master, metadata)
    except Exception as e:  # reported to the test, which fails on it
        emit(error=f"{type(e).__name__}: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()
