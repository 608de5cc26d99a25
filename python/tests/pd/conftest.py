"""The P/D tests run through ``make pd-test`` (``pytest python/tests/pd`` or a file in it): a
wider run such as ``make py-tests`` (``pytest python/tests``) leaves them out, as it leaves out
python/tests/serving, since each starts two serving-stack processes."""

import os
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent


def _named_explicitly(config: Any) -> bool:
    """Whether a command-line path points into this folder (or is it)."""
    for arg in config.args:
        path = Path(os.path.abspath(str(arg).split("::")[0]))
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: Any) -> Optional[bool]:
    """Leaves this folder's files out unless the command line names it."""
    if not _named_explicitly(config):
        return True
    return None
