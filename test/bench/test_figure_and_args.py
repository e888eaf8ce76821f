import argparse
from pathlib import Path

import pytest

from bench.allocation import Allocation
from bench.args import parse_args, parse_disks, parse_filesystems, parse_methods, parse_size
from bench.disk import Disk, Layout, Part
from bench.figure import cell_fractions, render
from bench.measure import check_allocation, held_counts
from bench.system import BenchError


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
    assert parse_size("256M") == 256 << 20
    for bad in ("255M", "abc", "1073741825"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_size(bad)


def test_filesystems_must_be_known() -> None:
    assert parse_filesystems("xfs,ntfs") == ["xfs", "ntfs"]
    with pytest.raises(argparse.ArgumentTypeError, match="btrfs"):
        parse_filesystems("ext4,btrfs")


def test_other_disks_must_be_known_or_none() -> None:
    assert parse_disks("lvm,empty") == ["lvm", "empty"]
    assert parse_disks("none") == []
    with pytest.raises(argparse.ArgumentTypeError, match="raid"):
        parse_disks("lvm,raid")


def test_held_counts_come_from_the_summary_or_its_volumes() -> None:
    assert held_counts({"held_blocks": 10, "held_blocks_read": 4}) == (10, 4)
    volumes = {"volumes": [{"held_blocks": 10, "held_blocks_read": 4}, {"held_blocks": 1}]}
    assert held_counts(volumes) == (11, None)  # one volume lacks the count: not summed
    assert held_counts({"held_blocks": None, "held_blocks_read": None}) == (None, None)
    assert held_counts({"source_bytes_read": 5}) == (None, None)


MIB = 1 << 20


def test_the_allocation_reader_must_see_the_live_files_and_not_a_third() -> None:
    layout = Layout("gpt", 64 * MIB, (Part(1, "ext4", MIB, 62 * MIB),))
    disk = Disk("ext4", Path("x.img"), layout, 10 * MIB, {1: {"test2": "a", "test4": "b"}})
    check_allocation(disk, Allocation([], 0, {1: 21 * MIB}))
    for wrong in (19 * MIB, 31 * MIB):
        with pytest.raises(BenchError, match="allocation reader is wrong"):
            check_allocation(disk, Allocation([], 0, {1: wrong}))


def test_repeat_defaults_to_one_and_is_bounded() -> None:
    assert parse_args([]).repeat == 1
    assert parse_args(["--repeat", "3"]).repeat == 3
    for bad in ("0", "10"):
        with pytest.raises(SystemExit):
            parse_args(["--repeat", bad])
    assert parse_args(["--disks", "none"]).disks == []


def test_methods_must_be_known_and_default_to_all() -> None:
    assert parse_methods("seed-bs1M, allocated") == ["seed-bs1M", "allocated"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown method"):
        parse_methods("dd")
    assert parse_args([]).methods is None
