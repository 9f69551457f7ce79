"""Every command that takes --json prints one JSON document on stdout in a normal run,
including when nothing differs or nothing is listed, and every --csv at least its header
line; the commands are read from the click tree, so a new one fails here until it has a
recipe below."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import psycopg
import pytest

from pgblobdump.cli import cli
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import run
from tests.conftest import NewDb

CORPUS = Path(__file__).parents[1] / "corpus" / "archives"
PG_DUMP_ARCHIVE = CORPUS / "pg17-custom-none.dump"
"""A small real pg_dump archive (LOs 1001.., a table) from the repository's corpus."""


def commands_with(option: str) -> list[str]:
    """Every leaf command of the click tree (space-separated path) that has ``option``."""
    found: list[str] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name])
        elif any(option in getattr(p, "opts", ()) for p in cmd.params):
            found.append(" ".join(path))

    walk(cli, [])
    return found


@dataclass
class Scene:
    """What the recipes run against: a database with a few LOs and a referencing table,
    a packed archive of it and an incremental one on top, a fresh database maker."""

    cluster: EmbeddedCluster
    db: str
    archive: Path
    incremental: Path
    tmp: Path
    new_db: Callable[[], str]

    def out(self, name: str) -> str:
        return str(self.tmp / name)


def _table_db(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CREATE TABLE files (id int PRIMARY KEY, data oid)")
        conn.execute(
            "INSERT INTO files SELECT g, lo_from_bytea(0, convert_to(repeat('x', g * 100),"
            " 'UTF8')) FROM generate_series(1, 5) g"
        )


Recipe = Callable[[Scene], list[list[str]]]

RECIPES: dict[str, Recipe] = {
    "bench read": lambda s: [["-d", s.db, "--sizes", "64KiB", "--repeat", "1"]],
    "bench toast": lambda s: [["-d", s.db, "--lengths", "100", "--rows", "10"]],
    "compare": lambda s: [["-d", s.db, "--majors", "17", "--formats", "custom",
                           "--contenders", "pg_dump", "--no-restore"]],
    "copy": lambda s: [["-d", s.db, "--target-dbname", s.new_db()]],
    "doctor": lambda s: [[]],
    "dump": lambda s: [["-d", s.db, "-o", s.out("dumped")]],
    "export": lambda s: [["-d", s.db, "-o", s.out("exported")]],
    "generate": lambda s: [["-d", s.new_db(), "-n", "3", "--size", "10"]],
    "inspect": lambda s: [["-d", s.db]],
    "ls": lambda s: [[str(s.archive)], [str(s.archive), "--oids", "1-2"]],
    "merge": lambda s: [[str(s.incremental), "-o", s.out("merged")]],
    "migrate plan": lambda s: [["-d", s.db]],
    "migrate run": lambda s: [["-d", _migratable(s), "files.data"]],
    "migrate status": lambda s: [["-d", s.db]],
    "pack": lambda s: [[str(PG_DUMP_ARCHIVE), "-o", s.out("packed")]],
    "restore": lambda s: [[str(s.archive), "-d", s.new_db()]],
    "server status": lambda s: [[]],
    "sync": lambda s: [["-d", s.db, "--target-dbname", (dst := s.new_db())],
                       ["-d", s.db, "--target-dbname", dst, "--dry-run"]],  # nothing to do
    "toc diff": lambda s: [[str(PG_DUMP_ARCHIVE), str(PG_DUMP_ARCHIVE)]],
    "toc los": lambda s: [[str(PG_DUMP_ARCHIVE)]],
    "toc show": lambda s: [[str(PG_DUMP_ARCHIVE)]],
    "toc summary": lambda s: [[str(PG_DUMP_ARCHIVE)]],
    "unpack": lambda s: [[str(s.archive), "-o", s.out("unpacked")]],
    "vacuum": lambda s: [["-d", s.db, "--dry-run"], ["-d", s.new_db()]],
    "verify": lambda s: [[str(s.archive)], [str(s.archive), "-d", s.db]],  # -d: equal
}  # fmt: skip
"""For each command with --json, the arguments of one or more normal runs (exit 0)."""


def _migratable(s: Scene) -> str:
    db = s.new_db()
    _table_db(db)
    return db


@pytest.fixture(scope="module")
def source(pg17: EmbeddedCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    name = "json_everywhere"
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    db = pg17.conninfo(name)
    _table_db(db)
    yield db
    with psycopg.connect(pg17.conninfo(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="module")
def archives(source: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("json-archives")
    full, inc = where / "full.pbd", where / "inc.pbd"
    assert run("dump", "-d", source, "-o", str(full)).exit_code == 0
    with psycopg.connect(source, autocommit=True) as conn:
        conn.execute("SELECT lo_from_bytea(0, 'one more')")
    done = run("dump", "-d", source, "-o", str(inc), "--since", str(full))
    assert done.exit_code == 0, done.stderr
    with psycopg.connect(source, autocommit=True) as conn:  # the database equals full.pbd again
        conn.execute("SELECT lo_unlink(max(oid)) FROM pg_largeobject_metadata")
    return full, inc


@pytest.fixture
def scene(
    pg17: EmbeddedCluster,
    source: str,
    archives: tuple[Path, Path],
    new_db: NewDb,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Scene:
    monkeypatch.setenv("PGBLOBDUMP_HOME", str(tmp_path / "home"))  # server status: none
    return Scene(pg17, source, *archives, tmp_path, lambda: new_db(pg17))


JSON_COMMANDS = commands_with("--json")


def test_the_walk_finds_the_commands() -> None:
    assert {"verify", "ls", "toc los", "migrate status", "bench read"} <= set(JSON_COMMANDS)
    assert "cat" not in JSON_COMMANDS


@pytest.mark.parametrize("command", JSON_COMMANDS)
def test_json_is_one_document_on_stdout(command: str, scene: Scene) -> None:
    recipe = RECIPES.get(command)
    assert recipe is not None, f"{command} takes --json: give it a recipe in RECIPES"
    for args in recipe(scene):
        result = run(*command.split(), *args, "--json")
        assert result.exit_code == 0, (args, result.stdout, result.stderr)
        assert result.stdout.strip(), f"{command} {args} --json printed nothing on stdout"
        json.loads(result.stdout)


CSV_COMMANDS = commands_with("--csv")


@pytest.mark.parametrize("command", CSV_COMMANDS)
def test_csv_has_its_header_line_at_least(command: str, scene: Scene) -> None:
    recipe = RECIPES.get(command)
    assert recipe is not None, f"{command} takes --csv: give it a recipe in RECIPES"
    for args in recipe(scene):
        result = run(*command.split(), *args, "--csv")
        assert result.exit_code == 0, (args, result.stdout, result.stderr)
        rows = list(csv.reader(io.StringIO(result.stdout)))
        assert rows and all(rows[0]), f"{command} {args} --csv printed no header: {rows}"
        assert all(len(r) == len(rows[0]) for r in rows), rows
