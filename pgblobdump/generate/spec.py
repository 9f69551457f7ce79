"""What to generate: a frozen, validated description of the LOs to create."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from pgblobdump.errors import UsageError
from pgblobdump.pgconstants import FIRST_OID, MAX_ALLOC_SIZE, OID_MAX
from pgblobdump.units import parse_size

LO_SIZE_MAX = MAX_ALLOC_SIZE
"""lo_from_bytea takes a bytea, capped at 1 GB; bigger LOs are out of scope for generate."""

_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class Content(enum.StrEnum):
    """What LO bytes look like, chosen for how they compress."""

    ZEROS = "zeros"  # compresses to almost nothing
    RANDOM = "random"  # incompressible
    TEXT = "text"  # words and spaces, compresses about 3x like real documents
    MIXED = "mixed"  # half the LOs text, half random, alternating: a mailbox of attachments


LO_LENGTH_MAX = 4 * 1024**4 - 1
"""An LO's largest length (4 TB); sizes drawn from a distribution are streamed with
``lo_put``, so they are not held to the bytea cap."""

SIZE_DIST_MAX = 1024**3
"""Default clip of a drawn size: 1 GiB, the issue's "one LO over 1 GiB" is a MAX away
(``lognormal:16KiB:2.5:2GiB``), and an unclipped tail would now and then ask for a
multi-GiB LO that takes minutes by itself."""

SPARSE_MIN = 8 * 1024
"""Smallest LO written with holes: four 2 KiB pages, so a hole of at least one whole
page fits between the written pieces. ``--sparse`` is a share of the LOs this big."""


@dataclass(frozen=True)
class SizeDist:
    """A log-normal size distribution: ``median`` bytes, shape ``sigma`` (natural log),
    each draw clipped to ``[0, max]``.

    With the default sigma 2.5 and median 16 KiB, about 5% of LOs are over 1 MiB and 1
    in 2,500 over 64 MiB; the mean is about 22.8x the median (365 KiB).
    """

    median: int
    sigma: float = 2.5
    max: int = SIZE_DIST_MAX

    @classmethod
    def parse(cls, text: str) -> SizeDist:
        """``lognormal:MEDIAN[:SIGMA[:MAX]]``, e.g. ``lognormal:16KiB:2.5:1GiB``."""
        kind, _, rest = text.partition(":")
        parts = rest.split(":") if rest else []
        usage = (
            f"--size-dist {text!r} is not a distribution; use lognormal:MEDIAN[:SIGMA[:MAX]]"
            " like lognormal:16KiB or lognormal:16KiB:2.5:1GiB"
        )
        if kind.strip().lower() != "lognormal" or not 1 <= len(parts) <= 3:
            raise UsageError(usage)
        try:
            median = parse_size(parts[0], "--size-dist median")
            sigma = float(parts[1]) if len(parts) > 1 else 2.5
            top = parse_size(parts[2], "--size-dist max") if len(parts) > 2 else SIZE_DIST_MAX
        except (UsageError, ValueError) as e:
            raise UsageError(usage) from e
        if median < 1:
            raise UsageError(f"--size-dist {text!r}: the median must be at least 1 byte")
        if not 0.0 <= sigma <= 10.0:
            raise UsageError(f"--size-dist {text!r}: sigma must be between 0 and 10")
        if top < median:
            raise UsageError(f"--size-dist {text!r}: the max is below the median")
        if top > LO_LENGTH_MAX:
            raise UsageError(f"--size-dist {text!r}: the max is over an LO's 4 TB limit")
        return cls(median, sigma, top)

    def __str__(self) -> str:
        return f"lognormal:{self.median}:{self.sigma:g}:{self.max}"


@dataclass(frozen=True)
class SizeSpec:
    """LO sizes: fixed when ``low == high``, else log-uniform in ``[low, high]``.

    Log-uniform gives as many 1-2 KiB objects as 32-64 KiB ones, closer to real
    attachments than a flat spread.
    """

    low: int
    high: int

    @classmethod
    def parse(cls, text: str) -> SizeSpec:
        """``4KiB`` (fixed) or ``1KiB-64KiB`` (range)."""
        if text.strip().startswith("-"):
            raise UsageError(f"--size {text!r} is negative; sizes are 0 or more bytes")
        low_text, sep, high_text = text.partition("-")
        try:
            low = parse_size(low_text, "--size")
            high = parse_size(high_text, "--size") if sep else low
        except UsageError as e:
            # Name the whole value, not the half of a range that failed.
            raise UsageError(
                f"--size {text!r} is not a size or a range of sizes; use a number with an"
                " optional unit (0, 512, 4KiB, 1.5MB) or a range like 1KiB-64KiB"
            ) from e
        if high < low:
            raise UsageError(f"--size {text!r}: the range's upper end is below its lower end")
        if high > LO_SIZE_MAX:
            raise UsageError(f"--size {text!r}: LOs above 1 GB cannot be generated (bytea cap)")
        return cls(low, high)

    @property
    def fixed(self) -> bool:
        return self.low == self.high

    def __str__(self) -> str:
        return str(self.low) if self.fixed else f"{self.low}-{self.high}"


@dataclass(frozen=True)
class GenerateSpec:
    """A validated generate request.

    ``owners``: how many owner roles share the LOs (0 = the connecting user owns all).
    ``grant_fraction``/``comment_fraction``: share of LOs that get a GRANT / a COMMENT.
    ``start_oid``: first explicit OID (consecutive OIDs follow) or None for server-assigned.
    """

    count: int
    size: SizeSpec = SizeSpec(0, 0)
    content: Content = Content.RANDOM
    table: str | None = None
    owners: int = 0
    grant_fraction: float = 0.0
    comment_fraction: float = 0.0
    start_oid: int | None = None
    seed: int = 0
    batch_bytes: int = 8 * 1024 * 1024
    size_dist: SizeDist | None = None
    sparse_fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.count < 0:
            raise UsageError(f"count must not be negative (got {self.count})")
        if self.count > OID_MAX - FIRST_OID:
            raise UsageError(
                f"count {self.count:,} is more LOs than a database can hold (OIDs are 32-bit)"
            )
        if self.start_oid is not None:
            if not 1 <= self.start_oid <= OID_MAX:
                raise UsageError(
                    f"start OID must be between 1 and {OID_MAX} (got {self.start_oid})"
                )
            if self.start_oid + self.count - 1 > OID_MAX:
                raise UsageError(
                    f"{self.count:,} LOs from OID {self.start_oid} run past the largest OID"
                    f" {OID_MAX}"
                )
        if self.table is not None and not _IDENT_RE.fullmatch(self.table):
            raise UsageError(
                f"table name {self.table!r} must be a plain identifier (letters, digits, _)"
            )
        if not 0 <= self.owners <= 100:
            raise UsageError(f"owners must be between 0 and 100 (got {self.owners})")
        if self.size_dist is not None and self.size.high > 0:
            raise UsageError("--size and --size-dist are two ways to give sizes: give one")
        for name, value in (
            ("grant", self.grant_fraction),
            ("comment", self.comment_fraction),
            ("sparse", self.sparse_fraction),
        ):
            if not 0.0 <= value <= 1.0:
                raise UsageError(f"{name} fraction must be between 0 and 1 (got {value})")

    @property
    def decorated(self) -> bool:
        """Whether anything beyond bare LOs is asked for (the seed-style fast path is not)."""
        return (
            bool(self.table or self.owners or self.grant_fraction or self.comment_fraction)
            or self.size.high > 0
            or self.size_dist is not None
        )
