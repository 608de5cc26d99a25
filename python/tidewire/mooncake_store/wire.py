"""The framing between dummy store clients and the real client process that serves them
(``tidewire.store_server``): a 4-byte big-endian length, then that many bytes of UTF-8 JSON.
Shared memory carries the values; these frames carry only calls, keys and small results."""

import json
import socket
import struct
from typing import Any

#: Largest frame either side accepts (calls with huge key lists are refused, not buffered).
MAX_FRAME = 64 << 20
_LEN = struct.Struct(">I")


class WireError(Exception):
    """The connection failed, closed or carried a malformed frame."""


def send(sock: socket.socket, obj: Any) -> None:
    """Sends ``obj`` as one frame."""
    data = json.dumps(obj, separators=(",", ":")).encode("utf-8", "surrogatepass")
    if len(data) > MAX_FRAME:
        raise WireError(f"frame of {len(data)} bytes exceeds {MAX_FRAME}")
    try:
        sock.sendall(_LEN.pack(len(data)) + data)
    except OSError as e:
        raise WireError(f"send failed: {e}") from None


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except OSError as e:  # timeouts included
            raise WireError(f"receive failed: {e}") from None
        if not chunk:
            raise WireError("connection closed")
        buf += chunk
    return bytes(buf)


def recv(sock: socket.socket) -> Any:
    """Receives one frame and returns its decoded JSON."""
    (n,) = _LEN.unpack(_exact(sock, 4))
    if n > MAX_FRAME:
        raise WireError(f"frame of {n} bytes exceeds {MAX_FRAME}")
    try:
        return json.loads(_exact(sock, n).decode("utf-8", "surrogatepass"))
    except ValueError as e:
        raise WireError(f"malformed frame: {e}") from None
