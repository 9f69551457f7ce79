"""What ``restore --remap`` and ``copy --remap`` share in the command layer: the options
(``--remap``, ``--oid-range``, ``--map-out``), the refusal of their companions without
``--remap``, and the summary of a remapped run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pgblobdump.cli.types import COLUMN, OID_RANGE
from pgblobdump.errors import UsageError

if TYPE_CHECKING:
    from pgblobdump.cli.output import Format
    from pgblobdump.remap.common import RemapResult

F = TypeVar("F", bound=Callable[..., Any])


def remap_options(what: str, whose: str, columns: str, rows: str) -> Callable[[F], F]:
    """``--remap``, ``--oid-range``, ``--map-out`` and the option naming the columns to
    rewrite (``columns``) for a command that writes LOs (``what``: "Restore", "Copy");
    ``whose``: where its OIDs come from ("the archive"); ``rows``: what the column's help
    adds of where its rows came from."""

    def add(fn: F) -> F:
        fn = click.option(
            columns,
            type=COLUMN,
            multiple=True,
            metavar="TABLE.COLUMN",
            help="With --remap: rewrite this column's references to remapped LOs (repeatable;"
            f" {rows}): oid, lo, integers, numeric, text digits or <oid>.<ext>, arrays and"
            " domains of them.",
        )(fn)
        fn = click.option(
            "--map-out",
            type=click.Path(dir_okay=False, path_type=Path),
            metavar="FILE",
            help="With --remap: write the mapping as CSV (old_oid,new_oid).",
        )(fn)
        fn = click.option(
            "--oid-range",
            type=OID_RANGE,
            metavar="LO-HI",
            help="With --remap: take the new OIDs from this range (it must hold no LO);"
            f" default: just above every LO of the target and of {whose}.",
        )(fn)
        return click.option(
            "--remap",
            type=click.Choice(["taken", "all"]),
            is_flag=False,
            flag_value="taken",
            default=None,
            help=f"{what} at new OIDs the LOs whose OID the target has (taken, the default),"
            f" or every LO (all), and rewrite the {columns} columns' references to them; the"
            " mapping is kept in the target (schema pgblobdump_remap).",
        )(fn)

    return add


def refuse_without(remap: str | None, given: Sequence[tuple[str, object]]) -> None:
    """UsageError when an option of ``given`` (flag, value) is set without --remap."""
    if remap is None:
        named = [flag for flag, value in given if value]
        if named:
            raise UsageError(f"{named[0]} goes with --remap")


def show_remapped(title: str, result: RemapResult, map_out: Path | None, fmt: Format) -> None:
    """A remapped restore's or copy's summary: its counts and block, a note a column."""
    from pgblobdump.cli.output import emit
    from pgblobdump.report.summary import summary_table

    record = result.record()
    shown = {k: v for k, v in record.items() if k not in ("map", "rewrites")}
    shown["block"] = "..".join(map(str, result.block)) if result.block else "none"
    notes = [f"{w['column']}: {w['rows']:,} rows rewritten"
             + (f", {w['dangling']:,} dangling values left" if w["dangling"] else "")
             for w in result.rewrites]  # fmt: skip
    if map_out is not None:
        notes.append(f"mapping written to {map_out}")
    emit(summary_table(title, shown, notes), fmt, record)
