"""A damaged packed archive: restore refuses it, naming --skip-damaged, and leaves
nothing; with --skip-damaged it restores every intact LO, names the ones it skipped,
rolls back a large LO cut, and exits 14 after its report."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner, Result

from pgblobdump.cli import cli
from pgblobdump.packed import DumpRequest, PackedDirectory
from pgblobdump.packed.dump.run import dump
from pgblobdump.packed.format.spec import volume_name, volume_of
from pgblobdump.packed.read.parts import share
from pgblobdump.pg.ledger import ranges_text
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.storage import LocalDirectory
from tests.conftest import NewDb
from tests.losets import State, state

LARGE = 900  # a 3 MiB LO: three 1 MiB pieces, a frame each


@dataclass
class Damageable:
    src: State
    path: Path
    frames: dict[str, list[tuple[int, list[int]]]]  # volume -> [(offset, OIDs starting there)]


@pytest.fixture(scope="module")
def archive(pg17: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Damageable:
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS damaged_src")
        conn.execute("CREATE DATABASE damaged_src")
    db = pg17.conninfo("damaged_src")
    with psycopg.connect(db, autocommit=True) as conn:
        # 6,000 LOs of 548 bytes (a 1 MiB frame holds about 1,900 of them), some empty
        conn.execute("SELECT count(lo_from_bytea(o, CASE WHEN o % 100 = 0 THEN ''::bytea ELSE"
                     " decode(repeat(md5(o::text), 32), 'hex') || gen_random_uuid()::text::bytea"
                     " END)) FROM generate_series(1000, 6999) o")  # fmt: skip
        conn.execute("SELECT lo_from_bytea(%s, %s)", (LARGE, os.urandom(3 << 20)))
    path = tmp_path_factory.mktemp("damaged") / "archive"
    dump(db, DumpRequest(level=0), storage=LocalDirectory(path, create=True))
    frames: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for r in PackedDirectory(LocalDirectory(path)).index:
        frames[volume_name(*volume_of(r.volume))][r.offset].append(r.oid)
    return Damageable(state(db), path, {v: sorted(f.items()) for v, f in frames.items()})


def _copy(a: Damageable, tmp: Path) -> Path:
    out = tmp / "copy"
    shutil.copytree(a.path, out)
    return out


def _restore(path: Path, db: str, *extra: str) -> Result:
    return CliRunner().invoke(cli, ["restore", str(path), "-d", db, "--json", *extra])


def skipped(done: Result, lost: int) -> None:
    """A restore that skipped ``lost`` LOs: exit 14 (before: 0, which a script could not
    tell from a whole restore), its JSON report first on stdout, then one Error line."""
    assert done.exit_code == 14, done.output
    report = json.loads(done.stdout)
    assert report["damaged"] == lost and report["los"] > 0
    # Before: "damaged_oids" was a string of ranges ("70000..70099, 70200"), not a list.
    oids = report["damaged_oids"]
    assert len(oids) == lost and oids == sorted(oids) and all(type(o) is int for o in oids)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: restored {report['los']:,} LOs and skipped {lost:,} of the"
                           " damaged archive (OIDs "), last  # fmt: skip
    assert last.endswith("); restore those from another copy"), last


def _flip(path: Path, at: int) -> None:
    with path.open("r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


@pytest.mark.parametrize("jobs", ["1", "2"], ids=["1-job", "jobs-2"])
def test_a_damaged_frame(archive: Damageable, pg17: EmbeddedCluster, new_db: NewDb,
                         tmp_path: Path, jobs: str) -> None:  # fmt: skip
    path = _copy(archive, tmp_path)
    ((volume, frames),) = archive.frames.items()
    assert len(frames) >= 4, frames  # several frames of small LOs, and the large LO's
    offset, lost = next((o, oids) for o, oids in frames[1:] if LARGE not in oids)
    _flip(path / volume, offset + 200)

    dst = new_db(pg17)
    refused = _restore(path, dst, "--jobs", jobs)
    assert refused.exit_code == 7, refused.output
    assert f"frame at byte {offset:,} is damaged" in refused.stderr
    # Before: the error did not say that --skip-damaged reads past the damage.
    assert refused.stderr.count("\n") == 1 and (
        "; restore --skip-damaged restores the LOs the damage spares and names those it skips"
        " (exit 14)" in refused.stderr
    ), refused.stderr
    assert state(dst) == {}  # what was restored before the damage was met is removed

    done = _restore(path, dst, "--skip-damaged", "--jobs", jobs)
    skipped(done, len(lost))
    report = json.loads(done.stdout)
    assert report["damaged"] == len(lost) > 100
    assert f"skipped {len(lost):,} LOs of a damaged part" in done.stderr
    line = next(x for x in done.stderr.splitlines() if "of a damaged part" in x)
    assert line.count(f"at byte {offset:,}") == 1, line  # said once, not twice
    assert report["damaged_oids"] == sorted(lost)
    want = {oid: v for oid, v in archive.src.items() if oid not in set(lost)}
    assert state(dst) == want
    if jobs == "1":  # CSV keeps the OIDs as ranges, in one cell
        csv = CliRunner().invoke(cli, ["restore", str(path), "-d", new_db(pg17), "--csv",
                                       "--skip-damaged"])  # fmt: skip
        assert csv.exit_code == 14, csv.output
        cell = next(x for x in csv.stdout.splitlines() if x.startswith("damaged OIDs,"))
        assert cell.removeprefix("damaged OIDs,").strip('"') == ranges_text(sorted(lost))


@pytest.mark.parametrize("jobs", ["1", "2"], ids=["1-job", "jobs-2"])
def test_a_large_lo_cut_by_damage_is_rolled_back(
    archive: Damageable, pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path, jobs: str
) -> None:
    path = _copy(archive, tmp_path)
    ((volume, frames),) = archive.frames.items()
    first = next(o for o, oids in frames if LARGE in oids)
    # the large LO's second frame follows its first: no index entry points at it
    _flip(path / volume, first + (1 << 20) + 4096)
    dst = new_db(pg17)
    done = _restore(path, dst, "--skip-damaged", "--jobs", jobs)
    skipped(done, 1)
    assert state(dst) == {oid: v for oid, v in archive.src.items() if oid != LARGE}


@pytest.mark.parametrize("jobs", ["1", "2"], ids=["1-job", "jobs-2"])
def test_a_truncated_volume(archive: Damageable, pg17: EmbeddedCluster, new_db: NewDb,
                            tmp_path: Path, jobs: str) -> None:  # fmt: skip
    path = _copy(archive, tmp_path)
    ((volume, frames),) = archive.frames.items()
    cut, _ = frames[-1]  # at a frame boundary: the volume reads as complete but short
    with (path / volume).open("r+b") as f:
        f.truncate(cut)
    lost = frames[-1][1]
    dst = new_db(pg17)
    assert _restore(path, dst, "--jobs", jobs).exit_code == 7
    assert state(dst) == {}
    done = _restore(path, dst, "--skip-damaged", "--jobs", jobs)
    skipped(done, len(lost))
    assert "(truncated)" in done.stderr
    assert state(dst) == {oid: v for oid, v in archive.src.items() if oid not in set(lost)}


def test_a_damaged_frame_across_two_connections(
    archive: Damageable, pg17: EmbeddedCluster, new_db: NewDb, tmp_path: Path
) -> None:
    """--jobs 2 whose two OID ranges both hold LOs of the damaged frame: each connection
    skips its own of them, and together they are exactly the frame's."""
    path = _copy(archive, tmp_path)
    ((volume, frames),) = archive.frames.items()
    _first, cut = share(PackedDirectory(LocalDirectory(path)), 1, 2)
    offset, lost = next((o, oids) for o, oids in frames if min(oids) <= cut < max(oids))
    _flip(path / volume, offset + 200)
    dst = new_db(pg17)
    done = _restore(path, dst, "--skip-damaged", "--jobs", "2")
    skipped(done, len(lost))
    report = json.loads(done.stdout)
    assert report["damaged"] == len(lost)
    counts = [int(n.replace(",", "")) for n in re.findall(r"skipped ([\d,]+) LOs", done.stderr)]
    assert len(counts) == 2 and sum(counts) == len(lost), done.stderr
    assert state(dst) == {oid: v for oid, v in archive.src.items() if oid not in set(lost)}


def test_a_stream_cannot_skip(tmp_path: Path) -> None:
    stream = tmp_path / "a.stream"
    stream.write_bytes(b"PGBDSTRM" + bytes(8))
    result = _restore(stream, "dbname=x", "--skip-damaged")
    assert result.exit_code == 7  # the wrong kind of archive, as for ls, cat or verify
    assert f"{stream}: not a packed archive (a directory with a manifest.json)" in result.stderr
