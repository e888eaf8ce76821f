"""Volumes without a partition table: one filesystem over the whole disk (ext4, a crashed
ext2, btrfs) or nothing at all (never written)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from devkit.commands import run
from devkit.disks.dirt import (
    crash_after_writes,
    fill_dirty,
    replay_writes_unheld,
    snapshot_while_mounted,
)
from devkit.disks.image import MIB, DiskImage, Partition
from devkit.disks.layout import create_sparse, mkfs, partition_loop, partition_mount

# The kernel may write the journal's blocks home before the crashed image is copied (its
# writeback under load, or another process's sync): then the replay writes nothing the snapshot
# lacks, and the tests of what a replay writes would prove nothing. Such a build is made again.
CRASH_ATTEMPTS = 4


def build_bare_ext4(
    path: Path, size: int = 128 * MIB, seed: int = 5, crash: bool = False
) -> DiskImage:
    """A volume that is one ext4 filesystem, no partition table; dirty, optionally crashed (its
    journal's replay then writes at least one 512 KiB chunk the image does not hold)."""
    for _ in range(CRASH_ATTEMPTS if crash else 1):
        disk = _build_bare_ext4(path, size, seed, crash)
        if not crash or replay_writes_unheld(disk.path):
            return disk
    raise RuntimeError(
        f"{CRASH_ATTEMPTS} crashed ext4 builds: the kernel wrote every journaled block home "
        "before the copy each time"
    )


def _build_bare_ext4(path: Path, size: int, seed: int, crash: bool) -> DiskImage:
    live = path.with_suffix(".live") if crash else path
    create_sparse(live, size)
    disk = DiskImage(live, size, "none", [Partition(1, 0, size, "ext4")])
    mkfs(disk, 1)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed)
        if crash:
            disk.files[1].update(snapshot_while_mounted(mnt, live, path, seed + 100))
    if crash:
        live.unlink()
        disk.path = path
    return disk


def build_bare_ext2_crashed(path: Path, size: int = 96 * MIB, seed: int = 9) -> DiskImage:
    """ext2 (no journal) shut down while mounted: the state stays "not clean" and nothing can
    be replayed, so a copier must not trust its bitmaps."""
    create_sparse(path, size)
    disk = DiskImage(path, size, "none", [Partition(1, 0, size, "ext4")])
    with partition_loop(disk, 1) as device:
        run("mkfs.ext2", "-q", "-F", device)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed, files=4, file_size=4 * MIB, delete=(2,))
        disk.files[1].update(crash_after_writes(mnt, seed + 100, files=2, file_size=4 * MIB))
    return disk


def build_bare_xfs_crashed(path: Path, size: int = 400 * MIB, seed: int = 31) -> DiskImage:
    """A never-written volume made one XFS, a few files synced, then 3,000 empty files created
    and the filesystem shut down: their inode chunks and directory blocks lie in space no write
    reached before, and only the log holds them, so the log's replay writes blocks a snapshot
    of this volume does not hold (the case sparsecopy must add to held ∩ needed)."""
    create_sparse(path, size)
    disk = DiskImage(path, size, "none", [Partition(1, 0, size, "xfs")])
    mkfs(disk, 1)
    empty = hashlib.sha256(b"").hexdigest()
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed, files=2, file_size=4 * MIB, delete=(2,))
        for group in range(3):
            (mnt / f"many{group}").mkdir()
            for i in range(1000):
                name = f"many{group}/f{i:04d}-a-name-long-enough-to-need-directory-blocks"
                (mnt / name).touch()
                disk.files[1][name] = empty
        disk.files[1].update(crash_after_writes(mnt, seed + 100, files=1, file_size=MIB))
    return disk


def build_btrfs(path: Path, size: int = 256 * MIB, seed: int = 7) -> DiskImage:
    """A bare btrfs volume, dirty (btrfs is copied by trim or raw, not by a parsed map)."""
    create_sparse(path, size)
    disk = DiskImage(path, size, "none", [Partition(1, 0, size, "btrfs")])
    mkfs(disk, 1)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed, files=6, file_size=8 * MIB)
    return disk


def build_empty(path: Path, size: int = 64 * MIB) -> DiskImage:
    """A never-written volume: no table, no filesystem, no data."""
    create_sparse(path, size)
    return DiskImage(path, size, "none", [Partition(1, 0, size, "empty")])
