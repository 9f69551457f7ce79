"""How much a generate run writes, known before it starts.

Sizes, kinds and hole shapes come from their own seeded stream (``content``), apart from
the bytes, so up to ``EXACT_UP_TO`` LOs are planned here exactly as the run will plan
them; above that (a second or more of drawing) the distribution's expected value is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pgblobdump.generate.content import ContentSource
from pgblobdump.generate.spec import Content, GenerateSpec, SizeDist, SizeSpec

EXACT_UP_TO = 100_000
"""Most LOs planned one by one for an exact figure (about 0.2 s of drawing)."""


@dataclass(frozen=True)
class Estimate:
    """``size``: the LOs' lengths summed, as the run's result reports them (holes
    included); ``stored``: the bytes written, holes left out. ``exact``: planned as the
    run plans them; else expected values, with ``stored == size`` (holes not counted)."""

    count: int
    size: int
    stored: int
    exact: bool


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def mean_size(size: SizeSpec, dist: SizeDist | None) -> float:
    """An LO's expected length: a log-normal clipped at its max (E[min(X, max)]), or a
    log-uniform range as ``content`` draws it."""
    if dist is not None:
        mu, sigma, top = math.log(dist.median), dist.sigma, dist.max
        if sigma == 0:
            return float(min(dist.median, top))
        z = (math.log(top) - mu) / sigma
        below = math.exp(mu + sigma**2 / 2) * _normal_cdf(z - sigma)
        return below + top * (1.0 - _normal_cdf(z))
    if size.fixed:
        return float(size.low)
    a, b = math.log(max(size.low, 1)), math.log(size.high + 1)
    return (math.exp(b) - math.exp(a)) / (b - a)


def estimate(spec: GenerateSpec) -> Estimate:
    """What ``generate(spec)`` will write (see ``Estimate``)."""
    fixed = spec.size_dist is None and spec.size.fixed
    if fixed and not spec.sparse_fraction:
        total = spec.count * spec.size.low
        return Estimate(spec.count, total, total, True)
    if spec.count > EXACT_UP_TO:
        total = round(spec.count * mean_size(spec.size, spec.size_dist))
        return Estimate(spec.count, total, total, False)
    # The kind does not change sizes or holes; RANDOM skips building the text pool.
    source = ContentSource(
        spec.size, Content.RANDOM, spec.seed, spec.size_dist, spec.sparse_fraction
    )
    size = stored = 0
    for _ in range(spec.count):
        p = source.plan()
        size += p.size
        stored += p.stored
    return Estimate(spec.count, size, stored, True)
