"""Progress with a known end: the figures (total, rate, ETA) rendered to a fake terminal
and as plain lines on a fake clock; which display a run gets (-q, --progress, a tty)."""

from __future__ import annotations

import io
import re
import sys

import pytest
from rich.console import Console

from pgblobdump.cli import progress
from pgblobdump.cli.progress import Figures, Mode, describe, mode, reporter
from pgblobdump.cli.verbosity import Settings

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=200, color_system="standard"), out


def _drawn(out: io.StringIO) -> str:
    """The last frame the bar drew, escape codes removed."""
    progress._LIVE[-1].bar.refresh()  # type: ignore[union-attr]
    frames = [line for line in ANSI.sub("", out.getvalue()).splitlines() if line.strip()]
    return frames[-1]


def test_the_bar_shows_total_rate_and_eta_on_a_terminal() -> None:
    console, out = _terminal()
    clock = Clock()
    with reporter("restoring LOs", 0, console=console, display=Mode.BARS, now=clock) as rep:
        rep.totals(20_000, 20_480_000)
        clock.t += 2.0
        rep.progress(5_000, 5_120_000)
        line = _drawn(out)
    assert line.startswith("restoring LOs"), line
    assert "5,000/20,000 LOs (25%)" in line, line
    assert "4.9 MiB/19.5 MiB" in line, line
    assert "2,500 LOs/s, 2.4 MiB/s" in line, line
    assert "0:00:02 elapsed" in line, line
    assert "ETA 0:00:06" in line, line  # a quarter done in 2 s: 6 s to go


def test_the_bar_fills_as_far_as_its_percentage() -> None:
    """LOs and bytes alike: 90% of the LOs but 10% of the bytes is half done, and the
    bar said 90% (filled by LOs alone) beside "(50%)"."""
    console, out = _terminal()
    clock = Clock()
    with reporter("restoring LOs", 0, console=console, display=Mode.BARS, now=clock) as rep:
        rep.totals(1_000, 1_000_000)
        clock.t += 1.0
        rep.progress(900, 100_000)
        line = _drawn(out)
        bar = progress._LIVE[-1].bar
        assert bar is not None
        assert bar.tasks[0].percentage == pytest.approx(50.0), bar.tasks[0].percentage
    assert "900/1,000 LOs (50%)" in line, line
    assert "━━━━━━━━━━╺━━━━━━━━━" in line, line  # 10 of 20 cells


def test_an_unknown_total_is_never_drawn_as_zero() -> None:
    """The bug this replaces: ``20000/0`` and an ETA of nothing."""
    console, out = _terminal()
    clock = Clock()
    with reporter("restoring LOs", 0, console=console, display=Mode.BARS, now=clock) as rep:
        clock.t += 4.0
        rep.progress(20_000, 0)
        line = _drawn(out)
    assert "20,000 LOs," in line and "/0" not in line, line
    # no total, so no bar to fill (rich drew a full-width pulsing one) and no ETA
    assert "5,000 LOs/s" in line and "ETA" not in line, line
    assert "━" not in line and "╸" not in line, line


def test_a_stream_restore_shows_count_bytes_and_rate_only() -> None:
    """``restore -``: neither count nor bytes known ahead; the bar and the plain line say
    what is done and how fast, nothing about an end."""
    console, out = _terminal()
    clock = Clock()
    with reporter("restoring LOs", 0, console=console, display=Mode.BARS, now=clock) as rep:
        clock.t += 2.0
        rep.progress(3_000, 3 * 2**20)
        line = _drawn(out)
    assert line == "restoring LOs  3,000 LOs, 1,500 LOs/s, 1.5 MiB/s, 3.0 MiB, 0:00:02 elapsed", (
        line
    )
    assert describe(Figures(3_000, 0, 3 * 2**20, 0, 2.0)) == (
        "3,000 LOs, 3.0 MiB, 1,500 LOs/s, 1.5 MiB/s, 0:00:02 elapsed"
    )


def test_a_dump_knows_its_count_not_its_bytes() -> None:
    """dump counts its LOs under its snapshot (one catalog count) but their bytes only a
    read of every page would tell: the bar fills by LOs, the bytes done have no total."""
    console, out = _terminal()
    clock = Clock()
    with reporter("dumping LOs", 0, console=console, display=Mode.BARS, now=clock) as rep:
        rep.totals(20_000, 0)
        clock.t += 2.0
        rep.progress(5_000, 5 * 2**20)
        line = _drawn(out)
    assert "━" in line and "5,000/20,000 LOs (25%), ETA 0:00:06" in line, line
    assert ", 5.0 MiB, " in line and "MiB/" not in line.replace("MiB/s", ""), line


def test_a_new_phase_starts_its_own_figures() -> None:
    console, out = _terminal()
    clock = Clock()
    with reporter("filling", 10, console=console, display=Mode.BARS, now=clock) as rep:
        clock.t += 1
        rep.progress(10, 0)
        rep.task("verifying", 40)
        clock.t += 1
        rep.progress(10, 0)
        line = _drawn(out)
    assert line.startswith("verifying") and "10/40 LOs (25%)" in line, line
    assert "ETA 0:00:03" in line, line


def test_plain_lines_at_most_every_interval_then_one_at_the_end() -> None:
    console, out = _terminal()
    clock = Clock()
    with reporter("dumping LOs", 0, console=console, display=Mode.LINES, now=clock,
                  interval=10.0) as rep:  # fmt: skip
        rep.totals(1_000, 0)
        for t, done in ((1, 100), (5, 200), (9.9, 300), (10, 400), (15, 500), (20.5, 600)):
            clock.t = 100.0 + t
            rep.progress(done, done * 10)
        clock.t = 100.0 + 21
        rep.progress(1_000, 10_000)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines  # at 10 s, at 20.5 s, and the end
    assert lines[0].startswith("dumping LOs: 400/1,000 LOs (40%)"), lines[0]
    assert "40 LOs/s" in lines[0] and "ETA 0:00:15" in lines[0], lines[0]
    assert lines[1].startswith("dumping LOs: 600/1,000 LOs (60%)"), lines[1]
    assert lines[2].startswith("dumping LOs: 1,000/1,000 LOs (100%)"), lines[2]
    assert "\x1b" not in out.getvalue()  # plain text for logs


def test_nothing_at_all_when_off() -> None:
    console, out = _terminal()
    with reporter("dumping LOs", 10, console=console, display=Mode.OFF) as rep:
        rep.totals(10, 100)
        rep.progress(10, 100)
    assert out.getvalue() == ""
    assert not rep.shown


def test_which_display() -> None:
    assert mode(Settings(), tty=True) is Mode.BARS
    assert mode(Settings(), tty=False) is Mode.OFF  # no bars in a pipe or a log
    assert mode(Settings(progress=True), tty=False) is Mode.LINES
    assert mode(Settings(quiet=True, progress=True), tty=True) is Mode.OFF


def test_figures() -> None:
    f = Figures(done=50, total=100, bytes=900, bytes_total=1000, elapsed=7.0)
    assert f.fraction == (0.5 + 0.9) / 2  # time goes to LOs and to bytes
    assert f.eta == pytest.approx(3.0)
    assert Figures(0, 100, 0, 0, 3.0).eta is None  # nothing done yet: no guess
    assert describe(Figures(3, 0, 2048, 0, 0.0)) == "3 LOs, 2.0 KiB, 0:00:00 elapsed"
    assert describe(Figures(0, 0, 0, 0, 4.0, "tables")) == "0:00:04 elapsed"  # a server starts
    assert describe(Figures(0, 16, 0, 0, 5.0, "runs")) == (
        "0/16 runs (0%), 0:00:05 elapsed, ETA -:--:--"  # a total: its ETA is to come
    )
    assert describe(Figures(0, 3, 0, 0, 0.0)).endswith("ETA -:--:--")  # a total, no rate yet


def test_slow_rates_are_not_rounded_to_zero() -> None:
    """compare finishes a run every few seconds: ``0 runs/s`` was its rate."""
    assert describe(Figures(3, 16, 0, 0, 10.0, "runs")) == (
        "3/16 runs (19%), 3.3 s/run, 0:00:10 elapsed, ETA 0:00:43"
    )
    assert progress.rate(Figures(5, 0, 0, 0, 2.0, "runs")) == "2.5 runs/s"
    assert progress.rate(Figures(25, 27, 0, 0, 2.0, "measurements")) == "12 measurements/s"


def test_a_narrow_terminal_cuts_the_line_and_keeps_the_eta() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=80, color_system="standard")
    clock = Clock()
    with reporter("restoring LOs", 0, console=console, display=Mode.BARS, now=clock) as rep:
        rep.totals(20_000, 20_480_000)
        clock.t += 2.0
        rep.progress(5_000, 5_120_000)
        line = _drawn(out)
    assert len(line) <= 80 and line.endswith("…"), line  # one line, not wrapped
    assert "5,000/20,000 LOs (25%), ETA 0:00:06, " in line, line


def test_rows_and_no_bytes() -> None:
    """migrate counts rows, and a count with no bytes says nothing of bytes."""
    console, out = _terminal()
    clock = Clock()
    with reporter("migrating", 0, unit="rows", console=console, display=Mode.LINES,
                  now=clock) as rep:  # fmt: skip
        rep.task("filling", 1_000)
        clock.t += 4
        rep.progress(400, 0)
    assert out.getvalue().splitlines() == [
        "filling: 400/1,000 rows (40%), 100 rows/s, 0:00:04 elapsed, ETA 0:00:06"
    ]


NOTE = (
    "started cluster bench (PostgreSQL 17) on port 54321 with shared_buffers 128MB and"
    " up to 1GB of WAL (--max-wal-size); stop it with: pgblobdump server stop --name bench"
)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("width", [100, 200])
@pytest.mark.parametrize("tty", [True, False])
def test_a_note_wraps_at_words_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch, tty: bool, width: int
) -> None:
    """``note`` (and -v's log lines, through ``emit_line``): on a terminal broken between
    words, within its width (the terminal broke them mid-word); into a pipe one line."""
    err = _Tty() if tty else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("COLUMNS", str(width))
    long_note = f"{NOTE}; {NOTE}"
    progress.note(long_note)
    lines = ANSI.sub("", err.getvalue()).splitlines()
    if tty:
        assert all(len(line) <= width for line in lines), lines
        assert " ".join(line.rstrip() for line in lines) == long_note
        assert len(lines) > 1, lines  # 334 characters: wrapped at 100 and at 200
    else:
        assert lines == [long_note]


@pytest.mark.parametrize("width", [100, 200])
def test_a_runs_note_wraps_at_words_above_its_bar(width: int) -> None:
    """A note through the run's Reporter, as compare's per-run lines: the same rule."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=width, color_system="standard")
    with reporter("measuring", 3, console=console, display=Mode.BARS, now=Clock()) as rep:
        rep.note(f"{NOTE}; {NOTE}")
    lines = [line.rstrip() for line in ANSI.sub("", out.getvalue()).splitlines()]
    lines = [line for line in lines if line and not line.startswith("measuring")]
    assert len(lines) > 1 and all(len(line) <= width for line in lines), lines
    assert " ".join(lines) == f"{NOTE}; {NOTE}"
