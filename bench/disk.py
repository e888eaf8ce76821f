"""Seed 000's dirty disk, scaled down: one partition, five equal files filling it, 1/3/5 deleted.

The deleted files' blocks keep their random bytes, so the volume is "dirty" the way a snapshot of a
long-lived volume is: every block was written once, only two fifths are still allocated.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from bench.system import BenchError, Resources, run

SECTOR = 512
MIB = 1024 * 1024
FILESYSTEMS = ("ext4", "xfs", "ntfs")
# Linux volumes on EC2 (AL2023) carry GPT; Windows volumes are usually MBR.
TABLE_FOR_FS = {"ext4": "gpt", "xfs": "gpt", "ntfs": "dos"}
FILE_NAMES = tuple(f"test{i}" for i in range(1, 6))
DELETED = ("test1", "test3", "test5")
# Room left for the metadata the five files need (extent trees, MFT records) so the last one fits.
FILL_SLACK = 0.01


@dataclass(frozen=True)
class Layout:
    fs: str
    table: str  # "gpt" or "dos" (MBR)
    size: int
    part_start: int
    part_size: int


@dataclass(frozen=True)
class DirtyDisk:
    image: Path
    layout: Layout
    file_size: int
    live_files: dict[str, str]  # name -> SHA-256 of its content


def partition(image: Path, fs: str) -> Layout:
    """Write a one-partition table starting at 1 MiB (as in seed 000) and read back its place."""
    table = TABLE_FOR_FS[fs]
    part_type = "7" if table == "dos" else "L"  # 7 = NTFS/exFAT; L = Linux filesystem
    run(
        ["sfdisk", "--quiet", str(image)],
        input_text=f"label: {table}\nstart=2048, type={part_type}\n",
    )
    info = json.loads(run(["sfdisk", "--json", str(image)]))["partitiontable"]
    sector = int(info.get("sectorsize", SECTOR))
    (part,) = info["partitions"]
    return Layout(
        fs=fs,
        table=table,
        size=image.stat().st_size,
        part_start=int(part["start"]) * sector,
        part_size=int(part["size"]) * sector,
    )


def make_filesystem(device: str, layout: Layout) -> None:
    if layout.fs == "ext4":
        run(["mkfs.ext4", "-q", "-F", "-m", "0", "-L", "bench", device])
    elif layout.fs == "xfs":
        run(["mkfs.xfs", "-q", "-f", "-L", "bench", device])
    elif layout.fs == "ntfs":
        hidden = str(layout.part_start // SECTOR)
        run(["mkfs.ntfs", "-Q", "-F", "-q", "-L", "bench", "-p", hidden, device])
    else:
        raise BenchError(f"unknown filesystem {layout.fs!r}; choose from {', '.join(FILESYSTEMS)}")


def write_random_file(path: Path, size: int) -> str:
    """Fill `path` with `size` random bytes (like seed 000's openssl stream); return its SHA-256."""
    digest = hashlib.sha256()
    with path.open("wb", buffering=0) as f:
        remaining = size
        while remaining:
            block = os.urandom(min(remaining, 4 * MIB))
            digest.update(block)
            f.write(block)
            remaining -= len(block)
        os.fsync(f.fileno())
    return digest.hexdigest()


def build(image: Path, fs: str, size: int, mount_dir: Path, res: Resources) -> DirtyDisk:
    """Create the dirty disk image `image` of `size` bytes holding filesystem `fs`."""
    image.unlink(missing_ok=True)
    with image.open("wb") as f:
        f.truncate(size)
    layout = partition(image, fs)
    device = res.attach(image, offset=layout.part_start, size=layout.part_size)
    try:
        make_filesystem(device, layout)
        res.mount(device, mount_dir, fs)
        try:
            stat = os.statvfs(mount_dir)
            free = stat.f_bavail * stat.f_frsize
            file_size = int(free * (1 - FILL_SLACK) / len(FILE_NAMES)) // MIB * MIB
            if file_size < MIB:
                raise BenchError(f"{fs} on {size} bytes has no room for five files; use SIZE>=1G")
            hashes = {}
            for name in FILE_NAMES:
                try:
                    hashes[name] = write_random_file(mount_dir / name, file_size)
                except OSError as err:
                    raise BenchError(f"writing {name} ({file_size} bytes) on {fs}: {err}") from err
            for name in DELETED:
                (mount_dir / name).unlink()
                del hashes[name]
            os.sync()
        finally:
            res.umount(mount_dir)
    finally:
        res.detach(device)
    return DirtyDisk(image=image, layout=layout, file_size=file_size, live_files=hashes)
