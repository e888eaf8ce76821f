import hashlib
import random
import struct
from pathlib import Path

import pytest

from bench.allocation import Allocation
from bench.disk import (
    MIB,
    SECTOR,
    ZERO_FILE,
    Disk,
    Layout,
    Part,
    build,
    lvm_crc,
    lvm_label,
    make_table,
    mib_share,
    scattered_writes,
    uninit_groups_without_zeroed_tables,
    write_zero_file,
)
from bench.measure import check_allocation
from bench.system import BenchError, Resources
from devkit.chunks import data_extents

GIB = 1 << 30


def lvm_reference_crc(data: bytes) -> int:
    """LVM2's calc_crc, nibble at a time, as lib/misc/crc.c has it."""
    table = [
        0x00000000, 0x1DB71064, 0x3B6E20C8, 0x26D930AC, 0x76DC4190, 0x6B6B51F4,
        0x4DB26158, 0x5005713C, 0xEDB88320, 0xF00F9344, 0xD6D6A3E8, 0xCB61B38C,
        0x9B64C2B0, 0x86D3D2D4, 0xA00AE278, 0xBDBDF21C,
    ]  # fmt: skip
    crc = 0xF597A6CF
    for byte in data:
        crc ^= byte
        crc = (crc >> 4) ^ table[crc & 0xF]
        crc = (crc >> 4) ^ table[crc & 0xF]
    return crc


def test_lvm_crc_is_lvm2s_checksum() -> None:
    for data in (b"", b"LVM2 001", bytes(range(256)) * 2):
        assert lvm_crc(data) == lvm_reference_crc(data)


def test_lvm_label_carries_the_ids_and_a_valid_checksum() -> None:
    label = lvm_label(b"A" * 32, 100 * MIB)
    assert len(label) == SECTOR
    assert label[0:8] == b"LABELONE" and label[24:32] == b"LVM2 001"
    sector, crc, offset = struct.unpack_from("<QII", label, 8)
    assert (sector, offset) == (1, 32)
    assert crc == lvm_reference_crc(label[20:])
    assert label[32:64] == b"A" * 32
    assert struct.unpack_from("<Q", label, 64)[0] == 100 * MIB


def test_scattered_writes_stay_inside_and_cover_about_the_share() -> None:
    size = 256 * MIB
    writes = scattered_writes(size, random.Random(1), 0.25)
    assert all(offset >= MIB and offset + length <= size for offset, length in writes)
    assert all(offset % SECTOR == 0 for offset, _ in writes)
    written = sum(length for _, length in writes)
    assert size * 0.25 <= written < size * 0.25 + MIB


def test_mib_share_rounds_down_to_whole_mib_at_least_one() -> None:
    assert mib_share(256 * MIB, 0.45) == 115 * MIB
    assert mib_share(MIB, 0.1) == MIB


def test_make_table_reports_each_partitions_place_and_kind(tmp_path: Path) -> None:
    image = tmp_path / "disk.img"
    with image.open("wb") as f:
        f.truncate(64 * MIB)
    layout = make_table(image, "gpt", [("ext4", 20 * MIB), ("swap", 8 * MIB), ("lvm", None)])
    assert layout.table == "gpt" and layout.size == 64 * MIB
    assert [(p.number, p.kind) for p in layout.parts] == [(1, "ext4"), (2, "swap"), (3, "raw")]
    first, second, third = layout.parts
    assert first.start == MIB and first.size == 20 * MIB
    assert second.start == 21 * MIB and third.start == 29 * MIB
    assert third.start + third.size <= 64 * MIB - 33 * SECTOR
    assert layout.filesystems() == (first,) and layout.single_filesystem() is None


def test_single_filesystem_is_a_table_with_one_filesystem_partition() -> None:
    part = Part(1, "xfs", MIB, 10 * MIB)
    assert Layout("gpt", 16 * MIB, (part,)).single_filesystem() == part
    assert Layout(None, 16 * MIB, (part,)).single_filesystem() is None
    assert Layout("gpt", 16 * MIB, (Part(1, "raw", MIB, MIB),)).single_filesystem() is None


def test_stale_inode_tables_are_counted_from_the_group_flags() -> None:
    text = (
        "Group 0: (Blocks 0-10) csum 0x1 [ITABLE_ZEROED]\n"
        "Group 1: (Blocks 11-20) csum 0x2 [INODE_UNINIT]\n"
        "Group 2: (Blocks 21-30) csum 0x3 [INODE_UNINIT, BLOCK_UNINIT]\n"
        "Group 3: (Blocks 31-40) csum 0x4 [INODE_UNINIT, ITABLE_ZEROED]\n"
        "Group 4: (Blocks 41-50) csum 0x5\n"
    )
    assert uninit_groups_without_zeroed_tables(text) == 2


def test_the_never_written_disk_is_all_holes_and_unknown_names_are_refused(
    tmp_path: Path,
) -> None:
    disk = build("empty", tmp_path / "e.img", 8 * MIB, tmp_path, Resources())
    assert disk.layout == Layout(None, 8 * MIB, (Part(1, "empty", 0, 8 * MIB),))
    assert disk.image.stat().st_blocks == 0
    with pytest.raises(BenchError, match="unknown disk"):
        build("raid", tmp_path / "r.img", 8 * MIB, tmp_path, Resources())


def test_the_lvm_disk_has_a_label_and_scattered_data(tmp_path: Path) -> None:
    disk = build("lvm", tmp_path / "l.img", 64 * MIB, tmp_path, Resources())
    (part,) = disk.layout.parts
    with disk.image.open("rb") as f:
        f.seek(part.start + SECTOR)
        assert f.read(8) == b"LABELONE"
    held = disk.image.stat().st_blocks * 512
    assert 0.15 * part.size < held < 0.5 * part.size


def test_the_zero_file_is_written_zeros_not_a_hole(tmp_path: Path) -> None:
    path = tmp_path / "zerofile"
    digest = write_zero_file(path, 5 * MIB)
    assert digest == hashlib.sha256(bytes(5 * MIB)).hexdigest()
    assert data_extents(path) == [(0, 5 * MIB)]  # allocated: a snapshot holds these blocks


def test_the_allocation_check_counts_the_live_zero_file() -> None:
    files = {"test2": "a", "test4": "b", ZERO_FILE: "c"}
    disk = Disk("zeros-ext4", Path("x"), Layout("gpt", GIB, ()), 100 * MIB, {1: files}, 30 * MIB)
    check_allocation(disk, Allocation([], 0, {1: 235 * MIB}))  # 230 live + metadata
    with pytest.raises(BenchError, match="the live files hold 241172480"):
        check_allocation(disk, Allocation([], 0, {1: 200 * MIB}))
