#!/usr/bin/env python3
"""Line-delimited JSON driver around the real Mooncake Transfer Engine.

Run it with the Python of the venv made by scripts/setup_mooncake_venv.sh.
Mooncake's listeners bind every address, so run it inside a private network
namespace, e.g.:

    unshare -n bash -c 'ip link set lo up; exec .venv-mooncake/bin/python \
        tests/interop/mooncake_peer.py --metadata P2PHANDSHAKE'

Protocol: one JSON object per line on stdin, one JSON reply per line on stdout.
The first stdout line is {"ready": true, "segment": ..., "rpc_port": N, "pid": P}
(or {"ready": false, "error": ...} and exit code 1). Everything else Mooncake
prints (glog) goes to stderr; native writes to fd 1 are redirected to stderr
too, so stdout carries only protocol lines. A reply echoes the "id" field of
its command when one was given.

Commands (see the replies in the handlers below):
  alloc {size, fill?}                  mmap + fill + register_memory
  free {addr}                          unregister_memory + munmap
  pattern {addr, size, seed}           byte i = (i*31 + seed*7 + 11) & 0xff
  fill_random {addr, size, seed}       random.Random(seed).randbytes(size)
  fill {addr, size, value}             memset
  digest {addr, size}                  sha256 of local memory
  check_pattern {addr, size, seed}
  write|read {target, local, remote, length}
  batch_write|batch_read {target, locals, remotes, lengths}
  notify {target, name, msg, local, remote, length}
                                       transfer_sync WRITE with TransferNotify
  get_notifies
  first_buffer {segment}               get_first_buffer_address
  probe {segment}                      send_probe
  unregister {addr}
  ping
  quit

--impl tidewire drives tidewire.engine.TransferEngine (same methods) instead, so the
same driver runs a tidewire engine in its own process.
"""

import argparse
import ctypes
import ctypes.util
import hashlib
import json
import os
import random
import sys
import time
import traceback

# --- keep stdout clean ------------------------------------------------------
# Save the real stdout for protocol lines, then point fd 1 at stderr so that
# anything native code prints cannot corrupt the protocol stream.
_PROTO_FD = os.dup(1)
os.dup2(2, 1)
_proto = os.fdopen(_PROTO_FD, "w", buffering=1, encoding="utf-8")
sys.stdout = sys.stderr


def emit(obj):
    _proto.write(json.dumps(obj, separators=(",", ":")) + "\n")
    _proto.flush()


# --- raw memory via libc mmap ------------------------------------------------
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                       ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PROT_READ, PROT_WRITE = 1, 2
MAP_PRIVATE, MAP_ANONYMOUS = 0x02, 0x20
MAP_FAILED = ctypes.c_void_p(-1).value


class CommandError(Exception):
    pass


class Peer:
    def __init__(self, engine, mod):
        self.engine = engine
        self.mod = mod
        self.buffers = {}  # addr -> size (mmap'ed, still mapped)
        self.quit = False

    # -- helpers ---------------------------------------------------------------
    @staticmethod
    def _int(cmd, key, minimum=0):
        if key not in cmd:
            raise CommandError("missing field %r" % key)
        v = cmd[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise CommandError("field %r must be an integer" % key)
        if v < minimum:
            raise CommandError("field %r must be >= %d" % (key, minimum))
        return v

    @staticmethod
    def _str(cmd, key):
        v = cmd.get(key)
        if not isinstance(v, str):
            raise CommandError("field %r must be a string" % key)
        return v

    @staticmethod
    def _int_list(cmd, key):
        v = cmd.get(key)
        if not isinstance(v, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
            raise CommandError("field %r must be a list of non-negative integers" % key)
        return v

    def _check_local(self, addr, size):
        """Refuse to touch memory this peer did not allocate (would segfault)."""
        for base, length in self.buffers.items():
            if base <= addr and addr + size <= base + length:
                return
        raise CommandError(
            "local range [0x%x, +%d) is not inside a buffer allocated by this peer"
            % (addr, size))

    @staticmethod
    def _pattern(size, seed):
        block = bytes(((i * 31 + seed * 7 + 11) & 0xFF) for i in range(256))
        reps, rest = divmod(size, 256)
        return block * reps + block[:rest]

    # -- commands --------------------------------------------------------------
    def cmd_ping(self, cmd):
        return {"ok": True}

    def cmd_quit(self, cmd):
        self.quit = True
        return {"ok": True}

    def cmd_alloc(self, cmd):
        size = self._int(cmd, "size", 1)
        fill = cmd.get("fill", 0)
        if isinstance(fill, bool) or not isinstance(fill, int) or not 0 <= fill <= 255:
            raise CommandError("field 'fill' must be an integer 0..255")
        addr = _libc.mmap(None, size, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if addr is None or addr == MAP_FAILED:
            raise CommandError("mmap(%d) failed: %s" % (size, os.strerror(ctypes.get_errno())))
        ctypes.memset(addr, fill, size)
        rc = self.engine.register_memory(addr, size)
        if rc != 0:
            _libc.munmap(addr, size)
            return {"ok": False, "error": "register_memory failed", "rc": rc}
        self.buffers[addr] = size
        return {"ok": True, "addr": addr, "rc": rc}

    def cmd_free(self, cmd):
        addr = self._int(cmd, "addr")
        if addr not in self.buffers:
            raise CommandError("0x%x is not a buffer allocated by this peer" % addr)
        rc = self.engine.unregister_memory(addr)
        size = self.buffers.pop(addr)
        _libc.munmap(addr, size)
        return {"ok": True, "rc": rc}

    def cmd_unregister(self, cmd):
        addr = self._int(cmd, "addr")
        return {"ok": True, "rc": self.engine.unregister_memory(addr)}

    def cmd_pattern(self, cmd):
        addr, size = self._int(cmd, "addr"), self._int(cmd, "size")
        seed = self._int(cmd, "seed", -(1 << 62))
        self._check_local(addr, size)
        ctypes.memmove(addr, self._pattern(size, seed), size)
        return {"ok": True}

    def cmd_fill_random(self, cmd):
        addr, size = self._int(cmd, "addr"), self._int(cmd, "size")
        seed = self._int(cmd, "seed", -(1 << 62))
        self._check_local(addr, size)
        ctypes.memmove(addr, random.Random(seed).randbytes(size), size)
        return {"ok": True}

    def cmd_fill(self, cmd):
        addr, size = self._int(cmd, "addr"), self._int(cmd, "size")
        value = self._int(cmd, "value")
        if value > 255:
            raise CommandError("field 'value' must be 0..255")
        self._check_local(addr, size)
        ctypes.memset(addr, value, size)
        return {"ok": True}

    def cmd_digest(self, cmd):
        addr, size = self._int(cmd, "addr"), self._int(cmd, "size")
        self._check_local(addr, size)
        return {"ok": True, "sha256": hashlib.sha256(ctypes.string_at(addr, size)).hexdigest()}

    def cmd_check_pattern(self, cmd):
        addr, size = self._int(cmd, "addr"), self._int(cmd, "size")
        seed = self._int(cmd, "seed", -(1 << 62))
        self._check_local(addr, size)
        data = ctypes.string_at(addr, size)
        expected = self._pattern(size, seed)
        reply = {"ok": True, "match": data == expected}
        if data != expected:
            reply["first_mismatch"] = next(i for i in range(size) if data[i] != expected[i])
        return reply

    def _single(self, cmd, fn):
        target = self._str(cmd, "target")
        local, remote = self._int(cmd, "local"), self._int(cmd, "remote")
        length = self._int(cmd, "length")
        self._check_local(local, length)
        t0 = time.monotonic()
        rc = fn(target, local, remote, length)
        return {"ok": True, "rc": rc, "elapsed_s": round(time.monotonic() - t0, 6)}

    def cmd_write(self, cmd):
        return self._single(cmd, self.engine.transfer_sync_write)

    def cmd_read(self, cmd):
        return self._single(cmd, self.engine.transfer_sync_read)

    def _batch(self, cmd, fn):
        target = self._str(cmd, "target")
        locals_ = self._int_list(cmd, "locals")
        remotes = self._int_list(cmd, "remotes")
        lengths = self._int_list(cmd, "lengths")
        if not len(locals_) == len(remotes) == len(lengths):
            raise CommandError("locals, remotes and lengths must have the same length")
        for a, n in zip(locals_, lengths):
            self._check_local(a, n)
        t0 = time.monotonic()
        rc = fn(target, locals_, remotes, lengths)
        return {"ok": True, "rc": rc, "elapsed_s": round(time.monotonic() - t0, 6)}

    def cmd_batch_write(self, cmd):
        return self._batch(cmd, self.engine.batch_transfer_sync_write)

    def cmd_batch_read(self, cmd):
        return self._batch(cmd, self.engine.batch_transfer_sync_read)

    def cmd_notify(self, cmd):
        target = self._str(cmd, "target")
        name, msg = self._str(cmd, "name"), self._str(cmd, "msg")
        local, remote = self._int(cmd, "local"), self._int(cmd, "remote")
        length = self._int(cmd, "length")
        self._check_local(local, length)
        notify = self.mod.TransferNotify(name, msg)
        t0 = time.monotonic()
        rc = self.engine.transfer_sync(target, local, remote, length,
                                       self.mod.TransferOpcode.Write, notify)
        return {"ok": True, "rc": rc, "elapsed_s": round(time.monotonic() - t0, 6)}

    def cmd_get_notifies(self, cmd):
        return {"ok": True,
                "notifies": [{"name": n.name, "msg": n.msg} for n in self.engine.get_notifies()]}

    def cmd_first_buffer(self, cmd):
        return {"ok": True,
                "addr": self.engine.get_first_buffer_address(self._str(cmd, "segment"))}

    def cmd_probe(self, cmd):
        return {"ok": True, "rc": self.engine.send_probe(self._str(cmd, "segment"))}

    def handle(self, line):
        try:
            cmd = json.loads(line)
        except ValueError as e:
            return {"ok": False, "error": "bad json: %s" % e}
        if not isinstance(cmd, dict):
            return {"ok": False, "error": "command must be a JSON object"}
        reply = self._dispatch(cmd)
        if "id" in cmd:
            reply["id"] = cmd["id"]
        return reply

    def _dispatch(self, cmd):
        name = cmd.get("cmd")
        fn = getattr(self, "cmd_" + name, None) if isinstance(name, str) else None
        if fn is None:
            return {"ok": False, "error": "unknown command: %r" % (name,)}
        try:
            return fn(cmd)
        except CommandError as e:
            return {"ok": False, "error": str(e)}
        except Exception as e:  # never die on a bad command
            traceback.print_exc(file=sys.stderr)
            return {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--metadata", default="P2PHANDSHAKE",
                    help="P2PHANDSHAKE or http://127.0.0.1:PORT/metadata")
    ap.add_argument("--name", default=None,
                    help="local_hostname (default: 127.0.0.1:0 in P2P mode; "
                         "required otherwise)")
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--device", default="")
    ap.add_argument("--impl", choices=("mooncake", "tidewire"), default="mooncake",
                    help="engine module: mooncake.engine or tidewire.engine")
    ap.add_argument("--bind-address", default="127.0.0.1",
                    help="with a metadata server: IP published in rpc_meta, via "
                         "MC_TCP_BIND_ADDRESS unless that is already set (Mooncake "
                         "otherwise looks for a non-loopback LAN address and fails "
                         "in a loopback-only namespace)")
    args = ap.parse_args()

    p2p = args.metadata == "P2PHANDSHAKE"
    local_hostname = args.name or ("127.0.0.1:0" if p2p else None)
    if local_hostname is None:
        emit({"ready": False, "error": "--name is required with a metadata server"})
        return 1

    if not p2p and args.bind_address:
        os.environ.setdefault("MC_TCP_BIND_ADDRESS", args.bind_address)

    try:
        if args.impl == "tidewire":
            import tidewire.engine as mod
        else:
            import mooncake.engine as mod
        engine = mod.TransferEngine()
        rc = engine.initialize(local_hostname, args.metadata, args.protocol, args.device)
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        emit({"ready": False, "error": "%s: %s" % (type(e).__name__, e)})
        return 1
    if rc != 0:
        emit({"ready": False, "error": "initialize failed", "rc": rc})
        return 1

    rpc_port = engine.get_rpc_port()
    if p2p:
        host, _, port = local_hostname.rpartition(":")
        if not host or not port.isdigit():
            host, port = local_hostname, "0"
        # With port 0 Mooncake picks the RPC port and names the segment after it.
        segment = "%s:%d" % (host, rpc_port) if port == "0" else local_hostname
    else:
        segment = local_hostname
    emit({"ready": True, "segment": segment, "rpc_port": rpc_port, "pid": os.getpid()})

    peer = Peer(engine, mod)
    exit_code = 0
    for line in iter(sys.stdin.readline, ""):
        line = line.strip()
        if not line:
            continue
        emit(peer.handle(line))
        if peer.quit:
            break

    # Orderly shutdown: unregister buffers, drop the engine (removes its
    # metadata), then exit without running other native destructors.
    try:
        for addr in list(peer.buffers):
            engine.unregister_memory(addr)
        del peer
        del engine
    except Exception:
        traceback.print_exc(file=sys.stderr)
        exit_code = 1
    sys.stderr.flush()
    _proto.flush()
    os._exit(exit_code)


if __name__ == "__main__":
    sys.exit(main())
