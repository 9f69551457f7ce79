"""``verify ARCHIVE -d`` cut on the wire after N bytes: one Error line and exit 3 or 4,
never exit 1 ("the database differs") nor 0 for a comparison it could not finish."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
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


@pytest.fixture(scope="module")
def restored(source: Source) -> Iterator[str]:
    """A database holding the archive's LOs (restored directly): its dbname."""
    cluster = source.cluster
    with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS wire_verify WITH (FORCE)")
        conn.execute("CREATE DATABASE wire_verify")
    code, err, _ = run_tool("restore", str(source.archive), "-d", cluster.conninfo("wire_verify"))
    assert code == 0, err
    yield "wire_verify"
    with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS wire_verify WITH (FORCE)")


def _cut_verify(source: Source, restored: str, n: int, k: int, kind: Kind) -> None:
    args = ["verify", str(source.archive)]
    total = uncut_total("verify -d", lambda: through_proxy(source.cluster, restored, args, None))
    at = cut_points(total, n)[k]
    cut = through_proxy(source.cluster, restored, args, at, kind)
    if cut.code == 0:
        ending = finished(cut)
    else:
        line = one_error_line(cut)
        print(f"\nverify -d cut at {at:,} ({kind}): {line}")
        ending = f"exit {cut.code}"
    record("verify -d", cut, ending)


@pytest.mark.parametrize(("k", "kind"), kinds(FAST))
def test_verify_cut(source: Source, restored: str, k: int, kind: Kind) -> None:
    _cut_verify(source, restored, FAST, k, kind)


@pytest.mark.scale
@pytest.mark.parametrize(("k", "kind"), kinds(SLOW))
def test_verify_cut_matrix(source: Source, restored: str, k: int, kind: Kind) -> None:
    _cut_verify(source, restored, SLOW, k, kind)
