"""Decide, per partition, what to copy: the filesystem's allocated ranges, a header, every
non-zero block, or the trim method. With ``recover`` the journal/log is replayed first (the only
write to SOURCE).

Every method decision lives here, including the trim method's scratch policy: ``--method trim``
stops before writing when a partition cannot be staged in ``--scratch``, while ``--method
allocated`` copies such a btrfs partition raw instead (never a failure)."""

import os
import struct
from typing import Callable, NamedTuple, Optional

from . import consistency, fs_ext, fs_fat, fs_ntfs, fs_xfs
from .blockdev import flush, partition_device
from .errors import Failure
from .extents import Extents, complement, intersect, normalize, shift, total
from .partitions import Layout, Partition, read_layout
from .probe import detect
from .progress import human, log
from .replayed import LogWatch, block_count, unlisted
from .source_blocks import Held

ALLOCATED, RAW, HEADER, TRIM = "allocated", "raw", "header", "trim"
METHODS = (ALLOCATED, TRIM)  # what --method accepts
Reader = Callable[[int, int], bytes]
KERNEL_TRIMMABLE = ("ext4", "xfs", "btrfs")


def scratch_room(directory: str) -> int:
    """Bytes free for staging trim images in ``directory`` (0 when it does not exist)."""
    try:
        free = os.statvfs(directory)
    except OSError:
        return 0
    return free.f_bavail * free.f_frsize


def check_scratch(method: str, scratch: str) -> None:
    """Before any device is opened: --method trim stages partitions in ``scratch``."""
    if method == TRIM and not os.path.isdir(scratch):
        raise Failure(f"scratch directory {scratch} does not exist: create it or pass --scratch")


class Scratch(NamedTuple):
    """Where trim images are staged and how many bytes it has free."""

    directory: str
    room: int

    @classmethod
    def of(cls, directory: str) -> "Scratch":
        return cls(directory, scratch_room(directory))


class PartPlan:
    """One partition's plan; ``extents`` are absolute byte ranges of the disk."""

    def __init__(self, part: Partition, fs: str) -> None:
        self.number = part.number
        self.start = part.start
        self.size = part.size
        self.fs = fs
        self.method = RAW
        self.extents: Extents = [(part.start, part.size)]
        self.note = ""
        self.fsck = ""
        self.needed: Optional[int] = None  # with --source-blocks: bytes needed before ∩ held
        # A journal/log replay wrote to this partition of the source, maybe into blocks the
        # list does not hold: ``written`` says where (disk bytes; None: it could not be told).
        self.rewritten = False
        self.written: Optional[Extents] = None
        # What the filesystem's own checker said of the source (consistency.py): None when it
        # did not run, else whether it found nothing; ``findings`` is what it found.
        self.consistent: Optional[bool] = None
        self.findings: list[str] = []
        self.judge = ""  # who found them: a checker's name (verify reuses its findings), ...

    def use(self, method: str, extents: Extents, note: str = "") -> None:
        self.method = method
        self.extents = extents
        self.note = note

    def raw(self, why: str) -> None:
        self.use(RAW, [(self.start, self.size)], why)

    def judged(self, device: str) -> bool:
        """Run the filesystem's checker on the source partition: True when it finds nothing.
        Else the map is not trusted (a block it calls free may still be used): ``disputed``."""
        found = consistency.check(self.fs, device)
        if found is not None:
            self.disputed(consistency.CHECKERS[self.fs][0], found)
        self.consistent = found is None
        self.judge = consistency.CHECKERS[self.fs][0]
        return found is None

    def disputed(self, judge: str, found: "list[str]") -> None:
        """The source's own structures dispute its map: copied raw, the note says what was
        found and what to do."""
        self.consistent = False
        self.findings = found
        self.judge = judge
        self.raw(
            f"source filesystem inconsistent, {judge} found: {consistency.describe(found)}; "
            "its map is not trusted, every block copied raw: check and repair the source "
            "filesystem (fsck)"
        )

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {
            "number": self.number,
            "start": self.start,
            "size": self.size,
            "fs": self.fs,
            "method": self.method,
            "allocated_bytes": total(self.extents),
        }
        if self.needed is not None:
            out["needed_bytes"] = self.needed
        if self.note:
            out["note"] = self.note
        if self.fsck:
            out["fsck"] = self.fsck
        if self.consistent is not None:
            out["consistent"] = self.consistent
        return out


class DiskPlan(NamedTuple):
    layout: Layout
    partitions: list[PartPlan]
    outside: Extents  # bytes no partition covers: tables, boot-loader gaps, EBRs


class MetaReader:
    """Buffered reads for parsing metadata, counted as source bytes read.

    With ``held`` (--source-blocks) only the listed blocks are read; every other byte is served
    as the zero it is on a volume restored from that snapshot."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.bytes_read = 0
        self.held: Optional[Held] = None

    def limit(self, held: Held) -> None:
        self.held = held
        # No readahead: it would pull the pages after a listed block's end into the cache.
        # Page reads never cross a 512 KiB block boundary.
        os.posix_fadvise(self.fd, 0, 0, os.POSIX_FADV_RANDOM)

    def _read_held(self, held: Held, start: int, length: int) -> bytes:
        end = min(start + length, held.size)
        if end <= start:
            return b""
        out = bytearray(end - start)
        for lo, count in held.clip([(start, end - start)]):
            data = os.pread(self.fd, count, lo)
            out[lo - start : lo - start + len(data)] = data
            self.bytes_read += len(data)
            held.touch(lo, len(data))
        return bytes(out)

    def at(self, base: int) -> Callable[[int, int], bytes]:
        def read(offset: int, length: int) -> bytes:
            if self.held is not None:
                return self._read_held(self.held, base + offset, length)
            data = os.pread(self.fd, length, base + offset)
            self.bytes_read += len(data)
            return data

        return read

    def close(self) -> None:
        os.close(self.fd)


def _with_tail(allocated: Extents, fs_bytes: int, size: int, start: int) -> Extents:
    """Allocated ranges plus whatever lies after the filesystem's end (backup boot sectors,
    unused partition space: unknown to the filesystem, so copied whole)."""
    tail = [(fs_bytes, size - fs_bytes)] if size > fs_bytes else []
    clipped = [(s, min(n, size - s)) for s, n in allocated if s < size]
    return shift(clipped + tail, start)


def _plan_ext(plan: PartPlan, device: str, recover: bool) -> None:
    try:
        pending = fs_ext.needs_recovery(device)
        if pending and recover:
            plan.rewritten = True
            written = fs_ext.journal_writes(device)  # the journal's record, before it is replayed
            failure = fs_ext.replay_journal(device)
            if failure:
                plan.raw(f"{failure}; copying every non-zero block")
                return
            plan.written = None if written is None else shift(written, plan.start)
        try:
            ext = fs_ext.read_map(device)
        except (Failure, ValueError) as exc:
            if not (pending and not recover):
                raise
            # inspect: before replay, bitmaps and their checksums may legitimately disagree
            plan.use(
                ALLOCATED,
                [(plan.start, plan.size)],
                f"the map cannot be read before journal replay ({exc}); "
                "allocated_bytes shown is the partition size",
            )
            return
    except (Failure, ValueError) as exc:
        # e.g. features newer than this instance's e2fsprogs: no map, so copy everything
        plan.raw(f"ext map unreadable ({exc}); copying every non-zero block")
        return
    allocated = _with_tail(ext.allocated, ext.fs_bytes, plan.size, plan.start)
    if pending and not recover:
        plan.use(ALLOCATED, allocated, "map read before journal replay; copy replays it first")
    elif ext.errors:
        # the kernel found the filesystem damaged and said so in the superblock
        plan.disputed("the kernel", [f"errors, recorded in the superblock ({ext.note})"])
    elif not ext.clean:
        plan.raw(f"{ext.note}: block bitmaps untrusted, copying every non-zero block")
    elif plan.judged(device):
        plan.use(ALLOCATED, allocated, "journal replayed" if pending else "")


def _replay_xfs(plan: PartPlan, device: str, held: Optional[Held]) -> str:
    """Mount and unmount; with a block list, also find what the mount wrote (the log's record
    of the buffers it replays, and the log blocks that changed). "" or why it failed."""
    plan.rewritten = True
    if held is None:
        return fs_xfs.replay_log(device)
    written = fs_xfs.log_writes(device)
    watch = LogWatch(device, plan.start, fs_xfs.log_range(device), held)
    failure = fs_xfs.replay_log(device)
    if not failure and written is not None:
        plan.written = normalize(shift(written, plan.start) + watch.changed())
    return failure


def _plan_xfs(plan: PartPlan, device: str, recover: bool, held: Optional[Held]) -> None:
    if recover and fs_xfs.log_is_clean(device):
        # nothing to replay: not mounted, so the source stays as the snapshot holds it (a mount
        # would write log blocks, also where a --source-blocks list holds nothing)
        log(f"partition {plan.number}: xfs log is clean: not mounted")
    elif recover:
        failure = _replay_xfs(plan, device, held)
        if failure:
            plan.raw(f"{failure}; free-space map untrusted, copying every non-zero block")
            return
    try:
        xfs = fs_xfs.read_map(device)
    except (Failure, ValueError, KeyError) as exc:
        if not recover:  # inspect: an unreplayed log may keep xfs_db from reading the map
            plan.use(
                ALLOCATED,
                [(plan.start, plan.size)],
                f"the map could not be read before log replay ({exc}); "
                "allocated_bytes shown is the partition size",
            )
            return
        plan.raw(f"xfs_db could not read the free-space map ({exc}); copying every non-zero block")
        return
    replayed = recover or fs_xfs.log_is_clean(device)
    # xfs_repair refuses a log that needs replay: inspect judges a crashed XFS when copy does
    if replayed and not plan.judged(device):
        return
    note = "" if replayed else "map read before log replay; copy mounts and unmounts first"
    plan.use(ALLOCATED, _with_tail(xfs.allocated, xfs.fs_bytes, plan.size, plan.start), note)


def _plan_parsed(plan: PartPlan, read: Callable[[int, int], bytes]) -> None:
    try:
        if plan.fs == "ntfs":
            ntfs = fs_ntfs.read_map(read)
            if not ntfs.clean:
                plan.raw(f"{ntfs.note}: copying every non-zero block")
                return
            if ntfs.unmarked:
                plan.disputed("the MFT's runlists", [_unmarked(ntfs.unmarked)])
                return
            plan.consistent = True
            allocated, fs_bytes = ntfs.allocated, ntfs.fs_bytes
        else:
            fat = fs_fat.read_map(read)
            allocated, fs_bytes = fat.allocated, fat.fs_bytes
    except (ValueError, IndexError, struct.error) as exc:
        plan.raw(f"{plan.fs} metadata not understood ({exc}); copying every non-zero block")
        return
    plan.use(ALLOCATED, _with_tail(allocated, fs_bytes, plan.size, plan.start))


def _unmarked(extents: Extents) -> str:
    first = ", ".join(f"bytes {start}-{start + length - 1}" for start, length in extents[:3])
    more = f" and {len(extents) - 3} more ranges" if len(extents) > 3 else ""
    return f"{total(extents)} bytes in use that $Bitmap calls free ({first}{more})"


def _swap_header(plan: PartPlan, read: Callable[[int, int], bytes]) -> None:
    for page in (4096, 65536):
        if read(page - 10, 10) in (b"SWAPSPACE2", b"SWAP-SPACE"):
            plan.use(HEADER, [(plan.start, page)], "swap: only the header page is live data")
            return
    plan.raw("swap signature moved; copying every non-zero block")


def _plan_trim(plan: PartPlan, method: str, scratch: Optional[Scratch]) -> None:
    """The trim method stages one partition at a time: ``scratch`` must hold the partition."""
    if scratch is None or plan.size <= scratch.room:
        plan.use(TRIM, [(plan.start, plan.size)], "copied through a trimmed scratch image")
    elif method == TRIM:
        raise Failure(
            f"scratch directory {scratch.directory} has {human(scratch.room)} free but partition "
            f"{plan.number} ({human(plan.size)}) may need it all for the trim method: "
            "pass --scratch on a larger disk"
        )
    else:
        plan.raw(
            f"scratch {scratch.directory} has {human(scratch.room)} free, too little to trim a "
            f"{human(plan.size)} partition (pass --scratch): copying every non-zero block"
        )


def _limit(plan: PartPlan, held: Held) -> None:
    """needed ∩ (held + what a replay wrote): a block the replay wrote is the replay's output,
    needed whether the list holds it or not; any other unlisted block reads as zeros or random
    bytes on the source and is left out. When the replay's writes could not be told, every
    needed byte is read (the note says so)."""
    plan.needed = total(plan.extents)
    why = ""
    if plan.rewritten and plan.written is None:
        why = "replay wrote to the source where it could not be told: needed bytes read whole"
    elif plan.rewritten and plan.written is not None:
        replayed = intersect(plan.extents, plan.written)
        extra = block_count(unlisted(replayed, held))
        plan.extents = normalize(held.clip(plan.extents) + replayed)
        why = f"the replay wrote {extra} needed block(s) the list does not hold: copied"
    else:
        plan.extents = held.clip(plan.extents)
    if why:
        plan.note = f"{plan.note}; {why}" if plan.note else why


def _plan_partition(
    plan: PartPlan, source: str, disk_size: int, recover: bool, read: Reader, held: Optional[Held]
) -> None:
    """A partition's map: ext4/XFS through their tools (after replay), NTFS/FAT parsed here."""
    fs = plan.fs
    if fs in ("ext4", "xfs"):
        # Replay and dumpe2fs/xfs_db can take a while on big filesystems: say what runs.
        log(f"partition {plan.number}: {fs}: {'replaying, then ' if recover else ''}reading map")
        with partition_device(
            source, plan.start, plan.size, disk_size, read_only=not recover
        ) as device:
            if fs == "ext4":
                _plan_ext(plan, device, recover)
            else:
                _plan_xfs(plan, device, recover, held)
    elif fs in ("ntfs", "vfat"):
        _plan_parsed(plan, read)
    elif fs == "swap":
        _swap_header(plan, read)
    else:
        plan.raw(f"no allocation map for {fs} data: copying every non-zero block")


def plan_disk(
    source: str,
    disk_size: int,
    sector: int,
    method: str,
    recover: bool,
    reader: MetaReader,
    held: Optional[Held] = None,
    scratch: Optional[Scratch] = None,
) -> DiskPlan:
    """Read the table and every partition's allocation map; with ``held`` (--source-blocks)
    every plan becomes needed ∩ held. The external tools (dumpe2fs, e2fsck, xfs_db, xfs_logprint)
    read the source themselves, listed blocks or not: only their metadata reads. Without
    ``scratch`` (inspect) the trim method is planned whatever room it would need."""
    layout = read_layout(reader.at(0), disk_size, sector)
    if layout.problem:
        log(f"partition table ignored ({layout.problem}): copying the disk as unknown data")
    plans: list[PartPlan] = []
    for part in layout.partitions:
        read = reader.at(part.start)
        plan = PartPlan(part, detect(read, part.size))
        plans.append(plan)
        if plan.fs in KERNEL_TRIMMABLE and (method == TRIM or plan.fs == "btrfs"):
            _plan_trim(plan, method, scratch)
        else:
            _plan_partition(plan, source, disk_size, recover, read, held)
        if held is not None:
            _limit(plan, held)
        log(
            f"partition {plan.number}: {plan.fs}, method {plan.method}, "
            f"{human(total(plan.extents))} to read{'; ' + plan.note if plan.note else ''}"
        )
    if recover:
        flush(source)
    outside = complement([(p.start, p.size) for p in layout.partitions], 0, disk_size)
    if held is not None:
        outside = held.clip(outside)
    return DiskPlan(layout, plans, outside)
