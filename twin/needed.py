"""Which 512 KiB blocks of a source disk the filesystem needs, found without sparsecopy: the
blocks every regular file's data occupies, as the kernel reports them (FIEMAP on the mounted
recovered source), zero-filled files included, and an XFS's internal log (xfs_db: log recovery
reads all of it to find its head). It is a lower bound of "needed": other metadata is left to
fsck on the restores (emulator/encryption.py makes an absent metadata block read as garbage
there), and filesystems without FIEMAP here (NTFS through FUSE, FAT through mtools, btrfs whose
FIEMAP answers logical addresses) contribute nothing.

Left out, because the filesystem reads zeros there without reading the disk: extents that are
unwritten (preallocated), inline, delayed or of unknown place (FIEMAP flags)."""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

from devkit.chunks import chunk_set
from devkit.disks import DiskImage, partition_loop, partition_mount
from devkit.disks.zeros import xfs_log_range

FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
FIEMAP_EXTENT_LAST = 0x1
# unknown place, delayed allocation, encoded, inline data, unwritten (reads as zeros)
_SKIP = 0x2 | 0x4 | 0x8 | 0x200 | 0x800
_HEADER = struct.Struct("=QQLLLL")  # fm_start, fm_length, flags, mapped, extent_count, reserved
_EXTENT = struct.Struct("=QQQQQLLLL")  # logical, physical, length, 2 reserved, flags, 3 reserved
_BATCH = 256
FIEMAP_FILESYSTEMS = ("ext4", "xfs")


def file_extents(path: Path) -> list[tuple[int, int]]:
    """(physical byte offset in its filesystem, length) of each extent of a file that holds its
    data on the disk."""
    out: list[tuple[int, int]] = []
    start = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            buf = bytearray(_HEADER.pack(start, 2**64 - 1 - start, FIEMAP_FLAG_SYNC, 0, _BATCH, 0))
            buf += bytes(_EXTENT.size * _BATCH)
            fcntl.ioctl(fd, FS_IOC_FIEMAP, buf)
            mapped = _HEADER.unpack_from(buf)[3]
            last = False
            for i in range(mapped):
                logical, physical, length, _, _, flags, *_ = _EXTENT.unpack_from(
                    buf, _HEADER.size + i * _EXTENT.size
                )
                if not flags & _SKIP:
                    out.append((physical, length))
                start = logical + length
                last = bool(flags & FIEMAP_EXTENT_LAST)
            if mapped == 0 or last:
                return out
    finally:
        os.close(fd)


def file_data_chunks(reference: DiskImage) -> dict[str, set[int]]:
    """Per regular file ("PART:path"), the disk's 512 KiB blocks holding its data (and per XFS
    its log: xfs_log_chunks)."""
    out: dict[str, set[int]] = {}
    for part in reference.partitions:
        if part.fs not in FIEMAP_FILESYSTEMS:
            continue
        with partition_mount(reference, part.number, "ro") as mnt:
            for dirpath, _dirs, names in os.walk(mnt):
                for name in names:
                    full = Path(dirpath, name)
                    if full.is_symlink() or not full.is_file():
                        continue
                    extents = [(part.start + p, n) for p, n in file_extents(full)]
                    if extents:
                        out[f"{part.number}:{full.relative_to(mnt)}"] = chunk_set(extents)
    return {**out, **xfs_log_chunks(reference)}


def xfs_log_chunks(reference: DiskImage) -> dict[str, set[int]]:
    """Per XFS partition ("PART:<xfs log>"), the disk's 512 KiB blocks of its internal log."""
    out: dict[str, set[int]] = {}
    for part in reference.partitions:
        if part.fs == "xfs":
            with partition_loop(reference, part.number, read_only=True) as device:
                start, length = xfs_log_range(device)
            out[f"{part.number}:<xfs log>"] = chunk_set([(part.start + start, length)])
    return out


def check_blocks(
    held: set[int], new: set[int], files: dict[str, set[int]], replayed: set[int] | None = None
) -> dict[str, object]:
    """The rule on a new snapshot's blocks: none outside what the source held and what a
    journal/log replay writes there (``replayed``: devkit.restore.replay_written, found on a
    restore of the source without sparsecopy), and every held block a file needs. The answer
    names what broke it."""
    replayed = replayed or set()
    needed = set().union(*files.values()) if files else set()
    missing = sorted(held & needed - new)
    beyond = sorted(new - held - replayed)
    files_missing = sorted(name for name, chunks in files.items() if chunks & held - new)
    return {
        "held": len(held),
        "new": len(new),
        "file_blocks_held": len(held & needed),
        "beyond_held": beyond[:20],
        "beyond_held_count": len(beyond),
        "beyond_held_replayed_count": len(new & replayed - held),
        "file_blocks_missing": missing[:20],
        "file_blocks_missing_count": len(missing),
        "files_missing_blocks": files_missing[:10],
        "holds": not beyond and not missing,
    }
