from pathlib import Path

from devkit.chunks import copy_image
from twin.emulator.blockstore import EBS_BLOCK, fingerprint, written_chunks


def _image(path: Path) -> Path:
    with open(path, "wb") as f:
        f.truncate(64 * EBS_BLOCK)
        f.seek(3 * EBS_BLOCK + 100)
        f.write(b"x" * 10)
        f.seek(10 * EBS_BLOCK)
        f.write(b"\0" * EBS_BLOCK)  # written zeros are still written blocks
    return path


def test_written_chunks_counts_allocated_blocks_including_written_zeros(tmp_path: Path) -> None:
    assert written_chunks(_image(tmp_path / "a")) == {3, 10}


def test_copy_image_keeps_allocation_and_bytes(tmp_path: Path) -> None:
    src = _image(tmp_path / "a")
    dst = tmp_path / "b"
    copy_image(src, dst)
    assert written_chunks(dst) == {3, 10}
    assert dst.read_bytes() == src.read_bytes()
    assert fingerprint(dst) == fingerprint(src)


def test_fingerprint_changes_when_a_block_is_written(tmp_path: Path) -> None:
    src = _image(tmp_path / "a")
    before = fingerprint(src)
    with open(src, "r+b") as f:
        f.seek(20 * EBS_BLOCK)
        f.write(b"\0")
    assert fingerprint(src) != before
