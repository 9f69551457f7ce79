"""A table's notes on a terminal wrap at words (the terminal broke them mid-word: "bet" /
"ween"); into a pipe each stays one line, for grep; a note's brackets are text."""

from __future__ import annotations

import io
import re
import sys

import pytest

from pgblobdump.cli import output
from pgblobdump.cli.output import Format, emit
from pgblobdump.report import Column, Table

NOTE = (
    "warm: repeated reads come from the OS page cache and shared_buffers; --cold (as root)"
    " drops them between reads [not measured]"
)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("tty", [True, False])
def test_notes_wrap_at_words_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch, tty: bool) -> None:
    out = _Tty() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(output, "PIPE_WIDTH", 60)
    emit(Table([Column("a")], [{"a": 1}], notes=[NOTE]), Format.TABLE)
    lines = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue()).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("warm:"))
    noted = [line.rstrip() for line in lines[at:]]
    if tty:
        assert all(len(line) <= 60 for line in noted), noted
        assert " ".join(noted) == NOTE  # broken between words only
    else:
        assert noted == [NOTE]
