"""Shell completion: the scripts, and what Tab offers (click's protocol, driven through
the variables the bash script sets)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pgblobdump.cli import cli
from pgblobdump.servers.toolchain import by_major
from tests.clirun import run


def _complete(line: str) -> list[str]:
    """What bash completion gets for ``line`` (the word under the cursor is the last)."""
    words = line.split(" ")
    env = {
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) - 1),
        "_PGBLOBDUMP_COMPLETE": "bash_complete",
    }
    r = CliRunner().invoke(cli, [], env=env, prog_name="pgblobdump", catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "_PGBLOBDUMP_COMPLETE=bash_complete"),
        ("zsh", "_PGBLOBDUMP_COMPLETE=zsh_complete"),
        ("fish", "_PGBLOBDUMP_COMPLETE=fish_complete"),
    ],
)
def test_the_script_for_each_shell(shell: str, marker: str) -> None:
    r = run("completion", shell)
    assert r.exit_code == 0, r.stderr
    assert marker in r.stdout, r.stdout
    assert "pgblobdump" in r.stdout


def test_bash_script_registers_the_function() -> None:
    assert (
        "complete -o nosort -F _pgblobdump_completion pgblobdump"
        in run("completion", "bash").stdout
    )


def test_an_unknown_shell_is_a_usage_error() -> None:
    r = run("completion", "tcsh")
    assert r.exit_code == 2 and "tcsh" in r.stderr


def test_major_completes_from_the_majors_found() -> None:
    found = [str(m) for m in by_major()]
    assert found, "no PostgreSQL installation found: the test means nothing"
    for line in ("pgblobdump server start --major ", "pgblobdump bench read --major ",
                 "pgblobdump dump --full --pg-dump-major "):  # fmt: skip
        assert _complete(line) == [f"plain,{m}" for m in found], line
    first = found[0]
    assert _complete(f"pgblobdump server start --major {first[0]}") == [
        f"plain,{m}" for m in found if m.startswith(first[0])
    ]


def test_commands_and_options_complete() -> None:
    assert "plain,restore" in _complete("pgblobdump re")
    assert "plain,completion" in _complete("pgblobdump com")
    assert _complete("pgblobdump dump --prog") == ["plain,--progress"]
    assert "plain,--on-conflict" in _complete("pgblobdump restore --on")
    assert _complete("pgblobdump restore --on-conflict ") == ["plain,error", "plain,skip"]
