"""Facts the Python package keeps a copy of, checked against their one home, so a copy that
drifts fails here: the Store's error codes (the C header, generated from the Rust table) and the
default master address (the Rust client's constant)."""

import os
import re

from tidewire import _ffi, kv
from tidewire.mooncake_store import codes as _store_codes
from tidewire.mooncake_store import setup_args as _store_setup
from tidewire.mooncake_store import signatures as _store_ffi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def header_store_codes():
    """The header's TW_STORE_* codes (0 and the negative numbers; positive defines are limits and
    sizes, not codes)."""
    text = open(os.path.join(ROOT, "include", "tidewire.h")).read()
    return {name: int(v) for name, v in re.findall(r"#define TW_STORE_([A-Z_]+) (-?\d+)", text)
            if int(v) <= 0}


def test_store_error_codes_match_the_header():
    """_store_codes holds Mooncake's numbers; the header the C API's, which are the same but for
    INTERNAL_ERROR and BUFFER_OVERFLOW (the TW_ERR_* codes of the same meaning)."""
    header = {n: c for n, c in header_store_codes().items() if not n.startswith("MAX_")}
    assert header["OBJECT_NOT_FOUND"] == -704, header
    assert sorted(_store_codes.NAMES.values()) == sorted(header), "a TW_STORE_* code is missing"
    for code, name in _store_codes.NAMES.items():
        assert _store_codes.from_c(header[name]) == code, (name, code, header[name])
        differs = name in ("INTERNAL_ERROR", "BUFFER_OVERFLOW")
        assert (header[name] != code) == differs, (name, code, header[name])
    assert _store_ffi.TW_STORE_INTERNAL_ERROR == header["INTERNAL_ERROR"] == _ffi.TW_ERR_INTERNAL
    assert (_store_ffi.TW_STORE_BUFFER_OVERFLOW == header["BUFFER_OVERFLOW"]
            == _ffi.TW_ERR_BUFFER_TOO_SMALL)
    for code, cls in kv._BY_CODE.items():
        if cls is kv.MasterUnavailable and code == _store_codes.RPC_TIMEOUT:
            continue  # -901 shares -900's exception class
        assert _store_codes.NAMES[code] == cls.name, (cls.__name__, cls.name, code)
    for code, name in kv._NAMES.items():
        assert _store_codes.NAMES[code] == name, (name, code)


def test_one_code_space():
    """No TW_STORE_* number is a tw_result number of another meaning; the library names each
    store code (tw_result_str)."""
    header = header_store_codes()
    native = {v: n for n, v in vars(_ffi).items() if n.startswith("TW_ERR_")}
    same = {"INTERNAL_ERROR": "TW_ERR_INTERNAL", "BUFFER_OVERFLOW": "TW_ERR_BUFFER_TOO_SMALL"}
    for name, c in header.items():
        if name.startswith("MAX_") or c == 0:
            continue
        assert native.get(c, same.get(name)) == same.get(name), (name, c, native.get(c))
        want = same.get(name, "TW_STORE_" + name)
        assert _ffi.result_name(c) == want, (name, c)


def test_results_put_back_mooncake_numbers():
    from array import array
    from ctypes import c_int64

    internal, overflow = _store_ffi.TW_STORE_INTERNAL_ERROR, _store_ffi.TW_STORE_BUFFER_OVERFLOW
    assert _store_codes.results(array("i", [0, 1, -704])) == [0, 1, -704]
    assert _store_codes.results(array("i", [1, internal, overflow])) == [1, -1, -10]
    # 239 (0xef) and 241 (0xf1) share a low byte with the two codes: sizes stay as they are.
    assert _store_codes.results((c_int64 * 4)(239, 241, internal, 5)) == [239, 241, -1, 5]
    assert _store_codes.results((c_int64 * 2)(239, 241)) == [239, 241]
    assert _store_codes.from_c(internal) == -1 and _store_codes.from_c(-704) == -704


def test_default_master_address_matches_the_rust_client():
    src = open(os.path.join(ROOT, "src", "store", "client.rs")).read()
    m = re.search(r'pub const DEFAULT_MASTER_ADDRESS: &str = "([^"]+)";', src)
    assert m, "DEFAULT_MASTER_ADDRESS not found in src/store/client.rs"
    assert _store_setup.DEFAULT_MASTER_ADDRESS == m.group(1)
    assert _store_setup.DICT_DEFAULTS["master_server_addr"] == m.group(1)
