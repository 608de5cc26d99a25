"""initialize() with an http:// metadata server (Mooncake's GET/PUT/DELETE ?key= protocol):
segment names are the local_hostname, descriptors are published and removed."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from conftest import pattern
from tidewire.engine import TransferEngine


class Store(BaseHTTPRequestHandler):
    data = None  # set per server
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _key(self):
        q = parse_qs(urlparse(self.path).query)
        return q.get("key", [None])[0]

    def _reply(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with self.lock:
            v = self.server.kv.get(self._key())
        self._reply(200, v) if v is not None else self._reply(404, b"metadata not found")

    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.lock:
            self.server.kv[self._key()] = body
        self._reply(200, b"metadata updated")

    def do_DELETE(self):
        with self.lock:
            found = self.server.kv.pop(self._key(), None) is not None
        self._reply(200 if found else 404)


@pytest.fixture
def metadata_url():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Store)
    srv.kv = {}
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metadata", srv.kv
    finally:
        srv.shutdown()
        srv.server_close()


def test_http_metadata_transfers(metadata_url, mbuf):
    url, kv = metadata_url
    a, b = TransferEngine(), TransferEngine()
    try:
        assert a.initialize("nodeA", url, "tcp", "") == 0
        assert b.initialize_ext("nodeB", url.split("://", 1)[1], "tcp", "", "http") == 0
        assert a.get_segment_name() == "nodeA" and b.get_segment_name() == "nodeB"
        rb = mbuf(65536)
        la = mbuf(65536)
        assert b.register_memory(rb.addr, rb.size) == 0
        assert a.register_memory(la.addr, la.size) == 0
        assert "mooncake/ram/nodeB" in kv and "mooncake/rpc_meta/nodeB" in kv
        data = pattern(4096, seed=8)
        la.put(0, data)
        assert a.transfer_sync_write("nodeB", la.addr, rb.addr + 100, 4096) == 0
        assert rb.get(100, 4096) == data
        assert a.get_first_buffer_address("nodeB") == rb.addr
        assert a.transfer_sync_read("nodeC", la.addr, rb.addr, 8) == -1  # not published
        b.close()
        assert "mooncake/ram/nodeB" not in kv
    finally:
        a.close()
        b.close()


def test_unreachable_http_metadata():
    te = TransferEngine()
    assert te.initialize("nodeX", "http://127.0.0.1:1/metadata", "tcp", "") == -1
    assert te.get_rpc_port() == -1
