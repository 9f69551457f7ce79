"""Round trip: random LO sets in a real database, dumped by pg_dump 16, 17 and 18 in
custom and directory format; every LO read back through the TOC reader's one-pass walk
(bytes, owner, ACL, comment) equals what the server holds (lo_get, lomacl)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgblobdump import aclitem as pg_acl
from pgblobdump.errors import ToolchainError
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.servers.doctor import build_compression
from pgblobdump.toc import lo as los
from pgblobdump.toc.reader import open_archive
from tests.conftest import NewDb
from tests.losets import fill, lo_specs, roles, state

MAJORS = (16, 17, 18)


def _pg_dump(major: int) -> tuple[Path, tuple[str, ...]]:
    try:
        chain = toolchain.find(major)
        return chain.tool("pg_dump"), build_compression(chain.bin_dir)
    except ToolchainError as e:
        pytest.skip(f"pg_dump {major} is not installed: {e}")


def _lomacl(owner: str, acl: list[str] | None) -> set[pg_acl.AclItem]:
    """lomacl as a set of items; empty for NULL or an ACL equal to the default."""
    items = {pg_acl.parse(i) for i in acl or ()}
    return set() if items == {pg_acl.AclItem(owner, ("SELECT", "UPDATE"), (), owner)} else items


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    lo_set=lo_specs,
    fmt=st.sampled_from(["c", "d"]),
    compression=st.sampled_from(["none", "gzip", "zstd"]),
)
def test_toc_reader_equals_lo_get(
    pg16: EmbeddedCluster, new_db: NewDb, tmp_path_factory: pytest.TempPathFactory,
    lo_set: dict[int, tuple[int, int, int, bool]], fmt: str, compression: str,
) -> None:  # fmt: skip
    roles(pg16)
    src = new_db(pg16)
    fill(src, lo_set)
    expected = state(src)
    tmp = tmp_path_factory.mktemp("dumps")
    for major in MAJORS:
        pg_dump, built = _pg_dump(major)
        method = compression if compression in built else "gzip"
        path = tmp / f"pg{major}.{fmt}"
        subprocess.run(
            [str(pg_dump), f"-F{fmt}", "-Z", method, "-f", str(path), "-d", src],
            check=True, capture_output=True,
        )  # fmt: skip
        got = {}
        with open_archive(path) as a:
            for lo, pieces in los.iter_data(a):
                assert lo.oid not in got, (major, lo.oid)
                got[lo.oid] = (b"".join(pieces), lo)
        assert set(got) == set(expected), (major, fmt, method)
        for oid, (data, owner, acl, comment) in expected.items():
            read, lo = got[oid]
            where = (major, fmt, method, oid)
            assert read == data, where
            assert lo.owner == owner, where
            assert lo.comment == comment, where
            assert lo.grants is not None, (where, lo.acl)
            assert set(lo.grants) == _lomacl(owner, acl), (where, lo.acl, acl)
