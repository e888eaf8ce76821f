"""Checking a copy against its source: file hashes per partition, fsck, the partition table,
raw bytes, and the chunks a target holds (what the data-plane tests and the twin compare)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from devkit import chunks
from devkit.commands import run
from devkit.disks.image import MIB, DiskImage
from devkit.disks.layout import partition_loop, partition_mount
from devkit.mounts import mounted


def _hash_tree(root: Path) -> dict[str, str]:
    hashes = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = Path(dirpath, name)
            if full.is_symlink() or not full.is_file():
                continue
            rel = str(full.relative_to(root))
            if rel.startswith(("System Volume Information", "$")):
                continue
            with open(full, "rb") as f:
                hashes[rel] = hashlib.file_digest(f, "sha256").hexdigest()
    return hashes


def file_hashes(disk: DiskImage, number: int) -> dict[str, str]:
    """SHA-256 of every regular file in one partition: {relative path: hex digest}.

    ext4/xfs/btrfs: kernel mount (read-only; a dirty log is replayed in memory by the kernel
    only if the device is writable, so pass a recovered copy for crashed images); ntfs: ntfs-3g
    read-only; vfat: mtools (no kernel driver here).
    """
    part = disk.partition(number)
    if part.fs == "vfat":
        with tempfile.TemporaryDirectory() as tmp:
            run("mcopy", "-s", "-n", "-Q", "-i", f"{disk.path}@@{part.start}", "::/*", tmp)
            return _hash_tree(Path(tmp))
    options = "ro,nouuid" if part.fs == "xfs" else "ro"
    with partition_loop(disk, number) as device, mounted(device, part.fs, options) as mnt:
        return _hash_tree(mnt)


def recovered_copy(disk: DiskImage, dest: Path) -> DiskImage:
    """A sparse copy of the image whose filesystems went through their own recovery.

    Mounting each kernel filesystem read-write replays its journal/log; the copy is then "the
    source's view after its own recovery", the reference every target file is checked against.
    """
    chunks.copy_image(disk.path, dest)  # its written zeros stay written, as the source's
    copy = disk.copy_at(dest)
    for part in copy.partitions:
        if part.fs in ("ext4", "xfs", "btrfs"):
            with partition_mount(copy, part.number):
                pass
    return copy


def fsck_clean(disk: DiskImage, number: int) -> None:
    """Raise unless the partition's filesystem checks clean in no-change mode."""
    part = disk.partition(number)
    if part.fs == "vfat":
        with partition_loop(disk, number, read_only=True) as device:
            run("fsck.fat", "-n", device)
        return
    with partition_loop(disk, number, read_only=True) as device:
        if part.fs == "ext4":
            run("e2fsck", "-f", "-n", device)
        elif part.fs == "xfs":
            run("xfs_repair", "-n", device)
        elif part.fs == "btrfs":
            run("btrfs", "check", "--readonly", device)
        elif part.fs == "ntfs":
            run("ntfsfix", "--no-action", device)
        else:
            raise ValueError(f"no fsck for {part.fs!r}")


def seed_method_image(disk: DiskImage, dest: Path) -> Path:
    """The seed method's trimmed image, made independently of sparsecopy.

    Copy the whole disk (what ``dd`` does), mount every partition with discard through an offset
    loop device (ntfs-3g for NTFS), run fstrim, unmount. The kernel punches holes where the
    filesystem has free space. ``nonzero_chunks(dest)`` is then what ``ddpt oflag=sparse`` onto a
    blank volume writes: the baseline every sparsecopy result is compared against.
    """
    # only its non-zero chunks count (what ddpt oflag=sparse writes), so holes for zeros are fine
    run("cp", "--sparse=always", str(disk.path), str(dest))
    image = disk.copy_at(dest)
    for part in image.partitions:
        if part.fs in ("ext4", "xfs", "btrfs", "ntfs"):
            with partition_mount(image, part.number, "discard") as mnt:
                run("fstrim", str(mnt))
    return dest


def data_chunks(path: Path) -> set[int]:
    """Indexes of the 512 KiB aligned chunks of a sparse file that hold allocated data.

    This is how tests count "written 512 KiB chunks" of a target: writing zeros allocates, as on
    EBS, so every chunk the program wrote shows up here (devkit.chunks, as the twin and the
    benchmark count them).
    """
    return chunks.written_chunks(path)


def written_chunks(path: Path) -> int:
    """Number of 512 KiB chunks of a sparse target file that hold data."""
    return len(data_chunks(path))


def nonzero_chunks(path: Path) -> set[int]:
    """Chunks of a file that hold at least one non-zero byte (reads the data regions only)."""
    return chunks.nonzero_chunks(path)


def same_bytes(a: Path, b: Path, start: int, size: int) -> bool:
    """Whether two files hold the same bytes in [start, start + size)."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        fa.seek(start)
        fb.seek(start)
        left = size
        while left:
            n = min(left, 4 * MIB)
            if fa.read(n) != fb.read(n):
                return False
            left -= n
    return True


def partition_table(path: Path) -> str:
    """The partition table as sfdisk dumps it (``label-id``, entries, GUIDs), for comparison."""
    return run("sfdisk", "--dump", str(path)).replace(str(path), "DISK")
