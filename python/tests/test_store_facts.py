"""Facts the Python package keeps a copy of, checked against their one home, so a copy that
drifts fails here: the Store's error codes (the C header, generated from the Rust table) and the
default master address (the Rust client's constant)."""

import os
import re

from tidewire import _store_setup, kv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def header_store_codes():
    text = open(os.path.join(ROOT, "include", "tidewire.h")).read()
    return {name: int(v) for name, v in re.findall(r"#define TW_STORE_([A-Z_]+) (-?\d+)", text)}


def test_store_error_codes_match_the_header():
    codes = header_store_codes()
    assert codes["OBJECT_NOT_FOUND"] == -704, codes
    for code, cls in kv._BY_CODE.items():
        if cls is kv.MasterUnavailable and code == codes["RPC_TIMEOUT"]:
            continue  # -901 shares -900's exception class
        assert codes.get(cls.name) == code, (cls.__name__, cls.name, code)
    for code, name in kv._NAMES.items():
        assert codes.get(name) == code, (name, code)


def test_default_master_address_matches_the_rust_client():
    src = open(os.path.join(ROOT, "src", "store", "client.rs")).read()
    m = re.search(r'pub const DEFAULT_MASTER_ADDRESS: &str = "([^"]+)";', src)
    assert m, "DEFAULT_MASTER_ADDRESS not found in src/store/client.rs"
    assert _store_setup.DEFAULT_MASTER_ADDRESS == m.group(1)
    assert _store_setup.DICT_DEFAULTS["master_server_addr"] == m.group(1)
