"""Making a filesystem look like a long-lived volume's: files written and deleted (their blocks
keep random bytes), stale bytes under free space, and crashes that leave a journal to replay."""

from __future__ import annotations

import hashlib
import os
import random
import re
from pathlib import Path

from devkit.chunks import CHUNK, copy_image, written_chunks
from devkit.commands import run
from devkit.disks.image import MIB


def _write_random(path: Path, size: int, rng: random.Random) -> str:
    """Write `size` bytes of incompressible data; return its SHA-256."""
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            block = rng.randbytes(min(left, MIB))
            digest.update(block)
            f.write(block)
            left -= len(block)
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest()


def fill_dirty(
    mnt: Path,
    seed: int,
    files: int = 6,
    file_size: int = 8 * MIB,
    delete: tuple[int, ...] = (1, 3, 5),
) -> dict[str, str]:
    """Write `files` random files, sync, then delete some of them (1-based numbers).

    The deleted files' blocks stay non-zero on the device but are free in the filesystem: the
    "dirty" state a long-lived volume's snapshot carries. Returns {relative path: sha256} of the
    files that remain (each fsync'ed, so they survive a crash right after this returns).
    """
    rng = random.Random(seed)
    sub = mnt / "data"
    sub.mkdir(exist_ok=True)
    kept: dict[str, str] = {}
    for i in range(1, files + 1):
        name = f"data/file{i:02d}.bin"
        kept[name] = _write_random(mnt / name, file_size, rng)
    os.sync()
    for i in delete:
        name = f"data/file{i:02d}.bin"
        (mnt / name).unlink()
        del kept[name]
    os.sync()
    return kept


def _write_late_files(mnt: Path, seed: int, files: int, file_size: int) -> dict[str, str]:
    """crash/lateNN.bin: random files written and fsync'ed just before a crash."""
    rng = random.Random(seed)
    (mnt / "crash").mkdir(exist_ok=True)
    written = {}
    for i in range(1, files + 1):
        name = f"crash/late{i:02d}.bin"
        written[name] = _write_random(mnt / name, file_size, rng)
    return written


def crash_after_writes(
    mnt: Path, seed: int, files: int = 3, file_size: int = 8 * MIB
) -> dict[str, str]:
    """Write and fsync more files, then shut the filesystem down without a clean unmount.

    Works for XFS and ext4 (`xfs_io -x -c "shutdown -f"`: flush the log, stop all I/O). The
    device afterwards is what a crash-consistent snapshot of a running instance looks like: the
    journal/log holds changes the on-disk free-space maps do not show yet. Returns the new files'
    hashes. The caller still unmounts (the context manager does).
    """
    written = _write_late_files(mnt, seed, files, file_size)
    run("xfs_io", "-x", "-c", "shutdown -f", str(mnt))
    return written


def snapshot_while_mounted(
    mnt: Path, live: Path, dest: Path, seed: int, files: int = 3, file_size: int = 8 * MIB
) -> dict[str, str]:
    """Write and fsync files, then copy the image while the filesystem is still mounted.

    This is exactly what an EBS snapshot of a running instance captures: the fsync'ed changes
    are committed to the journal, but the block bitmaps and inode tables at their home
    locations are still dirty in the kernel's cache. The device's writes stop first (a shutdown
    without log flush, as a power cut): an EBS snapshot is one moment, a copy of a device the
    kernel still writes is not. Which blocks jbd2 had already written home by then varies from
    run to run, as on a running instance (about 1 build in 25 under load holds a bitmap its
    group descriptor's checksum does not match yet; `checkpoint_one_bitmap` makes that state on
    purpose). Returns the new files' hashes.
    """
    written = _write_late_files(mnt, seed, files, file_size)
    run("xfs_io", "-x", "-c", "shutdown", str(mnt))
    copy_image(live, dest)
    return written


def journal_logged(path: Path) -> tuple[int, dict[int, int]]:
    """A whole-disk ext4 image's block size and the blocks its journal logs, {home block: journal
    block} (the last transaction that logs a block wins); debugfs -c reads no bitmap."""
    device = str(path)
    header = run("debugfs", "-c", "-R", "stats", device)
    size = int(re.findall(r"^Block size:\s*(\d+)$", header, re.M)[0])
    logdump = run("debugfs", "-c", "-R", "logdump -a", device)
    found = re.findall(r"FS block (\d+) logged at journal block (\d+)", logdump)
    return size, {int(home): int(at) for home, at in found}


def replay_writes_unheld(path: Path) -> bool:
    """Whether the journal of a crashed whole-disk ext4 image logs a block in a 512 KiB chunk
    the image does not hold: one its replay writes where the snapshot has nothing."""
    size, logged = journal_logged(path)
    return bool({home * size // CHUNK for home in logged} - written_chunks(path))


def checkpoint_one_bitmap(path: Path) -> int:
    """Write home one block bitmap that a crashed ext4 image's journal logs, and nothing else.

    That is what a snapshot taken while jbd2 checkpoints captures: the bitmap at home is new,
    its group descriptor (which holds the bitmap's checksum) is still old, so tools that read
    the bitmaps refuse the filesystem until the journal is replayed. A whole-disk ext4 image
    only. Returns the bitmap's block number."""
    device = str(path)
    header = run("debugfs", "-c", "-R", "stats", device)  # -c: do not read the bitmaps
    bitmaps = {int(b) for b in re.findall(r"block bitmap at (\d+)", header)}
    size, logged = journal_logged(path)
    block = min(bitmaps & set(logged))
    where = run("debugfs", "-c", "-R", f"bmap <8> {logged[block]}", device).strip()
    with open(path, "r+b") as f:
        f.seek(int(where) * size)
        copy = f.read(size)
        f.seek(block * size)
        f.write(copy)
        os.fsync(f.fileno())
    return block


def write_random_bytes(path: Path, offset: int, size: int, seed: int) -> None:
    """Overwrite `size` bytes at `offset` of an image file with random data."""
    rng = random.Random(seed)
    with open(path, "r+b") as f:
        f.seek(offset)
        left = size
        while left:
            block = rng.randbytes(min(left, MIB))
            f.write(block)
            left -= len(block)


def scribble_free_space(path: Path, start: int, size: int, seed: int) -> None:
    """Fill a partition with random bytes before mkfs: the "ever written" history of a volume."""
    write_random_bytes(path, start, size, seed)
