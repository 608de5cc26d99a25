"""The import graph between sibling modules inside every folder of a Rust crate, for
``check_layers.py``: which file of a folder names which other file (or subfolder) of the same
folder, however the path is written (``crate::a::b``, ``super::b``, ``self::b``, a ``use`` tree
with braces, or a name the folder's ``mod.rs`` re-exports from one of its files).

A folder's modules must not import each other in a circle: the files of a folder are read top
down like the layers of the crate. Python 3 standard library only.
"""

import re
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
USE = re.compile(r"\buse\s+([^;]*);", re.S)
# A path in code (outside `use`): crate::a::b, self::a, super::super::a::b.
CODE_PATH = re.compile(rf"\b((?:crate|self|super)(?:::(?:super|{IDENT}))+)")
REEXPORT = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]*);", re.S)


def module_path(src: Path, path: Path) -> list[str]:
    """The module path of a file: src/store/flows.rs -> [store, flows]; .../mod.rs -> folder."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return parts


def expand_use(tree: str) -> list[str]:
    """Every path a ``use`` tree names: ``a::{b, c::{d, e}}`` -> a::b, a::c::d, a::c::e."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)  # `x as y` names x
    tree = re.sub(r"\s+", "", tree)
    out: list[str] = []

    def walk(prefix: str, t: str) -> None:
        i = t.find("{")
        if i < 0:
            for item in split_top(t):
                out.append(prefix + item)
            return
        head, body = t[:i], t[i + 1 : t.rfind("}")]
        for item in split_top(body):
            walk(prefix + head, item)

    walk("", tree)
    return [p.rstrip(":") for p in out if p]


def split_top(s: str) -> list[str]:
    """Splits at commas outside braces."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts


def resolve(path: str, here: list[str], children: set[str]) -> list[str] | None:
    """The absolute module path of ``path`` written in module ``here`` (None: outside the crate).
    A bare first segment is a child module of ``here`` when one has that name (uniform paths)."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        return segs[1:]
    if segs[0] == "self":
        return here + segs[1:]
    if segs[0] == "super":
        base = list(here)
        while segs and segs[0] == "super":
            if not base:
                return None
            base.pop()
            segs = segs[1:]
        return base + segs
    if segs[0] in children:
        return here + segs
    return None


def clean(text: str) -> str:
    """The code of a Rust file without comments, and with every string and char literal
    emptied (so paths written in them, or in docs, are not imports)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        two = text[i : i + 2]
        if two == "//":
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif two == "/*":
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:]) and not re.match(r"\w", text[i - 1 : i] or " "):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            out.append('""')
            i = n if end < 0 else end + 1 + len(hashes)
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            out.append('""')
            i += 1
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", text[i:]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return strip_test_modules("".join(out))


def strip_test_modules(code: str) -> str:
    """Drops inline `#[cfg(test)] mod name { ... }` blocks: a test may reach anything, and its
    `super::` means another module than the file's."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", code)
        if not m:
            return code
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        code = code[: m.start()] + code[i:]


def sibling_graphs(src: Path) -> dict[tuple[str, ...], dict[str, set[tuple[str, str]]]]:
    """For every folder (module path), the edges between its child modules: graph[folder][a]
    holds (b, file) for each child b that a file of child a names."""
    files = sorted(p for p in src.rglob("*.rs") if "bin" not in p.relative_to(src).parts[:1])
    mods: dict[tuple[str, ...], Path] = {}
    for p in files:
        mods[tuple(module_path(src, p))] = p
    children: dict[tuple[str, ...], set[str]] = {}
    for m in mods:
        if m:
            children.setdefault(m[:-1], set()).add(m[-1])
    # Names a folder's mod.rs re-exports from one of its children: `pub use x::Name`.
    reexports: dict[tuple[str, ...], dict[str, str]] = {}
    for m, p in mods.items():
        kids = children.get(m, set())
        if not kids:
            continue
        table: dict[str, str] = {}
        for tree in REEXPORT.findall(clean(p.read_text())):
            for path in expand_use(tree):
                segs = path.split("::")
                if segs[0] == "self":
                    segs = segs[1:]
                if len(segs) >= 2 and segs[0] in kids:
                    table[segs[-1]] = segs[0]
        reexports[m] = table

    graphs: dict[tuple[str, ...], dict[str, set[tuple[str, str]]]] = {}
    for m, p in mods.items():
        text = clean(p.read_text())
        here = list(m)
        kids = children.get(m, set())
        paths = [q for tree in USE.findall(text) for q in expand_use(tree)]
        paths += CODE_PATH.findall(USE.sub("", text))
        for raw in paths:
            target = resolve(raw, here, kids)
            if not target:
                continue
            # Every folder that holds both this file and the target: one sibling edge each.
            for depth in range(min(len(here), len(target))):
                if here[:depth] != target[:depth]:
                    break
                folder = tuple(here[:depth])
                a = here[depth]
                b = target[depth]
                if b not in children.get(folder, set()):
                    b = reexports.get(folder, {}).get(b, "")
                if b and a != b:
                    graphs.setdefault(folder, {}).setdefault(a, set()).add((b, str(p)))
                if here[depth] != target[depth]:
                    break
    return graphs
