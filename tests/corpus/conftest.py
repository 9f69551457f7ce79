"""The checked-in corpus (tests/corpus/archives, made by make_corpus.py): no server needed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ARCHIVES = Path(__file__).resolve().parent / "archives"
INDEX: dict[str, Any] = json.loads((ARCHIVES.parent / "index.json").read_text())
NAMES: list[str] = INDEX["archives"]


@dataclass(frozen=True)
class Expected:
    """One corpus archive and what make_corpus.py recorded about it."""

    path: Path
    record: dict[str, Any]

    @property
    def major(self) -> int:
        return int(self.record["major"])

    @property
    def fmt(self) -> str:
        return str(self.record["format"])

    @property
    def compression(self) -> str:
        return str(self.record["compression"])

    @property
    def listing(self) -> str:
        """``pg_restore -l`` of this archive by the same major's pg_restore."""
        return str(self.record["pg_restore_list"])

    @property
    def los(self) -> dict[int, dict[str, Any]]:
        return {int(lo["oid"]): lo for lo in self.record["los"]}


def expected(name: str) -> Expected:
    record = json.loads((ARCHIVES / f"{name}.json").read_text())
    return Expected(ARCHIVES / record["path"], record)
