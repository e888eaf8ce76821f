"""Laying out a disk image: a sparse file, a GPT or MBR partition table, filesystems, and each
partition as an offset loop device or a mount (this kernel does not scan partition tables)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from devkit.commands import run
from devkit.disks.image import SECTOR, DiskImage, Partition
from devkit.loop import loop_device
from devkit.mounts import mounted

# sgdisk type codes
BIOS_BOOT = "EF02"
EFI_SYSTEM = "EF00"
LINUX = "8300"
LINUX_SWAP = "8200"

_MKFS = {
    "ext4": ("mkfs.ext4", "-q", "-F"),
    "xfs": ("mkfs.xfs", "-q", "-f"),
    "btrfs": ("mkfs.btrfs", "-q", "-f"),
    "ntfs": ("mkntfs", "-q", "-F", "-f"),
    "swap": ("mkswap",),
    "vfat": ("mkfs.fat",),
}


def create_sparse(path: Path, size: int) -> None:
    """A sparse file of `size` bytes that holds no data (like a never-written EBS volume)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def _sfdisk_partitions(path: Path, fs: list[str]) -> list[Partition]:
    table = json.loads(run("sfdisk", "--json", str(path)))["partitiontable"]
    sector = int(table.get("sectorsize", SECTOR))
    parts = []
    # `fs` names the partitions in sfdisk's order (for MBR: 1-4, then logical 5, 6, ...).
    for entry, fs_name in zip(table["partitions"], fs, strict=True):
        number = int(entry["node"][len(str(path)) :])
        parts.append(Partition(number, entry["start"] * sector, entry["size"] * sector, fs_name))
    return sorted(parts, key=lambda p: p.number)


def make_gpt(path: Path, size: int, layout: list[tuple[int, str, str]]) -> DiskImage:
    """Create `path` with a GPT. `layout`: (size in MiB or 0 = rest, sgdisk type code, fs)."""
    create_sparse(path, size)
    args = ["sgdisk", "--clear"]
    for number, (mib, code, _fs) in enumerate(layout, start=1):
        end = f"+{mib}M" if mib else "0"
        args += [f"--new={number}:0:{end}", f"--typecode={number}:{code}"]
    run(*args, str(path))
    return DiskImage(path, size, "gpt", _sfdisk_partitions(path, [fs for _, _, fs in layout]))


def make_mbr(path: Path, size: int, script: str, fs: list[str]) -> DiskImage:
    """Create `path` with an MBR from an sfdisk `script`; `fs` names each partition."""
    create_sparse(path, size)
    run("sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", str(path), input_=script.encode())
    return DiskImage(path, size, "mbr", _sfdisk_partitions(path, fs))


def mkfs(disk: DiskImage, number: int, *extra: str) -> None:
    """Make the filesystem named by the partition's `fs` on it."""
    part = disk.partition(number)
    if part.fs not in _MKFS:
        raise ValueError(f"no mkfs for {part.fs!r}")
    with partition_loop(disk, number) as device:
        run(*_MKFS[part.fs], *extra, device)


@contextlib.contextmanager
def partition_loop(disk: DiskImage, number: int, read_only: bool = False) -> Iterator[str]:
    """An offset loop device over one partition of `disk`."""
    part = disk.partition(number)
    with loop_device(disk.path, part.start, part.size, read_only) as device:
        yield device


@contextlib.contextmanager
def partition_mount(disk: DiskImage, number: int, options: str = "") -> Iterator[Path]:
    """Mount one partition (ext4, xfs, btrfs through the kernel; ntfs through ntfs-3g)."""
    part = disk.partition(number)
    if part.fs == "vfat":
        raise ValueError("this kernel has no vfat driver: use the mtools helpers for FAT")
    opts = options
    if part.fs == "xfs":
        # Test images are often copies of each other: identical UUIDs must still mount.
        opts = ",".join(o for o in ("nouuid", options) if o)
    with (
        partition_loop(disk, number) as device,
        mounted(device, part.fs, opts) as mnt,
    ):
        yield mnt
