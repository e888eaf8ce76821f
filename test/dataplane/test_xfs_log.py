"""An XFS whose log is clean is not mounted before the copy.

A mount replays nothing from a clean log but still writes: the kernel stamps up to 2 MiB of log
blocks past the head and an unmount record. A copy made after it carried up to four 512 KiB
chunks more than ``xfs_copy -d`` (which copies the log as it is); without the mount the copy
holds exactly xfs_copy's non-zero chunks and the source is left untouched. A dirty log is still
replayed (test_copy_disks' gpt-xfs-crashed and test_recovery cover that).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from conftest import attached, blank_like, sparsecopy

from devkit import disks

pytestmark = pytest.mark.needs_root

XFS = 3  # build_gpt_xfs's XFS partition


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@pytest.fixture(scope="module")
def busy_log(tmp_path_factory: pytest.TempPathFactory) -> disks.DiskImage:
    """build_gpt_xfs, then enough metadata updates to move the log head past the blocks mkfs
    wrote, so that the 2 MiB a mount stamps after it land on chunks that hold only zeros."""
    disk = disks.build_gpt_xfs(tmp_path_factory.mktemp("xfs-log") / "source.img")
    with disks.partition_mount(disk, XFS) as mnt:
        churn = mnt / "churn"
        churn.mkdir()
        for i in range(20000):
            (churn / f"f{i}").touch()
        os.sync()
        for i in range(20000):
            (churn / f"f{i}").unlink()
        churn.rmdir()
        os.sync()
    with disks.partition_loop(disk, XFS, read_only=True) as device:
        assert "<CLEAN>" in disks.run("xfs_logprint", "-t", device)
    return disk


def _xfs_copy_nonzero(disk: disks.DiskImage, dest: Path) -> set[int]:
    """Non-zero chunks of ``xfs_copy -d`` of the XFS partition, at the partition's place.
    (xfs_copy also writes the rest of the log as zeros: chunks a snapshot would store.)"""
    part = disk.partition(XFS)
    with disks.partition_loop(disk, XFS, read_only=True) as device:
        disks.run("xfs_copy", "-d", device, str(dest))
    return {part.start // disks.CHUNK + c for c in disks.nonzero_chunks(dest)}


def test_clean_log_is_not_mounted(
    busy_log: disks.DiskImage, tmp_path: Path, no_leaks: None
) -> None:
    before = _digest(busy_log.path)
    target = blank_like(busy_log.path, tmp_path / "target.img")
    with attached(busy_log.path) as src, attached(target) as dst:
        run = sparsecopy("copy", src, dst, "--verify", "--jobs", "4")
    assert run.returncode == 0, run.stderr
    assert _digest(busy_log.path) == before, "the source was written to (mounted)"
    assert run.summary["partitions"][XFS - 1]["method"] == "allocated"
    copy = busy_log.copy_at(target)
    part = copy.partition(XFS)
    first, end = part.start // disks.CHUNK, (part.start + part.size) // disks.CHUNK
    inside = {c for c in disks.nonzero_chunks(target) if first <= c < end}
    assert inside == _xfs_copy_nonzero(busy_log, tmp_path / "xfs_copy.img")
    disks.fsck_clean(copy, XFS)
    assert disks.file_hashes(copy, XFS) == busy_log.files[XFS]
    with disks.partition_mount(copy, XFS, "nouuid") as mnt:
        (mnt / "after-copy").write_text("written on the copy")
    disks.fsck_clean(copy, XFS)
