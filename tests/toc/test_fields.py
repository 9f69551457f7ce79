"""The named positions of the raw entry tuple follow TocEntry's fields, one for one."""

from __future__ import annotations

import dataclasses

from pgblobdump.toc import fields
from pgblobdump.toc.entry import TocEntry


def test_field_positions_follow_toc_entry() -> None:
    names = [f.name for f in dataclasses.fields(TocEntry)]
    assert len(names) == fields.FIELD_COUNT
    positions = {k: v for k, v in vars(fields).items() if k.startswith("F_")}
    assert positions == {f"F_{name.upper()}": i for i, name in enumerate(names)}
