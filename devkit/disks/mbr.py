"""Disks with an MBR partition table: Windows-like NTFS volumes and Linux logical partitions;
and the NTFS "volume is dirty" flag Windows leaves after a crash."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from devkit.commands import run
from devkit.disks.dirt import fill_dirty, scribble_free_space
from devkit.disks.image import MIB, SECTOR, DiskImage
from devkit.disks.layout import make_mbr, mkfs, partition_loop, partition_mount


def build_mbr_ntfs(path: Path, size: int = 200 * MIB, seed: int = 3) -> DiskImage:
    """MBR like Windows: two NTFS partitions (system and data), both dirty."""
    disk = make_mbr(
        path,
        size,
        "label: dos\nstart=2048, size=100MiB, type=7, bootable\nstart=, size=, type=7\n",
        ["ntfs", "ntfs"],
    )
    for number in (1, 2):
        part = disk.partition(number)
        scribble_free_space(path, part.start, part.size // 2, seed + number)
        with partition_loop(disk, number) as device:
            run(
                "mkntfs",
                "-q",
                "-F",
                "-f",
                "--sector-size",
                "512",
                "--partition-start",
                str(part.start // SECTOR),
                device,
            )
        with partition_mount(disk, number) as mnt:
            disk.files[number] = fill_dirty(mnt, seed + number, files=6, file_size=6 * MIB)
    return disk


def build_mbr_logical(path: Path, size: int = 160 * MIB, seed: int = 4) -> DiskImage:
    """MBR with a primary ext4 and an extended partition holding two logical ext4 partitions."""
    disk = make_mbr(
        path,
        size,
        "label: dos\nstart=2048, size=40MiB, type=83\nstart=, size=, type=5\n"
        "size=40MiB, type=83\nsize=, type=83\n",
        ["ext4", "extended", "ext4", "ext4"],
    )
    for number in (1, 5, 6):
        mkfs(disk, number)
        with partition_mount(disk, number) as mnt:
            disk.files[number] = fill_dirty(
                mnt, seed + number, files=4, file_size=4 * MIB, delete=(2,)
            )
    return disk


def ntfs_set_dirty(disk: DiskImage, number: int) -> None:
    """Set the "volume is dirty" flag of an NTFS partition, as Windows leaves it after a crash.

    No Linux tool sets it (ntfsfix only clears it), so this edits $Volume (MFT record 3) and its
    copy in $MFTMirr in place: boot sector -> MFT -> VOLUME_INFORMATION (0x70) -> flags |= 1.
    """
    part = disk.partition(number)
    with open(disk.path, "r+b") as f:
        f.seek(part.start)
        boot = f.read(512)
        sector, per_cluster = struct.unpack_from("<HB", boot, 11)
        mft_lcn, mirror_lcn = struct.unpack_from("<QQ", boot, 48)
        per_record = struct.unpack_from("<b", boot, 64)[0]
        cluster = sector * per_cluster
        record_size = cluster * per_record if per_record > 0 else 1 << -per_record
        for lcn in (mft_lcn, mirror_lcn):  # $MFTMirr must match, or ntfs-3g refuses to mount
            _set_volume_dirty(f, part.start + lcn * cluster + 3 * record_size, record_size)


def _set_volume_dirty(f: BinaryIO, record_at: int, record_size: int) -> None:
    f.seek(record_at)
    record = f.read(record_size)
    assert record[:4] == b"FILE", "MFT record 3 not where expected"
    pos = struct.unpack_from("<H", record, 20)[0]
    while True:
        kind, length = struct.unpack_from("<II", record, pos)
        assert kind != 0xFFFFFFFF, "$Volume has no VOLUME_INFORMATION"
        if kind == 0x70:
            value = pos + struct.unpack_from("<H", record, pos + 20)[0]
            flags_at = value + 10
            assert flags_at % 512 < 510, "flags word sits under an update-sequence slot"
            flags = struct.unpack_from("<H", record, flags_at)[0] | 0x0001
            f.seek(record_at + flags_at)
            f.write(struct.pack("<H", flags))
            return
        pos += length
