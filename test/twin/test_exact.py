"""The twin's exactness checks (issue #19) without a workflow: the block rule (twin/needed.py),
its FIEMAP oracle against debugfs on a disk of zero-filled files, the rule in holds(), and
verify() on a restore where an all-zero block a file needs was dropped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devkit.chunks import CHUNK
from devkit.disks import recovered_copy
from devkit.disks.zeros import SWAP_FILE, ZERO_PAGES_FILE, build_ext4_zero_files, ext4_file_chunks
from devkit.pytest_ci import require_root
from devkit.restore import absent_block
from twin.checks import broken_invariants, holds
from twin.emulator.blockstore import written_chunks
from twin.needed import check_blocks, file_data_chunks
from twin.verify import verify

root_only = pytest.mark.needs_root


def test_the_block_rule_names_blocks_beyond_held_and_file_blocks_missing() -> None:
    files = {"1:swapfile": {4, 5}, "1:a": {9}}
    assert check_blocks({1, 4, 5, 9}, {1, 4, 5, 9}, files)["holds"] is True
    # file blocks the source does not hold are not the copy's to write
    assert check_blocks({1, 4, 9}, {1, 4, 9}, files)["holds"] is True
    dropped = check_blocks({1, 4, 5, 9}, {1, 4, 9}, files)
    assert (dropped["holds"], dropped["file_blocks_missing"]) == (False, [5])
    assert dropped["files_missing_blocks"] == ["1:swapfile"]
    beyond = check_blocks({1, 4, 5, 9}, {1, 4, 5, 9, 12}, files)
    assert (beyond["holds"], beyond["beyond_held"]) == (False, [12])
    # a block a journal replay wrote where the source held nothing is the replay's output; any
    # other block beyond held still breaks the rule (issue #19: garbage on an encrypted source)
    replayed = check_blocks({1, 4, 5, 9}, {1, 4, 5, 9, 12, 13}, files, {12})
    assert (replayed["holds"], replayed["beyond_held"]) == (False, [13])
    assert replayed["beyond_held_replayed_count"] == 1
    assert check_blocks({1, 4, 5, 9}, {1, 4, 5, 9, 12}, files, {12})["holds"] is True


def _row(**verification: Any) -> dict[str, Any]:
    row = {"files_verified": True, "fsck_clean": True, "blocks": {"holds": True}}
    return {"leaked_resources": 0, "iam_denials": [], "source_snapshot_unchanged": True,
            "delivered": True, "delivered_snapshot_ids": ["snap-1"],
            "new_snapshot_ids_existing": ["snap-1"], "new_image_id": None,
            "verification": [{**row, **verification}]}  # fmt: skip


def test_holds_needs_every_new_snapshot_exact() -> None:
    assert holds(_row()) is True
    assert holds(_row(blocks={"holds": False})) is False
    assert holds(_row(files_verified=False)) is False
    assert holds(_row(fsck_clean=False)) is False


def test_a_broken_invariant_is_named() -> None:
    """A failed twin test prints what broke, not a truncated report."""
    assert broken_invariants(_row()) == []
    assert broken_invariants({**_row(), "leaked_resources": 2}) == ["leaked: 2"]
    assert broken_invariants({**_row(), "new_image_boots": False}) == ["the new AMI did not boot"]
    stuck = {"boots": False, "timed_out": False, "fatal": "no GRUB", "seconds": 31.0,
             "milestones": {}, "console_tail": ["Booting from Hard Disk..."]}  # fmt: skip
    row = {**_row(), "new_image_boots": False, "boot_proof": {"new": stuck, "source": {}}}
    assert broken_invariants(row) == [
        "the new AMI did not boot: no GRUB after 31.0 s, milestones {}, "
        "last: Booting from Hard Disk..."
    ]
    assert broken_invariants({**_row(), "new_snapshot_ids_existing": []}) == [
        "delivered ['snap-1'], of which exist []"
    ]
    (unfsckd,) = broken_invariants(_row(fsck_clean=False))
    assert unfsckd.startswith("not exact: {") and "'fsck_clean': False" in unfsckd


@pytest.fixture(scope="module")
def zero_files(tmp_path_factory: pytest.TempPathFactory) -> Any:
    require_root()
    tmp = tmp_path_factory.mktemp("zero-files")
    disk = build_ext4_zero_files(tmp / "disk.img")
    return disk, recovered_copy(disk, tmp / "reference.img")


@root_only
def test_fiemap_finds_the_zero_filled_files_blocks_as_debugfs_does(zero_files: Any) -> None:
    disk, ref = zero_files
    files = file_data_chunks(ref)
    for name in (SWAP_FILE, ZERO_PAGES_FILE):
        assert files[f"1:{name}"] == ext4_file_chunks(disk, 1, name), name
    held = written_chunks(disk.path)
    assert files[f"1:{SWAP_FILE}"] <= held  # the zeros were written: the snapshot holds them


@root_only
def test_a_dropped_zero_block_fails_on_the_encrypted_restore_only(
    zero_files: Any, tmp_path: Path
) -> None:
    disk, ref = zero_files
    held = written_chunks(disk.path)
    swap = sorted(file_data_chunks(ref)[f"1:{SWAP_FILE}"])
    dropped = swap[len(swap) // 2]  # an all-zero block in the middle of the swap file
    unencrypted, encrypted = tmp_path / "plain.img", tmp_path / "encrypted.img"
    for restore in (unencrypted, encrypted):
        restore.write_bytes(disk.path.read_bytes())
    with open(encrypted, "r+b") as f:
        f.seek(dropped * CHUNK)
        f.write(absent_block("key", dropped))
    with open(unencrypted, "r+b") as f:
        f.seek(dropped * CHUNK)
        f.write(bytes(CHUNK))
    assert verify(disk, ref, held, unencrypted).problems == []
    problems = verify(disk, ref, held, encrypted).problems
    assert f"partition 1: {SWAP_FILE} differs or missing" in problems
