"""The realistic corpus: log-normal sizes, mixed content, sparse LOs, streamed big LOs."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import psycopg
import pytest

from pgblobdump.errors import UsageError
from pgblobdump.generate import Content, GenerateSpec, SizeDist, SizeSpec, generate
from pgblobdump.generate.content import ContentSource
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run
from tests.conftest import NewDb

KiB, MiB = 1024, 1024 * 1024


def _sizes(dist: SizeDist, seed: int, n: int) -> list[int]:
    source = ContentSource(SizeSpec(0, 0), Content.ZEROS, seed, dist)
    return [source.plan().size for _ in range(n)]


def test_lognormal_median_and_tail() -> None:
    sizes = sorted(_sizes(SizeDist(16 * KiB, 2.5), seed=3, n=40_000))
    median = sizes[len(sizes) // 2]
    assert 15 * KiB <= median <= 17 * KiB, median
    # P(size > 1 MiB) = P(Z > ln(64) / 2.5) = 4.8%; P(> 64 MiB) = P(Z > 3.33) = 0.043%.
    over_1m = sum(s > MiB for s in sizes) / len(sizes)
    assert 0.042 <= over_1m <= 0.054, over_1m
    over_64m = sum(s > 64 * MiB for s in sizes)
    assert 5 <= over_64m <= 35, over_64m
    assert max(sizes) <= 1024**3


def test_lognormal_is_clipped_and_seeded() -> None:
    clipped = _sizes(SizeDist(16 * KiB, 2.5, MiB), seed=1, n=5000)
    assert max(clipped) == MiB
    assert 0.03 <= clipped.count(MiB) / 5000 <= 0.07
    assert _sizes(SizeDist(16 * KiB), 9, 500) == _sizes(SizeDist(16 * KiB), 9, 500)
    assert _sizes(SizeDist(16 * KiB), 9, 500) != _sizes(SizeDist(16 * KiB), 10, 500)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("normal:16KiB", "lognormal:MEDIAN"),
        ("lognormal", "lognormal:MEDIAN"),
        ("lognormal:big", "lognormal:MEDIAN"),
        ("lognormal:16KiB:x", "lognormal:MEDIAN"),
        ("lognormal:0", "median must be at least"),
        ("lognormal:16KiB:11", "sigma must be between"),
        ("lognormal:16KiB:2:1KiB", "max is below the median"),
        ("lognormal:16KiB:2:5TiB", "4 TB"),
        ("lognormal:16KiB:2:1GiB:3", "lognormal:MEDIAN"),
    ],
)
def test_bad_size_dist_is_a_one_line_usage_error(text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(")):
        SizeDist.parse(text)
    assert_one_line_error(run("generate", "--size-dist", text), 2, fragment)


def test_bad_combinations_are_one_line_errors() -> None:
    r = run("generate", "--size", "1KiB-4KiB", "--size-dist", "lognormal:16KiB")
    assert_one_line_error(r, 2, "--size and --size-dist")
    assert_one_line_error(run("generate", "--sparse", "1.5"), 2, "sparse fraction")
    assert_one_line_error(run("generate", "--content", "pink"), 2, "pink")
    assert_one_line_error(run("generate", "--preset", "huge"), 2, "huge")


def _digest(db: str) -> str:
    with psycopg.connect(db) as conn:
        h = hashlib.sha256()
        for oid, data in conn.execute(
            "SELECT oid::int8, lo_get(oid) FROM pg_largeobject_metadata ORDER BY oid"
        ):
            h.update(oid.to_bytes(8, "big") + len(data).to_bytes(8, "big") + data)
        return h.hexdigest()


SPARSE_SPEC = GenerateSpec(
    300,
    content=Content.MIXED,
    size_dist=SizeDist(16 * KiB, 1.5, 6 * MiB),
    sparse_fraction=0.2,
    seed=11,
    start_oid=900_000,
)


def test_sparse_los_have_holes_that_read_as_zeros(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    r = generate(db, SPARSE_SPEC)
    assert r.count == 300 and r.sparse > 20
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            """
            WITH l AS (SELECT oid, length(lo_get(oid)) AS len FROM pg_largeobject_metadata),
            p AS (SELECT loid, count(*) AS pages FROM pg_largeobject GROUP BY loid)
            SELECT l.oid::int8, l.len, coalesce(p.pages, 0), (l.len + 2047) / 2048
            FROM l LEFT JOIN p ON p.loid = l.oid ORDER BY l.oid
            """
        ).fetchall()
        assert sum(length for _, length, _, _ in rows) == r.total_bytes
        holed = [(oid, length) for oid, length, pages, need in rows if pages < need]
        # Exactly the LOs written sparse miss pages; every other LO has all its pages.
        assert len(holed) == r.sparse
        # The three shapes: a hole at the start, in the middle, and an LO mostly hole.
        starts = {
            conn.execute(
                "SELECT min(pageno) FROM pg_largeobject WHERE loid = %s::int8::oid", (oid,)
            ).fetchone()[0]  # type: ignore[index]
            > 0
            for oid, _ in holed
        }
        assert starts == {True, False}
        missing = conn.execute(
            """
            WITH l AS (SELECT oid, length(lo_get(oid)) AS len FROM pg_largeobject_metadata),
            m AS (SELECT l.oid, l.len, g AS pageno
                  FROM l, generate_series(0, (l.len - 1) / 2048) g
                  WHERE NOT EXISTS (SELECT 1 FROM pg_largeobject
                                    WHERE loid = l.oid AND pageno = g))
            SELECT count(*), count(*) FILTER (
                WHERE lo_get(oid, pageno * 2048::int8, 2048)
                      <> decode(repeat('00', least(2048, len - pageno * 2048)), 'hex'))
            FROM m
            """
        ).fetchone()
        assert missing is not None and missing[0] > len(holed) and missing[1] == 0
        # Half the LOs are text-like (letters and spaces), half incompressible.
        letters = frozenset(b"abcdefghijklmnopqrstuvwxyz ")
        text = random = 0
        holed_oids = {o for o, _ in holed}
        for oid, data in conn.execute(
            "SELECT oid::int8, lo_get(oid) FROM pg_largeobject_metadata ORDER BY oid"
        ):
            if oid in holed_oids or len(data) < 64:
                continue
            if set(data) <= letters:
                text += 1
            else:
                random += 1
        assert 0.4 <= text / (text + random) <= 0.6, (text, random)


def test_same_seed_same_corpus_whatever_the_batches(pg16: EmbeddedCluster, new_db: NewDb) -> None:
    a, b, c = new_db(pg16), new_db(pg16), new_db(pg16)
    generate(a, SPARSE_SPEC)
    # Smaller batches group the LOs differently: the bytes stay the same.
    generate(b, GenerateSpec(**{**SPARSE_SPEC.__dict__, "batch_bytes": 64 * KiB}))
    generate(c, GenerateSpec(**{**SPARSE_SPEC.__dict__, "seed": 12}))
    assert _digest(a) == _digest(b) != _digest(c)


def test_preset_realistic(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    db = new_db(pg17)
    r = run("generate", "-d", db, "-n", "400", "--preset", "realistic", "--seed", "2",
            "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    with psycopg.connect(db) as conn:
        owners = conn.execute(
            "SELECT count(DISTINCT lomowner), count(*) FILTER (WHERE lomacl IS NOT NULL),"
            " count(*) FROM pg_largeobject_metadata"
        ).fetchone()
        assert owners == (3, 40, 400)
        comments = conn.execute(
            "SELECT count(*) FROM pg_description WHERE classoid = 'pg_largeobject'::regclass"
        ).fetchone()
        assert comments == (20,)
        median = conn.execute(
            "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY length(lo_get(oid)))"
            " FROM pg_largeobject_metadata"
        ).fetchone()
        assert median is not None and 8 * KiB <= median[0] <= 32 * KiB
    assert '"sparse": ' in r.output and '"sparse": 0' not in r.output


_RSS = """
import resource, sys
from pgblobdump.generate import GenerateSpec, SizeSpec, Content, generate
generate(sys.argv[1], GenerateSpec(1, SizeSpec(int(sys.argv[2]), int(sys.argv[2])),
         Content(sys.argv[3]), start_oid=int(sys.argv[4])))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.parametrize("content", ["random", "text"])
def test_a_big_lo_is_streamed_in_bounded_memory(
    pg16: EmbeddedCluster, new_db: NewDb, content: str
) -> None:
    db = new_db(pg16)

    def peak_kib(size: int, oid: int) -> int:
        out = subprocess.run(
            [sys.executable, "-c", _RSS, db, str(size), content, str(oid)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        return int(out.stdout.split()[-1])

    small = peak_kib(KiB, 10)
    big = peak_kib(80 * MiB, 20)
    # 80 MiB written with a few MiB of client memory beyond the interpreter's own.
    assert big - small < 32 * 1024, (small, big)
    with psycopg.connect(db) as conn:
        assert conn.execute("SELECT length(lo_get(20))").fetchone() == (80 * MiB,)
