"""``migrate run --unlink`` cut on the wire after N bytes: one Error line, exit 3 or 4;
then the same command through a healthy connection finishes, every row's bytea equal to
the LO it named, and the LOs unlinked. The same for ``--to text`` of a column of CLOB
OIDs mixed with inline text: every row its CLOB's text or its own, only the moved LOs
unlinked."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator

import psycopg
import pytest

from pgblobdump.generate import Content, GenerateSpec, SizeSpec
from pgblobdump.generate import generate as make_los
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.faults.conftest import (
    FAST,
    SLOW,
    cut_points,
    finished,
    kinds,
    one_error_line,
    record,
    run_tool,
    through_proxy,
    uncut_total,
)
from tests.faults.proxy import Kind

TEMPLATE = "wire_mig_tpl"
TEXT_TEMPLATE = "wire_mig_text_tpl"
ROWS = 200
_names = itertools.count()


def _contents(db: str) -> dict[int, bytes | None]:
    """id -> the bytes the row names, whatever the column's type is now."""
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT format_type(atttypid, NULL) FROM pg_attribute"
            " WHERE attrelid = 'docs'::regclass AND attname = 'lo'"
        ).fetchone()
        assert row is not None
        expr = "lo" if row[0] == "bytea" else "CASE WHEN lo IS NULL THEN NULL ELSE lo_get(lo) END"
        rows = conn.execute(f"SELECT id, {expr} FROM docs ORDER BY id").fetchall()
    return {int(i): (bytes(b) if b is not None else None) for i, b in rows}


@pytest.fixture(scope="module")
def template(pg17: EmbeddedCluster) -> Iterator[dict[int, bytes | None]]:
    """A template database with table docs (id, lo oid, ...) of ROWS LOs made by
    generate (two owners, grants, comments); yields each row's bytes."""
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    db = pg17.conninfo(TEMPLATE)
    spec = GenerateSpec(
        count=ROWS, size=SizeSpec.parse("0-40KiB"), content=Content.TEXT, table="docs",
        owners=2, grant_fraction=0.3, comment_fraction=0.2, seed=7,
    )  # fmt: skip
    make_los(db, spec)
    yield _contents(db)
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")


@pytest.fixture(scope="module")
def text_template(
    pg17: EmbeddedCluster, template: dict[int, bytes | None]
) -> Iterator[dict[int, str]]:
    """The template's docs with ``lo`` a text column of the OIDs' digits (Hibernate's
    CLOBs through pgjdbc), every tenth row inline text instead (its LO left an orphan);
    yields each row's text after ``--to text``."""
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEXT_TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEXT_TEMPLATE} TEMPLATE {TEMPLATE}")
    with psycopg.connect(pg17.conninfo(TEXT_TEMPLATE), autocommit=True) as conn:
        conn.execute("ALTER TABLE docs ALTER COLUMN lo TYPE text USING lo::text")
        conn.execute("UPDATE docs SET lo = 'inline ' || id WHERE id % 10 = 1")
        inline = {int(r[0]): str(r[1]) for r in conn.execute(
            "SELECT id, lo FROM docs WHERE id % 10 = 1")}  # fmt: skip
    want = {i: inline.get(i) or (b or b"").decode() for i, b in template.items()}
    assert len(inline) == ROWS // 10
    yield want
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEXT_TEMPLATE} WITH (FORCE)")


@pytest.fixture
def copy_db(pg17: EmbeddedCluster) -> Iterator[Callable[..., str]]:
    """``copy_db(template=TEMPLATE)``: a new database from a template; its dbname.
    Dropped after."""
    made: list[str] = []

    def make(template: str = TEMPLATE) -> str:
        name = f"wire_mig_{next(_names)}"
        with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
        made.append(name)
        return name

    yield make
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        for name in made:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


ARGS = ["migrate", "run", "docs.lo", "--batch-rows", "4", "--unlink", "--json"]
"""Small batches: the fill and verify phases carry more of the run's bytes (the checks
before them are catalog queries, most of a small table's traffic); --unlink: the last
phase, the LOs removed, is cut too."""


def _cut_migrate(
    pg17: EmbeddedCluster,
    template: dict[int, bytes | None],
    copy_db: Callable[..., str],
    n: int,
    k: int,
    kind: Kind,
) -> None:
    total = uncut_total("migrate run", lambda: through_proxy(pg17, copy_db(), ARGS, None))
    at = cut_points(total, n)[k]
    name = copy_db()
    db = pg17.conninfo(name)
    cut = through_proxy(pg17, name, ARGS, at, kind)
    if cut.code == 0:
        ending = finished(cut)
    else:
        line = one_error_line(cut)
        print(f"\nmigrate run cut at {at:,} ({kind}): {line}")
        ending = f"exit {cut.code}"
        code, err, out = run_tool(*ARGS, "-d", db)
        assert code == 0, err
        result = json.loads(out)
        print(f"rerun: {result}")
    assert _contents(db) == template
    with psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT format_type(atttypid, NULL) FROM pg_attribute"
            " WHERE attrelid = 'docs'::regclass AND attname = 'lo'"
        ).fetchone()
        left = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
    assert row is not None and row[0] == "bytea"
    assert left is not None and left[0] == 0  # every LO was the table's: all unlinked
    record("migrate run", cut, ending)


TEXT_ARGS = ["migrate", "run", "docs.lo", "--to", "text", "--batch-rows", "4", "--unlink", "--json"]


@pytest.mark.parametrize(("k", "kind"), kinds(FAST))
def test_migrate_to_text_cut_then_rerun(
    pg17: EmbeddedCluster,
    text_template: dict[int, str],
    copy_db: Callable[..., str],
    k: int,
    kind: Kind,
) -> None:
    total = uncut_total(
        "migrate run --to text",
        lambda: through_proxy(pg17, copy_db(TEXT_TEMPLATE), TEXT_ARGS, None),
    )
    name = copy_db(TEXT_TEMPLATE)
    db = pg17.conninfo(name)
    cut = through_proxy(pg17, name, TEXT_ARGS, cut_points(total, FAST)[k], kind)
    if cut.code == 0:
        ending = finished(cut)
    else:
        one_error_line(cut)
        ending = f"exit {cut.code}"
        code, err, _ = run_tool(*TEXT_ARGS, "-d", db)
        assert code == 0, err
    with psycopg.connect(db) as conn:
        got = {int(r[0]): r[1] for r in conn.execute("SELECT id, lo FROM docs")}
        typ = conn.execute(
            "SELECT format_type(atttypid, NULL) FROM pg_attribute"
            " WHERE attrelid = 'docs'::regclass AND attname = 'lo'"
        ).fetchone()
        left = conn.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()
    assert got == text_template
    assert typ is not None and typ[0] == "text"
    assert left is not None and left[0] == ROWS // 10  # the inline rows' LOs: never moved
    record("migrate run --to text", cut, ending)


@pytest.mark.parametrize(("k", "kind"), kinds(FAST))
def test_migrate_cut_then_rerun(
    pg17: EmbeddedCluster,
    template: dict[int, bytes | None],
    copy_db: Callable[..., str],
    k: int,
    kind: Kind,
) -> None:
    _cut_migrate(pg17, template, copy_db, FAST, k, kind)


@pytest.mark.scale
@pytest.mark.parametrize(("k", "kind"), kinds(SLOW))
def test_migrate_cut_matrix(
    pg17: EmbeddedCluster,
    template: dict[int, bytes | None],
    copy_db: Callable[..., str],
    k: int,
    kind: Kind,
) -> None:
    _cut_migrate(pg17, template, copy_db, SLOW, k, kind)
