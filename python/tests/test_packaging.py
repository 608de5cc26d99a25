"""Packaging: the wheel carries libtidewire.so, so an installed package needs neither
TIDEWIRE_LIB nor the source tree; `python -m tidewire` reports the library and transports."""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from conftest import PYDIR, REPO


def _clean_env():
    """The environment of a user who only installed the wheel."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TIDEWIRE_LIB", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["TW_LOG_LEVEL"] = "error"
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """`pip wheel ./python`, offline (the build backend needs only the standard library)."""
    out = tmp_path_factory.mktemp("wheelhouse")
    env = dict(os.environ)
    env.pop("TIDEWIRE_WHEEL_LIB", None)  # the real path: cargo builds the library
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
                        "--wheel-dir", str(out), PYDIR],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = list(out.glob("tidewire-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_is_a_platform_wheel_that_carries_the_library(wheel):
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel.name.endswith(f"-py3-none-{plat}.whl"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert "tidewire/libtidewire.so" in names
        for mod in ("__init__.py", "__main__.py", "_ffi.py", "_call_guard.py", "engine.py",
                    "host.py", "store.py", "store_server.py", "kv.py", "py.typed",
                    "core/__init__.py", "core/engine.py", "mooncake_engine/__init__.py",
                    "mooncake_engine/transfer_engine.py", "mooncake_store/__init__.py",
                    "mooncake_store/client.py", "mooncake_store/native.py"):
            assert f"tidewire/{mod}" in names, mod
        info = z.getinfo("tidewire/libtidewire.so")
        assert info.file_size > 100_000
        assert z.read("tidewire/libtidewire.so")[:4] == b"\x7fELF"
        dist = [n for n in names if n.endswith(".dist-info/WHEEL")]
        assert dist and "Root-Is-Purelib: false" in z.read(dist[0]).decode()
        record = [n for n in names if n.endswith(".dist-info/RECORD")]
        assert record and "tidewire/libtidewire.so,sha256=" in z.read(record[0]).decode()


def test_installed_wheel_works_in_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300,
                   env=_clean_env())
    py = str(venv / "bin" / "python")
    env = _clean_env()
    r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
                        str(wheel)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    work = tmp_path / "elsewhere"  # outside the repository: no source tree to fall back on
    work.mkdir()
    r = subprocess.run([py, "-m", "tidewire"], cwd=str(work), env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("tidewire 0.1.0 (library "), r.stdout
    lib_path = lines[1].removeprefix("library: ")
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert lib_path == os.path.join(site, "tidewire", "libtidewire.so"), r.stdout
    assert not lib_path.startswith(REPO + os.sep)
    transports = {ln.split()[0]: ln.split()[1] for ln in lines[3:]}
    assert set(transports) == {"tcp", "same-host", "rdma", "cuda"}, r.stdout
    assert transports["tcp"] == "yes"
    # Both APIs move bytes with the installed copy.
    code = (
        "import tidewire, tidewire.engine as e\n"
        "assert tidewire.library_path().startswith(%r), tidewire.library_path()\n"
        "with tidewire.Engine() as a, tidewire.Engine() as b:\n"
        "    src, dst = bytearray(b'wheel!' * 100), bytearray(600)\n"
        "    with a.register(src), b.register(dst) as r:\n"
        "        a.write(a.open_segment(b.name), src, r.addr, timeout=10)\n"
        "    assert dst == src\n"
        "te, tg = e.TransferEngine(), e.TransferEngine()\n"
        "for x in (te, tg): assert x.initialize('127.0.0.1:0', 'P2PHANDSHAKE', 'tcp', '') == 0\n"
        "s, d = te.allocate_managed_buffer(4096), tg.allocate_managed_buffer(4096)\n"
        "te.write_bytes_to_buffer(s, b'compat', 6)\n"
        "assert te.transfer_sync_write(tg.get_segment_name(), s, d, 6) == 0\n"
        "assert tg.read_bytes_from_buffer(d, 6) == b'compat'\n"
        "te.close(); tg.close(); print('INSTALLED-OK')\n" % site)
    r = subprocess.run([py, "-c", code], cwd=str(work), env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "INSTALLED-OK" in r.stdout, r.stdout + r.stderr


def test_tidewire_lib_still_comes_first(wheel, tmp_path):
    """TIDEWIRE_LIB overrides the packaged copy (here: pointing at a file that is not a
    library, so the error names it)."""
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    env = _clean_env()
    env["PYTHONPATH"] = str(site)
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"not a library")
    env["TIDEWIRE_LIB"] = str(junk)
    code = "import tidewire; print(tidewire.library_path())"
    r = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=60)
    # The junk file is tried first and skipped; the packaged copy is loaded next.
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(site / "tidewire" / "libtidewire.so")
    del env["TIDEWIRE_LIB"]
    env["TIDEWIRE_LIB"] = os.environ.get("TIDEWIRE_LIB") or os.path.join(
        REPO, "target", "release", "libtidewire.so")
    r = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == env["TIDEWIRE_LIB"]


def test_without_any_library_the_error_names_every_place(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(os.path.join(PYDIR, "tidewire"), src / "tidewire",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    env = _clean_env()
    env["PYTHONPATH"] = str(src)
    r = subprocess.run([sys.executable, "-c", "import tidewire; tidewire.Engine()"],
                       cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "LibraryNotFound" in r.stderr and "libtidewire.so" in r.stderr
    assert "TIDEWIRE_LIB" in r.stderr and "pip install ./python" in r.stderr
    r = subprocess.run([sys.executable, "-m", "tidewire"], cwd=str(tmp_path), env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "cannot load the tidewire library" in r.stderr, r.stderr
