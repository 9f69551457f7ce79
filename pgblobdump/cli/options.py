"""Option groups shared by commands, each defined once as a decorator."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from pgblobdump.cli.types import COLUMN, OIDS
from pgblobdump.pg.target import ConnectionTarget
from pgblobdump.report.formats import Format

F = TypeVar("F", bound=Callable[..., Any])


def connection_options(f: F | None = None, *, prefix: str = "", dest: str = "target") -> Any:
    """psql's ``-d -h -p -U``; unset ones fall back to PGDATABASE, PGHOST, PGPORT, PGUSER.

    The command receives one ``ConnectionTarget`` argument named ``dest`` instead of the
    four. With a ``prefix`` the same options come again, long-only, for a second server in
    one command: ``connection_options(prefix="target", dest="to")`` gives
    ``--target-dbname --target-host --target-port --target-username``. Usable bare
    (``@connection_options``) or called.
    """
    if f is None:
        return lambda g: connection_options(g, prefix=prefix, dest=dest)
    names = {k: f"{prefix}_{k}" if prefix else k for k in ("dbname", "host", "port", "user")}

    @functools.wraps(f)
    def wrapper(**kwargs: Any) -> Any:
        kwargs[dest] = ConnectionTarget(**{k: kwargs.pop(v) for k, v in names.items()})
        return f(**kwargs)

    dash = f"--{prefix}-" if prefix else "--"
    whose = f" of the {prefix} server" if prefix else ""

    def short(flag: str) -> list[str]:
        return [] if prefix else [flag]

    options = [
        click.option(*short("-d"), f"{dash}dbname", names["dbname"], metavar="DBNAME|CONNSTR",
                     help=f"Database name or full connection string{whose} (key=value or"
                     " postgresql:// URL)."),
        click.option(*short("-h"), f"{dash}host", names["host"],
                     help=f"Server host or socket directory{whose} (PGHOST)."),
        click.option(*short("-p"), f"{dash}port", names["port"],
                     help=f"Server port{whose} (PGPORT)."),
        click.option(*short("-U"), f"{dash}username", names["user"],
                     help=f"User name{whose} (PGUSER)."),
    ]  # fmt: skip
    decorated: Any = wrapper
    for opt in reversed(options):
        decorated = opt(decorated)
    return decorated


def output_options(f: F) -> F:
    """``--json``, ``--csv``, ``--markdown`` (default: a table); the command gets ``fmt``."""

    @functools.wraps(f)
    def wrapper(**kwargs: Any) -> Any:
        kwargs["fmt"] = Format(kwargs.get("fmt") or Format.TABLE)
        return f(**kwargs)

    decorated: Any = wrapper
    for flag, value, text in reversed(
        [
            ("--json", Format.JSON, "Print JSON to stdout."),
            ("--csv", Format.CSV, "Print CSV to stdout."),
            ("--markdown", Format.MARKDOWN, "Print a Markdown table to stdout."),
        ]
    ):
        decorated = click.option(flag, "fmt", flag_value=value.value, help=text)(decorated)
    return decorated  # type: ignore[no-any-return]


def pg_bin_option(f: F) -> F:
    """``--pg-bin DIR`` (repeatable): PostgreSQL bin directories to prefer over the rest."""
    return click.option(
        "--pg-bin",
        "pg_bin",
        multiple=True,
        type=click.Path(path_type=Path, file_okay=False),
        help="A PostgreSQL bin directory to use first (repeatable; also PGBLOBDUMP_PG<N>_BIN).",
    )(f)


def jobs_option(text: str) -> Callable[[F], F]:
    """``-j/--jobs N`` (default 1); the request checks its range and what it goes with."""
    return click.option("-j", "--jobs", type=int, default=1, show_default=True, help=text)


def detect_option(what: str) -> Callable[[F], F]:
    """``--detect auto|wal-summaries|full-pass`` (the choices are pg.changes.DETECT)."""
    return click.option(
        "--detect",
        type=click.Choice(["auto", "wal-summaries", "full-pass"]),
        default="auto",
        show_default=True,
        help=f"{what}: how the LOs whose pages were written since are found: from"
        " PostgreSQL 17+'s WAL summaries (summarize_wal = on), reading only the pages they"
        " name, or by a full pass over pg_largeobject. auto: the summaries where they cover"
        " the stretch, else the full pass; wal-summaries: refuse when they cannot be used.",
    )


ONLY_OIDS = click.option(
    "--oids", type=OIDS, default="", help="Only LOs with OIDs in this range (1000-5000)."
)
"""``--oids LO-HI``: only LOs with OIDs in this range (dump, ls, copy, sync)."""


REFERENCED_BY = click.option(
    "--referenced-by",
    type=COLUMN,
    multiple=True,
    metavar="TABLE.COLUMN",
    help="Only LOs this column of the source references (repeatable): an oid, an integer or"
    " numeric, or a text holding an OID's digits or <oid>.<ext>.",
)
"""``--referenced-by TABLE.COLUMN`` (copy, sync, export): only the LOs a column names."""
