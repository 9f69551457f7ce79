"""Run one child (pg_dump, pg_restore) and measure its wall time, peak RSS and CPU time.

Two sources of the same figures:
- GNU time (``/usr/bin/time -f``), as in the seed, writing its report to its own file with
  ``-o`` so the child's stderr never mixes with it;
- the kernel's ``wait4`` rusage of the child, when /usr/bin/time is absent.
Under GNU time we also collect ``wait4`` of the time process itself (its rusage covers the
child it waited for), so every run carries a cross-check that the two agree.

The child runs in its own process group: Ctrl-C reaches only us, and we stop the whole
group (pg_dump -j and pg_restore -j fork workers) before raising Interrupted. SIGTERM and
SIGHUP arrive as KeyboardInterrupt too (``pgblobdump.signals``) and are handled alike.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shlex
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pgblobdump import signals
from pgblobdump.errors import ExternalCommandFailed, Interrupted

GNU_TIME_FORMAT = "PGBD-TIME elapsed=%e maxrss_kb=%M user=%U sys=%S exit=%x"
"""A marker line nobody else prints; %M is in KiB, %e/%U/%S in seconds (two decimals)."""

_GNU_TIME_RE = re.compile(
    r"PGBD-TIME elapsed=(?P<elapsed>[\d.]+) maxrss_kb=(?P<maxrss>\d+)"
    r" user=(?P<user>[\d.]+) sys=(?P<sys>[\d.]+) exit=(?P<exit>-?\d+)"
)

STOP_GRACE_SECONDS = 5.0
"""How long a stopped child group gets between SIGTERM and SIGKILL."""


@dataclass(frozen=True)
class ProcessStats:
    """What one child run cost. ``via`` is ``gnu-time`` or ``wait4`` (where figures came from).

    ``wall_s`` is the child's own elapsed time; ``harness_wall_s`` is what we measured
    around launching and reaping it, so ``harness_wall_s - wall_s`` is our overhead.
    ``max_rss_kb`` is the largest RSS of the child or any child it waited for (not a sum).
    ``check_*`` hold the ``wait4`` figures of the GNU time process when ``via`` is
    ``gnu-time`` (None otherwise): the independent cross-check.

    ``rss_floor_kb`` is our own peak RSS when the child started. Linux carries the
    forking process's RSS high-water mark into the child's ``ru_maxrss`` across exec
    (exec_mmap keeps the old mm's hiwater), so a ``wait4`` figure at or below this floor
    says only "no more than the floor". GNU time, a small C program, has a floor of ~2 MB.
    """

    argv: tuple[str, ...]
    exit_code: int
    wall_s: float
    max_rss_kb: int
    user_s: float
    sys_s: float
    via: str
    harness_wall_s: float
    check_max_rss_kb: int | None = None
    check_user_s: float | None = None
    check_sys_s: float | None = None
    rss_floor_kb: int = 0
    timer: str | None = None

    @property
    def command(self) -> str:
        """The command line as a shell would need it."""
        return shlex.join(self.argv)

    @property
    def shell_command(self) -> str:
        """What was run, as a shell line: under ``/usr/bin/time -f ...`` when it was."""
        if self.timer is None:
            return self.command
        return shlex.join((self.timer, "-f", GNU_TIME_FORMAT, *self.argv))

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s

    @property
    def rss_at_floor(self) -> bool:
        """Whether a ``wait4`` peak RSS only reflects the floor (see the class docstring)."""
        return self.via == "wait4" and self.max_rss_kb <= self.rss_floor_kb


def parse_gnu_time(text: str) -> tuple[float, int, float, float, int]:
    """(elapsed s, max RSS KiB, user s, sys s, exit code) from GNU time's ``-o`` report.

    GNU time prefixes "Command exited with non-zero status N" or "Command terminated by
    signal N" lines of its own; only our marker line counts.
    """
    found = _GNU_TIME_RE.search(text)
    if found is None:
        raise ExternalCommandFailed(
            f"GNU time wrote no measurement line (expected {GNU_TIME_FORMAT.split()[0]} ...);"
            f" it wrote: {text.strip()[:200]!r}"
        )
    return (
        float(found["elapsed"]),
        int(found["maxrss"]),
        float(found["user"]),
        float(found["sys"]),
        int(found["exit"]),
    )


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's process group, SIGKILL it if it lingers, and reap the child."""
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_SECONDS), (signal.SIGKILL, 30.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def what_it_said(text: str, lines: int = 3) -> str:
    """What a failed child said on stderr: its first ``error:`` line (pg_dump and
    pg_restore put the statement that failed after it), else its last ``lines`` lines."""
    said = text.strip().splitlines()
    first = next((line for line in said if "error:" in line.lower()), None)
    if first is not None:
        return first.strip()
    return " / ".join(said[-lines:]) if said else "no message"


def _tail(path: Path) -> str:
    return what_it_said(path.read_text(errors="replace"))


def run_measured(
    argv: Sequence[str],
    *,
    gnu_time: Path | None,
    env: Mapping[str, str] | None = None,
    stdout: Path | None = None,
    what: str | None = None,
) -> ProcessStats:
    """Run ``argv`` to completion and measure it; ExternalCommandFailed if it fails.

    ``stdout`` receives the child's standard output (else it is discarded); its stderr is
    kept only to quote in the error message. On Ctrl-C the child's group is stopped and
    Interrupted raised; the caller removes partial output.
    """
    argv = tuple(str(a) for a in argv)
    label = what or Path(argv[0]).name
    with tempfile.TemporaryDirectory(prefix="pgbd-measure-") as tmp:
        report = Path(tmp) / "time.txt"
        errors = Path(tmp) / "stderr.txt"
        full = argv
        if gnu_time is not None:
            full = (str(gnu_time), "-o", str(report), "-f", GNU_TIME_FORMAT, *argv)
        out_target = stdout if stdout is not None else Path(os.devnull)
        with errors.open("wb") as err_f, out_target.open("wb") as out_f:
            floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t0 = time.perf_counter()
            try:
                proc = subprocess.Popen(
                    full,
                    stdin=subprocess.DEVNULL,
                    stdout=out_f,
                    stderr=err_f,
                    env=None if env is None else dict(env),
                    start_new_session=True,
                )
            except OSError as e:
                raise ExternalCommandFailed(f"{label} could not start: {e}") from e
            with proc:
                try:
                    _pid, status, usage = os.wait4(proc.pid, 0)
                except KeyboardInterrupt as e:
                    signum = signals.signum_of(e)
                    with signals.held():  # a second signal must not orphan the group
                        stop_group(proc)
                    raise Interrupted(
                        f"interrupted by {signals.name(signum)} during {label};"
                        " its processes were stopped",
                        signum,
                    ) from None
                harness = time.perf_counter() - t0
                # We reaped the child ourselves; tell Popen so it does not wait again.
                proc.returncode = os.waitstatus_to_exitcode(status)
        # ru_maxrss is in KiB on Linux.
        if gnu_time is not None:
            if not report.is_file():
                raise ExternalCommandFailed(f"{gnu_time} wrote no report for {label}")
            elapsed, rss, user, sys_s, code = parse_gnu_time(report.read_text())
            if proc.returncode != 0 and code == 0:
                code = proc.returncode
            stats = ProcessStats(
                argv, code, elapsed, rss, user, sys_s, "gnu-time", harness,
                check_max_rss_kb=usage.ru_maxrss, check_user_s=usage.ru_utime,
                check_sys_s=usage.ru_stime, rss_floor_kb=floor, timer=str(gnu_time),
            )  # fmt: skip
        else:
            stats = ProcessStats(
                argv, proc.returncode, harness, usage.ru_maxrss, usage.ru_utime,
                usage.ru_stime, "wait4", harness, rss_floor_kb=floor,
            )  # fmt: skip
        if stats.exit_code != 0:
            raise ExternalCommandFailed(
                f"{label} exited with status {stats.exit_code}: {_tail(errors)}"
            )
    return stats
