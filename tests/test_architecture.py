"""The direction of imports that docs/architecture.md draws, enforced: read from the code
(every import, function-level ones included; ``if TYPE_CHECKING:`` blocks left out, as they
never run), so a move that breaks it fails here, not in a reviewer's head."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "pgblobdump"

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def _layers() -> dict[str, int]:
    """docs/architecture.md's diagram (``L2  packed/  generate/  migrate/   features``):
    each package or module named on a layer's line, before the spaced-out comment."""
    out = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"L(\d)  (.*)", line)
        if m:
            names = re.split(r"\s{3,}", m.group(2).strip())[0]
            for name in names.split():
                out[name.rstrip("/")] = int(m.group(1))
    return out


LAYER = _layers()
"""Arrows go down only (a package may import its own layer's and lower ones), with the
exceptions below. Read from the doc, so the picture and the test are one."""
GROUND = {name for name, layer in LAYER.items() if layer == 0}
"""L0: what everyone stands on; it imports nothing of the package above it."""
NEVER = {
    "toc": {"pg", "servers", "storage"},
    "bench": {"compare"},
    "compare": {"bench"},
    "storage": {"pg", "toc", "servers"},
    "pg": {"servers", "storage", "toc", "report"},
}
"""Pairs of one layer that stay apart: the pg_dump format is parsed with no server access,
the measurement harnesses share only ``harness``, storage knows nothing of PostgreSQL."""


def _modules() -> dict[str, Path]:
    out = {}
    for f in ROOT.rglob("*.py"):
        parts = f.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _imports(path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """The package modules ``path`` imports (``from a import b``: ``a.b`` when that is a
    module, else ``a``)."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not node.module.startswith("pgblobdump"):
                continue
            for a in node.names:
                full = f"{node.module}.{a.name}"
                yield full if full in modules else node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("pgblobdump."))


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


MODULES = _modules()
GRAPH = {m: set(_imports(p, MODULES)) & set(MODULES) for m, p in MODULES.items()}


def test_every_package_has_a_layer() -> None:
    packages = {_package(m) for m in MODULES} - {"", "__main__"}
    assert packages <= set(LAYER), f"place {packages - set(LAYER)} in docs/architecture.md"


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_go_down(module: str) -> None:
    here = _package(module)
    if here in ("", "__main__"):
        return
    wrong = []
    for target in GRAPH[module]:
        there = _package(target)
        if there in ("", here):
            continue
        if (
            LAYER[there] > LAYER[here]
            or there in NEVER.get(here, ())
            or (LAYER[here] == 0 and there not in GROUND)
        ):
            wrong.append(target)
    assert not wrong, f"{module} imports {sorted(wrong)} against docs/architecture.md"


def test_no_import_cycles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            # A package's __init__ importing its own modules is no cycle of concepts.
            if len(comp) > 1 and not all(c.startswith(min(comp, key=len)) for c in comp):
                cycles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


FORMAT_DOC = DOC.parent / "format.md"


def _floors() -> dict[str, int]:
    """docs/format.md's floors of packed/ (``| 2 | `read/`, `write/` | ...``): each room
    (sub-package, or a module standing alone) and its floor."""
    lines = FORMAT_DOC.read_text().splitlines()
    start = lines.index("| floor | sub-packages | what they are |")
    out = {}
    for line in lines[start + 2 :]:
        m = re.match(r"\| (\d+) \| (.*?) \|", line)
        if not m:
            break
        for name in re.findall(r"`(\w+)/?`", m.group(2)):
            out[name] = int(m.group(1))
    return out


FLOOR = _floors()
"""Inside packed/, arrows go down a floor at least: two rooms of one floor stay apart."""


def _room(module: str) -> str | None:
    """``format`` for ``pgblobdump.packed.format.index``; None outside packed/'s rooms."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["pgblobdump", "packed"] and len(parts) > 2 else None


ROOMS = sorted(m for m in GRAPH if _room(m))


def test_every_packed_room_has_a_floor() -> None:
    rooms = {_room(m) for m in ROOMS}
    assert rooms == set(FLOOR), (
        f"docs/format.md's floors: add {rooms - set(FLOOR)}, drop {set(FLOOR) - rooms}"
    )


@pytest.mark.parametrize("module", ROOMS)
def test_packed_rooms_import_lower_floors_only(module: str) -> None:
    here = _room(module)
    assert here is not None
    wrong = sorted(
        target
        for target in GRAPH[module]
        if (there := _room(target)) is not None and there != here and FLOOR[there] >= FLOOR[here]
    )
    assert not wrong, f"{module} (floor {FLOOR[here]}) imports {wrong} against docs/format.md"
