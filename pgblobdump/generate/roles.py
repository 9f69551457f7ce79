"""The roles generate spreads LOs over (owners) and grants to (reader, writer)."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgblobdump.generate.spec import GenerateSpec

OWNER_ROLE_PREFIX = "pgbd_owner_"
READER_ROLE = "pgbd_reader"
WRITER_ROLE = "pgbd_writer"


def owner_names(spec: GenerateSpec) -> tuple[str, ...]:
    return tuple(f"{OWNER_ROLE_PREFIX}{i}" for i in range(1, spec.owners + 1))


def ensure_roles(conn: psycopg.Connection, spec: GenerateSpec, created: list[str]) -> None:
    """Create the NOLOGIN roles the spec needs that do not exist, adding each to
    ``created`` as it is made. Run it in one transaction: a failure part-way (a role that
    may not be granted) then leaves none of them.

    Roles are cluster-wide and own the LOs made under them, so they stay after a
    successful run; a failed run drops the ones it created (the ledger's clean-up).
    """
    wanted = list(owner_names(spec))
    if spec.grant_fraction:
        wanted += [READER_ROLE, WRITER_ROLE]
    for name in wanted:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
            created.append(name)
    row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if not (row and row[0]):
        # A non-superuser may SET ROLE only to roles it is a member of.
        for name in owner_names(spec):
            conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(name)))
