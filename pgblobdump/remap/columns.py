"""The references of a remapped restore rewritten: each column in one transaction that
locks its table against writers, rewrites the rows naming a remapped OID
(refs/rewrite.py) and enters the column in the run's journal (``rewrites``): so a run
cut short anywhere rewrites each column once, never twice (after the rewrite, a new OID
may equal another LO's old one)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgblobdump.refs import recheck, rewrite
from pgblobdump.remap import store
from pgblobdump.report.reporter import Reporter
from pgblobdump.units import plural


def rewrite_all(
    conn: psycopg.Connection, run: str, cols: list[rewrite.RewriteColumn], reporter: Reporter
) -> None:
    """Rewrite ``cols`` (those not rewritten by this run already), saying what each did;
    then look at each once more (``_after``)."""
    done = store.rewritten(conn, run)
    mapping = store.mapping(run)
    for col in cols:
        if (col.relid, col.column) in done:
            reporter.note(f"{col.qualified}: rewritten already")
            continue
        with conn.transaction():
            rewrite.lock(conn, col)
            r = rewrite.rewrite(conn, col, mapping, count=False)
            store.mark_rewritten(conn, run, col.relid, col.column, col.qualified, r.rows, 0, ())
        reporter.note(f"{col.qualified}: {plural(r.rows, 'row')} rewritten")
    _after(conn, run, cols, mapping, reporter)


def _after(
    conn: psycopg.Connection, run: str, cols: list[rewrite.RewriteColumn],
    mapping: sql.Composable, reporter: Reporter,
) -> None:  # fmt: skip
    """Once every column is rewritten, each read once more: values naming an OID no LO
    has (dangling); values naming an LO the run did not write (in rows that came with
    the archive, someone else's: the source's dangling reference meets a target's LO);
    rows naming an old OID still, written after their column's turn (an application that
    went on writing). Each reported and kept in the run's journal, left as it is: what
    to do with them is the user's decision."""
    made = store.made(run)
    for col in cols:
        a = recheck.after(conn, col, mapping, made)
        store.mark_after(conn, run, col.relid, col.column, a.dangling, a.others, a.late)
        for (n, examples), what, tail in (
            (a.dangling, "name an OID no LO has", ""),
            (a.others, "name LOs this run did not write",
             "; if its rows came with the archive, they read another's bytes"),
        ):  # fmt: skip
            if n:
                shown = ", ".join(map(str, examples))
                reporter.note(f"{col.qualified}: {plural(n, 'value')} {what} (e.g. {shown}):"
                              f" left as they are{tail}")  # fmt: skip
        if a.late[0]:
            reporter.note(
                f"{col.qualified}: {plural(a.late[0], 'row')} written after its rewrite name"
                f" old OIDs of remapped LOs (e.g. {', '.join(map(str, a.late[1]))}): left as"
                f" they are; the mapping is in {store.SCHEMA}.map"
            )
