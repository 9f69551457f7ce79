"""``RunOptions`` refuses what does not go together when it is built: a library caller
meets the same UsageError, word for word, as ``migrate run`` prints, with no server."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pgblobdump.cli import cli
from pgblobdump.errors import UsageError
from pgblobdump.migrate import RunOptions

NOWHERE = "host=/nonexistent port=1 dbname=x connect_timeout=1"


@pytest.mark.parametrize(
    ("args", "fields", "fragment"),
    [
        (["--owner", "r"], {"owner": "r"}, "--owner goes with --to lo"),
        (["--unlink", "--keep-old"], {"unlink": True, "keep_old": True}, "--unlink with"),
        (
            ["--to", "text", "--missing", "null"],
            {"to": "text", "missing": "null"},
            "--missing does not go with --to text",
        ),
        (["--to", "oid", "--unlink"], {"to": "oid", "unlink": True}, "--unlink with --to oid"),
        (
            ["--to", "oid", "--storage", "external"],
            {"to": "oid", "storage": "external"},
            "--to oid makes an oid column",
        ),
        (["--url"], {"url": True}, "--url goes with --to s3://bucket/prefix"),
        (
            ["--to", "s3://b/p", "--storage", "external"],
            {"to": "s3", "store": "s3://b/p", "storage": "external"},
            "--to s3:// makes a text column of keys",
        ),
        (
            ["--to", "s3://b/p", "--owner", "r"],
            {"to": "s3", "store": "s3://b/p", "owner": "r"},
            "--owner goes with --to lo",
        ),
    ],
)
def test_run_options_refuse_what_the_cli_refuses(
    args: list[str], fields: dict[str, object], fragment: str
) -> None:
    with pytest.raises(UsageError) as caught:
        RunOptions(**fields)  # type: ignore[arg-type]
    assert fragment in str(caught.value)
    result = CliRunner().invoke(
        cli, ["migrate", "run", "-d", NOWHERE, "t.c", *args], catch_exceptions=False
    )
    assert result.exit_code == 2, result.stderr
    assert result.stderr == f"Error: {caught.value}\n"


def test_run_options_refuse_an_unknown_direction_or_missing_policy() -> None:
    with pytest.raises(UsageError, match="--to must be one of bytea, lo, text, oid"):
        RunOptions(to="clob")
    with pytest.raises(UsageError, match="--missing must be one of error, null, skip"):
        RunOptions(missing="ignore")


def test_object_storage_options() -> None:
    assert RunOptions(to="s3", store="s3://b/p/").store == "s3://b/p"  # one spelling
    with pytest.raises(UsageError, match="s3://bucket/prefix"):
        RunOptions(to="s3", store="/tmp/dir")
    result = CliRunner().invoke(
        cli, ["migrate", "run", "-d", NOWHERE, "t.c", "--from", "s3://b/p"],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 2 and "--from s3://bucket/prefix goes with --to lo" in result.stderr
    result = CliRunner().invoke(
        cli, ["migrate", "run", "-d", NOWHERE, "t.c", "--to", "ftp://x"], catch_exceptions=False
    )
    assert result.exit_code == 2 and "s3://bucket/prefix" in result.stderr
