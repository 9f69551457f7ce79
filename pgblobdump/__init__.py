"""pgblobdump: dump, restore, measure and migrate PostgreSQL large objects at scale."""

from __future__ import annotations

__version__ = "0.1.0"
