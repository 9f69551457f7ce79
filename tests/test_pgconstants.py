"""PostgreSQL's constants are defined once, in pgblobdump/pgconstants.py: no other module
of the package gives one of its names a value of its own (``OID_MAX`` was once defined
nine times), so a module that needs one imports it from there."""

from __future__ import annotations

import ast
from pathlib import Path

from pgblobdump import pgconstants

ROOT = Path(pgconstants.__file__).resolve().parent
NAMES = {n for n in vars(pgconstants) if n.isupper()}


def own_definitions(path: Path) -> set[str]:
    """The names of pgconstants a module assigns at its top level (``_OID_MAX`` too)."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign)
            else []
        )
        for t in targets:
            if isinstance(t, ast.Name) and t.id.lstrip("_") in NAMES:
                out.add(t.id)
    return out


def test_the_values() -> None:
    assert {"OID_MAX", "FIRST_OID", "LOBLKSIZE", "INV_READ", "INV_WRITE"} <= NAMES
    assert pgconstants.OID_MAX == 4294967295
    assert pgconstants.LOBLKSIZE == 2048
    assert (pgconstants.INV_READ, pgconstants.INV_WRITE) == (0x40000, 0x20000)


def test_no_module_defines_a_postgres_constant_again() -> None:
    again = {
        str(p.relative_to(ROOT.parent)): names
        for p in sorted(ROOT.rglob("*.py"))
        if p != Path(pgconstants.__file__).resolve() and (names := own_definitions(p))
    }
    assert not again, f"import these from pgblobdump.pgconstants instead: {again}"
