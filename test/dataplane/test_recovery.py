"""Crash-consistent sources: the on-disk free-space maps are wrong until the journal/log is
replayed. These tests first prove the images really are in that state, then that the copy holds
every file the filesystem shows after its own recovery."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import attached, blank_like, sparsecopy, working_copy

from devkit import disks

pytestmark = pytest.mark.needs_root


def _ext_free_blocks(path: Path, part: disks.Partition) -> int | None:
    """Free blocks according to the block bitmaps (dumpe2fs reads them, no replay); None when
    dumpe2fs rejects them (before replay a bitmap and its checksum may be from different
    moments)."""
    with disks.loop_device(path, part.start, part.size, read_only=True) as device:
        proc = subprocess.run(["dumpe2fs", device], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        assert "checksum does not match" in proc.stderr, proc.stderr
        return None
    out = proc.stdout
    free = 0
    for line in re.findall(r"^\s+Free blocks: (.*)$", out, re.M):
        for item in filter(None, (i.strip() for i in line.split(","))):
            lo, _, hi = item.partition("-")
            free += int(hi or lo) - int(lo) + 1
    return free


def _xfs_free_blocks(path: Path, part: disks.Partition) -> int:
    with disks.loop_device(path, part.start, part.size, read_only=True) as device:
        out = disks.run("xfs_db", "-r", "-c", "freesp -s", device)
    return int(re.search(r"total free blocks (\d+)", out).group(1))  # type: ignore[union-attr]


def _copy(source: disks.DiskImage, tmp_path: Path) -> tuple[dict, disks.DiskImage]:
    work = working_copy(source, tmp_path / "work.img")
    target = blank_like(work.path, tmp_path / "target.img")
    with attached(work.path) as src, attached(target) as dst:
        run = sparsecopy("copy", src, dst, "--verify")
    assert run.returncode == 0, run.stderr
    return run.summary, source.copy_at(target)


@pytest.mark.parametrize(
    ("builder", "number", "free_blocks"),
    [
        (disks.build_bare_ext4, 1, _ext_free_blocks),
        (disks.build_gpt_xfs, 3, _xfs_free_blocks),
    ],
    ids=["ext4", "xfs"],
)
def test_crashed_source_is_replayed_before_its_map_is_read(
    tmp_path: Path, builder, number: int, free_blocks
) -> None:
    source = builder(tmp_path / "source.img", crash=True)
    reference = disks.recovered_copy(source, tmp_path / "reference.img")
    part = source.partition(number)
    # Precondition: before replay the map calls blocks free that hold the late files.
    stale, replayed = free_blocks(source.path, part), free_blocks(reference.path, part)
    assert stale is None or stale > replayed, "no stale map: this test would prove nothing"

    summary, target = _copy(source, tmp_path)
    assert summary["partitions"][-1]["method"] == "allocated"
    got = disks.file_hashes(target, number)
    assert got == disks.file_hashes(reference, number)
    late = {k: v for k, v in source.files[number].items() if k.startswith("crash/")}
    assert late and all(got[k] == v for k, v in late.items())
    disks.fsck_clean(target, number)


def test_unclean_ext2_is_copied_raw(tmp_path: Path) -> None:
    """No journal to replay: the bitmaps cannot be trusted, every non-zero block is copied."""
    source = disks.build_bare_ext2_crashed(tmp_path / "source.img")
    reference = disks.recovered_copy(source, tmp_path / "reference.img")
    with attached(source.path) as src:
        planned = sparsecopy("inspect", src)
    assert [p["method"] for p in planned.summary["partitions"]] == ["raw"]
    summary, target = _copy(source, tmp_path)
    (part,) = summary["partitions"]
    assert part["method"] == "raw"
    assert "not clean" in part["note"]
    got = disks.file_hashes(target, 1)
    assert got == disks.file_hashes(reference, 1)
    assert all(got[k] == v for k, v in source.files[1].items())
    assert disks.same_bytes(source.path, target.path, 0, source.size)


def test_dirty_ntfs_is_copied_raw_and_the_clean_one_by_map(tmp_path: Path) -> None:
    source = disks.build_mbr_ntfs(tmp_path / "source.img")
    disks.ntfs_set_dirty(source, 2)
    summary, target = _copy(source, tmp_path)
    first, second = summary["partitions"]
    assert (first["method"], second["method"]) == ("allocated", "raw")
    assert "dirty" in second["note"]
    assert disks.same_bytes(
        source.path, target.path, source.partition(2).start, source.partition(2).size
    )
    for number in (1, 2):
        assert disks.file_hashes(target, number) == disks.file_hashes(source, number)


def test_ext_superblock_the_tools_reject_is_copied_raw(tmp_path: Path) -> None:
    """dumpe2fs refusing the filesystem (corrupt, or features newer than the instance's
    e2fsprogs) must not fail the copy or drop data: the partition is copied byte for byte."""
    source = disks.build_bare_ext4(tmp_path / "source.img")
    with open(source.path, "r+b") as f:
        f.seek(1024 + 24)  # s_log_block_size: an impossible block size
        f.write(b"\x32")
    summary, target = _copy(source, tmp_path)
    (part,) = summary["partitions"]
    assert (part["fs"], part["method"]) == ("ext4", "raw")
    assert "map unreadable" in part["note"]
    assert disks.same_bytes(source.path, target.path, 0, source.size)
