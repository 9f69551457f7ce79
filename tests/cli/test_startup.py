"""Start-up: ``pgblobdump --help`` and a Tab completion import no command, each command's
``--help`` imports only its own module (and nothing that plots, draws tables or talks to
a server), and what the root lists from SUBCOMMANDS is what the commands themselves say.

The imports are read from a new process (``sys.modules`` as it ends): this one has every
module loaded already."""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest

from pgblobdump.cli import SUBCOMMANDS, cli

HEAVY = ("matplotlib", "rich.table", "pgblobdump.harness.plots", "pgblobdump.compare.plots")
"""Modules no help and no completion needs: plotting and rich's tables."""

COMMAND_MODULES = {s.target.partition(":")[0] for s in SUBCOMMANDS.values()}


DRIVER = """
import sys
from pgblobdump.cli import main
sys.argv[0] = "pgblobdump"
try:
    main()
finally:
    sys.stdout.flush()
    print("\\nimported:", *sorted(sys.modules), file=sys.stderr)
"""
"""pgblobdump's console script, telling on exit which modules were imported."""


def imported(*args: str, env: dict[str, str] | None = None, code: int = 0) -> tuple[str, set[str]]:
    """stdout of ``pgblobdump ARGS`` in a new interpreter (exiting with ``code``), and
    every module it imported."""
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == code, p.stderr[-2000:]
    head, _, tail = p.stderr.rpartition("\nimported: ")
    assert code != 0 or head.strip() == "", head[-2000:]  # an error says so on stderr
    return p.stdout, set(tail.split())


def completion_env(line: str) -> dict[str, str]:
    """What bash's completion function sets to ask for the candidates of ``line``."""
    return {
        "_PGBLOBDUMP_COMPLETE": "bash_complete",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(line.split(" ")) - 1),
    }


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith(HEAVY)}


def test_help_imports_no_command_and_nothing_heavy() -> None:
    out, modules = imported("--help")
    assert "dump" in out and "Commands:" in out
    assert not modules & COMMAND_MODULES
    assert not heavy(modules)
    assert not {m for m in modules if m.startswith(("psycopg", "rich", "zstandard"))}


def test_completing_a_command_imports_no_command() -> None:
    out, modules = imported(env=completion_env("pgblobdump re"))
    assert out.splitlines() == ["plain,restore"]
    assert not modules & COMMAND_MODULES
    assert not heavy(modules)


def test_completing_an_option_imports_only_that_commands_module() -> None:
    out, modules = imported(env=completion_env("pgblobdump dump --prog"))
    assert out.splitlines() == ["plain,--progress"]
    assert modules & COMMAND_MODULES == {"pgblobdump.cli.packed.dump", "pgblobdump.cli.completion"}
    assert not heavy(modules)


def test_a_dump_loads_what_a_plain_dump_runs(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on: refused at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dsn = f"host=127.0.0.1 port={port} dbname=x"
    _, modules = imported("dump", "-d", dsn, "-o", str(tmp_path / "a"), code=3)
    assert {"pgblobdump.packed.write.writer", "psycopg"} <= modules  # it got as far as connecting
    others = {"read.reader", "chain.archives", "restore.restorer", "pgdump.database",
              "chain.bychecksum", "read.source", "verify", "chain.merge"}  # fmt: skip
    assert not modules & {f"pgblobdump.packed.{m}" for m in others}  # restore's, --since's...
    assert not modules & COMMAND_MODULES - {
        "pgblobdump.cli.packed.dump",
        "pgblobdump.cli.completion",
    }
    assert not {m for m in modules if m.startswith("rich")}  # nothing shown yet, nor a bar


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_commands_help_imports_its_module_only(name: str) -> None:
    out, modules = imported(name, "--help")
    assert out.startswith(f"Usage: pgblobdump {name}"), out
    own = SUBCOMMANDS[name].target.partition(":")[0]
    # cli.completion gives --major its completion: a few lines, no more.
    assert modules & COMMAND_MODULES <= {own, "pgblobdump.cli.completion"}
    assert not {m for m in modules if m.startswith(("rich", *HEAVY))}  # click prints help
    assert not {m for m in modules if m.startswith("psycopg")}


@pytest.mark.parametrize(
    "words",
    [("migrate", "run"), ("migrate", "plan"), ("migrate", "abort"), ("bench", "toast"),
     ("bench", "read")],
)  # fmt: skip
def test_a_subcommands_help_loads_no_libpq(words: tuple[str, ...]) -> None:
    """The options of migrate's and bench's subcommands take their choices and defaults
    from modules that import no psycopg (migrate.options, bench.toastspec)."""
    out, modules = imported(*words, "--help")
    assert out.startswith(f"Usage: pgblobdump {' '.join(words)}"), out
    assert not {m for m in modules if m.startswith("psycopg")}


def test_the_listed_short_help_is_each_commands_own() -> None:
    ctx = click.Context(cli)
    widest = 100 - 6 - max(map(len, SUBCOMMANDS))  # help 100 columns wide (docs/commands.md)
    for name, listed in SUBCOMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None
        own = command.get_short_help_str(widest)
        assert listed.short_help == own, f"SUBCOMMANDS[{name!r}]: give it {own!r}"


@pytest.mark.parametrize("width", [50, 78, 98, 100])
def test_the_root_help_lists_the_commands_as_click_would(width: int) -> None:
    ctx = click.Context(cli)
    ours, clicks = click.HelpFormatter(width=width), click.HelpFormatter(width=width)
    cli.format_commands(ctx, ours)
    click.Group.format_commands(cli, ctx, clicks)  # loads every command, as before
    assert ours.getvalue() == clicks.getvalue()


@pytest.mark.parametrize("incomplete", ["", "c", "re", "-", "--v"])
def test_completion_offers_what_click_would(incomplete: str) -> None:
    ctx = click.Context(cli)
    ours = [(i.value, i.help) for i in cli.shell_complete(ctx, incomplete)]
    clicks = [(i.value, i.help) for i in click.Group.shell_complete(cli, ctx, incomplete)]
    assert ours == clicks


@pytest.mark.parametrize(
    ("package", "light", "heavy_one"),
    [
        ("packed", "format", "dump"),
        ("generate", "spec", "generator"),
        ("migrate", "options", "running"),
    ],
)
def test_a_package_loads_its_names_on_first_use(package: str, light: str, heavy_one: str) -> None:
    """Importing one light module of the package loads no other (nor libpq); each name the
    package offers is its module's."""
    code = (
        f"import sys, pgblobdump.{package}.{light}\n"
        f"print('pgblobdump.{package}.{heavy_one}' in sys.modules, 'psycopg' in sys.modules)"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.split() == ["False", "False"]
    pkg = importlib.import_module(f"pgblobdump.{package}")
    assert sorted(pkg.__all__) == sorted(pkg._HOME)
    for name, home in pkg._HOME.items():
        module = importlib.import_module(f"pgblobdump.{package}.{home}")
        assert getattr(pkg, name) is getattr(module, name)
