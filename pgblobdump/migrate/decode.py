"""``--to text``: LOs whose bytes are not valid text in the database encoding.

``convert_from`` raises for them (invalid byte sequences, a NUL byte), failing the whole
statement it is in. A pass therefore runs its statements as they are, and only when one
raises asks the LOs of that statement's rows one at a time (``pgbd_decodes``, whose
exception handler costs a subtransaction a call: never paid by a pass that meets none).
They are refused by OID before anything is switched.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql

from pgblobdump.migrate.refs import LIST_MAX, listed
from pgblobdump.pg.catalog import lo_exists

ERRORS = (psycopg.errors.CharacterNotInRepertoire, psycopg.errors.UntranslatableCharacter)
"""What ``convert_from`` raises for bytes not valid in the database encoding."""

_FUNCTION = sql.SQL(
    "CREATE OR REPLACE FUNCTION pg_temp.pgbd_decodes(o oid) RETURNS boolean"
    " LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $pgbd$ BEGIN"
    " PERFORM pg_catalog.convert_from(pg_catalog.lo_get(o), pg_catalog.getdatabaseencoding());"
    " RETURN true;"
    " EXCEPTION WHEN character_not_in_repertoire OR untranslatable_character THEN RETURN false;"
    " END $pgbd$"
)


def failing(oids: sql.Composable) -> sql.Composed:
    """The OIDs among ``oids`` (a query of column ``o``) of existing LOs that do not
    decode, as a query of column ``o``; run ``define`` first, in the same transaction."""
    return sql.SQL(
        "SELECT DISTINCT s.o FROM ({}) s WHERE s.o IS NOT NULL AND "
        + lo_exists("s.o")
        + " AND NOT pg_temp.pgbd_decodes(s.o)"
    ).format(oids)


def define(conn: psycopg.Connection) -> None:
    """Make ``pg_temp.pgbd_decodes(oid)`` for this session (in its transaction)."""
    conn.execute(_FUNCTION)


def encoding(conn: psycopg.Connection) -> str:
    row = conn.execute("SELECT pg_catalog.getdatabaseencoding()").fetchone()
    assert row is not None
    return str(row[0])


def refusal(column: str, enc: str, oids: Sequence[int], online: bool = True) -> str:
    """The one line that refuses them (``online``: a run left to resume or abort)."""
    again = "run again (it resumes), or `migrate abort` the run" if online else "run again"
    return (
        f"{len(oids):,} LOs named by {column} are not valid {enc} text"
        f" ({listed(oids[:LIST_MAX], len(oids))}), so nothing was switched: make their"
        f" bytes valid {enc} or point their rows elsewhere and {again}; or move the"
        " column with --to bytea"
    )
