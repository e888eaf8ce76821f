"""Recognise what a partition holds from its on-disk signatures (like blkid -p, but stdlib)."""

import struct
from typing import Callable

Reader = Callable[[int, int], bytes]  # (offset within the partition, length) -> bytes


def _fat(boot: bytes) -> bool:
    if boot[510:512] != b"\x55\xaa" or boot[0] not in (0xEB, 0xE9):
        return False
    bytes_per_sector, per_cluster, reserved, fats = struct.unpack_from("<HBHB", boot, 11)
    return (
        bytes_per_sector in (512, 1024, 2048, 4096)
        and per_cluster in (1, 2, 4, 8, 16, 32, 64, 128)
        and reserved >= 1
        and fats >= 1
        and boot[3:11] != b"NTFS    "
    )


def detect(read: Reader, size: int) -> str:
    """Filesystem name: ext4 (any ext2/3/4), xfs, ntfs, vfat, swap, btrfs, LVM2_member,
    crypto_LUKS, hibernation, or unknown."""
    head = read(0, min(size, 128 * 1024))
    if head[:4] == b"XFSB":
        return "xfs"
    if head[3:11] == b"NTFS    ":
        return "ntfs"
    if head[:6] == b"LUKS\xba\xbe":
        return "crypto_LUKS"
    if len(head) >= 1024 + 58 and head[1024 + 56 : 1024 + 58] == b"\x53\xef":
        return "ext4"
    if len(head) >= 0x10048 and head[0x10040:0x10048] == b"_BHRfS_M":
        return "btrfs"
    if head[512:520] == b"LABELONE" and head[512 + 24 : 512 + 32] == b"LVM2 001":
        return "LVM2_member"
    for page in (4096, 65536):
        if len(head) >= page:
            magic = head[page - 10 : page]
            if magic in (b"SWAPSPACE2", b"SWAP-SPACE"):
                return "swap"
            if magic.endswith(b"SUSPEND") or magic.startswith(b"S1SUSP"):
                return "hibernation"
    if _fat(head):
        return "vfat"
    return "unknown"
