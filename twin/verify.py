"""Checks a compacted image against its source: every file's hash, raw partitions, the partition
table, and fsck.  Works on copies, so neither the source snapshot nor the result is touched."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devkit import disks as img

from .emulator.blockstore import sparse_copy

FILE_SYSTEMS = ("ext4", "xfs", "ntfs", "vfat", "btrfs")


@dataclass
class Verification:
    files_checked: int = 0
    files_verified: bool = False
    fsck_clean: bool = False
    problems: list[str] = field(default_factory=list)


def verify(source: Any, result_image: Path, workdir: Path) -> Verification:
    """source: the builder's DiskImage; result_image: the new snapshot's image file."""
    workdir.mkdir(parents=True, exist_ok=True)
    out = Verification()
    reference = img.recovered_copy(source, workdir / "reference.img")
    copy = workdir / "result.img"
    sparse_copy(result_image, copy)
    result = img.DiskImage(copy, source.size, source.table, list(source.partitions))
    try:
        if source.table != "none" and img.partition_table(reference.path) != img.partition_table(
            copy
        ):
            out.problems.append("partition table differs")
        fsck_ok = True
        for part in source.partitions:
            if part.fs in FILE_SYSTEMS:
                want = img.file_hashes(reference, part.number)
                got = img.file_hashes(result, part.number)
                out.files_checked += len(want)
                for name, digest in want.items():
                    if got.get(name) != digest:
                        out.problems.append(f"partition {part.number}: {name} differs or missing")
                for name in set(got) - set(want):
                    out.problems.append(f"partition {part.number}: unexpected file {name}")
                for name, digest in getattr(source, "files", {}).get(part.number, {}).items():
                    if got.get(name) != digest:
                        out.problems.append(
                            f"partition {part.number}: {name} is not what the builder wrote"
                        )
                try:
                    img.fsck_clean(result, part.number)
                except Exception as error:  # fsck's stderr names the damage
                    fsck_ok = False
                    out.problems.append(f"partition {part.number}: fsck: {error}")
            elif part.fs == "none" and not img.same_bytes(
                reference.path, copy, part.start, part.size
            ):
                out.problems.append(f"partition {part.number} (raw) differs")
        out.files_verified = out.files_checked > 0 and not any(
            "differs" in p or "missing" in p or "unexpected" in p or "builder" in p
            for p in out.problems
        )
        out.fsck_clean = fsck_ok
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return out
