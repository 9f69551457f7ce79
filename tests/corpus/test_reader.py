"""The TOC reader on every checked-in archive (pg_dump 15-18), with no server and no
pg_restore: its listing against the recorded ``pg_restore -l``, its LOs against the
recorded catalog (owner, grants with their grantors, comment, bytes)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pgblobdump.cli import cli
from pgblobdump.toc import open_archive, summarize
from tests.corpus.conftest import INDEX, NAMES, expected


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _entries(listing: str) -> list[str]:
    return [x for x in listing.splitlines() if x and not x.startswith(";")]


def test_corpus_covers_every_major_format_and_compression() -> None:
    """What make_corpus.py could not make is named with pg_dump's reason, and what the
    wheels can make is there (a regeneration on a poorer machine shows in the diff)."""
    made = set(NAMES)
    for major in (15, 16, 17, 18):
        for fmt in ("custom", "directory", "tar"):
            for comp in ("none", "gzip", "lz4", "zstd"):
                name = f"pg{major}-{fmt}-{comp}"
                assert (name in made) != (name in INDEX["skipped"]), name
    formats = ("custom", "directory", "tar")
    assert {f"pg{m}-{f}-none" for m in (15, 16, 17, 18) for f in formats} <= made
    assert {f"pg17-{f}-{c}" for f in formats[:2] for c in ("lz4", "zstd")} <= made


@pytest.mark.parametrize("name", NAMES)
def test_listing_equals_pg_restore_l(name: str) -> None:
    e = expected(name)
    native = _run("toc", "show", str(e.path))
    assert _entries(native) == _entries(e.listing)
    if e.major >= 16:  # pg_restore 15 prints the gzip level ("Compression: 6"), 16+ "gzip"
        assert native == e.listing  # the ';' header too


@pytest.mark.parametrize("name", NAMES)
def test_large_objects_match_the_source(name: str, tmp_path: Path) -> None:
    e = expected(name)
    rows = json.loads(_run("toc", "los", str(e.path), "--json"))
    assert sorted(r["oid"] for r in rows) == sorted(e.los)  # each LO once
    for row in rows:
        want = e.los[row["oid"]]
        assert row["owner"] == want["owner"], row
        assert row["grants"] == want["grants"], row
        assert row["comment"] == want["comment"], row
        if e.compression == "none":
            assert row["size"] == want["size"], row
        out = tmp_path / f"{row['oid']}.bin"
        _run("toc", "extract", str(e.path), str(row["oid"]), "-o", str(out))
        data = out.read_bytes()
        assert (len(data), hashlib.md5(data).hexdigest()) == (want["size"], want["md5"]), row


@pytest.mark.parametrize("name", NAMES)
def test_summary(name: str) -> None:
    e = expected(name)
    with open_archive(e.path) as a:
        s = summarize(a)
    assert s.format == e.fmt
    assert s.compression == e.compression
    assert s.listed == len(_entries(e.listing))
    assert s.lo_count == len(e.los)
    assert s.los_with_data == len(e.los)
    assert s.los_with_comment == sum(lo["comment"] is not None for lo in e.los.values())
    assert s.los_with_acl == sum(lo["acl"] is not None for lo in e.los.values())
    owners: dict[str, int] = {}
    for lo in e.los.values():
        owners[lo["owner"]] = owners.get(lo["owner"], 0) + 1
    assert s.lo_owners == owners
    assert s.entries_by_type["TABLE DATA"] == 1
    if e.major >= 17:  # grouped BLOB METADATA: the plain LOs share a group
        assert s.entries_by_type["BLOB METADATA"] < len(e.los)
    else:
        assert s.entries_by_type["BLOB"] == len(e.los)
