"""What an interrupted restore left, in words that count right: "the other 1 LO was", not
"the other 1 were" (the count itself is the target's, from the catalog)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pgblobdump.packed.restore import journal
from pgblobdump.packed.restore.journal import Journal


@pytest.mark.parametrize(
    ("there", "said"),
    [
        (20_215, "20,215 LOs of the 20,216 (OIDs 16384..36599) it had begun; the other 1 LO"
                 " was in a batch that never committed"),
        (18_168, "18,168 LOs of the 20,216 (OIDs 16384..36599) it had begun; the other 2,048"
                 " LOs were in a batch that never committed"),
    ],
)  # fmt: skip
def test_the_batch_that_never_committed_is_counted_in_words(
    monkeypatch: pytest.MonkeyPatch, there: int, said: str
) -> None:
    monkeypatch.setattr(journal.catalog, "count_in", lambda conn, ranges: there)
    j = Journal(Path("/nonexistent"), "target", [(16384, 36599)])
    conn: Any = None
    assert j.describe_earlier(conn) == said
