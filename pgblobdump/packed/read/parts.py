"""Split a packed archive's LOs into N shares for N restores at once (``restore --part
K/N``): N hosts or processes restore one archive into one database in parallel.

Shares are OID ranges holding as many LOs each as can be (cut from the index), covering
every OID, so together they are the whole archive and no two overlap. A share reads only
its own frames: from the index, the first frame of its LOs in each volume, and from there
only until the last of its LOs that starts in that volume is complete (on into the
worker's next volume for a large LO that continues there).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from pgblobdump.errors import CorruptArchive, DamagedData
from pgblobdump.packed.format.spec import volume_name, volume_of
from pgblobdump.packed.read.items import Damaged, Item, LoPiece, WholeLos
from pgblobdump.packed.read.reader import PackedDirectory, _Assembler
from pgblobdump.pgconstants import OID_MAX


def share(archive: PackedDirectory, k: int, n: int) -> tuple[int, int]:
    """The OID range of share ``k`` of ``n``."""
    total = sum(b.records for b in archive.index.blocks)

    def bound(i: int) -> int:  # the last OID of share i (1 <= i < n)
        return _oid_at(archive, max(1, total * i // n)) if total else 0

    first = 0 if k == 1 else bound(k - 1) + 1
    last = OID_MAX if k == n else bound(k)
    return first, last


def job_shares(
    archive: PackedDirectory, part: tuple[int, int] | None, jobs: int
) -> list[tuple[int, int]]:
    """The OID ranges of ``jobs`` connections restoring ``archive`` (or its ``part``,
    (K, N)) at once: its tiles of N x ``jobs`` shares (pg/snapshot.job_tiles), so the N
    parts' ranges still tile the archive."""
    from pgblobdump.pg.snapshot import job_tiles  # libpq only for a restore's jobs

    mine, tiles = job_tiles(part, jobs)
    return [share(archive, t, tiles) for t in mine]


def _oid_at(archive: PackedDirectory, pos: int) -> int:
    """The OID of the index's record at position ``pos`` (1-based, in OID order),
    decoding only the block that holds it (the block table counts their records)."""
    index = archive.index
    before = 0
    for e in index.blocks:
        if before + e.records >= pos:
            return index._block(e)[pos - before - 1].oid
        before += e.records
    return index.blocks[-1].last


def share_items(
    archive: PackedDirectory, first: int, last: int, skip_damaged: bool = False
) -> Iterator[Item]:
    """The LOs with OIDs in ``first..last``, reading only the frames that hold them.
    ``skip_damaged``: as ``PackedDirectory.items``, the share's LOs of a damaged frame
    (or volume) come as a Damaged item and reading goes on (``restore --jobs``)."""
    starts: dict[str, int] = {}
    count: Counter[str] = Counter()
    for volume, (offset, records) in archive.index.volume_starts(first, last).items():
        name = volume_name(*volume_of(volume))
        starts[name] = offset
        count[name] = records
    asm = _Assembler(archive.index.metas, archive.where, keep=(first, last))
    expected = sum(count.values())
    damaged = False
    for name in archive.volumes():
        carry = asm._open is not None  # a large LO goes on at this volume's start
        if name not in starts and not carry:
            continue
        begun = 0
        try:
            with archive._frames(name, None if carry else starts[name]) as frames:
                for item in archive._frame_items(frames, name, asm, skip_damaged):
                    if isinstance(item, Damaged):
                        mine = [o for o in item.oids if first <= o <= last]
                        damaged = True
                        if not mine:
                            continue
                        begun += len(mine)
                        item = Damaged(mine, item.where, item.reason)
                    elif isinstance(item, WholeLos):
                        begun += len(item.oids)
                    elif isinstance(item, LoPiece) and item.offset == 0:
                        begun += 1
                    yield item
                    # (a frame is decoded whole: an LO with holes may still have pieces
                    # to give after its first, though the assembler has closed it)
                    ends = not isinstance(item, LoPiece) or item.last
                    if begun >= count[name] and asm._open is None and ends:
                        break
        except CorruptArchive as e:  # the volume itself: missing, or no volume header
            if not skip_damaged:
                if isinstance(e, DamagedData):  # met further down already
                    raise
                raise DamagedData(str(e)) from e  # restore names --skip-damaged
            damaged = True
            cut = asm.drop_open()
            lost = [o for o in archive._lost_after(name, 0) if first <= o <= last]
            lost = lost if cut is None else [cut, *lost]
            if lost:
                yield Damaged(lost, f"{archive.where}/{name}", str(e))
    if damaged:
        return  # the counts cannot match the index's: the damage was reported
    if asm.los != expected or asm._open is not None:
        raise CorruptArchive(
            f"{archive.where}: the volumes hold {asm.los:,} of the {expected:,} LOs the index"
            f" places in OIDs {first}..{last}"
        )
