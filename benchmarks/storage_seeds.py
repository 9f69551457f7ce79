"""The seed articles' storage findings, rerun here, with our figures beside theirs.

binary-data-performance.txt (Laurenz Albe, 2020; PostgreSQL 12.2, laptop, data cached):
350 MB and 4.5 MB of compressed binary data read in chunks: file system 46 ms / 1 ms,
LO 950 ms / 8 ms, bytea EXTERNAL 590 ms / 6 ms ("roughly ten times slower" from the
database; bytea EXTERNAL "measurably faster" than an LO).
large-text-toast.txt (Ryan Lambert, 2020; PostgreSQL 12, text of repeated md5 strings,
``32 * (base_length + 1..25)`` characters): no value compressed at base_length 35 (1,152 -
1,920 characters, 1,679 bytes/row for 1,536 on average: ~9% more than the text); all at
65 (2,112 - 2,880, 120 bytes/row for 2,496: 95% less); EXTERNAL inserts 24% slower than
EXTENDED at base_length 100 (~3,600 characters) and 63% slower at 500 (~16,400), where
EXTENDED took 277 bytes/row and EXTERNAL 17,165; substring reads 3,300 TPS on EXTENDED
vs 1,600 on EXTERNAL.
scaling-jsonb-toast.txt (Postgres Pro): one access of a TOASTed value reads more blocks
than of an inline one (about 5x the time).

Runs ``bench read`` (default sizes, random content, warm; and cold when root can drop
caches) and ``bench toast`` (text, lengths that include the article's ~3,600 and
~16,400) on a durable embedded PostgreSQL 17 (or -d), prints the settings, our figures
beside the articles' and one line per finding: holds / does not hold.

Usage: .venv/bin/python benchmarks/storage_seeds.py [-d DSN] [--major 17] [--repeat 5]
       [--rows 2000] [--no-cold]
"""

from __future__ import annotations

import argparse
import datetime
import time

from pgblobdump.bench import read as read_bench
from pgblobdump.bench import toast as toast_bench
from pgblobdump.bench.server import Server, can_drop_caches, server
from pgblobdump.bench.toastspec import ToastSpec
from pgblobdump.generate.spec import Content

SEED_READ_MS = {  # size -> method -> ms (binary-data-performance.txt)
    350_000_000: {"file": 46, "lo": 950, "bytea_external": 590},
    4_500_000: {"file": 1, "lo": 8, "bytea_external": 6},
}
TOAST_LENGTHS = (500, 1000, 1500, 2000, 2500, 3600, 8000, 16_400, 32_000, 128_000)
"""The CLI's sweep, with the article's two EXTERNAL lengths (base_length 100 and 500)."""
SEED_INSERT_SLOWER = {3600: 0.24, 16_400: 0.63}
"""How much slower EXTERNAL inserted than EXTENDED in large-text-toast.txt."""
EXT = "EXTENDED pglz"


CLOSE = 0.05
"""Two rates or times within 5% of each other are a tie, not a direction."""


def verdict(ok: bool | None, text: str) -> str:
    said = {True: "holds", False: "does not hold", None: "too close to call (within 5%)"}
    return f"- {said[ok]}: {text}"


def less(a: float, b: float) -> bool | None:
    """``a < b`` by more than CLOSE; None when they are within CLOSE of each other."""
    if abs(a - b) <= CLOSE * max(a, b):
        return None
    return a < b


def settings_line(srv: Server) -> str:
    shown = ", ".join(f"{k}={v}" for k, v in sorted(srv.settings.items()))
    where = "embedded" if srv.embedded is not None else "given (-d)"
    return f"server ({where}): {shown}; lz4: {'yes' if srv.lz4 else 'no'}"


def reads(result: read_bench.ReadResult, title: str) -> list[str]:
    med = {(r.size, r.method, r.mode): r.seconds.median * 1000 for r in result.rows}
    spread = {(r.size, r.method, r.mode): r.seconds for r in result.rows}
    out = [f"\n### bench read ({title})\n", f"Cache: {result.cache}.\n",
           "| size | method | chunked ms (min-max) | whole ms | x file | article ms | article"
           " x file |", "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    sizes = sorted({r.size for r in result.rows}, reverse=True)
    for size in sizes:
        base = med[(size, "file", "chunked")]
        art = SEED_READ_MS.get(size, {})
        for m in read_bench.METHODS:
            s = spread[(size, m, "chunked")]
            a = art.get(m)
            ax = f"{a / art['file']:.1f}" if a is not None else "-"
            out.append(
                f"| {size / 1e6:g} MB | {m} | {s.median * 1000:,.1f} ({s.low * 1000:,.1f}-"
                f"{s.high * 1000:,.1f}) | {med[(size, m, 'whole')]:,.1f} |"
                f" {med[(size, m, 'chunked')] / base:.1f} | {a if a is not None else '-'} | {ax} |"
            )
    out.append("")
    for size in sizes:
        f, lo, ext = (med[(size, m, "chunked")] for m in ("file", "lo", "bytea_external"))
        seed = SEED_READ_MS.get(size)
        mb = f"{size / 1e6:g} MB"
        said = ""
        if seed:
            lo_x, ext_x = seed["lo"] / seed["file"], seed["bytea_external"] / seed["file"]
            said = f"; article: {lo_x:.0f}x and {ext_x:.0f}x"
        out.append(verdict(f < lo and f < ext, f"{mb}: the file system is fastest (LO"
                           f" {lo / f:.1f}x, bytea EXTERNAL {ext / f:.1f}x the file's"
                           f" {f:,.1f} ms{said})"))  # fmt: skip
        said = f"; article: {seed['bytea_external']} vs {seed['lo']} ms" if seed else ""
        out.append(verdict(less(ext, lo), f"{mb}: bytea EXTERNAL reads faster than an LO"
                           f" ({ext:,.1f} vs {lo:,.1f} ms{said})"))  # fmt: skip
    return out


def toast(result: toast_bench.ToastResult) -> list[str]:
    by = {(r.length, r.storage): r for r in result.rows}
    lengths = sorted({r.length for r in result.rows})
    out = ["\n### bench toast (text)\n",
           "| length | storage | bytes/row | heap/row | toast/row | compressed | stored/length"
           " | insert MB/s | substring rows/s | buffers/access |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in result.rows:
        out.append(f"| {r.length:,} | {r.storage} | {r.bytes_per_row:,.0f} |"
                   f" {r.heap_bytes_per_row:,.0f} | {r.toast_bytes_per_row:,.0f} |"
                   f" {r.compressed_share:.0%} | {r.stored_ratio:.2f} |"
                   f" {r.insert_mb_per_s:,.1f} | {r.substring_rows_per_s:,.0f} |"
                   f" {r.buffers_per_access} |")  # fmt: skip
    out.append("")
    small = [n for n in lengths if n < 2000]
    big = [n for n in lengths if n > 2100]
    out.append(verdict(
        all(by[(n, EXT)].compressed_share == 0 for n in small)
        and all(by[(n, EXT)].compressed_share == 1 for n in big),
        "EXTENDED compresses values over ~2 KB and none under it (shares: "
        + ", ".join(f"{n:,}: {by[(n, EXT)].compressed_share:.0%}" for n in lengths)
        + "; article: none at 1,152-1,920 characters, all at 2,112-2,880)",
    ))  # fmt: skip
    if (1500, EXT) in by:
        over = by[(1500, EXT)].bytes_per_row / 1500 - 1
        out.append(verdict(over > 0, f"an uncompressed value under the threshold takes a little"
                           f" more than its length on disk (+{over:.0%} at 1,500 B; article:"
                           " +9% at 1,536 characters on average)"))  # fmt: skip
    if (2500, EXT) in by:
        smaller = 1 - by[(2500, EXT)].bytes_per_row / 2500
        out.append(verdict(smaller > 0, f"just over the threshold, compression shrinks a row below"
                           f" its length ({smaller:.0%} less at 2,500 B; article: 95% less at"
                           " 2,496 characters of md5 repeats)"))  # fmt: skip
    for n in sorted(SEED_INSERT_SLOWER):
        if (n, EXT) in by and (n, "EXTERNAL") in by:
            ra, rb = by[(n, EXT)], by[(n, "EXTERNAL")]
            slower = 1 - rb.insert_mb_per_s / ra.insert_mb_per_s
            said = (f"{rb.insert_mb_per_s:,.1f} vs {ra.insert_mb_per_s:,.1f} MB/s, EXTERNAL"
                    f" {abs(slower):.0%} {'slower' if slower > 0 else 'faster'}; article:"
                    f" {SEED_INSERT_SLOWER[n]:.0%} slower")  # fmt: skip
            out.append(
                verdict(
                    less(rb.insert_mb_per_s, ra.insert_mb_per_s),
                    f"{n:,} B: EXTERNAL inserts slower than {EXT} ({said})",
                )
            )
            if (n, "EXTENDED lz4") in by:
                c = by[(n, "EXTENDED lz4")]
                out.append(f"  - with lz4 instead: {c.insert_mb_per_s:,.1f} MB/s,"
                           f" {c.bytes_per_row:,.0f} bytes/row")  # fmt: skip
    if (16_400, EXT) in by and (16_400, "EXTERNAL") in by:
        a, b = by[(16_400, EXT)].bytes_per_row, by[(16_400, "EXTERNAL")].bytes_per_row
        said = f"{a:,.0f} vs {b:,.0f} bytes/row, {b / a:.1f}x; article: 277 vs 17,165, 62x"
        out.append(verdict(a < b, f"16,400 B: EXTENDED takes less room than EXTERNAL ({said})"))
    for n in (3600, 16_400, 32_000):
        if (n, EXT) in by and (n, "EXTERNAL") in by:
            a, b = by[(n, EXT)].substring_rows_per_s, by[(n, "EXTERNAL")].substring_rows_per_s
            out.append(verdict(less(b, a), f"{n:,} B: substring reads faster on {EXT} than on"
                               f" EXTERNAL ({a:,.0f} vs {b:,.0f} rows/s; article: 3,300 vs"
                               " 1,600 TPS, against the documentation's advice)"))  # fmt: skip
    inline, toasted = by[(lengths[0], "EXTERNAL")], by[(lengths[-1], "EXTERNAL")]
    out.append(verdict(toasted.buffers_per_access > inline.buffers_per_access,
                       f"one access reads more buffers TOASTed than inline"
                       f" ({toasted.buffers_per_access} at {lengths[-1]:,} B EXTERNAL vs"
                       f" {inline.buffers_per_access} at {lengths[0]:,} B; scaling-jsonb-toast:"
                       " more blocks, ~5x the time)"))  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-d", dest="dsn", help="a server to run on (default: embedded, durable)")
    ap.add_argument("--major", type=int, default=17, help="embedded major (17 has lz4)")
    ap.add_argument("--repeat", type=int, default=5, help="warm reads per case (cold: half)")
    ap.add_argument("--rows", type=int, default=2000, help="bench toast rows per table")
    ap.add_argument("--no-cold", action="store_true")
    args = ap.parse_args()
    why_not_cold = "--no-cold" if args.no_cold else can_drop_caches()
    started = time.monotonic()
    lines = [f"Run on {datetime.date.today()}."]
    with server(args.dsn, args.major, False) as srv:
        lines.append(settings_line(srv))
        lines += [f"note: {n}" for n in srv.notes]
        warm = read_bench.run(srv, read_bench.ReadSpec(repeat=args.repeat, content=Content.RANDOM))
        lines += reads(warm, "warm")
        spec = ToastSpec(lengths=TOAST_LENGTHS, rows=args.rows)
        lines += toast(toast_bench.run(srv, spec))
    if why_not_cold is None:
        with server(args.dsn, args.major, True) as srv:
            cold = read_bench.ReadSpec(repeat=max(1, args.repeat // 2), cold=True)
            lines += reads(read_bench.run(srv, cold), "cold")
    else:
        lines.append(f"\n(cold reads not run: {why_not_cold}; every figure above is warm)")
    lines.append(f"\n({time.monotonic() - started:,.0f} s in all)")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
