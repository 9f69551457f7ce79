"""Whether a server can find changed LOs through its WAL summaries (PostgreSQL 17+), what
stands in the way, and the one statement that fixes it: what ``inspect`` and ``doctor -d``
report (docs/incremental.md, "WAL summaries").

``dump --since`` and ``sync`` read only the blocks of pg_largeobject that the summaries
name between a mark's WAL position and the new snapshot's, when the server is 17 or
later, ``summarize_wal`` is on, the role may call the summary functions, and the
summaries still cover the mark (the summarizer removes files older than
``wal_summary_keep_time``). This module only reads settings and catalogs; it changes
nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import psycopg

from pgblobdump.pg import catalog
from pgblobdump.pg.changes import Mark, cluster_of
from pgblobdump.pg.query import one

FIRST_MAJOR = 17
"""The first PostgreSQL with a WAL summarizer."""

TURN_ON = "ALTER SYSTEM SET summarize_wal = on; SELECT pg_reload_conf();"
"""The fix when ``summarize_wal`` is off: a reload, not a restart (as a superuser)."""

FUNCTIONS = (
    "pg_catalog.pg_available_wal_summaries()",
    "pg_catalog.pg_wal_summary_contents(bigint, pg_lsn, pg_lsn)",
    "pg_catalog.pg_get_wal_summarizer_state()",
)
"""What the summaries path calls. PUBLIC may execute them on a new 17 or 18 cluster
(checked: their proacl is NULL there); a role is refused only where a REVOKE took it."""

SUMMARIES_DIR = "pg_wal/summaries"


def grant_fix(role: str) -> str:
    """The statement that lets ``role`` (quoted as an identifier already) call the
    summary functions."""
    names = ", ".join(f.removeprefix("pg_catalog.") for f in FUNCTIONS)
    return f"GRANT EXECUTE ON FUNCTION {names} TO {role};"


def summary_file(tli: int, start: int, end: int) -> str:
    """The name the summarizer gives a summary's file (``%08X`` of the timeline, then of
    each half of the two LSNs, as walsummary.c's ``WalSummaryFilename``)."""
    halves = (tli, start >> 32, start & 0xFFFFFFFF, end >> 32, end & 0xFFFFFFFF)
    return "".join(f"{h:08X}" for h in halves) + ".summary"


class Summary(NamedTuple):
    """One summary file, a row of ``pg_available_wal_summaries()`` with its LSNs as
    numbers: the blocks modified by WAL from ``start`` to ``end`` on timeline ``tli``."""

    tli: int
    start: int
    end: int


@dataclass(frozen=True)
class MarkCover:
    """Whether the summaries on this server cover a mark: ``of`` says whose mark (the
    sync state's, an archive's), ``lsn`` its WAL position, ``wal_since`` the bytes of WAL
    written after it, ``covered`` whether summaries on its timeline run without a gap
    from it to what the summarizer has done, ``why`` why not. ``summarized_ago``: seconds
    since the summary holding the mark was written (None: the role may not read the
    file's time); ``removed_in``: seconds before ``wal_summary_keep_time`` removes it,
    after which the next run takes the full pass (None: never removed, or not known)."""

    of: str
    lsn: int
    wal_since: int
    covered: bool
    why: str = ""
    summarized_ago: float | None = None
    removed_in: float | None = None


@dataclass(frozen=True)
class WalReadiness:
    """What a server offers the WAL-summaries path. ``ready``: every condition the server
    alone decides is met (a mark may still fall outside the summaries: ``marks``).
    ``blockers`` says what is not, ``fixes`` the statements that would change it.
    ``summarize_wal``, ``keep_minutes`` (0: never removed), ``may_execute``,
    ``summarizer_running`` and the LSNs are None on a server before 17."""

    server_version: str
    version_num: int
    ready: bool
    summarize_wal: bool | None
    keep_minutes: int | None
    may_execute: bool | None
    summarizer_running: bool | None
    summarized_lsn: int | None
    current_lsn: int | None
    oldest_summary_lsn: int | None
    """Where the oldest summary on the current timeline starts (None: none, or the role
    may not list them)."""
    marks: tuple[MarkCover, ...] = ()
    blockers: tuple[str, ...] = ()
    fixes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def lsn_text(lsn: int) -> str:
    """An LSN as PostgreSQL prints it: ``0/147A9A0``."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def covers(summaries: Sequence[Summary], tli: int, lsn: int, upto: int) -> Summary | None:
    """The summary holding ``lsn`` when summaries on ``tli`` run without a gap from
    ``lsn`` to ``upto``, else None (a gap: the summarizer was off for a while, or files
    were removed)."""
    mine = sorted((s for s in summaries if s.tli == tli), key=lambda s: (s.start, s.end))
    first = next((s for s in mine if s.start <= lsn <= s.end), None)
    if first is None:
        return None
    reached = first.end
    for s in mine:
        if s.start <= reached < s.end:
            reached = s.end
    return first if reached >= upto else None


def _seconds_since_written(conn: psycopg.Connection, s: Summary) -> float | None:
    """How long ago the summarizer wrote ``s`` (None: the role may not stat its file)."""
    path = f"{SUMMARIES_DIR}/{summary_file(s.tli, s.start, s.end)}"
    row = one(
        conn,
        "SELECT CASE WHEN has_function_privilege('pg_catalog.pg_stat_file(text, boolean)',"
        " 'EXECUTE') THEN (SELECT extract(epoch FROM now() - modification)::float8"
        " FROM pg_catalog.pg_stat_file(%s, true)) END",
        (path,),
    )
    return None if row[0] is None else max(float(row[0]), 0.0)


def _cover(conn: psycopg.Connection, of: str, mark: Mark, summaries: Sequence[Summary],
           done: int, current: int, keep_minutes: int, on: bool) -> MarkCover:  # fmt: skip
    """Whether the summaries cover ``mark`` (of this cluster) up to ``done``, what the
    summarizer has summarized (``on``: whether summarize_wal is)."""
    assert mark.lsn is not None and mark.timeline is not None
    since = max(current - mark.lsn, 0)
    if done < mark.lsn:
        why = "the summarizer has not reached it yet" if on else "summarize_wal is off"
        return MarkCover(of, mark.lsn, since, False, why)
    holding = covers(summaries, mark.timeline, mark.lsn, min(done, current))
    if holding is None:
        oldest = min((s.start for s in summaries if s.tli == mark.timeline), default=None)
        why = (
            f"no summary on timeline {mark.timeline} holds its WAL position"
            if oldest is None or oldest > mark.lsn
            else "the summaries have a gap after it (summarize_wal was off for a while)"
        )
        return MarkCover(of, mark.lsn, since, False, why)
    ago = _seconds_since_written(conn, holding)
    left = None if ago is None or keep_minutes == 0 else keep_minutes * 60 - ago
    return MarkCover(of, mark.lsn, since, True, "", ago, left)


def readiness(conn: psycopg.Connection, marks: Sequence[tuple[str, Mark]] = ()) -> WalReadiness:
    """What the server ``conn`` is connected to offers the WAL-summaries path, and for
    each of ``marks`` (``(whose, mark)``) whether its summaries cover it. A mark of another
    cluster (a sync state's source elsewhere) or with no WAL position is named in a note,
    not checked: only the server that wrote the WAL can tell."""
    version, num, role, wal_level = one(
        conn,
        "SELECT current_setting('server_version'), current_setting('server_version_num')::int,"
        " quote_ident(current_user), current_setting('wal_level')",
    )
    if num < FIRST_MAJOR * 10000:
        return WalReadiness(
            str(version), int(num), False, None, None, None, None, None, None, None,
            blockers=(f"PostgreSQL {version} has no WAL summaries (17 and later do): dump"
                      " --since and sync read every page of pg_largeobject",),
        )  # fmt: skip
    on, keep, may, current = one(
        conn,
        "SELECT current_setting('summarize_wal')::bool,"
        " (SELECT setting::int FROM pg_catalog.pg_settings"
        "  WHERE name = 'wal_summary_keep_time'),"
        " " + " AND ".join(f"has_function_privilege('{f}', 'EXECUTE')" for f in FUNCTIONS) + ","
        " (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()"
        "  ELSE pg_current_wal_lsn() END - '0/0'::pg_lsn)::int8",
    )
    blockers: list[str] = []
    fixes: list[str] = []
    notes: list[str] = []
    if wal_level == "minimal":
        blockers.append(
            "wal_level is minimal: WAL summaries need replica or logical (a"
            " server with summarize_wal on at minimal does not start)"
        )
        fixes.append("ALTER SYSTEM SET wal_level = replica; -- then restart the server")
    if not on:
        blockers.append("summarize_wal is off")
        fixes.append(TURN_ON)
    if not may:
        blockers.append(f"role {role} may not execute pg_available_wal_summaries(),"
                        " pg_wal_summary_contents() and pg_get_wal_summarizer_state()")  # fmt: skip
        fixes.append(grant_fix(str(role)))
    if not catalog.pages_readable(conn):
        blockers.append(f"role {role} may not read pg_largeobject (the pages the summaries"
                        " name): a superuser's, or a role granted SELECT on it")  # fmt: skip
    running = done = oldest = None
    summaries: list[Summary] = []
    covered: list[MarkCover] = []
    if may:
        tli, done_lsn, pid = one(
            conn,
            "SELECT summarized_tli, (summarized_lsn - '0/0'::pg_lsn)::int8, summarizer_pid"
            " FROM pg_catalog.pg_get_wal_summarizer_state()",
        )
        running, done = pid is not None, int(done_lsn)
        summaries = [
            Summary(*map(int, row))
            for row in conn.execute(
                "SELECT tli, (start_lsn - '0/0'::pg_lsn)::int8, (end_lsn - '0/0'::pg_lsn)::int8"
                " FROM pg_catalog.pg_available_wal_summaries()"
            ).fetchall()
        ]
        oldest = min((s.start for s in summaries if s.tli == tli), default=None)
        if on and not running:
            notes.append("the WAL summarizer is not running yet (it starts after a reload)")
        here, _db = cluster_of(conn)
        for whose, m in marks:
            if m.cluster != here:
                notes.append(f"{whose} is of another cluster ({m.cluster}): its WAL summaries"
                             " are that server's; check there")  # fmt: skip
            elif m.lsn is None or m.timeline is None:
                notes.append(f"{whose} records no WAL position: the next run takes the full"
                             " pass, and records one")  # fmt: skip
            else:
                covered.append(
                    _cover(conn, whose, m, summaries, done, int(current), int(keep), bool(on))
                )
    elif marks:
        notes.append(f"{len(marks)} mark(s) not checked: the role may not list the summaries")
    for c in covered:
        if c.removed_in is not None and c.removed_in < 86400:
            notes.append(f"the summary holding {c.of} is removed in under a day"
                         " (wal_summary_keep_time): run the next dump --since or sync"
                         " before then, or raise it")  # fmt: skip
    return WalReadiness(
        str(version), int(num), not blockers, bool(on), int(keep), bool(may), running, done,
        int(current), oldest, tuple(covered), tuple(blockers), tuple(fixes), tuple(notes),
    )  # fmt: skip


def _duration(seconds: float) -> str:
    """Whole days, hours or minutes: ``10 d``, ``5 h``, ``12 min``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def rows(r: WalReadiness) -> list[tuple[str, str]]:
    """The report as ``(what, value)`` lines for people: inspect's and doctor's."""
    out = [("WAL summaries (dump --since, sync)",
            "ready" if r.ready else "not used: " + "; ".join(r.blockers))]  # fmt: skip
    if r.summarize_wal is not None:
        keep = "never removed" if r.keep_minutes == 0 else _duration((r.keep_minutes or 0) * 60)
        out.append(("summarize_wal / wal_summary_keep_time",
                    f"{'on' if r.summarize_wal else 'off'} / {keep}"))  # fmt: skip
    if r.oldest_summary_lsn is not None and r.current_lsn is not None:
        out.append(("WAL summaries reach back",
                    f"to {lsn_text(r.oldest_summary_lsn)}"
                    f" ({r.current_lsn - r.oldest_summary_lsn:,} bytes of WAL)"))  # fmt: skip
    for c in r.marks:
        at = f"at {lsn_text(c.lsn)} ({c.wal_since:,} bytes of WAL since): "
        if not c.covered:
            v = f"{at}not covered: {c.why}; the next run takes the full pass"
        else:
            v = f"{at}covered"
            if c.summarized_ago is not None:
                v += f", summarized {_duration(c.summarized_ago)} ago"
            if c.removed_in is not None:
                v += f", removed in {_duration(max(c.removed_in, 0))}"
        out.append((c.of, v))
    out += [("fix", f) for f in r.fixes]
    return out
