"""The start of a run: the checks every run makes before it changes anything, and the
one short exclusive moment that adds the new column, its check and the sync triggers."""

from __future__ import annotations

import dataclasses

import psycopg
from psycopg import sql

from pgblobdump.errors import DatabaseError, UsageError
from pgblobdump.migrate import columns, refs, state
from pgblobdump.migrate.advice import advise, column_sample, compress_ratio
from pgblobdump.migrate.columns import Column
from pgblobdump.migrate.locking import LockClock, exclusively
from pgblobdump.migrate.move import Move, check_name, trigger_ddl
from pgblobdump.migrate.options import RunOptions
from pgblobdump.migrate.reach import access as access
from pgblobdump.migrate.state import Migration
from pgblobdump.pg.names import clip, with_suffix
from pgblobdump.pg.query import scalar
from pgblobdump.pg.toast import lz4_available
from pgblobdump.report.reporter import Reporter

OLD_SUFFIX = {"bytea": "lo", "text": "lo", "lo": "bytea", "oid": "old", "s3": "lo", "s3lo": "key"}
"""What the old column is called after the switch: ``<column>_<suffix>``."""


def value_prefix(store: str | None, url: bool) -> str:
    """``s3``: what the new column's values start with (the OID follows)."""
    if store is None:
        return ""
    from pgblobdump.migrate.objects.target import Target

    return Target.parse(store, url).value_prefix


def _new_names(col: Column, to: str) -> tuple[str, str]:
    """A name for the new column while it fills, and for the old one after the switch."""
    # Cut by bytes (the server's limit is 63 bytes, not characters): a name the server
    # cut itself would not be the name recorded in the state, and both could become one.
    return f"{clip(col.name, 40)}_pgbd_new", f"{clip(col.name, 55)}_{OLD_SUFFIX[to]}"


def _free_name(conn: psycopg.Connection, relid: int, name: str) -> str:
    taken = {
        r[0]
        for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum > 0", (relid,)
        )
    }
    out, n = name, 1
    while out in taken:
        n += 1
        out = with_suffix(name, f"_{n}")
    return out


def start(
    conn: psycopg.Connection, col: Column, opts: RunOptions, reporter: Reporter, clock: LockClock
) -> Migration:
    """Check the column, then add the new column and the sync triggers (one short lock)."""
    if col.key is None:
        raise DatabaseError(
            f"table {col.table_name} has no primary key: add one (online batches need it),"
            " or use --in-place, which rewrites the table under an ACCESS EXCLUSIVE lock"
        )
    storage, compression, reach = prepare(conn, col, opts, reporter)
    notes = defaults_note(col, opts.to)
    if opts.to == "s3":
        from pgblobdump.migrate.objects.access import readers

        notes.extend(readers(conn, col))
    new_los = None
    if opts.to in ("lo", "s3lo"):
        new_los = new_lo_access(conn, col, opts.to, opts.owner, opts.allow_acl_widening)
        notes.append(new_los.note())
    rows_total = scalar(conn, sql.SQL("SELECT count(*) FROM {}").format(col.ident()))
    keep_old = opts.keep_old or opts.missing == "skip"
    new_name, old_name = (_free_name(conn, col.relid, n) for n in _new_names(col, opts.to))
    holder: list[int] = []

    def work() -> None:
        run_id = state.insert(
            conn, opts.schema, relid=col.relid, table_name=col.table_name,
            column_name=col.name, new_column=new_name, old_column=old_name,
            direction=opts.to, phase="filling", missing=opts.missing, keep_old=keep_old,
            storage=storage, compression=compression, rows_total=rows_total, notes=notes,
            allow_widening=opts.allow_acl_widening, source=col.form.name,
            target=opts.store, url=opts.url,
        )  # fmt: skip
        holder.append(run_id)
        state.claim(conn, run_id)  # held for the session, past this transaction
        m = Move(opts.to, col.ident(), col.name, new_name, col.key, opts.schema, run_id,  # type: ignore[arg-type]
                 col.form, value_prefix(opts.store, opts.url))  # fmt: skip
        if new_los is not None:
            for stmt in access.lo_maker_ddl(m.lo_fn, new_los):
                conn.execute(stmt)
        t, d = col.ident(), sql.Identifier(new_name)
        conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(t, d, sql.SQL(m.dst_type)))
        if storage:
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET STORAGE {}").format(
                    t, d, sql.SQL(storage)
                )
            )
        if compression:
            conn.execute(
                sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET COMPRESSION {}").format(
                    t, d, sql.SQL(compression)
                )
            )
        if col.not_null:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK ({} IS NOT NULL) NOT VALID").format(
                    t, sql.Identifier(check_name(run_id)), d
                )
            )
        for stmt in trigger_ddl(m, opts.schema, run_id, reach):
            conn.execute(stmt)

    exclusively(conn, col.ident(), f"preparing {col.qualified}", work, opts.lock, clock)
    state.update(conn, opts.schema, holder[0], lock_ms=clock.longest_ms)
    return state.load(conn, opts.schema, holder[0])


def prepare(
    conn: psycopg.Connection, col: Column, opts: RunOptions, reporter: Reporter
) -> tuple[str | None, str | None, access.Reach]:
    """The checks every run makes before it changes anything (type, rights, dependants,
    LOs that cannot move, access it would widen); for a move of bytes (to bytea or
    text), the new column's storage and compression. Also the column's reach, which the
    sync triggers check."""
    columns.check_migratable(col, opts.to)
    moves_bytes = opts.to in ("bytea", "text")
    reach = access.reach(conn, col.relid, col.name) if moves_bytes else None
    # --to oid moves no bytes: whoever reads the column reads OIDs, as before. --to s3://
    # gives no role of the database anything: the bucket's access is the user's (the
    # report says who could read the LOs).
    if not opts.allow_acl_widening and opts.to not in ("oid", "s3"):
        refuse_widening(conn, col, opts.to, reach, opts.owner)
    blocking = [d for d in columns.dependants(conn, col) if d.blocking]
    if blocking:
        listed = "; ".join(f"{d.kind} {d.name}" for d in blocking)
        raise UsageError(
            f"{col.qualified} has dependants a migration cannot carry over ({listed}):"
            " drop them first and recreate them after"
        )
    nobody = access.Reach(col.relid, col.name)
    if opts.to in ("lo", "s3lo"):
        return None, None, nobody
    found = refs.blockers(
        conn, refs.as_lo_column(col), refs_only=opts.to == "text",
        sizes=moves_bytes or opts.to == "s3",
    )  # fmt: skip
    if opts.to == "s3":  # an object has no 1 GB limit
        found = dataclasses.replace(found, over_1gb=0, over_1gb_sample=())
    check_refs(col, found, opts)
    if reach is None:
        return None, None, nobody
    lz4 = lz4_available(conn)
    sample = column_sample(conn, col.ident(), refs.as_lo_column(col).oid())
    advice = advise(compress_ratio(conn, sample), lz4)
    storage = (opts.storage or advice.storage).upper()
    compression = opts.compression or (advice.compression if storage == "EXTENDED" else None)
    if compression == "lz4" and not lz4:
        raise UsageError("this server was built without lz4: use --compression pglz")
    reporter.note(f"new column storage {storage}{f' ({compression})' if compression else ''}")
    return storage, compression, reach


def new_lo_access(
    conn: psycopg.Connection, col: Column, to: str, owner: str | None, widen: bool
) -> access.NewLoAccess:
    """Who the new LOs of a ``lo`` or ``s3lo`` run belong to and who may read them. To
    lo from bytea, the column's readers (they read those bytes today); from object keys
    (``s3lo``), nobody but the owner: the column held keys, not the bytes, and whoever
    could read the LOs the objects were made of is not known here, so granting the
    column's readers could open an owner-only LO to them. ``widen``
    (``--allow-acl-widening``) grants them all the same."""
    new = access.new_lo_access(conn, col.relid, col.name, owner)
    if to == "s3lo" and not widen:
        new = dataclasses.replace(new, readers=())
    return new


def refuse_widening(
    conn: psycopg.Connection, col: Column, to: str, reach: access.Reach | None,
    owner: str | None = None,
) -> None:  # fmt: skip
    """DatabaseError, naming the LOs, roles and paths, when the move would let some role
    read bytes it may not read today: to bytea, an LO some reader of the column (or of a
    view or SECURITY DEFINER function over it) may not read; to lo, a table whose rows
    row-level security hides from some of the readers the new LOs would be granted to
    (their owner ``owner`` included), or an owner that may not read the column."""
    if to in ("lo", "s3lo"):
        # Only called without --allow-acl-widening.
        new = new_lo_access(conn, col, to, owner, widen=False)
        wider = access.new_lo_widening(conn, col.relid, col.name, new)
        if not wider:
            return
        row = conn.execute(
            "SELECT relrowsecurity FROM pg_catalog.pg_class WHERE oid = %s", (col.relid,)
        ).fetchone()
        if row and row[0]:
            raise DatabaseError(
                f"{col.table_name} has row-level security, which an LO's ACL cannot express:"
                f" the new LOs would let {', '.join(wider)} read every row's LO with"
                " lo_get, not only the rows the policies show them. Keep the column bytea"
                " (the bytes stay under the policies), or rerun with --allow-acl-widening"
                " to accept that"
            )
        raise DatabaseError(
            f"the new LOs' owner {new.owner} may not read every row of {col.qualified} today,"
            " and an LO's owner reads it: name one that may with --owner, or rerun with"
            " --allow-acl-widening to accept that"
        )
    assert reach is not None
    widened = access.widening(conn, reach, refs.as_lo_column(col).select())
    if widened:
        raise DatabaseError(
            f"moving {col.qualified} into {to} would let roles read LOs they may not"
            f" read today: {widened.describe()}. Grant them SELECT on those LOs, revoke"
            " their SELECT on the column (or their use of the views and functions named),"
            " or rerun with --allow-acl-widening to accept that all of them read these bytes"
        )


def defaults_note(col: Column, to: str) -> list[str]:
    if col.default is None or to == "text":
        return []  # a text column's default goes on applying to text: carried over
    return [f"the old column's default ({col.default}) cannot apply to {to}: dropped"]


def check_refs(col: Column, st: refs.Blockers, opts: RunOptions) -> None:
    """Refuse, listing them, LOs that cannot move: unreadable, over 1 GB, dangling (and,
    in another form than oid, values that name no LO)."""
    if st.unreadable:
        raise DatabaseError(
            f"this role may not read the LOs of {st.unreadable:,} rows of {col.qualified}"
            f" ({refs.listed(st.unreadable_sample, st.unreadable)}): migrate as their owner"
            " or a superuser"
        )
    if st.over_1gb:
        raise UsageError(
            f"{st.over_1gb:,} rows of {col.qualified} name LOs over 1 GB, which cannot become"
            f" {opts.to} ({refs.listed(st.over_1gb_sample, st.over_1gb)}): keep them as LOs"
        )
    what = "name LOs that do not exist"
    if col.form.name != "oid":
        what = "hold values that name no LO (dangling OIDs, or not an OID's form)"
    if st.dangling and opts.missing == "error":
        raise DatabaseError(
            f"{st.dangling:,} rows of {col.qualified} {what}"
            f" ({refs.listed(st.dangling_sample, st.dangling)}); rerun with --missing null"
            " (those rows get NULL) or --missing skip (NULL, and the old column is kept)"
        )
    if st.dangling and col.not_null:
        raise UsageError(
            f"{col.qualified} is NOT NULL but {st.dangling:,} of its values name no LO:"
            " they cannot become NULL"
        )
