"""files/exporting/names: export's template, safe names and clashes, without a server."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgblobdump.errors import UsageError
from pgblobdump.files.exporting.names import Named, make_safe, parse, reserved, resolve
from pgblobdump.files.objects import key_problem


def test_a_template_of_oid_and_columns_renders() -> None:
    t = parse("{docs.tenant}/{oid}-{docs.filename}{{x}}", ["docs"])
    assert t.table == "docs" and t.columns == ("tenant", "filename")
    assert t.render(7, {"tenant": "a", "filename": "b.pdf"}) == "a/7-b.pdf{x}"
    assert t.render(7, {"tenant": None, "filename": "b"}) == "/7-b{x}"
    assert parse("{app.docs.name}", ["app.docs"]).columns == ("name",)


@pytest.mark.parametrize(
    ("text", "tables", "fragment"),
    [
        ("{docs.name}", [], "no --referenced-by"),
        ("plain", [], "no {oid}"),
        ("{oid", [], "unmatched brace"),
        ("{nope}", [], "neither {oid}"),
        ("{a.x}/{b.y}", ["a", "b"], "one table only"),
    ],
)
def test_bad_templates_are_refused(text: str, tables: list[str], fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment.replace("{", r"\{").replace("}", r"\}")):
        parse(text, tables)


@pytest.mark.parametrize(
    ("name", "safe", "why"),
    [
        ("a/b.pdf", "a/b.pdf", ""),
        ("Ünïcødé/文件.txt", "Ünïcødé/文件.txt", ""),
        ("/etc/passwd", "etc/passwd", "absolute"),
        ("../../etc/passwd", "_../_../etc/passwd", ".."),
        ("a//./b", "a/b", "empty or . part"),
        ("a\0b\x01c\x7f", "a_b_c_", "control character"),
        ("", "7", "empty or . part, empty name"),
        ("/", "7", "absolute, empty name"),
        ("manifest.csv", "_manifest.csv", "the export's own name"),
        ("manifest-2-of-3.json", "_manifest-2-of-3.json", "the export's own name"),
        ("x/manifest.csv", "x/manifest.csv", ""),
        (".pgblobdump-export/x", "_.pgblobdump-export/x", "the tool's own name"),
    ],
)
def test_unsafe_names_are_made_safe(name: str, safe: str, why: str) -> None:
    assert make_safe(name, 7) == (safe, why)


def test_over_long_parts_and_paths() -> None:
    path, why = make_safe("é" * 200 + ".pdf", 7)
    assert len(path.encode()) <= 255 and path.endswith("~7.pdf") and "255" in why
    path, why = make_safe("/".join(["d" * 200] * 10) + "/last", 7)
    assert path == "last" and "1024" in why


@given(st.text(max_size=300))
def test_every_safe_name_is_a_key_the_place_takes(name: str) -> None:
    path, _ = make_safe(name, 4294967295)
    assert key_problem(path) is None, (name, path)
    assert not reserved(path)


def test_clashes_and_directories_are_settled_by_oid() -> None:
    wanted = {
        30: Named("r.pdf"),
        10: Named("r.pdf"),
        20: Named("r.pdf"),
        40: Named("a"),
        41: Named("a/b"),
        50: Named("r~20.pdf"),  # a row's own name that the disambiguation would take
    }
    got = resolve(wanted)
    assert got[10] == Named("r.pdf")
    assert got[30] == Named("r~30.pdf", "same name as another LO")
    assert got[50] == Named("r~20.pdf")
    assert got[20].path == "r~20~20.pdf"
    assert got[41] == Named("a/b")
    assert got[40] == Named("a~40", "a directory of another name")
    assert len({n.path for n in got.values()}) == len(got)
    # the same whatever the order they come in, and names kept from an earlier run stay
    assert resolve(dict(reversed(list(wanted.items())))) == got
    again = resolve({10: Named("r.pdf"), 30: Named("r.pdf")}, fixed=["r.pdf"])
    assert again[10].path == "r~10.pdf"


@pytest.mark.parametrize("last", ["manifest.json", "manifest.csv", "manifest-1-of-2.csv"])
def test_a_path_cut_to_its_last_part_is_never_a_manifests_name(last: str) -> None:
    # a path over 1024 bytes is cut to its last part: that part was not checked again,
    # and an LO written as manifest.json was removed by the rerun that finished the export
    path, why = make_safe(("d" * 250 + "/") * 5 + last, 16390)
    assert path == "_" + last and not reserved(path)
    assert "path over 1024 bytes" in why and "the export's own name" in why
