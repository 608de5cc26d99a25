#!/usr/bin/env python3
"""Minimal Mooncake HTTP metadata server (standard library only).

Speaks the protocol of Mooncake's HTTP metadata backend:

    GET    /metadata?key=K   200 + stored body, or 404 "metadata not found"
    PUT    /metadata?key=K   store the raw body, 200 "metadata updated"
    DELETE /metadata?key=K   200 "metadata deleted", or 404 "metadata not found"
    GET    /keys             200 + JSON list of stored keys (sorted; test helper)

A missing/empty key gives 400 "metadata key is required".  With
--strict-rpc-meta a PUT that would overwrite an existing key containing
"rpc_meta" gets 400, like the aiohttp server shipped in the Mooncake wheel.

Binds 127.0.0.1 on --port (0 = pick a free port) and prints {"port": N} as the
first stdout line.  Runs until killed or until stdin closes (--exit-on-stdin-eof).
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


class Store:
    def __init__(self, strict_rpc_meta=False):
        self.lock = threading.Lock()
        self.data = {}
        self.strict_rpc_meta = strict_rpc_meta


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "tidewire-metadata/1"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))

    def _reply(self, status, body, ctype="application/json"):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _key(self):
        parts = urlsplit(self.path)
        if parts.path != "/metadata":
            return parts.path, None
        values = parse_qs(parts.query, keep_blank_values=True).get("key", [""])
        return parts.path, values[0].strip()

    def _read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            return self.rfile.read(length)
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""

    def do_GET(self):
        path, key = self._key()
        store = self.server.store
        if path == "/keys":
            with store.lock:
                keys = sorted(store.data)
            return self._reply(200, json.dumps(keys))
        if key is None:
            return self._reply(404, "not found", "text/plain")
        if not key:
            return self._reply(400, "metadata key is required")
        with store.lock:
            value = store.data.get(key)
        if value is None:
            return self._reply(404, "metadata not found")
        self._reply(200, value)

    def do_PUT(self):
        path, key = self._key()
        body = self._read_body()
        if key is None:
            return self._reply(404, "not found", "text/plain")
        if not key:
            return self._reply(400, "metadata key is required")
        store = self.server.store
        with store.lock:
            if store.strict_rpc_meta and "rpc_meta" in key and key in store.data:
                return self._reply(400, "Duplicate rpc_meta key not allowed")
            store.data[key] = body
        self._reply(200, "metadata updated")

    def do_DELETE(self):
        path, key = self._key()
        if key is None:
            return self._reply(404, "not found", "text/plain")
        if not key:
            return self._reply(400, "metadata key is required")
        store = self.server.store
        with store.lock:
            found = store.data.pop(key, None) is not None
        if found:
            self._reply(200, "metadata deleted")
        else:
            self._reply(404, "metadata not found")

    def do_POST(self):
        self._read_body()
        self._reply(405, "Method not allowed")


def main():
    ap = argparse.ArgumentParser(description="Mooncake HTTP metadata server (stdlib)")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = random)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--strict-rpc-meta", action="store_true",
                    help="reject overwriting an existing *rpc_meta* key (like upstream)")
    ap.add_argument("--exit-on-stdin-eof", action="store_true",
                    help="shut down when stdin closes")
    ap.add_argument("--verbose", action="store_true", help="log requests to stderr")
    args = ap.parse_args()

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    server.store = Store(args.strict_rpc_meta)
    server.verbose = args.verbose
    sys.stdout.write(json.dumps({"port": server.server_address[1]}) + "\n")
    sys.stdout.flush()

    if args.exit_on_stdin_eof:
        def watch():
            while sys.stdin.readline():
                pass
            server.shutdown()
        threading.Thread(target=watch, daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
