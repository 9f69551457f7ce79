"""What a run that restores LOs otherwise than as the archive has them tells the writer
(packed/restore/restorer.py): sync's rewrites (``Replacing``) and restore --remap's new
OIDs (``Remapping``, ``RemapHooks``)."""

from __future__ import annotations

from typing import Protocol

import psycopg


class Replacing(Protocol):
    """LOs a run writes anew in place of the target's copies (sync's rewrites): the old
    copy goes in the very transaction that writes the new one, so a failure rolls back
    to it. Each removal holds a lock until commit: batches count them in their budget."""

    def __contains__(self, oid: int) -> bool:
        """Whether LO ``oid`` is one to replace."""
        ...

    def remove(self, conn: psycopg.Connection, oids: list[int], xid: str) -> set[int]:
        """In transaction ``xid`` on ``conn``: remove the old copies of ``oids`` (each one
        to replace) that may be replaced now; returns those removed. The others, if they
        exist, are skipped as any existing LO is."""
        ...


class Remapping(Protocol):
    """LOs restored at other OIDs than the archive's (restore --remap): the items come
    with their new OIDs already, and each batch's transaction records which archive LO
    each new one is, so that the mapping commits with the LOs or not at all."""

    def record(self, conn: psycopg.Connection, oids: list[int]) -> None:
        """In the transaction on ``conn`` that creates LOs ``oids`` (new OIDs): record
        them in the mapping."""
        ...


class RemapHooks(Remapping, Protocol):
    """A Remapping that also hears of the LOs a failed run's clean-up removes (the
    ledger's ``on_remove``), so that their mapping goes in the removing transaction."""

    def forget(self, conn: psycopg.Connection, ranges: list[tuple[int, int]]) -> None:
        """In the transaction on ``conn`` that removes the LOs of ``ranges`` (new OIDs):
        remove their mapping."""
        ...


def taken_meanwhile(oid: str) -> str:
    """What a run that writes LOs at OIDs it chose free (restore --remap) says when one
    was taken by another session before its batch committed."""
    return (
        f"LO {oid} was created by another session meanwhile, at an OID this run had chosen"
        " free; run the same command again: it chooses anew"
    )
