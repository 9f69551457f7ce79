"""``pgblobdump completion bash|zsh|fish``: the shell's completion script (click's), and
what ``--major`` completes to (the majors of the PostgreSQL installations found)."""

from __future__ import annotations

import click
from click.shell_completion import CompletionItem, get_completion_class

COMPLETE_VAR = "_PGBLOBDUMP_COMPLETE"
"""The variable click's completion scripts set to ask the program for candidates."""

SHELLS = ("bash", "zsh", "fish")


def complete_major(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The majors found (servers.toolchain, the same search as ``doctor``) that begin
    with what is typed so far."""
    from pgblobdump.servers.toolchain import by_major

    try:
        found = by_major()
    except Exception:  # a completion must never print a traceback into the shell
        return []
    return [
        CompletionItem(str(m), help=", ".join(tc.version for tc in tcs))
        for m, tcs in found.items()
        if str(m).startswith(incomplete)
    ]


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script of SHELL: commands, options and --major (from the
    majors found) complete on Tab. Enable it in bash with
    eval "$(pgblobdump completion bash)" in ~/.bashrc; zsh: the same with zsh in
    ~/.zshrc; fish: pgblobdump completion fish > ~/.config/fish/completions/pgblobdump.fish.

    Example: eval "$(pgblobdump completion bash)"
    """
    from pgblobdump.cli import cli

    cls = get_completion_class(shell)
    assert cls is not None  # click knows the three SHELLS
    click.echo(cls(cli, {}, "pgblobdump", COMPLETE_VAR).source())
