"""docs/format.md cannot go stale: its byte-level tables match the structs of
pgblobdump/packed/format.py field by field, and every struct, frame kind and constant
there is documented with its value."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from pgblobdump.packed.format import spec as fmt

DOC = Path(__file__).resolve().parents[2] / "docs" / "format.md"
TEXT = DOC.read_text()
STRUCTS = {n: v for n, v in vars(fmt).items() if isinstance(v, struct.Struct)}
TYPES = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q"}
"""The doc's type names and the struct codes they stand for; ``char[N]`` is ``Ns``."""


def cells(line: str) -> list[str]:
    """A Markdown table row's cells, backticks dropped (``\\|`` is a pipe inside a cell)."""
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [p.strip().replace("`", "").replace("\\|", "|") for p in parts]


def struct_tables() -> dict[str, tuple[int, list[list[str]]]]:
    """For each ``### `NAME` (N bytes)`` heading: N and the body rows of the first table
    under it."""
    tables: dict[str, tuple[int, list[list[str]]]] = {}
    lines = TEXT.splitlines()
    for i, line in enumerate(lines):
        heading = re.fullmatch(r"###\s+`?([A-Z_]+)`?\s+\((\d+) bytes\)", line.strip())
        if heading is None:
            continue
        start = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("|"))
        rest = range(start, len(lines))
        end = next((j for j in rest if not lines[j].startswith("|")), len(lines))
        header, separator, *body = (cells(x) for x in lines[start:end])
        assert header[:3] == ["offset", "size", "type"], f"{heading[1]}: table header {header}"
        assert set("".join(separator)) <= set("-:"), f"{heading[1]}: no separator row"
        tables[heading[1]] = (int(heading[2]), body)
    return tables


TABLES = struct_tables()


def codes(s: struct.Struct) -> list[str]:
    """One code per field: ``<8sHH`` -> ``["8s", "H", "H"]`` (``2H`` is two fields)."""
    out: list[str] = []
    for count, code in re.findall(r"(\d*)([a-zA-Z?])", s.format.lstrip("<>=!@")):
        out += [count + code] if code in "sp" else [code] * int(count or 1)
    return out


def code_of(type_name: str) -> str:
    char = re.fullmatch(r"char\[(\d+)\]", type_name)
    if char:
        return f"{char[1]}s"
    assert type_name in TYPES, f"unknown type {type_name!r} in docs/format.md"
    return TYPES[type_name]


def test_doc_has_a_table_for_every_struct() -> None:
    assert set(TABLES) == set(STRUCTS)


@pytest.mark.parametrize("name", sorted(STRUCTS))
def test_table_matches_struct(name: str) -> None:
    s = STRUCTS[name]
    declared, rows = TABLES[name]
    assert s.format.startswith("<"), f"{name} is not little-endian"
    assert declared == s.size, f"the heading says {declared} bytes, {name} is {s.size}"
    assert len(rows) == len(codes(s)), f"{name}: {len(rows)} rows, {len(codes(s))} fields"
    at = 0
    for row, code in zip(rows, codes(s), strict=True):
        offset, size, type_name = int(row[0]), int(row[1]), row[2]
        assert offset == at, f"{name}: field {row[3]!r} at {offset}, expected {at}"
        assert code_of(type_name) == code, f"{name}: field {row[3]!r} is {type_name}, not {code}"
        assert size == struct.calcsize("<" + code), f"{name}: field {row[3]!r} size {size}"
        at += size
    assert at == s.size, f"{name}: rows add up to {at} bytes, the struct is {s.size}"


@pytest.mark.parametrize("kind", list(fmt.FrameKind), ids=lambda k: k.name)
def test_every_frame_kind_is_documented(kind: fmt.FrameKind) -> None:
    assert re.search(rf"^\|\s*{kind.value}\s*\|\s*`{kind.name}`\s*\|", TEXT, re.M), (
        f"no row '| {kind.value} | `{kind.name}` |' in the frame kinds table"
    )
    assert f"{kind.value} {kind.name}" in TEXT  # FRAME_HEADER's kind field lists it


@pytest.mark.parametrize("codec", list(fmt.Codec), ids=lambda c: c.name)
def test_every_codec_is_documented(codec: fmt.Codec) -> None:
    assert re.search(rf"^\|\s*{codec.value}\s*\|\s*`{codec.name}`\s*\|", TEXT, re.M)


def documented_constants() -> dict[str, str]:
    """``name -> value cell`` of the Constants table."""
    section = TEXT.split("\n## Constants\n", 1)[1]
    rows = [cells(x) for x in section.splitlines() if x.startswith("|")]
    return {r[0]: r[1] for r in rows[2:]}


MODULE_CONSTANTS = {
    n: v
    for n, v in vars(fmt).items()
    if n.isupper() and isinstance(v, int | bytes | str) and not isinstance(v, bool)
}


@pytest.mark.parametrize("name", sorted(MODULE_CONSTANTS))
def test_every_constant_is_documented_with_its_value(name: str) -> None:
    table = documented_constants()
    assert name in table, f"{name} is missing from the Constants table"
    value = MODULE_CONSTANTS[name]
    if isinstance(value, bytes):
        assert table[name] == value.decode("ascii")
    elif isinstance(value, str):
        assert table[name] == value
    else:
        assert int(table[name].replace(",", "")) == value


def test_every_struct_name_appears_in_the_doc() -> None:
    for name in STRUCTS:
        assert f"`{name}`" in TEXT


PACKED = Path(fmt.__file__).resolve().parents[1]


def module_map() -> dict[str, str]:
    """``module -> purpose`` of the modules table (``| module | what it is for |``)."""
    lines = TEXT.splitlines()
    start = lines.index("| module | what it is for |")
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(cells(line))
    return {r[0]: r[1] for r in rows}


def packed_modules() -> set[str]:
    """Every module of pgblobdump/packed/, by its path there (``frames``, or ``a/b`` in a
    sub-package), package ``__init__`` files aside."""
    return {
        p.relative_to(PACKED).with_suffix("").as_posix()
        for p in PACKED.rglob("*.py")
        if p.name != "__init__.py"
    }


def test_module_map_lists_every_packed_module() -> None:
    listed = module_map()
    modules = packed_modules()
    assert not modules - set(listed), (
        f"add to docs/format.md's module map: {sorted(modules - set(listed))}"
    )
    assert not set(listed) - modules, f"no such module in packed/: {sorted(set(listed) - modules)}"
    assert all(listed.values()), "each module in the map says what it is for"
