"""The large objects of a pg_dump archive, in one pass over its TOC and one over its data.

One concern a module, imports going one way (catalog <- data streams <- coverage <- objects):

- ``catalog``: the one TOC pass (owners, ACLs, comments, BLOBS entries, groups);
- ``blockwalk`` and ``custom``: a custom archive's BLOBS data blocks;
- ``directory``: a directory or tar archive's LO list files and data files;
- ``streams``: each LO's stored size and bytes, whatever the format (``data`` the items);
- ``coverage``: the data holds exactly the LOs the entries create;
- ``objects``: the public view, re-exported here: ``iter_los``, ``iter_rows``,
  ``iter_data`` (what ``pack`` reads), ``extract``.
"""

from pgblobdump.toc.lo.catalog import LoCatalog
from pgblobdump.toc.lo.objects import (
    LargeObject,
    LoRow,
    extract,
    iter_data,
    iter_los,
    iter_rows,
)

__all__ = [
    "LargeObject",
    "LoCatalog",
    "LoRow",
    "extract",
    "iter_data",
    "iter_los",
    "iter_rows",
]
