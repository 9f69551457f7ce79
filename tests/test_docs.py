"""Docs that cannot go stale: the command reference is generated and every help has an example."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from pgblobdump.cli import cli
from pgblobdump.cli.docgen import help_text, render, walk

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = walk(cli, ["pgblobdump"])


def test_command_reference_is_current() -> None:
    current = (ROOT / "docs" / "commands.md").read_text()
    assert current == render(), "run: python -m pgblobdump.cli.docgen > docs/commands.md"


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_command_has_help_ending_with_an_example(path: list[str], cmd: object) -> None:
    text = help_text(path, cmd)  # type: ignore[arg-type]
    assert "Example:" in text, f"{' '.join(path)} --help has no example"


def test_readme_mentions_every_top_level_command() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in cli.list_commands(click.Context(cli)):
        assert f"pgblobdump {name}" in readme, f"README does not mention pgblobdump {name}"
