from pathlib import Path

from devkit.chunks import (
    CHUNK,
    chunk_set,
    complement,
    copy_image,
    data_extents,
    merge,
    nonzero_chunks,
    split_by_chunk,
    total,
    written_chunks,
)


def test_merge_joins_overlapping_and_touching_extents_and_drops_empty_ones() -> None:
    assert merge([(10, 5), (0, 10), (30, 0), (12, 10), (40, 1)]) == [(0, 22), (40, 1)]


def test_total_counts_overlaps_once() -> None:
    assert total([(0, 10), (5, 10)]) == 15


def test_complement_is_the_uncovered_part_of_the_range() -> None:
    assert complement([(2, 3), (8, 10)], 0, 12) == [(0, 2), (5, 3)]
    assert complement([], 4, 9) == [(4, 5)]
    assert complement([(0, 20)], 0, 12) == []


def test_chunk_set_counts_every_chunk_an_extent_touches() -> None:
    assert chunk_set([(CHUNK - 1, 2)]) == {0, 1}
    assert chunk_set([(CHUNK, CHUNK)]) == {1}
    assert chunk_set([(0, 0)]) == set()


def test_split_by_chunk_cuts_at_chunk_boundaries() -> None:
    pieces = list(split_by_chunk([(CHUNK - 4, CHUNK + 8)]))
    assert pieces == [(0, (CHUNK - 4, 4)), (1, (CHUNK, CHUNK)), (2, (2 * CHUNK, 4))]


def test_written_chunks_sees_only_data_of_a_sparse_file(tmp_path: Path) -> None:
    image = tmp_path / "sparse.img"
    with image.open("wb") as f:
        f.truncate(8 * CHUNK)
        f.seek(3 * CHUNK + 100)
        f.write(b"x")
    assert written_chunks(image) == {3}
    assert total(data_extents(image)) < 8 * CHUNK


def test_nonzero_chunks_ignores_allocated_zeros(tmp_path: Path) -> None:
    image = tmp_path / "disk.img"
    with image.open("wb") as f:
        f.write(bytes(4 * CHUNK))  # written, but all zero
        f.seek(2 * CHUNK + 10)
        f.write(b"\x01")
    assert nonzero_chunks(image, [(0, 4 * CHUNK)]) == {2}
    # the non-zero byte is outside the allocated extent: not live data
    assert nonzero_chunks(image, [(0, 2 * CHUNK + 10)]) == set()


def test_copy_image_keeps_holes_and_written_zeros(tmp_path: Path) -> None:
    image = tmp_path / "disk.img"
    with image.open("wb") as f:
        f.truncate(6 * CHUNK)
        f.seek(CHUNK)
        f.write(bytes(2 * CHUNK))  # written zeros: held by a snapshot
        f.seek(4 * CHUNK)
        f.write(b"data")
    copy = tmp_path / "copy.img"
    copy_image(image, copy)
    assert written_chunks(copy) == written_chunks(image) == {1, 2, 4}
    assert copy.read_bytes() == image.read_bytes()
