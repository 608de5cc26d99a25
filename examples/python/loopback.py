"""Two tidewire engines in one process: register, open the peer's segment, write, read back."""

import tidewire

with tidewire.Engine() as a, tidewire.Engine() as b:
    src = bytearray(i % 251 for i in range(1 << 20))
    back = bytearray(len(src))
    dst = bytearray(len(src))
    with a.register(src), a.register(back), b.register(dst) as remote:
        peer = a.open_segment(b.name)  # b's segment name: "127.0.0.1:<rpc port>"
        a.write(peer, src, remote.addr)
        a.read(peer, back, remote.addr)
        assert dst == src and back == src
        print(f"loopback.py: wrote and read back {len(src)} bytes via segment {b.name}")
