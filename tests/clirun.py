"""The CLI as a user meets it: a run in-process and the one-line-error check; a run in a
process of its own, and a wait for it to get under way (to kill or signal it)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

from pgblobdump.cli import cli


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def assert_one_line_error(result: Result, code: int, fragment: str) -> None:
    assert result.exit_code == code, (result.exit_code, result.output, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and fragment in lines[0], lines[0]
    assert "Traceback" not in result.output


def started(*args: str) -> subprocess.Popen[str]:
    """``pgblobdump ARGS`` in a process of its own (to kill or signal it mid-run)."""
    return subprocess.Popen([sys.executable, "-m", "pgblobdump", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def wait_for(proc: subprocess.Popen[str], ready: Callable[[], bool], what: str = "the run",
             timeout: float = 60) -> None:  # fmt: skip
    """Until ``ready()``; the test fails when ``proc`` ends first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"ended (exit {proc.returncode}) before the fault: {err}{out}")
        assert time.monotonic() < deadline, f"{what} never got under way"
        time.sleep(0.01)
