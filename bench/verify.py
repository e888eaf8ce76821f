"""Is a target a faithful copy? A method that writes few chunks but loses data must not win."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterable
from pathlib import Path

from bench.allocation import Allocation
from bench.blocks import chunk_extents, intersect
from bench.disk import DELETED, Disk, Part
from bench.system import BenchError, Resources
from devkit.chunks import Extent, complement, data_extents, merge, split_by_chunk

FSCK = {
    "ext4": ["e2fsck", "-f", "-n"],
    "xfs": ["xfs_repair", "-n"],
    "ntfs": ["ntfsfix", "--no-action"],
}
READ_ONLY_MOUNT = {"ext4": ["ro"], "xfs": ["ro", "nouuid"], "ntfs": ["ro"]}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb", buffering=0) as f:
        while block := f.read(4 * 1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def outside_filesystems(needed: Iterable[Extent], parts: Iterable[Part], size: int) -> list[Extent]:
    """The needed ranges no filesystem partition covers: tables, gaps, swap headers, raw data."""
    return intersect(needed, complement([(p.start, p.size) for p in parts], 0, size))


def byte_differences(source: Path, target: Path, ranges: Iterable[Extent]) -> list[str]:
    """Where the two images differ inside `ranges` (only where either holds data: holes are
    zeros on both), one message per 512 KiB chunk, at most five."""
    with_data = merge(data_extents(source) + data_extents(target))
    problems: list[str] = []
    with source.open("rb") as src, target.open("rb") as dst:
        for _, (start, length) in split_by_chunk(intersect(ranges, with_data)):
            src.seek(start)
            dst.seek(start)
            if src.read(length) != dst.read(length):
                problems.append(f"bytes {start}..{start + length} differ")
                if len(problems) == 5:
                    problems.append("(more not listed)")
                    break
    return problems


def check_filesystem(
    disk: Disk, part: Part, target_image: Path, mount_dir: Path, res: Resources
) -> list[str]:
    """fsck in no-change mode, then the live files' SHA-256 and the deleted files' absence."""
    problems: list[str] = []
    device = res.attach(target_image, offset=part.start, size=part.size, read_only=True)
    try:
        fsck = subprocess.run([*FSCK[part.kind], device], capture_output=True, text=True)
        if fsck.returncode != 0:
            tail = " | ".join((fsck.stdout + fsck.stderr).strip().splitlines()[-2:])
            problems.append(f"{FSCK[part.kind][0]} exited {fsck.returncode}: {tail}")
        try:
            res.mount(device, mount_dir, part.kind, READ_ONLY_MOUNT[part.kind])
        except BenchError as err:
            return [*problems, f"partition {part.number} does not mount: {err}"]
        try:
            for name, expected in sorted(disk.live_files.get(part.number, {}).items()):
                path = mount_dir / name
                if not path.is_file():
                    problems.append(f"{name} is missing")
                elif file_sha256(path) != expected:
                    problems.append(f"{name} has different content")
            if part.number in disk.live_files:
                problems += [
                    f"deleted {name} is back" for name in DELETED if (mount_dir / name).exists()
                ]
        finally:
            res.umount(mount_dir)
    finally:
        res.detach(device)
    return problems


def check_target(
    disk: Disk,
    alloc: Allocation,
    target_image: Path,
    mount_dir: Path,
    res: Resources,
    held: set[int] | None = None,
) -> list[str]:
    """Problems found on the target (empty = faithful): every needed byte outside the
    filesystems (tables, gaps, swap header, raw and never-written partitions) and ext4's backup
    superblocks and group descriptors equal to the source's; each filesystem fsck-clean with
    its live files intact and deleted files gone.

    `held`: compare bytes only inside these chunks of the source (for an encrypted restore,
    whose absent blocks read as random bytes: outside what the source holds, its own restore
    reads random bytes too, so nothing there can be compared)."""
    filesystems = disk.layout.filesystems()
    ranges = outside_filesystems(alloc.extents, filesystems, disk.layout.size)
    verbatim = alloc.verbatim
    if held is not None:
        ranges, verbatim = (intersect(r, chunk_extents(held)) for r in (ranges, verbatim))
    problems = byte_differences(disk.image, target_image, ranges)
    backups = byte_differences(disk.image, target_image, verbatim)
    if backups:
        problems.append(f"ext4 backup superblocks/group descriptors differ: {backups[0]}, ...")
    for part in filesystems:
        problems += check_filesystem(disk, part, target_image, mount_dir, res)
    return problems
