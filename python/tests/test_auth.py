"""Optional peer authentication: ``auth_key`` (pythonic Engine) and ``TW_AUTH_KEY`` (read at
engine creation, so also by the Mooncake-compatible TransferEngine, which has no option for it).
Engines in this process still talk over real loopback sockets: in P2P mode every segment is
opened through the authenticated handshake."""

import time

import pytest

import tidewire as tw
from conftest import new_te
from tidewire.engine import TransferEngine

KEY = "python-test-key"


@pytest.fixture
def auth_env(monkeypatch):
    """Sets TW_AUTH_KEY for the engines created while the test sets it."""
    return monkeypatch


def test_transfer_engine_honours_tw_auth_key(auth_env):
    auth_env.setenv("TW_AUTH_KEY", KEY)
    keyed = new_te()
    same = new_te()
    auth_env.delenv("TW_AUTH_KEY")
    keyless = new_te()
    auth_env.setenv("TW_AUTH_KEY", "some other key")
    other = new_te()
    try:
        dst = keyed.allocate_managed_buffer(4096)
        src = same.allocate_managed_buffer(4096)
        same.write_bytes_to_buffer(src, b"keyed bytes", 11)
        assert same.transfer_sync_write(keyed.get_segment_name(), src, dst, 11) == 0
        assert keyed.read_bytes_from_buffer(dst, 11) == b"keyed bytes"
        for te in (keyless, other):
            buf = te.allocate_managed_buffer(4096)
            te.write_bytes_to_buffer(buf, b"XXXXXXXXXXX", 11)
            t0 = time.monotonic()
            assert te.transfer_sync_write(keyed.get_segment_name(), buf, dst, 11) < 0
            assert te.transfer_sync_read(keyed.get_segment_name(), buf, dst, 11) < 0
            assert time.monotonic() - t0 < 10
        assert keyed.read_bytes_from_buffer(dst, 11) == b"keyed bytes"
    finally:
        for te in (keyed, same, keyless, other):
            te.close()


def test_engine_auth_key_option():
    assert "auth_key" in tw.CONFIG_KEYS
    with tw.Engine(local_server_name="127.0.0.1", auth_key=KEY) as a, \
            tw.Engine(local_server_name="127.0.0.1", auth_key=KEY) as b, \
            tw.Engine(local_server_name="127.0.0.1", auth_key="nope") as c:
        b.open_segment(a.name)
        with pytest.raises(tw.TidewireError) as err:
            c.open_segment(a.name)
        assert "auth_key" in str(err.value)
