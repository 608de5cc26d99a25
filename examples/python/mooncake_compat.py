"""Code written for Mooncake's Python API runs on tidewire after one import change:

    from mooncake.engine import TransferEngine   ->   from tidewire.engine import TransferEngine
"""


from tidewire.engine import TransferEngine

target, initiator = TransferEngine(), TransferEngine()
for e in (target, initiator):
    assert e.initialize("127.0.0.1:0", "P2PHANDSHAKE", "tcp", "") == 0

n = 1 << 20
remote = target.allocate_managed_buffer(n)
local = initiator.allocate_managed_buffer(n)
initiator.write_bytes_to_buffer(local, b"kv-cache" * (n // 8), n)
segment = f"127.0.0.1:{target.get_rpc_port()}"
assert initiator.transfer_sync_write(segment, local, remote, n) == 0
assert target.read_bytes_from_buffer(remote, 16) == b"kv-cachekv-cache"
assert initiator.batch_transfer_sync_read(segment, [local, local + 4096], [remote, remote + 4096],
                                          [4096, 4096]) == 0
print(f"mooncake_compat.py: {n} bytes written to {segment}, batch read OK")
