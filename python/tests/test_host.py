"""`python -m tidewire` (tidewire.host): the transports it reports follow what the library
finds on the host, here made to vary with fake verbs / CUDA libraries in child processes."""

import os
import subprocess
import sys

from conftest import PYDIR


def run_main(**env_extra):
    env = dict(os.environ, TW_LOG_LEVEL="error", PYTHONPATH=PYDIR)
    for k in ("TW_IBVERBS_LIB", "TW_CUDA_LIB", "TW_SAME_HOST", "MC_FORCE_TCP"):
        env.pop(k, None)
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-m", "tidewire"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    rows = {}
    for ln in lines[3:]:
        name, ok, detail = ln.split(None, 2)
        rows[name] = (ok, detail)
    return lines, rows


def test_report_shape_and_library_path():
    lines, rows = run_main()
    import tidewire
    assert lines[0] == f"tidewire {tidewire.__version__} (library {tidewire.library_version()})"
    assert lines[1] == f"library: {os.environ.get('TIDEWIRE_LIB') or tidewire.library_path()}"
    assert lines[2] == "transports:"
    assert list(rows) == ["tcp", "same-host", "rdma", "cuda"]
    assert rows["tcp"] == ("yes", "always")
    assert rows["same-host"][0] == "yes" and "in-process" in rows["same-host"][1]


def test_rdma_and_cuda_follow_the_libraries_found(fake_verbs_lib, fake_cuda_lib, tmp_path):
    _, rows = run_main(TW_IBVERBS_LIB=fake_verbs_lib, TW_CUDA_LIB=fake_cuda_lib,
                       FAKE_VERBS_DEVICES="fakeA,fakeB")
    assert rows["rdma"] == ("yes", "devices: fakeA, fakeB"), rows
    assert rows["cuda"][0] == "yes" and rows["cuda"][1].endswith("device(s)"), rows
    missing = str(tmp_path / "absent.so.1")
    _, rows = run_main(TW_IBVERBS_LIB=missing, TW_CUDA_LIB=missing)
    assert rows["rdma"][0] == "no" and "absent.so.1" in rows["rdma"][1], rows
    assert rows["cuda"][0] == "no" and "absent.so.1" in rows["cuda"][1], rows


def test_same_host_can_be_turned_off():
    _, rows = run_main(TW_SAME_HOST="0")
    assert rows["same-host"] == ("no", "off (TW_SAME_HOST=0)")
