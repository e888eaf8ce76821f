"""``job --target snapshot``: copy one source volume straight into an EBS snapshot that is already
started (StartSnapshot by start_compaction), through the EBS direct APIs, instead of onto a
target volume.

The snapshot sink of plan → blocks: the source is planned exactly as ``copy`` plans it (the
same checks, journal/log replay, the block list), and its block set (blocks.BlockSet) is the
one the volume sink writes. The copy streams: every block of the set is read from the source,
masked (blocks.Source: bytes outside the plan's ranges zeroed) and put, all-zero blocks
included (put_snapshot.Uploader: max(``jobs``, PUTS_IN_FLIGHT) puts in flight, ebs_direct's
retries). CompleteSnapshot follows only after every put succeeded. On any failure the snapshot
is never completed: it stays pending until StartSnapshot's Timeout ends it (or the workflow's
teardown deletes it) and the error says so.

``verify``: after CompleteSnapshot, wait for EBS to seal the snapshot, read every put block back
(GetSnapshotBlock) and compare it with the source read again and masked the same way. No
filesystem checker runs: it needs a block device, and the snapshot is not one (each
partition's ``fsck`` says so). The trim method needs a writable target volume: refused. A btrfs
partition, which ``allocated`` copies through the trim method, is copied raw (every held
block) instead."""

import contextlib
import os
import time
from collections.abc import Iterator
from typing import NamedTuple, Optional

from .blockdev import sector_size, size_of
from .blocks import FULL, Block, BlockSet, Parts, Source
from .copier import open_device
from .disk_copy import (
    DEFAULT_JOBS,
    check_device,
    check_jobs,
    check_whole_sectors,
    source_consistent,
)
from .ebs_direct import ApiError, Client, aggregate_checksum
from .errors import Failure
from .extents import total
from .plan import ALLOCATED, RAW, TRIM, DiskPlan, MetaReader, plan_disk
from .progress import Progress, log
from .put_snapshot import Uploader, open_client, verify
from .source_blocks import BLOCK_SIZE, Held, against_device, load

FSCK_NOT_RUN = "not checked: target is a snapshot (blocks read back and compared instead)"
NO_TRIM = (
    "method trim needs a writable target volume (it stages and fstrims partitions): "
    "use method allocated with a snapshot target, or target volume with method trim"
)
BTRFS_RAW = (
    "target is a snapshot: btrfs is copied by the trim method, which needs a writable target "
    "volume; copying every held block"
)
# Puts are latency-bound (AWS: ~100 ms a PutSnapshotBlock; its ~500 MB/s example uses ~100
# connections; the per-snapshot quota is 1,000 puts/s): at least this many are kept in flight,
# --jobs more (each worker also reads its block from the source first).
PUTS_IN_FLIGHT = 64


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


class Remembered:
    """The set's blocks as they are put, remembering the parts of every block they do not fill,
    so that verify reads each block again masked as it was put."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.partial: dict[int, Parts] = {}

    def blocks(self, chosen: BlockSet) -> Iterator[Block]:
        for block in chosen.blocks():
            if block.parts != FULL:
                self.partial[block.number] = block.parts
            yield block

    def again(self, index: int) -> bytes:
        """A block read again (verify), masked as it was for its put."""
        return self.source.read(Block(index, 0, self.partial.get(index, FULL)), count=False)


class _Opened(NamedTuple):
    fd: int
    size: int
    reader: MetaReader
    held: Optional[Held]
    plan: DiskPlan
    chosen: BlockSet


def _open(options: SnapshotOptions, opened: contextlib.ExitStack) -> _Opened:
    """The checks copy makes on the source, then its plan (with replay) and ranges."""
    if options.method == TRIM:
        raise Failure(NO_TRIM)
    check_jobs(options.jobs)
    check_device(options.source, "source")
    blocks = load(options.source_blocks) if options.source_blocks else None
    fd = open_device(options.source, write=False)
    opened.callback(os.close, fd)
    reader = MetaReader(options.source)
    opened.callback(reader.close)
    size, sector = size_of(fd), sector_size(fd)
    check_whole_sectors(size, options.source)
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
    return _Opened(fd, size, reader, held, plan, BlockSet.of(plan, sector, size))


class _Put(NamedTuple):
    digests: "dict[int, bytes]"
    zero_blocks: int
    status: str  # CompleteSnapshot's
    checksum: str


def _put_all(client: Client, options: SnapshotOptions, dev: _Opened, source: Remembered) -> _Put:
    """Every block of the set put, zeros included, then CompleteSnapshot."""
    log(f"putting the blocks of {options.source} into snapshot {options.snapshot_id}")
    progress = Progress("copy", dev.chosen.weight)
    read = source.source.read
    uploader = Uploader(client, options.snapshot_id, read, puts_in_flight(options.jobs))
    digests = uploader.run(source.blocks(dev.chosen), progress)
    checksum = aggregate_checksum(digests)
    status = client.complete_snapshot(options.snapshot_id, len(digests), checksum)
    zeros = uploader.zero_blocks
    log(
        f"snapshot {options.snapshot_id}: {len(digests)} blocks put ({zeros} all zeros); "
        f"CompleteSnapshot: {status}"
    )
    return _Put(digests, zeros, status, checksum)


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
            source = Remembered(Source(dev.fd, dev.size, dev.held))
            client = client or open_client()
            put = _put_all(client, options, dev, source)
            digests, status = put.digests, put.status
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
            "sourceConsistent": source_consistent(dev.plan),
            "targetSnapshotId": snapshot_id,
            "source_bytes_read": source.source.bytes_read + dev.reader.bytes_read,
            "target_bytes_written": len(digests) * BLOCK_SIZE,
            "blocks_put": len(digests),
            "blocks_written": len(digests),
            "zero_blocks": put.zero_blocks,
            "partitions": [p.summary() for p in parts],
            "verified": options.verify,
            "seconds": round(time.monotonic() - started, 3),
            "table": dev.plan.layout.table,
            "outside_partitions_bytes": total(dev.plan.outside),
            "held_blocks": held.blocks if held else None,
            "held_blocks_read": held.blocks_read() if held else None,
            "snapshot_status": status,
            "checksum": put.checksum,
            "retries": client.retries,
            "puts_in_flight": puts_in_flight(options.jobs),
        }
