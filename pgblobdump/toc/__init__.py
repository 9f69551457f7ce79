"""Native reader of pg_dump custom, directory and tar archives (no server, no pg_restore).

The public API: ``open_archive(path)`` gives an ``Archive`` (a context manager) whose
``header`` and ``iter_entries()`` mirror pg_restore's ReadHead/ReadToc; ``summarize``,
``lo.iter_los``, ``lo.iter_data`` and ``lo.extract`` are the LO-aware views; ``diff.diff``
compares two; ``write`` and ``build`` write archives; ``blocks`` indexes data blocks.
"""

from pgblobdump.toc.entry import TocEntry
from pgblobdump.toc.reader import Archive, open_archive
from pgblobdump.toc.summary import Summary, summarize

__all__ = ["Archive", "Summary", "TocEntry", "open_archive", "summarize"]
