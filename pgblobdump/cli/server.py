"""``pgblobdump server start|stop|status``: named embedded clusters that outlive the command."""

from __future__ import annotations

from pathlib import Path

import click

from pgblobdump.cli.completion import complete_major
from pgblobdump.cli.options import output_options, pg_bin_option
from pgblobdump.cli.output import Format, emit
from pgblobdump.cli.progress import note
from pgblobdump.cli.types import SIZE
from pgblobdump.report import Column, Table
from pgblobdump.servers.cluster import LAPTOP_WAL, ClusterInfo, default_base_dir, wal_setting
from pgblobdump.servers.clusters import (
    DEFAULT_MAJOR,
    all_clusters,
    cluster_in,
    datadir_for,
    existing,
)


@click.group()
def server() -> None:
    """Start, stop and list embedded PostgreSQL clusters for trying and benchmarking.

    Clusters live under $PGBLOBDUMP_HOME (default ~/.local/state/pgblobdump, or
    /var/tmp/pgblobdump-root as root), one folder per name, with benchmark settings
    (fsync off), the server's default lock limits and its default max_wal_size (1GB:
    WAL kept on disk between checkpoints; a benchmark raises it with --max-wal-size).

    Example: pgblobdump generate -d "$(pgblobdump server start --major 17)" -n 1000
    """


_name = click.option("--name", help="Cluster name (default: pg<major>).")
_datadir_opt = click.option(
    "--datadir", type=click.Path(path_type=Path, file_okay=False), help="Data directory to use."
)
_major = click.option(
    "--major",
    "-m",
    type=int,
    shell_complete=complete_major,
    help=f"PostgreSQL major version (default: the cluster's own, or {DEFAULT_MAJOR}).",
)


@server.command()
@_major
@_name
@_datadir_opt
@click.option("--port", type=int, help="TCP port on 127.0.0.1 (default: a free one).")
@click.option("--url", is_flag=True, help="Print a postgresql:// URL (TCP) instead of a conninfo.")
@click.option(
    "--max-wal-size",
    type=SIZE,
    help=f"WAL kept on disk between checkpoints (a new cluster: {LAPTOP_WAL}). A benchmark"
    " writing GBs raises it, e.g. 8GiB, so no checkpoint falls inside a run; given, it"
    " applies to an existing (or running) cluster too.",
)
@pg_bin_option
def start(
    major: int | None,
    name: str | None,
    datadir: Path | None,
    port: int | None,
    url: bool,
    max_wal_size: int | None,
    pg_bin: tuple[Path, ...],
) -> None:
    """Start (creating if needed) a cluster and print its connection string on stdout.

    A cluster started before comes back on its port; when another process holds that port
    now, it starts on a free one, says so, and keeps the new one.

    Example: pgblobdump server start --major 17 --name bench
    """
    wal = {} if max_wal_size is None else {"max_wal_size": wal_setting(max_wal_size)}
    c = cluster_in(major, datadir_for(name, major, datadir), pg_bin, port)
    if c.initialised:
        c.configure(wal)
    else:
        c.settings.update(wal)
    info = c.start()
    if info.moved_from is not None:
        note(f"port {info.moved_from} is taken by another process: the cluster moves to"
             f" port {info.port} (its connection string changes)")  # fmt: skip
    note(f"PostgreSQL {info.version} running in {info.datadir} on port {info.port}; it keeps"
         f" up to {c.configured('max_wal_size') or '1GB'} of WAL (--max-wal-size)")  # fmt: skip
    click.echo(info.url() if url else info.conninfo())


@server.command()
@_major
@_name
@_datadir_opt
@click.option("--remove", is_flag=True, help="Delete the data directory after stopping.")
@pg_bin_option
def stop(
    major: int | None,
    name: str | None,
    datadir: Path | None,
    remove: bool,
    pg_bin: tuple[Path, ...],
) -> None:
    """Stop a cluster started with ``server start`` (and delete it with --remove).

    A cluster that is not running is left as it is (exit 0, saying so).

    Example: pgblobdump server stop --major 17 --remove
    """
    path = datadir_for(name, major, datadir)
    c = existing(path, major, pg_bin)
    c.remove = remove
    if c.stop():
        note(f"stopped {path}" + (" and removed it" if remove else ""))
    else:
        note(f"{path} was not running" + ("; removed it" if remove else ""))


def status_table(infos: list[ClusterInfo]) -> Table:
    return Table(
        [
            Column("name"),
            Column("version"),
            Column("running", show=lambda v: "yes" if v else "no"),
            Column("port", numeric=True, show=str),
            Column("conninfo", fold=True),  # to copy whole: wrapped, never cut
            Column("datadir", "data directory", fold=True),
        ],
        [
            {
                "name": i.datadir.name,
                "version": i.version,
                "running": i.running,
                "port": i.port,
                "conninfo": i.conninfo() if i.running else "",
                "datadir": str(i.datadir),
            }
            for i in infos
        ],
        title=f"clusters under {default_base_dir()}",
    )


@server.command()
@output_options
@pg_bin_option
def status(fmt: Format, pg_bin: tuple[Path, ...]) -> None:
    """List the clusters under the clusters folder and whether each runs.

    With none, says so on stderr; --json prints [] and --csv its header line.

    Example: pgblobdump server status --json
    """
    infos = all_clusters(pg_bin)
    if not infos:
        note(f"no clusters under {default_base_dir()}; start one with: pgblobdump server start")
        if fmt in (Format.TABLE, Format.MARKDOWN):
            return
    emit(status_table(infos), fmt)
