"""``MooncakeDistributedStore.setup``'s arguments, as Mooncake takes them: seven positional
arguments and Mooncake's keywords, or one dict (whose values may be strings, as LMCache passes
them: ``"1gb"`` sizes, ``"true"`` flags). Unknown keywords raise ``TypeError`` as Mooncake's
binding does; unknown dict keys are ignored, as Mooncake ignores them."""

import os
import re
from typing import Any, Dict, Sequence

_MiB = 1 << 20

#: Mooncake's positional order.
POSITIONAL = (
    "local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
    "protocol", "rdma_devices", "master_server_addr",
)
#: Mooncake's keywords after the positional ones, with their defaults.
KEYWORDS = {
    "engine": None,
    "enable_ssd_offload": False,
    "ssd_offload_path": "",
    "tenant_id": "default",
    "enable_client_http_server": False,
    "client_http_port": 9300,
}
#: Dict keys beyond those: Mooncake's ``ipc_socket_path``, and LMCache's documented spellings
#: (``master_server_address``, ``device_name``), which Mooncake ignores and tidewire honours.
DICT_ALIASES = {"master_server_address": "master_server_addr", "device_name": "rdma_devices"}
#: The master a client dials when none is given (the Rust client's `DEFAULT_MASTER_ADDRESS`;
#: a test compares the two).
DEFAULT_MASTER_ADDRESS = "127.0.0.1:50051"

DICT_DEFAULTS = {
    "local_hostname": "",
    "metadata_server": "P2PHANDSHAKE",
    "global_segment_size": 16 * _MiB,
    "local_buffer_size": 16 * _MiB,
    "protocol": "tcp",
    "rdma_devices": "",
    "master_server_addr": DEFAULT_MASTER_ADDRESS,
}

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(v: Any, name: str) -> int:
    """A size in bytes from an int or a string such as ``"1gb"``, ``"64 MiB"``, ``"4096"``
    (binary units). Raises ``ValueError`` naming ``name`` otherwise."""
    if isinstance(v, bool):
        raise ValueError(f"{name} must be a size, not a bool")
    if isinstance(v, int):
        n = v
    elif isinstance(v, str):
        m = _SIZE.match(v)
        if not m:
            raise ValueError(f"{name}={v!r} is not a size (examples: 4096, '64mb', '1gb')")
        n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    else:
        try:
            n = int(v.__index__())
        except AttributeError:
            raise ValueError(f"{name} must be a size, not {type(v).__name__}") from None
    if not 0 <= n < 1 << 63:
        raise ValueError(f"{name}={v!r} is out of range")
    return n


def parse_flag(v: Any) -> bool:
    """A flag from a bool or a string such as ``"true"``, ``"1"``, ``"on"``."""
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


def from_call(args: Sequence[Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """``setup``'s arguments as one dict of Mooncake's names (sizes not yet parsed). Raises
    ``TypeError`` for arguments Mooncake's binding refuses."""
    if len(args) == 1 and not kwargs and isinstance(args[0], dict):
        given: Dict[str, Any] = dict(DICT_DEFAULTS)
        for k, v in args[0].items():
            name: Any = DICT_ALIASES.get(k, k)
            given[name] = v
        return given
    if len(args) > len(POSITIONAL) + len(KEYWORDS):
        raise TypeError(f"setup() takes at most {len(POSITIONAL) + len(KEYWORDS)} arguments")
    names = POSITIONAL + tuple(KEYWORDS)
    cfg: Dict[str, Any] = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise TypeError(f"setup() got an unexpected keyword argument {k!r}")
        if k in cfg:
            raise TypeError(f"setup() got multiple values for argument {k!r}")
        cfg[k] = v
    missing = [k for k in POSITIONAL if k not in cfg]
    if missing:
        raise TypeError(f"setup() missing required arguments: {', '.join(missing)}")
    for k, d in KEYWORDS.items():
        cfg.setdefault(k, d)
    return cfg


def offload_path(cfg: Dict[str, Any]) -> str:
    """The disk tier's directory for a setup call, or ``""`` for none: with
    ``enable_ssd_offload`` true, ``ssd_offload_path`` or else ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH``
    (the keyword wins, as in Mooncake). Raises ``ValueError`` (Mooncake's message) when the tier
    is asked for with no path at all; the path itself is checked by the library."""
    if not parse_flag(cfg.get("enable_ssd_offload", False)):
        return ""
    path = str(cfg.get("ssd_offload_path") or "") or os.environ.get(
        "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "")
    if not path:
        raise ValueError("Invalid FileStorage configuration")
    return path
