"""``toc summary``: one streaming pass over the TOC (and the LO data) into counters."""

from __future__ import annotations

import os
from dataclasses import dataclass

from pgblobdump.toc.lo import coverage
from pgblobdump.toc.lo.catalog import catalog
from pgblobdump.toc.lo.data import SizeRun
from pgblobdump.toc.reader import Archive


@dataclass(frozen=True)
class Summary:
    """What an archive holds, without keeping its entries.

    ``entries_by_type`` maps each entry description to its count (all entries, including
    those `pg_restore -l` does not print; ``listed`` counts the printed ones).
    ``lo_groups`` is the number of BLOB METADATA entries (1.16) or 1 for older archives
    with LOs. ``lo_data_bytes`` is the stored LO data (compressed if the archive is),
    None when not measured; ``archive_bytes`` the file size (or a directory's total).
    """

    path: str
    format: str
    version: str
    compression: str
    created: str
    dbname: str | None
    server_version: str | None
    pg_dump_version: str | None
    toc_entries: int
    listed: int
    entries_by_type: dict[str, int]
    lo_count: int
    lo_groups: int
    lo_owners: dict[str, int]
    los_with_acl: int
    los_with_comment: int
    lo_security_labels: int
    los_with_data: int | None
    lo_data_bytes: int | None
    archive_bytes: int


def _archive_bytes(archive: Archive) -> int:
    if archive.kind == "directory" and archive.root is not None:
        total = 0
        with os.scandir(archive.root) as it:
            for e in it:
                if e.is_file(follow_symlinks=False):
                    total += e.stat(follow_symlinks=False).st_size
        return total
    return archive.path.stat().st_size


def summarize(archive: Archive, with_data: bool = True) -> Summary:
    """Count entries by type, LOs, owners, ACLs, comments and (``with_data``) LO bytes."""
    cat = catalog(archive)
    h = archive.header
    with_acl = len(cat.acl_of)
    if cat.group_acl:
        with_acl += sum(cat.metadata[m][1].count(b"\n") for m in cat.group_acl if m in cat.metadata)
    data_count: int | None = None
    data_bytes: int | None = None
    if with_data:
        data_count = data_bytes = 0
        for item in coverage.checked(archive, cat):
            if isinstance(item, SizeRun):
                data_count += len(item.oids)
                data_bytes += item.size * len(item.oids)
            else:
                data_count += 1
                data_bytes += item[1]
    return Summary(
        path=archive.name,
        format=archive.kind,
        version=h.version_text,
        compression=h.compression,
        created=h.created_text,
        dbname=h.dbname,
        server_version=h.server_version,
        pg_dump_version=h.pg_dump_version,
        toc_entries=h.toc_count,
        listed=cat.listed,
        entries_by_type={
            k.decode("utf-8", "replace"): v
            for k, v in sorted(cat.desc_counts.items(), key=lambda kv: (-kv[1], kv[0]))
        },
        lo_count=cat.count,
        lo_groups=cat.groups,
        lo_owners=dict(sorted(cat.owners.items(), key=lambda kv: (-kv[1], kv[0]))),
        los_with_acl=with_acl,
        los_with_comment=len(cat.comment_of),
        lo_security_labels=cat.security_labels,
        los_with_data=data_count,
        lo_data_bytes=data_bytes,
        archive_bytes=_archive_bytes(archive),
    )
