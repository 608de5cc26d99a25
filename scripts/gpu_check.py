#!/usr/bin/env python3
"""GPU checks for libtidewire over loopback TCP between two engines in this process.

Real mode (default): device memory from PyTorch on cuda:0 (and cuda:1 when present).
Fake mode (--fake): device memory from the fake CUDA driver named by TW_CUDA_LIB (no GPU).

Checks: GPU->GPU, GPU->host and host->GPU transfers (WRITE and READ) with every byte verified,
the stream-ordered path (later stream work sees the transferred bytes), the Store with device
buffers (a tidewire-master and two store clients: puts from and gets into GPU memory, to another
client's segment and to the writer's own), then bandwidth for 1 MiB and 64 MiB blocks. Exit
status 0 only if every check passes.
"""
import argparse
import ctypes as C
import json
import os
import subprocess
import sys
import time

MiB = 1 << 20
FAILURES = []


def log(msg):
    print(msg, flush=True)


def check(cond, what):
    if cond:
        log(f"  ok    {what}")
    else:
        log(f"  FAIL  {what}")
        FAILURES.append(what)


class TransferRequest(C.Structure):
    _fields_ = [("opcode", C.c_int32), ("segment", C.c_int32), ("local_addr", C.c_void_p),
                ("remote_addr", C.c_uint64), ("length", C.c_uint64)]


class TransferStatus(C.Structure):
    _fields_ = [("state", C.c_int32), ("result", C.c_int32), ("transferred_bytes", C.c_uint64)]


READ, WRITE = 0, 1


class Lib:
    def __init__(self, path):
        L = C.CDLL(path)
        sig = {
            "tw_config_new": [C.POINTER(C.c_void_p)],
            "tw_config_set": [C.c_void_p, C.c_char_p, C.c_char_p],
            "tw_config_free": [C.c_void_p],
            "tw_engine_new": [C.c_void_p, C.POINTER(C.c_void_p)],
            "tw_engine_free": [C.c_void_p],
            "tw_engine_segment_name": [C.c_void_p, C.c_char_p, C.c_size_t],
            "tw_memory_register": [C.c_void_p, C.c_void_p, C.c_size_t, C.c_char_p, C.c_bool],
            "tw_memory_location": [C.c_void_p, C.c_void_p, C.c_char_p, C.c_size_t],
            "tw_segment_open": [C.c_void_p, C.c_char_p, C.POINTER(C.c_int32)],
            "tw_batch_alloc": [C.c_void_p, C.c_size_t, C.POINTER(C.c_uint64)],
            "tw_batch_submit": [C.c_void_p, C.c_uint64, C.POINTER(TransferRequest), C.c_size_t],
            "tw_batch_wait": [C.c_void_p, C.c_uint64, C.c_int64],
            "tw_batch_free": [C.c_void_p, C.c_uint64],
            "tw_gpu_available": [C.POINTER(C.c_int32)],
            "tw_transfer_on_stream": [C.c_void_p, C.POINTER(TransferRequest), C.c_size_t,
                                      C.c_void_p, C.POINTER(C.c_uint64)],
            "tw_stream_op_status": [C.c_void_p, C.c_uint64, C.POINTER(TransferStatus)],
            "tw_stream_op_wait": [C.c_void_p, C.c_uint64, C.c_int64],
            "tw_stream_op_free": [C.c_void_p, C.c_uint64],
        }
        for name, args in sig.items():
            f = getattr(L, name)
            f.argtypes = args
            f.restype = C.c_int32
        L.tw_config_free.restype = None
        L.tw_engine_free.restype = None
        L.tw_last_error_message.argtypes = [C.c_char_p, C.c_size_t]
        L.tw_last_error_message.restype = C.c_size_t
        self.L = L

    def ok(self, rc, what):
        if rc != 0:
            buf = C.create_string_buffer(512)
            self.L.tw_last_error_message(buf, 512)
            raise RuntimeError(f"{what} failed: {rc} {buf.value.decode(errors='replace')}")

    def engine(self):
        cfg = C.c_void_p()
        self.ok(self.L.tw_config_new(C.byref(cfg)), "tw_config_new")
        # Real sockets even though both engines share this process.
        self.ok(self.L.tw_config_set(cfg, b"same_host", b"0"), "tw_config_set")
        eng = C.c_void_p()
        self.ok(self.L.tw_engine_new(cfg, C.byref(eng)), "tw_engine_new")
        self.L.tw_config_free(cfg)
        return eng

    def name(self, eng):
        buf = C.create_string_buffer(256)
        self.ok(self.L.tw_engine_segment_name(eng, buf, 256), "segment name")
        return buf.value

    def register(self, eng, addr, n):
        self.ok(self.L.tw_memory_register(eng, C.c_void_p(addr), n, b"*", True), "register")

    def location(self, eng, addr):
        buf = C.create_string_buffer(64)
        self.ok(self.L.tw_memory_location(eng, C.c_void_p(addr), buf, 64), "location")
        return buf.value.decode()

    def transfer(self, eng, reqs, timeout_ms=60000):
        arr = (TransferRequest * len(reqs))(*reqs)
        b = C.c_uint64()
        self.ok(self.L.tw_batch_alloc(eng, len(reqs), C.byref(b)), "batch alloc")
        try:
            self.ok(self.L.tw_batch_submit(eng, b, arr, len(reqs)), "batch submit")
            self.ok(self.L.tw_batch_wait(eng, b, timeout_ms), "batch wait")
        finally:
            self.L.tw_batch_free(eng, b)


def req(op, seg, local, remote, n):
    return TransferRequest(op, seg, C.c_void_p(local), remote, n)


class HostMem:
    def __init__(self, n, data=None):
        self.buf = C.create_string_buffer(n)
        self.n = n
        if data is not None:
            C.memmove(self.buf, data, n)
        self.ptr = C.addressof(self.buf)

    def read(self):
        return C.string_at(self.ptr, self.n)


class TorchGpu:
    def __init__(self):
        import torch
        self.torch = torch
        if not torch.cuda.is_available():
            raise RuntimeError("PyTorch sees no CUDA device")
        self.count = torch.cuda.device_count()

    def alloc(self, dev, n, data=None):
        t = self.torch.zeros(n, dtype=self.torch.uint8, device=f"cuda:{dev % self.count}")
        if data is not None:
            t.copy_(self.torch.frombuffer(bytearray(data), dtype=self.torch.uint8))
        self.torch.cuda.synchronize()
        return t, t.data_ptr()

    def read(self, t):
        self.torch.cuda.synchronize()
        h = t.cpu().contiguous()
        return C.string_at(h.data_ptr(), h.numel())

    def sync(self):
        self.torch.cuda.synchronize()


class FakeGpu:
    def __init__(self):
        self.F = C.CDLL(os.environ["TW_CUDA_LIB"])
        self.F.cuMemAlloc_v2.argtypes = [C.POINTER(C.c_uint64), C.c_size_t]
        self.F.cuMemcpyHtoD_v2.argtypes = [C.c_uint64, C.c_void_p, C.c_size_t]
        self.F.cuMemcpyDtoH_v2.argtypes = [C.c_void_p, C.c_uint64, C.c_size_t]
        self.F.cuDevicePrimaryCtxRetain.argtypes = [C.POINTER(C.c_void_p), C.c_int]
        self.F.cuCtxSetCurrent.argtypes = [C.c_void_p]
        self.F.cuStreamCreate.argtypes = [C.POINTER(C.c_void_p), C.c_uint]
        self.F.cuStreamSynchronize.argtypes = [C.c_void_p]
        self.F.cuStreamWaitValue32_v2.argtypes = [C.c_void_p, C.c_uint64, C.c_uint32, C.c_uint]
        self.F.cuMemcpyAsync.argtypes = [C.c_uint64, C.c_uint64, C.c_size_t, C.c_void_p]
        self.F.cuInit(0)
        self.count = 2

    def use(self, dev):
        ctx = C.c_void_p()
        assert self.F.cuDevicePrimaryCtxRetain(C.byref(ctx), dev) == 0
        assert self.F.cuCtxSetCurrent(ctx) == 0

    def alloc(self, dev, n, data=None):
        self.use(dev % self.count)
        p = C.c_uint64()
        assert self.F.cuMemAlloc_v2(C.byref(p), n) == 0
        if data is not None:
            assert self.F.cuMemcpyHtoD_v2(p.value, data, n) == 0
        return (p.value, n), p.value

    def read(self, t):
        ptr, n = t
        out = C.create_string_buffer(n)
        assert self.F.cuMemcpyDtoH_v2(out, ptr, n) == 0
        return out.raw

    def sync(self):
        pass


def pattern(n, seed):
    return bytes(((i * 31 + seed * 7 + 11) & 0xFF) for i in range(min(n, 1 << 16))) * (
        (n + (1 << 16) - 1) // (1 << 16))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="target/release/libtidewire.so")
    ap.add_argument("--fake", action="store_true")
    args = ap.parse_args()
    lib = Lib(os.path.abspath(args.lib))
    gpu = FakeGpu() if args.fake else TorchGpu()
    n = C.c_int32(-1)
    lib.ok(lib.L.tw_gpu_available(C.byref(n)), "tw_gpu_available")
    log(f"tidewire sees {n.value} CUDA device(s); source of device memory: "
        f"{'fake driver' if args.fake else 'PyTorch'} ({gpu.count} device(s))")

    a, b = lib.engine(), lib.engine()
    seg = C.c_int32()
    lib.ok(lib.L.tw_segment_open(a, lib.name(b), C.byref(seg)), "segment open")
    seg = seg.value

    N = 8 * MiB + 12345
    data = pattern(N, 3)[:N]
    log("correctness (every byte compared):")
    a_dev_t, a_dev = gpu.alloc(0, N, data)
    a_back_t, a_back = gpu.alloc(0, N)
    b_dev_t, b_dev = gpu.alloc(1, N)
    a_host = HostMem(N, pattern(N, 5)[:N])
    a_host_in = HostMem(N)
    b_host = HostMem(N)
    for eng, p in ((a, a_dev), (a, a_back), (b, b_dev), (a, a_host.ptr), (a, a_host_in.ptr),
                   (b, b_host.ptr)):
        lib.register(eng, p, N)
    check(lib.location(a, a_dev) == "cuda:0", f"location of device memory: {lib.location(a, a_dev)}")
    check(lib.location(a, a_host.ptr).startswith("cpu:"),
          f"location of host memory: {lib.location(a, a_host.ptr)}")

    lib.transfer(a, [req(WRITE, seg, a_dev, b_dev, N)])
    check(gpu.read(b_dev_t) == data, "GPU -> GPU (WRITE)")
    lib.transfer(a, [req(READ, seg, a_back, b_dev, N)])
    check(gpu.read(a_back_t) == data, "GPU <- GPU (READ)")
    lib.transfer(a, [req(WRITE, seg, a_dev, b_host.ptr, N)])
    check(b_host.read() == data, "GPU -> host (WRITE)")
    lib.transfer(a, [req(WRITE, seg, a_host.ptr, b_dev, N)])
    check(gpu.read(b_dev_t) == a_host.read(), "host -> GPU (WRITE)")
    lib.transfer(a, [req(READ, seg, a_host_in.ptr, b_dev, N)])
    check(a_host_in.read() == a_host.read(), "GPU -> host (READ)")
    lib.transfer(a, [req(READ, seg, a_dev, b_host.ptr, N)])
    check(gpu.read(a_dev_t) == data, "host -> GPU (READ)")
    small = HostMem(4096)
    lib.register(a, small.ptr, 4096)
    lib.transfer(a, [req(READ, seg, small.ptr, b_dev + 100, 4096)])
    check(small.read() == a_host.read()[100:4196], "small READ from GPU (inline reply)")

    log("stream-ordered transfer:")
    stream_check(lib, gpu, a, seg, a_dev, data, N, args.fake)

    log("store with device buffers (tidewire-master, two store clients):")
    store_check(lib, gpu, os.path.dirname(os.path.abspath(args.lib)))

    log("bandwidth (loopback TCP, two engines, one process):")
    for size, iters in ((MiB, 64), (64 * MiB, 4)):
        s_t, s = gpu.alloc(0, size, pattern(size, 1)[:size])
        d_t, d = gpu.alloc(1, size)
        h = HostMem(size)
        for eng, p in ((a, s), (b, d), (b, h.ptr)):
            lib.register(eng, p, size)
        for label, dst in (("GPU->GPU", d), ("GPU->host", h.ptr)):
            lib.transfer(a, [req(WRITE, seg, s, dst, size)])  # warm up
            t0 = time.perf_counter()
            for _ in range(iters):
                lib.transfer(a, [req(WRITE, seg, s, dst, size)])
            dt = time.perf_counter() - t0
            log(f"  {label:10s} block {size // MiB:3d} MiB: {size * iters / dt / 1e9:7.2f} GB/s "
                f"({iters} transfers, {dt * 1e3:.1f} ms)")
        check(gpu.read(d_t) == pattern(size, 1)[:size], f"bandwidth run {size // MiB} MiB bytes")

    lib.L.tw_engine_free(a)
    lib.L.tw_engine_free(b)
    if FAILURES:
        log(f"{len(FAILURES)} check(s) FAILED: {FAILURES}")
        return 1
    log("all GPU checks passed")
    return 0


def store_check(lib, gpu, bindir):
    """Device memory in the Store: registered with tw_store_register_buffer (its location found
    through the driver), put to another client's segment and to the writer's own, read back into
    device memory; every byte compared."""
    L = lib.L
    L.tw_store_setup.argtypes = [C.c_char_p] * 2 + [C.c_uint64] * 2 + [C.c_char_p] * 3 + [
        C.POINTER(C.c_void_p)]
    L.tw_store_register_buffer.argtypes = [C.c_void_p, C.c_void_p, C.c_uint64]
    L.tw_store_put.argtypes = [C.c_void_p, C.POINTER(C.c_char_p), C.c_void_p,
                               C.POINTER(C.c_void_p), C.POINTER(C.c_uint64), C.c_size_t,
                               C.c_int32, C.c_int32, C.c_void_p, C.POINTER(C.c_int32)]
    L.tw_store_get_into.argtypes = [C.c_void_p, C.POINTER(C.c_char_p), C.c_void_p,
                                    C.POINTER(C.c_void_p), C.POINTER(C.c_uint64), C.c_size_t,
                                    C.POINTER(C.c_int64)]
    L.tw_store_free.argtypes = [C.c_void_p]
    L.tw_store_free.restype = None
    master = subprocess.Popen(
        [os.path.join(bindir, "tidewire-master"), "--rpc_address=127.0.0.1", "--rpc_port=0",
         "--metrics_port=0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        addr = f"127.0.0.1:{json.loads(master.stdout.readline())['rpc_port']}".encode()
        owner, writer = C.c_void_p(), C.c_void_p()
        for h in (owner, writer):
            lib.ok(L.tw_store_setup(b"127.0.0.1", b"P2PHANDSHAKE", 64 * MiB, 16 * MiB, b"tcp",
                                    b"", addr, C.byref(h)), "tw_store_setup")
        n = 4 * MiB + 321
        data = pattern(n, 7)[:n]
        src_t, src = gpu.alloc(0, n, data)
        dst_t, dst = gpu.alloc(0, n)
        for p in (src, dst):
            lib.ok(L.tw_store_register_buffer(writer, C.c_void_p(p), n), "store register")
        keys = (C.c_char_p * 1)(b"gpu-check")
        code, got = (C.c_int32 * 1)(), (C.c_int64 * 1)()
        for rounds in range(2):  # the owner's segment first, then (upsert) wherever it lands
            lib.ok(L.tw_store_put(writer, keys, None, (C.c_void_p * 1)(src),
                                  (C.c_uint64 * 1)(n), 1, 1, 0, None, code), "store put")
            check(code[0] == 0, f"store put from GPU memory (round {rounds}, code {code[0]})")
            lib.ok(L.tw_store_get_into(writer, keys, None, (C.c_void_p * 1)(dst),
                                       (C.c_uint64 * 1)(n), 1, got), "store get_into")
            check(got[0] == n and gpu.read(dst_t) == data,
                  f"store get into GPU memory (round {rounds}, {got[0]} bytes)")
        host = HostMem(n)
        lib.ok(L.tw_store_get_into(owner, keys, None, (C.c_void_p * 1)(host.ptr),
                                   (C.c_uint64 * 1)(n), 1, got), "store get_into (host)")
        check(got[0] == n and host.read() == data, "store value written from GPU, read on host")
        L.tw_store_free(writer)
        L.tw_store_free(owner)
    finally:
        master.kill()
        master.wait()


def stream_check(lib, gpu, a, seg, a_dev, data, N, fake):
    remote = HostMem(N)
    snap = HostMem(N)
    # The peer engine's buffer for this check lives on engine b; reuse a fresh engine pair-free
    # target: register on a (local segment 0) to keep the check independent of the TCP peer.
    lib.register(a, remote.ptr, N)
    lib.register(a, snap.ptr, N)
    op = C.c_uint64()
    r = req(WRITE, 0, a_dev, remote.ptr, N)
    if fake:
        F = gpu.F
        gpu.use(0)
        s = C.c_void_p()
        assert F.cuStreamCreate(C.byref(s), 0) == 0
        gate = (C.c_uint32 * 1)(0)
        assert F.cuStreamWaitValue32_v2(s, C.addressof(gate), 1, 0) == 0
        lib.ok(lib.L.tw_transfer_on_stream(a, C.byref(r), 1, s, C.byref(op)), "on stream")
        assert F.cuMemcpyAsync(snap.ptr, remote.ptr, N, s) == 0
        time.sleep(0.1)
        st = TransferStatus()
        lib.ok(lib.L.tw_stream_op_status(a, op, C.byref(st)), "op status")
        check(st.state == 0, "transfer waits for the stream")
        gate[0] = 1
        assert F.cuStreamSynchronize(s) == 0
    else:
        torch = gpu.torch
        s = torch.cuda.Stream(device=0)
        snap_dev_t, snap_dev = gpu.alloc(0, N)
        lib.register(a, snap_dev, N)
        # Remote is device memory here, so the later work is a device copy on the same stream.
        dst_t, dst = gpu.alloc(0, N)
        lib.register(a, dst, N)
        r = req(WRITE, 0, a_dev, dst, N)
        with torch.cuda.stream(s):
            if hasattr(torch.cuda, "_sleep"):
                torch.cuda._sleep(50_000_000)  # the transfer must wait for this
            lib.ok(lib.L.tw_transfer_on_stream(a, C.byref(r), 1, C.c_void_p(s.cuda_stream),
                                               C.byref(op)), "on stream")
            snap_dev_t.copy_(dst_t)
        s.synchronize()
        snap = None
        check(gpu.read(snap_dev_t) == data, "later stream work sees the transferred bytes")
    rc = lib.L.tw_stream_op_wait(a, op, 30000)
    check(rc == 0, f"stream op completed (rc {rc})")
    if snap is not None:
        check(snap.read() == data, "later stream work sees the transferred bytes")
    lib.ok(lib.L.tw_stream_op_free(a, op), "op free")
    # A failing stream op is reported, and the stream is not blocked.
    bad = req(WRITE, seg, a_dev, 0x10, 4096)
    rc = lib.L.tw_transfer_on_stream(a, C.byref(bad), 1, None, C.byref(op))
    if rc == 0:
        rc2 = lib.L.tw_stream_op_wait(a, op, 30000)
        check(rc2 != 0, f"failed stream op reports an error (rc {rc2})")
        lib.L.tw_stream_op_free(a, op)
    else:
        check(rc != 0, f"bad stream op rejected at enqueue (rc {rc})")
    gpu.sync()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # report, never hang
        log(f"ERROR: {type(e).__name__}: {e}")
        sys.exit(1)
