"""files/exporting/journal: two exports that both found one target empty do not mix."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgblobdump.errors import UsageError
from pgblobdump.files.exporting.journal import Journal
from pgblobdump.files.objects import open_place


def test_the_second_of_two_exports_begun_at_once_is_refused(tmp_path: Path) -> None:
    with open_place(str(tmp_path / "out"), create=True) as place:
        a = Journal(place, {"database": "a", "template": "{oid}"}, None)
        b = Journal(place, {"database": "b", "template": "{oid}"}, None)
        assert a.look().fresh and b.look().fresh  # both see an empty target
        a.begin(1)
        with pytest.raises(UsageError, match="holds another export"):
            b.begin(1)
        # a rerun of the first export (same settings) is welcome, and keeps the first run
        again = Journal(place, {"database": "a", "template": "{oid}"}, None)
        assert not again.look().fresh
        again.begin(2)
        assert [r["jobs"] for r in again.runs] == [1, 2]
