"""Issue 19, "exact on every launch": the copy stores a 512 KiB block exactly when the source
snapshot holds it and the filesystem needs it, ZEROS INCLUDED, on both sinks (``copy`` onto a
volume, ``job --target snapshot`` through the EBS stand-in).

The disks hold allocated zeros (devkit.disks.ALLOCATED_ZEROS): a swap file made with dd and a
file with written zero pages (ext4), a freshly made XFS (its log), ext4 whose inode tables were
written zeros. For each disk and sink, with and without the block list EBS would give (the
source image's allocated chunks):
- every chunk that an independent tool (debugfs, xfs_db, dumpe2fs) places in a zero file, the
  XFS log or an inode table, and that the source holds, is stored; with a list nothing else than
  held chunks is; the summary counts the blocks and the all-zero ones, and the dry run predicts
  the same number of blocks;
- restored as an ENCRYPTED restore reads it (devkit.restore: every block not stored reads
  seeded random bytes), every file has its hash and the filesystem checks clean.
Before issue 19 (all-zero blocks skipped) the zero files' hashes, the log and the inode tables
of such a restore were garbage.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import attached, blank_like, sparsecopy, working_copy
from test_snapshot_target import SOURCES, _instance, _job, _served_bundle, _start

from devkit import chunks, disks, restore
from devkit.ebs.standin import StandIn

pytestmark = [pytest.mark.needs_root, pytest.mark.usefixtures("no_leaks")]

KEYS = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")


@dataclass
class ZeroDisk:
    name: str
    disk: disks.DiskImage
    held: set[int]  # the chunks the source image holds: what its snapshot stores
    used: set[int]  # chunks an independent tool says the filesystem uses for zero-heavy data


def _itable_chunks(disk: disks.DiskImage) -> set[int]:
    part = disk.partition(1)
    with disks.partition_loop(disk, 1, read_only=True) as device:
        geometry, groups = disks.inode_table_groups(device)
    size = geometry["block_size"]
    return chunks.chunk_set(
        (part.start + g.table_first * size, (g.table_last - g.table_first + 1) * size)
        for g in groups
    )


def _used_chunks(name: str, disk: disks.DiskImage) -> set[int]:
    """The oracle: chunks of the zero files (debugfs), the XFS log (xfs_db) or every inode
    table (dumpe2fs), none of it from the program's plan."""
    if name == "ext4-zero-files":
        return set().union(*(disks.ext4_file_chunks(disk, 1, f) for f in disks.ZERO_FILES))
    if name == "xfs-fresh":
        with disks.partition_loop(disk, 1, read_only=True) as device:
            start, length = disks.xfs_log_range(device)
        return chunks.chunk_set([(disk.partition(1).start + start, length)])
    return _itable_chunks(disk)


@pytest.fixture(scope="module", params=sorted(disks.ALLOCATED_ZEROS))
def zero_disk(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ZeroDisk:
    name = request.param
    disk = disks.ALLOCATED_ZEROS[name](tmp_path_factory.mktemp(name) / "source.img")
    held = chunks.written_chunks(disk.path)
    used = _used_chunks(name, disk)
    zero_used = used & held - chunks.nonzero_chunks(disk.path)
    assert len(zero_used) >= 8, f"{name}: too few held all-zero chunks in use to prove anything"
    return ZeroDisk(name, disk, held, used)


def _list(path: Path, zd: ZeroDisk) -> Path:
    path.write_text(json.dumps(disks.source_block_list(zd.held, zd.disk.size)))
    return path


def _to_volume(source: Path, listed: Path | None, tmp_path: Path) -> tuple[dict, dict[int, bytes]]:
    target = blank_like(source, tmp_path / "target.img")
    flags = ["--source-blocks", str(listed)] if listed else []
    with attached(source) as src, attached(target) as dst:
        run = sparsecopy("copy", src, dst, "--verify", "--jobs", "4", *flags)
    assert run.returncode == 0, run.stderr
    stored = {}
    with target.open("rb") as f:
        for index in sorted(chunks.written_chunks(target)):
            f.seek(index * chunks.CHUNK)
            stored[index] = f.read(chunks.CHUNK)
    return run.summary, stored


def _to_snapshot(
    source: Path, listed: Path | None, tmp_path: Path
) -> tuple[dict, dict[int, bytes]]:
    with StandIn(credentials=KEYS) as ebs, contextlib.ExitStack() as stack:
        snapshot_id = _start(ebs, source.stat().st_size)
        by_id = stack.enter_context(_instance(tmp_path, {SOURCES[0]: source}))
        url = ""
        if listed:
            served = tmp_path / "served"
            served.mkdir()
            url = stack.enter_context(_served_bundle(served, {0: listed}))
        run = _job(by_id, ebs, [snapshot_id], "--verify", "true", "--source-blocks-url", url)
        assert run.returncode == 0, run.stderr
        (volume,) = run.summary["volumes"]
        return volume, dict(ebs.snapshots[snapshot_id].blocks)


def _dry_run(source: Path, listed: Path | None) -> int:
    flags = ["--source-blocks", str(listed)] if listed else []
    with attached(source) as src:
        run = sparsecopy("inspect", src, *flags)
    assert run.returncode == 0, run.stderr
    return int(run.summary["predicted_blocks"])


@pytest.mark.parametrize("with_list", [False, True], ids=["no-list", "block-list"])
@pytest.mark.parametrize("sink", ["volume", "snapshot"])
def test_needed_zero_blocks_are_stored_and_an_encrypted_restore_holds(
    zero_disk: ZeroDisk, sink: str, with_list: bool, tmp_path: Path
) -> None:
    zd = zero_disk
    source = working_copy(zd.disk, tmp_path / "source.img")
    listed = _list(tmp_path / "list.json", zd) if with_list else None
    predicted = _dry_run(source.path, listed)
    copy = _to_volume if sink == "volume" else _to_snapshot
    summary, stored = copy(source.path, listed, tmp_path)
    # an encrypted restore of what was stored: every other block reads random bytes
    restored = restore.restore_blocks(stored, zd.disk.size, tmp_path / "restored.img", zd.name)
    image = zd.disk.copy_at(restored)
    assert disks.file_hashes(image, 1) == zd.disk.files[1]
    disks.fsck_clean(image, 1)
    missing = (zd.used & zd.held) - set(stored)
    assert not missing, f"needed chunks not stored: {sorted(missing)[:10]} of {len(missing)}"
    if listed:
        assert set(stored) <= zd.held, sorted(set(stored) - zd.held)[:10]
    zeros = {i for i, data in stored.items() if not data.strip(b"\0")}
    assert summary["blocks_written"] == len(stored) == predicted
    assert summary["zero_blocks"] == len(zeros) >= 8
