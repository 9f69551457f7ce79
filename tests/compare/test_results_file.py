"""``compare --render``: a damaged results.json is refused naming the file and the field,
and a reader that goes away (``| head -1``) ends the command quietly with status 0."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pgblobdump.compare import results
from pgblobdump.errors import ResultsUnreadable
from tests.compare.conftest import pgblobdump, run_cli, save_results

Damage = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Damage:
    """Set ``a.0.b`` (dots, list indexes as numbers) in the document to ``value``."""

    def damage(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[int(last) if isinstance(node, list) else last] = value

    return damage


def _drop(path: str) -> Damage:
    def damage(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        del node[last]

    return damage


@pytest.mark.parametrize(
    ("damage", "field", "problem"),
    [
        (_set("dumps.0.stats.wall_s", "fast"), "dumps[0].stats.wall_s", "'fast', not a number"),
        (_set("dumps.1.contender.major", "x"), "dumps[1].contender.major",
         "'x', not a whole number"),
        (_drop("dumps.2.count"), "dumps[2].count", "is missing"),
        (_drop("restores.0.stats"), "restores[0].stats", "is missing"),
        (_set("restores.0.ok", "yes"), "restores[0].ok", "'yes', not true or false"),
        (_set("dumps.0.archive.files", -3), "dumps[0].archive.files", "-3, a negative number"),
        (_set("dumps.0.stats.max_rss_kb", 1.5), "dumps[0].stats.max_rss_kb",
         "1.5, not a whole number"),
        (_set("dumps.0.entries.BLOB", None), "dumps[0].entries.BLOB", "None, not a whole"),
        (_set("dumps.3.contender.format", "tar"), "dumps[3].contender.format",
         "'tar', not one of custom, directory"),
        (_set("dumps.0.stats.argv", "pg_dump"), "dumps[0].stats.argv", "not a list"),
        (_set("dumps.0", 7), "dumps[0]", "7, not an object"),
        (_set("dumps", {}), "dumps", "{}, not a list"),
        (_set("complete", "no"), "complete", "'no', not true or false"),
        (_set("machine", "here"), "machine", "'here', not an object"),
    ],
)  # fmt: skip
def test_a_field_of_the_wrong_type_is_named(
    results_folder: Path, damage: Damage, field: str, problem: str
) -> None:
    path = results_folder / results.RESULTS_FILE
    doc = json.loads(path.read_text())
    damage(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsUnreadable) as caught:
        results.load(results_folder)
    assert str(caught.value).startswith(f"{path}: field {field} ")
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json at all", "results.json is not valid: not JSON (Expecting value at line 1"),
        ("[1, 2]", "results.json is not valid: it holds a JSON list, not an object"),
        ('"a string"', "results.json is not valid: it holds a JSON string, not an object"),
        ('{"dumps": []}', "results.json is not valid: no format_version"),
        ('{"format_version": 99}', "format version 99, this pgblobdump reads version 1"),
    ],
)
def test_what_is_not_a_results_document_is_unreadable(
    results_folder: Path, text: str, problem: str
) -> None:
    path = results_folder / results.RESULTS_FILE
    path.write_text(text)
    with pytest.raises(ResultsUnreadable) as caught:
        results.load(results_folder)
    assert str(caught.value).startswith(f"{path}: ")
    assert problem in str(caught.value)


def test_render_and_against_exit_7_with_one_line(results_folder: Path, tmp_path: Path) -> None:
    """Through the command: status 7 (unreadable, like an archive), not 8 (not found) and
    not a TypeError from deep inside a report."""
    bad = tmp_path / "bad"
    path = save_results(bad)
    doc = json.loads(path.read_text())
    doc["dumps"][0]["stats"]["wall_s"] = "fast"
    path.write_text(json.dumps(doc))
    for args in (["--render", str(bad)], ["--render", str(results_folder), "--against", str(bad)]):
        done = run_cli("compare", *args, "--csv")
        assert done.returncode == 7, done.stderr
        assert done.stdout == ""
        assert done.stderr == (
            f"Error: {path}: field dumps[0].stats.wall_s is 'fast', not a number\n"
        )


@pytest.mark.parametrize("fmt", [[], ["--csv"], ["--json"], ["--markdown"]])
def test_render_into_a_closed_pipe_exits_0(results_folder: Path, fmt: list[str]) -> None:
    """The reader is gone before anything is written: every write fails with EPIPE."""
    with subprocess.Popen(
        pgblobdump("compare", "--render", str(results_folder), *fmt),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        proc.stdout.close()
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert err == ""


def test_render_piped_to_head_exits_0(tmp_path: Path) -> None:
    """``compare --render DIR | head -1`` with a real head: it reads the first line and
    exits while the table is still being written."""
    save_results(tmp_path / "many", counts=300)  # CSV of 1,200 runs: more than a pipe holds
    with (
        subprocess.Popen(
            pgblobdump("compare", "--render", str(tmp_path / "many"), "--csv"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        ) as writer,
        subprocess.Popen(["head", "-1"], stdin=writer.stdout, stdout=subprocess.PIPE) as head,
    ):
        assert writer.stdout is not None and writer.stderr is not None
        writer.stdout.close()  # head holds the only reading end now
        first, _ = head.communicate(timeout=60)
        err = writer.stderr.read()
        writer.wait(timeout=60)
    assert first.decode().startswith("phase,los,contender")
    assert writer.returncode == 0, err
    assert err == b""
