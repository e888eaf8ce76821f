"""What a disk builder returns: the image file, its partitions and the files each must keep."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from devkit.chunks import CHUNK as CHUNK  # EBS snapshot block size, 512 KiB

MIB = 1024 * 1024
SECTOR = 512


@dataclass(frozen=True)
class Partition:
    """One partition of a disk image. `number` is 1-based; a bare disk has number 1."""

    number: int
    start: int  # bytes
    size: int  # bytes
    fs: str  # "ext4", "xfs", "ntfs", "vfat", "swap", "btrfs", "none" (raw data) or "empty"


@dataclass
class DiskImage:
    """A disk image file plus what the builder put on it."""

    path: Path
    size: int
    table: str  # "gpt", "mbr" or "none"
    partitions: list[Partition] = field(default_factory=list)
    # Files the builder left on each partition and that must survive: {number: {path: sha256}}.
    files: dict[int, dict[str, str]] = field(default_factory=dict)

    def partition(self, number: int) -> Partition:
        for part in self.partitions:
            if part.number == number:
                return part
        raise KeyError(f"{self.path} has no partition {number}")

    def copy_at(self, path: Path) -> DiskImage:
        """The same layout over another file (a copy of this image); no files to check."""
        return DiskImage(path, self.size, self.table, list(self.partitions))
