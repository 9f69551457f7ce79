"""Execute a Plan: grow the source to each count, dump with every contender, measure,
optionally restore each archive into fresh databases and check every LO came back.

Only the dump and restore commands are measured; counting TOC entries, walking the
archive and checksumming happen after a measured run, never during one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pgblobdump.compare import commands, entries, safety
from pgblobdump.compare.archive_stats import archive_stats, remove_archive
from pgblobdump.compare.matrix import PACKED, Contender, Plan, RestoreMode
from pgblobdump.compare.records import DumpRecord, RestoreRecord
from pgblobdump.compare.source import (
    Checksum,
    Source,
    fresh_database,
    grow_to,
    lo_checksum,
    lo_count,
    lo_data_bytes,
)
from pgblobdump.pg.target import child_connection
from pgblobdump.proc import run_measured
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.servers.toolchain import Toolchain
from pgblobdump.signals import uninterrupted
from pgblobdump.units import format_bytes, plural

"""Receives one line of progress per step (the CLI prints it to stderr)."""


@dataclass(frozen=True)
class RunOptions:
    """How to run a plan. ``workdir`` holds archives while they are measured."""

    workdir: Path
    gnu_time: Path | None
    keep: bool = False
    verify_sample: int = 10_000
    prefer_native_toc: bool = True


@dataclass
class RunResult:
    """Records as they accumulate (the CLI saves them even when a run stops early)."""

    dumps: list[DumpRecord] = field(default_factory=list)
    restores: list[RestoreRecord] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


def dumped_line(where: str, wall_s: float, max_rss_kb: int, nbytes: int, files: int) -> str:
    """The line after a dump run: ``[1/4] pg_dump 17 -Fc of 1,000 LOs: 1.2 s, 45 MiB peak,
    4.0 MiB, 1 file`` (binary units, as every table)."""
    return (f"{where}: {wall_s:.1f} s, {max_rss_kb / 1024:.0f} MiB peak,"
            f" {format_bytes(nbytes)}, {plural(files, 'file')}")  # fmt: skip


class Runner:
    """Runs ``plan`` against ``source`` with the client tools in ``toolchains`` (by major).

    Restores go into fresh databases on the server at ``restore_conninfo`` (default: the
    source's server), which must be at least as new as every pg_restore used.
    """

    def __init__(
        self,
        plan: Plan,
        source: Source,
        toolchains: Mapping[int, Toolchain],
        options: RunOptions,
        reporter: Reporter = QUIET,
        result: RunResult | None = None,
        restore_conninfo: str | None = None,
    ) -> None:
        self.plan = plan
        self.source = source
        self.toolchains = toolchains
        self.options = options
        self.notify = reporter.note
        self.reporter = reporter
        self._runs_done = 0
        self.result = result if result is not None else RunResult()
        self.restore_conninfo = restore_conninfo or source.conninfo
        self._step = 0

    def run(self) -> RunResult:
        self.options.workdir.mkdir(parents=True, exist_ok=True)
        self.reporter.task("compare", self.plan.runs)
        for count in self.plan.counts:
            have = lo_count(self.source.conninfo)
            if have < count and self.source.generate:
                self.notify(
                    f"source: {have:,} LOs in {self.source.description};"
                    f" adding {count - have:,} to reach {count:,}"
                )
            grow_to(self.source, count)
            self.notify(f"source: {count:,} LOs in {self.source.description}")
            data_bytes = lo_data_bytes(self.source.conninfo)
            expected: Checksum | None = None
            if self.plan.restore_modes:
                expected = lo_checksum(self.source.conninfo, self.options.verify_sample)
            for rep, contender in self.plan.cells(count):
                self._one(count, rep, contender, data_bytes, expected)
        return self.result

    def _one(
        self, count: int, rep: int, contender: Contender, data_bytes: int,
        expected: Checksum | None,
    ) -> None:  # fmt: skip
        tc = self.toolchains[contender.major]
        out = self.options.workdir / commands.archive_name(contender, count, rep)
        remove_archive(out)  # a leftover of an interrupted run would change the figures
        safety.check_space(self.options.workdir, contender, count, data_bytes)
        self._step += 1
        where = f"[{self._step}/{self.plan.dump_runs}] {contender.label} of {count:,} LOs"
        keep = False
        try:
            self.notify(f"{where}: dumping")
            conninfo, env = child_connection(self.source.conninfo)
            argv = commands.dump_argv(contender, tc, conninfo, out)
            stats = run_measured(
                argv, gnu_time=self.options.gnu_time, env=env, what=contender.label
            )
            self.result.commands.append(stats.shell_command)
            astats = archive_stats(out)
            listing = commands.list_argv(contender, tc, out)
            by_type, via = (
                entries.entries_by_type(out, listing, self.options.prefer_native_toc)
                if listing is not None
                else ({}, entries.NO_TOC)
            )
            self._ran()
            self.result.dumps.append(
                DumpRecord(
                    count,
                    contender,
                    rep,
                    stats,
                    astats,
                    by_type,
                    via,
                    kept=str(out) if self.options.keep else None,
                )
            )
            self.notify(dumped_line(where, stats.wall_s, stats.max_rss_kb,
                                    astats.apparent_bytes, astats.files))  # fmt: skip
            if expected is not None:
                for mode in self.plan.modes_for(contender):
                    self._restore(count, rep, contender, tc, out, mode, expected, where)
            keep = self.options.keep
        finally:
            if not keep:
                with uninterrupted():  # a second Ctrl-C must not leave half an archive
                    remove_archive(out)

    def _ran(self) -> None:
        self._runs_done += 1
        self.reporter.progress(self._runs_done, 0)

    def _restore(
        self, count: int, rep: int, contender: Contender, tc: Toolchain, archive: Path,
        mode: RestoreMode, expected: Checksum, where: str,
    ) -> None:  # fmt: skip
        tool = "restore" if contender.tool == PACKED else "pg_restore"
        self.notify(f"{where}: {tool} {mode.label}")
        with fresh_database(self.restore_conninfo) as target:
            conninfo, env = child_connection(target)
            argv = commands.restore_argv(contender, tc, archive, conninfo, mode)
            stats = run_measured(
                argv, gnu_time=self.options.gnu_time, env=env, what=f"{contender.label} restore"
            )
            self.result.commands.append(stats.shell_command)
            got = lo_checksum(target, self.options.verify_sample)
        self._ran()
        ok = got == expected
        self.result.restores.append(
            RestoreRecord(count, contender, rep, mode, stats, got.count, got.checked, ok)
        )
        status = "all LOs back" if ok else f"MISMATCH ({got.count:,} of {expected.count:,})"
        self.notify(
            f"{where}: restore {mode.label}: {stats.wall_s:.1f} s,"
            f" {stats.max_rss_kb / 1024:.0f} MiB peak, {status}"
        )
