"""The disks holding allocated zeros (devkit.disks.zeros) and the encrypted-style restore
(devkit.restore): what the data-plane tests, the twin and the bench rely on them for."""

from pathlib import Path

import pytest

from devkit import chunks, disks, restore
from devkit.disks.dirt import replay_writes_unheld

needs_root = pytest.mark.needs_root


@needs_root
@pytest.mark.parametrize("name", sorted(disks.ALLOCATED_ZEROS))
def test_each_disk_holds_allocated_all_zero_chunks(name: str, tmp_path: Path) -> None:
    disk = disks.ALLOCATED_ZEROS[name](tmp_path / "disk.img")
    held = chunks.written_chunks(disk.path)
    zero = held - chunks.nonzero_chunks(disk.path)
    assert len(zero) >= 16, f"{name}: only {len(zero)} of {len(held)} held chunks are all zeros"
    for part in disk.partitions:
        disks.fsck_clean(disk, part.number)


@needs_root
def test_the_zero_files_lie_in_held_all_zero_chunks(tmp_path: Path) -> None:
    disk = disks.build_ext4_zero_files(tmp_path / "disk.img")
    held = chunks.written_chunks(disk.path)
    zero = held - chunks.nonzero_chunks(disk.path)
    for name in disks.ZERO_FILES:
        found = disks.ext4_file_chunks(disk, 1, name)
        assert found <= held, f"{name}: chunks {sorted(found - held)[:5]} not held"
        assert len(found & zero) >= 6, f"{name}: too few all-zero chunks"
    assert disks.file_hashes(disk, 1) == disk.files[1]


def test_restore_keeps_held_chunks_and_fills_the_rest_deterministically(tmp_path: Path) -> None:
    image = tmp_path / "image"
    disks.create_sparse(image, 3 * chunks.CHUNK + 100)
    with open(image, "r+b") as f:
        f.seek(chunks.CHUNK)
        f.write(bytes(chunks.CHUNK))  # a held block of zeros
    one = restore.restore_image(image, tmp_path / "one", "key")
    data = one.read_bytes()
    assert len(data) == image.stat().st_size
    assert data[chunks.CHUNK : 2 * chunks.CHUNK] == bytes(chunks.CHUNK)
    assert data[: chunks.CHUNK] == restore.absent_block("key", 0) != bytes(chunks.CHUNK)
    assert data[3 * chunks.CHUNK :] == restore.absent_block("key", 3)[:100]
    assert restore.restore_image(image, tmp_path / "two", "key").read_bytes() == data
    assert restore.restore_image(image, tmp_path / "three", "other").read_bytes() != data
    blocks = restore.restore_blocks({1: bytes(chunks.CHUNK)}, len(data), tmp_path / "b", "key")
    assert blocks.read_bytes() == data


@pytest.mark.needs_root
def test_replay_written_finds_the_unheld_blocks_a_replay_writes(tmp_path: Path) -> None:
    crashed = disks.build_bare_ext4(tmp_path / "crashed.img", crash=True)
    work = tmp_path / "work.img"
    replayed = restore.replay_written(crashed.path, crashed.partitions, work, "key")
    assert replayed and not replayed & chunks.written_chunks(crashed.path)
    assert not work.exists()
    clean = disks.build_bare_ext4(tmp_path / "clean.img")
    assert restore.replay_written(clean.path, clean.partitions, work, "key") == set()
    # what the builder checks before it returns a crashed image (and rebuilds when it is false)
    assert replay_writes_unheld(crashed.path) and not replay_writes_unheld(clean.path)
