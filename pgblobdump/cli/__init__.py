"""The command line: a thin click layer over the core; errors become exit codes here only."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

import click

from pgblobdump import __version__, signals
from pgblobdump.cli import verbosity
from pgblobdump.cli.pipes import silence_stdout
from pgblobdump.errors import Interrupted, PgBlobDumpError, UsageError, from_os_error, scrub

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem


def report_error(e: PgBlobDumpError) -> int:
    """Print ``Error: ...`` as one line on stderr, passwords masked, and return the exit
    code for it."""
    message = scrub(" ".join(str(e).split())) or type(e).__name__
    click.echo(f"Error: {message}", err=True)
    return e.exit_code


def _database_error(e: Exception) -> PgBlobDumpError | None:
    """Our error for a psycopg exception the core let through (the last resort; the core
    translates its own with pg.connect.translate). psycopg is only imported if loaded."""
    psycopg = sys.modules.get("psycopg")
    if psycopg is None or not isinstance(e, psycopg.Error):
        return None
    from pgblobdump.pg.connect import translate

    return translate(e, "")


def _interrupted(e: KeyboardInterrupt) -> Interrupted:
    signum = signals.signum_of(e)
    return Interrupted(f"interrupted by {signals.name(signum)}", signum)


class Subcommand(NamedTuple):
    """A top-level command: where it lives (``module:attribute``, imported only when that
    command runs or completes) and its short help as ``pgblobdump --help`` lists it at its
    widest, so that neither the root's help nor a Tab completion imports any command
    (tests/cli/test_startup.py checks each against the command's own help)."""

    target: str
    short_help: str


SUBCOMMANDS = {
    "doctor": Subcommand(
        "pgblobdump.cli.doctor:doctor",
        "Show the PostgreSQL binaries found per major, GNU time, and what is missing.",
    ),
    "server": Subcommand(
        "pgblobdump.cli.server:server",
        "Start, stop and list embedded PostgreSQL clusters for trying and benchmarking.",
    ),
    "generate": Subcommand(
        "pgblobdump.cli.generate:generate",
        "Create many large objects fast, with sizes, content, owners, ACLs and comments.",
    ),
    "import": Subcommand(
        "pgblobdump.cli.files.importing:import_cmd",
        "Import every regular file under a directory or an S3 prefix as a large object,...",
    ),
    "toc": Subcommand(
        "pgblobdump.cli.toc:toc",
        "Read pg_dump custom and directory archives without a server or pg_restore.",
    ),
    "compare": Subcommand(
        "pgblobdump.cli.compare:compare",
        "Measure pg_dump/pg_restore and the packed archive on many large objects.",
    ),
    "dump": Subcommand(
        "pgblobdump.cli.packed.dump:dump",
        "Dump large objects into a packed archive: a few files whatever the count.",
    ),
    "restore": Subcommand(
        "pgblobdump.cli.packed.restore:restore",
        "Restore a packed archive's LOs: same OIDs, owners, ACLs and comments.",
    ),
    "verify": Subcommand(
        "pgblobdump.cli.packed.verify:verify",
        "Check a packed archive: every file, frame and LO checksum, the index against the...",
    ),
    "ls": Subcommand(
        "pgblobdump.cli.packed.browse:ls_cmd",
        "List a packed archive's LOs: OID, size, owner, ACL, comment (from its index); for...",
    ),
    "cat": Subcommand(
        "pgblobdump.cli.packed.browse:cat_cmd",
        "Write one LO's bytes to stdout or FILE, reading only its index block and frames...",
    ),
    "pack": Subcommand(
        "pgblobdump.cli.packed.pack:pack_cmd",
        "Pack the LOs of a pg_dump archive into a packed archive: a few files.",
    ),
    "unpack": Subcommand(
        "pgblobdump.cli.packed.pack:unpack_cmd",
        "Give back the pg_dump archive a packed archive was packed from, as a directory...",
    ),
    "migrate": Subcommand(
        "pgblobdump.cli.migrate:migrate",
        "Move LO columns to bytea (and back), online, verified and resumable.",
    ),
    "bench": Subcommand(
        "pgblobdump.cli.bench:bench",
        "Storage benchmarks from the seed articles: reads (file vs LO vs bytea) and TOAST.",
    ),
    "completion": Subcommand(
        "pgblobdump.cli.completion:completion",
        "Print the completion script of SHELL: commands, options and --major (from the...",
    ),
    "copy": Subcommand(
        "pgblobdump.cli.sync:copy_cmd",
        "Copy large objects from the database -d into the one --target-dbname names: same...",
    ),
    "merge": Subcommand(
        "pgblobdump.cli.packed.browse:merge_cmd",
        "Fold an incremental archive and its bases into one standalone archive, with no...",
    ),
    "sync": Subcommand(
        "pgblobdump.cli.sync:sync_cmd",
        "Bring the LOs of --target-dbname to equal those of -d as of one source snapshot,...",
    ),
    "inspect": Subcommand(
        "pgblobdump.cli.vacuum:inspect_cmd",
        "Report on a database's LOs from the catalogs: count and sizes (a histogram, over...",
    ),
    "export": Subcommand(
        "pgblobdump.cli.files.export:export_cmd",
        "Export large objects as files in a directory or objects under an S3 prefix, one...",
    ),
    "vacuum": Subcommand(
        "pgblobdump.cli.vacuum:vacuum_cmd",
        "Remove orphan LOs: those no column references (oid, lo, arrays, domains and...",
    ),
}
"""Each command's module, imported only when that command runs or its options complete:
``pgblobdump --help`` and ``pgblobdump <Tab>`` load none, ``toc`` never loads libpq."""


def _shortened(short_help: str, limit: int) -> str:
    """``short_help`` cut to ``limit`` columns as click cuts a command's help."""
    return click.Command(None, help=short_help).get_short_help_str(limit)


class _Group(click.Group):
    """The root group: loads commands lazily, and maps PgBlobDumpError (and Ctrl-C) to
    ``Error: ...`` and an exit code, the one place where that happens."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        listed = SUBCOMMANDS.get(cmd_name)
        if listed is None:
            return None
        module, _, attr = listed.target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        verbosity.add_to(command)  # -v, -q, --progress on every command
        if threading.current_thread() is threading.main_thread():
            signals.arm()  # loaded: act on signals (and on one that came meanwhile)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and their short help, as click lists them, from SUBCOMMANDS:
        importing none."""
        limit = formatter.width - 6 - max(map(len, SUBCOMMANDS))
        rows = [(name, _shortened(SUBCOMMANDS[name].short_help, limit))
                for name in self.list_commands(ctx)]  # fmt: skip
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """What Tab offers after ``pgblobdump``: the commands (from SUBCOMMANDS, importing
        none) and the root's options, as click offers them."""
        from click.shell_completion import CompletionItem

        commands = [
            CompletionItem(name, help=_shortened(SUBCOMMANDS[name].short_help, 45))
            for name in self.list_commands(ctx)
            if name.startswith(incomplete)
        ]
        return commands + click.Command.shell_complete(self, ctx, incomplete)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's main, with its usage errors printed as our one ``Error:`` line (no
        usage block) and exit status 2; -v, -q and --progress hold for this run only."""
        verbosity.reset()
        try:
            return self._main(args, prog_name, complete_var, standalone_mode, **extra)
        finally:
            verbosity.reset()

    def _main(
        self,
        args: Sequence[str] | None,
        prog_name: str | None,
        complete_var: str | None,
        standalone_mode: bool,
        **extra: Any,
    ) -> Any:
        run = super().main
        if not standalone_mode:
            return run(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = run(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:
            e.show()  # a group run with no command: its help, as click prints it
            sys.exit(e.exit_code)
        except click.ClickException as e:
            # Usage errors (exit 2) and click's own file errors (exit 1), on one line.
            message = e.format_message()
            err = (
                UsageError(message) if isinstance(e, click.UsageError) else PgBlobDumpError(message)
            )
            sys.exit(report_error(err))
        except click.Abort:
            sys.exit(report_error(Interrupted("interrupted")))
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PgBlobDumpError as e:
            ctx.exit(report_error(e))
        except KeyboardInterrupt as e:
            ctx.exit(report_error(_interrupted(e)))
        except BrokenPipeError:
            silence_stdout()  # the reader of stdout went away (| head): stop quietly, as cat
            ctx.exit(0)
        except OSError as e:
            # The safety net for files the core did not name itself (stdout on a full disk).
            ctx.exit(report_error(from_os_error(e)))
        except Exception as e:
            interrupt = signals.interrupt_in(e)
            if interrupt is not None:  # e.g. a module import cut short by Ctrl-C
                ctx.exit(report_error(_interrupted(interrupt)))
            translated = _database_error(e)
            if translated is None:
                raise
            ctx.exit(report_error(translated))


@click.group(
    cls=_Group, context_settings={"help_option_names": ["--help"], "max_content_width": 100}
)
@click.version_option(__version__, prog_name="pgblobdump")
@click.option(
    "--s3-endpoint",
    metavar="URL",
    help="The S3-compatible server of s3:// archives (else AWS_ENDPOINT_URL, a profile's"
    " endpoint_url, or AWS).",
)
def cli(s3_endpoint: str | None) -> None:
    """PostgreSQL large objects at scale: generate them, dump and restore them in packed
    archives (on disk or s3://), measure pg_dump/pg_restore of them, read pg_dump archives
    without a server, move LO columns to bytea.

    Data goes to stdout, progress and diagnostics to stderr. Every listing takes --json.

    Example: pgblobdump doctor
    """
    if s3_endpoint:
        # Read where every S3 setting is read (storage.s3config.S3Settings), like the AWS CLI's.
        os.environ["AWS_ENDPOINT_URL"] = s3_endpoint


verbosity.add_to(cli)  # -v, -q and --progress before the command too


def main() -> None:
    """Entry point of the ``pgblobdump`` console script: SIGTERM and SIGHUP are handled
    like Ctrl-C (clean-up, then exit 143 or 129)."""
    signals.defer()
    # psycopg logs "error ignored in rollback" when Ctrl-C lands mid-statement; our one
    # Error line says what happened, so keep its warnings off stderr.
    logging.getLogger("psycopg").addHandler(logging.NullHandler())
    logging.getLogger("psycopg").propagate = False
    try:
        cli(prog_name="pgblobdump")
    except KeyboardInterrupt as e:  # one that landed outside every command's handlers
        _exit_interrupted(report_error(_interrupted(e)))
    except SystemExit as e:
        if isinstance(e.code, int) and e.code in _SIGNAL_CODES:
            _exit_interrupted(e.code)
        raise


_SIGNAL_CODES = {128 + int(s) for s in signals.HANDLED}


def _exit_interrupted(code: int) -> NoReturn:
    """Exit with ``code`` after a handled interrupt, skipping interpreter shutdown.

    CPython 3.11 remembers a KeyboardInterrupt raised inside code run from a string (a
    dataclass's generated methods, while a module is imported) even when it was handled,
    and then ends the process by SIGINT instead of with our status. Clean-up has run by
    now (every resource is a context manager); only the streams need flushing."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
