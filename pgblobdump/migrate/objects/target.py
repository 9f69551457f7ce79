"""Where a run's objects live and how the column names them: ``s3://bucket/prefix``, each
LO at key ``prefix/<oid>``; the column holds that key, or with ``--url`` the URL
``s3://bucket/prefix/<oid>`` (the same for every endpoint and client: an endpoint's http
URL depends on the host name and path or virtual-host style, which the data should not)."""

from __future__ import annotations

from dataclasses import dataclass

from pgblobdump.errors import UsageError


@dataclass(frozen=True)
class Target:
    where: str
    """As the user wrote it, without a trailing ``/``: ``s3://bucket/prefix``."""
    bucket: str
    prefix: str
    """The keys' common start within the bucket, without a trailing ``/`` ('' for none)."""
    url: bool = False

    @classmethod
    def parse(cls, where: str, url: bool = False) -> Target:
        if not where.startswith("s3://"):
            raise UsageError(f"{where!r}: object storage is named s3://bucket/prefix")
        rest = where[len("s3://") :].strip("/")
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise UsageError(f"{where!r} names no bucket: s3://bucket/prefix")
        return cls(f"s3://{rest}", bucket, prefix.strip("/"), url)

    @property
    def key_prefix(self) -> str:
        """What every key of the run starts with in the bucket ('' or ``prefix/``)."""
        return f"{self.prefix}/" if self.prefix else ""

    @property
    def value_prefix(self) -> str:
        """What every value of the new column starts with, the OID following."""
        start = f"s3://{self.bucket}/" if self.url else ""
        return start + self.key_prefix

    def value(self, oid: int) -> str:
        """The new column's value for LO ``oid``."""
        return f"{self.value_prefix}{oid}"

    def relative(self, value: str) -> str | None:
        """The object a column value names, as a key under the prefix (the place's own
        key); None when it names none there (another bucket, outside the prefix, empty,
        or a path that would climb out)."""
        key = value
        if value.startswith("s3://"):
            bucket, _, key = value[len("s3://") :].partition("/")
            if bucket != self.bucket:
                return None
        if not key.startswith(self.key_prefix):
            return None
        rel = key[len(self.key_prefix) :]
        if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in rel.split("/")):
            return None
        return rel
