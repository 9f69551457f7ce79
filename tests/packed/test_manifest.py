"""The typed manifest (packed/format/manifest.py): what dump, pack and merge write reads back as
the same bytes (archives stay byte-identical), any Manifest survives a write and a read,
keys of a newer writer are kept, and a damaged manifest is refused in one line naming
the key."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from pgblobdump.cli import cli
from pgblobdump.errors import CorruptArchive, NotAnArchive, UnsupportedArchive
from pgblobdump.packed.format.manifest import (
    ChainLink,
    DumpSource,
    Incremental,
    IndexTail,
    Manifest,
    MergedFrom,
    PackSource,
    PgDumpFile,
)
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage import FileInfo
from tests.conftest import NewDb
from tests.losets import fill, roles

DATA = Path(__file__).parent / "data"

INCREMENTAL = b"""{
 "format": "pgblobdump-packed",
 "version": 3,
 "created": "2026-11-28T00:27:37+00:00",
 "source": {
  "server_version": "16.14",
  "database": "t0",
  "user": "postgres",
  "snapshot": "00000002-0000000D-1",
  "connection": "database t0 on /tmp/pgbd-ml_fv61w/data:44787",
  "mark": [
   "system 7713012460387829280",
   16387,
   737,
   737,
   [],
   1,
   28826616
  ]
 },
 "los": 0,
 "bytes": 0,
 "metadata_values": 3,
 "workers": 1,
 "incremental": {
  "chain": [
   {
    "manifest": "ecab2b96dcf877b5069b5b6d2b6b54d4",
    "where": "/tmp/pytest-of-root/pytest-19/test_what_dump_pack_and_merge_0/full",
    "created": "2026-11-28T00:27:37+00:00",
    "snapshot": "00000002-0000000B-1",
    "los": 3,
    "bytes": 3010
   }
  ],
  "los": 3,
  "bytes": 3010,
  "new": 0,
  "changed": 0,
  "carried": 3,
  "gone": 0,
  "metadata_only": 0,
  "detection": "transaction ids"
 },
 "index_tail": {
  "offset": 82,
  "xxh3_128": "b2b403574d83e2f1075fa658909d6f6a"
 },
 "files": [
  {
   "name": "gone.oids",
   "size": 9,
   "xxh3_128": "b46473c1d07a9304fd506b13161aba64"
  },
  {
   "name": "index.pbi",
   "size": 269,
   "xxh3_128": "86144d329c747f271257aa5657b6ac4c"
  }
 ]
}
"""
"""What dump --since FULL wrote next (by the server test below)."""

PACKED = b"""{
 "format": "pgblobdump-packed",
 "version": 2,
 "created": "2026-11-28T00:27:37+00:00",
 "source": {
  "pg_dump_archive": "/tmp/pytest-of-root/pytest-19/test_what_dump_pack_and_merge_0/d",
  "format": "directory",
  "archive_version": "1.15-0",
  "compression": "gzip",
  "pg_dump_version": "16.14",
  "server_version": "16.14",
  "database": "t0",
  "kept": "pg_dump.tar"
 },
 "los": 3,
 "bytes": 3010,
 "metadata_values": 3,
 "workers": 1,
 "ordered": false,
 "index_tail": {
  "offset": 84,
  "xxh3_128": "9522d07012a0a7ad3511cf7e3f9b1dcc"
 },
 "files": [
  {
   "name": "pg_dump.tar",
   "size": 10240,
   "xxh3_128": "f083305b0f566d404628f6358ae90a64"
  },
  {
   "name": "data-1-000001.pbd",
   "size": 3162,
   "xxh3_128": "450988420adf4b49dba9294eb0e77008"
  },
  {
   "name": "index.pbi",
   "size": 271,
   "xxh3_128": "bc0a49249514196ba03bee9478ff21ca"
  }
 ]
}
"""
"""What pack of a pg_dump 16 -Fd archive wrote (by the server test below)."""

WHERE = "x.pbd/manifest.json"


def test_the_bytes_written_are_the_bytes_read() -> None:
    """Manifests dump --since and pack wrote, and one of format version 1 (checked in),
    read and written again are the same bytes."""
    v1 = (DATA / "v1.pbd" / "manifest.json").read_bytes()
    for body in (INCREMENTAL, PACKED, v1):
        assert Manifest.parse(body, WHERE).to_json() == body
    m = Manifest.parse(INCREMENTAL, WHERE)
    assert isinstance(m.source, DumpSource) and m.source.database == "t0"
    assert m.incremental is not None and m.incremental.chain[-1].where.endswith("/full")
    assert m.snapshot_totals == (3, 3010) and (m.los, m.bytes) == (0, 0)
    assert m.listed_index(WHERE).size == 269 and m.volumes == []
    packed = Manifest.parse(PACKED, WHERE)
    assert isinstance(packed.source, PackSource) and packed.source.kept == "pg_dump.tar"
    assert not packed.ordered and Manifest.parse(v1, WHERE).index_tail is None


def test_keys_of_a_newer_writer_are_kept() -> None:
    body = json.loads(INCREMENTAL)
    body["signature"] = {"by": "a newer pgblobdump"}
    body["source"]["zone"] = "eu"
    m = Manifest.parse(json.dumps(body, indent=1).encode(), WHERE)
    assert m.extra == {"signature": {"by": "a newer pgblobdump"}}
    assert m.source.extra == {"zone": "eu"}
    again = json.loads(m.to_json())
    assert again["signature"] == body["signature"] and again["source"] == body["source"]
    assert list(again)[-1] == "signature"  # after the known keys


def _edited(**changes: Any) -> bytes:
    body = json.loads(INCREMENTAL)
    for key, value in changes.items():
        if value is _GONE:
            del body[key]
        else:
            body[key] = value
    return json.dumps(body).encode()


_GONE = object()


@pytest.mark.parametrize(
    ("body", "error", "said"),
    [
        (b"{", CorruptArchive, "the manifest is not JSON"),
        (b"[]", NotAnArchive, "not a pgblobdump packed archive manifest"),
        (_edited(format="other"), NotAnArchive, "not a pgblobdump packed archive manifest"),
        (_edited(version=4), UnsupportedArchive, "format version 4, written by a newer"),
        (_edited(los=_GONE), CorruptArchive, "the manifest has no 'los'"),
        (_edited(source=_GONE), CorruptArchive, "the manifest has no 'source'"),
        (_edited(los="12"), CorruptArchive, "'los' is \"12\", not an integer"),
        (_edited(bytes=True), CorruptArchive, "'bytes' is true, not an integer"),
        (_edited(source="a string"), CorruptArchive, "'source' is \"a string\", not an object"),
        (_edited(files={}), CorruptArchive, "'files' is an object, not an array"),
        (_edited(files=[{"name": "index.pbi", "size": -1.5, "xxh3_128": "00"}]),
         CorruptArchive, "'files[0].size' is -1.5, not an integer"),
        (_edited(ordered="no"), CorruptArchive, "'ordered' is \"no\", not true or false"),
        (_edited(incremental={"chain": [{"manifest": "ab"}]}),
         CorruptArchive, "'incremental.chain[0].where' is missing (or null), not a string"),
        (_edited(index_tail={"offset": "1"}), CorruptArchive, "index_tail is damaged"),
        (_edited(source={"format": "custom"}),
         CorruptArchive, "'source.pg_dump_archive' is missing (or null), not a string"),
        (_edited(source={"pg_dump": {"version": 17, "file": "database.dump"}}),
         CorruptArchive, "'source.pg_dump.version' is 17, not a string"),
        (_edited(source={"mark": "1/2"}), CorruptArchive, "'source.mark' is \"1/2\", not an array"),
    ],
)  # fmt: skip
def test_a_damaged_manifest_is_refused_naming_the_key(
    body: bytes, error: type[Exception], said: str
) -> None:
    with pytest.raises(error) as e:
        Manifest.parse(body, WHERE)
    assert str(e.value).startswith(f"{WHERE}: ") and said in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


text = st.text(max_size=12)
maybe_text = st.none() | text
count = st.integers(0, 2**63)
files = st.builds(FileInfo, text, count, text)
links = st.lists(st.builds(ChainLink, text, text, maybe_text, maybe_text, count, count),
                 max_size=3).map(tuple)  # fmt: skip
marks = st.none() | st.tuples(text, count, count, count, st.lists(count, max_size=3),
                              st.none() | count, st.none() | count)  # fmt: skip
dump_sources = st.builds(DumpSource, maybe_text, maybe_text, maybe_text, maybe_text, maybe_text,
                         marks, st.none() | st.builds(PgDumpFile, text, text))  # fmt: skip
pack_sources = st.builds(PackSource, text, text, text, text, maybe_text, maybe_text,
                         maybe_text, maybe_text)  # fmt: skip
incrementals = st.builds(Incremental, links, count, count, count, count, count, count,
                         st.none() | count, maybe_text)  # fmt: skip
manifests = st.builds(
    Manifest,
    version=st.integers(1, 3),
    created=text,
    source=dump_sources | pack_sources,
    los=count,
    bytes=count,
    metadata_values=count,
    workers=st.integers(1, 64),
    files=st.lists(files, max_size=4).map(tuple),
    ordered=st.booleans(),
    incremental=st.none() | incrementals,
    merged_from=st.none() | st.builds(MergedFrom, text, text, links),
    index_tail=st.none() | st.builds(IndexTail, count, text),
    extra=st.dictionaries(text.filter(lambda k: k not in Manifest.KEYS), count, max_size=2),
)


@given(manifests)
def test_any_manifest_reads_back_as_written(m: Manifest) -> None:
    body = m.to_json()
    again = Manifest.parse(body, WHERE)
    assert again == m
    assert again.to_json() == body


def _cli(*args: str) -> Result:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_what_dump_pack_and_merge_write_reads_back_byte_for_byte(
    pg16: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """Manifests written today (dump --full over 2 workers, dump --since, merge, pack of a
    pg_dump -Fd archive) parsed and written again are the same bytes, with their parts
    typed."""
    roles(pg16)
    db = new_db(pg16)
    fill(db, {41_000: (10, 0, 1, True), 41_001: (3000, 1, 0, False), 41_002: (0, 2, 2, True)})
    full, inc, merged = tmp_path / "full", tmp_path / "inc", tmp_path / "merged"
    _cli("dump", "--full", "-j", "2", "-d", db, "-o", str(full))
    _cli("dump", "-d", db, "-o", str(inc), "--since", str(full))
    _cli("merge", str(inc), "-o", str(merged))
    bodies = {p.name: (p / "manifest.json").read_bytes() for p in (full, inc, merged)}
    try:
        pg_dump = toolchain.find(16, ("pg_dump",)).tool("pg_dump")
    except Exception as e:  # the round trips above still ran
        pytest.skip(f"pg_dump 16 is not installed: {e}")
    subprocess.run([str(pg_dump), "-Fd", "-f", str(tmp_path / "d"), "-d", db], check=True,
                   capture_output=True)  # fmt: skip
    _cli("pack", str(tmp_path / "d"), "-o", str(tmp_path / "packed"))
    bodies["packed"] = (tmp_path / "packed" / "manifest.json").read_bytes()
    m = {name: Manifest.parse(body, name) for name, body in bodies.items()}
    for name, body in bodies.items():
        assert m[name].to_json() == body, name
    assert isinstance(m["full"].source, DumpSource) and m["full"].source.pg_dump is not None
    assert m["full"].workers == 2 and m["full"].source.mark is not None
    assert m["full"].volumes == ["data-1-000001.pbd", "data-2-000001.pbd"]
    assert m["inc"].incremental is not None and m["inc"].incremental.chain[0].where == str(full)
    assert m["merged"].merged_from is not None and m["merged"].source == m["inc"].source
    assert isinstance(m["packed"].source, PackSource) and m["packed"].ordered is False
