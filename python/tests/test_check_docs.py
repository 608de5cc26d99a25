"""scripts/check_docs.py on small repository trees built here: a clean tree passes, and each
kind of problem it exists to catch (a missing path, a missing heading, a path outside the
repository, a long README) is reported with the file and line."""

import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "check_docs.py")

_spec = importlib.util.spec_from_file_location("check_docs", SCRIPT)
check_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_docs)

README = """# demo

Run `scripts/run.sh` and read [the store](docs/store.md#keys).

```sh
python3 scripts/run.sh --flag
```
"""

STORE = """# Store

## Keys

See `src/lib.rs`, [the README](../README.md) and `target/release/` (a build output).
"""


def tree(tmp_path, readme=README, store=STORE):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "run.sh").write_text("#!/bin/sh\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "lib.rs").write_text("\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "docs" / "store.md").write_text(store)
    return tmp_path


def problems(root):
    return check_docs.Checker(root).run()


def test_clean_tree_passes(tmp_path):
    assert problems(tree(tmp_path)) == []


def test_missing_path_in_code_is_reported(tmp_path):
    root = tree(tmp_path, store=STORE + "\nThe reactor is `src/net/reactor.rs`.\n")
    assert problems(root) == ["docs/store.md:7: missing repository path: src/net/reactor.rs"]


def test_missing_link_and_heading_are_reported(tmp_path):
    readme = README + "\n[gone](docs/gone.md) and [no such part](docs/store.md#values)\n"
    found = problems(tree(tmp_path, readme=readme))
    assert found == [
        "README.md:9: link to a missing path: docs/gone.md",
        "README.md:9: link to a missing heading: docs/store.md#values",
    ]


def test_missing_script_in_code_block_is_reported(tmp_path):
    readme = README.replace("scripts/run.sh --flag", "scripts/setup_gone.sh")
    assert problems(tree(tmp_path, readme=readme)) == [
        "README.md:6: missing repository path: scripts/setup_gone.sh"
    ]


def test_paths_outside_the_repository_are_reported(tmp_path):
    store = STORE + "\nRun `../shared/bench/run.sh`; see [there](../../elsewhere.md).\n"
    found = problems(tree(tmp_path, store=store))
    assert found == [
        "docs/store.md:7: link points outside the repository: ../../elsewhere.md",
        "docs/store.md:7: path points outside the repository: ../shared/bench/run.sh",
    ]


def test_long_readme_is_reported(tmp_path):
    readme = README + "line\n" * check_docs.MAX_README_LINES
    found = problems(tree(tmp_path, readme=readme))
    assert len(found) == 1 and found[0].startswith("README.md: ")


@pytest.mark.parametrize("broken", [False, True])
def test_command_line_exit_status(tmp_path, broken):
    root = tree(tmp_path, store=STORE + ("\n`src/gone.rs`\n" if broken else ""))
    r = subprocess.run([sys.executable, SCRIPT, "--root", str(root)],
                       capture_output=True, text=True)
    assert r.returncode == (1 if broken else 0), r.stdout + r.stderr
    assert ("src/gone.rs" in r.stdout) == broken
