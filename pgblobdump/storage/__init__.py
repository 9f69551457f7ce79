"""Where archive bytes live: one small interface, a backend per place (a local directory,
an ``s3://`` prefix), and ``open``/``create_new`` choosing the backend from the name a
user gives, in one place."""

from pgblobdump.storage.base import FileInfo, Storage
from pgblobdump.storage.local import LocalDirectory
from pgblobdump.storage.places import STREAM, create_new, is_directory, local_path, open

__all__ = [
    "STREAM",
    "FileInfo",
    "LocalDirectory",
    "Storage",
    "create_new",
    "is_directory",
    "local_path",
    "open",
]
