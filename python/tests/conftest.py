"""Fixtures for the Python tests: real engines on 127.0.0.1, real sockets.

Run with `make py-tests` (TIDEWIRE_LIB points at the freshly built library).
"""

import ctypes
import faulthandler
import mmap
import os
import random
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.dirname(HERE)
REPO = os.path.dirname(PYDIR)
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

import tidewire  # noqa: E402
from tidewire.engine import TransferEngine  # noqa: E402

# A hung native call must not hang the run.
SUITE_DEADLINE_S = 300


def pytest_configure(config):
    faulthandler.dump_traceback_later(SUITE_DEADLINE_S, exit=True)


def pytest_unconfigure(config):
    faulthandler.cancel_dump_traceback_later()


def pattern(n, seed=0):
    """Deterministic, non-periodic bytes (the same in every process)."""
    return random.Random(seed).randbytes(n)


class MBuf:
    """Anonymous, page-aligned memory with a stable address."""

    def __init__(self, size, fill=0):
        self.size = size
        self.mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._view = ctypes.c_char.from_buffer(self.mm)
        self.addr = ctypes.addressof(self._view)
        if fill:
            ctypes.memset(self.addr, fill, size)

    def put(self, offset, data):
        ctypes.memmove(self.addr + offset, data, len(data))

    def get(self, offset, n):
        return ctypes.string_at(self.addr + offset, n)

    def close(self):
        self._view = None
        self.mm.close()


@pytest.fixture
def mbuf():
    made = []

    def make(size, fill=0):
        b = MBuf(size, fill)
        made.append(b)
        return b

    yield make
    # Buffers are closed by the engine fixtures' teardown order (engines first).
    for b in made:
        try:
            b.close()
        except BufferError:
            pass


@pytest.fixture
def pair():
    """Two pythonic engines in this process."""
    a = tidewire.Engine()
    b = tidewire.Engine()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def new_te():
    te = TransferEngine()
    rc = te.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "")
    assert rc == 0, rc
    return te


@pytest.fixture
def te_pair():
    """Two Mooncake-compatible engines in this process."""
    a, b = new_te(), new_te()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


# ------------------------------------------------------------------------------------------
# Fake run-time libraries (built with gcc from tests/fake_*), loaded through TW_IBVERBS_LIB /
# TW_CUDA_LIB in child processes, exactly as the real libibverbs.so.1 / libcuda.so.1 would be.
# ------------------------------------------------------------------------------------------
def _gcc(out, *args):
    import shutil
    import subprocess

    if shutil.which("gcc") is None:
        pytest.fail("gcc is required to build the fake run-time libraries")
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), *args], check=True)
    return str(out)


@pytest.fixture(scope="session")
def fake_verbs_lib(tmp_path_factory):
    """Path of the fake verbs provider (devices ``fake0,fake1`` unless FAKE_VERBS_DEVICES)."""
    src = os.path.join(REPO, "tests", "fake_verbs")
    out = tmp_path_factory.mktemp("fake_verbs") / "libibverbs.so.1"
    return _gcc(out, os.path.join(src, "fake_ibverbs.c"),
                f"-Wl,--version-script={os.path.join(src, 'fake_ibverbs.map')}",
                "-Wl,-soname,libibverbs.so.1")


@pytest.fixture(scope="session")
def fake_cuda_lib(tmp_path_factory):
    """Path of the fake CUDA driver (one device)."""
    out = tmp_path_factory.mktemp("fake_cuda_session") / "libcuda.so.1"
    return _gcc(out, os.path.join(REPO, "tests", "fake_cuda", "fake_cuda.c"), "-lpthread")


@pytest.fixture(scope="session")
def store_master_built():
    """The Store tests need ``target/release/tidewire-master``, which ``make build`` (a
    prerequisite of ``make py-tests``) makes: without it they fail, loudly, instead of
    skipping."""
    path = os.path.join(REPO, "target", "release", "tidewire-master")
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: build it first (make build)", pytrace=False)
