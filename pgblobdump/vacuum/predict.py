"""What pg_dump and pg_restore 16, 17 and 18 will cost for N LOs of B bytes in all,
from curves this project measured on its 2-core machine (docs/vacuum.md lists each figure
and where it was measured).

A prediction is ``seconds = N x per-LO time + B / byte rate`` and a peak RSS read off the
measured memory curve (linear between the measured counts, extended along the last
segment). They are this machine's figures, quiet, over TCP loopback with ``fsync=off``:
another machine scales them, and they say which tool and format costs what, not to the
second.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

MIB = 1 << 20

# Peak RSS of pg_dump -Fc by LO count (benchmarks/RESULTS.md, "Sweep, 50k to 1.5M LOs
# (custom format)"; 18 from "Dumps and restores with 16, 17 and 18": 211.0 MiB at 1M).
_DUMP_RSS: dict[int, tuple[tuple[int, float], ...]] = {
    16: ((50_000, 41.3), (200_000, 153.3), (500_000, 366.4), (1_000_000, 729.4),
         (1_500_000, 1111.0)),
    17: ((50_000, 18.5), (200_000, 53.3), (500_000, 110.7), (1_000_000, 214.7),
         (1_500_000, 268.9)),
}  # fmt: skip
_RSS_18_OF_17 = 211.0 / 214.7

# Wall seconds per million empty LOs (shared/targets.md anchors: pg_dump 16 -Fc 104 s,
# 17 -Fc 106 s, 17 -Fd 201 s, 18 -Fd 188 s; 16 -Fd from the directory sweep's 1M point
# relative to 17's, 284.3 / 368.4; 18 -Fc as 17).
_DUMP_S_PER_M = {(16, "c"): 104.0, (17, "c"): 106.0, (18, "c"): 106.0,
                 (16, "d"): 201.0 * 284.3 / 368.4, (17, "d"): 201.0, (18, "d"): 188.0}  # fmt: skip
# pg_restore of the -Fc archive, one job, per million (targets.md: 17 180 s; 16 and 18
# scaled by RESULTS.md's restore-1m run, 76.8 and 73.5 s against 17's 53.2 s).
_RESTORE_S_PER_M = {16: 180.0 * 76.8 / 53.2, 17: 180.0, 18: 180.0 * 73.5 / 53.2}
_RESTORE_J2_TS1000_S_PER_M = 87.0  # 17 and 18 only (16 has no --transaction-size)
# pg_restore peak RSS: 16 holds the million-entry TOC (453.4 MiB at 1M, linear); 17 and
# 18 stay flat (RESULTS.md restore-1m: 14.0 and 10.3 MiB).
_RESTORE_RSS_16_PER_LO = 453.4 * MIB / 1_000_000
_RESTORE_RSS = {17: 14.0 * MIB, 18: 10.3 * MIB}
# Bytes: 100k LOs x 4 KiB (410 MB) in targets.md: pg_dump 17 -Fc 18.6 s, of which the
# empty-LO rate accounts for 10.6 s; pg_restore 17 one job 30.2 s, of which 18.0 s.
_DUMP_BYTES_PER_S = 410e6 / (18.6 - 10.6)
_RESTORE_BYTES_PER_S = 410e6 / (30.2 - 18.0)


@dataclass(frozen=True)
class Prediction:
    """One tool's predicted cost. ``files``: what it writes (-Fd: one per LO)."""

    tool: str
    seconds: float
    peak_rss: int
    files: int | None
    toc_entries: int | None


def _curve(points: tuple[tuple[int, float], ...], n: int) -> float:
    xs = [p[0] for p in points]
    k = min(max(bisect.bisect_left(xs, n), 1), len(points) - 1)
    (x0, y0), (x1, y1) = points[k - 1], points[k]
    return max(y0 + (y1 - y0) * (n - x0) / (x1 - x0), 5.0)


def _dump_rss(major: int, n: int) -> int:
    mib = _curve(_DUMP_RSS[min(major, 17)], n)
    return int(mib * (_RSS_18_OF_17 if major >= 18 else 1.0) * MIB)


def _toc_entries(major: int, n: int) -> int:
    # 16: one BLOB entry per LO; 17 and 18: a BLOB METADATA and a BLOBS entry per 1,000.
    return n + 16 if major < 17 else 2 * math.ceil(n / 1000) + 15


def predict(los: int, nbytes: int) -> list[Prediction]:
    """Predictions for dumping and restoring ``los`` LOs holding ``nbytes`` bytes."""
    m = los / 1_000_000
    out = []
    for major in (16, 17, 18):
        rss = _dump_rss(major, los)
        for fmt, files in (("c", 1), ("d", los + (2 if major < 17 else math.ceil(los / 1000) + 1))):
            seconds = _DUMP_S_PER_M[(major, fmt)] * m + nbytes / _DUMP_BYTES_PER_S
            out.append(Prediction(f"pg_dump {major} -F{fmt}", seconds, rss, files,
                                  _toc_entries(major, los)))  # fmt: skip
    for major in (16, 17, 18):
        rss = int(_RESTORE_RSS_16_PER_LO * los) if major < 17 else int(_RESTORE_RSS[major])
        rss = max(rss, 8 * MIB)
        seconds = _RESTORE_S_PER_M[major] * m + nbytes / _RESTORE_BYTES_PER_S
        out.append(Prediction(f"pg_restore {major} -Fc, one job", seconds, rss, None, None))
        if major >= 17:
            seconds = _RESTORE_J2_TS1000_S_PER_M * m + nbytes / (2 * _RESTORE_BYTES_PER_S)
            out.append(Prediction(f"pg_restore {major} -Fc -j 2 --transaction-size 1000",
                                  seconds, rss, None, None))  # fmt: skip
    return out
