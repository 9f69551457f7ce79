"""A self-contained HTML report for compare and bench: tables, inline SVG plots, the
commands run and the facts of the machine and servers, in one file readable offline.

Nothing is fetched: the style is inline, the SVG is the plot's own text (its XML
declaration, DOCTYPE and metadata removed), there is no script, and every value is
escaped. The inputs are plain strings, so any harness can fill them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPORT_FILE = "report.html"
SHORT_CELL = 24
"""A text cell this long or shorter (a name: ``pg_dump 16 -Fc``) is never wrapped: a
browser broke it after the hyphen."""

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 80em; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.5em 0; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.short { white-space: nowrap; }
tr:nth-child(even) td { background: #fafafa; }
ul.notes { color: #555; font-size: 0.9em; margin-top: 0; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
ol.commands { background: #f6f6f6; padding: 0.8em 0.8em 0.8em 3em; font-size: 0.85em; }
ol.commands li { font-family: monospace; white-space: pre-wrap; overflow-wrap: anywhere;
                 margin-bottom: 0.3em; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.1em 1em; }
dt { font-weight: bold; } dd { margin: 0; font-family: monospace; }
"""


@dataclass(frozen=True)
class HtmlTable:
    """A table as text cells; ``numeric[i]`` right-aligns column i."""

    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]
    numeric: Sequence[bool] = ()
    notes: Sequence[str] = ()


@dataclass(frozen=True)
class HtmlReport:
    """What a report shows, in this order: intro lines, the headline tables, figures
    (caption and SVG text), the other tables (details), the commands run (each wrapped to
    the page, numbered), then facts (a heading and its key/value pairs)."""

    title: str
    intro: Sequence[str] = ()
    tables: Sequence[HtmlTable] = ()
    """The details, after the figures."""
    figures: Sequence[tuple[str, str]] = ()
    commands: Sequence[str] = ()
    facts: Sequence[tuple[str, Mapping[str, Any]]] = field(default_factory=tuple)
    headline: Sequence[HtmlTable] = ()
    """What a reader looks for first: above the figures."""


_PROLOGUE = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", re.IGNORECASE)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)


def inline_svg(svg: str) -> str:
    """An SVG file's text made fit to sit inside HTML: the ``<svg>`` element only, without
    the metadata block (which names external vocabularies)."""
    svg = _PROLOGUE.sub("", svg, count=1)
    svg = _METADATA.sub("", svg)
    start = svg.find("<svg")
    if start < 0:
        raise ValueError("not an SVG document: no <svg> element")
    return svg[start:].strip()


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _table(t: HtmlTable) -> str:
    numeric = list(t.numeric) + [False] * (len(t.headers) - len(t.numeric))
    head = "".join(f"<th>{_e(h)}</th>" for h in t.headers)
    body = "\n".join(
        "<tr>" + "".join(
            f'<td class="num">{_e(c)}</td>' if numeric[i]
            else f'<td class="short">{_e(c)}</td>' if len(c) <= SHORT_CELL
            else f"<td>{_e(c)}</td>"
            for i, c in enumerate(row)
        ) + "</tr>"
        for row in t.rows
    )  # fmt: skip
    out = f"<table>\n<caption>{_e(t.title)}</caption>\n<tr>{head}</tr>\n{body}\n</table>"
    if t.notes:
        out += '\n<ul class="notes">' + "".join(f"<li>{_e(n)}</li>" for n in t.notes) + "</ul>"
    return out


def _facts(heading: str, values: Mapping[str, Any]) -> str:
    items = "\n".join(f"<dt>{_e(k)}</dt><dd>{_e(_flat(v))}</dd>" for k, v in values.items())
    return f"<h3>{_e(heading)}</h3>\n<dl>\n{items}\n</dl>"


def _flat(value: Any) -> str:
    if isinstance(value, bool):  # a page for people: yes/no, as the tables say it
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_flat(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return "" if value is None else str(value)


def render(report: HtmlReport) -> str:
    """The whole document as text."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f"<title>{_e(report.title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{_e(report.title)}</h1>",
        *(f"<p>{_e(line)}</p>" for line in report.intro),
    ]
    if report.headline:
        parts.append("<h2>Results</h2>")
        parts += [_table(t) for t in report.headline]
    if report.figures:
        parts.append("<h2>Plots</h2>")
        parts += [
            f"<figure>\n{inline_svg(svg)}\n<figcaption>{_e(caption)}</figcaption>\n</figure>"
            for caption, svg in report.figures
        ]
    if report.tables:
        parts.append("<h2>Details</h2>" if report.headline else "<h2>Results</h2>")
        parts += [_table(t) for t in report.tables]
    if report.commands:
        parts.append("<h2>Commands run, in order</h2>")
        items = "\n".join(f"<li>{_e(c)}</li>" for c in report.commands)
        parts.append(f'<ol class="commands">\n{items}\n</ol>')
    if report.facts:
        parts.append("<h2>Machine and servers</h2>")
        parts += [_facts(h, v) for h, v in report.facts]
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)


def write(report: HtmlReport, folder: Path) -> Path:
    """``folder/report.html``, written whole or not at all; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / REPORT_FILE
    tmp = folder / (REPORT_FILE + ".tmp")
    tmp.write_text(render(report), encoding="utf-8")
    tmp.replace(path)
    return path
