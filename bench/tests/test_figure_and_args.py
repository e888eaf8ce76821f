import argparse

import pytest

from bench.figure import cell_fractions, render
from bench.run import parse_filesystems, parse_size


def test_cells_hold_one_chunk_each_for_small_volumes() -> None:
    assert cell_fractions({0, 3}, 4) == [1.0, 0.0, 0.0, 1.0]


def test_large_volumes_shade_cells_by_the_share_of_written_chunks() -> None:
    fractions = cell_fractions({0, 1, 2}, 4096 * 4)  # four chunks per cell
    assert len(fractions) == 4096
    assert fractions[0] == 0.75 and sum(fractions) == 0.75


def test_render_draws_one_rect_per_run_of_written_cells_and_names_panels() -> None:
    panels = [("source", "source", {1, 2, 5}), ("target (3)", "target", {2})]
    svg = render([("ext4", panels)], 16, "c")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count('fill-opacity="1.00"') == 3  # runs 1-2 and 5 in the source, 2 in the target
    assert 'width="8" height="4" fill="#d9480f"' in svg  # the run of two cells
    assert "source: 3" in svg and "target (3): 1" in svg


def test_size_accepts_binary_suffixes_and_refuses_tiny_or_odd_sizes() -> None:
    assert parse_size("2G") == 2 << 30
    assert parse_size("1536M") == 1536 << 20
    assert parse_size("1GiB") == 1 << 30
    for bad in ("512M", "abc", "1073741825"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_size(bad)


def test_filesystems_must_be_known() -> None:
    assert parse_filesystems("xfs,ntfs") == ["xfs", "ntfs"]
    with pytest.raises(argparse.ArgumentTypeError, match="btrfs"):
        parse_filesystems("ext4,btrfs")
