"""_ffi.py against include/tidewire.h: every tw_* function declared, with the same arity and
void-ness; struct sizes; library loading rules."""

import ctypes
import os
import re

import pytest

from conftest import REPO
from tidewire import _ffi

HEADER = os.path.join(REPO, "include", "tidewire.h")


def header_functions():
    with open(HEADER) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)  # comments
    protos = {}
    for m in re.finditer(r"([A-Za-z_][\w \t\*]*?)\b(tw_\w+)\(([^;{]*?)\)\s*;", text, re.S):
        ret, name, params = m.group(1).strip(), m.group(2), " ".join(m.group(3).split())
        if ret.startswith("typedef"):
            continue
        count = 0 if params in ("", "void") else params.count(",") + 1
        protos[name] = (ret, count)
    return protos


def test_header_parses():
    protos = header_functions()
    # A sanity floor so a broken regex cannot make the drift check vacuous.
    assert len(protos) >= 30, sorted(protos)
    assert "tw_batch_submit" in protos and "tw_engine_probe" in protos
    assert "tw_fragment_callback" not in protos


def test_every_header_function_is_declared():
    missing = sorted(set(header_functions()) - set(_ffi.SIGNATURES))
    assert not missing, f"declare these in python/tidewire/_ffi.py SIGNATURES: {missing}"


def test_no_stale_declarations():
    stale = sorted(set(_ffi.SIGNATURES) - set(header_functions()))
    assert not stale, f"declared in _ffi.py but not in the header: {stale}"


def test_arity_and_void_match_the_header():
    bad = []
    for name, (ret, count) in header_functions().items():
        argtypes, restype = _ffi.SIGNATURES[name]
        if len(argtypes) != count:
            bad.append(f"{name}: header has {count} parameters, _ffi.py {len(argtypes)}")
        is_void = ret == "void"
        if is_void != (restype is None):
            bad.append(f"{name}: header returns {ret!r}, _ffi.py restype {restype}")
        if ret == "tw_result" and restype is not ctypes.c_int32:
            bad.append(f"{name}: tw_result must map to c_int32")
    assert not bad, "\n".join(bad)


def test_library_exports_every_declared_function():
    lib = _ffi.lib()
    for name in _ffi.SIGNATURES:
        fn = getattr(lib, name)
        assert fn.argtypes is not None or not _ffi.SIGNATURES[name][0], name


def test_struct_layouts():
    assert ctypes.sizeof(_ffi.TransferRequest) == 32
    assert ctypes.sizeof(_ffi.TransferStatus) == 16
    assert ctypes.sizeof(_ffi.ScatterRange) == 72
    assert ctypes.sizeof(_ffi.Buffer) == 16
    assert ctypes.sizeof(_ffi.Notification) == 16


def test_constants_match_the_header():
    with open(HEADER) as f:
        text = f.read()
    defines = dict(re.findall(r"#define (TW_\w+) (-?\d+)", text))
    assert defines, "no #define found"
    for name, value in defines.items():
        if name.startswith("TW_") and hasattr(_ffi, name):
            assert getattr(_ffi, name) == int(value), name
    for name in ("TW_OK", "TW_ERR_TIMEOUT", "TW_ERR_PANIC", "TW_TASK_FAILED",
                 "TW_OPCODE_WRITE"):
        assert int(defines[name]) == getattr(_ffi, name)


def test_result_names_and_version():
    assert _ffi.result_name(0) == "TW_OK"
    assert _ffi.result_name(-9) == "TW_ERR_TIMEOUT"
    assert _ffi.result_name(-999) == "TW_ERR_UNKNOWN"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", _ffi.version())
    assert _ffi.last_error_message() == "" or isinstance(_ffi.last_error_message(), str)


def test_missing_library_error_lists_every_place(monkeypatch, tmp_path):
    places = [("TIDEWIRE_LIB", str(tmp_path / "nope.so")),
              ("next to the package", str(tmp_path / "pkg" / "libtidewire.so"))]
    monkeypatch.setattr(_ffi, "library_candidates", lambda: places)
    with pytest.raises(_ffi.LibraryNotFound) as ei:
        _ffi._load()
    msg = str(ei.value)
    for _, p in places:
        assert p in msg
    assert "TIDEWIRE_LIB" in msg


def test_unloadable_file_is_reported(monkeypatch, tmp_path):
    junk = tmp_path / "libtidewire.so"
    junk.write_bytes(b"not an ELF file")
    monkeypatch.setattr(_ffi, "library_candidates", lambda: [("test", str(junk))])
    with pytest.raises(_ffi.LibraryNotFound) as ei:
        _ffi._load()
    assert str(junk) in str(ei.value)


def test_candidate_order(monkeypatch):
    monkeypatch.setenv("TIDEWIRE_LIB", "/x/libtidewire.so")
    c = [p for _, p in _ffi.library_candidates()]
    assert c[0] == "/x/libtidewire.so"
    assert c[1].endswith(os.path.join("tidewire", "libtidewire.so"))
    assert c[2] == os.path.join(REPO, "target", "release", "libtidewire.so")
    monkeypatch.delenv("TIDEWIRE_LIB")
    assert len(_ffi.library_candidates()) == 2


def test_loaded_with_cdll_so_calls_release_the_gil():
    lib = _ffi.lib()
    assert type(lib) is ctypes.CDLL
    # PyDLL function pointers carry the FUNCFLAG_PYTHONAPI flag; CDLL ones must not.
    assert not (lib.tw_batch_wait._flags_ & ctypes._FUNCFLAG_PYTHONAPI)
