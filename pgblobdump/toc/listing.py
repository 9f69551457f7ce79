"""`pg_restore -l` listings: which entries it prints, how it prints them, and parsing back.

Mirrors PrintTOCSummary and _tocEntryRequired of pg_backup_archiver.c with default restore
options: no -C, no section or object selection, not verbose.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pgblobdump.errors import CorruptArchive
from pgblobdump.toc.entry import SECTION_DATA, SECTION_NONE, SECTION_POST_DATA, SECTION_PRE_DATA
from pgblobdump.toc.header import ArchiveHeader

REQ_SCHEMA = 1
REQ_DATA = 2
REQ_SPECIAL = 4

_SPECIAL = frozenset({"ENCODING", "STDSTRINGS", "SEARCHPATH"})
_DATABASE = frozenset({"DATABASE", "DATABASE PROPERTIES"})
_LO_DEPENDENT = frozenset({"ACL", "COMMENT", "SECURITY LABEL"})

KNOWN_DESCS: tuple[str, ...] = tuple(
    sorted(
        {
            "ACCESS METHOD",
            "ACL",
            "AGGREGATE",
            "BLOB",
            "BLOB METADATA",
            "BLOBS",
            "CAST",
            "CHECK CONSTRAINT",
            "COLLATION",
            "COMMENT",
            "CONSTRAINT",
            "CONVERSION",
            "DATABASE",
            "DATABASE PROPERTIES",
            "DEFAULT",
            "DEFAULT ACL",
            "DOMAIN",
            "ENCODING",
            "EVENT TRIGGER",
            "EXTENSION",
            "FK CONSTRAINT",
            "FOREIGN DATA WRAPPER",
            "FOREIGN SERVER",
            "FOREIGN TABLE",
            "FUNCTION",
            "INDEX",
            "INDEX ATTACH",
            "LARGE OBJECT",
            "MATERIALIZED VIEW",
            "MATERIALIZED VIEW DATA",
            "OPERATOR",
            "OPERATOR CLASS",
            "OPERATOR FAMILY",
            "POLICY",
            "PROCEDURAL LANGUAGE",
            "PROCEDURE",
            "PUBLICATION",
            "PUBLICATION TABLE",
            "PUBLICATION TABLES IN SCHEMA",
            "ROW SECURITY",
            "RULE",
            "SCHEMA",
            "SEARCHPATH",
            "SECURITY LABEL",
            "SEQUENCE",
            "SEQUENCE OWNED BY",
            "SEQUENCE SET",
            "SERVER",
            "SHELL TYPE",
            "STATISTICS",
            "STATISTICS DATA",
            "STDSTRINGS",
            "SUBSCRIPTION",
            "SUBSCRIPTION TABLE",
            "TABLE",
            "TABLE ATTACH",
            "TABLE DATA",
            "TEXT SEARCH CONFIGURATION",
            "TEXT SEARCH DICTIONARY",
            "TEXT SEARCH PARSER",
            "TEXT SEARCH TEMPLATE",
            "TRANSFORM",
            "TRIGGER",
            "TYPE",
            "USER MAPPING",
            "VIEW",
        },
        key=lambda d: (-len(d), d),
    )
)
"""Entry descriptions pg_dump writes; longest first, so that parsing a listing line picks
``TABLE DATA`` rather than ``TABLE``."""


def required(desc: str, tag: str | None, defn: str | None, had_dumper: bool, section: int) -> int:
    """_tocEntryRequired with default options: REQ_* bits; 0 means pg_restore skips it.

    ``section`` is the current section (an entry of SECTION_NONE inherits the previous
    entry's section, see `listed`).
    """
    if desc in _SPECIAL:
        return REQ_SPECIAL
    if desc in _DATABASE:
        return 0  # restored only with -C
    if section not in (SECTION_PRE_DATA, SECTION_DATA, SECTION_POST_DATA):
        return 0
    res = REQ_SCHEMA | REQ_DATA
    if desc in _LO_DEPENDENT and tag is not None and tag.startswith("DATABASE "):
        return 0  # database-level ACLs and comments also need -C
    if not had_dumper:
        lo_ish = desc in ("SEQUENCE SET", "BLOB", "BLOB METADATA") or (
            desc in _LO_DEPENDENT and tag is not None and tag.startswith("LARGE OBJECT")
        )
        res &= REQ_DATA if lo_ish else ~REQ_DATA
    if not defn or defn.startswith("-- load via partition root "):
        res &= ~REQ_SCHEMA
    if desc == "<Init>" and tag == "Max OID":
        return 0
    return res


def listed(entries: Iterable[tuple[str, str | None, str | None, bool, int]]) -> Iterator[bool]:
    """For (desc, tag, defn, had_dumper, section) of each entry, whether `pg_restore -l`
    prints it; tracks the current section as PrintTOCSummary does."""
    current = SECTION_PRE_DATA
    for desc, tag, defn, had_dumper, section in entries:
        if section != SECTION_NONE:
            current = section
        yield bool(required(desc, tag, defn, had_dumper, current) & (REQ_SCHEMA | REQ_DATA))


def sanitize(value: str | None, want_hyphen: bool = False) -> str:
    """sanitize_line: NULL prints as '-' or '', newlines and carriage returns as spaces."""
    if value is None:
        return "-" if want_hyphen else ""
    return value.replace("\n", " ").replace("\r", " ")


def format_line(
    dump_id: int, tableoid: int, oid: int, desc: str, namespace: str | None,
    tag: str | None, owner: str | None,
) -> str:  # fmt: skip
    """One entry line of `pg_restore -l`, without the newline."""
    return (
        f"{dump_id}; {tableoid} {oid} {desc} {sanitize(namespace, True)}"
        f" {sanitize(tag)} {sanitize(owner)}"
    )


def format_header(header: ArchiveHeader, kind: str) -> list[str]:
    """The ';' comment block pg_restore -l prints before the entries."""
    fmt = {"custom": "CUSTOM", "directory": "DIRECTORY", "tar": "TAR"}.get(kind, "UNKNOWN")
    lines = [
        ";",
        f"; Archive created at {header.created_text}",
        f";     dbname: {sanitize(header.dbname)}",
        f";     TOC Entries: {header.toc_count}",
        f";     Compression: {header.compression}",
        f";     Dump Version: {header.version_text}",
        f";     Format: {fmt}",
        f";     Integer: {header.int_size} bytes",
        f";     Offset: {header.off_size} bytes",
    ]
    if header.server_version:
        lines.append(f";     Dumped from database version: {header.server_version}")
    if header.pg_dump_version:
        lines.append(f";     Dumped by pg_dump version: {header.pg_dump_version}")
    lines += [";", ";", "; Selected TOC Entries:", ";"]
    return lines


@dataclass(frozen=True)
class ListingLine:
    """One parsed entry line of a `pg_restore -l` listing.

    Invariants: ``dump_id`` > 0; ``namespace`` is '-' for an entry without schema;
    ``owner`` holds no space (the last word of the line); ``tag`` is everything between
    namespace and owner, so it may hold spaces, and newlines were already spaces.
    """

    dump_id: int
    tableoid: int
    oid: int
    desc: str
    namespace: str
    tag: str
    owner: str

    def format(self) -> str:
        return (
            f"{self.dump_id}; {self.tableoid} {self.oid} {self.desc} {self.namespace}"
            f" {self.tag} {self.owner}"
        )


def parse_line(line: str, where: str = "listing") -> ListingLine | None:
    """Parse one listing line; None for a comment or blank line (as SortTocFromFile skips)."""
    text = line.rstrip("\n")
    body = text.split(";", 1)
    if not text.strip() or text.lstrip().startswith(";"):
        return None
    if len(body) != 2:
        raise CorruptArchive(f"{where}: not a pg_restore -l line: {text!r}")
    try:
        dump_id = int(body[0])
        rest = body[1][1:] if body[1].startswith(" ") else body[1]
        tableoid_s, oid_s, rest = rest.split(" ", 2)
        tableoid, oid = int(tableoid_s), int(oid_s)
    except ValueError as e:
        raise CorruptArchive(f"{where}: not a pg_restore -l line: {text!r}") from e
    desc = next((d for d in KNOWN_DESCS if rest.startswith(d + " ")), rest.split(" ", 1)[0])
    rest = rest[len(desc) + 1 :]
    namespace, _, rest = rest.partition(" ")
    tag, _, owner = rest.rpartition(" ")
    return ListingLine(dump_id, tableoid, oid, desc, namespace, tag, owner)


def parse_listing(lines: Iterable[str], where: str = "listing") -> Iterator[ListingLine]:
    """Every entry line of a listing (comments, header and blank lines skipped)."""
    for line in lines:
        parsed = parse_line(line, where)
        if parsed is not None:
            yield parsed
