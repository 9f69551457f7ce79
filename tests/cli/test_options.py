"""Shared option groups: connection options twice in one command (a source and a target)."""

from __future__ import annotations

import click
from click.testing import CliRunner

from pgblobdump.cli.options import connection_options
from pgblobdump.pg.target import ConnectionTarget


@click.command()
@connection_options
@connection_options(prefix="target", dest="to")
def two(target: ConnectionTarget, to: ConnectionTarget) -> None:
    click.echo(f"{target.conninfo()} | {to.conninfo()}")


def test_a_source_and_a_target_in_one_command() -> None:
    result = CliRunner().invoke(
        two, ["-d", "src", "-p", "5433", "--target-dbname", "dst", "--target-host", "h2"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "dbname=src port=5433 | dbname=dst host=h2"


def test_the_target_options_are_long_only_and_named() -> None:
    help_text = CliRunner().invoke(two, ["--help"]).output
    assert "--target-username" in help_text and "of the target server" in help_text
    assert help_text.count("-d, --dbname") == 1
