"""``migrate plan``: which columns reference LOs, what moving each to bytea would meet, and
the storage to give the new column.

A column is a candidate when its type is ``oid`` or the ``lo`` domain, or when it is named
(a text, varchar, char, integer, bigint or numeric column holding OIDs, read by its form:
``forms``); it is confirmed as holding LO references when a sample of its values finds LOs
(an oid column of catalog OIDs does not). Orphans are counted the way vacuumlo finds them:
LOs that no oid or lo column (nor a named column) of any table references.

Storage advice comes from ``advice`` (a zstd sample) or, with ``--measure``, from
``measure`` (the server itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError
from pgblobdump.migrate import columns, refs
from pgblobdump.migrate.advice import Storage, advise, compress_ratio, sample_percent
from pgblobdump.migrate.measure import advise_measured
from pgblobdump.migrate.measure import measure as measure_storages
from pgblobdump.migrate.reach import access as access
from pgblobdump.migrate.refs import LoColumn, RefStats
from pgblobdump.pg import catalog
from pgblobdump.pg.query import one, scalar
from pgblobdump.pg.toast import lz4_available
from pgblobdump.units import format_bytes

SAMPLE_VALUES = 1000
"""Values of an oid column looked up in pg_largeobject_metadata to confirm it holds LOs."""
TOAST_THRESHOLD = 2032
"""Values shorter than this (TOAST_TUPLE_THRESHOLD at 8 kB pages) stay in the heap row."""


@dataclass
class ColumnPlan:
    column: str
    type: str
    confirmed: bool
    sampled: int
    sampled_los: int
    primary_key: list[str] | None
    stats: RefStats | None = None
    widening: access.Widening | None = None
    """LOs some reader of the column (or of a path) may not read: moving them would widen
    access."""
    paths: list[str] = field(default_factory=list)
    """Views over the column and SECURITY DEFINER routines reading it: their users read
    what it holds (``migrate/reach/paths.py``)."""
    shared_with_other_columns: int = 0
    compress_ratio: float | None = None
    storage: Storage | None = None
    space_needed: int = 0
    lo_manage_triggers: list[str] = field(default_factory=list)
    dependants: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    form: str = "oid"
    """How its values name LOs (``forms.FORMS``)."""
    inline: int | None = None
    """Another form than oid: rows whose value is in no reference's form (a mixed
    column's inline text)."""


@dataclass
class Plan:
    database: str
    server_version: str
    lz4: bool
    large_objects: int
    orphans: int
    columns: list[ColumnPlan]
    notes: list[str] = field(default_factory=list)


def confirm(conn: psycopg.Connection, col: LoColumn) -> tuple[int, int]:
    """``(values sampled, of them naming an existing LO)``."""
    row = one(
        conn,
        sql.SQL(
            "SELECT count(*), count(m.oid) FROM ({} LIMIT %s) s"
            " LEFT JOIN pg_catalog.pg_largeobject_metadata m ON m.oid = s.o"
        ).format(col.select()),
        (SAMPLE_VALUES,),
    )
    return int(row[0]), int(row[1])


def plan(
    conn: psycopg.Connection, database: str, measure: bool = False,
    named: Sequence[str] = (),
) -> Plan:  # fmt: skip
    """Look at every oid/lo column of the database, and the columns ``named``
    (``[schema.]table.column`` of a type holding OIDs), read only; temporary tables only."""
    lz4 = lz4_available(conn)
    version = str(one(conn, "SHOW server_version")[0])
    total_los = catalog.count(conn)
    cols = [c for c in refs.lo_columns(conn) if c.readable]
    for spec in named:
        extra = refs.named(conn, columns.resolve(conn, spec))
        if not extra.readable:
            raise DatabaseError(
                f"this role cannot read all of {extra.qualified} (no SELECT, or row"
                " security): plan it as a role that can"
            )
        if all((c.relid, c.name) != (extra.relid, extra.name) for c in cols):
            cols.append(extra)
    plans: list[ColumnPlan] = []
    temps: list[str] = []
    for i, col in enumerate(cols):
        sampled, hits = confirm(conn, col)
        key = columns.primary_key(conn, col.relid)
        cp = ColumnPlan(
            column=col.qualified, type=col.type, confirmed=col.type == "lo" or hits > 0,
            sampled=sampled, sampled_los=hits, primary_key=list(key.names) if key else None,
            form=col.form.name,
        )  # fmt: skip
        temp = f"pgbd_refs_{i}"
        refs.collect(conn, col, temp)
        temps.append(temp)
        plans.append(cp)
    if temps:
        union = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT o FROM pg_temp.{}").format(sql.Identifier(t)) for t in temps
        )
        conn.execute("DROP TABLE IF EXISTS pg_temp.pgbd_all_refs")
        conn.execute(
            sql.SQL(
                "CREATE TEMP TABLE pgbd_all_refs AS SELECT o, count(*) AS cols FROM ({}) u"
                " GROUP BY o"
            ).format(union)
        )
        conn.execute("ALTER TABLE pg_temp.pgbd_all_refs ADD PRIMARY KEY (o)")
        orphans_sql = (
            "SELECT count(*) FROM pg_catalog.pg_largeobject_metadata m"
            " WHERE NOT EXISTS (SELECT 1 FROM pg_temp.pgbd_all_refs a WHERE a.o = m.oid)"
        )
    else:
        orphans_sql = "SELECT count(*) FROM pg_catalog.pg_largeobject_metadata"
    orphans = scalar(conn, orphans_sql)
    for col, cp, temp in zip(cols, plans, temps, strict=True):
        if cp.confirmed:
            _detail(conn, col, cp, temp, lz4, measure)
    notes = []
    if not lz4:
        notes.append(
            "this server was built without lz4: compressible data gets pglz (slower to"
            " compress and read than lz4)"
        )
    if orphans:
        notes.append(
            f"{orphans:,} LOs are referenced by no oid or lo column (orphans, as vacuumlo"
            " counts them)"
        )
    return Plan(database, version, lz4, total_los, orphans, plans, notes)


def _detail(
    conn: psycopg.Connection, col: LoColumn, cp: ColumnPlan, temp: str, lz4: bool, measure: bool
) -> None:
    st = refs.stats(conn, col, temp)
    cp.stats = st
    if col.form.name != "oid":
        cp.inline = scalar(
            conn,
            sql.SQL("SELECT count(*) FROM {} WHERE {} IS NOT NULL AND {} IS NULL").format(
                sql.Identifier(col.schema, col.table), sql.Identifier(col.name), col.oid()
            ),
        )
    cp.shared_with_other_columns = scalar(
        conn,
        sql.SQL(
            "SELECT count(*) FROM pg_temp.{} r JOIN pg_temp.pgbd_all_refs a USING (o)"
            " WHERE a.cols > 1"
        ).format(sql.Identifier(temp)),
    )
    present = sql.SQL("SELECT o FROM pg_temp.{} WHERE present").format(sql.Identifier(temp))
    reach = access.reach(conn, col.relid, col.name)
    cp.paths = [str(p) for p in reach.paths]
    cp.widening = access.widening(conn, reach, present)
    rel = sql.SQL("pg_temp.{}").format(sql.Identifier(temp))
    sample = sql.SQL(
        "SELECT o FROM {} TABLESAMPLE BERNOULLI ({}) WHERE present AND readable"
    ).format(rel, sql.Literal(sample_percent(conn, rel)))
    cp.compress_ratio = compress_ratio(conn, sample)
    if measure:
        cp.storage = advise_measured(measure_storages(conn, sample, lz4))
    else:
        cp.storage = advise(cp.compress_ratio, lz4)
    full = columns.describe(conn, col.relid, col.name)
    cp.lo_manage_triggers = columns.lo_manage_triggers(conn, full)
    deps = columns.dependants(conn, full)
    cp.dependants = [f"{d.kind} {d.name}" for d in deps if not d.blocking]
    cp.blocking = [f"{d.kind} {d.name}" for d in deps if d.blocking]
    heap = scalar(conn, "SELECT pg_relation_size(%s)", (col.relid,))
    kept = 1.0 if cp.storage.compression is None else (cp.compress_ratio or 1.0)
    copies = int(st.total_bytes * kept)
    cp.space_needed = copies + heap
    cp.notes = _notes(cp, st, copies, heap)


def _notes(cp: ColumnPlan, st: RefStats, copies: int, heap: int) -> list[str]:
    notes = []
    if cp.primary_key is None:
        notes.append(
            "no primary key: `migrate run` refuses it (add one), or use --in-place, which"
            " rewrites the table under an ACCESS EXCLUSIVE lock for the whole run"
        )
    if cp.inline:
        notes.append(
            f"{cp.inline:,} rows hold values in no OID's form ({cp.form}): inline values,"
            " which --to text keeps and --to bytea or oid refuse unless --missing null or skip"
        )
    if st.dangling and cp.form == "text":
        notes.append(
            f"{st.dangling:,} values are OID digits naming no LO"
            f" ({refs.listed(st.dangling_sample, st.dangling)}): --to text keeps them as"
            " text; --to bytea or oid refuse them unless --missing null or skip"
        )
    elif st.dangling:
        notes.append(
            f"{st.dangling:,} dangling references (no such LO:"
            f" {refs.listed(st.dangling_sample, st.dangling)}): choose --missing null or skip"
        )
    if st.over_1gb_count:
        notes.append(
            f"{st.over_1gb_count:,} LOs are over 1 GB and cannot become bytea"
            f" ({refs.listed(st.over_1gb, st.over_1gb_count)}): keep them as LOs"
        )
    if st.unreadable:
        notes.append(
            f"{st.unreadable:,} LOs may not be read by this role"
            f" ({refs.listed(st.unreadable_sample, st.unreadable)}): migrate as their owner"
            " or a superuser"
        )
    if cp.widening:
        notes.append(
            f"moving it widens access: {cp.widening.describe()}; `migrate run` refuses"
            " them unless --allow-acl-widening (or grant SELECT on those LOs first)"
        )
    if st.shared_rows:
        notes.append(f"{st.shared_rows:,} LOs are named by several rows: each row gets a copy")
    if cp.shared_with_other_columns:
        notes.append(
            f"{cp.shared_with_other_columns:,} LOs are also referenced from other columns:"
            " --unlink leaves them"
        )
    for t in cp.lo_manage_triggers:
        notes.append(f"lo_manage trigger {t} is dropped at the switch")
    for d in cp.blocking:
        notes.append(f"{d} depends on the column: drop it first and recreate it after")
    if st.present and st.total_bytes / st.present < TOAST_THRESHOLD:
        notes.append("values average under ~2 KB: they will mostly stay inline in the heap")
    notes.append(
        f"needs about {format_bytes(copies + heap)} more while both copies exist"
        f" ({format_bytes(copies)} of bytea, {format_bytes(heap)} of new row versions) and"
        f" about {format_bytes(copies)} of WAL; LO space is freed only by --unlink and VACUUM"
    )
    return notes
