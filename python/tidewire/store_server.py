"""``python -m tidewire.store_server``: the real client that serves dummy store clients
(Mooncake's ``mooncake_client``); see :mod:`tidewire.mooncake_store.server`, where the code is.

    python -m tidewire.store_server --master_server_address 127.0.0.1:50051 \\
        --global_segment_size 4gb --port 50052
"""

import sys

from .mooncake_store.server import Session as Session
from .mooncake_store.server import main as main

if __name__ == "__main__":
    sys.exit(main())
