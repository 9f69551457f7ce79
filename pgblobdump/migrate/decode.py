"""``--to text``: LOs whose bytes are not valid text in the database encoding.

``convert_from`` raises for them (invalid byte sequences, a NUL byte), failing the whole
statement it is in. A pass therefore runs its statements as they are, and only when one
raises asks the LOs of that statement's rows one at a time (``pgbd_decodes``, whose
exception handler costs a subtransaction a call: never paid by a pass that meets none).
They are refused by OID before anything is switched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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


class Found:
    """The LOs a pass of run ``run_id`` found not to decode, kept in the state table
    ``migration_undecodable`` (a resumed pass goes on leaving their rows out); ``oid`` is
    the OID a row's old value names (``Move.ref``)."""

    def __init__(
        self, conn: psycopg.Connection, schema: str, run_id: int, table: sql.Composable,
        oid: sql.Composable,
    ) -> None:  # fmt: skip
        self.conn, self.run_id, self.table, self.oid = conn, run_id, table, oid
        self.state = sql.SQL("{}.migration_undecodable").format(sql.Identifier(schema))
        self.any = bool(self.oids())

    def oids(self) -> tuple[int, ...]:
        rows = self.conn.execute(
            sql.SQL("SELECT oid FROM {} WHERE run_id = %s ORDER BY oid").format(self.state),
            (self.run_id,),
        ).fetchall()
        return tuple(int(r[0]) for r in rows)

    def left_out(self, where: sql.Composable) -> sql.Composable:
        """``where`` without the rows naming one of them."""
        if not self.any:
            return where
        return sql.SQL(
            "{w} AND ({o} IS NULL OR {o} NOT IN (SELECT u.oid FROM {t} u WHERE u.run_id = {id}))"
        ).format(w=where, o=self.oid, t=self.state, id=sql.Literal(self.run_id))

    def find(self, where: sql.Composable, params: Mapping[str, object]) -> int:
        """Record the LOs named by the rows of ``where`` that do not decode (each asked on
        its own); how many were new."""
        define(self.conn)
        rows = sql.SQL("SELECT {} AS o FROM {} WHERE {}").format(self.oid, self.table, where)
        cur = self.conn.execute(
            sql.SQL(
                "INSERT INTO {t} (run_id, oid) SELECT {id}, f.o FROM ({f}) f ON CONFLICT DO NOTHING"
            ).format(t=self.state, id=sql.Literal(self.run_id), f=failing(rows)),
            params,
        )
        self.any = True
        return cur.rowcount

    def forget(self) -> None:
        """For a pass from the start, which finds them again (their bytes may be fixed)."""
        if self.any:
            self.conn.execute(
                sql.SQL("DELETE FROM {} WHERE run_id = %s").format(self.state), (self.run_id,)
            )
            self.any = False

    def refusal(self, column: str) -> str | None:
        """The line refusing them, None when there are none."""
        found = self.oids() if self.any else ()
        return refusal(column, encoding(self.conn), found) if found else None
