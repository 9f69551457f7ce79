"""The references of a remapped restore rewritten: each column in one transaction that
locks its table against writers, rewrites the rows naming a remapped OID
(refs/rewrite.py) and enters the column in the run's journal (``rewrites``): so a run
cut short anywhere rewrites each column once, never twice (after the rewrite, a new OID
may equal another LO's old one)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgblobdump.refs import rewrite
from pgblobdump.remap import store
from pgblobdump.report.reporter import Reporter
from pgblobdump.units import plural


def rewrite_all(
    conn: psycopg.Connection, run: str, cols: list[rewrite.RewriteColumn], reporter: Reporter
) -> None:
    """Rewrite ``cols`` (those not rewritten by this run already), saying what each did."""
    done = store.rewritten(conn, run)
    mapping = store.mapping(run)
    for col in cols:
        if (col.relid, col.column) in done:
            reporter.note(f"{col.qualified}: rewritten already")
            continue
        with conn.transaction():
            rewrite.lock(conn, col)
            r = rewrite.rewrite(conn, col, mapping)
            store.mark_rewritten(conn, run, col.relid, col.column, col.qualified, r.rows,
                                 r.dangling, r.examples)  # fmt: skip
        said = f"{col.qualified}: {plural(r.rows, 'row')} rewritten"
        if r.dangling:
            shown = ", ".join(map(str, r.examples))
            said += (f"; {plural(r.dangling, 'value')} name an OID no LO has (e.g. {shown}):"
                     " left as they are")  # fmt: skip
        reporter.note(said)
    _late(conn, run, cols, mapping, reporter)


def _late(
    conn: psycopg.Connection, run: str, cols: list[rewrite.RewriteColumn],
    mapping: sql.Composable, reporter: Reporter,
) -> None:  # fmt: skip
    """Once every column is rewritten: the rows that name an old OID still, written after
    their column's turn (an application that went on writing), and the values naming an
    LO the run did not write (in rows that came with the archive, someone else's: the
    source's dangling reference meets a target's LO), reported and kept in the run's
    journal, never left unsaid; what to do with them is the user's decision."""
    made = store.made(run)
    for col in cols:
        rows, examples = rewrite.stale(conn, col, mapping)
        n, theirs = rewrite.others(conn, col, made)
        store.mark_late(conn, run, col.relid, col.column, (rows, examples), (n, theirs))
        if n:
            reporter.note(
                f"{col.qualified}: {plural(n, 'value')} name LOs this run did not write (e.g."
                f" {', '.join(map(str, theirs))}): left as they are; if its rows came with"
                " the archive, they read another's bytes"
            )
        if rows:
            reporter.note(
                f"{col.qualified}: {plural(rows, 'row')} written after its rewrite name old"
                f" OIDs of remapped LOs (e.g. {', '.join(map(str, examples))}): left as they"
                f" are; the mapping is in {store.SCHEMA}.map"
            )
