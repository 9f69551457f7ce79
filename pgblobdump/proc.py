"""Run a child process: pg_dump, pg_restore, initdb, pg_ctl, ``--version`` probes, servers.

Every child pgblobdump starts goes through here, so each gets the same care:
- its own process group (``start_new_session``): Ctrl-C at the terminal reaches only us,
  and stopping the child stops what it forked (pg_dump -j and pg_restore -j workers, the
  shell of a test);
- Ctrl-C, SIGTERM and SIGHUP (which ``pgblobdump.signals`` turns into KeyboardInterrupt)
  are forwarded to that group, which gets STOP_GRACE_SECONDS to exit before SIGTERM and
  then SIGKILL; then Interrupted is raised with the shell's exit status;
- an optional timeout, after which the group is stopped the same way;
- stderr goes to a file of which only the last STDERR_TAIL_BYTES are read back, to quote
  in an error message (``what_it_said``): a chatty child cannot fill our memory;
- a child that cannot be started (no such program, not executable) is the caller's error
  class (ExternalCommandFailed by default) saying "could not start", never an OSError.

``run`` runs a child to completion, ``probe`` asks a program a question (``--version``)
and never raises, ``Child`` is a child left running while we do other work (pg_dump
streaming into an archive, SeaweedFS), and ``run_measured`` measures a child's wall time,
peak RSS and CPU time. Two sources of the same figures:
- GNU time (``/usr/bin/time -f``), as in the seed, writing its report to its own file with
  ``-o`` so the child's stderr never mixes with it;
- the kernel's ``wait4`` rusage of the child, when /usr/bin/time is absent.
Under GNU time we also collect ``wait4`` of the time process itself (its rusage covers the
child it waited for), so every run carries a cross-check that the two agree.
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
from types import TracebackType
from typing import IO

from pgblobdump import signals
from pgblobdump.errors import ExternalCommandFailed, Interrupted, PgBlobDumpError

GNU_TIME_FORMAT = "PGBD-TIME elapsed=%e maxrss_kb=%M user=%U sys=%S exit=%x"
"""A marker line nobody else prints; %M is in KiB, %e/%U/%S in seconds (two decimals)."""

_GNU_TIME_RE = re.compile(
    r"PGBD-TIME elapsed=(?P<elapsed>[\d.]+) maxrss_kb=(?P<maxrss>\d+)"
    r" user=(?P<user>[\d.]+) sys=(?P<sys>[\d.]+) exit=(?P<exit>-?\d+)"
)

STOP_GRACE_SECONDS = 5.0
"""How long a stopped child group gets after each signal before the next, harder one."""


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


STDERR_TAIL_BYTES = 64 * 1024
"""How much of a child's stderr is read back to quote: its end, where pg_dump and
pg_restore (with --exit-on-error) say why they stopped."""

ErrorClass = type[PgBlobDumpError]


def stop_group(proc: subprocess.Popen[bytes], first: int = signal.SIGTERM) -> None:
    """Stop the child's process group and reap the child: ``first`` (the signal we were
    sent, when forwarding one), then SIGTERM and SIGKILL to a group that lingers; then
    SIGKILL to what is left of the group once the child is gone (a shell's background
    jobs ignore SIGINT, and a worker must not outlive its leader)."""
    steps = [(first, STOP_GRACE_SECONDS)]
    if first not in (signal.SIGTERM, signal.SIGKILL):
        steps.append((signal.SIGTERM, STOP_GRACE_SECONDS))
    if first != signal.SIGKILL:
        steps.append((signal.SIGKILL, 30.0))
    for sig, grace in steps:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # The group outlives its leader while a member lives, so its id is not reused yet.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def what_it_said(text: str, lines: int = 3) -> str:
    """What a failed child said on stderr: its first ``error:`` line (pg_dump and
    pg_restore put the statement that failed after it), else its last ``lines`` lines."""
    said = text.strip().splitlines()
    first = next((line for line in said if "error:" in line.lower()), None)
    if first is not None:
        return first.strip()
    return " / ".join(said[-lines:]) if said else "no message"


def tail_of(f: IO[bytes]) -> str:
    """The last STDERR_TAIL_BYTES of a file the child wrote, from a line start."""
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - STDERR_TAIL_BYTES))
    text = f.read().decode(errors="replace")
    return text.partition("\n")[2] if size > STDERR_TAIL_BYTES else text


def _start(
    argv: Sequence[str],
    label: str,
    error: ErrorClass,
    *,
    stdout: IO[bytes] | int,
    stderr: IO[bytes] | int,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    as_user: tuple[int, int] | None = None,
) -> subprocess.Popen[bytes]:
    """Popen in a process group of its own; ``error`` saying "could not start" when the
    program is missing or cannot be run (as ``as_user``: uid, gid, no other groups)."""
    try:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            env=None if env is None else dict(env),
            cwd=cwd,
            user=None if as_user is None else as_user[0],
            group=None if as_user is None else as_user[1],
            extra_groups=None if as_user is None else [],
            start_new_session=True,
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise error(f"{label} could not start: {e}") from e


def _interrupted(proc: subprocess.Popen[bytes], e: KeyboardInterrupt, label: str) -> Interrupted:
    """Forward the signal behind ``e`` to the child's group, stop it, and say so."""
    signum = signals.signum_of(e)
    with signals.held():  # a second signal must not orphan the group
        stop_group(proc, signum)
    return Interrupted(
        f"interrupted by {signals.name(signum)} during {label}; its processes were stopped",
        signum,
    )


@dataclass(frozen=True)
class Completed:
    """A child that ran to its end: its exit status (negative: killed by that signal),
    its stdout when captured, and the tail of its stderr."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def said(self) -> str:
        return what_it_said(self.stderr)


def run(
    argv: Sequence[str | Path],
    *,
    what: str | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    as_user: tuple[int, int] | None = None,
    stdout: Path | None = None,
    capture: bool = False,
    check: bool = True,
    error: ErrorClass = ExternalCommandFailed,
) -> Completed:
    """Run ``argv`` to its end. Its stdout goes to ``stdout`` (else it is discarded), or is
    returned when ``capture``. ``error`` (ExternalCommandFailed unless the caller's own
    class fits better, as ServerError for initdb) when it cannot start, outlives
    ``timeout`` seconds (its group stopped first) or, with ``check``, exits non-zero
    quoting its stderr. Ctrl-C, SIGTERM and SIGHUP are forwarded to its group, and
    Interrupted raised once the group is gone."""
    args = tuple(str(a) for a in argv)
    label = what or Path(args[0]).name
    timed_out = False
    with contextlib.ExitStack() as files:
        err_f = files.enter_context(tempfile.TemporaryFile(prefix="pgbd-stderr-"))
        out_f: IO[bytes]
        if capture:
            out_f = files.enter_context(tempfile.TemporaryFile(prefix="pgbd-stdout-"))
        else:
            out_f = files.enter_context((stdout or Path(os.devnull)).open("wb"))
        proc = _start(args, label, error, stdout=out_f, stderr=err_f, env=env, cwd=cwd,
                      as_user=as_user)  # fmt: skip
        with proc:
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
            except KeyboardInterrupt as e:
                raise _interrupted(proc, e, label) from None
            if timed_out:
                # Outside the except block: a signal held meanwhile is raised after.
                with signals.uninterrupted():
                    stop_group(proc)
                raise error(f"{label} timed out after {timeout:.0f} s")
        out = ""
        if capture:
            out_f.seek(0)
            out = out_f.read().decode(errors="replace")
        done = Completed(args, code, out, tail_of(err_f))
    if check and code != 0:
        raise error(f"{label} exited with status {code}: {done.said()}")
    return done


def probe(
    argv: Sequence[str | Path],
    *,
    timeout: float = 20,
    cwd: str | None = None,
    as_user: tuple[int, int] | None = None,
) -> Completed | None:
    """Ask a program a question (``--version``, ``pg_config --configure``): what it
    answered, whatever its status, or None when it could not start or did not answer
    within ``timeout`` seconds. Interrupted still propagates."""
    try:
        return run(argv, timeout=timeout, cwd=cwd, as_user=as_user, capture=True, check=False)
    except ExternalCommandFailed:
        return None


class Child:
    """A child left running while we do other work: pg_dump streaming its archive (read
    ``stdout`` when ``pipe``), a server writing to ``log``. ``with Child(...) as c:`` or
    ``start()``/``close()``; closing stops its group if it still runs."""

    def __init__(
        self,
        argv: Sequence[str | Path],
        *,
        what: str | None = None,
        env: Mapping[str, str] | None = None,
        pipe: bool = False,
        log: Path | None = None,
        error: ErrorClass = ExternalCommandFailed,
    ) -> None:
        self.argv = tuple(str(a) for a in argv)
        self.what = what or Path(self.argv[0]).name
        self.env = env
        self.pipe = pipe
        self.log = log
        self.error = error
        self._err: IO[bytes] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        """Start it; ``error`` saying "could not start" when it cannot."""
        # Stdout and stderr both go to the log (appended), else stderr to a private file.
        if self.log is not None:
            self._err = self.log.open("ab")
        else:
            self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        out: IO[bytes] | int = subprocess.PIPE if self.pipe else self._err
        try:
            self._proc = _start(self.argv, self.what, self.error, stdout=out, stderr=self._err,
                                env=self.env)  # fmt: skip
        except BaseException:
            self._err.close()
            self._err = None
            raise
        if self.log is not None:  # the child holds its own descriptor
            self._err.close()
            self._err = None
        return self

    @property
    def popen(self) -> subprocess.Popen[bytes]:
        assert self._proc is not None, "Child.start() first"
        return self._proc

    @property
    def stdout(self) -> IO[bytes]:
        """What it writes, when started with ``pipe``."""
        assert self.popen.stdout is not None, "Child(pipe=True) to read its stdout"
        return self.popen.stdout

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self) -> int:
        return self.popen.wait()

    def said(self) -> str:
        """What it said on stderr, for an error message (its log's tail with ``log``)."""
        if self.log is not None:
            with contextlib.suppress(OSError), self.log.open("rb") as f:
                return what_it_said(tail_of(f))
            return "no message"
        assert self._err is not None
        return what_it_said(tail_of(self._err))

    def stop(self, first: int = signal.SIGTERM) -> None:
        """Stop its group (``first``, then SIGTERM and SIGKILL) and reap it."""
        if self._proc is not None:
            stop_group(self._proc, first)

    def close(self) -> None:
        """Stop it if it still runs; close our ends of its pipe and files."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self.stop()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
        if self._err is not None:
            self._err.close()
            self._err = None

    def __enter__(self) -> Child:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        self.close()


def _said(path: Path) -> str:
    with path.open("rb") as f:
        return what_it_said(tail_of(f))


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
            proc = _start(full, label, ExternalCommandFailed, stdout=out_f, stderr=err_f, env=env)
            with proc:
                try:
                    _pid, status, usage = os.wait4(proc.pid, 0)
                except KeyboardInterrupt as e:
                    raise _interrupted(proc, e, label) from None
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
                f"{label} exited with status {stats.exit_code}: {_said(errors)}"
            )
    return stats
