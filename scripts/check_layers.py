#!/usr/bin/env python3
"""Checks the layering of src/ and the size of every source file.

Reads the layer list from src/README.md (the lines of its ``layers`` block, top to bottom; one
layer per line, several modules on a line share a layer) and every ``crate::<module>`` path in
the Rust files under src/ (``use crate::...`` lines and paths in code alike). It fails when:

- a module imports a module of its own layer or of a layer above it (an upward import);
- the top-level modules import each other in a circle;
- a top-level module of src/ is missing from the layer list;
- inside any folder of src/ or master/src/, the files (and subfolders) import each other in a
  circle, however the path is written (see ``module_graph.py``): a folder reads top down too;
- a Rust file under src/ or master/src/ (the master's crate) or a Python file under python/ has
  more than MAX_LINES lines (files over WARN_LINES are listed as a warning: split by concept,
  never one class or type across files to stay under a number).

ALLOWED_EDGES, ALLOWED_CIRCLES and ALLOWED_LONG are temporary: each entry names why it is there, and the lead
empties them once the work they wait for is merged. Python 3 standard library only.
"""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import module_graph  # noqa: E402  (beside this script)

MAX_LINES = 1000
WARN_LINES = 600

# Imports that stay until the change named beside them lands.
ALLOWED_EDGES: dict = {}

# Folders whose files still import each other in a circle, until the change named lands.
ALLOWED_CIRCLES: dict = {}

# Files over MAX_LINES that another engineer is splitting now.
ALLOWED_LONG: dict = {}

CRATE_PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
# `use crate::{a, b::c}` names several modules at once.
CRATE_GROUP = re.compile(r"\bcrate::\{([^}]*)\}", re.S)
# `super::super::x` from deep enough reaches the crate root: then `x` is a top-level module too.
SUPER_PATH = re.compile(r"(?<![:\w])((?:super::)+)([a-z_][a-z0-9_]*)")
LINE_COMMENT = re.compile(r"//.*")


def read_layers(readme: Path) -> list[list[str]]:
    """The module names of each layer, top first, from the ```layers block of src/README.md."""
    text = readme.read_text()
    m = re.search(r"```layers\n(.*?)```", text, re.S)
    if not m:
        sys.exit(f"{readme}: no ```layers block")
    layers = []
    for line in m.group(1).splitlines():
        # A layer line starts at the left edge: its modules (`name/` or `name.rs`), then `--` and
        # what they hold; indented lines and `|` go on describing the layer above.
        if not re.match(r"[a-z_]", line):
            continue
        names = [t.rstrip("/").removesuffix(".rs") for t in line.split("--")[0].split()]
        layers.append([n for n in names if re.fullmatch(r"[a-z_][a-z0-9_]*", n)])
    return layers


def top_module(src: Path, path: Path) -> str | None:
    rel = path.relative_to(src)
    if rel.parts[0] == "bin":
        return None  # separate crates, built on the public API
    if len(rel.parts) == 1:
        return None if rel.stem == "lib" else rel.stem
    return rel.parts[0]


def module_depth(src: Path, path: Path) -> int:
    """How many `super::` lead from this file's module to the crate root."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "mod":
        parts.pop()
    return len(parts)


def imports(text: str, depth: int) -> set[str]:
    code = LINE_COMMENT.sub("", text)
    found = set(CRATE_PATH.findall(code))
    for supers, name in SUPER_PATH.findall(code):
        if supers.count("super::") == depth:
            found.add(name)
    for group in CRATE_GROUP.findall(code):
        for item in group.split(","):
            name = item.strip().split("::")[0].strip()
            if re.fullmatch(r"[a-z_][a-z0-9_]*", name):
                found.add(name)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def folder_circles(root: Path, crates: tuple[str, ...] = ("src", "master/src")) -> list[str]:
    """A circle between the files (or subfolders) of one folder, for every folder of each crate
    under ``root``, except the folders in ALLOWED_CIRCLES."""
    errors = []
    for crate in crates:
        src = root / crate
        if not src.is_dir():
            continue
        for folder, edges in sorted(module_graph.sibling_graphs(src).items()):
            name = "/".join((crate,) + folder)
            graph = {a: {b for b, _ in bs} for a, bs in edges.items()}
            cycle = find_cycle(graph)
            if cycle and name not in ALLOWED_CIRCLES:
                hops = []
                for a, b in zip(cycle, cycle[1:]):
                    where = sorted(f for x, f in edges[a] if x == b)[0]
                    hops.append(f"{a} -> {b} ({Path(where).relative_to(root)})")
                errors.append(f"circle between the files of {name}/: " + ", ".join(hops))
    return errors


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    src = root / "src"
    layers = read_layers(src / "README.md")
    rank = {name: i for i, layer in enumerate(layers) for name in layer}
    errors = []

    tops = {p.stem for p in src.glob("*.rs") if p.stem != "lib"}
    tops |= {p.name for p in src.iterdir() if p.is_dir() and p.name != "bin"}
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for path in sorted(src.rglob("*.rs")):
        me = top_module(src, path)
        if me is None:
            continue
        if me not in rank:
            errors.append(f"{path.relative_to(root)}: module {me!r} is not in src/README.md's layers")
            rank[me] = -1
        for other in imports(path.read_text(), module_depth(src, path)):
            if other not in tops or other == me:
                continue  # a crate-root item (VERSION, re-exports), or a path inside a module
            graph.setdefault(me, set()).add(other)
            where.setdefault((me, other), str(path.relative_to(root)))

    for (me, other), path in sorted(where.items()):
        if rank.get(other, -1) < 0:
            continue  # reported above as missing from the layers
        if rank[me] >= 0 and rank[other] <= rank[me] and (me, other) not in ALLOWED_EDGES:
            errors.append(f"{path}: {me} imports {other}, which is not below it")
    cycle = find_cycle(
        {a: {b for b in bs if (a, b) not in ALLOWED_EDGES} for a, bs in graph.items()}
    )
    if cycle:
        errors.append("circle between modules: " + " -> ".join(cycle))

    errors += folder_circles(root)

    files = sorted(src.rglob("*.rs")) + sorted((root / "master" / "src").rglob("*.rs"))
    files += sorted((root / "python").rglob("*.py"))
    for path in files:
        rel = str(path.relative_to(root))
        if any(p.startswith(".") or p in ("build", "target") for p in path.relative_to(root).parts):
            continue
        n = sum(1 for _ in path.open(encoding="utf-8", errors="replace"))
        if n > MAX_LINES and rel not in ALLOWED_LONG:
            errors.append(f"{rel}: {n} lines (at most {MAX_LINES})")
        elif n > WARN_LINES:
            print(f"check_layers: warning: {rel}: {n} lines (over {WARN_LINES}: a split by concept?)")

    for e in errors:
        print(f"check_layers: {e}")
    if errors:
        return 1
    print(
        f"check_layers: {len(where)} imports between {len(graph)} modules follow the layers, "
        f"no circle between modules or between the files of a folder "
        f"({len(ALLOWED_CIRCLES)} folder allowed while being split), "
        f"no file over {MAX_LINES} lines ({len(ALLOWED_LONG)} allowed while being split)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
