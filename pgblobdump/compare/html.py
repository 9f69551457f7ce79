"""A compare run as DIR/report.html: every table, the plots inline, the commands run, and
the machine, tools and server settings, readable offline (harness/html.py writes it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pgblobdump.compare import report
from pgblobdump.compare.matrix import Contender, RestoreMode
from pgblobdump.compare.plots import PLOT_NAME, RESTORE_PLOT_NAME
from pgblobdump.compare.results import Results
from pgblobdump.errors import PgBlobDumpError, from_os_error
from pgblobdump.harness import html
from pgblobdump.report.table import Table
from pgblobdump.units import format_bytes

_CAPTIONS = {
    PLOT_NAME: "dumps: wall time, peak RSS, archive size and files per contender",
    RESTORE_PLOT_NAME: "restores: wall time and peak RSS per contender and mode",
}


def _html_table(t: Table) -> html.HtmlTable:
    return html.HtmlTable(
        t.title, [c.heading for c in t.columns], t.cells(), [c.numeric for c in t.columns],
        list(t.notes),
    )  # fmt: skip


def _plan(plan: Any) -> dict[str, Any]:
    """The plan as people read it: ``pg_dump 16 -Fc``, ``-j 2 --transaction-size 1000``."""
    if not isinstance(plan, dict):
        return {}
    try:
        contenders = [Contender(**c).label for c in plan.get("contenders", [])]
        modes = [RestoreMode(**m).label for m in plan.get("restore_modes", [])]
    except (TypeError, PgBlobDumpError):  # a results.json from elsewhere: show it raw
        return {"plan": plan}
    return {
        "contenders": ", ".join(contenders),
        "LO counts": ", ".join(f"{n:,}" for n in plan.get("counts", [])),
        "repeats": plan.get("repeat"),
        "restore modes": ", ".join(modes) or "no restores",
    }


def _facts(meta: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    source = dict(meta.get("source", {}))
    settings = source.pop("settings", None) or {}
    restore_settings = (meta.get("restore_server") or {}).get("settings") or {}
    run = {
        "created": meta.get("created"),
        "invocation": meta.get("invocation"),
        "complete": meta.get("complete"),
        "GNU time": meta.get("gnu_time") or "not found (the kernel's wait4 measured)",
        **_plan(meta.get("plan")),
    }
    tools = {
        f"PostgreSQL {major}": f"{tc.get('version')} in {tc.get('bin_dir')} ({tc.get('source')})"
        for major, tc in sorted(meta.get("toolchains", {}).items())
    }
    machine = dict(meta.get("machine", {}))
    memory = re.fullmatch(r"(\d+) kB", str(machine.get("memory") or ""))
    if memory:  # /proc/meminfo's MemTotal, in KiB
        machine["memory"] = format_bytes(int(memory[1]) * 1024)
    facts = [("run", run), ("machine", machine), ("source", source)]
    if settings:
        facts.append(("source server settings", dict(settings)))
    if restore_settings:
        facts.append(("restore server settings (a throwaway cluster)", dict(restore_settings)))
    facts.append(("client tools", tools))
    return facts


def build(results: Results, plots_folder: Path) -> html.HtmlReport:
    """The report of ``results``, with the SVG plots found in ``plots_folder``."""
    figures = []
    for name in (PLOT_NAME, RESTORE_PLOT_NAME):
        svg = plots_folder / f"{name}.svg"
        if svg.is_file():
            figures.append((_CAPTIONS[name], svg.read_text(encoding="utf-8")))
    count = ", ".join(f"{n:,}" for n in sorted({d.count for d in results.dumps})) or "no"
    source = results.meta.get("source", {})
    intro = [
        f"{count} large objects in {source.get('description', 'a source database')}"
        f" (server {source.get('server_version', '?')}): dumped by each contender and,"
        " where the run restored, restored into a fresh database and checked.",
        "The first table puts each figure over the reference's named in its title"
        " (pg_dump 17 -Fc when measured; restores over its pg_restore, one job), with"
        " the seed's ratios (credativ, 1,000,000 empty LOs) in parentheses. The plots"
        " follow it, then the tables per part, the commands run and the machine.",
    ]
    main, *details = (_html_table(t) for t in report.tables(results, details=True))
    return html.HtmlReport(
        title="pgblobdump compare",
        intro=intro,
        headline=[main],
        tables=details,
        figures=figures,
        commands=results.commands,
        facts=_facts(results.meta),
    )


def write_report(results: Results, folder: Path) -> Path:
    """``folder/report.html`` (plots read from ``folder/plots``); returns its path."""
    try:
        return html.write(build(results, folder / "plots"), folder)
    except OSError as e:
        raise from_os_error(e, what=f"cannot write the report in {folder}") from e
