"""Disks with a GUID partition table, as Linux volumes on EC2 carry: AL2023-like boot disks
(BIOS boot, EFI, an ext4 or XFS root), swap, raw data and never-written partitions.

Each builder returns a DiskImage whose `files` say what every partition must still hold. Sizes
are small so a test run stays within minutes; images are sparse."""

from __future__ import annotations

import hashlib
import random
import tempfile
from pathlib import Path

from devkit.commands import run
from devkit.disks.dirt import (
    crash_after_writes,
    fill_dirty,
    scribble_free_space,
    write_random_bytes,
)
from devkit.disks.image import MIB, DiskImage
from devkit.disks.layout import (
    BIOS_BOOT,
    EFI_SYSTEM,
    LINUX,
    LINUX_SWAP,
    make_gpt,
    mkfs,
    partition_mount,
)


def build_gpt_efi_ext4(
    path: Path, size: int = 160 * MIB, seed: int = 1, root_uuid: str | None = None
) -> DiskImage:
    """GPT: 1 MiB BIOS-boot (random "boot loader" bytes), 32 MiB EFI (FAT16), rest ext4, dirty.
    ``root_uuid``: the ext4's UUID (images built from one base share it), else a random one."""
    disk = make_gpt(
        path,
        size,
        [(1, BIOS_BOOT, "none"), (32, EFI_SYSTEM, "vfat"), (0, LINUX, "ext4")],
    )
    boot = disk.partition(1)
    write_random_bytes(path, boot.start, 200 * 1024, seed)  # like GRUB core.img: part data
    mkfs(disk, 2, "-F", "16", "-n", "EFI")
    efi_files(disk, 2, seed)
    mkfs(disk, 3, *(["-U", root_uuid] if root_uuid else []))
    with partition_mount(disk, 3) as mnt:
        disk.files[3] = fill_dirty(mnt, seed)
    return disk


def efi_files(disk: DiskImage, number: int, seed: int) -> None:
    """Put a few files on a FAT partition with mtools, then delete one (FAT leaves the data)."""
    part = disk.partition(number)
    image = f"{disk.path}@@{part.start}"
    rng = random.Random(seed)
    kept = disk.files.setdefault(number, {})
    with tempfile.TemporaryDirectory() as tmp:
        for name, size in (("BOOTX64.EFI", 900 * 1024), ("grub.cfg", 3000), ("old.bin", 3 * MIB)):
            content = rng.randbytes(size)
            Path(tmp, name).write_bytes(content)
            if name != "old.bin":
                kept[f"EFI/BOOT/{name}"] = hashlib.sha256(content).hexdigest()
        run("mmd", "-i", image, "::/EFI", "::/EFI/BOOT")
        for name in ("BOOTX64.EFI", "grub.cfg", "old.bin"):
            run("mcopy", "-i", image, str(Path(tmp, name)), f"::/EFI/BOOT/{name}")
        run("mdel", "-i", image, "::/EFI/BOOT/old.bin")


def build_gpt_xfs(
    path: Path,
    size: int = 400 * MIB,
    seed: int = 2,
    crash: bool = False,
    root_uuid: str | None = None,
) -> DiskImage:
    """GPT like AL2023: 1 MiB BIOS-boot, 10 MiB EFI (FAT), rest XFS; dirty, optionally crashed.
    ``root_uuid``: the XFS's UUID (images built from one base share it), else a random one."""
    disk = make_gpt(
        path, size, [(1, BIOS_BOOT, "none"), (10, EFI_SYSTEM, "vfat"), (0, LINUX, "xfs")]
    )
    write_random_bytes(path, disk.partition(1).start, 100 * 1024, seed)
    mkfs(disk, 2, "-F", "16", "-n", "EFI")
    efi_files(disk, 2, seed)
    mkfs(disk, 3, *(["-m", f"uuid={root_uuid}"] if root_uuid else []))
    with partition_mount(disk, 3) as mnt:
        disk.files[3] = fill_dirty(mnt, seed, files=8, file_size=16 * MIB, delete=(2, 4, 6, 8))
        if crash:
            disk.files[3].update(crash_after_writes(mnt, seed + 100, files=4, file_size=16 * MIB))
    return disk


def build_ext4_swap(path: Path, size: int = 128 * MIB, seed: int = 6) -> DiskImage:
    """GPT with ext4 and a swap partition whose pages hold stale (random) data."""
    disk = make_gpt(path, size, [(96, LINUX, "ext4"), (0, LINUX_SWAP, "swap")])
    swap = disk.partition(2)
    scribble_free_space(path, swap.start, swap.size, seed)  # stale pages: garbage to drop
    mkfs(disk, 2)
    mkfs(disk, 1)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed)
    return disk


def build_random_partition(path: Path, size: int = 64 * MIB, seed: int = 8) -> DiskImage:
    """GPT with one partition of random bytes (no filesystem) and one mostly zero."""
    disk = make_gpt(path, size, [(24, LINUX, "none"), (0, LINUX, "none")])
    first = disk.partition(1)
    write_random_bytes(path, first.start, first.size, seed)
    second = disk.partition(2)
    write_random_bytes(path, second.start + 3 * MIB + 4096, 8192, seed + 1)  # a lone island
    return disk


def build_ext4_swap_raw_unwritten(path: Path, size: int = 192 * MIB, seed: int = 13) -> DiskImage:
    """GPT: ext4 (dirty), swap over stale random pages, a raw data partition with scattered
    writes (no filesystem: LVM-like), and a partition that was never written."""
    disk = make_gpt(
        path,
        size,
        [(64, LINUX, "ext4"), (16, LINUX_SWAP, "swap"), (32, LINUX, "none"), (0, LINUX, "empty")],
    )
    swap = disk.partition(2)
    scribble_free_space(path, swap.start, swap.size, seed)
    mkfs(disk, 2)
    mkfs(disk, 1)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed, files=6, file_size=6 * MIB)
    raw = disk.partition(3)
    rng = random.Random(seed)
    for island in range(16):
        length = rng.choice((4096, 65536, 300 * 1024, MIB))
        offset = rng.randrange(0, raw.size - length, 4096)
        write_random_bytes(path, raw.start + offset, length, seed + island)
    return disk
