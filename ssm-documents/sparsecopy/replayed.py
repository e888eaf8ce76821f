"""What a journal/log replay writes to the source, where the snapshot holds no block.

With ``--source-blocks``, a block the snapshot does not hold reads as zeros on an unencrypted
source volume and as random bytes on an encrypted one. A replay (e2fsck for ext4, a mount for
XFS) may write such a block; the copy must then store it, with the replay's bytes, and must not
store any other block outside the list (docs/data-plane.md, "Crash-consistent sources").

Most of what a replay writes is read from the journal's or log's own record before it runs
(``fs_ext.journal_writes``, ``fs_xfs.log_writes``). XFS also writes into its log (up to 2 MiB
past the head cleared, an unmount record): ``LogWatch`` digests the log's unlisted 4 KiB pieces
before the mount and reports those that changed. A change is a write on every source: XFS
never writes an all-zero log block, and on an encrypted source any write changes random bytes."""

import hashlib
import os
from typing import Optional

from .blockdev import flush
from .extents import Extent, Extents, complement, intersect, normalize, shift
from .source_blocks import BLOCK_SIZE, Held

PIECE = 4096  # digest unit: a write anywhere in a piece marks all of it (same 512 KiB block)
READ = 1024 * 1024


def unlisted(extents: Extents, held: Held) -> Extents:
    """The bytes of ``extents`` in blocks the list does not hold."""
    return intersect(extents, complement(held.extents, 0, held.size))


def block_count(extents: Extents) -> int:
    """Distinct 512 KiB blocks the extents touch."""
    blocks: set[int] = set()
    for start, length in extents:
        blocks.update(range(start // BLOCK_SIZE, (start + length - 1) // BLOCK_SIZE + 1))
    return len(blocks)


class LogWatch:
    """Digests of a log's unlisted 4 KiB pieces, taken before a mount replays it."""

    def __init__(self, device: str, base: int, log: Optional[Extent], held: Held) -> None:
        """``device``: the partition; ``base``: its start on the disk; ``log``: the log's range
        within the partition (None: an external log, nothing to watch)."""
        self.device, self.base = device, base
        pieces = unlisted(shift([log], base), held) if log else []
        # 4 KiB aligned within the partition (XFS writes whole log blocks); listed blocks end
        # on 512 KiB boundaries of the disk, so no listed byte is added
        self.ranges = [(s - base, n) for s, n in pieces]
        self.before = self._digests()

    def _digests(self) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        fd = os.open(self.device, os.O_RDONLY)
        try:
            for start, length in self.ranges:
                for pos in range(start, start + length, READ):
                    data = os.pread(fd, min(READ, start + length - pos), pos)
                    for at in range(0, len(data), PIECE):
                        piece = data[at : at + PIECE]
                        out[pos + at] = hashlib.blake2b(piece, digest_size=16).digest()
        finally:
            os.close(fd)
        return out

    def changed(self) -> Extents:
        """Byte ranges of the disk whose pieces differ from before (call after the unmount)."""
        flush(self.device)  # the mount wrote past this device's page cache
        after = self._digests()
        return normalize(
            (self.base + pos, PIECE) for pos, digest in self.before.items() if after[pos] != digest
        )
