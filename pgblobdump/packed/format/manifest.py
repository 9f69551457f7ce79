"""A packed archive's manifest, read: what every reader checks before trusting it (JSON, our
format, a version this pgblobdump reads, the totals present)."""

from __future__ import annotations

import json
from typing import Any

from pgblobdump.errors import CorruptArchive, NotAnArchive, UnsupportedArchive
from pgblobdump.packed.format.spec import MANIFEST_FORMAT, version_problem


def parse_manifest(body: bytes, where: str) -> dict[str, Any]:
    """The manifest in ``body`` (read from ``where``, named in errors), checked."""
    try:
        manifest = json.loads(body)
    except ValueError as e:
        raise CorruptArchive(f"{where}: the manifest is not JSON ({e})") from e
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise NotAnArchive(f"{where}: not a pgblobdump packed archive manifest")
    if (why := version_problem(manifest.get("version"))) is not None:
        raise UnsupportedArchive(f"{where}: {why}")
    for key in ("los", "bytes", "files"):
        if key not in manifest:
            raise CorruptArchive(f"{where}: the manifest has no {key!r}")
    return manifest
