"""``restore`` cut on the wire after N bytes: one Error line, exit 3 or 4; then
``restore --resume`` through a healthy connection finishes, every LO equal to the source
(bytes, owner, ACL with grantors, comment). ``restore --jobs 2`` the same: the cut lands
on whichever of its connections carries byte N."""

from __future__ import annotations

import pytest

from tests.conftest import NewDb
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
    snapshot,
    through_proxy,
    uncut_total,
)
from tests.faults.proxy import Kind


def _cut_restore(
    source: Source, new_db: NewDb, n: int, k: int, kind: Kind, heal: bool, *more: str
) -> None:
    cluster = source.cluster
    args = ["restore", str(source.archive), *more]
    total = uncut_total(
        " ".join(["restore", *more]),
        lambda: through_proxy(cluster, new_db(cluster).rsplit("=", 1)[1], args, None),
    )
    at = cut_points(total, n)[k]
    dst = new_db(cluster)
    cut = through_proxy(cluster, dst.rsplit("=", 1)[1], args, at, kind, heal)
    command = " ".join(["restore", *more]) + (" (link back for clean-up)" if heal else "")
    if cut.code == 0:
        ending = finished(cut)
    else:
        line = one_error_line(cut)
        ending = f"exit {cut.code}" + (", removed what it made" if "; removed the" in line else "")
        ending += ", left in place" if "left in place" in line else ""
        print(f"\n{command} cut at {at:,} ({kind}): {line}")
        code, err, _ = run_tool(*args, "-d", dst, "--resume")
        assert code == 0, err
    assert snapshot(dst) == source.expected
    record(command, cut, ending)


@pytest.mark.parametrize(("k", "kind"), kinds(FAST))
def test_restore_cut_then_resume(source: Source, new_db: NewDb, k: int, kind: Kind) -> None:
    _cut_restore(source, new_db, FAST, k, kind, heal=False)


@pytest.mark.scale
@pytest.mark.parametrize("heal", [False, True], ids=["down", "back"])
@pytest.mark.parametrize(("k", "kind"), kinds(SLOW))
def test_restore_cut_matrix(source: Source, new_db: NewDb, k: int, kind: Kind, heal: bool) -> None:
    _cut_restore(source, new_db, SLOW, k, kind, heal)


@pytest.mark.parametrize(("k", "kind"), kinds(FAST))
def test_restore_jobs_2_cut_then_resume(source: Source, new_db: NewDb, k: int, kind: Kind) -> None:
    _cut_restore(source, new_db, FAST, k, kind, False, "--jobs", "2")
