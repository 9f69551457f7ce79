"""pack, verify, ls, cat and unpack of every checked-in archive, with no server: the LOs
come out as make_corpus.py recorded them at the source (bytes, owner, ACL, comment), and
the unpacked pg_dump archive lists and holds what the original did."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgblobdump.cli import cli
from tests.corpus.conftest import NAMES, expected


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _entries(listing: str) -> list[str]:
    return [x for x in listing.splitlines() if x and not x.startswith(";")]


def _md5(path: Path) -> tuple[int, str]:
    data = path.read_bytes()
    return len(data), hashlib.md5(data).hexdigest()


@pytest.mark.parametrize("name", NAMES)
def test_pack_verify_ls_cat_unpack(name: str, tmp_path: Path) -> None:
    e = expected(name)
    # a copy: the checked-in archive must not depend on pack leaving its input alone
    source = tmp_path / e.path.name
    if e.path.is_dir():
        shutil.copytree(e.path, source)
    else:
        shutil.copy(e.path, source)
    packed = tmp_path / "packed"
    result = json.loads(_run("pack", str(source), "-o", str(packed), "--json"))
    assert result["los"] == len(e.los)
    assert result["bytes"] == sum(lo["size"] for lo in e.los.values())
    checked = json.loads(_run("verify", str(packed), "--json"))
    assert (checked["los"], checked["bytes"]) == (result["los"], result["bytes"])

    rows = json.loads(_run("ls", str(packed), "--json"))
    assert [r["oid"] for r in rows] == sorted(e.los)
    for row in rows:
        want = e.los[row["oid"]]
        got = (row["size"], row["owner"], row["acl"], row["comment"])
        assert got == (want["size"], want["owner"], want["acl"], want["comment"]), row
        out = tmp_path / f"{row['oid']}.bin"
        _run("cat", str(packed), str(row["oid"]), "-o", str(out))
        assert _md5(out) == (want["size"], want["md5"]), row

    # back to pg_dump's format: the same entries, the same LOs
    back = tmp_path / "unpacked"
    out_format = "directory" if e.fmt == "directory" else "custom"
    if e.fmt == "tar":  # unpack writes directory and custom archives only, and says so
        for fmt in ("directory", "custom"):
            args = ["unpack", str(packed), "-o", str(back), "--format", fmt]
            refused = CliRunner().invoke(cli, args)
            assert refused.exit_code == 2, refused.output
            assert refused.output.startswith("Error: ") and "tar archive" in refused.output
            assert refused.output.count("\n") == 1 and not back.exists()
        return
    _run("unpack", str(packed), "-o", str(back), "--format", out_format)
    assert _entries(_run("toc", "show", str(back))) == _entries(e.listing)
    again = json.loads(_run("toc", "los", str(back), "--json"))
    assert sorted(r["oid"] for r in again) == sorted(e.los)
    for row in again:
        want = e.los[row["oid"]]
        assert (row["owner"], row["grants"], row["comment"]) == (
            want["owner"],
            want["grants"],
            want["comment"],
        ), row
        out = tmp_path / f"{row['oid']}.again"
        _run("toc", "extract", str(back), str(row["oid"]), "-o", str(out))
        assert _md5(out) == (want["size"], want["md5"]), row
