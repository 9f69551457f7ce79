"""Restore's batch planner (packed/restore/plan.py) without a server: the exact plan of
representative batches (empty LOs, LOs with contents, with holes; owners none, one, mixed;
ACLs set by a superuser or grouped into GRANTs; comments), the skipping batch's choices
(which OIDs are kept, claimed in the ledger, replaced), the exact refusals, and the
properties every plan keeps (each OID created once; the grants partition the ACLs)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgblobdump.errors import CorruptArchive, DatabaseError
from pgblobdump.packed.format.index import Meta
from pgblobdump.packed.restore.plan import (
    BatchLos,
    BatchPlan,
    Creation,
    GrantKey,
    Rules,
    claimed,
    grants,
    plan_batch,
    refuse_missing,
    replaced_of,
    roles_named,
)
from pgblobdump.packed.restore.sparse import Further, Gathering
from pgblobdump.pg.ledger import to_ranges

PLAIN = Meta(None, None, None)
ALICE = Meta("alice", None, None)
BOB = Meta("bob", None, None)
SELECT, UPDATE = ("SELECT",), ("UPDATE",)


# -- creations ----------------------------------------------------------------------------
def test_empty_los_of_one_known_owner_are_one_creation_of_the_batchs_own_list() -> None:
    batch = BatchLos([1, 2, 3, 7], [ALICE] * 4, [b""] * 4, empty=True)
    plan = plan_batch(batch, Rules(owners={"alice"}, any_acl=False, any_comment=False))
    assert plan == BatchPlan(
        [(1, 3), (7, 7)], creations=(Creation("alice", [1, 2, 3, 7], [], []),), los=4
    )
    assert plan.creations[0].empty is batch.oids  # no copy of a 50,000-OID list


def test_los_with_contents_and_empty_ones_of_one_owner() -> None:
    datas: list[bytes | memoryview] = [b"ab", b"", memoryview(b"xyz"), b""]
    plan = plan_batch(BatchLos([10, 11, 12, 20], [PLAIN] * 4, datas), Rules())
    assert plan == BatchPlan(
        [(10, 12), (20, 20)],
        creations=(Creation(None, [11, 20], [10, 12], [b"ab", b"xyz"]),),
        los=4,
        bytes=5,
    )


def test_mixed_owners_each_its_creation_in_the_order_the_batch_first_names_them() -> None:
    metas = [BOB, ALICE, BOB, PLAIN, ALICE]
    datas: list[bytes | memoryview] = [b"1", b"", b"", b"22", b"333"]
    plan = plan_batch(BatchLos([1, 2, 3, 4, 5], metas, datas), Rules())
    assert plan.creations == (
        Creation("bob", [3], [1], [b"1"]),
        Creation("alice", [2], [5], [b"333"]),
        Creation(None, [], [4], [b"22"]),
    )
    assert (plan.los, plan.bytes) == (5, 6)


def test_mixed_owners_of_empty_los() -> None:
    plan = plan_batch(BatchLos([1, 2, 3], [ALICE, BOB, ALICE], [b""] * 3, empty=True), Rules())
    assert plan.creations == (Creation("alice", [1, 3], [], []), Creation("bob", [2], [], []))


def test_no_owner_creates_everything_as_the_connected_role() -> None:
    plan = plan_batch(BatchLos([1, 2], [ALICE, BOB], [b"a", b""]), Rules(no_owner=True))
    assert plan.creations == (Creation(None, [2], [1], [b"a"]),)


def test_the_archive_having_several_owners_plans_by_the_batchs_own() -> None:
    rules = Rules(owners={"alice", "bob"})
    plan = plan_batch(BatchLos([1, 2], [BOB, BOB], [b"", b""], empty=True), rules)
    assert plan.creations == (Creation("bob", [1, 2], [], []),)


def test_a_batch_left_with_no_los_creates_nothing() -> None:
    assert plan_batch(BatchLos([], [], []), Rules()) == BatchPlan([])
    plan = plan_batch(BatchLos([], [], [], empty=True), Rules(owners={"alice"}))
    assert plan == BatchPlan([], creations=(Creation("alice", [], [], []),))


def test_an_lo_with_holes_counts_its_whole_size_and_carries_its_further_runs() -> None:
    lo = Gathering(5, PLAIN, 10_000, [(0, b"a" * 10), (8192, b"b" * 5)])
    further = Further()
    assert further.add(lo) == 5
    plan = plan_batch(BatchLos([5, 6], [PLAIN, PLAIN], [lo.first(), b"cd"], further), Rules())
    assert plan.creations == (Creation(None, [], [5, 6], [b"a" * 10, b"cd"]),)
    assert plan.further is further
    assert (further.put_oids, further.put_offsets, further.tail_oids) == ([5], [8192], [5])
    assert (plan.los, plan.bytes) == (2, 10_000 + 2)


# -- ACLs ---------------------------------------------------------------------------------
ACLS = [
    Meta("alice", ("alice=rw/alice", "bob=r/alice"), None),
    Meta("alice", ("alice=rw/alice", "bob=r/alice", "=w/alice"), None),
    Meta("carol", ("carol=rw/carol", "bob=r*w/carol"), None),
    Meta("alice", ("alice=r/bob", "bob=r/dave"), None),
    Meta("alice", (), None),  # every privilege revoked, the owner's too
    ALICE,  # the default ACL
]


def test_acls_grouped_into_grants_by_grantor_grantee_privileges_and_option() -> None:
    oids = [1, 2, 3, 4, 5, 6]
    plan = plan_batch(BatchLos(oids, ACLS, [b""] * 6, empty=True), Rules())
    assert plan.acls is None
    want: list[tuple[GrantKey, list[int]]] = [
        (("alice", "bob", SELECT, False), [1, 2]),
        (("alice", None, UPDATE, False), [2]),
        (("carol", "bob", UPDATE, False), [3]),
        (("carol", "bob", SELECT, True), [3]),
        (("bob", "alice", SELECT, False), [4]),  # the owner's entry, granted by another
        (("dave", "bob", SELECT, False), [4]),
    ]
    assert list(plan.grants.items()) == want


def test_a_superuser_sets_the_acls_exactly_in_one_statement() -> None:
    plan = plan_batch(BatchLos([1, 2, 3, 4, 5, 6], ACLS, [b""] * 6), Rules(superuser=True))
    assert plan.grants == {}
    assert plan.acls == (
        [1, 2, 3, 4, 5],
        [
            '{"alice=rw/alice","bob=r/alice"}',
            '{"alice=rw/alice","bob=r/alice","=w/alice"}',
            '{"carol=rw/carol","bob=r*w/carol"}',
            '{"alice=r/bob","bob=r/dave"}',
            "{}",
        ],
    )


@pytest.mark.parametrize("rules", [Rules(no_acl=True), Rules(no_acl=True, superuser=True)])
def test_no_acl_plans_none(rules: Rules) -> None:
    plan = plan_batch(BatchLos([1, 2, 3, 4, 5, 6], ACLS, [b""] * 6), rules)
    assert (plan.acls, plan.grants) == (None, {})


def test_an_archive_with_no_acl_is_not_looked_at() -> None:
    """``any_acl`` False is what the whole archive's metadata said: the batch's own is
    not read for ACLs (nor parsed: a damaged item would not be found here)."""
    bad = Meta("alice", ("nonsense",), None)
    plan = plan_batch(BatchLos([1], [bad], [b""]), Rules(any_acl=False))
    assert (plan.acls, plan.grants) == (None, {})


def test_an_acl_item_a_large_object_cannot_have_is_refused() -> None:
    bad = Meta("alice", ("alice=rw/alice", "bob=x/alice"), None)
    with pytest.raises(CorruptArchive) as caught:
        plan_batch(BatchLos([1, 2], [ACLS[0], bad], [b"", b""]), Rules())
    assert str(caught.value) == "ACL item 'bob=x/alice' is not one a large object can have"


def test_grants_of_nothing() -> None:
    assert grants([]) == {}
    assert grants([(1, ALICE), (2, Meta("alice", ("alice=rw/alice",), None))]) == {}


# -- comments -----------------------------------------------------------------------------
def test_comments_of_the_los_that_have_one() -> None:
    metas = [Meta(None, None, "first"), PLAIN, Meta(None, None, ""), Meta(None, None, "it's")]
    plan = plan_batch(BatchLos([1, 2, 3, 4], metas, [b""] * 4), Rules())
    assert plan.comments == [(1, "first"), (3, ""), (4, "it's")]
    assert plan_batch(BatchLos([1, 2, 3, 4], metas, [b""] * 4), Rules(no_comments=True)) == (
        BatchPlan([(1, 4)], creations=(Creation(None, [1, 2, 3, 4], [], []),), los=4)
    )


# -- skipping batches: --on-conflict skip, --resume, sync's replacements --------------------
def _skipping(
    oids: list[int], existing: set[int], replacing: set[int], removed: set[int]
) -> tuple[list[int], list[int], BatchPlan]:
    """What a skipping batch does with the target's answers: the old copies of
    ``replacing`` that could be ``removed`` are gone, the rest of ``existing`` is there.
    Returns (OIDs claimed in the ledger, OIDs created, the plan)."""
    mine = replaced_of(oids, replacing)
    replaced = removed & set(mine)
    there = existing - replaced
    batch = BatchLos(oids, [PLAIN] * len(oids), [bytes([o]) for o in oids])
    plan = plan_batch(batch.without(there), Rules())
    created = [o for c in plan.creations for o in c.empty + c.full]
    return claimed(oids, there, replaced), created, plan


def test_skip_keeps_what_exists_and_creates_the_rest() -> None:
    claim, created, plan = _skipping([1, 2, 3, 4], existing={2, 4}, replacing=set(), removed=set())
    assert (claim, created) == ([1, 3], [1, 3])
    assert plan == BatchPlan(
        [(1, 1), (3, 3)], creations=(Creation(None, [], [1, 3], [b"\1", b"\3"]),), los=2, bytes=2
    )


def test_replaced_los_are_created_but_not_claimed() -> None:
    """A failed run's clean-up removes what the ledger holds: an LO whose old copy this
    batch removed is not in it, so the rollback leaves the old copy."""
    claim, created, _ = _skipping([1, 2, 3], existing={2, 3}, replacing={3, 9}, removed={3})
    assert (claim, created) == ([1], [1, 3])


def test_a_copy_that_may_not_be_replaced_now_is_skipped_as_any_existing_lo() -> None:
    claim, created, _ = _skipping([1, 2, 3], existing={2, 3}, replacing={3}, removed=set())
    assert (claim, created) == ([1], [1])


def test_everything_there_leaves_a_plan_of_nothing() -> None:
    claim, created, plan = _skipping([1, 2], existing={1, 2}, replacing=set(), removed=set())
    assert (claim, created, plan.los, plan.bytes) == ([], [], 0, 0)


def test_without_drops_the_skipped_los_further_runs_too() -> None:
    further = Further()
    further.add(Gathering(5, PLAIN, 9000, [(0, b"x"), (8192, b"y")]))
    further.add(Gathering(6, PLAIN, 9000, [(4096, b"z")]))
    batch = BatchLos([5, 6, 7], [ALICE, BOB, PLAIN], [b"x", b"", b""], further)
    kept = batch.without({5})
    assert (kept.oids, kept.metas, kept.datas, kept.empty) == (
        [6, 7],
        [BOB, PLAIN],
        [b"", b""],
        True,
    )
    assert (kept.further.put_oids, kept.further.uncounted) == ([6], {6: 9000})
    assert batch.without(set()) is batch


def test_replaced_of() -> None:
    assert replaced_of([1, 2, 3], {2, 3, 9}) == [2, 3]
    assert replaced_of([1, 2, 3], None) == []


# -- roles --------------------------------------------------------------------------------
def test_roles_named_by_owners_grantees_and_grantors() -> None:
    metas = [ALICE, Meta("carol", ("carol=rw/carol", "=r/carol", "bob=w/dave"), None), PLAIN]
    assert roles_named(metas, no_owner=False, no_acl=False) == {"alice", "bob", "carol", "dave"}
    assert roles_named(metas, no_owner=True, no_acl=False) == {"bob", "carol", "dave"}
    assert roles_named(metas, no_owner=False, no_acl=True) == {"alice", "carol"}
    assert roles_named(metas, no_owner=True, no_acl=True) == set()


def test_roles_of_a_damaged_acl_are_refused_unless_acls_are_not_restored() -> None:
    metas = [Meta("alice", ("alice=rw",), None)]
    with pytest.raises(CorruptArchive) as caught:
        roles_named(metas, no_owner=False, no_acl=False)
    assert str(caught.value) == "ACL item 'alice=rw' is not one a large object can have"
    assert roles_named(metas, no_owner=False, no_acl=True) == {"alice"}


def test_missing_roles_are_refused_by_name_in_order() -> None:
    refuse_missing(set())
    with pytest.raises(DatabaseError) as caught:
        refuse_missing({"zed", "amy"})
    assert str(caught.value) == (
        "roles missing on the target: amy, zed; create them, or restore with --no-owner and"
        " --no-acl"
    )


# -- properties ---------------------------------------------------------------------------
ROLES = ["alice", "bob", "carol"]
ITEMS = [
    f"{grantee}={privileges}/{grantor}"
    for grantee in ["", *ROLES]
    for privileges in ["r", "w", "rw", "r*", "r*w", "r*w*"]
    for grantor in ROLES
]


def _pair(item: str) -> tuple[str, str]:
    """An ACL item's (grantee, grantor)."""
    grantee, _, rest = item.partition("=")
    return grantee, rest.partition("/")[2]


metas_ = st.builds(
    Meta,
    st.sampled_from([None, *ROLES]),
    # the server keeps one item per (grantee, grantor): aclitem[]s are merged that way
    st.none() | st.lists(st.sampled_from(ITEMS), unique_by=_pair, max_size=4).map(tuple),
    st.none() | st.text(max_size=3),
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[BatchLos, Rules]:
    """A batch of LOs, and rules that tell the truth about the archive it is part of."""
    oids = sorted(draw(st.sets(st.integers(1, 2**32 - 1), max_size=12)))
    metas = [draw(metas_) for _ in oids]
    datas: list[bytes | memoryview] = [draw(st.binary(max_size=3)) for _ in oids]
    owners = None
    if draw(st.booleans()):  # the archive's owners are known: the batch's and maybe more
        owners = {m.owner for m in metas} | draw(st.sets(st.sampled_from(ROLES)))
    rules = Rules(
        no_owner=draw(st.booleans()),
        no_acl=draw(st.booleans()),
        no_comments=draw(st.booleans()),
        superuser=draw(st.booleans()),
        owners=owners,
        any_acl=any(m.acl is not None for m in metas) or draw(st.booleans()),
        any_comment=any(m.comment is not None for m in metas) or draw(st.booleans()),
    )
    empty = not any(map(len, datas)) and draw(st.booleans())
    return BatchLos(oids, metas, datas, empty=empty), rules


@settings(max_examples=300, deadline=None)
@given(batches())
def test_every_lo_is_created_once_with_its_owner_and_contents(
    drawn: tuple[BatchLos, Rules],
) -> None:
    batch, rules = drawn
    plan = plan_batch(batch, rules)
    made = [(o, c.owner, b"") for c in plan.creations for o in c.empty]
    made += [
        (o, c.owner, bytes(d))
        for c in plan.creations
        for o, d in zip(c.full, c.contents, strict=True)
    ]
    want = [
        (o, None if rules.no_owner else m.owner, bytes(d))
        for o, m, d in zip(batch.oids, batch.metas, batch.datas, strict=True)
    ]
    assert sorted(made, key=lambda t: t[0]) == want
    assert len({c.owner for c in plan.creations}) == len(plan.creations)
    assert plan.ranges == to_ranges(batch.oids)
    assert (plan.los, plan.bytes) == (len(batch.oids), sum(map(len, batch.datas)))


@settings(max_examples=300, deadline=None)
@given(batches())
def test_grants_partition_the_acls_privilege_by_privilege(drawn: tuple[BatchLos, Rules]) -> None:
    batch, rules = drawn
    plan = plan_batch(batch, rules)
    if rules.no_acl:
        assert (plan.acls, plan.grants) == (None, {})
        return
    with_acl = [(o, m) for o, m in zip(batch.oids, batch.metas, strict=True) if m.acl is not None]
    if rules.superuser:
        assert plan.grants == {}
        assert plan.acls == (([o for o, _ in with_acl], [_literal(m) for _, m in with_acl])
                             if with_acl else None)  # fmt: skip
        return
    assert plan.acls is None
    granted = Counter(
        (o, grantor, grantee, p, option)
        for (grantor, grantee, privileges, option), oids in plan.grants.items()
        for o in oids
        for p in privileges
    )
    assert granted == Counter(_privileges(with_acl))
    for oids in plan.grants.values():  # one statement names each LO once, in OID order
        assert oids == sorted(set(oids))


@settings(max_examples=200, deadline=None)
@given(batches())
def test_comments_are_the_los_with_one(drawn: tuple[BatchLos, Rules]) -> None:
    batch, rules = drawn
    plan = plan_batch(batch, rules)
    pairs = zip(batch.oids, batch.metas, strict=True)
    want = [] if rules.no_comments else [(o, m.comment) for o, m in pairs if m.comment is not None]
    assert plan.comments == want


@settings(max_examples=200, deadline=None)
@given(batches())
def test_empty_is_a_shortcut_only(drawn: tuple[BatchLos, Rules]) -> None:
    """Told that no LO has bytes, the planner makes the plan it would have found."""
    batch, rules = drawn
    if batch.empty:
        told = plan_batch(batch, rules)
        found = plan_batch(BatchLos(batch.oids, batch.metas, batch.datas), rules)
        assert told == found


@settings(max_examples=200, deadline=None)
@given(batches(), st.data())
def test_a_skipping_batch_keeps_claims_and_creates_each_lo_once(
    drawn: tuple[BatchLos, Rules], data: st.DataObject
) -> None:
    batch, rules = drawn
    there = data.draw(st.sets(st.sampled_from(batch.oids))) if batch.oids else set()
    rest = [o for o in batch.oids if o not in there]
    replaced = data.draw(st.sets(st.sampled_from(rest))) if rest else set()
    kept = batch.without(there)
    assert kept.oids == rest
    assert kept.metas == [m for o, m in zip(batch.oids, batch.metas, strict=True) if o in rest]
    assert claimed(batch.oids, there, replaced) == [o for o in rest if o not in replaced]
    plan = plan_batch(kept, rules)
    assert sorted(o for c in plan.creations for o in c.empty + c.full) == rest


def _literal(m: Meta) -> str:
    return "{" + ",".join(f'"{i}"' for i in m.acl or ()) + "}"


def _privileges(with_acl: list[tuple[int, Meta]]) -> list[tuple[int, str, str | None, str, bool]]:
    """Every (OID, grantor, grantee, privilege, with grant option) the ACLs hold, the
    owners' own entries (granted by themselves) aside: read from the text here, letter by
    letter, not through aclitem.parse."""
    words = {"r": "SELECT", "w": "UPDATE"}
    out = []
    for oid, meta in with_acl:
        for item in meta.acl or ():
            grantee, _, rest = item.partition("=")
            letters, _, grantor = rest.partition("/")
            if grantee == meta.owner == grantor:
                continue
            for i, letter in enumerate(letters):
                if letter in words:
                    option = letters[i + 1 : i + 2] == "*"
                    out.append((oid, grantor, grantee or None, words[letter], option))
    return out
