import struct

import pytest

from bench.allocation import (
    SWAP_PAGE,
    bitmap_runs,
    ext4_backups,
    needed_extents,
    not_needed,
    ntfs_geometry,
    parse_dumpe2fs,
    parse_ntfs,
    parse_xfs,
    table_extents,
    unusable_inode_tables,
)
from bench.disk import MIB, Layout, Part
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


GIB = 1 << 30


def one_partition(fs: str, table: str) -> Layout:
    return Layout(table, GIB, (Part(1, fs, MIB, GIB - 2 * MIB),))


def test_partition_table_structures_count_as_allocated() -> None:
    assert table_extents(one_partition("ext4", "gpt")) == [
        (0, 34 * 512),
        (GIB - 33 * 512, 33 * 512),
    ]
    assert table_extents(one_partition("ntfs", "dos")) == [(0, 512)]
    assert table_extents(Layout(None, GIB, (Part(1, "empty", 0, GIB),))) == []


# Four groups of 8 inodes (256 bytes each) in 1 KiB blocks: a table is 2 blocks.
CSUM_DUMPE2FS = """\
Filesystem features:      has_journal ext_attr extent 64bit flex_bg metadata_csum
Block count:              400
Block size:               1024
Inodes per group:         8
Inode size:\t          256

Group 0: (Blocks 1-100) csum 0xa649 [ITABLE_ZEROED]
  Primary superblock at 1, Group descriptors at 2-2
  Inode table at 10-11 (+9)
  0 free blocks, 5 free inodes, 2 directories, 5 unused inodes
  Free blocks:
  Free inodes: 4-8
Group 1: (Blocks 101-200) csum 0x2bcb [INODE_UNINIT]
  Backup superblock at 101, Group descriptors at 102-103
  Inode table at 12-13 (bg #0 + 11)
  99 free blocks, 8 free inodes, 0 directories, 8 unused inodes
  Free blocks: 102-200
Group 2: (Blocks 201-300) csum 0xda3e [INODE_UNINIT, BLOCK_UNINIT, ITABLE_ZEROED]
  Inode table at 14-15 (bg #0 + 13)
  100 free blocks, 8 free inodes, 0 directories, 8 unused inodes
  Free blocks: 201-300
Group 3: (Blocks 301-399) csum 0xda3f
  Inode table at 16-17 (bg #0 + 15)
  99 free blocks, 1 free inodes, 0 directories
  Free blocks: 301-399
"""
# dumpe2fs prints ", N unused inodes" only when N > 0 (group 3 above: none unused)


def test_inode_tables_no_inode_can_occupy_are_free_with_group_checksums() -> None:
    # group 0: 3 inodes used -> 768 bytes -> 1 block used, block 11 free; groups 1 and 2
    # INODE_UNINIT: whole tables; group 3: every inode possibly used -> none free
    assert unusable_inode_tables(CSUM_DUMPE2FS, 1024) == [(11, 1), (12, 2), (14, 2)]
    allocated = parse_dumpe2fs(CSUM_DUMPE2FS)
    assert (11 * 1024, 1024) not in allocated
    assert allocated == [(0, 11 * 1024), (16 * 1024, 86 * 1024)]


def test_without_group_checksums_every_inode_table_block_counts() -> None:
    plain = CSUM_DUMPE2FS.replace(" metadata_csum", "")
    assert unusable_inode_tables(plain, 1024) == []
    assert unusable_inode_tables(plain.replace("64bit", "64bit uninit_bg"), 1024) != []


def test_a_group_without_its_inode_table_or_inode_counts_is_an_error() -> None:
    broken = CSUM_DUMPE2FS.replace("  Inode table at 16-17 (bg #0 + 15)\n", "")
    with pytest.raises(BenchError, match="Group 3"):
        unusable_inode_tables(broken, 1024)
    uncounted = CSUM_DUMPE2FS.replace("99 free blocks, 1 free inodes, 0 directories\n", "")
    with pytest.raises(BenchError, match="Group 3"):
        unusable_inode_tables(uncounted, 1024)


def test_ext4_backups_are_the_backup_superblocks_and_descriptors() -> None:
    assert ext4_backups(CSUM_DUMPE2FS) == [(101 * 1024, 1024), (102 * 1024, 2048)]


def test_not_needed_by_kind_of_partition() -> None:
    fs = Part(1, "ext4", 10 * MIB, 4 * MIB)
    # relative allocated ranges: the first MiB and the last byte
    assert not_needed(fs, [(0, MIB), (4 * MIB - 1, 1)]) == [(11 * MIB, 3 * MIB - 1)]
    swap = Part(2, "swap", 20 * MIB, 4 * MIB)
    assert not_needed(swap, None) == [(20 * MIB + SWAP_PAGE, 4 * MIB - SWAP_PAGE)]
    for kind in ("raw", "empty"):
        assert not_needed(Part(3, kind, 0, MIB), None) == []
    with pytest.raises(BenchError, match="no allocation map"):
        not_needed(fs, None)


def test_needed_is_the_disk_less_free_space_and_swap_pages_gaps_included() -> None:
    layout = Layout(
        "gpt",
        16 * MIB,
        (
            Part(1, "xfs", MIB, 4 * MIB),
            Part(2, "swap", 5 * MIB, 4 * MIB),
            Part(3, "raw", 9 * MIB, 2 * MIB),
            Part(4, "empty", 12 * MIB, 3 * MIB),
        ),
    )
    needed = needed_extents(layout, {1: [(0, 4096)]})
    # [0, 1 MiB + 4 KiB): table, gap, xfs's allocated block; swap header; then from the raw
    # partition to the end of the disk (raw, the gap at 11 MiB, empty, the tail)
    assert needed == [(0, MIB + 4096), (5 * MIB, SWAP_PAGE), (9 * MIB, 7 * MIB)]
