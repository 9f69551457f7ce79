"""What ``bench toast`` is asked to measure: value lengths, rows per table, the kind of
value. Kept apart from the benchmark (which imports psycopg) so that ``bench --help``
reads its default lengths without loading libpq."""

from __future__ import annotations

from dataclasses import dataclass

from pgblobdump.errors import UsageError
from pgblobdump.generate.spec import Content

DEFAULT_LENGTHS = (500, 1000, 1500, 2000, 2500, 4000, 8000, 32_000, 128_000)
KINDS = ("text", "bytea")
MAX_LENGTH = 64 << 20
"""The values of one length are held in memory while they load: 64 MiB each at most."""


@dataclass(frozen=True)
class ToastSpec:
    lengths: tuple[int, ...] = DEFAULT_LENGTHS
    rows: int = 2000
    kind: str = "text"
    """``text`` (compressible words) or ``bytea`` (random bytes unless ``content``)."""
    content: Content | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        """UsageError unless every figure is in range (a library caller meets the CLI's
        refusals)."""
        if self.kind not in KINDS:
            raise UsageError("--type must be text or bytea")
        if not self.lengths or not all(1 <= n <= MAX_LENGTH for n in self.lengths):
            raise UsageError(f"--lengths needs one or more lengths from 1 to {MAX_LENGTH:,}")
        if self.rows < 1:
            raise UsageError("--rows must be 1 or more")
