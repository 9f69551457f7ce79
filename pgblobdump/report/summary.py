"""A run's result record as ``what | value`` lines for people: labels from its keys, sizes
in binary units, seconds with their unit, yes/no, all OIDs. JSON and CSV keep the record's
raw values (README's "Output formats"); only the table is for reading."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pgblobdump.pgconstants import OID_MAX
from pgblobdump.report.table import Column, Table, show
from pgblobdump.units import format_bytes

ALL_OIDS = f"0..{OID_MAX}"
"""An OID range (``oids``) that restricts nothing."""

_WORDS = {"los": "LOs", "lo": "LO", "oids": "OIDs", "oid": "OID", "acls": "ACLs"}


def label(key: str) -> str:
    """``archive_bytes`` -> ``archive bytes``, ``los`` -> ``LOs``, ``damaged_oids`` ->
    ``damaged OIDs``, ``kept_pg_dump_files`` -> ``kept pg_dump files``."""
    return " ".join(_WORDS.get(w, w) for w in key.split("_")).replace("pg dump", "pg_dump")


def is_bytes(key: str) -> bool:
    """``bytes``, ``archive_bytes``, ``bytes_at_snapshot`` (an incremental dump's)."""
    return key == "bytes" or key.endswith("_bytes") or key.startswith("bytes_at_")


def is_seconds(key: str) -> bool:
    return key == "seconds" or key.endswith("_seconds")


def value(key: str, v: Any) -> str:
    """``v`` of record field ``key`` for people: a size in B/KiB/MiB/GiB, seconds with
    ``s``, ``all OIDs`` for an unrestricted range, the rest as every table shows it."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        if is_bytes(key):
            return format_bytes(v)
        if is_seconds(key):
            return f"{v:,.2f} s"
    if key in ("oids", "oid_range") and v == ALL_OIDS:
        return "all OIDs"
    return show(v) if v != "" else "-"


def summary_table(
    title: str,
    record: Mapping[str, Any],
    notes: Sequence[str] = (),
    what: str = "what",
    unless_zero: Sequence[str] = (),
) -> Table:
    """``record`` (raw values, what JSON prints) as one ``what | value`` line a field;
    the fields in ``unless_zero`` only when not 0 (a count that only some runs have)."""
    rows = [{what: label(k), "value": value(k, v)} for k, v in record.items()
            if not (k in unless_zero and v == 0)]  # fmt: skip
    return Table([Column(what), Column("value")], rows, title=title, notes=tuple(notes))
