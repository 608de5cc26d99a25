"""Mooncake's CUDA-build methods (transfer_*_on_cuda) against a fake CUDA driver.

The fake (tests/fake_cuda/fake_cuda.c) is compiled here with gcc and loaded by the library
through TIDEWIRE's TW_CUDA_LIB, in a child Python process so that this process keeps the real
(absent) driver. Device pointers are fake-driver allocations; streams run in order.
"""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE_SRC = os.path.join(ROOT, "tests", "fake_cuda", "fake_cuda.c")

CHILD = textwrap.dedent(r"""
    import ctypes, sys
    from tidewire import engine as te
    fake = ctypes.CDLL(sys.argv[1])
    assert te.SUPPORT_CUDA, "the fake driver reports a device"
    tgt, ini = te.TransferEngine(), te.TransferEngine()
    for e in (tgt, ini):
        assert e.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "") == 0
    n = 1 << 20
    host_remote = (ctypes.c_ubyte * n)(*([7] * 16))
    raddr = ctypes.addressof(host_remote)
    assert tgt.register_memory(raddr, n, "cpu:0") == 0
    # What an application (PyTorch) does before allocating: a current context on device 0.
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert fake.cuInit(0) == 0 and fake.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert fake.cuCtxSetCurrent(ctx) == 0
    dptr = ctypes.c_uint64()
    assert fake.cuMemAlloc_v2(ctypes.byref(dptr), ctypes.c_size_t(n)) == 0
    assert ini.register_memory(dptr.value, n, "*") == 0
    stream = ctypes.c_void_p()
    assert fake.cuStreamCreate(ctypes.byref(stream), 0) == 0
    target = tgt.get_segment_name()
    # READ host → device in stream order, then copy the device bytes back to check them.
    ini.transfer_read_on_cuda(target, dptr.value, raddr, n, stream.value)
    assert fake.cuStreamSynchronize(stream) == 0
    out = (ctypes.c_ubyte * n)()
    assert fake.cuMemcpyDtoH_v2(out, dptr, ctypes.c_size_t(n)) == 0
    assert bytes(out[:16]) == bytes([7] * 16) and not any(out[16:4096])
    # WRITE device → host through the batch form.
    src = (ctypes.c_ubyte * 4096)(*([9] * 4096))
    assert fake.cuMemcpyHtoD_v2(dptr, src, ctypes.c_size_t(4096)) == 0
    ini.batch_transfer_write_on_cuda(target, [dptr.value, dptr.value + 2048], [raddr, raddr + 8192],
                                     [2048, 2048], stream.value)
    assert fake.cuStreamSynchronize(stream) == 0
    assert bytes(host_remote[:2048]) == bytes([9] * 2048)
    assert bytes(host_remote[8192:10240]) == bytes([9] * 2048)
    # Bad input raises like Mooncake (RuntimeError), never exits the process.
    for bad in (lambda: ini.transfer_write_on_cuda("127.0.0.1:1", dptr.value, raddr, 16, stream.value),
                lambda: ini.batch_transfer_read_on_cuda(target, [dptr.value], [], [16], stream.value)):
        try:
            bad()
        except RuntimeError:
            pass
        else:
            raise AssertionError("expected RuntimeError")
    print("CUDA-METHODS-OK")
""")


@pytest.fixture(scope="module")
def fake_cuda(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.fail("gcc is required to build the fake CUDA driver")
    out = tmp_path_factory.mktemp("fake_cuda") / "libcuda.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), FAKE_SRC, "-lpthread"],
                   check=True)
    return str(out)


def test_on_cuda_methods_move_bytes_in_stream_order(fake_cuda):
    env = dict(os.environ, TW_CUDA_LIB=fake_cuda, TW_LOG_LEVEL="error")
    r = subprocess.run([sys.executable, "-c", CHILD, fake_cuda], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "CUDA-METHODS-OK" in r.stdout, r.stdout + r.stderr


def test_cuda_methods_exist_even_without_a_driver():
    from tidewire.engine import TransferEngine
    for m in ("transfer_write_on_cuda", "transfer_read_on_cuda", "batch_transfer_write_on_cuda",
              "batch_transfer_read_on_cuda"):
        assert callable(getattr(TransferEngine, m))
