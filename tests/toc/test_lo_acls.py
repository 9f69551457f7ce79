"""Per-LO ACLs of grouped archives (pg_dump 17/18): each LO's commands name its own OID,
as pg_restore's IssueACLPerBlob issues them, and the grants they make equal lomacl."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from pgblobdump import aclitem as pg_acl
from pgblobdump.cli import cli
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.toc import acl
from pgblobdump.toc import lo as los
from pgblobdump.toc.reader import open_archive
from tests.toc import build

SETUP_SQL = """
DO $$DECLARE r text;
BEGIN
  FOREACH r IN ARRAY ARRAY['acl_owner1', 'acl_owner2', 'acl_reader', 'acl_granter', 'Acl Quoted']
  LOOP
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
      EXECUTE format('CREATE ROLE %I', r);
    END IF;
  END LOOP;
END$$;
-- a: owner1, SELECT to acl_reader (interleaved with b, so the tags overlap)
SELECT lo_from_bytea(g, 'a') FROM generate_series(5000, 5018, 2) g;
-- b: owner2, ALL to "Acl Quoted" WITH GRANT OPTION and SELECT to PUBLIC
SELECT lo_from_bytea(g, 'b') FROM generate_series(5001, 5009, 2) g;
-- c: owner1 without UPDATE, UPDATE to acl_reader
SELECT lo_from_bytea(g, 'c') FROM generate_series(5200, 5203) g;
-- d: owner2, SELECT to acl_granter WITH GRANT OPTION, who grants it on to acl_reader
SELECT lo_from_bytea(g, 'd') FROM generate_series(5300, 5302) g;
-- e: owner1, SELECT WITH GRANT OPTION and UPDATE to acl_reader (r*w)
SELECT lo_from_bytea(g, 'e') FROM generate_series(5400, 5402) g;
-- f: one LO with its own grant; g: default privileges
SELECT lo_from_bytea(5500, 'f');
SELECT lo_from_bytea(g, 'g') FROM generate_series(5600, 5603) g;
"""

GRANTS_SQL = """
DO $$DECLARE o bigint;
BEGIN
  FOR o IN SELECT oid::bigint FROM pg_largeobject_metadata LOOP
    IF o BETWEEN 5000 AND 5018 AND o % 2 = 0 THEN
      EXECUTE format('ALTER LARGE OBJECT %s OWNER TO acl_owner1', o);
      EXECUTE format('GRANT SELECT ON LARGE OBJECT %s TO acl_reader', o);
    ELSIF o BETWEEN 5001 AND 5009 THEN
      EXECUTE format('ALTER LARGE OBJECT %s OWNER TO acl_owner2', o);
      EXECUTE format('GRANT ALL ON LARGE OBJECT %s TO "Acl Quoted" WITH GRANT OPTION', o);
      EXECUTE format('GRANT SELECT ON LARGE OBJECT %s TO PUBLIC', o);
    ELSIF o BETWEEN 5200 AND 5203 THEN
      EXECUTE format('ALTER LARGE OBJECT %s OWNER TO acl_owner1', o);
      EXECUTE format('REVOKE UPDATE ON LARGE OBJECT %s FROM acl_owner1', o);
      EXECUTE format('GRANT UPDATE ON LARGE OBJECT %s TO acl_reader', o);
    ELSIF o BETWEEN 5300 AND 5302 THEN
      EXECUTE format('ALTER LARGE OBJECT %s OWNER TO acl_owner2', o);
      EXECUTE format('GRANT SELECT ON LARGE OBJECT %s TO acl_granter WITH GRANT OPTION', o);
      SET LOCAL ROLE acl_granter;
      EXECUTE format('GRANT SELECT ON LARGE OBJECT %s TO acl_reader', o);
      RESET ROLE;
    ELSIF o BETWEEN 5400 AND 5402 THEN
      EXECUTE format('ALTER LARGE OBJECT %s OWNER TO acl_owner1', o);
      EXECUTE format('GRANT SELECT ON LARGE OBJECT %s TO acl_reader WITH GRANT OPTION', o);
      EXECUTE format('GRANT UPDATE ON LARGE OBJECT %s TO acl_reader', o);
    ELSIF o = 5500 THEN
      EXECUTE format('GRANT UPDATE ON LARGE OBJECT %s TO acl_owner2', o);
    ELSE
      EXECUTE format('ALTER LARGE OBJECT %s OWNER TO acl_owner1', o);
    END IF;
  END LOOP;
END$$;
"""

PLAN = ((17, "custom", "none"), (17, "directory", "gzip"), (18, "custom", "gzip"))
_NAMES = [f"pg{m}-{f}-{c}" for m, f, c in PLAN]
_LO_STMT = re.compile(r"(?:GRANT|REVOKE) .* ON LARGE OBJECT (\d+) ")


@dataclass(frozen=True)
class AclCorpus:
    archives: dict[str, build.Built]
    lomacl: dict[int, tuple[str, list[str] | None]]  # oid -> (owner, lomacl items as text)


@pytest.fixture(scope="module")
def acl_corpus(pg16: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> AclCorpus:
    out = tmp_path_factory.mktemp("acl_archives")
    with psycopg.connect(pg16.conninfo(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS toc_acl")
        conn.execute("CREATE DATABASE toc_acl")
    conninfo = pg16.conninfo("toc_acl")
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(SETUP_SQL)
        conn.execute(GRANTS_SQL)
        rows = conn.execute(
            "SELECT oid::bigint, pg_get_userbyid(lomowner),"
            " (SELECT array_agg(i::text) FROM unnest(lomacl) i)"
            " FROM pg_largeobject_metadata"
        ).fetchall()
    archives = {}
    for major, fmt, compression in PLAN:
        built = build.dump(conninfo, out, major, fmt, compression, False)
        archives[built.name] = built
    return AclCorpus(archives, {int(o): (owner, text) for o, owner, text in rows})


def _all_los(path: Path) -> Iterator[los.LargeObject]:
    with open_archive(path) as a:
        yield from los.iter_los(a)


def _lomacl_items(owner: str, text: list[str] | None) -> tuple[pg_acl.AclItem, ...]:
    """lomacl as items; () for NULL or an explicit ACL equal to the default."""
    if text is None:
        return ()
    items = tuple(pg_acl.parse(i) for i in text)
    if items == (pg_acl.AclItem(owner, ("SELECT", "UPDATE"), (), owner),):
        return ()
    return items


@pytest.mark.parametrize("name", _NAMES)
def test_each_lo_acl_names_its_own_oid(acl_corpus: AclCorpus, name: str) -> None:
    b = acl_corpus.archives[name]
    found = list(_all_los(b.path))
    assert {lo.oid for lo in found} == set(acl_corpus.lomacl)
    # several multi-LO ACL groups, so the first-OID rewrite is exercised
    assert len({lo.group for lo in found if lo.acl and len(lo.acl) > 0}) >= 5
    for lo in found:
        for stmt in lo.acl:
            m = _LO_STMT.match(stmt)
            if m is not None:
                assert int(m.group(1)) == lo.oid, (lo.oid, stmt)
        assert bool(lo.acl) == bool(_lomacl_items(*acl_corpus.lomacl[lo.oid])), lo.oid
    with open_archive(b.path) as a:  # the TOC-only path gives the same commands
        toc_only = {row[0]: row[2] for row in los.iter_rows(a, with_sizes=False)}
    assert toc_only == {lo.oid: lo.acl for lo in found}


@pytest.mark.parametrize("name", _NAMES)
def test_grants_equal_lomacl(acl_corpus: AclCorpus, name: str) -> None:
    for lo in _all_los(acl_corpus.archives[name].path):
        owner, text = acl_corpus.lomacl[lo.oid]
        assert lo.owner == owner
        # as sets: a restore re-grants what it revoked from the owner at the end of lomacl
        assert lo.grants is not None, lo.acl
        assert set(lo.grants) == set(_lomacl_items(owner, text)), (lo.oid, lo.acl, text)
        assert len(lo.grants) == len(_lomacl_items(owner, text))


@pytest.mark.parametrize("name", _NAMES)
def test_los_json_grants_equal_lomacl(acl_corpus: AclCorpus, name: str) -> None:
    """`toc los --json` carries each LO's grants, null for default privileges."""
    result = CliRunner().invoke(cli, ["toc", "los", "--json", str(acl_corpus.archives[name].path)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {r["oid"] for r in rows} == set(acl_corpus.lomacl)
    for row in rows:
        owner, text = acl_corpus.lomacl[row["oid"]]
        want = _lomacl_items(owner, text)
        if not row["acl"]:
            assert row["grants"] is None and not want, row
            continue
        got = {
            pg_acl.AclItem(g["grantee"], tuple(g["privileges"]), tuple(g["with_grant_option"]),
                           g["grantor"])
            for g in row["grants"]
        }  # fmt: skip
        assert got == set(want), row


@pytest.mark.parametrize("name", _NAMES)
def test_acl_commands_equal_pg_restore_script(acl_corpus: AclCorpus, name: str) -> None:
    """What pg_restore -f - prints for the LOs' ACLs, per LO and command."""
    b = acl_corpus.archives[name]
    script = subprocess.run(
        [str(b.bin_dir / "pg_restore"), "-f", "-", str(b.path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    want = Counter(
        (int(m.group(1)), line) for line in script.splitlines() if (m := _LO_STMT.match(line))
    )
    got = Counter(
        (lo.oid, stmt) for lo in _all_los(b.path) for stmt in lo.acl if _LO_STMT.match(stmt)
    )
    assert got == want


@pytest.mark.parametrize("name", _NAMES)
def test_grantor_commands_stay_whole(acl_corpus: AclCorpus, name: str) -> None:
    """SET/RESET SESSION AUTHORIZATION around a non-owner grantor's GRANT name no LO:
    pg_restore 17/18 print them with the OID and "(null)" appended; we give them whole."""
    found = {lo.oid: lo for lo in _all_los(acl_corpus.archives[name].path)}
    assert found[5301].acl == (
        "GRANT SELECT ON LARGE OBJECT 5301 TO acl_granter WITH GRANT OPTION;",
        "SET SESSION AUTHORIZATION acl_granter;",
        "GRANT SELECT ON LARGE OBJECT 5301 TO acl_reader;",
        "RESET SESSION AUTHORIZATION;",
    )
    assert acl.grants_json(found[5301].grants) == [
        {"grantee": "acl_owner2", "privileges": ["SELECT", "UPDATE"], "with_grant_option": [],
         "grantor": "acl_owner2"},
        {"grantee": "acl_granter", "privileges": ["SELECT"], "with_grant_option": ["SELECT"],
         "grantor": "acl_owner2"},
        {"grantee": "acl_reader", "privileges": ["SELECT"], "with_grant_option": [],
         "grantor": "acl_granter"},
    ]  # fmt: skip
    assert found[5600].acl == () and acl.grants_json(found[5600].grants) == []
    assert found[5500].acl == ("GRANT UPDATE ON LARGE OBJECT 5500 TO acl_owner2;",)


def test_per_blob_split_as_issue_acl_per_blob() -> None:
    defn = (
        'SET SESSION AUTHORIZATION "a;LARGE OBJECT 9";\n'
        'GRANT SELECT ON LARGE OBJECT 18099 TO "x ""y"";";\n'
        "REVOKE ALL ON LARGE OBJECT 18099 FROM r;\n"
        "RESET SESSION AUTHORIZATION;\ntrailing text without a semicolon"
    )
    t = acl.per_blob(defn)
    assert acl.commands(t, 7) == (
        'SET SESSION AUTHORIZATION "a;LARGE OBJECT 9";',
        'GRANT SELECT ON LARGE OBJECT 7 TO "x ""y"";";',
        "REVOKE ALL ON LARGE OBJECT 7 FROM r;",
        "RESET SESSION AUTHORIZATION;",
    )


def test_grants_replay() -> None:
    stmts = (
        "REVOKE ALL ON LARGE OBJECT 1 FROM o;",
        "GRANT SELECT ON LARGE OBJECT 1 TO o;",
        'GRANT ALL ON LARGE OBJECT 1 TO "Q q" WITH GRANT OPTION;',
        "GRANT SELECT ON LARGE OBJECT 1 TO PUBLIC;",
        "SET SESSION AUTHORIZATION g;",
        "GRANT UPDATE ON LARGE OBJECT 1 TO r;",
        "RESET SESSION AUTHORIZATION;",
    )
    A = pg_acl.AclItem
    assert acl.grants(stmts, "o") == (
        A("o", ("SELECT",), (), "o"),
        A("Q q", ("SELECT", "UPDATE"), ("SELECT", "UPDATE"), "o"),
        A(None, ("SELECT",), (), "o"),
        A("r", ("UPDATE",), (), "g"),
    )
    assert acl.grants((), "o") == ()
    assert acl.grants(("ALTER LARGE OBJECT 1 OWNER TO x;",), "o") is None


@pytest.mark.parametrize("name", _NAMES)
def test_grants_resolved_once_per_group(
    acl_corpus: AclCorpus, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group's commands differ per LO in the OID only: replayed once for the group."""
    monkeypatch.setattr(acl, "_by_shape", {}, raising=False)
    acl.grants.cache_clear()
    found = list(_all_los(acl_corpus.archives[name].path))
    assert all(lo.grants is not None for lo in found)
    with_acl = [lo for lo in found if lo.acl]
    assert len(with_acl) > len({lo.group for lo in with_acl})  # groups of several LOs
    assert acl.grants.cache_info().misses <= len({lo.group for lo in with_acl})


def test_lo_grants_blanks_the_oid_only() -> None:
    """A role named like the statement's object keeps its name in the cache key."""

    def stmts(oid: int) -> tuple[str, ...]:
        return (f'GRANT SELECT ON LARGE OBJECT {oid} TO "LARGE OBJECT {oid} x";',)

    def more(oid: int) -> tuple[str, ...]:
        return (
            'SET SESSION AUTHORIZATION "LARGE OBJECT 5 ";',
            *stmts(oid),
            "RESET SESSION AUTHORIZATION;",
        )

    for oid in (5, 6, 5, 7):
        assert acl.lo_grants(stmts(oid), "o", oid) == acl.grants(stmts(oid), "o")
        assert acl.lo_grants(more(oid), "o", oid) == acl.grants(more(oid), "o")
    first = acl.lo_grants(("GRANT SELECT ON LARGE OBJECT 10 TO r;",), "o", 10)
    assert acl.lo_grants(("GRANT SELECT ON LARGE OBJECT 11 TO r;",), "o", 11) is first
    assert acl.lo_grants(("GRANT SELECT ON LARGE OBJECT 11 TO r;",), "p", 11) is not first
