#!/usr/bin/env python3
"""Checks that the documentation stays true to the repository.

Reads README.md and every Markdown file under docs/ and fails when:

- a repository path it names does not exist. Paths are found in links (``[text](docs/store.md)``,
  resolved from the file that holds the link), in inline code (```src/net/reactor.rs```) and in
  fenced code blocks (``scripts/setup_mooncake_venv.sh``). Inline code and code blocks name paths
  from the repository root; a word counts as a path when its first component is an entry at the
  top of the repository (``src/``, ``docs/``, ``Makefile`` ...; build outputs such as ``target/``
  and virtual environments do not count), or when it looks like a source file with a folder
  (``engine/batch.rs``), which must then be written from the root. ``*`` and ``?`` are globs
  that must match something; a ``:LINE`` suffix is ignored;
- a link points at a heading (``#anchor``) that its Markdown target does not have;
- a link or a path points outside the repository (``../shared/``, ``/home/...``, ``file://``);
- README.md is longer than MAX_README_LINES lines.

    python3 scripts/check_docs.py [--root DIR]

Exit status 0 when all is well, 1 with one line per problem otherwise. Python 3 standard
library only.
"""

import argparse
import glob
import os
import re
import sys
from pathlib import Path

MAX_README_LINES = 200

# Top-level names that are never repository paths: build outputs and local environments.
NOT_ROOTS = {".git", "target", "build", "__pycache__"}

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
FENCE = re.compile(r"^\s{0,3}(```+|~~~+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
# A source file named with a folder, e.g. transport/backend.rs.
SOURCE_LIKE = re.compile(
    r"^[\w.-]+(?:/[\w.*?-]+)+\.(?:rs|py|sh|c|h|cpp|md|toml|txt|json|yml|yaml|supp)$"
)
TOKEN_TRIM = "\"'`.,;:()[]{}<>"


def doc_files(root: Path) -> list[Path]:
    """README.md and the Markdown files under docs/."""
    files = [root / "README.md"] if (root / "README.md").is_file() else []
    docs = root / "docs"
    if docs.is_dir():
        files += sorted(p for p in docs.rglob("*.md") if p.is_file())
    return files


def repo_roots(root: Path) -> set:
    """Names at the top of the repository that start a repository path."""
    return {
        n
        for n in os.listdir(root)
        if n not in NOT_ROOTS and not n.startswith(".venv") and not n.endswith(".egg-info")
    }


def slug(text: str) -> str:
    """A heading's anchor as GitHub writes it."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def split_blocks(text: str):
    """Yields (line number, line, in_fence) for every line of a Markdown text."""
    fence = None
    for no, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark[0] * 3
                yield no, line, True
                continue
            if mark.startswith(fence):
                fence = None
                yield no, line, True
                continue
        yield no, line, fence is not None


def anchors(path: Path, cache: dict) -> set:
    """The anchors a Markdown file offers: its headings (GitHub slugs) and <a id|name>."""
    if path in cache:
        return cache[path]
    found = set()
    seen: dict = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        text = ""
    for _, line, in_fence in split_blocks(text):
        if in_fence:
            continue
        found.update(HTML_ANCHOR.findall(line))
        m = HEADING.match(line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
    cache[path] = found
    return found


def inside(root: Path, p: Path) -> bool:
    try:
        p.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def exists(root: Path, rel: str) -> bool:
    """Whether a path (relative to root, globs allowed) names something in the repository."""
    if any(c in rel for c in "*?"):
        return bool(glob.glob(str(root / rel)))
    return (root / rel).exists()


class Checker:
    def __init__(self, root: Path):
        self.root = root
        self.roots = repo_roots(root)
        self.problems: list = []
        self.anchor_cache: dict = {}

    def problem(self, doc: Path, no: int, msg: str):
        self.problems.append(f"{doc.relative_to(self.root)}:{no}: {msg}")

    def check_link(self, doc: Path, no: int, target: str):
        if not target or SCHEME.match(target) and not target.lower().startswith("file:"):
            return  # an empty link or a web address
        if target.lower().startswith("file:") or target.startswith("/"):
            self.problem(doc, no, f"link points outside the repository: {target}")
            return
        path, _, frag = target.partition("#")
        path = path.split("?", 1)[0]
        dest = (doc.parent / path) if path else doc
        if not inside(self.root, dest):
            self.problem(doc, no, f"link points outside the repository: {target}")
            return
        if not dest.exists():
            self.problem(doc, no, f"link to a missing path: {target}")
            return
        if frag and dest.is_file() and dest.suffix == ".md":
            if frag not in anchors(dest, self.anchor_cache):
                self.problem(doc, no, f"link to a missing heading: {target}")

    def check_token(self, doc: Path, no: int, token: str):
        token = token.lstrip("\"'`([{<").rstrip(TOKEN_TRIM)
        token = re.sub(r":\d+(?:-\d+)?$", "", token)  # path:line
        if not token or SCHEME.match(token) or token.startswith("/"):
            return  # a web address, or a path on the host (/proc, /opt/...)
        if token.startswith("../"):
            self.problem(doc, no, f"path points outside the repository: {token}")
            return
        rel = token[2:] if token.startswith("./") else token
        first = rel.split("/", 1)[0]
        if first in self.roots and ("/" in rel or token.startswith("./")):
            if not inside(self.root, self.root / rel.replace("*", "x").replace("?", "x")):
                self.problem(doc, no, f"path points outside the repository: {token}")
            elif not exists(self.root, rel):
                self.problem(doc, no, f"missing repository path: {token}")
        elif SOURCE_LIKE.match(rel) and not exists(self.root, rel):
            self.problem(doc, no, f"not a repository path (write it from the root): {token}")

    def check_doc(self, doc: Path):
        text = doc.read_text(encoding="utf-8")
        for no, line, in_fence in split_blocks(text):
            if in_fence:
                if not FENCE.match(line):
                    for token in line.split():
                        for part in token.split("="):  # VAR=path
                            self.check_token(doc, no, part)
                continue
            for target in LINK.findall(line):
                self.check_link(doc, no, target)
            m = REF_DEF.match(line)
            if m:
                self.check_link(doc, no, m.group(1))
            for _, code in INLINE_CODE.findall(line):
                for token in code.split():
                    self.check_token(doc, no, token)

    def run(self) -> list:
        readme = self.root / "README.md"
        if readme.is_file():
            n = len(readme.read_text(encoding="utf-8").splitlines())
            if n > MAX_README_LINES:
                self.problems.append(
                    f"README.md: {n} lines, more than {MAX_README_LINES}: move detail into docs/"
                )
        for doc in doc_files(self.root):
            self.check_doc(doc)
        return self.problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    problems = Checker(root).run()
    for p in problems:
        print(p)
    if problems:
        print(f"check_docs: {len(problems)} problem(s)")
        return 1
    print(f"check_docs: {len(doc_files(root))} documents, every path and link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
