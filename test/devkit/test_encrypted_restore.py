from pathlib import Path

from devkit.chunks import CHUNK, written_chunks
from devkit.encrypted_restore import absent_block, restore_encrypted


def test_absent_blocks_are_random_stable_per_key_and_differ_between_keys() -> None:
    block = absent_block("k", 3)
    assert len(block) == CHUNK and block != bytes(CHUNK)
    assert absent_block("k", 3) == block
    assert absent_block("k", 4) != block
    assert absent_block("other", 3) != block
    assert (
        absent_block("k", 3, 100) == absent_block("k", 3, 100) and len(absent_block("k", 3, 7)) == 7
    )


def test_restore_fills_only_the_chunks_that_hold_no_data(tmp_path: Path) -> None:
    image = tmp_path / "copy.img"
    with image.open("wb") as f:
        f.truncate(4 * CHUNK + 1000)  # a short last chunk
        f.seek(CHUNK + 5)
        f.write(b"kept")
        f.seek(2 * CHUNK)
        f.write(bytes(CHUNK))  # written zeros are held: they stay zeros
    assert restore_encrypted(image, "k") == 3
    data = image.read_bytes()
    assert len(data) == 4 * CHUNK + 1000
    assert data[:CHUNK] == absent_block("k", 0)
    assert data[CHUNK : 2 * CHUNK] == bytes(5) + b"kept" + bytes(CHUNK - 9)
    assert data[2 * CHUNK : 3 * CHUNK] == bytes(CHUNK)
    assert data[3 * CHUNK : 4 * CHUNK] == absent_block("k", 3)
    assert data[4 * CHUNK :] == absent_block("k", 4, 1000)
    assert written_chunks(image) == set(range(5))
