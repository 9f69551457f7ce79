"""Docs that cannot go stale: the command reference is generated and every help has an example."""

from __future__ import annotations

import signal
from pathlib import Path

import click
import pytest

from pgblobdump import errors
from pgblobdump.cli import cli
from pgblobdump.cli.docgen import help_text, render, walk

ROOT = Path(__file__).resolve().parents[2]
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


def _readme_exit_codes() -> dict[int, str]:
    """The README's exit-code table: each code (``130, 143, 129`` rows split) to its meaning."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("| exit | meaning |") + 2  # past the header and its rule
    table: dict[int, str] = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        codes, meaning = (cell.strip() for cell in line.strip("|").split("|", 1))
        for code in codes.split(","):
            table[int(code)] = meaning
    return table


# Words the README's meaning of each class's exit code must contain.
_MEANS = {
    errors.PgBlobDumpError: "other failure", errors.UsageError: "bad option value",
    errors.ConnectionFailed: "cannot connect", errors.DatabaseError: "database refused",
    errors.ToolchainError: "binaries missing", errors.ServerError: "embedded server failed",
    errors.ArchiveError: "archive", errors.ResultsUnreadable: "results file unreadable",
    errors.NotFound: "not found", errors.ExternalCommandFailed: "pg_dump/pg_restore failed",
    errors.InsufficientResources: "disk space", errors.FileError: "file or directory",
    errors.ObjectStorageError: "object storage",
    errors.UnsafeToRemove: "vacuum refused", errors.LosSkipped: "restore --skip-damaged left out",
}  # fmt: skip


def _subclasses(cls: type) -> list[type]:
    return [cls, *(s for sub in cls.__subclasses__() for s in _subclasses(sub))]


def test_readme_exit_codes_are_the_ones_errors_py_maps() -> None:
    table = _readme_exit_codes()
    classes = _subclasses(errors.PgBlobDumpError)
    # A class with an exit code of its own needs its word; one that inherits its parent's
    # code (a finer kind of the same condition) is covered by the parent's row.
    own_code = {c for c in classes if "exit_code" in vars(c) and c is not errors.Interrupted}
    assert own_code <= set(_MEANS) | {
        errors.NotAnArchive, errors.UnsupportedArchive, errors.CorruptArchive
    }, "a new exit code: give it a row (or a word) in README's exit-code table"  # fmt: skip
    used = set()
    for cls in classes:
        if cls is errors.Interrupted:
            continue
        code = cls.exit_code  # type: ignore[attr-defined]
        assert code in table, f"{cls.__name__} exits {code}, which README does not list"
        word = next(_MEANS[k] for k in cls.__mro__ if k in _MEANS)
        assert word in table[code], f"README: exit {code} is {table[code]!r}, not {word!r}"
        used.add(code)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        code = errors.Interrupted("x", signum).exit_code
        assert code in table and "interrupted" in table[code]
        used.add(code)
    assert used == set(table), f"README lists codes no error has: {set(table) - used}"


def _documented_calls(text: str) -> list[list[str]]:
    """Each ``pgblobdump ...`` command line of the text's shell code blocks, as words (up
    to a pipe, a redirection or a comment)."""
    calls: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside and line[3:].strip() in ("bash", "sh", "shell", "console")
            continue
        words = line.split()
        if not inside or not words or words[0] != "pgblobdump":
            continue
        cut = next((i for i, w in enumerate(words) if w in ("|", "#", ">", "&&", "2>")), None)
        calls.append(words[1:cut])
    return calls


def _command_of(words: list[str]) -> tuple[click.Command, str]:
    """The (sub)command the words call, and its name as typed."""
    cmd: click.Command = cli
    names = []
    for w in words:
        if not isinstance(cmd, click.Group) or w.startswith("-"):
            break
        sub = cmd.get_command(click.Context(cmd), w)
        if sub is None:
            break
        cmd, names = sub, [*names, w]
    return cmd, " ".join(names)


DOCS = ["README.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md") if p.name != "commands.md"
)]  # fmt: skip


@pytest.mark.parametrize("doc", DOCS)
def test_documented_commands_and_options_exist(doc: str) -> None:
    """Every command line in the docs' code blocks names a command that exists and only
    options it has: a renamed option fails here, not in a user's terminal."""
    calls = _documented_calls((ROOT / doc).read_text())
    for words in calls:
        cmd, name = _command_of(words)
        assert name or words[0].startswith("-"), f"{doc}: `pgblobdump {' '.join(words)}`"
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
        for w in words:
            opt = w.split("=", 1)[0]
            if opt.startswith("--") and opt != "--":
                assert opt in known, f"{doc}: pgblobdump {name} has no {opt} ({' '.join(words)})"


def _headline(width: int) -> list[str]:
    """compare's main table, as a terminal ``width`` columns wide shows it, of the run
    kept in tests/cli/data/compare-main-job (docs/compare.md's samples are its output)."""
    import io

    from rich.console import Console

    from pgblobdump.cli.compare import show_headline
    from pgblobdump.compare import report, results

    res = results.load(Path(__file__).parent / "data" / "compare-main-job")
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=True, color_system=None,
                      soft_wrap=True)  # fmt: skip
    show_headline(console, report.tables(res)[0], report.tables(res, compact=True)[0])
    return [line.rstrip() for line in out.getvalue().splitlines()]


def _shown_in_order(sample: list[str], shown: list[str]) -> bool:
    """Whether ``sample``'s runs of lines (a ``...`` line leaves lines out) are runs of
    ``shown``, in its order."""
    runs: list[list[str]] = [[]]
    for line in sample:
        if line.strip() == "...":
            runs.append([])
        else:
            runs[-1].append(line.rstrip())
    at = 0
    for run in filter(None, runs):
        found = next((k for k in range(at, len(shown) - len(run) + 1)
                      if shown[k : k + len(run)] == run), None)  # fmt: skip
        if found is None:
            return False
        at = found + len(run)
    return True


def test_compare_samples_are_what_it_prints() -> None:
    # Before: the 200-column sample had no box borders, the real table had them.
    from pgblobdump.cli.compare import kept

    text = (ROOT / "docs" / "compare.md").read_text()
    main = text[text.index("## The main job") : text.index("## Contenders")]
    blocks = [b.split("\n```", 1)[0].splitlines() for b in main.split("```\n")[1::2]]
    wide, narrow = blocks[:2]
    assert wide[-1] == kept(None, False)  # the run's last line, on stderr
    assert wide[:-1] == _headline(200), "regenerate from tests/cli/data/compare-main-job"
    assert wide[1].startswith("┏") and _shown_in_order(narrow, _headline(100))
