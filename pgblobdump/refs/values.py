"""How a value names an LO: the forms applications write, read the same way everywhere
(vacuum and inspect, ``--referenced-by``, migrate).

- an ``oid`` or ``lo`` value is the OID;
- an integer (``int2``/``int4``, how ``oid::int4`` stores one: an OID of 2^31 or more
  comes back negative, and is the value + 2^32; ``int8`` and ``numeric`` as they are);
- a text (``text``, ``varchar``, ``char``) that is exactly an OID's digits (pgjdbc's
  ``setClob`` behind Hibernate's ``@Lob String`` up to 5.6.1, Odoo's ``str(oid)``), or
  an OID leading a file name, ``<oid>.<ext>`` with any suffixes (pg-lo-storage's
  FileField). The digits
  of a negative int4 written as text (``-1294967296``) name an OID as the integer does.

A value names no LO when it is outside 1..2^32-1 or not of these forms; whether an LO
exists at the OID is another question (live or dangling), asked by the callers.
"""

from __future__ import annotations

import re

from psycopg import sql

from pgblobdump.pgconstants import OID_MAX

INT4_WRAP = 1 << 32
"""What ``oid::int4`` took from an OID of 2^31 or more (it stores OID - 2^32)."""

TEXT_FORM = r"^-?[0-9]{1,10}$"
"""A text value that is an OID's digits (or a negative int4's)."""
CANONICAL_FORM = r"^[1-9][0-9]{0,9}$"
"""The digits form as ``oid::text`` writes it (no sign, no leading zero): the values most
columns hold, read first with no arithmetic beyond one cast."""
FILE_FORM = r"^[0-9]{1,10}(\.[^./]+)+$"
"""A text value that is an OID leading a file name: ``<oid>`` and one or more suffixes,
as pg-lo-storage writes ``str(oid)`` and the original name's suffixes (``.tar.gz``,
``.backup-2024``, ``.jpg_large``). A decimal (``12.5``) reads as one too: more kept,
never less."""

PATTERNS = ("oid", "integer", "digits", "file name")
"""The names of the forms, as reports give them."""

_TEXT = re.compile(TEXT_FORM)
_FILE = re.compile(FILE_FORM)


def from_int(value: int, bits: int = 32) -> int | None:
    """The OID an integer column's value names: a negative one of an ``int2``/``int4``
    column (``bits`` 16 or 32) wraps as ``oid::int4`` wrote it; an ``int8``/numeric
    (``bits`` 64) value stands for itself."""
    if bits <= 32 and -(1 << 31) <= value < 0:
        value += INT4_WRAP
    return value if 1 <= value <= OID_MAX else None


def from_text(value: str) -> tuple[int, str] | None:
    """``(oid, pattern)`` of a text value in one of the forms (``digits`` or ``file
    name``), else None."""
    if _TEXT.fullmatch(value):
        oid = from_int(int(value), 32)
        return None if oid is None else (oid, "digits")
    if _FILE.fullmatch(value):
        oid = from_int(int(value.split(".", 1)[0]), 64)
        return None if oid is None else (oid, "file name")
    return None


def int_sql(value: sql.Composable, bits: int) -> sql.Composed:
    """``from_int`` on the server: an ``oid`` expression, NULL when ``value`` names none."""
    v = sql.SQL("({})::pg_catalog.int8").format(value)
    if bits <= 32:
        v = sql.SQL("(CASE WHEN {v} BETWEEN {lo} AND -1 THEN {v} + {w} ELSE {v} END)").format(
            v=v, lo=sql.Literal(-(1 << 31)), w=sql.Literal(INT4_WRAP)
        )
    return sql.SQL("(CASE WHEN {v} BETWEEN 1 AND {m} THEN {v}::pg_catalog.oid END)").format(
        v=v, m=sql.Literal(OID_MAX)
    )


def numeric_sql(value: sql.Composable) -> sql.Composed:
    """A numeric value naming an OID: a whole number in 1..2^32-1."""
    return sql.SQL(
        "(CASE WHEN {v} BETWEEN 1 AND {m} AND {v} = pg_catalog.trunc({v})"
        " THEN ({v})::pg_catalog.int8::pg_catalog.oid END)"
    ).format(v=value, m=sql.Literal(OID_MAX))


def text_sql(value: sql.Composable) -> sql.Composed:
    """``from_text`` on the server: an ``oid`` expression, NULL when ``value`` (text)
    names none. The forms' regular expressions bound the digits, so the casts cannot fail;
    each is evaluated once (a cast repeated is cheap, a regular expression is not). The
    OID's own digits, what most rows hold, are read first, by one cast: the general
    reading's wrap-around arithmetic is for a sign or leading zeros."""
    return sql.SQL(
        "(CASE WHEN {v} ~ {c} THEN (CASE WHEN {v}::pg_catalog.int8 <= {m}"
        " THEN {v}::pg_catalog.int8::pg_catalog.oid END)"
        " WHEN {v} ~ {t} THEN {n} WHEN {v} ~ {f} THEN {p} END)"
    ).format(
        v=value,
        c=sql.Literal(CANONICAL_FORM),
        m=sql.Literal(OID_MAX),
        t=sql.Literal(TEXT_FORM),
        f=sql.Literal(FILE_FORM),
        n=int_sql(sql.SQL("{}::pg_catalog.int8").format(value), 32),
        p=int_sql(sql.SQL("pg_catalog.split_part({}, '.', 1)::pg_catalog.int8").format(value), 64),
    )


def text_pattern_sql(value: sql.Composable) -> sql.Composed:
    """Which form a text ``value`` is in (``digits``, ``file name``), NULL for neither."""
    return sql.SQL(
        "(CASE WHEN {v} ~ {t} THEN 'digits' WHEN {v} ~ {f} THEN 'file name' END)"
    ).format(v=value, t=sql.Literal(TEXT_FORM), f=sql.Literal(FILE_FORM))
