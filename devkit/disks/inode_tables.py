"""ext4 inode tables that hold stale bytes where no inode can be: reading them from dumpe2fs,
and the disk that has them (a reused volume whose mkfs left lazy-initialised tables)."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from devkit.commands import run
from devkit.disks.dirt import fill_dirty, write_random_bytes
from devkit.disks.image import MIB, DiskImage
from devkit.disks.layout import LINUX, make_gpt, mkfs, partition_loop, partition_mount


@dataclass(frozen=True)
class InodeTableGroup:
    """One block group's inode table as dumpe2fs prints it (block numbers of the filesystem)."""

    number: int
    flags: frozenset[str]
    table_first: int
    table_last: int
    unused_inodes: int | None  # None without group descriptor checksums
    first_inode: int
    all_inodes_free: bool


def inode_table_groups(device: str) -> tuple[dict[str, int], list[InodeTableGroup]]:
    """({"block_size", "inode_size", "inodes_per_group"}, groups) from ``dumpe2fs device``."""
    text = run("dumpe2fs", device)

    def field_(name: str) -> int:
        return int(text.split(f"\n{name}:", 1)[1].split("\n", 1)[0].strip())

    geometry = {
        "block_size": field_("Block size"),
        "inode_size": field_("Inode size"),
        "inodes_per_group": field_("Inodes per group"),
    }
    per_group = geometry["inodes_per_group"]
    groups = []
    for section in text.split("\nGroup ")[1:]:
        header, _, body = section.partition("\n")
        if not header.split(":", 1)[0].isdigit():
            continue  # "Group descriptor size:" in the superblock part
        number = int(header.split(":", 1)[0])
        flags = header.rsplit("[", 1)[1].rstrip("]").split(", ") if "[" in header else []
        table = body.split("Inode table at ", 1)[1].split(None, 1)[0]
        first, last = (int(b) for b in table.split("-"))
        counts = body.split(" unused inodes", 1)
        unused = int(counts[0].rsplit(" ", 1)[1]) if len(counts) == 2 else None
        first_inode = number * per_group + 1
        free = body.split("Free inodes: ", 1)[1].split("\n", 1)[0].strip()
        whole = f"{first_inode}-{first_inode + per_group - 1}"
        groups.append(
            InodeTableGroup(
                number, frozenset(flags), first, last, unused, first_inode, free == whole
            )
        )
    return geometry, groups


def unused_inode_table_blocks(device: str) -> list[tuple[int, int]]:
    """(first block, count) of the inode-table blocks no inode can occupy, by the group
    descriptors (INODE_UNINIT: the whole table; else past inodes per group minus the unused
    count). Checksum validity is not checked here: this is where a builder put stale bytes."""
    geometry, groups = inode_table_groups(device)
    per_block = geometry["block_size"] // geometry["inode_size"]
    out = []
    for group in groups:
        if group.unused_inodes is None:
            continue
        uninit = "INODE_UNINIT" in group.flags
        used = 0 if uninit else geometry["inodes_per_group"] - group.unused_inodes
        skip = -(-used // per_block)
        count = group.table_last - group.table_first + 1 - skip
        if count > 0:
            out.append((group.table_first + skip, count))
    return out


def _plant_deleted_inodes(device: str) -> list[tuple[int, int]]:
    """Give the first inode of every table block of each group with no inode in use a
    deleted inode's dtime (links count 0, mode 0: e2fsck accepts it). Returns the blocks."""
    geometry, groups = inode_table_groups(device)
    block_size = geometry["block_size"]
    dtime = struct.pack("<I", 0x65000000)  # a 2023 timestamp, above s_inodes_count
    planted = []
    with open(device, "r+b") as f:
        for group in groups:
            if group.number == 0 or not group.all_inodes_free:
                continue
            for block in range(group.table_first, group.table_last + 1):
                f.seek(block * block_size + 0x14)  # i_dtime of the block's first inode
                f.write(dtime)
            planted.append((group.table_first, group.table_last - group.table_first + 1))
        f.flush()
        os.fsync(f.fileno())
    return planted


def stale_inode_table_ranges(disk: DiskImage, number: int) -> list[tuple[int, int]]:
    """Byte ranges of the disk in inode-table blocks no inode can occupy that hold non-zero
    bytes (with group checksums: by the descriptors; without: the tables of groups whose
    inodes are all free, the ones ``build_stale_inode_tables(checksums=False)`` planted)."""
    part = disk.partition(number)
    with partition_loop(disk, number, read_only=True) as device:
        geometry, groups = inode_table_groups(device)
        if any(g.unused_inodes is not None for g in groups):
            blocks = unused_inode_table_blocks(device)
        else:
            blocks = [
                (g.table_first, g.table_last - g.table_first + 1)
                for g in groups
                if g.number and g.all_inodes_free
            ]
    size = geometry["block_size"]
    out = []
    with open(disk.path, "rb") as f:
        for first, count in blocks:
            for block in range(first, first + count):
                f.seek(part.start + block * size)
                if f.read(size).strip(b"\0"):
                    out.append((part.start + block * size, size))
    return out


def build_stale_inode_tables(
    path: Path, size: int = 256 * MIB, seed: int = 14, checksums: bool = True
) -> DiskImage:
    """GPT with one dirty ext4 partition whose unused inode-table blocks hold stale bytes.

    Where such bytes come from: the partition held data before mkfs (a reused volume), mkfs
    could not discard (EBS has no discard; ``-E nodiscard`` here, since a loop device over a
    file would punch holes) and, with lazy_itable_init, wrote only the used part of each
    group's inode table. The kernel's lazyinit thread zeroes the rest during a read-write mount,
    slowly; a session shorter than it (``noinit_itable`` here, to be deterministic) leaves
    groups flagged INODE_UNINIT without ITABLE_ZEROED, and the tails past the last used inode,
    holding the old bytes. Partition 1's files are in ``files[1]``.

    ``checksums=False`` makes the filesystem with ``-O ^metadata_csum,^uninit_bg``: without
    group descriptor checksums mkfs has no lazy init and zeroes every table, so the builder then
    plants the stale bytes itself (a deleted inode's dtime in every table block of each group
    with no inode in use, which e2fsck accepts). Raises when no stale byte ended up in place.
    """
    disk = make_gpt(path, size, [(0, LINUX, "ext4")])
    part = disk.partition(1)
    write_random_bytes(path, part.start, part.size, seed)
    features = [] if checksums else ["-O", "^metadata_csum,^uninit_bg"]
    mkfs(disk, 1, "-E", "nodiscard,lazy_itable_init=1", *features)
    with partition_mount(disk, 1, "noinit_itable") as mnt:
        disk.files[1] = fill_dirty(mnt, seed, files=6, file_size=12 * MIB)
    if not checksums:
        with partition_loop(disk, 1) as device:
            _plant_deleted_inodes(device)
    if not stale_inode_table_ranges(disk, 1):
        raise RuntimeError(f"{path}: no stale bytes in unused inode tables; the builder broke")
    return disk
