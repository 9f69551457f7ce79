"""What a sync does, decided LO by LO from two sorted streams: the source's LOs (changed
since the mark, or their digests) and the target's (ours, changed there, or foreign).

- on the source only: **new**, copied; but when a copy or sync made it and did not
  remove it since (``made``, state.coverage), it was unlinked on the target: a
  **conflict** ("deleted on the target"), copied again only with --force;
- on both, the target's ours: **rewrite** when the source changed it (or its digest or
  comment differs), else equal;
- on both, its pages or comment changed on the target since a copy made it: a
  **conflict**, rewritten only with --force; its metadata row not the one a copy made
  (owner or ACL changed there, or made again there, perhaps by someone else) or foreign
  (no copy or sync made it): a conflict, never touched, even with --force;
- on the target only and ours: **gone** from the source, removed only with --delete (a
  target-side change there is a conflict: kept, even with --force).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pgblobdump.pg.changes import Scan
from pgblobdump.sync.state import CHANGED, FOREIGN, OURS, REPLACED, Coverage, Held

SHOWN = 100_000
"""Conflicts kept by OID for the report (each action's OIDs are all kept: they are the
work to do, in proportion to what changed)."""


@dataclass(frozen=True, slots=True)
class Conflict:
    oid: int
    why: str


@dataclass
class Plan:
    """The OIDs of each action, ascending; ``equal``: LOs already equal."""

    new: list[int] = field(default_factory=list)
    rewrite: list[int] = field(default_factory=list)
    forced: list[int] = field(default_factory=list)  # target-side changes overwritten
    gone: list[int] = field(default_factory=list)
    deleted_there: list[int] = field(default_factory=list)
    """LOs a copy or sync made that were unlinked on the target: conflicts, or with
    --force copied again (in ``forced``)."""
    conflicts: list[Conflict] = field(default_factory=list)
    equal: int = 0
    segments: list[list[int]] = field(default_factory=list)
    """[first, last, count] of runs of LOs to copy with no other source LO between
    them: a long run is read by OID range (the dump's reader), the rest by OID list."""

    seen: int = 0

    def sort(self) -> None:
        """Every list in OID order (a plan made in several passes)."""
        for oids in (self.new, self.rewrite, self.forced, self.gone, self.deleted_there):
            oids.sort()
        self.conflicts.sort(key=lambda c: c.oid)
        self.segments.sort()

    def _take(self, oid: int, into: list[int], after_taken: bool) -> None:
        into.append(oid)
        if after_taken and self.segments:
            seg = self.segments[-1]
            seg[1] = oid
            seg[2] += 1
        else:
            self.segments.append([oid, oid, 1])

    def rows(self, delete: bool) -> Iterator[dict[str, object]]:
        """One row per LO acted on or in conflict, for --dry-run (OID order per action)."""
        deleted = set(self.deleted_there)
        for what, oids in (("new", self.new), ("rewrite", self.rewrite),
                           ("overwrite (--force)", self.forced)):  # fmt: skip
            for o in oids:
                if o in deleted:
                    yield {"oid": o, "action": "copy again (--force)", "detail": DELETED_HERE}
                else:
                    yield {"oid": o, "action": what, "detail": ""}
        for o in self.gone:
            yield {"oid": o, "action": "delete" if delete else "gone from the source",
                   "detail": "" if delete else "kept: --delete removes it"}  # fmt: skip
        for c in self.conflicts:
            yield {"oid": c.oid, "action": "conflict", "detail": c.why}

    def counts(self) -> dict[str, int]:
        return {"new": len(self.new), "rewrite": len(self.rewrite) + len(self.forced),
                "gone": len(self.gone), "conflicts": len(self.conflicts),
                "deleted_on_target": len(self.deleted_there), "equal": self.equal}  # fmt: skip


CHANGED_HERE = "changed on the target since it was copied"
REPLACED_HERE = (
    "its owner or ACL changed on the target, or it was made again there, since it was"
    " copied: --force does not overwrite it"
)
GONE_CHANGED = f"gone from the source but {CHANGED_HERE}: kept"
GONE_REPLACED = f"gone from the source but {REPLACED_HERE}"
NOT_OURS = "exists on the target and no copy or sync made it"
DELETED_HERE = "deleted on the target since it was copied: --force copies it again"


def decide(
    source: Iterable[Scan],
    target: Iterable[Held],
    force: bool,
    by_digest: bool,
    plan: Plan | None = None,
    sparse: bool = False,
    made: Coverage | None = None,
) -> Plan:
    """Merge the two OID-ordered streams into ``plan`` (a new one by default; see the
    module's docstring). ``by_digest``: the source's changes are found by comparing
    digests (no usable mark). ``sparse``: the streams hold only the LOs of interest of
    OIDs both sides hold (changes.scan and state.held with ``sparse``): an OID missing
    from one is unchanged there, with no comment (``plan.seen`` counts those decided).
    ``made``: the OIDs a copy or sync made and did not remove (state.coverage)."""
    plan = plan if plan is not None else Plan()
    src = iter(source)
    tgt = iter(target)
    s = next(src, None)
    t = next(tgt, None)
    taking = False  # the source LO before this one is copied too
    while s is not None or t is not None:
        if t is None or (s is not None and s.oid < t.oid):
            assert s is not None
            if sparse:
                plan.seen += 1
                _both(plan, s, Held(s.oid, OURS, None), force, by_digest, False)
            elif made is not None and s.oid in made:  # unlinked on the target
                plan.deleted_there.append(s.oid)
                if force:
                    plan._take(s.oid, plan.forced, taking)
                else:
                    _conflict(plan, s.oid, DELETED_HERE)
                taking = force
            else:
                plan._take(s.oid, plan.new, taking)
                taking = True
            s = next(src, None)
            continue
        if s is None or t.oid < s.oid:
            if sparse:
                plan.seen += 1
                _both(plan, Scan(t.oid, False, None), t, force, by_digest, False)
            elif t.kind == OURS:
                plan.gone.append(t.oid)
            elif t.kind == CHANGED:  # never removed, even with --force
                _conflict(plan, t.oid, GONE_CHANGED)
            elif t.kind == REPLACED:
                _conflict(plan, t.oid, GONE_REPLACED)
            t = next(tgt, None)
            continue
        plan.seen += sparse
        taking = _both(plan, s, t, force, by_digest, taking and not sparse)
        s = next(src, None)
        t = next(tgt, None)
    return plan


def _both(plan: Plan, s: Scan, t: Held, force: bool, by_digest: bool, taking: bool) -> bool:
    """The decision for an OID on both sides; whether the LO is copied."""
    if t.kind == FOREIGN:
        _conflict(plan, s.oid, NOT_OURS)
    elif t.kind == REPLACED:
        _conflict(plan, s.oid, REPLACED_HERE)
    elif t.kind == CHANGED:
        if not force:
            _conflict(plan, s.oid, CHANGED_HERE)
            return False
        plan._take(s.oid, plan.forced, taking)
        return True
    elif s.changed or (by_digest and (s.digest is None or s.digest != t.digest)):
        plan._take(s.oid, plan.rewrite, taking)  # (an LO over 1 GB has no digest: again)
        return True
    elif s.comment != t.comment:
        if t.comment is None and not by_digest:  # ours had it: removed on the target
            if force:
                plan._take(s.oid, plan.forced, taking)
                return True
            _conflict(plan, s.oid, f"its comment was removed: {CHANGED_HERE}")
            return False
        plan._take(s.oid, plan.rewrite, taking)  # the source removed or changed it
        return True
    else:
        plan.equal += 1
    return False


def _conflict(plan: Plan, oid: int, why: str) -> None:
    if len(plan.conflicts) < SHOWN:
        plan.conflicts.append(Conflict(oid, why))
