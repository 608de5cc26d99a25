"""Runs one call sequence of the methods tidewire added from Mooncake's ``mooncake.store``
(``*_with_tp``, ``*_with_parallelism``, safetensors files, ``put_from_with_metadata``, the
CUDA reads) on one target and prints every result as one JSON object, so
test_store_differential.py compares Mooncake's wheel and tidewire call by call::

    python store_diff_driver.py tidewire|mooncake OUT_DIR

Tensors print as dtype, shape and bytes; stored objects (shards, manifests) as their raw bytes."""

import ctypes
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def enc(v):
    if isinstance(v, torch.Tensor):
        t = v.contiguous()
        return {"dtype": str(t.dtype), "shape": list(t.shape),
                "hex": t.reshape(-1).view(torch.uint8).numpy().tobytes().hex()}
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": bytes(v).hex()}
    if isinstance(v, (list, tuple)):
        return [enc(x) for x in v]
    return v


def main(target, out_dir):
    from store_stress_base import Target

    tgt = Target(target)
    m = tgt.master()
    s = tgt.connect(m.address, m.metadata, 256 << 20)
    mod = sys.modules[tgt.Store.__module__]
    res = {}

    def rec(name, v):
        res[name] = enc(v)

    def ax(kind, rank, size, split_dim=None, expert_id=None, stage_id=None):
        a = mod.ParallelAxis()
        a.kind, a.rank, a.size = kind, rank, size
        a.split_dim, a.expert_id, a.stage_id = split_dim, expert_id, stage_id
        return a

    def par(*axes):
        p = mod.TensorParallelism()
        p.axes = list(axes)
        return p

    def tgt_(mode, p=None):
        r = mod.ReadTarget()
        r.mode = mode
        r.parallelism = p
        return r

    class W:
        def __init__(self, rank, size, split_dim):
            self.rank, self.size, self.split_dim = rank, size, split_dim

    t = torch.arange(48, dtype=torch.float32).reshape(4, 6, 2)
    i16 = torch.arange(24, dtype=torch.int16).reshape(6, 4)
    cfg = tgt.Config()
    # --- *_with_tp
    rec("tp.put", s.put_tensor_with_tp("tp", t, 0, 2, 0))
    rec("tp.put.dim1", s.put_tensor_with_tp("tpd1", t, 1, 3, 1))
    rec("tp.put.size1", s.put_tensor_with_tp("tps1", t))
    rec("tp.put.uneven", s.put_tensor_with_tp("tpu", t, 0, 5, 0))
    rec("tp.put.baddim", s.put_tensor_with_tp("tpb", t, 0, 2, 3))
    rec("tp.put.negdim", s.put_tensor_with_tp("tpn", t, 0, 2, -1))
    rec("tp.put.nottensor", s.put_tensor_with_tp("tpx", b"xx", 0, 2, 0))
    rec("tp.put.dup", s.put_tensor_with_tp("tp", t * 2, 0, 2, 0))
    rec("tp.pub", s.pub_tensor_with_tp("tpp", i16, cfg, 0, 2, 1))
    rec("tp.batch", s.batch_put_tensor_with_tp(["tb0", "tb1"], [t, t[:3]], 0, 2, 0))
    rec("tp.batch.pub", s.batch_pub_tensor_with_tp(["tbp"], [i16], cfg, 0, 3, 0))
    for r in range(3):
        rec(f"tp.get.{r}", s.get_tensor_with_tp("tpd1", r, 3, 1))
    rec("tp.get.size1", s.get_tensor_with_tp("tps1"))
    rec("tp.get.miss", s.get_tensor_with_tp("nokey", 0, 2))
    rec("tp.batch.get", s.batch_get_tensor_with_tp(["tp", "tb0", "tb1", "zz"], 1, 2))
    buf = torch.zeros(4096, dtype=torch.uint8)
    addr = buf.data_ptr()
    rec("reg", s.register_buffer(addr, 4096))
    rec("tp.into", s.get_tensor_with_tp_into("tp", addr, 4096, 1, 2))
    rec("tp.into.small", s.get_tensor_with_tp_into("tp", addr, 100, 1, 2))
    rec("tp.batch.into", s.batch_get_tensor_with_tp_into(["tp", "tpp"], [addr, addr + 2048],
                                                         [2048, 2048], 0, 2))
    full = torch.zeros(2048, dtype=torch.uint8)
    fa = full.data_ptr()
    rec("reg2", s.register_buffer(fa, 2048))
    rec("put.full", s.put_tensor("full", t))
    n = s.get_into("full", fa, 2048)
    rec("full.n", n)
    rec("tp.from", s.put_tensor_with_tp_from("tf", fa, n, 0, 2, 1))
    rec("tp.from.size1", s.put_tensor_with_tp_from("tf1", fa, n))
    rec("tp.from.badsize", s.put_tensor_with_tp_from("tfb", fa, n - 1, 0, 2, 1))
    rec("tp.from.null", s.put_tensor_with_tp_from("tfn", 0, n, 0, 2, 0))
    rec("tp.from.batch", s.batch_put_tensor_with_tp_from(["tfa", "tfc"], [fa, fa], [n, n],
                                                         0, 4, 0))
    # --- *_with_parallelism
    rec("p.none", s.put_tensor_with_parallelism("pn", t))
    rec("p.tp", s.put_tensor_with_parallelism("ptp", t[:2], par(ax("tp", 0, 2, 0))))
    rec("p.tp1", s.put_tensor_with_parallelism("ptp", t[2:], par(ax("TP", 1, 2, 0))))
    rec("p.dptp", s.put_tensor_with_parallelism("pdt", t, par(ax("tp", 1, 2, 1), ax("dp", 0, 2))))
    rec("p.dptp0", s.put_tensor_with_parallelism("pdt", t, par(ax("tp", 0, 2, 1), ax("dp", 0, 2))))
    rec("p.ep", s.put_tensor_with_parallelism("pep", i16, par(ax("ep", 1, 4, expert_id=7))))
    rec("p.pp", s.put_tensor_with_parallelism("ppp", i16, par(ax("pp", 0, 2, stage_id=3),
                                                             ax("dp", 1, 2))), )
    rec("p.writer", s.put_tensor_with_parallelism("pw", t, writer_partition=W(0, 2, 0)))
    rec("p.writer1", s.put_tensor_with_parallelism("pw", t, None, cfg, W(1, 2, 0)))
    rec("p.upsert", s.upsert_tensor_with_parallelism("ptp", t[2:] + 1, par(ax("tp", 1, 2, 0))))
    bad = {
        "both": dict(parallelism=par(ax("tp", 0, 2, 0)), writer_partition=W(0, 2, 0)),
        "empty": dict(parallelism=par()),
        "kind": dict(parallelism=par(ax("xp", 0, 2))),
        "rank": dict(parallelism=par(ax("tp", 2, 2, 0))),
        "nosd": dict(parallelism=par(ax("tp", 0, 2))),
        "dpsd": dict(parallelism=par(ax("dp", 0, 2, 0))),
        "noeid": dict(parallelism=par(ax("ep", 0, 2))),
        "dup": dict(parallelism=par(ax("dp", 0, 2), ax("dp", 1, 2))),
        "uneven": dict(parallelism=par(ax("tp", 0, 3, 0), ax("dp", 0, 2))),
        "wrank": dict(writer_partition=W(2, 2, 0)),
        "wdim": dict(writer_partition=W(0, 2, 5)),
    }
    for name, kw in bad.items():
        rec(f"p.bad.{name}", s.put_tensor_with_parallelism("pbad", t, **kw))
    rec("p.batch", s.batch_put_tensor_with_parallelism(
        ["pb0", "pb1"], [t, i16], [par(ax("tp", 0, 2, 0)), None]))
    rec("p.batch.w", s.batch_upsert_tensor_with_parallelism(
        ["pbw"], [i16], None, cfg, [W(1, 3, 0)]))
    rec("p.batch.len", s.batch_put_tensor_with_parallelism(["pbl0", "pbl1"], [t], None))
    rec("p.batch.both", s.batch_put_tensor_with_parallelism(
        ["pbb"], [t], [None], cfg, [W(0, 2, 0)]))
    rec("p.batch.plen", s.batch_put_tensor_with_parallelism(["pbp"], [t], []))
    rec("p.from.none", s.put_tensor_with_parallelism_from("pfn", fa, n))
    rec("p.from.tp", s.put_tensor_with_parallelism_from("pft", fa, n, par(ax("tp", 0, 2, 0))))
    rec("p.from.dptp", s.put_tensor_with_parallelism_from(
        "pfd", fa, n, par(ax("dp", 1, 2), ax("tp", 0, 2, 2))))
    rec("p.from.w", s.put_tensor_with_parallelism_from("pfw", fa, n, None, cfg, W(1, 2, 1)))
    rec("p.from.ep", s.upsert_tensor_with_parallelism_from(
        "pfe", fa, n, par(ax("ep", 0, 2, expert_id=1))))
    rec("p.from.bad", s.put_tensor_with_parallelism_from("pfb", fa, n - 4, par(ax("tp", 0, 2, 0))))
    rec("p.from.batch", s.batch_put_tensor_with_parallelism_from(
        ["pfb0", "pfb1"], [fa, fa], [n, n], [par(ax("tp", 1, 2, 0)), None]))
    rec("p.from.batch.up", s.batch_upsert_tensor_with_parallelism_from(
        ["pfb0"], [fa], [n], None, cfg, [W(0, 4, 0)]))
    # reads
    reads = {
        "none": ("pn", None), "as_stored": ("ptp_tp_0", tgt_("as_stored")),
        "as_stored.par": ("ptp", tgt_("as_stored", par(ax("tp", 0, 2, 0)))),
        "shard.tp": ("ptp", tgt_("shard", par(ax("tp", 1, 2, 0)))),
        "shard.tp4": ("ptp", tgt_("shard", par(ax("tp", 3, 4, 0)))),
        "full.tp": ("ptp", tgt_("full", par(ax("tp", 0, 2, 0)))),
        "full.writer": ("pw", tgt_("full")), "full.plain": ("pn", tgt_("full")),
        "shard.writer": ("pw", tgt_("shard", par(ax("tp", 1, 2, 0)))),
        "shard.dptp": ("pdt", tgt_("shard", par(ax("dp", 0, 2), ax("tp", 1, 2, 1)))),
        "full.dptp": ("pdt", tgt_("full", par(ax("dp", 0, 2), ax("tp", 0, 2, 1)))),
        "shard.ep": ("pep", tgt_("shard", par(ax("ep", 1, 4, expert_id=7)))),
        "shard.ep.wrong": ("pep", tgt_("shard", par(ax("ep", 1, 4, expert_id=8)))),
        "full.ep": ("pep", tgt_("full", par(ax("ep", 1, 4, expert_id=7)))),
        "shard.from.tp": ("pft", tgt_("shard", par(ax("tp", 1, 2, 0)))),
        "full.from.tp": ("pft", tgt_("full", par(ax("tp", 1, 2, 0)))),
        "shard.tpd1": ("tpd1", tgt_("shard", par(ax("tp", 2, 3, 1)))),
        "full.tpd1": ("tpd1", tgt_("full", par(ax("tp", 0, 3, 1)))),
        "miss": ("nokey", tgt_("shard", par(ax("tp", 0, 2, 0)))),
        "bad": ("ptp", tgt_("shard", par(ax("tp", 0, 2)))),
    }
    for name, (k, tg) in reads.items():
        rec(f"r.{name}", s.get_tensor_with_parallelism(k, tg))
        buf.zero_()
        rec(f"r.into.{name}", s.get_tensor_with_parallelism_into(k, addr, 4096, tg))
    keys = [k for k, _ in reads.values()]
    tgs = [tg for _, tg in reads.values()]
    rec("r.batch", s.batch_get_tensor_with_parallelism(keys, tgs))
    rec("r.batch.none", s.batch_get_tensor_with_parallelism(["pn", "ptp_tp_1"]))
    rec("r.batch.len", s.batch_get_tensor_with_parallelism(["pn", "ptp"], [None]))
    rec("r.batch.into", s.batch_get_tensor_with_parallelism_into(
        ["ptp", "pw"], [addr, addr + 2048], [2048, 2048],
        [tgt_("shard", par(ax("tp", 0, 2, 0))), tgt_("full")]))
    rec("r.batch.into.len", s.batch_get_tensor_with_parallelism_into(["ptp"], [addr], []))
    # --- safetensors files
    path = os.path.join(out_dir, "t.safetensors")
    rec("st.save", s.save_tensor_to_safetensor("full", path))
    rec("st.file", open(path, "rb").read())
    rec("st.save.miss", s.save_tensor_to_safetensor("nokey", os.path.join(out_dir, "m.st")))
    rec("st.save.raw", (s.put("raw", b"abc"), s.save_tensor_to_safetensor("raw", path + "2")))
    rec("st.save.dir", s.save_tensor_to_safetensor("full", "/nonexistent/x.safetensors"))
    rec("st.load", s.load_tensor_from_safetensor("st1", path))
    rec("st.load.other", s.load_tensor_from_safetensor("st2", path))
    rec("st.load.nokey", s.load_tensor_from_safetensor(file_name=path))
    rec("st.load.miss", s.load_tensor_from_safetensor("st3", os.path.join(out_dir, "no.st")))
    rec("st.get", s.batch_get_tensor(["st1", "st2", path]))
    # --- put_from_with_metadata, CUDA reads
    md, data = ctypes.create_string_buffer(b"META"), ctypes.create_string_buffer(b"datadata")
    rec("pfwm", s.put_from_with_metadata("pm", ctypes.addressof(data), ctypes.addressof(md), 8, 4))
    rec("pfwm.cfg", s.put_from_with_metadata("pm2", ctypes.addressof(data), ctypes.addressof(md),
                                             8, 0, cfg))
    rec("pfwm.get", [s.get("pm"), s.get("pm2")])
    rec("cuda", s.get_tensor_into_cuda("full", t))
    rec("cuda.batch", s.batch_get_tensor_into_cuda(["full", "zz"], [t, t]))
    rec("cuda.batch.len", s.batch_get_tensor_into_cuda(["full"], []))
    # --- every object stored (Mooncake lists them; tidewire reads the same names)
    names = json.loads(os.environ.get("DIFF_KEYS", "null"))
    if names is None:
        import urllib.request
        url = f"http://127.0.0.1:{m.metrics_port}/get_all_keys"
        names = sorted(urllib.request.urlopen(url, timeout=5).read().decode().split())
    res["stored"] = {k: s.get(k).hex() for k in names}
    res["stored_names"] = names
    s.unregister_buffer(addr)
    s.unregister_buffer(fa)
    print("DIFF-RESULT " + json.dumps(res), flush=True)
    s.close()
    m.stop()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
