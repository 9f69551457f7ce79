"""SQL the reference model asks of the catalogs about a column ``a`` of table ``c`` in
schema ``n``, for the connected role ``r``, and the column such a query finds."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableColumn:
    """A column of a table, as the catalogs name it: what a typed reference
    (vacuum/refs.py's RefColumn) and a suspected one (refs/suspects.py's Candidate) share."""

    relid: int
    attnum: int
    schema: str
    table: str
    column: str
    type: str

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}.{self.column}"


VISIBLE = """
    pg_catalog.has_schema_privilege(n.oid, 'USAGE')
    AND pg_catalog.has_column_privilege(c.oid, a.attnum, 'SELECT')
"""
"""Whether the connected role may read column ``a`` of table ``c`` in schema ``n``."""

RLS_APPLIES = """
    (c.relrowsecurity AND NOT r.rolsuper AND NOT r.rolbypassrls
     AND (c.relforcerowsecurity OR NOT pg_catalog.pg_has_role(c.relowner, 'USAGE')))
"""
"""Whether row-level security filters what the connected role ``r`` reads of ``c``:
enabled on the table, the role neither a superuser nor BYPASSRLS, and not its owner (an
owner is filtered too when the table FORCEs row security), as the server decides it."""

LOCKABLE = """
    (c.relkind = 'm' OR pg_catalog.pg_has_role(c.relowner, 'USAGE')
     OR pg_catalog.has_table_privilege(c.oid, 'UPDATE')
     OR pg_catalog.has_table_privilege(c.oid, 'DELETE')
     OR pg_catalog.has_table_privilege(c.oid, 'TRUNCATE'))
"""
"""Whether the connected role may LOCK table ``c`` IN SHARE MODE (what the server asks)."""


COLUMN_FIELDS = (
    "c.oid::int8, a.attnum::int, n.nspname, c.relname, a.attname,"
    " pg_catalog.format_type(a.atttypid, a.atttypmod)"
)
"""A TableColumn's fields, in order, of column ``a`` of table ``c`` in schema ``n``."""

ACCESS = VISIBLE + ", " + RLS_APPLIES + ", " + LOCKABLE
"""Three columns: VISIBLE, RLS_APPLIES and LOCKABLE, in that order."""

APPLICATION_COLUMNS = """
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_roles r ON r.rolname = current_user
WHERE a.attnum > 0 AND NOT a.attisdropped
  AND c.relkind IN ('r', 'p', 'm') AND NOT c.relispartition
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg\\_toast%%' AND n.nspname NOT LIKE 'pg\\_temp\\_%%'
  AND n.oid <> pg_catalog.pg_my_temp_schema()
"""
"""Joins column ``a`` (of ``pg_attribute``) to its table ``c``, schema ``n`` and the
connected role ``r``, and keeps the columns an application's data may hold: live
columns of tables, partitioned tables (not their partitions) and materialized views,
outside the system schemas, TOAST and temporary schemas (this session's own too).
A ``%%`` stands for ``%``: a query with parameters."""


def regclass_text(table: str) -> str:
    """A table as a user names one (``[schema.]table``: unquoted, folded to lower case by
    the server) or as this package writes one (quoted: ``"app"."my.table"``), as text
    ``to_regclass`` reads. An unquoted name is quoted part by part, as before."""
    if '"' in table:
        return table
    from psycopg import sql

    return sql.Identifier(*table.split(".")).as_string(None)
