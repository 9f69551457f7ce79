"""Where archive bytes live: one small interface, a backend per place (local directory
today; object storage plugs in beside it without touching the archive format code)."""

from pgblobdump.storage.base import FileInfo, Storage
from pgblobdump.storage.local import LocalDirectory

__all__ = ["FileInfo", "LocalDirectory", "Storage"]
