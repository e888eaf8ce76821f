import json
from pathlib import Path

import pytest

from bench.blocks import (
    GIB,
    block_list,
    chunk_extents,
    held_and_needed,
    held_needed_chunks,
    intersect,
    read_limit,
    write_block_list,
)
from devkit.chunks import CHUNK

MIB = 1 << 20


def test_block_list_has_list_snapshot_blocks_shape_sorted() -> None:
    listed = block_list({5, 0, 3}, 2 * GIB)
    assert listed == {
        "BlockSize": 524288,
        "VolumeSize": 2,
        "Blocks": [{"BlockIndex": 0}, {"BlockIndex": 3}, {"BlockIndex": 5}],
    }


def test_volume_size_is_whole_gib_rounded_down_never_past_the_device() -> None:
    assert block_list(set(), 2 * GIB + 256 * MIB)["VolumeSize"] == 2
    assert block_list(set(), 256 * MIB)["VolumeSize"] == 0


def test_the_written_block_list_names_the_chunks_holding_data(tmp_path: Path) -> None:
    image = tmp_path / "disk.img"
    with image.open("wb") as f:
        f.truncate(GIB)
        f.seek(3 * CHUNK + 7)
        f.write(b"x")
        f.seek(10 * CHUNK - 1)
        f.write(b"yz")  # straddles chunks 9 and 10
    listed = tmp_path / "blocks.json"
    assert write_block_list(image, listed) == {3, 9, 10}
    document = json.loads(listed.read_text())
    assert [b["BlockIndex"] for b in document["Blocks"]] == [3, 9, 10]
    assert document["VolumeSize"] == 1 and document["BlockSize"] == CHUNK


def test_chunk_extents_joins_adjacent_chunks() -> None:
    assert chunk_extents({4, 1, 2}) == [(CHUNK, 2 * CHUNK), (4 * CHUNK, CHUNK)]


def test_intersect_keeps_only_bytes_in_both() -> None:
    assert intersect([(0, 10), (20, 10)], [(5, 20)]) == [(5, 5), (20, 5)]
    assert intersect([(0, 10)], [(10, 5)]) == []
    assert intersect([(0, 100)], [(10, 5), (3, 2), (90, 20)]) == [(3, 2), (10, 5), (90, 10)]
    assert intersect([], [(0, 1)]) == []


def test_held_and_needed_counts_needed_bytes_inside_held_chunks() -> None:
    needed = [(0, 100), (CHUNK - 10, 20), (5 * CHUNK, 3 * CHUNK)]
    # chunk 0 holds the first 100 bytes and 10 of the straddling range; chunk 6 one whole chunk
    assert held_and_needed({0, 6}, needed) == 110 + CHUNK
    assert held_and_needed(set(), needed) == 0


def test_read_limit_is_ten_percent_over_plus_one_mib() -> None:
    assert read_limit(0) == MIB
    assert read_limit(100 * MIB) == pytest.approx(111 * MIB)


def test_the_lower_bound_is_every_held_chunk_with_a_needed_byte_zeros_or_not() -> None:
    needed = [(0, 100), (3 * CHUNK - 1, 2), (6 * CHUNK, 2 * CHUNK)]
    # chunk 2 and 3 share one needed range; 5 is held but not needed; 7 is needed, not held
    assert held_needed_chunks({0, 2, 3, 5, 6}, needed) == {0, 2, 3, 6}
    assert held_needed_chunks(set(), needed) == set()
