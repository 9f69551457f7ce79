"""The CLI as a user meets it, in-process: a run and the one-line-error check."""

from __future__ import annotations

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
