"""Command line: ``copy``, ``inspect``, ``device``, ``summarize``. Stdout carries only results."""

import argparse
import json
import mmap
import os
import stat
import sys
import time
import traceback
from typing import Optional

from .blockdev import in_use, sector_size, size_of
from .copier import Copier, open_device
from .device import find_device
from .errors import Failure
from .extents import Extents, align, clip, normalize, total
from .plan import TRIM, MetaReader, PartPlan, plan_disk
from .progress import Progress, human, log
from .source_blocks import BlockList, Held, against_device, load
from .summary import summarize
from .trim import copy_trimmed, scratch_room
from .verify import fsck_all

HEAD = 1024 * 1024  # written last, so an unfinished target holds no recognisable table/superblock
ALIGN = 4096  # the failure mark's size
FAILED_MARK = b"SPARSECOPY-FAILED\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sparsecopy", description="Copy only the live data of a block device."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    copy = sub.add_parser("copy", help="copy SOURCE to the blank TARGET of the same size")
    copy.add_argument("source")
    copy.add_argument("target")
    copy.add_argument("--method", choices=("allocated", "trim"), default="allocated")
    copy.add_argument("--scratch", default="/var/tmp", help="directory for trim images")
    copy.add_argument("--jobs", type=int, default=16, help="reads in flight (1-64)")
    copy.add_argument("--verify", action="store_true", help="re-read and fsck the target")
    blocks_help = (
        "JSON (optionally gzipped) list of the 512 KiB blocks the source's snapshot holds "
        "(ListSnapshotBlocks: BlockSize, VolumeSize, Blocks and/or BlockRanges): "
        "nothing outside them is read or written"
    )
    copy.add_argument("--source-blocks", metavar="FILE", help=blocks_help)
    inspect = sub.add_parser("inspect", help="print the plan for SOURCE without writing")
    inspect.add_argument("source")
    inspect.add_argument("--source-blocks", metavar="FILE", help=blocks_help)
    device = sub.add_parser("device", help="print the block device of an attached EBS volume")
    device.add_argument("volume_id")
    device.add_argument("--device-name", help="the /dev/sdX name given at attachment (Xen)")
    summ = sub.add_parser(
        "summarize",
        help="print the Command document's one bounded JSON line for the copies' stdout files",
    )
    summ.add_argument("--source-volume-ids", required=True, help="comma list, job order")
    summ.add_argument("--target-volume-ids", required=True, help="comma list, job order")
    summ.add_argument("outputs", nargs="+", metavar="COPY_STDOUT", help="each copy's stdout file")
    return parser


def _summarize(args: argparse.Namespace) -> int:
    """Prints the success or the error line on stdout (exit 0 or 1), full details on stderr."""
    outputs = []
    for name in args.outputs:
        with open(name, encoding="utf-8", errors="replace") as f:
            outputs.append(f.read())
    code, line, details = summarize(
        args.source_volume_ids.split(","), args.target_volume_ids.split(","), outputs
    )
    for detail in details:
        log(detail)
    if code:
        log(f"error: {json.loads(line)['error']}")
    print(line, flush=True)
    return code


def _check_device(path: str, role: str) -> None:
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise Failure(f"{role} {path} does not exist: {exc.strerror}") from exc
    if not (stat.S_ISBLK(mode) or stat.S_ISREG(mode)):
        raise Failure(f"{role} {path} is not a block device")
    problem = in_use(path)
    if problem:
        raise Failure(f"{role} {problem}")


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


def _trim_only_where_it_fits(partitions: list[PartPlan], scratch: str) -> None:
    """With --method allocated, partitions without a parsed map (btrfs) go through a trimmed
    scratch image when it fits; otherwise every non-zero block is copied (never a failure)."""
    room = scratch_room(scratch)
    for part in partitions:
        if part.method == TRIM and part.size > room:
            part.raw(
                f"scratch {scratch} has {human(room)} free, too little to trim a "
                f"{human(part.size)} partition (pass --scratch): copying every non-zero block"
            )
            log(f"partition {part.number}: {part.note}")


def _check_scratch_room(partitions: list[PartPlan], scratch: str) -> None:
    """--method trim stages one partition at a time: fail before writing if one cannot fit."""
    room = scratch_room(scratch)
    for part in partitions:
        if part.method == TRIM and part.size > room:
            raise Failure(
                f"scratch directory {scratch} has {human(room)} free but partition "
                f"{part.number} ({human(part.size)}) may need it all for the trim method: "
                "pass --scratch on a larger disk"
            )


def _copy(args: argparse.Namespace) -> dict[str, object]:
    """Copy SOURCE to TARGET. With --source-blocks every read is needed ∩ held: the plan's
    ranges (plan_disk), the trim staging (copy_trimmed), the verify compare (the same ranges)
    and the metadata MetaReader parses (zeros where not held)."""
    started = time.monotonic()
    if not 1 <= args.jobs <= 64:
        raise Failure(f"--jobs {args.jobs} is out of range: use 1 to 64")
    if os.path.realpath(args.source) == os.path.realpath(args.target):
        raise Failure("source and target are the same device")
    _check_device(args.source, "source")
    _check_device(args.target, "target")
    if args.method == TRIM and not os.path.isdir(args.scratch):
        raise Failure(
            f"scratch directory {args.scratch} does not exist: create it or pass --scratch"
        )
    blocks: Optional[BlockList] = load(args.source_blocks) if args.source_blocks else None
    source_fd = open_device(args.source, write=False)
    target_fd = open_device(args.target, write=True)
    reader = MetaReader(args.source)
    writing = False
    try:
        size, target_size = size_of(source_fd), size_of(target_fd)
        if target_size < size:
            raise Failure(
                f"target is smaller than source ({target_size} < {size} bytes): "
                "create the target with the source's size"
            )
        held: Optional[Held] = None
        if blocks is not None:
            held = against_device(blocks, size, args.source)
            reader.limit(held)
        _check_blank(target_fd, target_size, args.target)
        plan = plan_disk(args.source, size, sector_size(source_fd), args.method, True, reader, held)
        if args.method != TRIM:
            _trim_only_where_it_fits(plan.partitions, args.scratch)
        else:
            _check_scratch_room(plan.partitions, args.scratch)
        direct: Extents = list(plan.outside)
        trimmed = [p for p in plan.partitions if p.method == TRIM]
        for part in plan.partitions:
            if part.method != TRIM:
                direct.extend(part.extents)
        # Sector-aligned (O_DIRECT) but no wider: widening to 4 KiB would pull free, dirty 1 KiB
        # blocks of small filesystems into the copy. With --source-blocks the extents are already
        # needed ∩ held: an end inside a listed block widens within that block (a sector divides
        # 512 KiB), an end on a block boundary is aligned, so no unlisted byte is added.
        ranges = align(normalize(direct), sector_size(source_fd), size)
        body, head = clip(ranges, HEAD, size), clip(ranges, 0, HEAD)
        on_read = held.touch if held else None
        copier = Copier(args.jobs, on_read=on_read)
        progress = Progress("copy", total(ranges))
        writing = True
        copier.copy(source_fd, target_fd, body, progress)
        read_extra = written_extra = 0
        for part in trimmed:
            src_read, written = copy_trimmed(
                part, source_fd, target_fd, args.scratch, args.jobs, args.verify, held
            )
            read_extra += src_read
            written_extra += written
        os.fsync(target_fd)
        copier.copy(source_fd, target_fd, head, progress)  # the table/superblock last
        os.fsync(target_fd)
        progress.maybe_report(force=True)
        verified = False
        if args.verify:
            check = Copier(args.jobs, on_read=on_read)
            check.compare(source_fd, target_fd, ranges, Progress("verify", total(ranges)))
            fsck_all(args.target, size, plan.partitions)
            verified = True
        return {
            "source_bytes_read": copier.bytes_read + read_extra + reader.bytes_read,
            "target_bytes_written": copier.bytes_written + written_extra,
            "partitions": [p.summary() for p in plan.partitions],
            "verified": verified,
            "seconds": round(time.monotonic() - started, 3),
            "table": plan.layout.table,
            "outside_partitions_bytes": total(plan.outside),
            "held_blocks": held.blocks if held else None,
            "held_blocks_read": held.blocks_read() if held else None,
        }
    except BaseException as exc:
        if writing:
            reason = str(exc) if isinstance(exc, Failure) else f"{type(exc).__name__}: {exc}"
            try:
                _mark_failed(target_fd, reason)
                log("target marked failed (first 4 KiB overwritten with SPARSECOPY-FAILED)")
            except OSError as mark_error:
                log(f"could not mark the target failed ({mark_error.strerror}): discard it")
        raise
    finally:
        reader.close()
        os.close(source_fd)
        os.close(target_fd)


def _inspect(args: argparse.Namespace) -> dict[str, object]:
    _check_device(args.source, "source")
    blocks = load(args.source_blocks) if args.source_blocks else None
    fd = open_device(args.source, write=False)
    reader = MetaReader(args.source)
    try:
        size = size_of(fd)
        held = against_device(blocks, size, args.source) if blocks else None
        if held:
            reader.limit(held)
        plan = plan_disk(args.source, size, sector_size(fd), "allocated", False, reader, held)
    finally:
        reader.close()
        os.close(fd)
    return {
        "source": args.source,
        "size": size,
        "table": plan.layout.table,
        "partitions": [p.summary() for p in plan.partitions],
        "outside_partitions_bytes": total(plan.outside),
        "held_blocks": held.blocks if held else None,
    }


def main(argv: Optional[list[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "device":
            print(find_device(args.volume_id, args.device_name), flush=True)
            return 0
        if args.command == "summarize":
            return _summarize(args)
        result = _copy(args) if args.command == "copy" else _inspect(args)
    except Failure as exc:
        log(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        log("error: interrupted")
        return 130
    except Exception as exc:
        if os.environ.get("SPARSECOPY_DEBUG"):
            traceback.print_exc()
        log(f"error: internal error: {type(exc).__name__}: {exc}")
        return 3
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
