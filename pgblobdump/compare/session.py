"""One compare session from a validated request: source, work folder, runs, results.

Everything a user can get wrong is checked (``plan_for``, writable folders) before any
cluster starts; the command line only builds the request and shows the results.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pgblobdump.compare import results, safety
from pgblobdump.compare.commands import find_toolchains
from pgblobdump.compare.matrix import FORMATS, Plan, pg_dump_contenders, restore_modes
from pgblobdump.compare.runner import Runner, RunOptions, RunResult
from pgblobdump.compare.source import (
    Source,
    embedded_source,
    external_source,
    lo_count,
    restore_server,
)
from pgblobdump.errors import UsageError
from pgblobdump.pg.doctor import gnu_time
from pgblobdump.pg.toolchain import check_major
from pgblobdump.units import parse_count

Say = Callable[[str], None]
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


def plan_for(req: CompareRequest) -> Plan:
    """The run plan; raises UsageError for any bad combination, before anything starts."""
    if req.verify_sample < 0:
        raise UsageError(f"--verify-sample must be 0 (all LOs) or more (got {req.verify_sample})")
    if req.may_generate and req.conninfo is None:
        raise UsageError("--generate applies to a database given with -d")
    if req.conninfo is None:
        check_major(req.embedded_major)
    modes = restore_modes(req.jobs, req.transaction_size) if req.restore else ()
    return Plan(pg_dump_contenders(req.majors, req.formats), req.counts, req.repeat, modes)


@contextlib.contextmanager
def _source(req: CompareRequest, say: Say) -> Iterator[Source]:
    if req.conninfo is not None:
        yield external_source(req.conninfo, req.may_generate)
        return
    say(f"starting a throwaway PostgreSQL {req.embedded_major} cluster as the source")
    with embedded_source(req.embedded_major) as source:
        yield source


@contextlib.contextmanager
def _workdir(given: Path | None, keep: bool, say: Say) -> Iterator[Path]:
    if given is not None:
        yield given
        return
    made = Path(tempfile.mkdtemp(prefix="pgbd-compare-"))
    try:
        yield made
    finally:
        if keep:
            say(f"archives kept in {made}")
        else:
            shutil.rmtree(made, ignore_errors=True)


def run(req: CompareRequest, say: Say) -> results.Results:
    """Measure the plan; the results folder (if any) is written even when interrupted."""
    plan = plan_for(req)
    if req.results_dir is not None:
        safety.writable_folder(req.results_dir, "--results")
    if req.workdir is not None:
        safety.writable_folder(req.workdir, "--workdir")
    gnu = gnu_time()
    if gnu is None:
        say("/usr/bin/time (GNU time) not found: measuring with the kernel's wait4 instead")
    toolchains = find_toolchains(req.majors, req.pg_bin)
    run_result = RunResult()
    with contextlib.ExitStack() as stack:
        wd = stack.enter_context(_workdir(req.workdir, req.keep, say))
        source = stack.enter_context(_source(req, say))
        if req.conninfo is not None and not req.may_generate:
            plan = Plan(plan.contenders, (lo_count(source.conninfo),), plan.repeat,
                        plan.restore_modes)  # fmt: skip
        restore_to = None
        newest = max(req.majors)
        if plan.restore_modes and (
            source.embedded or int(source.server_version.split(".")[0]) < newest
        ):
            say(f"starting a throwaway PostgreSQL {newest} cluster to restore into")
            restore_to = stack.enter_context(restore_server(newest))
        options = RunOptions(wd, gnu, keep=req.keep, verify_sample=req.verify_sample)
        complete = False
        try:
            Runner(plan, source, toolchains, options, say, run_result, restore_to).run()
            complete = True
        finally:
            meta = results.make_meta(plan, source.description, source.server_version,
                                     toolchains, gnu, results.argv_now(), complete)  # fmt: skip
            res = results.Results(run_result.dumps, run_result.restores, run_result.commands, meta)
            if req.results_dir is not None:
                results.save(res, req.results_dir)
                say(f"results saved in {req.results_dir}")
    return res
