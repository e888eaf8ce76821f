"""plan → blocks: the 512 KiB blocks a copy stores, the same for every sink (issue 19).

The rule: the new snapshot holds a 512 KiB block exactly when the source snapshot holds it (the
block list, ``Held``; without one every block counts as held) and the filesystem needs it (the
plan: plan.py and the fs_*.py maps, argued in docs/data-plane.md, "What is needed"), with the
source's bytes, ZEROS INCLUDED: a block the new snapshot does not hold reads as random bytes on
an encrypted restore, not as zeros. Bytes of such a block outside the plan's ranges (free
space) are zeroed (a mask), so the block carries no stale data.

``BlockSet.of(plan, ...)`` is that set, in ascending order; both sinks write every block of it:
volume_sink.py (``copy``: plain writes onto the target volume, which CreateSnapshot then
stores) and snapshot_copy.py (``job --target snapshot``: PutSnapshotBlock). The dry run counts
it (disk_copy.inspect_disk). ``Source`` reads a block, masked, for either sink.
"""

import mmap
import threading
from collections.abc import Iterator
from typing import NamedTuple, Optional

from .copier import MERGE_GAP, read_exactly
from .extents import Extents, align, normalize, total
from .plan import TRIM, DiskPlan
from .source_blocks import BLOCK_SIZE, Held

Parts = tuple[tuple[int, int], ...]
FULL: Parts = ((0, BLOCK_SIZE),)
ZEROS = bytes(BLOCK_SIZE)


class Block(NamedTuple):
    """One 512 KiB block: its index, the bytes its progress counts and the byte ranges within
    it (offsets in the block) that the plan needs; the rest of the block is stored as zeros."""

    number: int  # the block index
    weight: int = BLOCK_SIZE
    parts: Parts = FULL


def touched_blocks(ranges: Extents) -> Iterator[Block]:
    """The 512 KiB blocks ``ranges`` (sorted, merged) touch, in ascending order, each with the
    ranges' parts within it and their length as its progress weight."""
    index, parts = -1, list[tuple[int, int]]()
    for start, length in ranges:
        pos, end = start, start + length
        while pos < end:
            here = pos // BLOCK_SIZE
            stop = min((here + 1) * BLOCK_SIZE, end)
            if here != index:
                if parts:
                    yield Block(index, sum(b - a for a, b in parts), tuple(parts))
                index, parts = here, []
            parts.append((pos - here * BLOCK_SIZE, stop - here * BLOCK_SIZE))
            pos = stop
    if parts:
        yield Block(index, sum(b - a for a, b in parts), tuple(parts))


def needed_ranges(plan: DiskPlan, sector: int, size: int, with_trim: bool = False) -> Extents:
    """The plan's ranges (needed ∩ held): outside the partitions and every partition, those of
    the trim method only ``with_trim`` (the dry run's upper bound: what fstrim keeps is known
    only after staging).

    Sector-aligned (O_DIRECT) but no wider. With a block list the extents are already
    needed ∩ held: an end inside a listed block widens within that block (a sector divides
    512 KiB), an end on a block boundary is aligned, so no unlisted block is added."""
    ranges: Extents = list(plan.outside)
    for part in plan.partitions:
        if with_trim or part.method != TRIM:
            ranges.extend(part.extents)
    return align(normalize(ranges), sector, size)


class BlockSet(NamedTuple):
    """The blocks of the rule, from the plan's ranges."""

    ranges: Extents  # the bytes the blocks' parts cover (sorted, merged, sector-aligned)
    block_count: int

    @classmethod
    def of(cls, plan: DiskPlan, sector: int, size: int, with_trim: bool = False) -> "BlockSet":
        ranges = needed_ranges(plan, sector, size, with_trim)
        last, counted = -1, 0
        for start, length in ranges:
            first, end = max(start // BLOCK_SIZE, last + 1), (start + length - 1) // BLOCK_SIZE
            counted += max(end - first + 1, 0)
            last = max(last, end)
        return cls(ranges, counted)

    @property
    def weight(self) -> int:
        """What progress counts over the whole set: the ranges' bytes."""
        return total(self.ranges)

    def blocks(self, first: int = 0, end: Optional[int] = None) -> Iterator[Block]:
        """The blocks in ascending order, those from byte ``first`` up to byte ``end``."""
        for block in touched_blocks(self.ranges):
            offset = block.number * BLOCK_SIZE
            if offset >= first and (end is None or offset < end):
                yield block


class Source:
    """Masked 512 KiB blocks of the open source, read into a page-aligned buffer (O_DIRECT safe).

    Only a block's parts are read (parts less than MERGE_GAP apart in one read: on a restored
    volume the first read of a byte fetches its whole block anyway); every other byte of the
    block, and any byte past the device's end, is zero."""

    def __init__(self, fd: int, size: int, held: Optional[Held]) -> None:
        self.fd, self.size, self.held = fd, size, held
        self.local = threading.local()
        self.lock = threading.Lock()
        self.bytes_read = 0

    def buffer(self) -> mmap.mmap:
        """This thread's block buffer."""
        buf = getattr(self.local, "buf", None)
        if buf is None:
            buf = self.local.buf = mmap.mmap(-1, BLOCK_SIZE)
        return buf

    def fill(self, block: Block, count: bool = True) -> mmap.mmap:
        """This thread's buffer holding the block, masked; ``count``: a read of the copy (not of
        a verify)."""
        offset = block.number * BLOCK_SIZE
        length = min(BLOCK_SIZE, self.size - offset)
        buf = self.buffer()
        view = memoryview(buf)
        done = 0
        try:
            if block.parts != FULL or length < BLOCK_SIZE:
                view[:] = ZEROS
            merged = normalize([(lo, hi - lo) for lo, hi in block.parts], MERGE_GAP)
            for lo, span in merged:
                hi = min(lo + span, length)
                if hi > lo:
                    read_exactly(self.fd, view[lo:hi], offset + lo, hi - lo, "the source")
                    done += hi - lo
            for lo, hi in _gaps(block.parts):  # what merged reads fetched between parts
                view[lo:hi] = ZEROS[: hi - lo]
        finally:
            view.release()
        if count:
            if self.held is not None and done:
                self.held.touch(offset, length)
            with self.lock:
                self.bytes_read += done
        return buf

    def read(self, block: Block, count: bool = True) -> bytes:
        """The block, masked, as bytes."""
        return self.fill(block, count)[:BLOCK_SIZE]


def _gaps(parts: Parts) -> "list[tuple[int, int]]":
    """(lo, hi) of the bytes between a block's parts."""
    out: list[tuple[int, int]] = []
    for (_, end), (lo, _) in zip(parts, parts[1:]):
        if lo > end:
            out.append((end, lo))
    return out
