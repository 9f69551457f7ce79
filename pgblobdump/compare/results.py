"""A results folder: raw records, exact commands and machine facts, to re-render later.

    DIR/results.json   every dump and restore record, the plan, the machine, the tools
    DIR/commands.txt   the exact command lines run, in order, ready for a shell
    DIR/plots/         compare.png/.svg and, with restores, compare-restore.png/.svg (plots.py)
    DIR/report.html    all of it in one self-contained page (html.py)

The JSON carries raw numbers only (bytes, KiB, seconds), so two machines' folders can be
compared, and a folder can be rendered again by ``pgblobdump compare --render DIR``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pgblobdump.compare.matrix import Plan
from pgblobdump.compare.records import DumpRecord, RestoreRecord, records_from_json
from pgblobdump.errors import NotFound, ResultsUnreadable, from_os_error, scrub
from pgblobdump.harness.machine import machine_info
from pgblobdump.report.table import jsonable
from pgblobdump.servers.toolchain import Toolchain

RESULTS_FILE = "results.json"
COMMANDS_FILE = "commands.txt"
FORMAT_VERSION = 1
"""Bumped when results.json changes incompatibly."""


@dataclass
class Results:
    """One compare run as saved. ``meta`` holds the plan, source, tools and machine."""

    dumps: list[DumpRecord]
    restores: list[RestoreRecord]
    commands: list[str]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def via(self) -> str:
        """Where process figures came from: gnu-time, wait4, or both when mixed."""
        kinds = {r.stats.via for r in self.dumps} | {r.stats.via for r in self.restores}
        return "+".join(sorted(kinds)) or "-"


def make_meta(
    plan: Plan,
    source_description: str,
    server_version: str,
    toolchains: Mapping[int, Toolchain],
    gnu_time: Path | None,
    argv: Sequence[str],
    complete: bool,
    settings: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The run's facts; ``settings`` are the source server's (SETTINGS_SHOWN)."""
    return {
        "format_version": FORMAT_VERSION,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "invocation": list(argv),
        "complete": complete,
        "plan": jsonable(plan),
        "source": {
            "description": source_description,
            "server_version": server_version,
            "settings": dict(settings or {}),
        },
        "toolchains": {
            str(m): {"version": tc.version, "bin_dir": str(tc.bin_dir), "source": tc.source}
            for m, tc in toolchains.items()
        },
        "gnu_time": str(gnu_time) if gnu_time else None,
        "machine": machine_info(),
    }


def save(results: Results, folder: Path) -> Path:
    """Write results.json and commands.txt into ``folder`` (created); returns the folder."""
    try:
        return _save(results, folder)
    except OSError as e:
        where = e.filename or folder
        raise from_os_error(e, what=f"cannot save results in {folder}: {where}") from e


def _save(results: Results, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        **results.meta,
        "dumps": jsonable(results.dumps),
        "restores": jsonable(results.restores),
    }
    tmp = folder / (RESULTS_FILE + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    tmp.replace(folder / RESULTS_FILE)  # never leave a half-written results.json
    header = [
        f"# pgblobdump compare, {results.meta.get('created', '')}",
        f"# invoked as: {' '.join(results.meta.get('invocation', []))}",
        "# each measured command, in the order run (archives were removed unless --keep)",
    ]
    with (folder / COMMANDS_FILE).open("w", encoding="utf-8") as f:
        f.write("\n".join([*header, *results.commands]) + "\n")
    return folder


def _reason(e: Exception) -> str:
    """Why a results.json does not parse, in words (not a codec's traceback text)."""
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})"
    if isinstance(e, json.JSONDecodeError):
        return f"not JSON ({e.msg} at line {e.lineno}, column {e.colno})"
    return str(e)


def _read_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def load(folder: Path) -> Results:
    """Read a results folder (or a results.json path) back.

    NotFound when ``folder`` is not a results folder at all (no results.json);
    ResultsUnreadable, naming the file and the field, when its results.json is not what
    compare writes (not JSON, not an object, a field missing or of the wrong type).
    """
    not_results = NotFound(f"{folder} is not a pgblobdump results folder (no {RESULTS_FILE})")
    if folder.is_dir():
        path = folder / RESULTS_FILE
        if not path.is_file():
            raise not_results
    elif folder.is_file():
        path = folder
    else:
        raise NotFound(f"{folder}: no such results folder")
    invalid = f"{path}: {RESULTS_FILE} is not valid"
    try:
        data = _read_json(path)
    except OSError as e:  # the system would not read it (EACCES, EIO): 11, not unreadable JSON
        raise from_os_error(e, "read") from e
    except ValueError as e:
        if path.name != RESULTS_FILE:  # some other file, not a renamed results.json
            raise not_results from e
        raise ResultsUnreadable(f"{invalid}: {_reason(e)}") from e
    if not isinstance(data, dict) or "format_version" not in data:
        if path.name != RESULTS_FILE:
            raise not_results
        if not isinstance(data, dict):
            raise ResultsUnreadable(f"{invalid}: it holds a JSON {_json_kind(data)}, not an object")
        raise ResultsUnreadable(f"{invalid}: no format_version")
    if data["format_version"] != FORMAT_VERSION:
        raise ResultsUnreadable(
            f"{invalid}: format version {data['format_version']!r},"
            f" this pgblobdump reads version {FORMAT_VERSION}"
        )
    dumps, restores = records_from_json(data, str(path))
    commands_path = path.parent / COMMANDS_FILE
    commands: list[str] = []
    if commands_path.is_file():
        with commands_path.open(encoding="utf-8", errors="replace") as f:
            commands = [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#")]
    meta = {k: v for k, v in data.items() if k not in ("dumps", "restores")}
    return Results(dumps, restores, commands, meta)


def _json_kind(value: Any) -> str:
    kinds = {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def argv_now() -> list[str]:
    """How this process was invoked, for the record: any password in it (``-d
    "... password=..."``) masked, as results.json and commands.txt must never hold one."""
    return ["pgblobdump", *(scrub(a) for a in sys.argv[1:])]
