"""How the values of the migrated column name LOs, by the column's type, read as
``refs/values.py`` reads them (migrate has no rule of its own):

- ``oid`` (and the ``lo`` domain): the value is the OID;
- ``int2``/``int4``: as ``oid::int4`` stores an OID (a negative value is the OID less
  2^32); ``int8`` and ``numeric`` as they are;
- ``text`` (``text``, ``varchar``, ``char``): a value in the **digits** form only (pgjdbc's
  ``setClob`` behind Hibernate's ``@Lob String``, Odoo's ``str(oid)``). A file name,
  ``<oid>.<ext>``, names an LO for vacuum, but a migration would lose its name and
  extension: migrate takes it for a value that names no LO.

A value of a text column names an OID only by its form; whether an LO is there is asked
separately (a mixed column holds inline text beside OIDs, and ``--to text`` keeps it).
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from pgblobdump.refs import values

FORMS = ("oid", "int2", "int4", "int8", "numeric", "text")
"""The forms, as the state table records a run's (``migrations.source``)."""

_OF_TYPE = {
    "oid": "oid",
    "smallint": "int2",
    "integer": "int4",
    "bigint": "int8",
    "numeric": "numeric",
    "text": "text",
    "character varying": "text",
    "character": "text",
}
"""``format_type`` of a column's base type -> its form."""


@dataclass(frozen=True)
class Form:
    """The form a column's values name LOs in (one of ``FORMS``)."""

    name: str = "oid"

    @property
    def is_text(self) -> bool:
        return self.name == "text"

    def oid(self, value: sql.Composable) -> sql.Composable:
        """An ``oid`` expression: the OID ``value`` (of this form) names, NULL when it
        names none by its form."""
        if self.name == "oid":
            return value
        if self.name in ("int2", "int4", "int8"):
            return values.int_sql(value, 64 if self.name == "int8" else 32)
        if self.name == "numeric":
            return values.numeric_sql(value)
        text = sql.SQL("({})::pg_catalog.text").format(value)
        # values.text_sql restricted to the digits form, which is text_sql's own digits
        # branch (int_sql of the value; tested equal on the server): one regular
        # expression a value, where text_sql behind text_pattern_sql would match twice.
        return sql.SQL("(CASE WHEN {p} = 'digits' THEN {o} END)").format(
            p=values.text_pattern_sql(text), o=values.int_sql(text, 32)
        )

    def sample(self, value: sql.Composable) -> sql.Composable:
        """A value as a message shows it: an OID as it is, a text cut to 40 characters."""
        if self.name == "oid":
            return value
        return sql.SQL("pg_catalog.left(({})::pg_catalog.text, 40)").format(value)


OID = Form("oid")


def of_type(base_type: str) -> Form | None:
    """The form of a column whose base type is ``base_type`` (``format_type``), None for a
    type whose values name no LO."""
    name = _OF_TYPE.get(base_type)
    return None if name is None else Form(name)


def shown(value: object) -> str:
    """A value in a message: an OID bare, a text quoted as SQL would."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)
