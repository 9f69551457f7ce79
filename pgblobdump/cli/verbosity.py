"""``-v/--verbose``, ``-q/--quiet`` and ``--progress``, on the root and on every command.

The settings are read by cli.progress (what to draw) and turned here into the handler of
the ``pgblobdump`` logger the core logs through: ``-v`` shows INFO (phases with timings,
the server and its settings, each SQL statement class), ``-vv`` DEBUG, ``-q`` errors only.
Kept light (no rich, no psycopg): every command loads it.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, fields
from typing import Any

import click

from pgblobdump import logs
from pgblobdump.pg.target import APPLICATION_NAME, set_application_name


@dataclass
class Settings:
    """What the options asked for; reset at the start of each run (tests run many in one
    process)."""

    quiet: bool = False
    verbose: int = 0
    progress: bool = False


SETTINGS = Settings()


def _write(line: str) -> None:
    """A line on stderr, above a progress bar when one is drawn."""
    progress = sys.modules.get("pgblobdump.cli.progress")
    if progress is not None:
        progress.emit_line(line)
    else:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


class _Handler(logging.Handler):
    """The core's log records on stderr as ``pgblobdump: message`` (sys.stderr looked up
    at each record, as click's test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _write(self.format(record))
        except Exception:
            self.handleError(record)


_HANDLER = _Handler()
_HANDLER.setFormatter(logging.Formatter("pgblobdump: %(message)s"))


def configure_logging(settings: Settings = SETTINGS) -> None:
    """The ``pgblobdump`` logger's level for these settings (its handler added once)."""
    logger = logging.getLogger(logs.ROOT)
    if _HANDLER not in logger.handlers:
        logger.addHandler(_HANDLER)
    if settings.quiet:
        level = logging.ERROR
    elif settings.verbose >= 2:
        level = logging.DEBUG
    elif settings.verbose == 1:
        level = logging.INFO
    else:
        level = logging.WARNING
    logger.setLevel(level)


def reset() -> None:
    for f in fields(Settings):
        setattr(SETTINGS, f.name, f.default)
    set_application_name(APPLICATION_NAME)
    configure_logging()


def _command_name(ctx: click.Context) -> str:
    """``pgblobdump migrate run`` whatever the program was called (tests: ``cli``)."""
    names = []
    c: click.Context | None = ctx
    while c is not None and c.parent is not None:
        names.append(c.info_name or "")
        c = c.parent
    return " ".join([APPLICATION_NAME, *reversed(names)])


def _apply(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if param.name == "verbose":
        SETTINGS.verbose += int(value or 0)
    elif param.name == "quiet":
        SETTINGS.quiet = SETTINGS.quiet or bool(value)
    elif param.name == "progress":
        SETTINGS.progress = SETTINGS.progress or bool(value)
    if ctx.parent is not None:
        set_application_name(_command_name(ctx))
    configure_logging()


def options() -> list[click.Option]:
    """The three options, new objects each time (one set per command)."""
    return [
        click.Option(["-v", "--verbose"], count=True, expose_value=False, is_eager=True,
                     callback=_apply, help="Say what runs, on stderr: phases and their"
                     " timings, the server and its settings, each kind of SQL statement"
                     " (-vv: every statement, not only each kind's first)."),
        click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, is_eager=True,
                     callback=_apply, help="Errors only: no progress, no notes."),
        click.Option(["--progress"], is_flag=True, expose_value=False, is_eager=True,
                     callback=_apply, help="Progress when stderr is not a terminal: a plain"
                     " line every 10 s (logs, CI)."),
    ]  # fmt: skip


def add_to(command: click.Command) -> click.Command:
    """``command`` (and, for a group, every command under it) with the three options."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_to(sub)
    if not getattr(command, "_pgblobdump_verbosity", False):
        command.params.extend(options())
        command._pgblobdump_verbosity = True  # type: ignore[attr-defined]
    return command
