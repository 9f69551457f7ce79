"""One compare session from a validated request: source, work folder, runs, results.

Everything a user can get wrong is checked (the request itself, then writable folders)
before any cluster starts; the command line only builds the request and shows the results.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pgblobdump.compare import results, safety
from pgblobdump.compare.commands import find_toolchains
from pgblobdump.compare.matrix import FORMATS, PG_DUMP, Plan, contenders, restore_modes
from pgblobdump.compare.runner import Runner, RunOptions, RunResult
from pgblobdump.compare.source import (
    Source,
    check_may_create_databases,
    embedded_source,
    external_source,
    lo_count,
    lo_data_bytes,
    restore_server,
    server_settings,
)
from pgblobdump.errors import UsageError
from pgblobdump.pgconstants import FIRST_OID, OID_MAX
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.servers import toolchain
from pgblobdump.servers.doctor import gnu_time
from pgblobdump.servers.toolchain import Toolchain, check_major
from pgblobdump.signals import uninterrupted
from pgblobdump.units import parse_count

"""Where progress lines go (the CLI sends them to stderr)."""


def _split(values: Sequence[str]) -> list[str]:
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def parse_los(values: Sequence[str]) -> tuple[int, ...]:
    """``--los 50k,200k --los 1M`` -> (50000, 200000, 1000000), sorted and distinct."""
    counts = {parse_count(v, "--los") for v in _split(values)}
    if not counts:
        raise UsageError("--los needs at least one count")
    return tuple(sorted(counts))


def parse_majors(text: str) -> tuple[int, ...]:
    try:
        majors = [int(p) for p in _split([text])]
    except ValueError as e:
        raise UsageError(f"--majors {text!r}: give major versions like 16,17,18") from e
    if not majors:
        raise UsageError("--majors needs at least one major version")
    return tuple(sorted({check_major(m) for m in majors}))


def parse_formats(text: str) -> tuple[str, ...]:
    formats = _split([text])
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UsageError(f"--formats {text!r}: choose from {', '.join(FORMATS)}")
    return tuple(dict.fromkeys(formats))


MAX_LOS = OID_MAX - FIRST_OID
"""The most LOs a database can hold: one per OID above initdb's (generate's limit too)."""


@dataclass(frozen=True)
class CompareRequest:
    """What to measure. ``conninfo`` None means a throwaway ``embedded_major`` source;
    with a conninfo and not ``may_generate`` the database is dumped at the count it has."""

    counts: tuple[int, ...]
    majors: tuple[int, ...]
    formats: tuple[str, ...]
    repeat: int = 1
    restore: bool = False
    jobs: int = 2
    transaction_size: int | None = 1000
    verify_sample: int = 10_000
    keep: bool = False
    workdir: Path | None = None
    results_dir: Path | None = None
    conninfo: str | None = None
    may_generate: bool = False
    embedded_major: int = 16
    pg_bin: tuple[Path, ...] = ()
    contenders: tuple[str, ...] = (PG_DUMP,)
    counts_given: bool = True
    """Whether ``counts`` were asked for: with a conninfo and not ``may_generate`` the
    database is dumped as it is, so asked-for counts would be ignored: refused."""

    def __post_init__(self) -> None:
        """UsageError for any bad combination, before anything starts."""
        if self.verify_sample < 0:
            raise UsageError(
                f"--verify-sample must be 0 (all LOs) or more (got {self.verify_sample})"
            )
        if self.may_generate and self.conninfo is None:
            raise UsageError("--generate applies to a database given with -d")
        if self.conninfo is not None and not self.may_generate and self.counts_given:
            raise UsageError(
                "--los with -d needs --generate (else the database is dumped as it is)"
            )
        too_many = [c for c in self.counts if c > MAX_LOS]
        if too_many:
            raise UsageError(
                f"--los {too_many[0]:,} is more LOs than a database can hold"
                f" (at most {MAX_LOS:,}: OIDs are 32-bit)"
            )
        if self.conninfo is None:
            check_major(self.embedded_major)
            check_can_dump(
                self.majors, self.embedded_major, f"--embedded {self.embedded_major}",
                also=f", or --embedded {min(self.majors)}",
            )  # fmt: skip


def plan_for(req: CompareRequest) -> Plan:
    """The run plan of a request (which checked itself when it was made)."""
    modes = restore_modes(req.jobs, req.transaction_size) if req.restore else ()
    return Plan(contenders(req.contenders, req.majors, req.formats), req.counts, req.repeat,
                modes)  # fmt: skip


def check_can_dump(majors: Sequence[int], server_major: int, server: str, also: str = "") -> None:
    """UsageError when a pg_dump of ``majors`` is older than the source server (pg_dump
    refuses a server newer than itself); ``also`` ends the advice."""
    older = [m for m in majors if m < server_major]
    if older:
        listed = ", ".join(map(str, older))
        raise UsageError(
            f"--majors {listed}: pg_dump {listed} cannot dump a PostgreSQL {server_major}"
            f" server ({server}); choose majors of {server_major} or later{also}"
        )


def server_major(version: str) -> int:
    """``16`` from ``16.14``, ``18`` from ``18beta1``."""
    found = re.match(r"\d+", version)
    if found is None:
        raise UsageError(f"cannot tell the major version of server version {version!r}")
    return int(found.group())


@dataclass(frozen=True)
class _Servers:
    """Server binaries of the throwaway clusters a run starts, found before any starts."""

    source: Toolchain | None
    restore: Toolchain | None


def _server_toolchains(req: CompareRequest, plan: Plan) -> _Servers:
    """The throwaway source's server binaries and, when restores surely need a throwaway
    cluster (an embedded source), the newest major's: a missing one is reported before
    the first cluster starts. (With -d, a restore cluster is needed only when the server
    is older than the newest major: known after connecting, still before any cluster.)"""
    if req.conninfo is not None:
        return _Servers(None, None)
    source = toolchain.find(req.embedded_major, toolchain.SERVER_TOOLS, req.pg_bin)
    restore = None
    if plan.restore_modes:
        restore = toolchain.find(max(plan.majors), toolchain.SERVER_TOOLS, req.pg_bin)
    return _Servers(source, restore)


@contextlib.contextmanager
def _source(req: CompareRequest, reporter: Reporter, tc: Toolchain | None) -> Iterator[Source]:
    if req.conninfo is not None:
        yield external_source(req.conninfo, req.may_generate)
        return
    reporter.note(f"starting a throwaway PostgreSQL {req.embedded_major} cluster as the source")
    with embedded_source(req.embedded_major, tc) as source:
        yield source


@contextlib.contextmanager
def _workdir(given: Path | None, keep: bool, reporter: Reporter) -> Iterator[Path]:
    if given is not None:
        yield given
        return
    made = Path(tempfile.mkdtemp(prefix="pgbd-compare-"))
    try:
        yield made
    finally:
        if keep:
            reporter.note(f"archives kept in {made}")
        else:
            with uninterrupted():
                shutil.rmtree(made, ignore_errors=True)


def _check_space(workdir: Path, plan: Plan, data_bytes: int) -> None:
    """The largest dump of each contender must fit in ``workdir`` (InsufficientResources
    with the numbers otherwise); each dump is checked again just before it runs."""
    for contender in plan.contenders:
        safety.check_space(workdir, contender, max(plan.counts), data_bytes)


def _check_source(req: CompareRequest, plan: Plan, source: Source) -> Plan:
    """What only the source can tell, checked before any dump and any restore cluster:
    pg_dump majors new enough for its server, and its LO count against --los (or, with
    -d and no --generate, the one count it is dumped at)."""
    if req.conninfo is not None:
        check_can_dump(plan.majors, server_major(source.server_version), source.description)
    have = lo_count(source.conninfo)
    if req.conninfo is not None and not req.may_generate:
        plan = Plan(plan.contenders, (have,), plan.repeat, plan.restore_modes)
    elif have > plan.counts[0]:
        raise UsageError(
            f"{source.description} holds {have:,} LOs, more than --los {plan.counts[0]:,};"
            " LOs are only ever added, so give counts of at least that"
        )
    return plan


def run(req: CompareRequest, reporter: Reporter = QUIET) -> results.Results:
    """Measure the plan; the results folder (if any) is written even when interrupted.

    Everything that can be checked before a cluster starts is: options, folders, client
    and server binaries, free space for the largest dump of empty LOs. What depends on the
    source (its server version, its LOs) is checked right after connecting to it, before
    a dump runs or a restore cluster starts.
    """
    plan = plan_for(req)
    if req.results_dir is not None:
        safety.writable_folder(req.results_dir, "--results")
    if req.workdir is not None:
        safety.writable_folder(req.workdir, "--workdir")
    gnu = gnu_time()
    toolchains = find_toolchains(req.majors, req.pg_bin)
    servers = _server_toolchains(req, plan)
    run_result = RunResult()
    with contextlib.ExitStack() as stack:
        wd = stack.enter_context(_workdir(req.workdir, req.keep, reporter))
        if req.conninfo is None:
            _check_space(wd, plan, 0)  # the embedded source: empty LOs only
        if gnu is None:
            reporter.note(
                "/usr/bin/time (GNU time) not found: measuring with the kernel's wait4 instead"
            )
        source = stack.enter_context(_source(req, reporter, servers.source))
        plan = _check_source(req, plan, source)
        settings = server_settings(source.conninfo)
        _check_space(wd, plan, lo_data_bytes(source.conninfo))
        restore_to = None
        newest = max(req.majors)
        if plan.restore_modes:
            if source.embedded or server_major(source.server_version) < newest:
                reporter.note(f"starting a throwaway PostgreSQL {newest} cluster to restore into")
                restore_to = stack.enter_context(restore_server(newest, servers.restore))
            else:
                check_may_create_databases(source.conninfo)
        restore_settings = server_settings(restore_to) if restore_to is not None else {}
        options = RunOptions(wd, gnu, keep=req.keep, verify_sample=req.verify_sample)
        complete = False
        try:
            Runner(plan, source, toolchains, options, reporter, run_result, restore_to).run()
            complete = True
        finally:
            meta = results.make_meta(plan, source.description, source.server_version,
                                     toolchains, gnu, results.argv_now(), complete,
                                     settings)  # fmt: skip
            if restore_to is not None:
                meta["restore_server"] = {"settings": restore_settings}
            res = results.Results(run_result.dumps, run_result.restores, run_result.commands, meta)
            if req.results_dir is not None:
                with uninterrupted():
                    results.save(res, req.results_dir)
                if not complete:  # else the command's last line says where they went
                    reporter.note(f"the runs finished so far are saved in {req.results_dir}")
    return res
