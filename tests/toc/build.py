"""Build real pg_dump archives of one small database, once per test session.

The database holds what the LO views must get right: LOs of several owners (interleaved,
so PostgreSQL 17's per-owner groups have overlapping tag ranges), GRANTs, comments (one
with a newline), empty and large LOs, OIDs at and above 2^31, and a table with data.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import psycopg

from pgblobdump.servers import toolchain

ROLES = ("lo_alice", "lo_bob")

SETUP_SQL = """
DO $$BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'lo_alice') THEN CREATE ROLE lo_alice; END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'lo_bob') THEN CREATE ROLE lo_bob; END IF;
END$$;
CREATE TABLE items (id int PRIMARY KEY, name text);
INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 100) g;
SELECT lo_from_bytea(1001, ''::bytea);
SELECT lo_from_bytea(1002, 'hello'::bytea);
SELECT lo_from_bytea(1003, decode(repeat('ab', 50000), 'hex'));
SELECT lo_from_bytea(2147483648, 'at 2^31'::bytea);
SELECT lo_from_bytea(3000000000, 'big oid'::bytea);
SELECT lo_from_bytea(g, convert_to('lo ' || g, 'UTF8')) FROM generate_series(2000, 2009) g;
ALTER LARGE OBJECT 1002 OWNER TO lo_alice;
ALTER LARGE OBJECT 3000000000 OWNER TO lo_bob;
GRANT SELECT ON LARGE OBJECT 1003 TO lo_bob;
GRANT SELECT, UPDATE ON LARGE OBJECT 3000000000 TO lo_alice;
COMMENT ON LARGE OBJECT 1002 IS 'greeting';
COMMENT ON LARGE OBJECT 3000000000 IS 'a comment
over two lines';
"""


def populate(conninfo: str) -> None:
    """Create the roles, table and LOs described in the module docstring."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(SETUP_SQL)
        # Incompressible bytes bigger than pg_dump's 16 KiB read buffer: several chunks.
        conn.execute("SELECT lo_from_bytea(1004, %s)", (os.urandom(70_000),))
        for g in range(2000, 2010):
            conn.execute(f"ALTER LARGE OBJECT {g} OWNER TO {ROLES[g % 2]}")


def source_los(conninfo: str) -> dict[int, bytes]:
    """Every LO's bytes as the server returns them (``lo_get``)."""
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute(
            "SELECT oid::bigint, lo_get(oid) FROM pg_largeobject_metadata ORDER BY oid"
        ).fetchall()
    return {int(oid): bytes(data) for oid, data in rows}


def source_metadata(conninfo: str) -> dict[int, tuple[str, str | None, str | None]]:
    """Every LO's (owner, ACL text or None, comment or None)."""
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute(
            "SELECT m.oid::bigint, pg_get_userbyid(m.lomowner), m.lomacl::text,"
            " obj_description(m.oid, 'pg_largeobject')"
            " FROM pg_largeobject_metadata m ORDER BY m.oid"
        ).fetchall()
    return {int(r[0]): (r[1], r[2], r[3]) for r in rows}


@dataclass(frozen=True)
class Built:
    """One archive made by a real pg_dump; ``piped`` means written to stdout."""

    major: int
    fmt: str  # "custom" or "directory"
    compression: str  # "none", "gzip", "lz4", "zstd"
    path: Path
    piped: bool
    bin_dir: Path

    @property
    def name(self) -> str:
        return f"pg{self.major}-{self.fmt}-{self.compression}" + ("-piped" if self.piped else "")

    @property
    def version(self) -> str:
        """The archive version this pg_dump writes."""
        return {15: "1.14-0", 16: "1.15-0"}.get(self.major, "1.16-0")

    def pg_restore_list(self) -> str:
        """``pg_restore -l`` of this archive by the same major's pg_restore."""
        out = subprocess.run(
            [str(self.bin_dir / "pg_restore"), "-l", str(self.path)],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout


def compression_flag(major: int, compression: str) -> list[str]:
    if compression == "none":
        return ["-Z", "0"]
    if compression == "gzip":
        return ["-Z", "6"]
    return ["-Z", compression]


PLAN: tuple[tuple[int, str, str, bool], ...] = (
    # (major, format, compression, piped); lz4 and zstd only from 17's pg_dump.
    (16, "custom", "none", False),
    (16, "custom", "gzip", False),
    (16, "custom", "gzip", True),
    (16, "directory", "none", False),
    (16, "directory", "gzip", False),
    (17, "custom", "none", False),
    (17, "custom", "gzip", False),
    (17, "custom", "lz4", False),
    (17, "custom", "zstd", False),
    (17, "custom", "zstd", True),
    (17, "directory", "none", False),
    (17, "directory", "gzip", False),
    (17, "directory", "lz4", False),
    (17, "directory", "zstd", False),
    (18, "custom", "none", False),
    (18, "custom", "gzip", False),
    (18, "custom", "gzip", True),
    (18, "directory", "gzip", False),
)
"""Archives dumped from the PostgreSQL 16 source database."""

PLAN_15: tuple[tuple[int, str, str, bool], ...] = (
    (15, "custom", "gzip", False),
    (15, "custom", "none", True),
    (15, "directory", "gzip", False),
)
"""Archives dumped by Debian's pg_dump 15 from a PostgreSQL 15 server (archive 1.14)."""


def dump(
    conninfo: str, out_dir: Path, major: int, fmt: str, compression: str, piped: bool
) -> Built:
    """Run pg_dump ``major`` once and return what it wrote."""
    tc = toolchain.find(major)
    pg_dump = str(tc.tool("pg_dump"))
    suffix = {"directory": "", "tar": ".tar"}.get(fmt, ".dump")
    name = f"pg{major}-{fmt}-{compression}{'-piped' if piped else ''}{suffix}"
    path = out_dir / name
    zflag = [] if fmt == "tar" else compression_flag(major, compression)
    args = [pg_dump, "-F", fmt[0], *zflag, "-d", conninfo]
    if piped:
        with path.open("wb") as f:
            subprocess.run(args, stdout=f, check=True)
    else:
        subprocess.run([*args, "-f", str(path)], check=True)
    return Built(major, fmt, compression, path, piped, tc.bin_dir)


class Chunk(NamedTuple):
    """One stored chunk of an LO in a custom archive, and the file offset of its bytes."""

    data: bytes
    offset: int


def stored_chunks(path: Path, oid: int) -> list[Chunk]:
    """Where LO ``oid``'s stored chunks are in the custom archive at ``path``."""
    from pgblobdump.toc.lo import blockwalk, custom
    from pgblobdump.toc.reader import open_archive

    with open_archive(path) as a:
        for r, blobs_id, limit in custom.blocks(a, None):
            for found, size, stored in blockwalk.walk_data(r, blobs_id, limit):
                if found == oid:
                    if stored is not None:  # one buffered chunk: 4 + 1 bytes before it
                        return [Chunk(stored, r.offset - size - 5)] if size else []
                    return [Chunk(*c) for c in blockwalk.read_chunks(r, "test")]
    raise AssertionError(f"no large object {oid} in {path}")
