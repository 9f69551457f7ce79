"""LOs database to database: ``copy`` (every LO, once, from one source snapshot) and
``sync`` (what changed since), streamed with no archive between; their state lives in the
target, in a schema of its own (sync/state.py)."""

from pgblobdump.sync.copy import CopyRequest, CopyResult, copy

__all__ = ["CopyRequest", "CopyResult", "copy"]
