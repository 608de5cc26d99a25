"""`pip install ./python` works: a pure-Python package that finds the library through
TIDEWIRE_LIB (or a copy placed next to the package)."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import PYDIR

CAN_BUILD = ("import importlib.util as u, importlib.metadata as m\n"
             "assert u.find_spec('pip') and u.find_spec('setuptools')\n"
             "v = tuple(int(x) for x in m.version('setuptools').split('.')[:2])\n"
             "assert u.find_spec('wheel') or v >= (70, 1)\n")


def builder():
    """An interpreter that can build the package offline (pip, setuptools, bdist_wheel)."""
    candidates = [sys.executable]
    for d in os.environ.get("PATH", "").split(os.pathsep):
        exe = shutil.which("python3", path=d) if d else None
        if exe and exe not in candidates:
            candidates.append(exe)
    for exe in candidates:
        if subprocess.run([exe, "-c", CAN_BUILD], capture_output=True,
                                  timeout=60).returncode == 0:
            return exe
    return None


def test_pip_install_and_import(tmp_path):
    exe = builder()
    if exe is None:
        pytest.skip("no interpreter with pip, setuptools and wheel to build offline")
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(os.path.join(PYDIR, "pyproject.toml"), src)
    shutil.copytree(os.path.join(PYDIR, "tidewire"), src / "tidewire",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    dest = tmp_path / "site"
    out = subprocess.run(
        [exe, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(dest), str(src)],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (dest / "tidewire" / "engine.py").exists()
    assert not list(dest.glob("tidewire/*.so")), "the package must not carry compiled parts"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(dest)
    code = ("import tidewire, tidewire.engine as e\n"
            "assert tidewire.__file__.startswith(%r), tidewire.__file__\n"
            "with tidewire.Engine() as eng: print(eng.name)\n"
            "te = e.TransferEngine(); assert te.initialize('127.0.0.1:0', 'P2PHANDSHAKE', "
            "'tcp', '') == 0; te.close()\n" % str(dest))
    run = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("127.0.0.1:")
    # Without TIDEWIRE_LIB and without a copy next to it, the error names every place tried.
    env.pop("TIDEWIRE_LIB", None)
    run = subprocess.run([sys.executable, "-c", "import tidewire; tidewire.Engine()"],
                         cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "LibraryNotFound" in run.stderr and "libtidewire.so" in run.stderr
    assert "TIDEWIRE_LIB" in run.stderr
