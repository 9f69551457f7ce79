"""``export``: one file (or S3 object) per LO, named from a template, read at the dump's
speed (its reader, N jobs, one exported snapshot), each object's sha256 computed on the
way, a manifest written last (CSV and JSON). Resumable: the target's journal
(files/exporting/journal) says what an earlier run stored, a rerun of the same command skips it
and finishes; nothing the export did not write is ever overwritten or removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pgblobdump import signals
from pgblobdump.errors import InsufficientResources, Interrupted, UsageError
from pgblobdump.files.exporting import manifest, names
from pgblobdump.files.exporting.jobs import Job, Tally, Worker, run_jobs
from pgblobdump.files.exporting.journal import Found, Journal, manifest_names
from pgblobdump.files.exporting.leftovers import remove_parts
from pgblobdump.files.exporting.plan import Names, for_oids, plan
from pgblobdump.files.objects import Place, open_place
from pgblobdump.packed.dump import referenced
from pgblobdump.pg import catalog
from pgblobdump.pg import snapshot as snap
from pgblobdump.pg.connect import connect
from pgblobdump.pg.lostream import Selection
from pgblobdump.report.reporter import QUIET, Reporter
from pgblobdump.storage.s3config import is_s3

PARTS_MAX = 1000


@dataclass(frozen=True)
class ExportRequest:
    """What to export and how; refuses bad combinations on construction.

    ``output``: a directory or ``s3://bucket/prefix``. ``template``: the ``--name``
    (files/exporting/names). ``jobs``: connections, each a contiguous OID range of one snapshot.
    ``part``: (K, N), share K of N of the selection by LO count (N exports at once)."""

    output: str
    template: str = "{oid}"
    selection: Selection = field(default_factory=Selection)
    jobs: int = 1
    part: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.jobs <= 64:
            raise UsageError(f"--jobs must be between 1 and 64 (got {self.jobs})")
        if self.part is not None and not 1 <= self.part[0] <= self.part[1] <= PARTS_MAX:
            raise UsageError(f"--part {self.part[0]}/{self.part[1]} must be K/N, 1 <= K <= N")


@dataclass(frozen=True)
class ExportResult:
    """``written``: LOs stored by this run; ``kept``: stored by an earlier run of this
    export (journaled, or found stored and verified by sha256); ``los``, ``bytes``: what
    the manifest lists. ``renamed``: (OID, path, why) of each LO whose name is not the
    template's."""

    target: str
    written: int
    written_bytes: int
    kept: int
    los: int
    bytes: int
    renamed: list[tuple[int, str, str]]
    manifest: list[str]
    seconds: float
    snapshot: str
    oids: str
    access: str

    def record(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["seconds"] = round(self.seconds, 3)
        d["renamed"] = [{"oid": o, "path": p, "why": w} for o, p, w in self.renamed]
        return d


def _settings(conn: Any, req: ExportRequest, sel: Selection) -> dict[str, Any]:
    row = conn.execute(
        "SELECT current_database(), d.oid::int8 FROM pg_database d"
        " WHERE d.datname = current_database()"
    ).fetchone()
    return {
        "database": row[0],
        "database_oid": int(row[1]),
        "template": req.template,
        "referenced_by": [f"{t}.{c}" for t, c in sel.referenced_by],
        "oids": [sel.first, sel.last],
        "part": list(req.part) if req.part else None,
    }


def export(conninfo: str, req: ExportRequest, reporter: Reporter = QUIET) -> ExportResult:
    """Export the LOs ``req`` selects from the database at ``conninfo`` into
    ``req.output`` (module docstring)."""
    t0 = time.perf_counter()
    template = names.parse(req.template, (t for t, _ in req.selection.referenced_by))
    # before any LO is read: the bucket exists, the directory can be written
    made = not is_s3(req.output) and not os.path.lexists(req.output)
    try:
        with open_place(req.output, create=True) as place:
            return _export(conninfo, req, reporter, template, place, t0)
    except BaseException:
        if made:  # the directory this run made, if it stayed empty (a refused run)
            with contextlib.suppress(OSError):
                os.rmdir(req.output)
        raise


def _export(conninfo: str, req: ExportRequest, reporter: Reporter, template: names.Template,
            place: Place, t0: float) -> ExportResult:  # fmt: skip
    with connect(conninfo, autocommit=True, doing="export") as leader:
        snap.begin(leader)
        sel = referenced.resolve(leader, req.selection)
        snapshot = snap.export(leader)
        journal = Journal(place, _settings(leader, req, sel), req.part)
        found = journal.look()
        csv_name, json_name = manifest_names(req.part)
        if found.complete:
            reporter.note(f"{place.description}: complete already ({csv_name} is there);"
                          " nothing to do")  # fmt: skip
            leader.execute("COMMIT")
            los = sum(r.size >= 0 for r in journal.rows(found))
            nbytes = sum(r.size for r in journal.rows(found))
            return _result(place, Tally(), los, los, nbytes, t0, snapshot, "",
                           [csv_name, json_name], [])  # fmt: skip
        if not found.fresh:
            parts = 0
            if not place.is_s3:
                parts = remove_parts(Path(place.description), [str(r["id"]) for r in journal.runs])
            reporter.note(
                f"resuming: {len(found.done):,} LOs an earlier run wrote are there (their"
                " sizes checked), kept"
                + (f"; {parts:,} partial files it left removed" if parts else "")
            )
        ranges = snap.shares(leader, sel, req.part, req.jobs)
        journal.begin(len(ranges))
        covered = f"{ranges[0].first}..{ranges[-1].last}"
        if req.part is not None:
            reporter.note(f"part {req.part[0]}/{req.part[1]}: OIDs {covered}")
        reporter.task("exporting LOs", catalog.count_selected(leader, ranges))
        namer: Names
        if template.table is None:
            namer = for_oids(template)
        else:
            namer = plan(leader, template, sel, {o: r.path for o, r in found.done.items()})
        tally = Tally()
        stop = threading.Event()
        jobs = [Job([r], journal.writer(k)) for k, r in enumerate(ranges)]

        def worker() -> Worker:
            return Worker(place, namer, found, tally, reporter, stop)

        try:
            run_jobs(conninfo, snapshot, jobs, worker, stop)
        except KeyboardInterrupt as e:
            signum = signals.signum_of(e)
            raise Interrupted(
                f"export interrupted by {signals.name(signum)}: {_stored(tally, found)};"
                f" run the same command again to finish it (OIDs {covered})",
                signum,
            ) from None
        except InsufficientResources as e:
            raise InsufficientResources(
                f"{e}; {_stored(tally, found)}: free space and run the same command again"
                " to finish it"
            ) from None
        with contextlib.suppress(Exception):
            leader.execute("COMMIT")
    # the manifest last: from the journal, every OID once, in order
    los, nbytes = _write_manifest(place, journal, found, csv_name, json_name, snapshot)
    return _result(
        place,
        tally,
        len(found.done) + tally.adopted,
        los,
        nbytes,
        t0,
        snapshot,
        covered,
        [csv_name, json_name],
        namer.renamed() or sorted(tally.renamed),
    )


def _write_manifest(place: Place, journal: Journal, found: Found, csv_name: str,
                    json_name: str, snapshot: str) -> tuple[int, int]:  # fmt: skip
    """The manifest from the journal: its rows read once into two unlinked temporary
    files (memory stays flat), then put, JSON first and CSV last (its presence says the
    export is complete). Returns its LOs and bytes."""
    if found.half and all(r.path != json_name for r in found.done.values()):
        place.remove(json_name)  # ours: an earlier run's, stopped between the two
    with (
        tempfile.TemporaryFile(prefix="pgblobdump-manifest-") as c,
        tempfile.TemporaryFile(prefix="pgblobdump-manifest-") as j,
    ):
        w = manifest.Writer(c, j, {**journal.settings, "snapshot": snapshot})
        for r in journal.rows(found):
            w.add(r)
        w.finish()
        place.flush()  # every object on disk before the manifest says the export is complete
        for name, f in ((json_name, j), (csv_name, c)):
            size = f.tell()
            f.seek(0)
            with place.putter() as putter:
                putter.put(name, _pieces(f), size)
    return w.los, w.bytes


def _pieces(f: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    at = 0
    while chunk := f.read(manifest.CHUNK):
        yield at, chunk
        at += len(chunk)


def _stored(tally: Tally, found: Any) -> str:
    return f"{tally.los + len(found.done):,} LOs are stored and journaled in the target"


def _result(place: Place, tally: Tally, kept: int, los: int, nbytes: int, t0: float,
            snapshot: str, covered: str, files: list[str],
            renamed: list[tuple[int, str, str]]) -> ExportResult:  # fmt: skip
    access = (
        "objects written with no ACL: as private as the bucket's policy, nothing made public"
        if place.is_s3
        else "files 0600 and directories 0700: readable by this OS user alone"
    )
    return ExportResult(
        place.description, tally.los - tally.adopted, tally.bytes, kept, los, nbytes, renamed,
        files, time.perf_counter() - t0, snapshot, covered, access,
    )  # fmt: skip
