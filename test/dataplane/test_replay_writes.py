"""Issue 19 on crash-consistent sources: after a journal/log replay the copy stores held plus (the
blocks the replay wrote), within what the filesystem needs, and nothing else outside held.

The source volume is an ENCRYPTED restore of a crashed image's snapshot (devkit.restore: every
512 KiB block the image does not hold reads as random bytes), the list is the image's held
blocks. The replay-written blocks come from an oracle that does not use sparsecopy: the same
replay (e2fsck -E journal_only, an XFS mount) on another encrypted restore, and the blocks it
changed (devkit.restore.replay_written). The copy, restored encrypted in its turn, must hold
every file and check clean.

What a replay reads where the snapshot holds nothing, on such a source: e2fsck reads journal
blocks up to the first one without the journal's magic (random bytes end the scan as zeros
would); XFS log recovery reads a logged buffer's home block before applying the logged ranges
and writes the whole buffer back, random bytes in its unlogged (unused) ranges included. Those
bytes are stored with the written block, as on the source; the fsck of the restore below shows
that nothing reads them."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import attached, blank_like, sparsecopy

from devkit import chunks, disks, restore

pytestmark = [pytest.mark.needs_root, pytest.mark.usefixtures("no_leaks")]


def _ext4_mid_checkpoint(path: Path) -> disks.DiskImage:
    """A crashed ext4 snapshot taken while jbd2 writes home: one bitmap no longer matches the
    checksum its group descriptor holds, so debugfs refuses to read the bitmaps before the
    replay (the CI flake of stop 26: devkit's copy of a mounted image caught that moment)."""
    disk = disks.build_bare_ext4(path, crash=True)
    disks.checkpoint_one_bitmap(disk.path)
    refused = subprocess.run(["debugfs", "-R", "stats", str(disk.path)], capture_output=True)
    assert b"checksum does not match" in refused.stderr, refused.stderr
    return disk


BUILDERS = {
    "ext4": lambda path: disks.build_bare_ext4(path, crash=True),
    "ext4-mid-checkpoint": _ext4_mid_checkpoint,
    "xfs": disks.build_bare_xfs_crashed,
}


@dataclass
class Crashed:
    disk: disks.DiskImage
    held: set[int]
    replayed: set[int]  # blocks the replay writes that the image does not hold (the oracle)


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def crashed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Crashed:
    work = tmp_path_factory.mktemp(f"crashed-{request.param}")
    disk = BUILDERS[request.param](work / "image.img")
    replayed = restore.replay_written(disk.path, disk.partitions, work / "oracle.img", "oracle")
    assert replayed, "the replay writes no unheld block here: this test would prove nothing"
    return Crashed(disk, chunks.written_chunks(disk.path), replayed)


def test_the_copy_stores_held_and_replayed_blocks_only_and_an_encrypted_restore_holds(
    crashed: Crashed, tmp_path: Path
) -> None:
    disk = crashed.disk
    source = restore.restore_image(disk.path, tmp_path / "source.img", "source-key")
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(disks.source_block_list(crashed.held, disk.size)))
    target = blank_like(source, tmp_path / "target.img")
    with attached(source) as src, attached(target) as dst:
        run = sparsecopy("copy", src, dst, "--verify", "--source-blocks", str(listed))
    assert run.returncode == 0, run.stderr
    stored = chunks.written_chunks(target)
    beyond = stored - crashed.held
    assert beyond == crashed.replayed, (
        f"stored beyond held: {sorted(beyond)[:10]}, replay wrote {sorted(crashed.replayed)[:10]}"
    )
    (part,) = run.summary["partitions"]
    assert f"the replay wrote {len(crashed.replayed)} needed block(s)" in part["note"]
    # the new snapshot restored encrypted (another key): its absent blocks random as well
    restored = restore.restore_image(target, tmp_path / "restored.img", "new-key")
    image = disk.copy_at(restored)
    assert disks.file_hashes(image, 1) == disk.files[1]
    disks.fsck_clean(image, 1)
