"""PostgreSQL 17+'s WAL summaries: which blocks of pg_largeobject changed since a mark
(``summary``), and whether a server can tell (``ready``, for inspect and doctor)."""
