"""What a generate run will write, said before it starts: planned exactly as the run
plans, or the distribution's mean for very many LOs; the README's figure is this one."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from pgblobdump.cli.generate import REALISTIC_SIZES
from pgblobdump.generate import Content, GenerateSpec, SizeDist, SizeSpec, generate
from pgblobdump.generate import estimate as est
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.units import format_bytes
from tests.clirun import run
from tests.conftest import NewDb

README = Path(__file__).resolve().parents[2] / "README.md"
NOWHERE = "host=/nonexistent-pgbd port=1 dbname=x connect_timeout=2"
"""A target no server answers at: generate says its size, then fails to connect."""


def _realistic(count: int) -> GenerateSpec:
    return GenerateSpec(count, size_dist=REALISTIC_SIZES, content=Content.MIXED,
                        sparse_fraction=0.05)  # fmt: skip


def test_the_estimate_is_what_the_run_writes(pg17: EmbeddedCluster, new_db: NewDb) -> None:
    spec = GenerateSpec(400, size_dist=SizeDist(3000, 1.5, 200_000), content=Content.MIXED,
                        sparse_fraction=0.3, seed=7)  # fmt: skip
    e = est.estimate(spec)
    assert e.exact and e.stored < e.size
    assert generate(new_db(pg17), spec).total_bytes == e.size


def test_the_mean_stands_in_for_very_many() -> None:
    """Above EXACT_UP_TO the expected value is used; it agrees with drawing them."""
    dist = SizeDist(16 * 1024, 1.0, 1024**2)
    drawn = est.estimate(GenerateSpec(est.EXACT_UP_TO, size_dist=dist))
    assert drawn.exact
    mean = est.estimate(GenerateSpec(est.EXACT_UP_TO + 1, size_dist=dist))
    assert not mean.exact
    assert mean.size == pytest.approx(drawn.size, rel=0.03)
    ranged = est.estimate(GenerateSpec(est.EXACT_UP_TO + 1, size=SizeSpec(1024, 65536)))
    exact = est.estimate(GenerateSpec(est.EXACT_UP_TO, size=SizeSpec(1024, 65536)))
    assert ranged.size == pytest.approx(exact.size, rel=0.03)
    fixed = est.estimate(GenerateSpec(10**7, size=SizeSpec(4096, 4096)))
    assert fixed.exact and fixed.size == 10**7 * 4096


def test_over_a_gib_the_size_is_said_before_anything_starts() -> None:
    big = run("generate", "-d", NOWHERE, "-n", "10k", "--preset", "realistic")
    assert big.exit_code != 0  # no server there: the note came first
    e = est.estimate(_realistic(10_000))
    first = big.stderr.splitlines()[0]
    assert first.startswith(f"this run writes {format_bytes(e.size)} of LOs"), big.stderr
    assert format_bytes(e.stored) in first and "exact" in first
    many = run("generate", "-d", NOWHERE, "-n", "1M", "--preset", "realistic")
    assert "about" in many.stderr.splitlines()[0] and "expected" in many.stderr
    small = run("generate", "-d", NOWHERE, "-n", "100", "--preset", "realistic")
    assert small.exit_code != 0 and "this run writes" not in small.stderr


def test_readme_says_what_its_realistic_example_writes() -> None:
    (line,) = [x for x in README.read_text().splitlines() if "--preset realistic" in x
               and x.startswith("pgblobdump generate")]  # fmt: skip
    args = shlex.split(line.split("#")[0])
    assert args[args.index("-n") + 1] == "10k"
    said = re.search(r"writes ([\d.]+ \w+)", line)
    assert said is not None, line
    assert said.group(1) == format_bytes(est.estimate(_realistic(10_000)).size)


def test_the_generate_guide_says_the_same() -> None:
    e = est.estimate(_realistic(10_000))
    guide = (README.parent / "docs" / "generate.md").read_text().replace("\n", " ")
    assert f"come to {format_bytes(e.size)} ({format_bytes(e.stored)} stored" in guide
