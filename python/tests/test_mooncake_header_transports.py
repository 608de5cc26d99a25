"""The transports documented in include/transfer_engine_c.h (the block between
``BEGIN TRANSPORTS`` and ``END TRANSPORTS``) are exactly those installTransport accepts.

Each case runs in a child process with its own environment: a fake verbs provider with
devices (tests/fake_verbs), a verbs library that does not exist, MC_FORCE_TCP. The child calls
Mooncake's C functions of the library under test through ctypes."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

HEADER = os.path.join(REPO, "include", "transfer_engine_c.h")

#: Transport names of Mooncake's classic engine (and a few wrong spellings): none of them may
#: be accepted unless the header documents it.
CANDIDATES = ["tcp", "rdma", "nvmeof", "nvlink", "nvlink_intra", "hip", "cxl", "efa", "barex",
              "ascend", "ubshmem", "mnnvl", "tent", "TCP", "Rdma", "rdma ", "", "bogus"]

CHILD = textwrap.dedent(r"""
    import ctypes, json, sys
    from ctypes import c_char_p, c_int, c_uint64, c_void_p
    from tidewire import _ffi
    lib = ctypes.CDLL(_ffi.library_path())
    lib.createTransferEngine.argtypes = [c_char_p, c_char_p, c_char_p, c_uint64, c_int]
    lib.createTransferEngine.restype = c_void_p
    lib.installTransport.argtypes = [c_void_p, c_char_p, c_void_p]
    lib.installTransport.restype = c_void_p
    lib.destroyTransferEngine.argtypes = [c_void_p]
    out = {}
    for name in json.loads(sys.argv[1]):
        # A fresh engine per name (auto_discover = 0: nothing installed yet).
        eng = lib.createTransferEngine(b"P2PHANDSHAKE", b"127.0.0.1", b"127.0.0.1", 0, 0)
        assert eng, _ffi.last_error_message()
        h = lib.installTransport(eng, name.encode(), None)
        err = "" if h else _ffi.last_error_message()
        again = lib.installTransport(eng, name.encode(), None) if h else None
        out[name] = [bool(h), err, bool(h) and again == h]
        lib.destroyTransferEngine(eng)
    print(json.dumps(out))
""")


def documented():
    """{name: condition} from the header's BEGIN/END TRANSPORTS block."""
    with open(HEADER) as f:
        text = f.read()
    m = re.search(r"BEGIN TRANSPORTS\n(.*?)\n\s*\*\s*END TRANSPORTS", text, re.S)
    assert m, "no BEGIN TRANSPORTS ... END TRANSPORTS block in transfer_engine_c.h"
    out = {}
    last = None
    for line in m.group(1).splitlines():
        entry = re.match(r"\s*\*   (\w+)\s+(.*)$", line)  # an entry: name at column 3
        more = re.match(r"\s*\*\s{5,}(.*)$", line)  # its continuation lines
        if entry:
            last = entry.group(1)
            out[last] = entry.group(2)
        elif more and last:
            out[last] += " " + more.group(1)
    return out


def install_results(env_extra, names=CANDIDATES):
    env = dict(os.environ, TW_LOG_LEVEL="error")
    env.pop("MC_FORCE_TCP", None)
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps(names)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_block_parses():
    doc = documented()
    assert set(doc) == {"tcp", "rdma"}, doc
    assert doc["tcp"] == "always"
    assert doc["rdma"].startswith("when a verbs device is usable")


def test_with_a_verbs_device_the_documented_names_are_exactly_the_accepted_ones(fake_verbs_lib):
    results = install_results({"TW_IBVERBS_LIB": fake_verbs_lib})
    accepted = {n for n, (ok, _, _) in results.items() if ok}
    assert accepted == set(documented()), results
    for name in accepted:
        assert results[name][2], f"{name}: a second install must return the same handle"
    for name, (ok, err, _) in results.items():
        if not ok:
            assert "unsupported" in err.lower(), (name, err)


def test_without_a_device_rdma_is_refused_with_unsupported(tmp_path):
    missing = str(tmp_path / "no-such-libibverbs.so.1")
    results = install_results({"TW_IBVERBS_LIB": missing}, ["tcp", "rdma"])
    assert results["tcp"][0], results
    ok, err, _ = results["rdma"]
    assert not ok and "unsupported" in err.lower() and "rdma" in err.lower(), err
    # The condition the header names: "when a verbs device is usable".
    assert "device" in documented()["rdma"]


def test_mc_force_tcp_refuses_rdma_even_with_a_device(fake_verbs_lib):
    results = install_results({"TW_IBVERBS_LIB": fake_verbs_lib, "MC_FORCE_TCP": "1"},
                              ["tcp", "rdma"])
    assert results["tcp"][0]
    ok, err, _ = results["rdma"]
    assert not ok and "MC_FORCE_TCP" in err, err
    assert "MC_FORCE_TCP" in documented()["rdma"]
