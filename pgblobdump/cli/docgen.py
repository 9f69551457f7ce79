"""Render every command's ``--help`` as Markdown: docs/commands.md is this, kept fresh by a test.

Run ``python -m pgblobdump.cli.docgen > docs/commands.md`` after changing an option.
"""

from __future__ import annotations

import click

from pgblobdump.cli import cli


def walk(cmd: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    """Every command under ``cmd`` with its full name, groups before their children."""
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd, info_name=path[-1])
        for name in sorted(cmd.list_commands(ctx)):
            sub = cmd.get_command(ctx, name)
            assert sub is not None
            out += walk(sub, [*path, name])
    return out


def help_text(path: list[str], cmd: click.Command) -> str:
    ctx = click.Context(cmd, info_name=" ".join(path), terminal_width=100, max_content_width=100)
    return cmd.get_help(ctx)


def render() -> str:
    parts = [
        "# Command reference",
        "",
        "Generated from `--help` by `python -m pgblobdump.cli.docgen > docs/commands.md`;",
        "a test fails when this file and the commands disagree.",
        "",
    ]
    for path, cmd in walk(cli, ["pgblobdump"]):
        parts += [f"## {' '.join(path)}", "", "```text", help_text(path, cmd).rstrip(), "```", ""]
    return "\n".join(parts)


if __name__ == "__main__":
    print(render(), end="")
