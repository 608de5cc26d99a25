"""The layer checker finds what it is for: a circle between the files of one folder, however the
paths are written (crate paths, ``super::``, use trees, re-exports through ``mod.rs``), and
nothing where the imports run one way."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import check_layers  # noqa: E402


def crate(tmp: Path, files: dict) -> Path:
    for rel, text in files.items():
        p = tmp / "src" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp


def test_a_circle_inside_a_folder_is_reported(tmp_path: Path) -> None:
    root = crate(tmp_path, {
        "lib.rs": "mod kv;\n",
        "kv/mod.rs": "mod client;\nmod flows;\npub use client::Shared;\n",
        # client names flows through a use tree; flows names client through the re-export.
        "kv/client.rs": "use crate::kv::{flows::{put, get}};\npub struct Shared;\n",
        "kv/flows.rs": "use super::Shared;\npub fn put(_: &Shared) {}\npub fn get() {}\n",
    })
    errors = check_layers.folder_circles(root, ("src",))
    assert len(errors) == 1 and "src/kv/" in errors[0], errors
    assert "client -> flows" in errors[0] and "flows -> client" in errors[0], errors


def test_one_way_imports_and_tests_and_comments_are_not_circles(tmp_path: Path) -> None:
    root = crate(tmp_path, {
        "lib.rs": "mod kv;\n",
        "kv/mod.rs": "mod client;\nmod keys;\n",
        "kv/client.rs": "use super::keys::key_ok;\n",
        # A doc comment, a string and a test module naming client are not imports.
        "kv/keys.rs": (
            "//! See [`super::client::StoreClient`].\n"
            "pub fn key_ok() -> &'static str { \"crate::kv::client\" }\n"
            "#[cfg(test)]\nmod tests {\n    use crate::kv::client;\n}\n"
        ),
    })
    assert check_layers.folder_circles(root, ("src",)) == []


def test_the_repository_has_no_circle_outside_the_allowed_folders() -> None:
    root = Path(__file__).resolve().parents[2]
    assert check_layers.folder_circles(root) == []
