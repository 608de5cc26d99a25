"""``python -m tidewire``: the version, the library in use and the transports this host can
use (see :mod:`tidewire.host`). Exits 1 when the library cannot be loaded."""

import sys

from ._ffi import LibraryNotFound


def main() -> int:
    """Prints the report; 0, or 1 when the library cannot be loaded."""
    from .host import report

    try:
        print(report())
    except LibraryNotFound as e:
        print(f"tidewire: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
