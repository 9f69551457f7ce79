"""The command line: a thin click layer over the core; errors become exit codes here only."""

from __future__ import annotations

from typing import Any

import click

from pgblobdump import __version__
from pgblobdump.errors import Interrupted, PgBlobDumpError


def report_error(e: PgBlobDumpError) -> int:
    """Print ``Error: ...`` as one line on stderr and return the exit code for it."""
    message = " ".join(str(e).split()) or type(e).__name__
    click.echo(f"Error: {message}", err=True)
    return e.exit_code


class _Group(click.Group):
    """The root group: maps PgBlobDumpError (and Ctrl-C) to ``Error: ...`` and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgBlobDumpError as e:
            ctx.exit(report_error(e))
        except KeyboardInterrupt:
            ctx.exit(report_error(Interrupted("interrupted")))


@click.group(
    cls=_Group, context_settings={"help_option_names": ["--help"], "max_content_width": 100}
)
@click.version_option(__version__, prog_name="pgblobdump")
def cli() -> None:
    """Dump, restore, measure and migrate PostgreSQL large objects at scale.

    Data goes to stdout, progress and diagnostics to stderr. Every listing takes --json.

    Example: pgblobdump doctor
    """


def _register() -> None:
    from pgblobdump.cli import doctor, generate, server

    cli.add_command(doctor.doctor)
    cli.add_command(server.server)
    cli.add_command(generate.generate)
    import importlib

    # Subsystems being built beside this one register when their module exists.
    for name in ("toc", "compare"):
        try:
            module = importlib.import_module(f"pgblobdump.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"pgblobdump.cli.{name}":
                raise
            continue
        cli.add_command(getattr(module, name))


_register()


def main() -> None:
    """Entry point of the ``pgblobdump`` console script."""
    cli(prog_name="pgblobdump")
