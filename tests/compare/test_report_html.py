"""Plots of dumps and restores, and report.html: self-contained, parsed as HTML."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pgblobdump.compare import html as compare_html
from pgblobdump.compare import plots, results
from pgblobdump.compare.matrix import Contender, Plan, pg_dump_contenders, restore_modes
from pgblobdump.harness import html
from pgblobdump.harness.plots import log_worthwhile
from pgblobdump.report.table import jsonable
from tests.compare.conftest import save_results


class _Page(HTMLParser):
    """What a browser would see: tables and their cells, svg elements, every attribute
    that could fetch something, scripts, and the text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.captions: list[str] = []
        self.svgs = 0
        self.fetching: list[tuple[str, str]] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self._caption = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for name, value in attrs:
            fetches = name in ("src", "href", "xlink:href", "data", "srcset", "action") or (
                name == "style" and value is not None and "url(" in value and "url(#" not in value
            )
            if fetches and not (value or "").startswith("#"):
                self.fetching.append((name, value or ""))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "svg":
            self.svgs += 1
        elif tag == "caption":
            self._caption = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "caption":
            self._caption = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._caption:
            self.captions.append(data.strip())


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def test_report_html_is_self_contained(tmp_path: Path) -> None:
    save_results(tmp_path / "run")
    res = results.load(tmp_path / "run")
    res.meta["source"]["settings"] = {"fsync": "off", "max_locks_per_transaction": "64"}
    res.commands.append("pg_dump -Fc -f 'a<b>.dump' -d 'dbname=src'")
    plan = Plan(pg_dump_contenders((16, 17), ("custom",)), (100, 200), 1, restore_modes(2, 1000))
    res.meta["plan"] = jsonable(plan)
    res.meta["restore_server"] = {"settings": {"server_version": "17.10"}}
    res.meta["complete"] = True
    res.meta["machine"] = {"hostname": "vm", "memory": "24684084 kB"}
    written = plots.write_plots(res, tmp_path / "run" / "plots")
    assert [p.name for p in written] == [
        "compare.png", "compare.svg", "compare-restore.png", "compare-restore.svg",
    ]  # fmt: skip
    path = compare_html.write_report(res, tmp_path / "run")
    assert path == tmp_path / "run" / "report.html"
    page = _parse(path)
    assert page.fetching == []  # nothing to fetch: readable offline
    assert "script" not in page.tags and "link" not in page.tags and "img" not in page.tags
    assert page.svgs == 2  # dumps and restores, inline
    # The main table, then the per-part tables, each a header and a row per measurement.
    assert page.captions[0].startswith("each dump and restore over pg_dump 17 -Fc")
    main = page.tables[0]
    assert main[0] == ["LOs", "dump / restore", "wall s", "peak RSS", "archive", "files",
                       "wall x", "RSS x", "bytes x", "files x"]  # fmt: skip
    assert main[1][:2] == ["100", "pg_dump 16 -Fc"]
    assert len(main) == 1 + 8 + 1  # header, 4 dumps at 2 counts, one restore
    assert any(t[0][:2] == ["LOs", "contender"] and len(t) == 1 + 8 for t in page.tables)
    text = "".join(page.text)
    # The plots come right after the main table, before the tables per part (the plots
    # were ~4,000 px down, under a 45-row ratio table).
    tables_at = [i for i, t in enumerate(page.tags) if t == "table"]
    svgs_at = [i for i, t in enumerate(page.tags) if t == "svg"]
    assert tables_at[0] < svgs_at[0] and svgs_at[-1] < tables_at[1]
    assert text.index("Plots") < text.index("Details") < text.index("ratios between majors")
    # Figures by name, not by key; no seed columns where the seed published nothing (it
    # did at 1,000,000 LOs only), and what 'checksummed' counts.
    assert "allocated_bytes" not in text and "peak_rss" not in text
    majors = next(t for t in page.tables if t[0][:3] == ["LOs", "format", "versions"])
    assert majors[0] == ["LOs", "format", "versions", "figure", "ratio"]
    assert ["100", "custom", "16 over 17", "allocated on disk", "1.00x"] in majors
    assert "checksummed: LOs whose OID and data matched the source's" in text
    # Every command whole, numbered, wrapped to the page instead of cut at its edge.
    assert page.tags.count("li") >= len(res.commands) and "pre" not in page.tags
    assert "white-space: pre-wrap; overflow-wrap: anywhere" in path.read_text()
    assert '<td class="short">pg_dump 16 -Fc</td>' in path.read_text()  # not broken at "-"
    assert "pg_dump -Fc -f 'a<b>.dump' -d 'dbname=src'" in text  # escaped, then read back
    assert "max_locks_per_transaction" in text and "hostname" in text
    assert "Commands run, in order" in text
    assert "pg_dump 16 -Fc, pg_dump 17 -Fc" in text  # the plan as people read it
    assert "1 job, -j 2, -j 2 --transaction-size 1000" in text
    assert "restore server settings" in text and "17.10" in text
    # The facts as people read them: no raw True, memory in binary units.
    assert "True" not in text and "<dt>complete</dt><dd>yes</dd>" in path.read_text()
    assert "<dt>memory</dt><dd>23.5 GiB</dd>" in path.read_text()


def test_report_without_plots_still_reads(tmp_path: Path) -> None:
    save_results(tmp_path / "run", counts=1)
    page = _parse(compare_html.write_report(results.load(tmp_path / "run"), tmp_path / "run"))
    assert page.svgs == 0 and page.tables and page.fetching == []


def test_inline_svg_drops_the_prologue_and_metadata() -> None:
    svg = (
        '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n'
        '<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"\n'
        '  "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
        '<svg xmlns="http://www.w3.org/2000/svg"><metadata>\n<rdf:RDF><cc:Work>'
        '<dc:type rdf:resource="http://purl.org/dc/dcmitype/StillImage"/></cc:Work>'
        "</rdf:RDF>\n</metadata>\n<g/></svg>\n"
    )
    assert html.inline_svg(svg) == '<svg xmlns="http://www.w3.org/2000/svg"><g/></svg>'
    with pytest.raises(ValueError, match="no <svg> element"):
        html.inline_svg("<html></html>")


def test_log_axes_only_over_a_span() -> None:
    assert not log_worthwhile([5.0])  # one value: linear
    assert not log_worthwhile([2.0, 3.0, 19.9])
    assert log_worthwhile([1.0, 10.0])
    assert not log_worthwhile([0.0, 100.0])  # a zero cannot sit on a log axis


def test_restores_are_plotted_per_contender_and_mode(tmp_path: Path) -> None:
    save_results(tmp_path / "run", counts=1)
    res = results.load(tmp_path / "run")
    dumps = {p.title: p for p in plots.dump_panels(res)}
    # At one count the four pg_dump runs differ little in time: a linear axis.
    assert not plots.log_y(dumps["dump: wall time"])
    assert plots.log_y(dumps["archive size (apparent; dotted and in parentheses: allocated)"])
    restores = plots.restore_panels(res)
    assert [p.title for p in restores] == ["restore: wall time", "restore: peak RSS"]
    assert [(s.label, s.points) for s in restores[0].series] == [
        ("pg_dump 17 -Fc, 1 job", {100: 2.0})
    ]
    assert not plots.log_y(restores[0])
    plots.write_plots(res, tmp_path / "plots")
    assert (tmp_path / "plots" / "compare-restore.svg").read_text().rstrip().endswith("</svg>")


def _drawn(panels: list[plots.Panel], grid: tuple[int, int]) -> tuple[Any, Any]:
    fig = plots.figure(panels, grid, "test")
    fig.canvas.draw()
    return fig, fig.canvas.get_renderer()


def test_bar_labels_do_not_overlap() -> None:
    """Packed's archive, 0.23 MB apparent and 0.24 MB allocated: its two labels were drawn
    over each other. One label per bar now, the allocated size in parentheses."""
    import matplotlib.pyplot as plt

    def series(c: Contender, short: str, apparent: float, allocated: float) -> plots.Series:
        return plots.Series(c.label, short, c, "o", {100_000: apparent}, {100_000: allocated})

    panel = plots.Panel("archive size", "MB", [
        series(Contender("packed", 17, "packed"), "packed", 0.23, 0.24),
        series(Contender("pg_dump", 16, "directory"), "16 -Fd", 22.0, 410.0),
        series(Contender("pg_dump", 17, "directory"), "17 -Fd", 4.6, 4.7),
    ])  # fmt: skip
    fig, renderer = _drawn([panel], (1, 1))
    try:
        (ax,) = fig.axes
        texts = [t for t in ax.texts if t.get_text()]
        assert sorted(t.get_text() for t in texts) == ["0.23\n(0.24)", "22\n(410)", "4.60\n(4.70)"]
        boxes = [t.get_window_extent(renderer) for t in texts]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert not a.overlaps(b), (a, b)
    finally:
        plt.close(fig)


def test_a_log_axis_over_one_decade_has_labelled_ticks() -> None:
    """The restore RSS plot, 3.8 to 44 MiB on a log axis, had one labelled tick (10)."""
    import matplotlib.pyplot as plt

    c16, c17 = Contender("pg_dump", 16, "custom"), Contender("pg_dump", 17, "custom")
    packed = Contender("packed", 17, "packed")
    panel = plots.Panel("restore: peak RSS", "MiB", [
        plots.Series("16", "16 -Fc", c16, "o", {2000: 3.8}),
        plots.Series("17", "17 -Fc", c17, "o", {2000: 6.7}),
        plots.Series("packed", "packed", packed, "o", {2000: 44.0}),
    ])  # fmt: skip
    assert plots.log_y(panel)
    fig, _renderer = _drawn([panel, panel], (2, 1))
    try:
        ax = fig.axes[0]
        low, high = ax.get_ylim()
        labelled = [t.get_text() for t in ax.get_yticklabels()
                    if t.get_text() and low <= t.get_position()[1] <= high]  # fmt: skip
        assert len(labelled) >= 3, labelled
        assert "10" in labelled and "20" in labelled
    finally:
        plt.close(fig)


def test_a_files_axis_counts_whole_files() -> None:
    """Three custom archives of one file each: the axis read 0, 0.2, 0.4 ... 1 files."""
    import matplotlib.pyplot as plt

    panel = plots.Panel("files in the archive", "files", [
        plots.Series(str(m), f"{m} -Fc", Contender("pg_dump", m, "custom"), "o", {1000: 1.0})
        for m in (16, 17, 18)
    ])  # fmt: skip
    fig, _renderer = _drawn([panel], (1, 1))
    try:
        labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
        assert labels and all(label.replace(",", "").isdigit() for label in labels), labels
    finally:
        plt.close(fig)
