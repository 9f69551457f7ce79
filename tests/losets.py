"""Random LO sets in a real database: owners, ACLs by the owner and by another grantor,
comments, empty, small, megabyte-sized LOs and OIDs past 2^31; and the state to compare."""

from __future__ import annotations

import os

import psycopg
from hypothesis import strategies as st

from pgblobdump.servers.cluster import EmbeddedCluster

ROLES = ("pgbd_t_owner", "pgbd_t_reader", "pgbd_t_granter")
State = dict[int, tuple[bytes, str, list[str] | None, str | None]]


def roles(*clusters: EmbeddedCluster) -> None:
    for c in clusters:
        with psycopg.connect(c.conninfo(), autocommit=True) as conn:
            for r in ROLES:
                if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (r,)).fetchone():
                    conn.execute(f"CREATE ROLE {r}")


def state(db: str) -> State:
    """Every LO with bytes, owner, ACL and comment."""
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT m.oid::int8, lo_get(m.oid), pg_get_userbyid(m.lomowner), m.lomacl::text[],"
            " obj_description(m.oid, 'pg_largeobject') FROM pg_largeobject_metadata m"
            " ORDER BY 1"
        ).fetchall()
    return {int(o): (bytes(d), w, a, c) for o, d, w, a, c in rows}


def fill(db: str, los: dict[int, tuple[int, int, int, bool]]) -> None:
    """LOs: oid -> (size, owner index, acl kind, comment?). ACL kinds: 0 none, 1 a grant
    by the owner, 2 a grant with grant option and one by the grantee (another grantor)."""
    with psycopg.connect(db, autocommit=True) as conn:
        for oid, (size, owner, acl, comment) in los.items():
            role = ROLES[owner]
            data = os.urandom(size) if size < 100_000 else bytes([oid % 256]) * size
            with conn.transaction():
                conn.execute(f"SET LOCAL ROLE {role}")
                conn.execute("SELECT lo_from_bytea(%s::int8::oid, %s)", (oid, data))
                if acl >= 1:
                    conn.execute(f"GRANT SELECT ON LARGE OBJECT {oid} TO pgbd_t_reader")
                if acl == 2 and role != "pgbd_t_granter":
                    conn.execute(
                        f"GRANT SELECT, UPDATE ON LARGE OBJECT {oid} TO pgbd_t_granter"
                        " WITH GRANT OPTION"
                    )
                    conn.execute("SET LOCAL ROLE pgbd_t_granter")
                    conn.execute(f"GRANT UPDATE ON LARGE OBJECT {oid} TO PUBLIC")
                conn.execute("RESET ROLE")
                if comment:
                    conn.execute(f"COMMENT ON LARGE OBJECT {oid} IS 'c''{oid}'")


lo_specs = st.dictionaries(
    st.one_of(st.integers(16_384, 100_000), st.integers(2**31, 2**32 - 1)),
    st.tuples(
        st.one_of(st.just(0), st.integers(1, 3000), st.integers(1 << 20, 3 << 20)),
        st.integers(0, 2),
        st.integers(0, 2),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)
