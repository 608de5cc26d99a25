"""The real client for dummy store clients (Mooncake's ``mooncake_client``): one process that
owns the engine and the segment, serving the dummy clients of its host (``setup_dummy``).

    python -m tidewire.store_server --master_server_address 127.0.0.1:50051 \\
        --global_segment_size 4gb --port 50052

It prints one JSON line when ready (``{"address": "127.0.0.1:50052", "hostname": ...}``) and
serves until killed (SIGTERM/SIGINT close the store first). Each dummy connection gets a thread
(a host has few dummy clients); a dummy's shared memory (memfd from
``MooncakeHostMemAllocator``) is opened through ``/proc/<pid>/fd``, mapped and registered, and
every zero-copy call moves the bytes straight between it and the store. A dummy whose process
dies has its memory unregistered and unmapped when its connection closes. Bad frames close the
connection; bad calls get an error reply."""

import argparse
import base64
import ctypes
import json
import mmap
import os
import signal
import socket
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple

from . import setup_args as _store_setup
from . import wire
from .client import MooncakeDistributedStore
from .codes import INVALID_PARAMS
from .config import ReplicateConfig

_ADDR_ARGS = {
    # method -> how its encoded arguments map back: "one" (index of [region, offset]),
    # "list" (index of a list of them), "lists" (index of a list of lists of them).
    "put_from": ("one", 1), "upsert_from": ("one", 1), "get_into": ("one", 1),
    "batch_put_from": ("list", 1), "batch_upsert_from": ("list", 1),
    "batch_get_into": ("list", 1), "get_into_ranges": ("list", 0),
    "batch_put_from_multi_buffers": ("lists", 1), "batch_get_into_multi_buffers": ("lists", 1),
    "batch_get_into_multi_buffer_ranges": ("lists", 1),
}
_VALUE_ARGS = {"put": "one", "upsert": "one", "put_batch": "list", "upsert_batch": "list"}
_CONFIG_AT = {
    "put": 2, "upsert": 2, "put_batch": 2, "upsert_batch": 2, "put_from": 3, "upsert_from": 3,
    "batch_put_from": 3, "batch_upsert_from": 3, "batch_put_from_multi_buffers": 3,
}


def _config(d: Optional[Dict[str, Any]]) -> Optional[ReplicateConfig]:
    if d is None:
        return None
    c = ReplicateConfig()
    for k, v in d.items():
        if hasattr(c, k):
            setattr(c, k, v)
    return c


class Session:
    """One dummy client's connection and its shared memory."""

    def __init__(self, store: MooncakeDistributedStore, sock: socket.socket) -> None:
        self.store, self.sock = store, sock
        self.regions: Dict[int, Tuple[mmap.mmap, int, int]] = {}  # id -> (mmap, address, size)

    def addr(self, ref: List[int], length: Any = 0) -> int:
        """The address of ``[region, offset]`` here; ``ValueError`` unless ``length`` bytes
        from it lie inside that region (a dummy never reaches memory it did not share)."""
        rid, off = ref
        base, size = self.regions[rid][1], self.regions[rid][2]
        length = int(length)
        if not (0 <= off <= size and 0 <= length <= size - off):
            raise ValueError("a range outside the shared region")
        return base + off

    def share(self, msg: Dict[str, Any]) -> Dict[str, Any]:
        """Maps and registers a dummy's shared memory (``/proc/<pid>/fd/<fd>``)."""
        fd = os.open(f"/proc/{int(msg['pid'])}/fd/{int(msg['fd'])}", os.O_RDWR)
        try:
            m = mmap.mmap(fd, int(msg["size"]), flags=mmap.MAP_SHARED)
        finally:
            os.close(fd)
        view = ctypes.c_char.from_buffer(m)
        base = ctypes.addressof(view)
        del view
        rc = self.store.register_buffer(base, int(msg["size"]))
        if rc != 0:
            m.close()
            return {"rc": rc, "error": "registering the shared memory failed"}
        self.regions[int(msg["id"])] = (m, base, int(msg["size"]))
        return {"rc": 0}

    def call(self, name: str, a: List[Any]) -> Dict[str, Any]:
        """Runs one forwarded call: addresses and values decoded, the result encoded."""
        if name not in _ALLOWED:
            return {"rc": INVALID_PARAMS, "error": f"{name} cannot be called by a dummy client"}
        kind = _ADDR_ARGS.get(name)
        if kind:
            how, i = kind
            if name == "get_into_ranges":  # bases; each fragment must stay inside its region
                ends = [max((d + z for ds, zs in zip(dd, zz) for d, z in zip(ds, zs)), default=0)
                        for dd, zz in zip(a[2], a[4])]
                a[0] = [self.addr(r, e) for r, e in zip(a[0], ends)]
            elif how == "one":
                a[i] = self.addr(a[i], a[i + 1])
            elif how == "list":
                a[i] = [self.addr(r, n) for r, n in zip(a[i], a[i + 1])]
            else:
                a[i] = [[self.addr(r, n) for r, n in zip(rs, ns)] for rs, ns in zip(a[i], a[i + 1])]
        vk = _VALUE_ARGS.get(name)
        if vk == "one":
            a[1] = base64.b64decode(a[1])
        elif vk == "list":
            a[1] = [base64.b64decode(v) for v in a[1]]
        if name in _CONFIG_AT and len(a) > _CONFIG_AT[name]:
            a[_CONFIG_AT[name]] = _config(a[_CONFIG_AT[name]])
        r = getattr(self.store, name)(*a)
        if name == "get":
            r = base64.b64encode(r).decode()
        elif name == "get_batch":
            r = [base64.b64encode(v).decode() for v in r]
        elif name == "get_buffer":
            r = None if r is None else base64.b64encode(r.tobytes()).decode()
        elif name == "batch_get_buffer":
            r = [None if h is None else base64.b64encode(h.tobytes()).decode() for h in r]
        elif name == "batch_get_replica_desc":
            r = {k: [[d.get_memory_descriptor().buffer_descriptor.transport_endpoint,
                      d.get_memory_descriptor().buffer_descriptor.buffer_address,
                      d.get_memory_descriptor().buffer_descriptor.size] for d in v]
                 for k, v in r.items()}
        return {"r": r}

    def serve(self) -> None:
        """Answers the dummy's requests until its connection closes."""
        try:
            while True:
                msg = wire.recv(self.sock)
                op = msg.get("op") if isinstance(msg, dict) else None
                try:
                    if op == "hello":
                        rep = {"rc": 0, "hostname": self.store.get_hostname()}
                    elif op == "share":
                        rep = self.share(msg)
                    elif op == "call":
                        rep = self.call(str(msg.get("m")), list(msg.get("a") or []))
                    else:
                        rep = {"rc": INVALID_PARAMS, "error": f"unknown op {op!r}"}
                except (KeyError, ValueError, TypeError, OSError, IndexError) as e:
                    rep = {"rc": INVALID_PARAMS, "error": f"bad {op} request: {type(e).__name__}: {e}"}
                wire.send(self.sock, rep)
        except wire.WireError:
            pass
        finally:
            self.sock.close()
            for m, base, _n in self.regions.values():
                self.store.unregister_buffer(base)
                try:
                    m.close()
                except BufferError:
                    pass


_ALLOWED = set(_ADDR_ARGS) | set(_VALUE_ARGS) | {
    "get", "get_batch", "get_buffer", "batch_get_buffer", "get_size", "is_exist",
    "batch_is_exist", "remove", "batch_remove", "remove_by_regex", "remove_all",
    "batch_get_session_start", "batch_get_session_end", "batch_get_replica_desc",
    "health_check",
}


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the real client (the command line above); returns the exit status."""
    ap = argparse.ArgumentParser(prog="tidewire-store-server", description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1", help="address to serve dummy clients on")
    ap.add_argument("--port", type=int, default=50052)
    ap.add_argument("--local_hostname", default="127.0.0.1")
    ap.add_argument("--metadata_server", default="P2PHANDSHAKE")
    ap.add_argument("--global_segment_size", default="1gb")
    ap.add_argument("--local_buffer_size", default="64mb")
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--device_name", default="")
    ap.add_argument("--master_server_address", default=_store_setup.DEFAULT_MASTER_ADDRESS)
    ap.add_argument("--enable_offload", default="false",
                    help="a disk tier for this client's objects (mooncake_client's flag)")
    ap.add_argument("--ssd_offload_path", default="",
                    help="the tier's directory (else MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)")
    args = ap.parse_args(argv)
    store = MooncakeDistributedStore()
    try:
        seg = _store_setup.parse_size(args.global_segment_size, "--global_segment_size")
        buf = _store_setup.parse_size(args.local_buffer_size, "--local_buffer_size")
    except ValueError as e:
        ap.error(str(e))
    disk = {}
    if _store_setup.parse_flag(args.enable_offload):
        disk = {"enable_ssd_offload": True, "ssd_offload_path": args.ssd_offload_path}
    try:
        rc = store.setup(args.local_hostname, args.metadata_server, seg, buf, args.protocol,
                         args.device_name, args.master_server_address, **disk)
    except ValueError as e:
        print(f"tidewire-store-server: {e}", file=sys.stderr)
        return 1
    if rc != 0:
        print(f"tidewire-store-server: setup failed ({rc}): {getattr(store, 'last_error', '')}",
              file=sys.stderr)
        return 1
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((args.host, args.port))
    lsock.listen(64)
    stop = threading.Event()

    def on_signal(_sig: int, _frame: Any) -> None:
        stop.set()
        lsock.close()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    host, port = lsock.getsockname()[:2]
    print(json.dumps({"address": f"{host}:{port}", "hostname": store.get_hostname()}),
          flush=True)
    while not stop.is_set():
        try:
            conn, _ = lsock.accept()
        except OSError:
            break
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=Session(store, conn).serve, daemon=True).start()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
