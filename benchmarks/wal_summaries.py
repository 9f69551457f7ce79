"""Change detection by WAL summaries (issue 42) against the full pass and the full dump and
copy, every contender cold, in one run on an embedded PostgreSQL 17 cluster (wal_level
replica, summarize_wal on) over TCP loopback.

At ``--los`` (1M; ``--quick``: 100k) random LOs of 4 KiB (about 4 GB), and first at a
tenth of that (the memory check: peak RSS at both scales):
1. ``dump`` FULL0 (full dump), ``copy`` into two targets (full copy; one target for each
   ``--detect`` of sync);
2. nothing changed: ``dump --since FULL0`` with ``--detect wal-summaries`` and with
   ``--detect full-pass``, ``sync`` into each target with each;
3. for each of ``--shares`` (0.1% and 1%): that share changed with every kind of change
   (incremental.py's ``change``: lo_put in place, append, truncate, unlink and made
   again, new LOs, unlinks, owner, ACL, comment; then VACUUM ANALYZE and a checkpoint),
   then ``dump --since`` the last archive of the same detection and ``sync`` each way.
   The blocks of pg_largeobject the changes wrote (tuples whose xmin or xmax is one of the
   changes' transactions, counted before VACUUM) are set beside the blocks named by the
   summaries that overlap the round's WAL, from before the changes to after the VACUUM
   (``pg_wal_summary_contents``): what a ``dump --since`` from the round's start reads.
   The summarizer chooses where a summary ends (checkpoints' redo points, not every
   checkpoint), so those summaries also hold WAL from before the round (how much is
   reported): VACUUM's blocks and the earlier stretch are in the count, as they are in
   the path's.

Cold: before each timed command the OS page cache is dropped (``sync; echo 3 >
/proc/sys/vm/drop_caches``, root) and the server restarted (empty shared_buffers); where
the cache cannot be dropped, only the restart, and the report says it measured warm.
Ratios: each ``dump --since`` over the full dump, each ``sync`` over the full copy; targets
(0.1% changed, WAL summaries): at most 5%; nothing changed: at most 2%. Which path ran
is read from each incremental's manifest (``incremental.detection``) and from sync's
``--json``; a ``--detect wal-summaries`` run that says otherwise is flagged. Checks: the
last incremental of each detection verified against the source (``verify -d``), and each
target left with nothing to sync (``sync --dry-run``).

Written against ``--detect auto|wal-summaries|full-pass`` (issue 42's first item): with a
pgblobdump that has no such option, the ``--detect`` contenders are left out and the
report says so; the rest (full dump, copies, cold caches, block counts) runs.

Usage: .venv/bin/python benchmarks/wal_summaries.py [--quick] [--los 1M] [--shares 0.001,0.01]
       [--keep DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
from incremental import PGBLOBDUMP, Bench, code_version
from scratch import say

from pgblobdump.bench.server import Server, can_drop_caches
from pgblobdump.servers.cluster import BENCHMARK_WAL, EmbeddedCluster
from pgblobdump.units import parse_count

MAJOR = 17
SIZE = 4096
DETECTS = ("wal-summaries", "full-pass")
SETTINGS = {**BENCHMARK_WAL, "wal_level": "replica", "summarize_wal": "on"}
"""The benchmark cluster's settings plus what WAL summaries need: the server refuses
summarize_wal with wal_level minimal."""
SUMMARIZER_WAIT = 120.0


def has_detect() -> bool:
    """Whether this pgblobdump's ``dump`` takes ``--detect`` (issue 42's first item)."""
    done = subprocess.run([str(PGBLOBDUMP), "dump", "--help"], capture_output=True, text=True)
    return "--detect" in done.stdout


@dataclass
class Blocks:
    """One round of changes: blocks of pg_largeobject the changes wrote; those named by
    the ``summaries`` overlapping the round's WAL (the VACUUM after the changes included),
    which begin ``before`` bytes of WAL ahead of it."""

    round: str
    written: int = 0
    named: int = 0
    summaries: int = 0
    before: int = 0


@dataclass
class Row:
    scale: int
    case: str
    command: str
    wall: float
    own: float
    rss_mb: float
    ratio: str = ""
    detection: str = ""


class WalBench(Bench):
    """incremental.py's Bench (generate, every kind of change, runs under /usr/bin/time),
    each timed command cold, with the blocks each round of changes wrote. ``cold_why``:
    why the OS cache cannot be dropped (None: it can); ``detect``: whether this
    pgblobdump has ``--detect``."""

    def __init__(self, server: str, work: Path, cluster: EmbeddedCluster,
                 cold_why: str | None, detect: bool) -> None:  # fmt: skip
        super().__init__(server, work, 1, False)
        self.cluster = cluster
        self.cold_why = cold_why
        self.detect = detect
        self.rows: list[Row] = []
        self.blocks: list[tuple[int, Blocks]] = []
        self._round: Blocks | None = None
        self._start: tuple[int, int] = (0, 0)
        self._scale = 0

    # -- cold -------------------------------------------------------------------------
    def cold(self) -> None:
        """The OS page cache dropped (when it can be) and the server restarted."""
        if self.cold_why is None:
            Server(self.cluster.conninfo(), self.cluster).cold()
        else:
            self.cluster.restart()

    def timed(self, scale: int, case: str, argv: Sequence[str | Path], what: str) -> Row:
        self.cold()
        st, own = self.run(argv, what)
        row = Row(scale, case, what, st.wall_s, own, st.max_rss_kb / 1024)
        self.rows.append(row)
        return row

    # -- contenders -------------------------------------------------------------------
    def full_dump(self, scale: int, db: str, out: Path) -> Row:
        shutil.rmtree(out, ignore_errors=True)
        return self.timed(scale, "base", ["dump", "-d", self.dsn(db), "-o", out, "--json"],
                          "dump (full)")  # fmt: skip

    def copy(self, scale: int, db: str, target: str) -> Row:
        dst = self.fresh_db(target)
        return self.timed(scale, "base", ["copy", "-d", self.dsn(db), "--target-dbname", dst,
                                          "--json"], f"copy (full) -> {target}")  # fmt: skip

    def since(self, scale: int, case: str, db: str, out: Path, base: Path, detect: str) -> Row:
        shutil.rmtree(out, ignore_errors=True)
        argv = ["dump", "-d", self.dsn(db), "-o", out, "--since", base, "--detect", detect,
                "--json"]  # fmt: skip
        row = self.timed(scale, case, argv, f"dump --since --detect {detect}")
        manifest = json.loads((out / "manifest.json").read_text())
        row.detection = str((manifest.get("incremental") or {}).get("detection", "?"))
        return row

    def sync(self, scale: int, case: str, db: str, target: str, detect: str) -> Row:
        argv = ["sync", "-d", self.dsn(db), "--target-dbname", self.dsn(target), "--delete",
                "--detect", detect, "--json"]  # fmt: skip
        row = self.timed(scale, case, argv, f"sync --detect {detect}")
        doc = json.loads((self.work / "out.json").read_text() or "{}")
        row.detection = str(doc.get("detection", "?")) if isinstance(doc, dict) else "?"
        return row

    # -- blocks -----------------------------------------------------------------------
    def position(self, db: str) -> tuple[int, int]:
        """(WAL position, a new transaction id) now, then a checkpoint (the summarizer may
        end a summary at its redo point; ``named`` waits for it to pass the position)."""
        with psycopg.connect(self.dsn(db), autocommit=True) as conn:
            row = conn.execute(
                "SELECT (pg_current_wal_lsn() - '0/0')::int8, txid_current()"
            ).fetchone()
            conn.execute("CHECKPOINT")
        assert row is not None
        return int(row[0]), int(row[1])

    def change(self, db: str, share: float, size: int) -> dict[str, int]:
        """incremental.py's change, its transactions' ids and WAL positions recorded (the
        VACUUM it ends with is ``vacuum`` below)."""
        self._start = self.position(db)
        self._round = Blocks(f"{share:.1%} changed")
        try:
            return super().change(db, share, size)
        finally:
            self._round = None

    def vacuum(self, db: str) -> None:
        """In a round of changes: the blocks they wrote counted before VACUUM removes the
        dead tuples that tell, then VACUUM, then the summaries' blocks; else
        incremental.py's."""
        r = self._round
        if r is None:
            super().vacuum(db)
            return
        _lsn, xid = self.position(db)
        start, lo = self._start
        with psycopg.connect(self.dsn(db)) as conn:
            # a fresh cluster: no wraparound, so 32-bit xids compare as numbers
            row = conn.execute(
                "SELECT count(DISTINCT (ctid::text::point)[0]) FROM pg_largeobject"
                " WHERE xmin::text::int8 BETWEEN %(lo)s AND %(hi)s"
                " OR xmax::text::int8 BETWEEN %(lo)s AND %(hi)s",
                {"lo": lo % 2**32, "hi": xid % 2**32},
            ).fetchone()
        r.written = int(row[0]) if row else 0
        super().vacuum(db)
        end, _ = self.position(db)
        r.named, r.summaries, r.before = self.named(db, start, end)
        self.blocks.append((self._scale, r))

    def named(self, db: str, start: int, end: int) -> tuple[int, int, int]:
        """Blocks of pg_largeobject (main fork) named by the summaries that overlap
        ``start`` to ``end`` (once the summarizer has passed ``end``), how many summaries
        those are, and the bytes of WAL they begin before ``start``."""
        with psycopg.connect(self.dsn(db), autocommit=True) as conn:
            deadline = time.monotonic() + SUMMARIZER_WAIT
            while True:
                row = conn.execute("SELECT (summarized_lsn - '0/0')::int8"
                                   " FROM pg_get_wal_summarizer_state()").fetchone()  # fmt: skip
                if row and int(row[0]) >= end:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"the WAL summarizer did not pass {end} in time")
                time.sleep(0.2)
            row = conn.execute(
                "WITH s AS (SELECT * FROM pg_available_wal_summaries()"
                "  WHERE end_lsn > '0/0'::pg_lsn + %(start)s::numeric"
                "  AND start_lsn < '0/0'::pg_lsn + %(end)s::numeric)"
                " SELECT (SELECT count(DISTINCT c.relblocknumber) FROM s,"
                "  pg_wal_summary_contents(s.tli, s.start_lsn, s.end_lsn) c"
                "  WHERE c.relfilenode = pg_relation_filenode('pg_largeobject')"
                "  AND c.reldatabase = (SELECT oid FROM pg_database"
                "                       WHERE datname = current_database())"
                "  AND c.relforknumber = 0 AND NOT c.is_limit_block),"
                " (SELECT count(*) FROM s),"
                " (SELECT greatest(%(start)s - min(start_lsn - '0/0'), 0)::int8 FROM s)",
                {"start": start, "end": end},
            ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2] or 0)

    # -- the run ----------------------------------------------------------------------
    def scenario(self, n: int, shares: Sequence[float]) -> None:
        """Steps 1-3 of the module's docstring at ``n`` LOs (without ``--detect``: the
        full dump, the copies and the rounds of changes with their blocks)."""
        self._scale = n
        db, targets = "wal_src", {d: f"wal_dst_{d.split('-')[0]}" for d in DETECTS}
        self.make(db, n, SIZE)
        d = self.work / f"n{n}"
        d.mkdir(exist_ok=True)
        full0 = d / "full0.pbd"
        full = self.full_dump(n, db, full0)
        copies = [self.copy(n, db, t) for t in targets.values()]
        copy = copies[0]
        last = dict.fromkeys(DETECTS, full0)
        rounds = [("nothing changed", 0.0), *((f"{s:.1%} changed", s) for s in shares)]
        for k, (case, share) in enumerate(rounds):
            if share:
                self.change(db, share, SIZE)
            if not self.detect:
                continue
            for detect in DETECTS:
                out = d / f"inc{k}-{detect}.pbd"
                r = self.since(n, case, db, out, last[detect], detect)
                r.ratio = f"{r.wall / full.wall:.1%} of the full dump"
                last[detect] = out
            for detect, target in targets.items():
                r = self.sync(n, case, db, target, detect)
                r.ratio = f"{r.wall / copy.wall:.1%} of the full copy"
        for detect, target in targets.items():
            if self.detect:
                self.verify(last[detect], db, f"{last[detect].name} equals the source")
                left = subprocess.run(
                    [str(PGBLOBDUMP), "sync", "-d", self.dsn(db), "--target-dbname",
                     self.dsn(target), "--dry-run", "--delete", "--json"],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                if json.loads(left.stdout) not in ([], {}):
                    raise SystemExit(f"{target}: sync left work: {left.stdout[:500]}")
            self.drop_db(target)
        shutil.rmtree(d, ignore_errors=True)

    # -- output -----------------------------------------------------------------------
    def targets_met(self, n: int) -> list[str]:
        out = ["| figure | ratio | target | verdict |", "|---|---:|---|---|"]
        base: dict[str, Row] = {}
        for b in self.rows:
            if b.scale == n and b.case == "base":
                base.setdefault(b.command.split(" ->")[0], b)  # the first copy: the ratios' own
        for r in self.rows:
            if r.scale != n or "wal-summaries" not in r.command:
                continue
            anchor = base["dump (full)" if r.command.startswith("dump") else "copy (full)"]
            limit = (
                0.02 if r.case == "nothing changed" else 0.05 if r.case == "0.1% changed" else None
            )
            ratio = r.wall / anchor.wall
            verdict = "-" if limit is None else "met" if ratio <= limit else "**missed**"
            if r.detection != "wal summaries":
                verdict += f" (ran: {r.detection})"
            aim = "(reported)" if limit is None else f"<= {limit:.0%}"
            out.append(f"| {r.case}: {r.command} / {anchor.command} | {ratio:.1%} | {aim}"
                       f" | {verdict} |")  # fmt: skip
        return out

    def report(self) -> str:
        out = ["| LOs | case | command | wall s | own s | peak RSS MB | ratio | detection |",
               "|---:|---|---|---:|---:|---:|---|---|"]  # fmt: skip
        for r in self.rows:
            out.append(f"| {r.scale:,} | {r.case} | {r.command} | {r.wall:.2f} | {r.own:.2f}"
                       f" | {r.rss_mb:.0f} | {r.ratio} | {r.detection} |")  # fmt: skip
        scales = sorted({r.scale for r in self.rows})
        if len(scales) == 2:
            small, big = scales
            out += ["", f"| command | peak RSS MB at {small:,} | at {big:,} | growth |",
                    "|---|---:|---:|---:|"]  # fmt: skip
            for r in (x for x in self.rows if x.scale == big):
                twin = next((x for x in self.rows if x.scale == small and x.case == r.case
                             and x.command == r.command), None)  # fmt: skip
                if twin is not None:
                    out.append(f"| {r.case}: {r.command} | {twin.rss_mb:.0f} | {r.rss_mb:.0f}"
                               f" | {r.rss_mb / twin.rss_mb:.2f}x |")  # fmt: skip
        out += ["", "| LOs | round | blocks the changes wrote | blocks the summaries name"
                " (VACUUM included) | named / written | summaries | their WAL before the"
                " round |", "|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for n, b in self.blocks:
            ratio = f"{b.named / b.written:.2f}x" if b.written else "-"
            out.append(f"| {n:,} | {b.round} | {b.written:,} | {b.named:,} | {ratio}"
                       f" | {b.summaries} | {b.before:,} B |")  # fmt: skip
        if scales and self.detect:
            out += ["", *self.targets_met(scales[-1])]
        return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100k LOs (and 10k), not 1M (and 100k)")
    ap.add_argument("--los", type=parse_count, default=1_000_000, help="LOs of the large scale")
    ap.add_argument("--shares", default="0.001,0.01", help="shares changed, one round each")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    a = ap.parse_args()
    n = a.los // 10 if a.quick else a.los
    shares = [float(s) for s in a.shares.split(",")]
    work = a.keep or Path(tempfile.mkdtemp(prefix="pgbd-wal-bench-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    why = can_drop_caches()
    detect = has_detect()
    try:
        with EmbeddedCluster(MAJOR, settings=SETTINGS) as cluster:
            server = cluster.conninfo("postgres", tcp=True).replace(" dbname=postgres", "")
            b = WalBench(server, work, cluster, why, detect)
            head = (f"PostgreSQL {cluster.tc.version}, {os.cpu_count()} cores,"
                    f" {datetime.date.today().isoformat()}; {code_version()}; "
                    + ("cold (OS cache dropped, server restarted before each command)"
                       if why is None else f"WARM: the OS cache could not be dropped ({why});"
                       " the server restarted before each command"))  # fmt: skip
            say(head)
            for scale in (n // 10, n):
                b.scenario(scale, shares)
            b.drop_db("wal_src")
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(head)
    if not detect:
        print(
            "\nthis pgblobdump's dump has no --detect (issue 42's first item): the dump --since"
            " and sync contenders were left out"
        )
    print()
    print(b.report())


if __name__ == "__main__":
    main()
