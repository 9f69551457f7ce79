"""Start-up: ``pgblobdump --help``, a Tab completion and ``dump``'s way to its first
statement, against the interpreter's own start and the two imports a dump cannot do
without, side by side in one run.

Every contender is a fresh process, run in turn with the others, ``--rounds`` times;
the ratios are of medians, each to its anchor of the same run (issue 41, item 4):
``--help`` and a completion within 2x of ``python -c pass``, ``dump`` to a server
that refuses within 1.5x of ``python -c "import psycopg, zstandard"``.

The package is byte-compiled first (``compileall``), as an installed wheel is: with
``PYTHONDONTWRITEBYTECODE`` set and no ``__pycache__``, every run would compile
pgblobdump's modules from source, which no user's installation does.

``--tree DIR`` times the pgblobdump of another checkout (``git archive main | tar -x -C
DIR``): the same console script, with DIR first on PYTHONPATH; the anchors are the same.

Usage: .venv/bin/python benchmarks/startup.py [--rounds 20] [--tree DIR]
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import pgblobdump

PGBLOBDUMP = os.path.join(os.path.dirname(sys.executable), "pgblobdump")


@dataclass
class Contender:
    """One command line, its anchor (the label of another contender) and its target
    ratio to that anchor; ``ok`` the exit statuses that count as the expected run."""

    label: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    anchor: str | None = None
    target: float | None = None
    ok: tuple[int, ...] = (0,)
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def completion_env(line: str) -> dict[str, str]:
    """What bash's completion function sets to ask for the candidates of ``line``."""
    return {
        "_PGBLOBDUMP_COMPLETE": "bash_complete",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(line.split(" ")) - 1),
    }


def refused_port() -> int:
    """A local port nothing listens on (bound, then closed): a connection is refused at
    once, so what is measured is the start-up, not a wait."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def contenders(work: str, tree: str | None) -> list[Contender]:
    py = sys.executable
    ours = {"PYTHONPATH": tree} if tree else {}
    pass_, imports = "python -c pass", "python -c 'import psycopg, zstandard'"
    dsn = f"host=127.0.0.1 port={refused_port()} dbname=x connect_timeout=5"
    return [
        Contender(pass_, [py, "-c", "pass"]),
        Contender("pgblobdump --help", [PGBLOBDUMP, "--help"], ours, pass_, 2.0),
        Contender(
            "Tab: pgblobdump <Tab>",
            [PGBLOBDUMP],
            {**completion_env("pgblobdump "), **ours},
            anchor=pass_,
            target=2.0,
        ),
        Contender(
            "Tab: pgblobdump dump --<Tab>",
            [PGBLOBDUMP],
            {**completion_env("pgblobdump dump --"), **ours},
            anchor=pass_,
        ),
        Contender("pgblobdump dump --help", [PGBLOBDUMP, "dump", "--help"], ours, pass_),
        Contender(imports, [py, "-c", "import psycopg, zstandard"]),
        # Exit 3 (a connection error): the run got as far as its first statement.
        Contender(
            "pgblobdump dump (server refuses)",
            [PGBLOBDUMP, "dump", "-d", dsn, "-o", os.path.join(work, "a")],
            ours,
            anchor=imports,
            target=1.5,
            ok=(3,),
        ),
    ]


def run_once(c: Contender) -> tuple[float, float]:
    """Wall seconds and the child's CPU seconds (user + system): on a shared machine the
    wall time waits for a core, the CPU time much less so."""
    env = {**os.environ, **c.env}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(c.argv, env=env, capture_output=True, check=False)
    seconds = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in c.ok:
        raise SystemExit(f"{c.label}: exit {p.returncode}: {p.stderr.decode()[-500:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return seconds, cpu


def ratio(c: Contender, anchor: Contender, cpu: bool) -> float:
    """Of medians, ``c``'s to its anchor's."""
    if cpu:
        return statistics.median(c.cpu) / statistics.median(anchor.cpu)
    return statistics.median(c.times) / statistics.median(anchor.times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--tree", help="A checkout whose pgblobdump to time instead.")
    a = ap.parse_args()
    tree = os.path.abspath(a.tree) if a.tree else None
    package = os.path.join(tree, "pgblobdump") if tree else os.path.dirname(pgblobdump.__file__)
    compileall.compile_dir(package, quiet=1)
    with tempfile.TemporaryDirectory(prefix="pgbd-startup-") as work:
        cs = contenders(work, tree)
        for c in cs:  # warm the page cache and .pyc files once, not counted
            run_once(c)
        for _ in range(a.rounds):
            for c in cs:
                seconds, cpu_seconds = run_once(c)
                c.times.append(seconds)
                c.cpu.append(cpu_seconds)
    by_label = {c.label: c for c in cs}
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"{a.rounds} rounds in turn, load average {load}, Python {sys.version.split()[0]},"
          f" pgblobdump from {package}\n")  # fmt: skip
    print("| command | wall s, median (min) | CPU s, median | x anchor, wall | x anchor, CPU"
          " | target |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---|")
    for c in cs:
        wall = f"{statistics.median(c.times):.3f} ({min(c.times):.3f})"
        cpu = f"{statistics.median(c.cpu):.3f}"
        by_wall = by_cpu = target = ""
        if c.anchor is not None:
            anchor = by_label[c.anchor]
            w, u = ratio(c, anchor, False), ratio(c, anchor, True)
            by_wall, by_cpu = f"{w:.2f}", f"{u:.2f}"
            if c.target is not None:
                met = "met" if max(w, u) <= c.target else "missed"
                target = f"{c.target}x of `{c.anchor}`: {met}"
        print(f"| `{c.label}` | {wall} | {cpu} | {by_wall} | {by_cpu} | {target} |")


if __name__ == "__main__":
    main()
