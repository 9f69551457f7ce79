"""``dump`` (--jobs 1 and 2) cut on the wire after N bytes: one Error line, exit 3 or 4,
and nothing left that reads as an archive."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.faults.conftest import (
    FAST,
    SLOW,
    Source,
    cut_points,
    finished,
    kinds,
    one_error_line,
    record,
    run_tool,
    through_proxy,
    uncut_total,
)
from tests.faults.proxy import Kind


def _total(source: Source, jobs: int, tmp_path: Path) -> int:
    """Bytes of an uncut ``dump --jobs JOBS`` through the proxy (measured once)."""
    args = _args(jobs, tmp_path / "uncut")
    return uncut_total(
        f"dump --jobs {jobs}", lambda: through_proxy(source.cluster, source.dbname, args, None)
    )


def _args(jobs: int, out: Path) -> list[str]:
    return ["dump", "--jobs", str(jobs), "-o", str(out)]


def _cut_dump(source: Source, tmp_path: Path, jobs: int, n: int, k: int, kind: Kind) -> None:
    at = cut_points(_total(source, jobs, tmp_path), n)[k]
    out = tmp_path / "a"
    cut = through_proxy(source.cluster, source.dbname, _args(jobs, out), at, kind)
    command = f"dump --jobs {jobs}"
    if cut.code == 0:
        # Only when the cut came after the last byte the run needed (its Terminate).
        ending = finished(cut)
        code, err, _ = run_tool("verify", str(out))
        assert code == 0, err
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["los"] == len(source.expected), manifest
    else:
        line = one_error_line(cut)
        ending = f"exit {cut.code}"
        print(f"\n{command} cut at {at:,} ({kind}): {line}")
        assert not (out / "manifest.json").exists(), sorted(p.name for p in out.iterdir())
        if out.exists():
            code, err, _ = run_tool("verify", str(out))
            assert code != 0, err
    record(command, cut, ending)


@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize(("k", "kind"), kinds(FAST))
def test_dump_cut(source: Source, tmp_path: Path, jobs: int, k: int, kind: Kind) -> None:
    _cut_dump(source, tmp_path, jobs, FAST, k, kind)


@pytest.mark.scale
@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize(("k", "kind"), kinds(SLOW))
def test_dump_cut_matrix(source: Source, tmp_path: Path, jobs: int, k: int, kind: Kind) -> None:
    _cut_dump(source, tmp_path, jobs, SLOW, k, kind)
