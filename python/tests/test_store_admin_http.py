"""The master's admin HTTP routes from Python, as the serving stacks read them.

SGLang's HiCache backend (``MooncakeStore.check_server`` in sglang 0.5.23) waits for the store:
it GETs ``http://<master host>:<metrics port>/get_all_segments`` (3 s timeout, any status) and
takes an empty body as "no store server yet" and any other body as ready. This checks that
reading against a real tidewire-master: empty before a client mounts a segment, that client's
segment name once it has. When sglang itself is importable, its own ``check_server`` runs
unchanged against the master too."""

import time
import types

import pytest

from store_util import Master, connect

requests = pytest.importorskip("requests")

# Fails, not skips, without the master binary (see conftest.store_master_built).
pytestmark = pytest.mark.usefixtures("store_master_built")


def sglang_check(master):
    """One round of SGLang's check_server test: (ready, response)."""
    host = master.address.split(":")[0]
    resp = requests.get(f"http://{host}:{master.metrics_port}/get_all_segments", timeout=3)
    return resp.text != "", resp


@pytest.fixture
def master():
    m = Master()
    yield m
    m.stop()


def test_get_all_segments_reads_as_sglang_check_server_reads_it(master):
    ready, resp = sglang_check(master)
    assert not ready, "no segment yet: SGLang keeps waiting"
    assert resp.status_code == 200
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4"
    assert resp.headers["X-Tidewire-Total"] == "0"

    store = connect(master, segment=64 << 20)
    try:
        ready, resp = sglang_check(master)
        assert ready, "a segment is mounted: SGLang goes on"
        assert resp.text.splitlines() == [store.get_hostname()]
        assert resp.text.endswith("\n")
        assert resp.headers["X-Tidewire-Truncated"] == "false"

        # The key routes on the same port, with a key holding a NUL and a space (requests
        # percent-encodes them).
        key = "sgl\0page 1"
        assert store.put(key, b"x" * 4096) == 0
        base = f"http://127.0.0.1:{master.metrics_port}"
        r = requests.get(f"{base}/query_key", params={"key": key}, timeout=3)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["success"] is True
        assert [d["size_"] for d in body["data"]] == [4096]
        assert body["data"][0]["transport_endpoint_"] == store.get_hostname()
        r = requests.get(f"{base}/batch_query_keys", params={"keys": f"{key},missing"}, timeout=3)
        data = r.json()["data"]
        assert data[key]["ok"] is True and data[key]["values"][0]["size_"] == 4096
        assert data["missing"] == {"ok": False, "error": "OBJECT_NOT_FOUND", "values": None,
                                   "disk_values": None, "local_disk_values": None,
                                   "nof_values": None}
        r = requests.get(f"{base}/get_all_keys", timeout=3)
        assert r.text.split("\n") == [key, ""]
        r = requests.get(f"{base}/query_segment", params={"segment": store.get_hostname()},
                         timeout=3)
        lines = r.text.splitlines()
        assert lines[0] == store.get_hostname()
        assert lines[1].startswith("Used(bytes): ") and int(lines[1].split(": ")[1]) >= 4096
        assert lines[2].startswith("Capacity(bytes) : ")
        assert int(lines[2].split(" : ")[1]) >= 64 << 20
        detail = requests.get(f"{base}/get_segments_detail", timeout=3).json()
        assert detail["total_segments"] == 1
        assert detail["segments"][0]["segment_name"] == store.get_hostname()
        assert requests.get(f"{base}/health", timeout=3).json()["status"] == "ok"
        assert requests.get(f"{base}/query_key", timeout=3).status_code == 400
        assert requests.get(f"{base}/no_such_route", timeout=3).status_code == 404
        assert store.remove(key) == 0, "the admin queries granted no lease"
    finally:
        store.close()


def test_sglang_own_check_server_passes(master):
    try:
        from sglang.srt.mem_cache.storage.mooncake_store import mooncake_store as sgl
    except Exception as e:  # sglang (and its import chain) is not installed here
        pytest.skip(f"sglang not importable: {e!r}")
    cfg = types.SimpleNamespace(master_server_address=master.address,
                                master_metrics_port=master.metrics_port)
    me = types.SimpleNamespace(config=cfg)
    store = connect(master, segment=16 << 20)
    try:
        t0 = time.perf_counter()
        sgl.MooncakeStore.check_server(me)  # raises ValueError on timeout
        assert time.perf_counter() - t0 < 10
    finally:
        store.close()

