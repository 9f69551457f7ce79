"""``toc diff``: compare two archives entry by entry, per-LO entries collapsed to OID ranges.

Ordinary entries are matched by (type, schema, name) and compared by owner and
definition. Per-LO entries (BLOB, BLOB METADATA, and ACL/COMMENT/SECURITY LABEL on large
objects) are grouped by (type, owner) into sets of OIDs and shown as ranges, so a 16-vs-17
diff of a million LOs is a handful of lines: the BLOB entries went, BLOB METADATA groups
came, the number of BLOBS entries changed, and the LOs themselves are the same.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pgblobdump.toc.blobruns import BlobRun
from pgblobdump.toc.entry import blobs_oid, catalog_id, parse_oids
from pgblobdump.toc.fields import (
    F_DEFN,
    F_DEPENDENCIES,
    F_DESC,
    F_DUMP_ID,
    F_NAMESPACE,
    F_OWNER,
    F_TAG,
)
from pgblobdump.toc.reader import Archive

_LO_DEPENDENT = (b"ACL", b"COMMENT", b"SECURITY LABEL")


@dataclass(frozen=True)
class DiffLine:
    """One difference: ``change`` is '-' (only in A), '+' (only in B), '~' (changed) or
    '=' (the LO-level verdict); ``what`` names the entries (an OID range list for LOs)."""

    change: str
    desc: str
    what: str
    detail: str

    def format(self) -> str:
        text = f"{self.change} {self.desc} {self.what}".rstrip()
        return f"{text}  ({self.detail})" if self.detail else text


@dataclass
class _Side:
    objects: dict[tuple[str, str, str], tuple[str, str]] = field(default_factory=dict)
    lo_oids: dict[tuple[str, str], array[int]] = field(default_factory=dict)
    lo_entries: dict[tuple[str, str], int] = field(default_factory=dict)
    blobs: int = 0  # BLOBS entries
    all_los: dict[int, str] = field(default_factory=dict)  # oid -> owner (LO-level view)


def _text(raw: bytes | None) -> str:
    return "" if raw is None else raw.decode("utf-8", "replace")


def _load(archive: Archive) -> _Side:
    side = _Side()
    metadata: dict[int, bytes] = {}
    for raw in archive.iter_items():
        if isinstance(raw, BlobRun):
            run_oids = raw.oids()
            owner = _text(raw.owner)
            _add(side, "BLOB", owner, run_oids, raw.count)
            side.all_los.update(dict.fromkeys(run_oids, owner))
            continue
        desc, tag, owner = raw[F_DESC] or b"", raw[F_TAG], _text(raw[F_OWNER])
        if desc == b"BLOB":
            oid = blobs_oid(raw)
            _add(side, "BLOB", owner, (oid,))
            side.all_los[oid] = owner
        elif desc == b"BLOB METADATA":
            metadata[raw[F_DUMP_ID]] = raw[F_DEFN] or b""
            oids = list(parse_oids(raw[F_DEFN] or b""))
            _add(side, "BLOB METADATA", owner, oids)
            for oid in oids:
                side.all_los[oid] = owner
        elif desc == b"BLOBS":
            side.blobs += 1
        elif desc in _LO_DEPENDENT and tag is not None and tag.startswith(b"LARGE OBJECT"):
            name = f"{_text(desc)} ON LARGE OBJECT"
            deps = [d for d in raw[F_DEPENDENCIES] if d in metadata] if desc == b"ACL" else []
            if deps:  # 1.16: one ACL entry for a whole group; comments stay per LO
                oids = [o for d in deps for o in parse_oids(metadata[d])]
            else:
                oids = [catalog_id(tag.rsplit(b" ", 1)[-1].split(b"..")[0])]
            _add(side, name, owner, oids)
        else:
            key = (_text(desc), _text(raw[F_NAMESPACE]), _text(tag))
            n = 1
            while key in side.objects:  # same name twice (overloads): number them
                n += 1
                key = (key[0], key[1], f"{_text(tag)} #{n}")
            side.objects[key] = (owner, _digest(raw[F_DEFN]))
    return side


def _digest(defn: bytes | None) -> str:
    if defn is None:
        return "-"
    return hashlib.sha1(defn, usedforsecurity=False).hexdigest()[:10]


def _add(side: _Side, desc: str, owner: str, oids: Iterable[int], entries: int = 1) -> None:
    key = (desc, owner)
    side.lo_oids.setdefault(key, array("I")).extend(oids)
    side.lo_entries[key] = side.lo_entries.get(key, 0) + entries


def ranges(oids: Iterable[int], limit: int = 8) -> str:
    """Sorted OIDs as ``a..b`` runs: ``1..1000, 2000, 3000..3001``; long lists cut."""
    runs: list[tuple[int, int]] = []
    for oid in sorted(set(oids)):
        if runs and oid == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], oid)
        else:
            runs.append((oid, oid))
    parts = [f"{a}" if a == b else f"{a}..{b}" for a, b in runs[:limit]]
    if len(runs) > limit:
        parts.append(f"... {len(runs) - limit} more ranges")
    return ", ".join(parts)


def diff(a: Archive, b: Archive) -> list[DiffLine]:
    """The differences from archive ``a`` to archive ``b``."""
    sa, sb = _load(a), _load(b)
    out: list[DiffLine] = []
    for key in sorted(sa.objects.keys() | sb.objects.keys()):
        desc, nsp, tag = key
        name = f"{nsp}.{tag}" if nsp else tag
        if key not in sb.objects:
            out.append(DiffLine("-", desc, name, f"owner {sa.objects[key][0]}"))
        elif key not in sa.objects:
            out.append(DiffLine("+", desc, name, f"owner {sb.objects[key][0]}"))
        elif sa.objects[key] != sb.objects[key]:
            (own_a, da), (own_b, db) = sa.objects[key], sb.objects[key]
            what = [f"owner {own_a} -> {own_b}"] if own_a != own_b else []
            what += ["definition differs"] if da != db else []
            out.append(DiffLine("~", desc, name, "; ".join(what)))
    for lo_key in sorted(sa.lo_oids.keys() | sb.lo_oids.keys()):
        desc, owner = lo_key[0], lo_key[1] or "-"
        oa = sa.lo_oids.get(lo_key, array("I"))
        ob = sb.lo_oids.get(lo_key, array("I"))
        ea, eb = sa.lo_entries.get(lo_key, 0), sb.lo_entries.get(lo_key, 0)
        if sorted(oa) == sorted(ob):
            if ea != eb:
                out.append(
                    DiffLine("~", desc, ranges(oa), f"owner {owner}; {ea:,} -> {eb:,} entries")
                )
            continue
        gone, new = set(oa) - set(ob), set(ob) - set(oa)
        if gone:
            out.append(DiffLine("-", desc, ranges(gone), _count(owner, len(gone), ea, oa)))
        if new:
            out.append(DiffLine("+", desc, ranges(new), _count(owner, len(new), eb, ob)))
    if sa.blobs != sb.blobs:
        out.append(DiffLine("~", "BLOBS", "", f"{sa.blobs:,} -> {sb.blobs:,} entries"))
    out.extend(_lo_verdict(sa, sb))
    return out


def _n(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _count(owner: str, n: int, entries: int, oids: array[int]) -> str:
    return (
        f"owner {owner}; {_n(n, 'LO', 'LOs')}; {_n(entries, 'entry', 'entries')} in all"
        f" for {_n(len(oids), 'LO', 'LOs')}"
    )


def _lo_verdict(sa: _Side, sb: _Side) -> Iterator[DiffLine]:
    la, lb = sa.all_los, sb.all_los
    if not la and not lb:
        return
    if la.keys() == lb.keys():
        moved = sum(1 for oid, owner in la.items() if lb[oid] != owner)
        detail = f"{moved:,} owners differ" if moved else "same owners"
        yield DiffLine("=", "large objects", f"same {len(la):,} OIDs", detail)
        return
    gone, new = la.keys() - lb.keys(), lb.keys() - la.keys()
    if gone:
        yield DiffLine("-", "large objects", ranges(gone), f"{len(gone):,} only in A")
    if new:
        yield DiffLine("+", "large objects", ranges(new), f"{len(new):,} only in B")
