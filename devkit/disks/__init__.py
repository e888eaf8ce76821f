"""Disk images for the data-plane tests, the twin and the bench, built on loop devices.

Everything runs as root on a kernel that does not scan partition tables: partitions are reached
through offset loop devices. Every context manager detaches the loop devices it attached and
unmounts what it mounted, even on failure, and never touches devices it did not set up.

Typical use::

    from devkit import disks

    disk = disks.build_gpt_efi_ext4(tmp_path / "disk.img")
    with disks.partition_mount(disk, 3) as mnt:
        disks.fill_dirty(mnt, seed=1)
    hashes = disks.file_hashes(disk, 3)

The modules, one job each: `image` (Partition, DiskImage), `layout` (sparse files, GPT/MBR,
mkfs, a partition's loop device or mount), `dirt` (dirty files, crashes, stale bytes), the
builders by kind (`gpt`, `mbr`, `bare`, `inode_tables`, `zeros`: disks holding allocated
zeros, named in `ALLOCATED_ZEROS`) and `checks` (hashes, fsck, chunks).
This package names them all in one place for the tests.
"""

from devkit.chunks import source_block_list
from devkit.commands import run
from devkit.disks.bare import (
    build_bare_ext2_crashed,
    build_bare_ext4,
    build_bare_xfs_crashed,
    build_btrfs,
    build_empty,
)
from devkit.disks.checks import (
    data_chunks,
    file_hashes,
    fsck_clean,
    nonzero_chunks,
    partition_table,
    recovered_copy,
    same_bytes,
    seed_method_image,
    written_chunks,
)
from devkit.disks.dirt import (
    checkpoint_one_bitmap,
    crash_after_writes,
    fill_dirty,
    scribble_free_space,
    snapshot_while_mounted,
    write_random_bytes,
)
from devkit.disks.gpt import (
    build_ext4_swap,
    build_ext4_swap_raw_unwritten,
    build_gpt_efi_ext4,
    build_gpt_xfs,
    build_random_partition,
    efi_files,
)
from devkit.disks.image import CHUNK, MIB, SECTOR, DiskImage, Partition
from devkit.disks.inode_tables import (
    InodeTableGroup,
    build_stale_inode_tables,
    inode_table_groups,
    stale_inode_table_ranges,
    unused_inode_table_blocks,
)
from devkit.disks.layout import (
    BIOS_BOOT,
    EFI_SYSTEM,
    LINUX,
    LINUX_SWAP,
    create_sparse,
    make_gpt,
    make_mbr,
    mkfs,
    partition_loop,
    partition_mount,
)
from devkit.disks.mbr import build_mbr_logical, build_mbr_ntfs, ntfs_set_dirty
from devkit.disks.zeros import (
    ALLOCATED_ZEROS,
    ZERO_FILES,
    build_ext4_zero_files,
    build_ext4_zeroed_itables,
    build_xfs_fresh,
    ext4_file_chunks,
    rewrite_plainly,
    xfs_log_range,
)
from devkit.loop import loop_device
from devkit.mounts import mounted

__all__ = [
    "ALLOCATED_ZEROS",
    "BIOS_BOOT",
    "CHUNK",
    "EFI_SYSTEM",
    "LINUX",
    "LINUX_SWAP",
    "MIB",
    "SECTOR",
    "ZERO_FILES",
    "DiskImage",
    "InodeTableGroup",
    "Partition",
    "build_bare_ext2_crashed",
    "build_bare_ext4",
    "build_bare_xfs_crashed",
    "build_btrfs",
    "build_empty",
    "build_ext4_swap",
    "build_ext4_swap_raw_unwritten",
    "build_ext4_zero_files",
    "build_ext4_zeroed_itables",
    "build_gpt_efi_ext4",
    "build_gpt_xfs",
    "build_mbr_logical",
    "build_mbr_ntfs",
    "build_random_partition",
    "build_stale_inode_tables",
    "build_xfs_fresh",
    "checkpoint_one_bitmap",
    "crash_after_writes",
    "create_sparse",
    "data_chunks",
    "efi_files",
    "ext4_file_chunks",
    "file_hashes",
    "fill_dirty",
    "fsck_clean",
    "inode_table_groups",
    "loop_device",
    "make_gpt",
    "make_mbr",
    "mkfs",
    "mounted",
    "nonzero_chunks",
    "ntfs_set_dirty",
    "partition_loop",
    "partition_mount",
    "partition_table",
    "recovered_copy",
    "rewrite_plainly",
    "run",
    "same_bytes",
    "scribble_free_space",
    "seed_method_image",
    "snapshot_while_mounted",
    "source_block_list",
    "stale_inode_table_ranges",
    "unused_inode_table_blocks",
    "write_random_bytes",
    "written_chunks",
    "xfs_log_range",
]
