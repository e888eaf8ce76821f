"""The dry run's data plane: ``inspect`` (and the job's ``--mode inspect``) estimates what a copy
would read and store from the metadata alone, writes nothing, and its prediction is checked here
against the 512 KiB chunks a real copy of the same source writes (docs/workflow.md, "Dry run").

predicted_blocks is exact: the dry run counts the block set the copy writes (blocks.BlockSet,
zeros included, issue 19), except for partitions of the trim method (btrfs), counted whole within
the held blocks because what fstrim leaves is known only after staging.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import attached, blank_like, follows_the_contract, sparsecopy
from sparsecopy import job

from devkit import disks

needs_root = pytest.mark.needs_root
DISKS: dict[str, Callable[[Path], disks.DiskImage]] = {
    "ext4-swap-raw": disks.build_ext4_swap_raw_unwritten,
    "ntfs": disks.build_mbr_ntfs,
    "efi-ext4": disks.build_gpt_efi_ext4,
    "mbr-logical": disks.build_mbr_logical,
    "xfs": disks.build_gpt_xfs,  # the unused log is allocated and all zero: predicted too
}
SOURCES = ["vol-0000000000000000a", "vol-0000000000000000b"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _block_list(source: Path, dest: Path) -> tuple[Path, set[int]]:
    """The block list the source's snapshot would have: every chunk that holds data."""
    held = disks.data_chunks(source)
    dest.write_text(json.dumps(disks.source_block_list(held, source.stat().st_size)))
    return dest, held


def _inspect_then_copy(source: Path, tmp_path: Path, *extra: str) -> tuple[dict, set[int]]:
    before = _sha(source)
    with attached(source) as src:
        inspected = sparsecopy("inspect", src, *extra)
    assert inspected.returncode == 0, inspected.stderr
    assert _sha(source) == before, "inspect changed the source"
    target = blank_like(source, tmp_path / f"target{len(extra)}.img")
    with attached(source) as src, attached(target) as dst:
        copied = sparsecopy("copy", src, dst, "--scratch", str(tmp_path), *extra)
    assert copied.returncode == 0, copied.stderr
    return inspected.summary, disks.data_chunks(target)


@needs_root
@pytest.mark.parametrize("name", sorted(DISKS))
def test_the_prediction_is_what_the_copy_writes(name: str, tmp_path: Path, no_leaks: None) -> None:
    source = DISKS[name](tmp_path / "source.img").path
    plain, written_plain = _inspect_then_copy(source, tmp_path)
    blocks, held = _block_list(source, tmp_path / "blocks.json")
    listed, written = _inspect_then_copy(source, tmp_path, "--source-blocks", str(blocks))
    print(f"{name}: held {len(held)} predicted {listed['predicted_blocks']} written {len(written)}")
    # the same block set: exactly what the copy writes, never more than the snapshot holds
    assert listed["predicted_blocks"] == len(written) and written <= held
    # without the list every needed block counts, held or not (bytes outside the partitions,
    # unknown partitions): a superset
    assert plain["predicted_blocks"] == len(written_plain) and written <= written_plain
    assert listed["held_blocks"] == len(held) and plain["held_blocks"] is None
    # the bytes to read are the live bytes widened to sectors, inside the predicted blocks
    assert listed["live_bytes"] <= listed["bytes_to_read"]
    assert listed["bytes_to_read"] <= listed["predicted_blocks"] * disks.CHUNK
    assert listed["bytes_to_read"] <= plain["bytes_to_read"]


@needs_root
def test_btrfs_is_counted_whole_within_the_held_blocks(tmp_path: Path, no_leaks: None) -> None:
    source = disks.build_btrfs(tmp_path / "source.img").path
    blocks, held = _block_list(source, tmp_path / "blocks.json")
    listed, written = _inspect_then_copy(source, tmp_path, "--source-blocks", str(blocks))
    assert len(written) <= listed["predicted_blocks"] == len(held)


@needs_root
def test_the_job_in_inspect_mode_writes_nothing_and_prints_one_line(
    tmp_path: Path, no_leaks: None
) -> None:
    """As the dry run sends it: the targets are the sources again (there are none)."""
    images = [
        disks.build_gpt_efi_ext4(tmp_path / "a.img").path,
        disks.build_mbr_ntfs(tmp_path / "b.img").path,
    ]
    before = [_sha(p) for p in images]
    from test_job import _instance  # the volumes linked by serial as udev does on Nitro

    with _instance(tmp_path, dict(zip(SOURCES, images, strict=True))) as by_id:
        run = sparsecopy(
            "job",
            "--source-volume-ids",
            ",".join(SOURCES),
            "--target-volume-ids",
            ",".join(SOURCES),
            "--source-device-names",
            "/dev/sdf,/dev/sdg",
            "--target-device-names",
            "/dev/sdf,/dev/sdg",
            "--mode",
            "inspect",
            env={"SPARSECOPY_BY_ID_DIR": str(by_id)},
        )
    assert run.returncode == 0, run.stderr
    assert [_sha(p) for p in images] == before
    line = follows_the_contract(run.summary)
    assert line["mode"] == "inspect"
    assert [v["sourceVolumeId"] for v in line["volumes"]] == SOURCES
    for entry, image in zip(line["volumes"], images, strict=True):
        assert set(entry) == {
            "sourceVolumeId",
            "size",
            "live_bytes",
            "bytes_to_read",
            "predicted_blocks",
            "held_blocks",
        }
        assert entry["size"] == image.stat().st_size
        assert 0 < entry["predicted_blocks"] * disks.CHUNK <= entry["size"]
        assert entry["held_blocks"] is None


def test_inspect_mode_never_looks_for_a_target() -> None:
    found: list[str] = []

    def find(volume_id: str, name: str | None) -> str:
        found.append(volume_id)
        return f"/dev/{volume_id}"

    def inspect(device: str, blocks: str | None) -> dict[str, object]:
        return {"size": 8 << 30, "live_bytes": 5, "bytes_to_read": 512, "predicted_blocks": 1}

    options = job.JobOptions(
        ",".join(SOURCES), ",".join(SOURCES), "/dev/sdf,/dev/sdg", "/dev/sdf,/dev/sdg"
    )
    steps = job.Steps(find=find, inspect=inspect, copy=lambda _: pytest.fail("copied"))
    code, line = job.run(options._replace(mode="inspect"), steps)
    assert code == 0 and found == SOURCES
    parsed = follows_the_contract(json.loads(line))
    assert parsed["volumes"][1] == {
        "sourceVolumeId": SOURCES[1],
        "size": 8 << 30,
        "live_bytes": 5,
        "bytes_to_read": 512,
        "predicted_blocks": 1,
        "held_blocks": None,
    }
    assert len(line) < 24_000


def test_an_inspect_failure_is_the_error_line_of_its_volume() -> None:
    def inspect(device: str, blocks: str | None) -> dict[str, object]:
        raise job.Failure(f"source {device} is mounted")

    options = job.JobOptions(SOURCES[0], SOURCES[0], "/dev/sdf", "/dev/sdf", mode="inspect")
    code, line = job.run(options, job.Steps(find=lambda v, n: f"/dev/{v}", inspect=inspect))
    assert code == 1
    assert follows_the_contract(json.loads(line)) == {
        "error": f"sparsecopy: error: source /dev/{SOURCES[0]} is mounted",
        "sourceVolumeId": SOURCES[0],
    }
