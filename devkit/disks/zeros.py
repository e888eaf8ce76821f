"""Disks whose filesystems hold ALLOCATED ZEROS: blocks a filesystem needs that hold only zeros
(issue 19). A copy that skips all-zero blocks leaves them out of the new snapshot, and on an
encrypted restore an absent block reads as random bytes (devkit.restore), not zeros.

- ``build_ext4_zero_files``: ext4 with a swap file made with ``dd if=/dev/zero`` and a file
  whose middle pages are written zeros (``ZERO_FILES``), beside ordinary dirty files;
- ``build_xfs_fresh``: a freshly made XFS (mkfs only): its log is zeros but for its first
  records;
- ``build_ext4_zeroed_itables``: ext4 made with ``lazy_itable_init=0``: every inode table is
  written zeros (groups flagged ITABLE_ZEROED), beside ordinary dirty files.

mkfs zeroes through write-zeroes (fallocate ZERO_RANGE / BLKZEROOUT) where the device offers
it; a loop device over a sparse file turns that into unallocated extents, which a snapshot of
the image would not hold. What EBS stores for a write-zeroes is not documented, and mkfs on a
device without it writes plain zeros; these builders make the plain writes happen
(``UNIX_IO_NOZEROOUT`` for mke2fs, a plain rewrite of the log for mkfs.xfs, which has no such
switch), so the source image holds the zeros as written data, as a snapshot would.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
from collections.abc import Callable
from pathlib import Path

from devkit.commands import run
from devkit.disks.dirt import fill_dirty
from devkit.disks.image import CHUNK, MIB, DiskImage
from devkit.disks.layout import LINUX, make_gpt, partition_loop, partition_mount

SWAP_FILE = "swapfile"  # dd if=/dev/zero, then mkswap: zeros but for its header page
ZERO_PAGES_FILE = "zero-pages.bin"  # random, written zeros, random
ZERO_FILES = (SWAP_FILE, ZERO_PAGES_FILE)
NO_ZEROOUT = {"UNIX_IO_NOZEROOUT": "1"}  # e2fsprogs: zero with plain writes


def rewrite_plainly(path: Path, start: int, length: int) -> None:
    """Read ``length`` bytes of the image at ``start`` and write them back with plain writes, so
    that every byte, zeros included, is allocated data of the image file."""
    with open(path, "r+b") as f:
        pos, end = start, start + length
        while pos < end:
            f.seek(pos)
            data = f.read(min(4 * MIB, end - pos))
            f.seek(pos)
            f.write(data)
            pos += len(data)
        f.flush()
        os.fsync(f.fileno())


def _write_file(path: Path, pieces: list[bytes]) -> str:
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for piece in pieces:
            f.write(piece)
            digest.update(piece)
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def build_ext4_zero_files(path: Path, size: int = 160 * MIB, seed: int = 15) -> DiskImage:
    """GPT with one dirty ext4 partition holding ``ZERO_FILES``: a 16 MiB swap file (``dd
    if=/dev/zero``, ``mkswap``) and a 6 MiB file whose middle 4 MiB are written zeros. Their
    blocks are allocated and needed; most of their 512 KiB chunks are all zeros."""
    disk = make_gpt(path, size, [(0, LINUX, "ext4")])
    with partition_loop(disk, 1) as device:
        run("mkfs.ext4", "-q", "-F", device)
    with partition_mount(disk, 1) as mnt:
        files = fill_dirty(mnt, seed, files=4, file_size=6 * MIB, delete=(2,))
        swap = mnt / SWAP_FILE
        run("dd", "if=/dev/zero", f"of={swap}", "bs=1M", "count=16", "conv=fsync")
        swap.chmod(0o600)
        run("mkswap", str(swap))
        rng = random.Random(seed)
        files[ZERO_PAGES_FILE] = _write_file(
            mnt / ZERO_PAGES_FILE, [rng.randbytes(MIB), bytes(4 * MIB), rng.randbytes(MIB)]
        )
        os.sync()
        files[SWAP_FILE] = _sha256(swap)
    disk.files[1] = files
    return disk


def xfs_log_range(device: str) -> tuple[int, int]:
    """(start, length) in bytes of an XFS's internal log within its device."""
    fields = "logstart logblocks blocksize agblocks agblklog"
    text = run("xfs_db", "-r", "-c", "sb 0", "-c", f"p {fields}", device)
    values = {k: int(v) for k, v in re.findall(r"^(\w+) = (\d+)$", text, re.M)}
    if not values.get("logstart"):
        raise RuntimeError(f"{device}: no internal XFS log (xfs_db printed {text!r})")
    # logstart is a filesystem block number: the AG number in the bits above agblklog
    fsb, shift = values["logstart"], values["agblklog"]
    linear = (fsb >> shift) * values["agblocks"] + (fsb & ((1 << shift) - 1))
    block = values["blocksize"]
    return linear * block, values["logblocks"] * block


def build_xfs_fresh(path: Path, size: int = 384 * MIB) -> DiskImage:
    """GPT with one XFS just made (mkfs only, no file): its log (64 MiB here) and much of its
    AG headers' blocks are zeros the filesystem needs (log recovery reads the whole log)."""
    disk = make_gpt(path, size, [(0, LINUX, "xfs")])
    part = disk.partition(1)
    with partition_loop(disk, 1) as device:
        run("mkfs.xfs", "-q", "-f", "-K", device)
        start, length = xfs_log_range(device)
    rewrite_plainly(path, part.start + start, length)
    disk.files[1] = {}
    return disk


def build_ext4_zeroed_itables(path: Path, size: int = 256 * MIB, seed: int = 16) -> DiskImage:
    """GPT with one dirty ext4 partition made with ``lazy_itable_init=0``: mke2fs writes every
    inode table as zeros and flags each group ITABLE_ZEROED (the kernel then never zeroes a
    table itself). The partition held random bytes before (a reused volume), so unwritten
    blocks are not zero either."""
    disk = make_gpt(path, size, [(0, LINUX, "ext4")])
    part = disk.partition(1)
    rng = random.Random(seed)
    with open(path, "r+b") as f:
        for offset in range(0, part.size, MIB):
            f.seek(part.start + offset)
            f.write(rng.randbytes(MIB))
    with partition_loop(disk, 1) as device:
        args = ("mkfs.ext4", "-q", "-F", "-E", "nodiscard,lazy_itable_init=0", device)
        run(*args, env=NO_ZEROOUT)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed, files=4, file_size=8 * MIB, delete=(3,))
    return disk


def ext4_file_chunks(disk: DiskImage, number: int, name: str) -> set[int]:
    """The disk's 512 KiB chunks holding a file's blocks on an ext4 partition, from debugfs
    (``blocks``), an oracle independent of the copy's plan."""
    part = disk.partition(number)
    with partition_loop(disk, number, read_only=True) as device:
        header = run("dumpe2fs", "-h", device)
        blocks = run("debugfs", "-R", f"blocks /{name}", device).split()
    match = re.search(r"^Block size:\s+(\d+)", header, re.M)
    if not match or not blocks:
        raise RuntimeError(f"{disk.path}: debugfs found no blocks of /{name}")
    size = int(match.group(1))
    return {(part.start + int(block) * size) // CHUNK for block in blocks}


# The disks above by name, for the data-plane tests, the twin and the bench.
ALLOCATED_ZEROS: dict[str, Callable[[Path], DiskImage]] = {
    "ext4-zero-files": build_ext4_zero_files,
    "xfs-fresh": build_xfs_fresh,
    "ext4-zeroed-itables": build_ext4_zeroed_itables,
}
