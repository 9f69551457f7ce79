"""The core refuses option combinations, not the CLI: a library caller building a
DumpRequest or RestoreRequest (or calling dump/restore_archive) meets the same UsageError,
word for word, that the command line prints; bad sizes, OID ranges and --part values are
click usage errors (exit 2) with the core's message. No server needed: every refusal
comes before a connection."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgblobdump.cli import cli
from pgblobdump.errors import UsageError
from pgblobdump.packed import DumpRequest, OnConflict, RestoreRequest, restore_archive
from pgblobdump.packed.dump.run import dump
from pgblobdump.packed.restore.request import parse_part
from pgblobdump.units import parse_size

NOWHERE = "host=/nonexistent port=1 dbname=x connect_timeout=1"


def _refused(make: Callable[[], object]) -> str:
    with pytest.raises(UsageError) as caught:
        make()
    return str(caught.value)


def _cli_error(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert "Traceback" not in result.output
    line = result.stderr.strip()
    assert line.startswith("Error: ") and "\n" not in line, result.stderr
    return line.removeprefix("Error: ")


RESTORE = [
    (["--full", "--part", "1/2"], {"full": True, "part": (1, 2)}, "--part restores a share"),
    (["--part", "1/2", "--skip-damaged"], {"part": (1, 2), "skip_damaged": True},
     "--part and --skip-damaged do not go together"),
    (["--full", "-j", "65"], {"full": True, "jobs": 65}, "--jobs must be between 1 and 64"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "fields", "fragment"), RESTORE)
def test_restore_request_refuses_what_the_cli_refuses(
    tmp_path: Path, args: list[str], fields: dict[str, object], fragment: str
) -> None:
    library = _refused(lambda: RestoreRequest(**fields))  # type: ignore[arg-type]
    assert fragment in library
    assert _cli_error("restore", str(tmp_path / "a"), "-d", NOWHERE, *args) == library


def test_restore_request_checks_a_part_given_as_numbers() -> None:
    assert _refused(lambda: RestoreRequest(part=(3, 2))) == _refused(lambda: parse_part("3/2"))
    assert RestoreRequest(part=(2, 3)).sharing == 3
    assert RestoreRequest(part=(2, 3), jobs=2).sharing == 6  # each connection a share
    assert RestoreRequest(full=True, jobs=4).sharing == 4  # the LOs over 4 connections too
    assert RestoreRequest(on_conflict="skip").skipping  # type: ignore[arg-type]
    assert RestoreRequest().on_conflict is OnConflict.ERROR


def test_restore_archive_refuses_full_from_a_stream() -> None:
    library = _refused(lambda: restore_archive(NOWHERE, "-", RestoreRequest(full=True)))
    assert _cli_error("restore", "--full", "-", "-d", NOWHERE) == library


def test_dump_refuses_what_the_cli_refuses(tmp_path: Path) -> None:
    library = _refused(lambda: DumpRequest(pg_dump_major=16))
    assert library == "--pg-dump-major goes with --full"
    out = str(tmp_path / "x")
    assert _cli_error("dump", "-d", NOWHERE, "-o", out, "--pg-dump-major", "16") == library
    library = _refused(lambda: dump(NOWHERE, DumpRequest(full=True), stream=io.BytesIO()))
    assert _cli_error("dump", "--full", "-d", NOWHERE, "-o", "-") == library
    library = _refused(lambda: DumpRequest(jobs=0))
    assert _cli_error("dump", "-d", NOWHERE, "-o", out, "-j", "0") == library
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["dump", "-d", NOWHERE, "-o", "x", "--volume-size", "12parsecs"],
            _refused(lambda: parse_size("12parsecs", "--volume-size")),
        ),
        (
            ["dump", "-d", NOWHERE, "-o", "x", "--oids", "9-1"],
            "--oids '9-1': the range must ascend within 0..4294967295",
        ),
        (["ls", "x", "--oids", "a-b"], "--oids 'a-b' is not an OID or a range like 1000-5000"),
        (["restore", "x", "-d", NOWHERE, "--part", "3/2"], _refused(lambda: parse_part("3/2"))),
        (
            ["pack", "x", "-o", "y", "--volume-size", "-1"],
            _refused(lambda: parse_size("-1", "--volume-size")),
        ),
        (
            ["dump", "-d", NOWHERE, "-o", "x", "--referenced-by", "nodot"],
            "--referenced-by 'nodot' must be TABLE.COLUMN (or SCHEMA.TABLE.COLUMN)",
        ),
        (["cat", "x", "0"], "OID 0 is out of range (1 to 4294967295)"),
        (["toc", "extract", "x", "4294967296"], "OID 4294967296 is out of range (1 to 4294967295)"),
        (["bench", "read", "--chunk", "1XB"], _refused(lambda: parse_size("1XB", "--chunk"))),
        (
            ["generate", "-d", NOWHERE, "-n", "lots"],
            "--count 'lots' is not a whole number (like 1000, 100k or 1M)",
        ),
    ],
)
def test_bad_values_are_usage_errors_with_the_core_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _cli_error(*args) == message
    assert list(tmp_path.iterdir()) == []  # refused while parsing: nothing made


def test_the_resume_hint_names_the_requests_command() -> None:
    said = "; run the restore again with --resume to finish it"
    assert RestoreRequest().resume_hint == said
    req = RestoreRequest(jobs=2, resume_command="pgblobdump restore a.pbd -d t --resume")
    assert req.resume_hint == f"{said}: pgblobdump restore a.pbd -d t --resume"
