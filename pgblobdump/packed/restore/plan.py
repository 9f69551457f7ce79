"""Restore's batch planner: what one batch of LOs needs written, as plain functions over
plain data, so that every decision is tested without a server.

``Restorer`` (packed/restore/restorer.py) gathers the inputs (the batch's LOs, which of them exist,
which old copies it removed, whether the role is a superuser, what the archive's metadata
holds) and runs the plan's statements in this order: creations owner by owner, the further
runs of LOs with holes, ACLs (set, or granted grantor by grantor), comments.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass, field
from typing import Protocol

from pgblobdump import aclitem as aclmod
from pgblobdump.errors import DatabaseError
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.restore.sparse import Further
from pgblobdump.pg.ledger import to_ranges

GrantKey = tuple[str, "str | None", tuple[str, ...], bool]
"""(grantor, grantee, privileges, with grant option) of one GRANT statement."""


class OidsOf(Protocol):
    """OIDs asked one by one (restore's ``Replacing``, or a plain set)."""

    def __contains__(self, oid: int) -> bool:
        """Whether ``oid`` is one of them."""
        ...


@dataclass(frozen=True)
class Rules:
    """What every batch of one restore is planned by: the request's ``--no-owner``,
    ``--no-acl`` and ``--no-comments``, whether the role is a superuser (it sets ACLs in the
    catalog; any other grants them), and what every Meta of the archive holds when that is
    known up front (a directory's index): ``owners`` all of its owners (None: not known),
    ``any_acl`` and ``any_comment`` False when none has one. A batch whose LOs can have but
    one owner, no ACL or no comment is planned with no loop over its LOs for it."""

    no_owner: bool = False
    no_acl: bool = False
    no_comments: bool = False
    superuser: bool = False
    owners: Set[str | None] | None = None
    any_acl: bool = True
    any_comment: bool = True


@dataclass(frozen=True)
class BatchLos:
    """One batch's LOs as parallel lists (OIDs ascending, each once): each one's metadata
    and the bytes its creation writes; ``further``: the further runs and tail lengths of
    those with holes. ``empty``: no LO has bytes to create with (its creation is one
    statement per owner); False says nothing."""

    oids: list[int]
    metas: list[Meta]
    datas: list[bytes | memoryview]
    further: Further = field(default_factory=Further)
    empty: bool = False

    def without(self, there: set[int]) -> BatchLos:
        """The batch without the LOs ``there`` (they exist on the target: skipped)."""
        if not there:
            return self
        keep = [i for i, o in enumerate(self.oids) if o not in there]
        datas = [self.datas[i] for i in keep]
        return BatchLos(
            [self.oids[i] for i in keep],
            [self.metas[i] for i in keep],
            datas,
            self.further.without(there),
            not any(map(len, datas)),
        )


@dataclass(frozen=True)
class Creation:
    """The LOs of one owner (None: the connected role) a batch creates: ``empty`` with no
    bytes, ``full`` with ``contents`` (parallel lists)."""

    owner: str | None
    empty: list[int]
    full: list[int]
    contents: list[bytes | memoryview]


@dataclass(frozen=True)
class BatchPlan:
    """One batch's statements, run by the restore's writer thread (planned before the
    batch's transaction; a skipping batch's in it, once what exists is known).

    ``ranges``: the batch's OIDs as ranges (its ledger entry). ``creations``: one per
    owner, every OID of the batch in exactly one. ``acls``: (OIDs, ``aclitem[]``
    literals) set in the catalog at once (a superuser), else None; ``grants``: the OIDs of
    each GRANT (a role that may not update the catalog), run as its grantor. ``comments``:
    (OID, text) of each LO with one. ``los`` and ``bytes``: what the batch restores, the
    bytes of its LOs with holes counted whole.
    """

    ranges: list[tuple[int, int]]
    creations: tuple[Creation, ...] = ()
    acls: tuple[list[int], list[str]] | None = None
    grants: dict[GrantKey, list[int]] = field(default_factory=dict)
    comments: list[tuple[int, str]] = field(default_factory=list)
    further: Further = field(default_factory=Further)
    los: int = 0
    bytes: int = 0


def plan_batch(batch: BatchLos, rules: Rules) -> BatchPlan:
    """What one batch's statements need, gathered from its parallel lists."""
    oids, metas = batch.oids, batch.metas
    acls, grants_ = _acls(oids, metas, rules)
    comments: list[tuple[int, str]] = []
    if not rules.no_comments and rules.any_comment:
        pairs = zip(oids, metas, strict=True)
        comments = [(o, m.comment) for o, m in pairs if m.comment is not None]
    sent = 0 if batch.empty else sum(map(len, batch.datas))
    return BatchPlan(
        to_ranges(oids),
        creations=_creations(batch, rules),
        acls=acls,
        grants=grants_,
        comments=comments,
        further=batch.further,
        los=len(oids),
        bytes=sent + sum(batch.further.uncounted.values()),
    )


def _creations(batch: BatchLos, rules: Rules) -> tuple[Creation, ...]:
    """One Creation per owner, owners in the order the batch first names them."""
    owners: Set[str | None]
    if rules.no_owner:
        owners = {None}
    elif rules.owners is not None and len(rules.owners) == 1:
        owners = rules.owners
    else:
        owners = dict.fromkeys(m.owner for m in batch.metas).keys()
    if len(owners) != 1:
        metas = batch.metas
        return tuple(_creation(o, [i for i, m in enumerate(metas) if m.owner == o], batch)
                     for o in owners)  # fmt: skip
    (owner,) = owners
    if batch.empty:
        return (Creation(owner, batch.oids, [], []),)
    return (_creation(owner, range(len(batch.oids)), batch),)


def _creation(owner: str | None, mine: Sequence[int], batch: BatchLos) -> Creation:
    """The Creation of the LOs at positions ``mine`` of the batch."""
    oids, datas = batch.oids, batch.datas
    return Creation(
        owner,
        [oids[i] for i in mine if not len(datas[i])],
        [oids[i] for i in mine if len(datas[i])],
        [datas[i] for i in mine if len(datas[i])],
    )


def _acls(
    oids: list[int], metas: list[Meta], rules: Rules
) -> tuple[tuple[list[int], list[str]] | None, dict[GrantKey, list[int]]]:
    """The batch's ACLs: set at once by a superuser, else granted (``grants``)."""
    if rules.no_acl or not rules.any_acl:
        return None, {}
    with_acl = [(o, m) for o, m in zip(oids, metas, strict=True) if m.acl is not None]
    if not with_acl:
        return None, {}
    if rules.superuser:
        literals = [aclmod.array_literal(m.acl or ()) for _, m in with_acl]
        return ([o for o, _ in with_acl], literals), {}
    return None, grants(with_acl)


def grants(items: Iterable[tuple[int, Meta]]) -> dict[GrantKey, list[int]]:
    """ACLs as GRANTs (for a role that may not update the catalog), by (grantor, grantee,
    privileges, with grant option), each key's OIDs in the order given: each grantor's
    grants are made as that grantor, so the server records the same grantor. The owner's
    own entry (granted by itself) is left out: creating the LO implies it. An ACL item that
    does not parse raises CorruptArchive."""
    groups: dict[GrantKey, list[int]] = defaultdict(list)
    for oid, meta in items:
        for text in meta.acl or ():
            a = aclmod.parse(text)
            if a.grantee == meta.owner and a.grantee == a.grantor:
                continue
            plain = tuple(p for p in a.privileges if p not in a.grantable)
            if plain:
                groups[(a.grantor, a.grantee, plain, False)].append(oid)
            if a.grantable:
                groups[(a.grantor, a.grantee, a.grantable, True)].append(oid)
    return groups


def replaced_of(oids: Iterable[int], replacing: OidsOf | None) -> list[int]:
    """Which of ``oids`` a run writes in place of the target's copies (sync's rewrites;
    ``replacing`` None: none)."""
    return [o for o in oids if o in replacing] if replacing is not None else []


def claimed(oids: Iterable[int], there: set[int], replaced: set[int]) -> list[int]:
    """The OIDs a skipping batch tells its ledger it creates: those not ``there`` (they
    exist: skipped), and not ``replaced`` either. A failed run's clean-up removes what the
    ledger holds, and must not leave an LO whose old copy was removed with no copy at all
    (the batch's rollback gives the old copy back)."""
    return [o for o in oids if o not in there and o not in replaced]


def roles_named(metas: Iterable[Meta], no_owner: bool, no_acl: bool) -> set[str]:
    """The roles the metadata names that the restore sets: owners (unless ``no_owner``),
    grantees and grantors (unless ``no_acl``; PUBLIC is none). An ACL item that does not
    parse raises CorruptArchive."""
    wanted: set[str] = set()
    for m in metas:
        if m.owner and not no_owner:
            wanted.add(m.owner)
        if m.acl and not no_acl:
            for item in m.acl:
                a = aclmod.parse(item)
                wanted.update(r for r in (a.grantee, a.grantor) if r)
    return wanted


def refuse_missing(missing: Set[str]) -> None:
    """Raise DatabaseError naming the roles ``missing`` on the target, if any."""
    if missing:
        raise DatabaseError(
            f"roles missing on the target: {', '.join(sorted(missing))}; create them, or restore"
            " with --no-owner and --no-acl"
        )
