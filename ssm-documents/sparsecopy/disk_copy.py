"""``copy``: SOURCE onto the blank TARGET of the same size: plan (plan.py) → blocks (blocks.py)
→ the volume sink (volume_sink.py), with the checks before, the failure mark and the first MiB
written last.

With a block list (``--source-blocks``) every read is needed ∩ held: the blocks' ranges
(plan_disk), the trim staging (copy_trimmed), the verify compare (the same blocks) and the
metadata MetaReader parses (zeros where not held)."""

import contextlib
import mmap
import os
import stat
import time
from typing import Callable, NamedTuple, Optional, TypeVar

from .blockdev import in_use, sector_size, size_of
from .blocks import BlockSet, Source
from .copier import open_device
from .errors import Failure
from .extents import total
from .plan import ALLOCATED, TRIM, DiskPlan, MetaReader, Scratch, check_scratch, plan_disk
from .progress import Progress, log
from .shared import JOBS_DEFAULT, JOBS_MAX, JOBS_MIN
from .source_blocks import BlockList, Held, against_device, load
from .trim import Trimmed, copy_trimmed, staged_extents
from .verify import fsck_all
from .volume_sink import VolumeSink, Written

HEAD = 1024 * 1024  # written last, so an unfinished target holds no recognisable table/superblock
ALIGN = 4096  # the failure mark's size
FAILED_MARK = b"SPARSECOPY-FAILED\n"
DEFAULT_SCRATCH = "/var/tmp"
DEFAULT_JOBS = JOBS_DEFAULT
T = TypeVar("T")


class CopyOptions(NamedTuple):
    source: str
    target: str
    method: str = ALLOCATED
    scratch: str = DEFAULT_SCRATCH
    jobs: int = DEFAULT_JOBS
    verify: bool = False
    source_blocks: Optional[str] = None  # the block list file


class _Devices(NamedTuple):
    """The open source and target and what the copy learnt about them before writing."""

    source_fd: int
    target_fd: int
    reader: MetaReader
    size: int
    sector: int
    held: Optional[Held]


def check_device(path: str, role: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise Failure(f"{role} {path} does not exist: {exc.strerror}") from exc
    if not (stat.S_ISBLK(mode) or stat.S_ISREG(mode)):
        raise Failure(f"{role} {path} is not a block device")
    problem = in_use(path)
    if problem:
        raise Failure(f"{role} {problem}")


def check_whole_sectors(size: int, path: str) -> None:
    """A volume is whole 512-byte sectors; an image file may not be (it would fail the first
    sector-aligned read with a bare 'Invalid argument')."""
    if size % 512:
        raise Failure(
            f"source {path} is {size} bytes, not a whole number of 512-byte sectors, so it is "
            "not the image of a volume (an EBS volume always is): pad the image to a multiple "
            f"of 512 bytes (truncate -s %512 {path}) and copy it again"
        )


def _read_aligned(fd: int, offset: int, length: int) -> bytes:
    buf = mmap.mmap(-1, length)
    try:
        n = os.preadv(fd, [buf], offset)
        return buf[:n]
    finally:
        buf.close()


def _check_blank(fd: int, size: int, path: str) -> None:
    span = min(HEAD, size)
    for offset in (0, max(size - span, 0)):
        if _read_aligned(fd, offset, span).strip(b"\0"):
            raise Failure(
                f"target {path} is not blank (data at byte {offset}..{offset + span}): "
                "copy only onto a new, never-written volume"
            )


def _mark_failed(fd: int, reason: str) -> None:
    buf = mmap.mmap(-1, ALIGN)
    try:
        buf.write((FAILED_MARK + reason.encode(errors="replace"))[: ALIGN - 1] + b"\n")
        os.pwritev(fd, [buf], 0)
        os.fsync(fd)
    finally:
        buf.close()


def _marking_failure(target_fd: int, write: Callable[[], T]) -> T:
    """Runs ``write``; if it fails, the target's first 4 KiB say so (no table, no superblock)."""
    try:
        return write()
    except BaseException as exc:
        reason = str(exc) if isinstance(exc, Failure) else f"{type(exc).__name__}: {exc}"
        try:
            _mark_failed(target_fd, reason)
            log("target marked failed (first 4 KiB overwritten with SPARSECOPY-FAILED)")
        except OSError as mark_error:
            log(f"could not mark the target failed ({mark_error.strerror}): discard it")
        raise


def check_jobs(jobs: int) -> None:
    if not JOBS_MIN <= jobs <= JOBS_MAX:
        raise Failure(f"--jobs {jobs} is out of range: use {JOBS_MIN} to {JOBS_MAX}")


def _preflight(options: CopyOptions) -> Optional[BlockList]:
    """Every check that needs no open device; the block list, parsed."""
    check_jobs(options.jobs)
    if os.path.realpath(options.source) == os.path.realpath(options.target):
        raise Failure("source and target are the same device")
    check_device(options.source, "source")
    check_device(options.target, "target")
    check_scratch(options.method, options.scratch)
    return load(options.source_blocks) if options.source_blocks else None


def _examine(
    options: CopyOptions,
    source_fd: int,
    target_fd: int,
    reader: MetaReader,
    blocks: Optional[BlockList],
) -> _Devices:
    """Sizes, the block list against the source, and a blank target: nothing written yet."""
    size, target_size = size_of(source_fd), size_of(target_fd)
    check_whole_sectors(size, options.source)
    if target_size < size:
        raise Failure(
            f"target is smaller than source ({target_size} < {size} bytes): "
            "create the target with the source's size"
        )
    held: Optional[Held] = None
    if blocks is not None:
        held = against_device(blocks, size, options.source)
        reader.limit(held)
    _check_blank(target_fd, target_size, options.target)
    return _Devices(source_fd, target_fd, reader, size, sector_size(source_fd), held)


def _write(options: CopyOptions, dev: _Devices, plan: DiskPlan, chosen: BlockSet) -> Written:
    """The copy itself: plan → blocks → the volume sink, the trim partitions through their
    scratch images, the first MiB (table, superblock) last."""
    source = Source(dev.source_fd, dev.size, dev.held)
    trims = [part for part in plan.partitions if part.method == TRIM]
    sink = VolumeSink(source, dev.target_fd, options.jobs, [(p.start, p.size) for p in trims])
    # every source byte read: the blocks' ranges + trim staging (its write-back is its own phase)
    staged = sum(total(staged_extents(part, dev.held)) for part in trims)
    progress = Progress("copy", chosen.weight + staged)
    sink.write(chosen.blocks(first=HEAD), progress)
    trimmed = []
    for part in trims:
        trimmed.append(
            copy_trimmed(
                part,
                dev.source_fd,
                dev.target_fd,
                options.scratch,
                options.jobs,
                options.verify,
                progress,
                dev.held,
            )
        )
    os.fsync(dev.target_fd)
    sink.write(chosen.blocks(end=HEAD), progress)
    os.fsync(dev.target_fd)
    progress.maybe_report(force=True)
    if options.verify:
        check = Progress("verify", chosen.weight)
        sink.compare(dev.target_fd, chosen.blocks(), check)
        check.maybe_report(force=True)
        fsck_all(options.source, options.target, dev.size, plan.partitions)
    return _written(sink, trimmed)


def _written(sink: VolumeSink, trimmed: "list[Trimmed]") -> Written:
    """The totals of the sink and the trimmed partitions, a block both wrote counted once (all
    zeros only when both wrote zeros into it)."""
    zeros = dict(sink.edges)  # the sink's blocks next to a trimmed partition
    blocks, zero_blocks = sink.blocks_written, sink.zero_blocks
    for done in trimmed:
        for index, zero in done.blocks.items():
            if index in zeros:
                zero_blocks -= zeros[index]
                zeros[index] = zeros[index] and zero
            else:
                blocks += 1
                zeros[index] = zero
            zero_blocks += zeros[index]
    return Written(
        sink.source.bytes_read + sum(done.bytes_read for done in trimmed),
        sink.bytes_written + sum(done.bytes_written for done in trimmed),
        blocks,
        zero_blocks,
    )


def _copy_open(options: CopyOptions, dev: _Devices, started: float) -> "dict[str, object]":
    scratch = Scratch.of(options.scratch)
    plan = plan_disk(
        options.source, dev.size, dev.sector, options.method, True, dev.reader, dev.held, scratch
    )
    chosen = BlockSet.of(plan, dev.sector, dev.size)
    done = _marking_failure(dev.target_fd, lambda: _write(options, dev, plan, chosen))
    held = dev.held
    return {
        "sourceConsistent": source_consistent(plan),
        "source_bytes_read": done.bytes_read + dev.reader.bytes_read,
        "target_bytes_written": done.bytes_written,
        "blocks_written": done.blocks_written,
        "zero_blocks": done.zero_blocks,
        "partitions": [p.summary() for p in plan.partitions],
        "verified": options.verify,
        "seconds": round(time.monotonic() - started, 3),
        "table": plan.layout.table,
        "outside_partitions_bytes": total(plan.outside),
        "held_blocks": held.blocks if held else None,
        "held_blocks_read": held.blocks_read() if held else None,
    }


def source_consistent(plan: DiskPlan) -> Optional[bool]:
    """False when a filesystem's own checker found the source inconsistent (its partitions are
    copied raw, their notes say what was found); True when every checker that ran found
    nothing; None when none ran."""
    judged = [p.consistent for p in plan.partitions if p.consistent is not None]
    return all(judged) if judged else None


def copy_disk(options: CopyOptions) -> "dict[str, object]":
    """Copy SOURCE to TARGET; the summary ``copy`` prints. Failure says what to do."""
    started = time.monotonic()
    blocks = _preflight(options)
    with contextlib.ExitStack() as opened:
        source_fd = open_device(options.source, write=False)
        opened.callback(os.close, source_fd)
        target_fd = open_device(options.target, write=True)
        opened.callback(os.close, target_fd)
        reader = MetaReader(options.source)
        opened.callback(reader.close)
        dev = _examine(options, source_fd, target_fd, reader, blocks)
        return _copy_open(options, dev, started)


def inspect_disk(source: str, blocks_file: Optional[str] = None) -> "dict[str, object]":
    """The plan of SOURCE, read-only (no replay), and what a copy would read and store: the
    512 KiB blocks its ranges touch (docs/workflow.md, "Dry run")."""
    check_device(source, "source")
    blocks = load(blocks_file) if blocks_file else None
    fd = open_device(source, write=False)
    reader = MetaReader(source)
    try:
        size, sector = size_of(fd), sector_size(fd)
        check_whole_sectors(size, source)
        held = against_device(blocks, size, source) if blocks else None
        if held:
            reader.limit(held)
        plan = plan_disk(source, size, sector, ALLOCATED, False, reader, held)
    finally:
        reader.close()
        os.close(fd)
    parts = plan.partitions
    chosen = BlockSet.of(plan, sector, size, with_trim=True)
    return {
        "sourceConsistent": source_consistent(plan),
        "source": source,
        "size": size,
        "table": plan.layout.table,
        "partitions": [p.summary() for p in parts],
        "outside_partitions_bytes": total(plan.outside),
        "held_blocks": held.blocks if held else None,
        "live_bytes": total(plan.outside) + sum(total(p.extents) for p in parts),
        "bytes_to_read": chosen.weight,
        "predicted_blocks": chosen.block_count,
    }
