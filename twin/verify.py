"""Checks a restore of a compacted snapshot against its source: every file's hash, raw
partitions, the partition table, and fsck. The reference is a recovered copy of the source (its
journals replayed); the restore is a volume the emulator made from the new snapshot
(twin/restores.py), so blocks the snapshot does not hold read as EBS gives them. Neither the
source nor the snapshot is touched."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devkit import disks as img
from devkit.chunks import CHUNK

FILE_SYSTEMS = ("ext4", "xfs", "ntfs", "vfat", "btrfs")


@dataclass
class Verification:
    files_checked: int = 0
    files_verified: bool = False
    fsck_clean: bool = False
    problems: list[str] = field(default_factory=list)


def reference(source: Any, path: Path) -> img.DiskImage:
    """source: the builder's DiskImage; its recovered copy at `path`, what every restore must
    match."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return img.recovered_copy(source, path)


def verify(source: Any, ref: img.DiskImage, held: set[int], restore: Path) -> Verification:
    """source: the builder's DiskImage (its table, partitions and the files it wrote); ref: its
    recovered copy; held: the 512 KiB blocks the source snapshot holds; restore: the backing file
    of a volume restored from the new snapshot (a disposable volume: fsck and mounts may replay
    journals on it)."""
    out = Verification()
    result = img.DiskImage(restore, source.size, source.table, list(source.partitions))
    if source.table != "none" and img.partition_table(ref.path) != img.partition_table(restore):
        out.problems.append("partition table differs")
    fsck_ok = True
    filesystems = 0
    for part in source.partitions:
        if part.fs in FILE_SYSTEMS:
            filesystems += 1
            out.files_checked += _files(source, ref, result, part.number, out.problems)
            try:
                img.fsck_clean(result, part.number)
            except Exception as error:  # fsck's stderr names the damage
                fsck_ok = False
                out.problems.append(f"partition {part.number}: fsck: {error}")
        elif part.fs == "none" and not _same_held_bytes(ref.path, restore, part, held):
            out.problems.append(f"partition {part.number} (raw) differs")
    # a filesystem without files (a fresh XFS) verifies when its restore mounts and shows none
    out.files_verified = filesystems > 0 and not any(
        "differs" in p or "missing" in p or "unexpected" in p or "builder" in p
        or "cannot read" in p
        for p in out.problems
    )  # fmt: skip
    out.fsck_clean = fsck_ok
    return out


def _files(source: Any, ref: img.DiskImage, result: img.DiskImage, number: int,
           problems: list[str]) -> int:  # fmt: skip
    """Compare one partition's files with the reference's and the builder's; returns how many
    files the reference has."""
    want = img.file_hashes(ref, number)
    try:
        got = img.file_hashes(result, number)
    except Exception as error:  # a restore whose filesystem does not even mount
        problems.append(f"partition {number}: cannot read its files: {error}")
        return len(want)
    for name, digest in want.items():
        if got.get(name) != digest:
            problems.append(f"partition {number}: {name} differs or missing")
    for name in set(got) - set(want):
        problems.append(f"partition {number}: unexpected file {name}")
    for name, digest in getattr(source, "files", {}).get(number, {}).items():
        if got.get(name) != digest:
            problems.append(f"partition {number}: {name} is not what the builder wrote")
    return len(want)


def _same_held_bytes(ref: Path, restore: Path, part: img.Partition, held: set[int]) -> bool:
    """A raw partition has no filesystem to say what it needs: every byte the source holds must
    be the same. A block the source snapshot does not hold reads as zeros or random bytes
    depending on the restore, on the source's own restores as well: no copy can fix it."""
    end = part.start + part.size
    for index in sorted(held):
        start, stop = max(part.start, index * CHUNK), min(end, (index + 1) * CHUNK)
        if start < stop and not img.same_bytes(ref, restore, start, stop - start):
            return False
    return True
