"""Exactly the true orphans go, whatever references the LOs: a Hypothesis test that
spreads LOs over every reference kind (plain, lo, arrays, domains, text and jsonb named
by --references, rows that row-level security hides from everyone but a superuser, a
partition, LOs of a transaction still open) and checks what vacuum leaves."""

from __future__ import annotations

import itertools
import json

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.vacuum import VacuumRequest, vacuum
from tests.vacuum.test_safety import los

KINDS = ("none", "oid", "lo", "oid[]", "lo[]", "doid", "dlos", "text", "jsonb", "rls",
         "partition", "open")  # fmt: skip
_db = itertools.count()

SCHEMA = [
    "CREATE EXTENSION lo",
    "CREATE DOMAIN doid AS oid",
    "CREATE DOMAIN dlos AS lo[]",
    "CREATE TABLE r (a oid, b lo, c oid[], d lo[], e doid, f dlos, t text, j jsonb)",
    "CREATE TABLE hidden (x oid)",
    "ALTER TABLE hidden ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE hidden FORCE ROW LEVEL SECURITY",
    "CREATE POLICY nobody ON hidden USING (false)",
    "CREATE TABLE part (k int, x oid) PARTITION BY LIST (k)",
    "CREATE TABLE part1 PARTITION OF part FOR VALUES IN (1)",
]
COLUMN = {"oid": "a", "lo": "b", "doid": "e"}
ARRAY = {"oid[]": "c", "lo[]": "d", "dlos": "f"}


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(KINDS), min_size=1, max_size=40))
def test_exactly_the_true_orphans_go(pg17: EmbeddedCluster, kinds: list[str]) -> None:
    name = f"prop{next(_db)}"
    with psycopg.connect(pg17.conninfo(), autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {name}")
        c.execute(f"CREATE DATABASE {name}")
    db = pg17.conninfo(name)
    try:
        with psycopg.connect(db, autocommit=True) as c:
            for s in SCHEMA:
                c.execute(s)
            for oid, kind in enumerate(kinds, start=1000):
                if kind == "open":
                    continue
                c.execute("SELECT lo_create(%s)", (oid,))
                if kind in COLUMN:
                    c.execute(f"INSERT INTO r ({COLUMN[kind]}) VALUES (%s)", (oid,))
                elif kind in ARRAY:
                    c.execute(f"INSERT INTO r ({ARRAY[kind]}) VALUES (ARRAY[NULL, %s::oid])",
                              (oid,))  # fmt: skip
                elif kind == "text":
                    c.execute("INSERT INTO r (t) VALUES (%s)", (f"see lo {oid}, page 0",))
                elif kind == "jsonb":
                    c.execute("INSERT INTO r (j) VALUES (%s::jsonb)",
                              (json.dumps({"file": {"lo": str(oid)}}),))  # fmt: skip
                elif kind == "rls":
                    c.execute("INSERT INTO hidden VALUES (%s)", (oid,))
                elif kind == "partition":
                    c.execute("INSERT INTO part VALUES (1, %s)", (oid,))
        opened = [oid for oid, k in enumerate(kinds, start=1000) if k == "open"]
        with psycopg.connect(db) as w:  # LOs of a transaction still open when vacuum runs
            for oid in opened:
                w.execute("SELECT lo_create(%s)", (oid,))
            vacuum(db, VacuumRequest(min_age=0, references=(("r", "t"), ("r", "j"))))
            w.commit()
        referenced = {oid for oid, k in enumerate(kinds, start=1000) if k != "none"}
        assert los(db) == referenced
    finally:
        with psycopg.connect(pg17.conninfo(), autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
