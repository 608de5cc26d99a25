"""The package by concept: subpackages (tidewire.core, tidewire.mooncake_engine,
tidewire.mooncake_store) rather than prefixed flat modules, each client class in one file, and
every public module path of before the move still importable with the same names."""

import importlib
import inspect
import os
import subprocess
import sys

import pytest

import tidewire as tw
from conftest import PYDIR

PKG = os.path.join(PYDIR, "tidewire")


def test_no_prefixed_flat_modules_are_left():
    flat = [f for f in os.listdir(PKG) if f.endswith(".py")]
    assert not [f for f in flat if f.startswith(("_core_", "_store_", "_engine_"))], flat
    for sub in ("core", "mooncake_engine", "mooncake_store"):
        assert os.path.isfile(os.path.join(PKG, sub, "__init__.py")), sub


@pytest.mark.parametrize("module, names", [
    ("tidewire", ["Engine", "Batch", "ScatterOp", "RequestArray", "Store", "StoreError",
                  "TidewireError", "library_path", "library_version", "ObjectNotFound"]),
    ("tidewire.core", ["Engine", "Batch", "Segment", "Registration", "StreamOp", "ScatterOp",
                       "RequestArray", "buffer_address", "gpu_devices", "CONFIG_KEYS"]),
    ("tidewire.engine", ["TransferEngine", "TransferNotify", "TransferOpcode", "Read", "Write",
                         "SUPPORT_CUDA", "P2PHANDSHAKE", "mooncake_code"]),
    ("tidewire.store", ["MooncakeDistributedStore", "ReplicateConfig", "install_as_mooncake",
                        "BufferHandle", "MooncakeHostMemAllocator", "MAX_KEY_LEN",
                        "SoftPinAction", "ReplicaDescriptor", "bind_to_numa_node"]),
    ("tidewire.kv", ["Store", "StoreRegistration", "StoreError", "ObjectNotFound"]),
    ("tidewire.host", ["transports", "report"]),
    ("tidewire.store_server", ["main", "Session"]),
])
def test_public_paths_keep_their_names(module, names):
    mod = importlib.import_module(module)
    for name in names:
        assert hasattr(mod, name), (module, name)
    for name in getattr(mod, "__all__", []):
        assert hasattr(mod, name), (module, name)


def test_the_client_classes_are_one_class_each_in_one_file():
    from tidewire.engine import TransferEngine
    from tidewire.store import MooncakeDistributedStore

    for cls, home in ((TransferEngine, "mooncake_engine/transfer_engine.py"),
                      (MooncakeDistributedStore, "mooncake_store/client.py")):
        # The store's methods by concept: the core class, and one mixin per family of
        # Mooncake methods (tensor-parallel forms, safetensors files, tasks and extras), each
        # one class in one file of the package.
        homes = {os.path.join(PKG, home)} | {inspect.getsourcefile(b) for b in cls.__mro__[1:-1]}
        for part in cls.__mro__[:-1]:
            files = {inspect.getsourcefile(inspect.unwrap(getattr(part, n))) for n in vars(part)
                     if inspect.isfunction(getattr(part, n))}
            assert files <= (homes if part is cls else {inspect.getsourcefile(part)}), files
        assert {os.path.dirname(h) for h in homes} == {os.path.dirname(os.path.join(PKG, home))}
        if cls is TransferEngine:
            assert cls.__mro__ == (cls, object), cls.__mro__  # no mixins


def test_store_error_is_a_tidewire_error():
    assert issubclass(tw.StoreError, tw.TidewireError)
    assert issubclass(tw.ObjectNotFound, KeyError) and issubclass(tw.InvalidParams, ValueError)
    err = tw.StoreError.from_code(-704, "missing")
    assert isinstance(err, tw.ObjectNotFound) and isinstance(err, tw.TidewireError)
    assert (err.code, err.message) == (-704, "missing")
    assert str(err) == "OBJECT_NOT_FOUND (-704): missing"
    other = tw.StoreError.from_code(-707)
    assert type(other) is tw.StoreError and other.name == "LEASE_EXPIRED"
    import pickle

    again = pickle.loads(pickle.dumps(other))
    assert (type(again), again.code, again.name) == (tw.StoreError, -707, "LEASE_EXPIRED")


def test_the_command_line_modules_run():
    env = dict(os.environ, PYTHONPATH=PYDIR)
    r = subprocess.run([sys.executable, "-m", "tidewire.store_server", "--help"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--master_server_address" in r.stdout, r.stderr


def test_the_mooncake_shim_package_serves_both_modules():
    shim = os.path.join(PKG, "shim")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([shim, PYDIR]))
    code = ("import mooncake.engine, mooncake.store, tidewire.engine, tidewire.store\n"
            "assert mooncake.engine.TransferEngine is tidewire.engine.TransferEngine\n"
            "assert mooncake.store.MooncakeDistributedStore is "
            "tidewire.store.MooncakeDistributedStore\n")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr


def test_the_mooncake_classes_name_their_public_module():
    """Callers (TransferQueue's driver, the P/D drivers) tell tidewire from Mooncake by a
    class's ``__module__``: it stays the public path."""
    import pickle

    from tidewire.engine import TransferEngine, TransferNotify, TransferOpcode
    from tidewire.store import MooncakeDistributedStore

    for cls in (TransferEngine, TransferNotify, TransferOpcode):
        assert cls.__module__ == "tidewire.engine", cls
    assert MooncakeDistributedStore.__module__ == "tidewire.store"
    assert pickle.loads(pickle.dumps(TransferOpcode.Write)) is TransferOpcode.Write
    assert pickle.loads(pickle.dumps(TransferNotify)) is TransferNotify
