"""Option groups shared by commands, each defined once as a decorator."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from pgblobdump.cli.output import Format
from pgblobdump.pg.target import ConnectionTarget

F = TypeVar("F", bound=Callable[..., Any])


def connection_options(f: F) -> F:
    """psql's ``-d -h -p -U``; unset ones fall back to PGDATABASE, PGHOST, PGPORT, PGUSER.

    The command receives one ``target: ConnectionTarget`` argument instead of the four.
    """

    @functools.wraps(f)
    def wrapper(**kwargs: Any) -> Any:
        kwargs["target"] = ConnectionTarget(
            dbname=kwargs.pop("dbname"),
            host=kwargs.pop("host"),
            port=kwargs.pop("port"),
            user=kwargs.pop("user"),
        )
        return f(**kwargs)

    options = [
        click.option(
            "-d", "--dbname", metavar="DBNAME|CONNSTR",
            help="Database name or full connection string (key=value or postgresql:// URL).",
        ),
        click.option("-h", "--host", help="Server host or socket directory (PGHOST)."),
        click.option("-p", "--port", help="Server port (PGPORT)."),
        click.option("-U", "--username", "user", help="User name (PGUSER)."),
    ]  # fmt: skip
    decorated: Any = wrapper
    for opt in reversed(options):
        decorated = opt(decorated)
    return decorated  # type: ignore[no-any-return]


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
