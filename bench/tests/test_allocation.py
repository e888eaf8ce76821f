import struct

import pytest

from bench.allocation import (
    bitmap_runs,
    ntfs_geometry,
    parse_dumpe2fs,
    parse_ntfs,
    parse_xfs,
    table_extents,
)
from bench.disk import Layout
from bench.system import BenchError

DUMPE2FS = """\
Filesystem volume name:   bench
Block count:              100
Block size:               4096
Free blocks:              70

Group 0: (Blocks 0-49) csum 0x1234 [ITABLE_ZEROED]
  Primary superblock at 0, Group descriptors at 1-1
  Free blocks: 10-19, 25
  Free inodes: 12-128
Group 1: (Blocks 50-99) csum 0x5678 [INODE_UNINIT]
  Free blocks: 50-99
  Free inodes: 129-256
"""


def test_dumpe2fs_allocated_is_every_block_not_listed_free() -> None:
    assert parse_dumpe2fs(DUMPE2FS) == [
        (0, 10 * 4096),
        (20 * 4096, 5 * 4096),
        (26 * 4096, 24 * 4096),
    ]


def test_dumpe2fs_without_header_is_an_error() -> None:
    with pytest.raises(BenchError, match="Block size"):
        parse_dumpe2fs("  Free blocks: 1-2\n")


SB = "agblocks = 100\ndblocks = 250\nblocksize = 4096\n"
FREESP = """\
    agno    agbno      len
       0        6        1
       0       10       90
       1        0      100
       2       20       30
   from      to extents  blocks    pct
      1       1       1       1   0.45
"""


def test_xfs_free_extents_are_placed_by_allocation_group() -> None:
    # free: 6, 10-99, 100-199, 220-249 -> allocated: 0-5, 7-9, 200-219
    assert parse_xfs(SB, FREESP) == [(0, 6 * 4096), (7 * 4096, 3 * 4096), (200 * 4096, 20 * 4096)]


def test_bitmap_runs_reads_bits_lsb_first_and_stops_at_the_bit_count() -> None:
    bitmap = bytes([0b00000110, 0xFF, 0xFF, 0b00000001, 0xFF])
    assert bitmap_runs(bitmap, 36) == [(1, 2), (8, 17), (32, 4)]
    assert bitmap_runs(bytes(4), 32) == []
    assert bitmap_runs(b"\xff", 8) == [(0, 8)]


def boot_sector(sectors_per_cluster: int, total_sectors: int) -> bytes:
    boot = bytearray(512)
    boot[3:11] = b"NTFS    "
    struct.pack_into("<H", boot, 0x0B, 512)
    boot[0x0D] = sectors_per_cluster
    struct.pack_into("<Q", boot, 0x28, total_sectors)
    return bytes(boot)


def test_ntfs_geometry_and_backup_boot_sector() -> None:
    assert ntfs_geometry(boot_sector(8, 1000)) == (4096, 512000)
    extents = parse_ntfs(boot_sector(8, 80), bytes([0b00000101, 0]))
    # clusters 0 and 2 (of 10), then the backup boot sector right after the last whole sector
    assert extents == [(0, 4096), (8192, 4096), (80 * 512, 512)]


def test_ntfs_rejects_other_boot_sectors_and_short_bitmaps() -> None:
    with pytest.raises(BenchError, match="no NTFS boot sector"):
        ntfs_geometry(bytes(512))
    with pytest.raises(BenchError, match="bits for"):
        parse_ntfs(boot_sector(1, 100), bytes(2))


def test_partition_table_structures_count_as_allocated() -> None:
    gpt = Layout("ext4", "gpt", 1 << 30, 1 << 20, (1 << 30) - (2 << 20))
    assert table_extents(gpt) == [(0, 34 * 512), ((1 << 30) - 33 * 512, 33 * 512)]
    mbr = Layout("ntfs", "dos", 1 << 30, 1 << 20, (1 << 30) - (1 << 20))
    assert table_extents(mbr) == [(0, 512)]
