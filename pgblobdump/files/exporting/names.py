"""Export's names: the ``--name`` template parsed and rendered, names made safe (no way
out of the target, no part the file system refuses, none of the export's own names),
and clashes disambiguated the same way on every run. Pure: tested without a server.

The rules (docs/out-and-back.md, "export", says them to users):
- ``/`` separates directories; an empty part or ``.`` is dropped (so ``/etc/x`` becomes
  ``etc/x``, inside the target), ``..`` becomes ``_..``.
- NUL and other control characters (below 0x20, and 0x7f) become ``_``.
- A part over 255 bytes (UTF-8) is cut to fit with ``~OID`` added; a path over 1024
  bytes (S3's limit, files/keys.KEY_MAX) keeps its last part alone.
- An empty name becomes the OID; the export's own names (``manifest.csv``,
  ``manifest.json``, ``manifest-K-of-N.*`` at the top) and a part starting
  ``.pgblobdump`` (the tool's, which files/objects keeps for itself) get a ``_`` in
  front.
- Two LOs of one name: the lowest OID keeps it, each other one gets ``~OID`` before the
  extension (``report.pdf``, ``report~16390.pdf``); a name that is also a directory of
  another name (``a`` and ``a/b``) gets ``~OID`` the same way.
Every change is kept with its reason (``Named.why``), for the report and the manifest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pgblobdump.errors import UsageError
from pgblobdump.files.keys import KEY_MAX, PART_MAX, TOOL_PREFIX

_RESERVED_TOP = re.compile(r"manifest(-\d+-of-\d+)?\.(csv|json)")
"""The manifest's names at the top of the target (``manifest-K-of-N.*`` for a --part)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FIELD = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class Template:
    """A parsed ``--name``: literal text and fields, in order. A field is ``oid`` or a
    column ``(table, column)`` of the one table the template reads rows of."""

    text: str
    pieces: tuple[str | tuple[str, str] | None, ...]
    """Literal text, a column, or None for ``{oid}``."""

    @property
    def table(self) -> str | None:
        """The table whose rows the template names LOs after (None: the OID alone)."""
        for p in self.pieces:
            if isinstance(p, tuple):
                return p[0]
        return None

    @property
    def columns(self) -> tuple[str, ...]:
        """The row's columns the template uses, each once, in order of first use."""
        out: list[str] = []
        for p in self.pieces:
            if isinstance(p, tuple) and p[1] not in out:
                out.append(p[1])
        return tuple(out)

    def render(self, oid: int, row: Mapping[str, str | None] | None = None) -> str:
        """The name before it is made safe; a NULL column renders as nothing."""
        out: list[str] = []
        for p in self.pieces:
            if p is None:
                out.append(str(oid))
            elif isinstance(p, tuple):
                out.append((row or {}).get(p[1]) or "")
            else:
                out.append(p)
        return "".join(out)


def parse(text: str, tables: Iterable[str] = ()) -> Template:
    """``--name TEMPLATE``: ``{oid}`` and ``{TABLE.COLUMN}`` of one table among
    ``tables`` (the --referenced-by tables, as written); ``{{``/``}}`` are braces."""
    pieces: list[str | tuple[str, str] | None] = []
    known = list(tables)
    at = 0
    table: str | None = None
    marked = text.replace("{{", "\x00").replace("}}", "\x01")
    for m in _FIELD.finditer(marked):
        pieces.append(_literal(marked[at : m.start()], text))
        field = m.group(1).strip()
        at = m.end()
        if field == "oid":
            pieces.append(None)
            continue
        t, dot, col = field.rpartition(".")
        if not dot or not t or not col:
            raise UsageError(
                f"--name {text!r}: {{{field}}} is neither {{oid}} nor {{TABLE.COLUMN}}"
            )
        if t not in known:
            raise UsageError(
                f"--name {text!r}: {{{field}}} names table {t}, which no --referenced-by"
                f" {t}.COLUMN names (the rows come from a reference column)"
            )
        if table is not None and t != table:
            raise UsageError(f"--name {text!r}: columns of one table only ({table} and {t})")
        table = t
        pieces.append((t, col))
    pieces.append(_literal(marked[at:], text))
    tpl = Template(text, tuple(p for p in pieces if p != ""))
    if all(isinstance(p, str) for p in tpl.pieces):
        raise UsageError(f"--name {text!r}: no {{oid}} or {{TABLE.COLUMN}} in it")
    return tpl


def _literal(s: str, text: str) -> str:
    if "{" in s or "}" in s:
        raise UsageError(f"--name {text!r}: an unmatched brace (write {{{{ or }}}} for one)")
    return s.replace("\x00", "{").replace("\x01", "}")


def with_tag(part: str, tag: str) -> str:
    """``part`` with ``~tag`` before its extension (``a.pdf`` -> ``a~7.pdf``), cut so the
    result stays within PART_MAX bytes."""
    dot = part.rfind(".")
    stem, ext = (part[:dot], part[dot:]) if dot > 0 and len(part) - dot <= 16 else (part, "")
    suffix = f"~{tag}{ext}"
    room = PART_MAX - len(suffix.encode())
    return _cut(stem, room) + suffix


def _cut(s: str, limit: int) -> str:
    """``s`` cut to at most ``limit`` UTF-8 bytes at a character boundary."""
    b = s.encode()
    if len(b) <= limit:
        return s
    return b[:limit].decode("utf-8", "ignore")


def reserved(path: str) -> bool:
    """Whether ``path`` is one of the export's own names (the manifest's)."""
    return "/" not in path and _RESERVED_TOP.fullmatch(path) is not None


def make_safe(name: str, oid: int) -> tuple[str, str]:
    """``name`` made safe to write under the target (module docstring), and why it was
    changed ("" when it was not)."""
    why: list[str] = []
    if _CONTROL.search(name):
        name = _CONTROL.sub("_", name)
        why.append("control character")
    if name.startswith("/"):
        why.append("absolute")
    parts: list[str] = []
    for p in name.split("/"):
        if p in ("", "."):
            if not name.startswith("/") and "empty or . part" not in why:
                why.append("empty or . part")
            continue
        if p == "..":
            p = "_.."
            if ".." not in why:
                why.append("..")
        elif p.startswith(TOOL_PREFIX):
            p = "_" + p
            why.append("the tool's own name")
        if len(p.encode()) > PART_MAX:
            p = with_tag(p, str(oid))
            why.append(f"part over {PART_MAX} bytes")
        parts.append(p)
    if not parts:
        parts = [str(oid)]
        why.append("empty name")
    path = "/".join(parts)
    if len(path.encode()) > KEY_MAX:
        path = parts[-1]
        why.append(f"path over {KEY_MAX} bytes")
    if reserved(path):  # checked on the final path: a cut one can be a manifest's name
        path = "_" + path
        why.append("the export's own name")
    return path, ", ".join(dict.fromkeys(why))


@dataclass(frozen=True)
class Named:
    """An LO's name in the target and why it differs from the template's ("": it does
    not)."""

    path: str
    why: str = ""


def _parents(path: str) -> Iterable[str]:
    at = path.find("/")
    while at >= 0:
        yield path[:at]
        at = path.find("/", at + 1)


def resolve(wanted: Mapping[int, Named], fixed: Iterable[str] = ()) -> dict[int, Named]:
    """Each LO's final name: ``wanted`` (made safe already) with clashes disambiguated
    (module docstring). ``fixed``: names taken already (an earlier run's, kept)."""
    used = set(fixed)
    order = sorted(wanted, key=lambda o: (wanted[o].path.encode(), o))
    out: dict[int, Named] = {}
    losers: list[int] = []
    for oid in order:
        n = wanted[oid]
        if n.path in used:
            losers.append(oid)
        else:
            used.add(n.path)
            out[oid] = n
    dirs: set[str] = set()
    for p in used:
        dirs.update(_parents(p))
    for oid in sorted(losers):
        n = wanted[oid]
        path = _tagged(n.path, oid, used, dirs)
        used.add(path)
        dirs.update(_parents(path))
        out[oid] = Named(path, _also(n.why, "same name as another LO"))
    # a file where another name needs a directory
    for oid in sorted(o for o, n in out.items() if n.path in dirs):
        n = out[oid]
        path = _tagged(n.path, oid, used, dirs)
        used.discard(n.path)
        used.add(path)
        out[oid] = Named(path, _also(n.why, "a directory of another name"))
    return out


def _tagged(path: str, oid: int, used: set[str], dirs: set[str]) -> str:
    head, _, last = path.rpartition("/")
    while True:
        last = with_tag(last, str(oid))
        cand = f"{head}/{last}" if head else last
        if cand not in used and cand not in dirs:
            return cand


def _also(why: str, more: str) -> str:
    return f"{why}, {more}" if why else more
