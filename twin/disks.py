"""The demo's dirty disks, built with the dev kit's disk builders (devkit.disks)."""

from __future__ import annotations

from pathlib import Path

from devkit.disks import (
    DiskImage,
    build_bare_ext4,
    build_gpt_efi_ext4,
    build_gpt_xfs,
    build_mbr_ntfs,
)
from devkit.disks.zeros import (
    build_ext4_zero_files,
    build_ext4_zeroed_itables,
    build_xfs_fresh,
)

GIB = 1024**3
# Disks holding allocated zeros (issue #19, devkit/disks/zeros.py): a copy that drops all-zero
# blocks the filesystem needs is corrupt on an encrypted restore.
ALLOCATED_ZEROS = {
    "ext4-zero-files": build_ext4_zero_files,  # a dd'd swap file, a file of written zero pages
    "xfs-fresh": build_xfs_fresh,  # mkfs.xfs only: its log held as zeros
    "ext4-zeroed-itables": build_ext4_zeroed_itables,  # inode tables written as zeros
}
FILESYSTEMS = ("ext4", "xfs", "ntfs", "bare-ext4", *ALLOCATED_ZEROS)


def build(fs: str, path: Path, seed: int = 0, root_uuid: str | None = None) -> DiskImage:
    """A dirty 1 GiB disk (EBS volume sizes are whole GiB): files written, some deleted.
    root_uuid: the root filesystem's UUID (ext4 and xfs: a disk of an AMI built from a base)."""
    if root_uuid is not None and fs not in ("ext4", "xfs"):
        raise ValueError(f"FS={fs}: only the ext4 and xfs disks have a root filesystem UUID to set")
    if fs == "ext4":  # seed 000's experiment: GPT with BIOS boot, EFI and an ext4 root
        return build_gpt_efi_ext4(path, size=GIB, seed=seed + 1, root_uuid=root_uuid)
    if fs == "xfs":
        return build_gpt_xfs(path, size=GIB, seed=seed + 2, root_uuid=root_uuid)
    if fs == "ntfs":
        return build_mbr_ntfs(path, size=GIB, seed=seed + 3)
    if fs == "bare-ext4":
        return build_bare_ext4(path, size=GIB, seed=seed + 5)
    if fs in ALLOCATED_ZEROS:
        return ALLOCATED_ZEROS[fs](path, size=GIB)
    raise ValueError(f"FS={fs} is not one of {', '.join(FILESYSTEMS)}")
