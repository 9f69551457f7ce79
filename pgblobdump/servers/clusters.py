"""Named embedded clusters that outlive a command: where they live and which is which."""

from __future__ import annotations

import re
from pathlib import Path

from pgblobdump.errors import NotFound, UsageError
from pgblobdump.servers import toolchain
from pgblobdump.servers.cluster import ClusterInfo, EmbeddedCluster, default_base_dir

DEFAULT_MAJOR = 16
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")


def datadir_for(name: str | None, major: int | None, datadir: Path | None) -> Path:
    """The data directory a cluster is named by: ``datadir`` as given, else ``name`` (or
    ``pg<major>``) under the clusters folder."""
    if datadir is not None:
        return datadir
    if name is not None and not _NAME_RE.fullmatch(name):
        raise UsageError(f"--name {name!r}: use letters, digits, '.', '_' or '-' (no '/')")
    return default_base_dir() / (name or f"pg{major or DEFAULT_MAJOR}")


def cluster_in(
    major: int | None, datadir: Path, pg_bin: tuple[Path, ...] = (), port: int | None = None
) -> EmbeddedCluster:
    """The cluster in ``datadir``; its major is the one it was made with, else ``major``."""
    if major is not None:
        toolchain.check_major(major)
    found = datadir / "PG_VERSION"
    existing = int(found.read_text().strip()) if found.is_file() else None
    if major is not None and existing is not None and existing != major:
        raise UsageError(f"{datadir} holds a PostgreSQL {existing} cluster, not {major}")
    use = existing or major or DEFAULT_MAJOR
    tc = toolchain.find(use, toolchain.SERVER_TOOLS, pg_bin)
    return EmbeddedCluster(use, datadir=datadir, port=port, tc=tc, remove=False)


def existing(path: Path, major: int | None, pg_bin: tuple[Path, ...] = ()) -> EmbeddedCluster:
    """The cluster in ``path``, NotFound when there is none."""
    if not (path / "PG_VERSION").is_file():
        raise NotFound(f"no cluster in {path}")
    return cluster_in(major, path, pg_bin)


def all_clusters(pg_bin: tuple[Path, ...] = ()) -> list[ClusterInfo]:
    """Every cluster under the clusters folder, with whether it runs."""
    base = default_base_dir()
    if not base.is_dir():
        return []
    return [cluster_in(None, d, pg_bin).status()
            for d in sorted(base.iterdir()) if (d / "PG_VERSION").is_file()]  # fmt: skip
