"""The seed articles' storage findings, rerun here, with our figures beside theirs.

binary-data-performance.txt (2020): 350 MB and 4.5 MB of compressed binary data read in
chunks: file system 46 ms / 1 ms, LO 950 ms / 8 ms, bytea EXTERNAL 590 ms / 6 ms.
large-text-toast.txt: text over ~2 KB is compressed under EXTENDED (to ~5% for its very
repetitive text); EXTERNAL inserts are 24% (base_length 100, ~4 KB) to 63% (~20 KB)
slower than EXTENDED; substring reads were faster on EXTENDED (3,300 vs 1,600 TPS).
scaling-jsonb-toast.txt: an access to a TOASTed value reads more buffers than an inline one.

Runs ``bench read`` (default sizes, random content, warm; and cold when root can drop
caches) and ``bench toast`` (text) on a durable embedded PostgreSQL 17 (or -d), prints
both tables and one line per finding: holds / does not hold, with the figures.

Usage: .venv/bin/python benchmarks/storage_seeds.py [-d DSN] [--repeat 5] [--no-cold]
"""

from __future__ import annotations

import argparse
import sys

from pgblobdump.bench import read as read_bench
from pgblobdump.bench import toast as toast_bench
from pgblobdump.bench.server import can_drop_caches, server
from pgblobdump.generate.spec import Content

SEED_READ_MS = {  # size -> method -> ms (binary-data-performance.txt)
    350_000_000: {"file": 46, "lo": 950, "bytea_external": 590},
    4_500_000: {"file": 1, "lo": 8, "bytea_external": 6},
}


def verdict(ok: bool, text: str) -> str:
    return f"- {'holds' if ok else 'does not hold'}: {text}"


def reads(result: read_bench.ReadResult, cache: str) -> list[str]:
    med = {(r.size, r.method, r.mode): r.seconds.median * 1000 for r in result.rows}
    out = [f"\n### bench read ({cache})\n",
           "| size | method | ours chunked ms | ours whole ms | x file (chunked) | article ms |",
           "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for size in sorted({r.size for r in result.rows}, reverse=True):
        base = med[(size, "file", "chunked")]
        for m in read_bench.METHODS:
            art = SEED_READ_MS.get(size, {}).get(m)
            out.append(
                f"| {size / 1e6:g} MB | {m} | {med[(size, m, 'chunked')]:,.1f}"
                f" | {med[(size, m, 'whole')]:,.1f} | {med[(size, m, 'chunked')] / base:.1f}"
                f" | {art if art is not None else '-'} |"
            )
    out.append("")
    for size in sorted({r.size for r in result.rows}, reverse=True):
        f, lo, ext = (med[(size, m, "chunked")] for m in ("file", "lo", "bytea_external"))
        mb = f"{size / 1e6:g} MB"
        figures = f"file {f:,.1f} ms, LO {lo:,.1f}, bytea EXTERNAL {ext:,.1f}"
        out.append(verdict(f < lo and f < ext, f"{mb}: the file system is fastest ({figures})"))
        article = "article: 590 vs 950 / 6 vs 8"
        out.append(verdict(ext < lo, f"{mb}: bytea EXTERNAL reads faster than an LO"
                           f" ({ext:,.1f} vs {lo:,.1f} ms; {article})"))  # fmt: skip
    return out


def toast(result: toast_bench.ToastResult) -> list[str]:
    by = {(r.length, r.storage): r for r in result.rows}
    lengths = sorted({r.length for r in result.rows})
    out = ["\n### bench toast (text)\n",
           "| length | storage | bytes/row | compressed | insert MB/s | substring rows/s"
           " | buffers/access |", "|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in result.rows:
        out.append(f"| {r.length:,} | {r.storage} | {r.bytes_per_row:,.0f} |"
                   f" {r.compressed_share:.0%} | {r.insert_mb_per_s:,.1f} |"
                   f" {r.substring_rows_per_s:,.0f} | {r.buffers_per_access} |")  # fmt: skip
    out.append("")
    small = [n for n in lengths if n < 2000]
    big = [n for n in lengths if n > 2100]
    ext = "EXTENDED pglz"
    out.append(verdict(
        all(by[(n, ext)].compressed_share == 0 for n in small)
        and all(by[(n, ext)].compressed_share == 1 for n in big),
        "EXTENDED compresses values over ~2 KB and none under it (shares: "
        + ", ".join(f"{n:,}: {by[(n, ext)].compressed_share:.0%}" for n in lengths) + ")",
    ))  # fmt: skip
    for n in (4000, 32_000):
        if (n, ext) in by and (n, "EXTERNAL") in by:
            a, b = by[(n, ext)].insert_mb_per_s, by[(n, "EXTERNAL")].insert_mb_per_s
            said = f"{b:,.1f} vs {a:,.1f} MB/s; article: 24%/63% slower"
            out.append(verdict(b < a, f"{n:,} B: EXTERNAL inserts slower than EXTENDED ({said})"))
    for n in (8000, 32_000):
        if (n, ext) in by and (n, "EXTERNAL") in by:
            a, b = by[(n, ext)].substring_rows_per_s, by[(n, "EXTERNAL")].substring_rows_per_s
            out.append(verdict(a > b, f"{n:,} B: substring reads faster on EXTENDED than on"
                               f" EXTERNAL ({a:,.0f} vs {b:,.0f} rows/s; article: 3,300 vs"
                               " 1,600 TPS, against the documentation's advice)"))  # fmt: skip
    inline, toasted = by[(lengths[0], "EXTERNAL")], by[(lengths[-1], "EXTERNAL")]
    out.append(verdict(toasted.buffers_per_access > inline.buffers_per_access,
                       f"one access reads more buffers TOASTed than inline"
                       f" ({toasted.buffers_per_access} at {lengths[-1]:,} B EXTERNAL vs"
                       f" {inline.buffers_per_access} at {lengths[0]:,} B)"))  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-d", dest="dsn")
    ap.add_argument("--major", type=int, default=17)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-cold", action="store_true")
    args = ap.parse_args()
    cold = not args.no_cold and can_drop_caches() is None
    lines: list[str] = []
    with server(args.dsn, args.major, False) as srv:
        print(f"settings: {srv.settings}", file=sys.stderr)
        warm = read_bench.run(srv, read_bench.ReadSpec(repeat=args.repeat, content=Content.RANDOM))
        lines += reads(warm, "warm")
        lines += toast(toast_bench.run(srv, toast_bench.ToastSpec()))
    if cold:
        with server(args.dsn, args.major, True) as srv:
            spec = read_bench.ReadSpec(repeat=max(1, args.repeat // 2), cold=True)
            lines += reads(read_bench.run(srv, spec), "cold: page cache dropped, server restarted")
    else:
        lines.append("\n(cold reads not run: " + (can_drop_caches() or "--no-cold") + ")")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
