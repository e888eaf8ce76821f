"""``job --target snapshot``: copy one source volume straight into an EBS snapshot that is already
started (StartSnapshot by start_compaction), through the EBS direct APIs, instead of onto a
target volume.

The source is planned exactly as ``copy`` plans it (the same checks, journal/log replay, the
block list, the same ranges: disk_copy._direct_ranges). Then the copy streams: every 512 KiB
block the ranges touch is read from the source, every byte outside the ranges is zeroed (what
a never-written target volume would hold there), an all-zero block is skipped (never put: it
reads as zeros), and every other block is put (put_snapshot.Uploader: max(``jobs``,
PUTS_IN_FLIGHT) puts in flight, ebs_direct's retries). CompleteSnapshot follows only after
every put succeeded. On any failure the snapshot is never completed: it stays pending until
StartSnapshot's Timeout ends it (or the workflow's teardown deletes it) and the error says so.

``verify``: after CompleteSnapshot, wait for EBS to seal the snapshot, read every put block back
(GetSnapshotBlock) and compare it with the source read again and masked the same way. No
filesystem checker runs: it needs a block device, and the snapshot is not one (each
partition's ``fsck`` says so). The trim method needs a writable target volume: refused. A btrfs
partition, which ``allocated`` copies through the trim method, is copied raw (every non-zero
block) instead."""

import contextlib
import mmap
import os
import threading
import time
from collections.abc import Iterator
from typing import NamedTuple, Optional

from .blockdev import sector_size, size_of
from .copier import open_device, read_exactly
from .disk_copy import DEFAULT_JOBS, _direct_ranges, check_device
from .ebs_direct import ApiError, Client, aggregate_checksum
from .errors import Failure
from .extents import Extents, total
from .plan import ALLOCATED, RAW, TRIM, DiskPlan, MetaReader, plan_disk
from .progress import Progress, log
from .put_snapshot import Block, Uploader, open_client, verify
from .source_blocks import BLOCK_SIZE, Held, against_device, load

FSCK_NOT_RUN = "not checked: target is a snapshot (blocks read back and compared instead)"
NO_TRIM = (
    "method trim needs a writable target volume (it stages and fstrims partitions): "
    "use method allocated with a snapshot target, or target volume with method trim"
)
BTRFS_RAW = (
    "target is a snapshot: btrfs is copied by the trim method, which needs a writable target "
    "volume; copying every non-zero block"
)
# Puts are latency-bound (AWS: ~100 ms a PutSnapshotBlock; its ~500 MB/s example uses ~100
# connections; the per-snapshot quota is 1,000 puts/s): at least this many are kept in flight,
# --jobs more (each worker also reads its block from the source first).
PUTS_IN_FLIGHT = 64
FULL = ((0, BLOCK_SIZE),)
Parts = tuple[tuple[int, int], ...]


class SnapshotOptions(NamedTuple):
    source: str
    snapshot_id: str  # started, still pending
    method: str = ALLOCATED
    jobs: int = DEFAULT_JOBS
    verify: bool = False
    source_blocks: Optional[str] = None  # the block list file


def puts_in_flight(jobs: int) -> int:
    return max(jobs, PUTS_IN_FLIGHT)


def left_pending(snapshot_id: str) -> str:
    return f"snapshot {snapshot_id} NOT completed, left pending until its timeout"


def touched_blocks(ranges: Extents) -> Iterator[Block]:
    """The 512 KiB blocks ``ranges`` (sorted, merged) touch, in ascending order, each with the
    ranges' parts within it (offsets in the block) and their length as its progress weight."""
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


class Source:
    """Masked 512 KiB blocks of the open source: read whole into a page-aligned buffer (O_DIRECT
    safe; the last block of a device that ends inside one is padded with zeros), every byte
    outside the block's parts zeroed."""

    def __init__(self, fd: int, size: int, held: Optional[Held]) -> None:
        self.fd, self.size, self.held = fd, size, held
        self.local = threading.local()
        self.lock = threading.Lock()
        self.bytes_read = 0
        self.partial: dict[int, Parts] = {}  # parts of the blocks the ranges do not fill

    def _buffer(self) -> mmap.mmap:
        buf = getattr(self.local, "buf", None)
        if buf is None:
            buf = self.local.buf = mmap.mmap(-1, BLOCK_SIZE)
        return buf

    def read(self, block: Block, count: bool = True) -> bytes:
        """The block, masked; ``count``: a read of the copy (not of verify)."""
        offset = block.number * BLOCK_SIZE
        length = min(BLOCK_SIZE, self.size - offset)
        buf = self._buffer()
        view = memoryview(buf)
        try:
            read_exactly(self.fd, view, offset, length, "the source")
        finally:
            view.release()
        if count:
            if self.held is not None:
                self.held.touch(offset, length)
            with self.lock:
                self.bytes_read += length
        if block.parts == FULL and length == BLOCK_SIZE:  # the whole block is copied
            return buf[:BLOCK_SIZE]
        out = bytearray(BLOCK_SIZE)  # past the device's end: zeros, never the buffer's last block
        for lo, hi in block.parts:
            out[lo : min(hi, length)] = buf[lo : min(hi, length)]
        return bytes(out)

    def blocks(self, ranges: Extents) -> Iterator[Block]:
        """touched_blocks, remembering the parts of every block they do not fill (verify)."""
        for block in touched_blocks(ranges):
            if block.parts != FULL:
                self.partial[block.number] = block.parts
            yield block

    def again(self, index: int) -> bytes:
        """A block read again (verify), masked as it was for its put."""
        return self.read(Block(index, 0, self.partial.get(index, FULL)), count=False)


class _Opened(NamedTuple):
    fd: int
    size: int
    reader: MetaReader
    held: Optional[Held]
    plan: DiskPlan
    ranges: Extents


def _open(options: SnapshotOptions, opened: contextlib.ExitStack) -> _Opened:
    """The checks copy makes on the source, then its plan (with replay) and ranges."""
    if options.method == TRIM:
        raise Failure(NO_TRIM)
    if not 1 <= options.jobs <= 64:
        raise Failure(f"--jobs {options.jobs} is out of range: use 1 to 64")
    check_device(options.source, "source")
    blocks = load(options.source_blocks) if options.source_blocks else None
    fd = open_device(options.source, write=False)
    opened.callback(os.close, fd)
    reader = MetaReader(options.source)
    opened.callback(reader.close)
    size, sector = size_of(fd), sector_size(fd)
    held: Optional[Held] = None
    if blocks is not None:
        held = against_device(blocks, size, options.source)
        reader.limit(held)
    # No scratch: a btrfs partition is planned for the trim method, then copied raw here.
    plan = plan_disk(options.source, size, sector, options.method, True, reader, held, None)
    for part in plan.partitions:
        if part.method == TRIM:  # its extents are the whole partition (∩ held): raw's
            part.method, part.note = RAW, BTRFS_RAW
            log(f"partition {part.number}: {BTRFS_RAW}")
    return _Opened(fd, size, reader, held, plan, _direct_ranges(plan, sector, size))


def _put_all(
    client: Client, options: SnapshotOptions, dev: _Opened, source: Source
) -> "tuple[dict[int, bytes], str, str]":
    """Every non-zero touched block put, then CompleteSnapshot: (digests, status, checksum)."""
    log(f"putting the blocks of {options.source} into snapshot {options.snapshot_id}")
    progress = Progress("copy", total(dev.ranges))
    uploader = Uploader(client, options.snapshot_id, source.read, puts_in_flight(options.jobs))
    digests = uploader.run(source.blocks(dev.ranges), progress)
    checksum = aggregate_checksum(digests)
    status = client.complete_snapshot(options.snapshot_id, len(digests), checksum)
    log(f"snapshot {options.snapshot_id}: {len(digests)} blocks put; CompleteSnapshot: {status}")
    return digests, status, checksum


def copy_to_snapshot(
    options: SnapshotOptions, client: Optional[Client] = None
) -> "dict[str, object]":
    """Copy SOURCE into the started snapshot; the summary (copy's fields, ``target_bytes_written``
    = bytes put, plus ``targetSnapshotId`` and ``blocks_put``). Failure names the snapshot."""
    started = time.monotonic()
    snapshot_id = options.snapshot_id
    with contextlib.ExitStack() as opened:
        try:
            dev = _open(options, opened)
            source = Source(dev.fd, dev.size, dev.held)
            client = client or open_client()
            digests, status, checksum = _put_all(client, options, dev, source)
        except (Failure, ApiError) as exc:
            raise Failure(f"{left_pending(snapshot_id)}: {exc}") from exc
        except Exception as exc:
            raise Failure(f"{left_pending(snapshot_id)}: {type(exc).__name__}: {exc}") from exc
        parts = dev.plan.partitions
        if options.verify:
            check = Progress("verify", len(digests) * BLOCK_SIZE)
            try:
                workers = puts_in_flight(options.jobs)
                verify(client, snapshot_id, digests, workers, source.again, check)
            except (Failure, ApiError) as exc:
                why = f"snapshot {snapshot_id} completed but does not verify: {exc}"
                raise Failure(why) from exc
            status = "completed"
            for part in parts:
                part.fsck = FSCK_NOT_RUN
        held = dev.held
        return {
            "targetSnapshotId": snapshot_id,
            "source_bytes_read": source.bytes_read + dev.reader.bytes_read,
            "target_bytes_written": len(digests) * BLOCK_SIZE,
            "blocks_put": len(digests),
            "partitions": [p.summary() for p in parts],
            "verified": options.verify,
            "seconds": round(time.monotonic() - started, 3),
            "table": dev.plan.layout.table,
            "outside_partitions_bytes": total(dev.plan.outside),
            "held_blocks": held.blocks if held else None,
            "held_blocks_read": held.blocks_read() if held else None,
            "snapshot_status": status,
            "checksum": checksum,
            "retries": client.retries,
            "puts_in_flight": puts_in_flight(options.jobs),
        }
