"""FAT12/16/32 (EFI system partitions): the reserved area, the FATs and root directory, plus
every cluster the first FAT marks in use. FAT has no journal; the FAT is the allocation truth
(fsck.fat can only turn lost chains into files, and those chains are marked in the FAT too)."""

import array
import struct
import sys
from typing import Callable, NamedTuple

from .extents import Extents

Reader = Callable[[int, int], bytes]


class FatMap(NamedTuple):
    allocated: Extents
    fs_bytes: int
    kind: str  # FAT12, FAT16 or FAT32


def read_map(read: Reader) -> FatMap:
    boot = read(0, 512)
    bps, spc, reserved, fats, root_entries, total16 = struct.unpack_from("<HBHBHH", boot, 11)
    fat_size16 = struct.unpack_from("<H", boot, 22)[0]
    total32, fat_size32 = struct.unpack_from("<II", boot, 32)
    fat_size = fat_size16 or fat_size32
    total = total16 or total32
    if not (bps and spc and fat_size and total):
        raise ValueError("FAT boot sector has an impossible geometry")
    root_sectors = (root_entries * 32 + bps - 1) // bps
    data_start = (reserved + fats * fat_size + root_sectors) * bps
    if data_start >= total * bps:
        raise ValueError("FAT areas do not fit in the volume")
    clusters = (total * bps - data_start) // (spc * bps)
    kind = "FAT12" if clusters < 4085 else "FAT16" if clusters < 65525 else "FAT32"
    fat = read(reserved * bps, fat_size * bps)
    media = boot[21]
    if media not in (0xF0, *range(0xF8, 0x100)) or fat[0] != media:
        # The first FAT entry repeats the media byte: anything else is not a FAT we can trust.
        raise ValueError("first FAT entry does not match the media descriptor")
    cluster_bytes = spc * bps
    allocated: Extents = [(0, data_start)]

    def add(cluster: int) -> None:
        start = data_start + (cluster - 2) * cluster_bytes
        last = allocated[-1]
        if last[0] + last[1] == start:
            allocated[-1] = (last[0], last[1] + cluster_bytes)
        else:
            allocated.append((start, cluster_bytes))

    if kind == "FAT12":
        for cluster in range(2, clusters + 2):
            pair = fat[cluster * 3 // 2] | fat[cluster * 3 // 2 + 1] << 8
            if (pair >> 4 if cluster & 1 else pair & 0xFFF) != 0:
                add(cluster)
    else:
        entries = array.array("H" if kind == "FAT16" else "I")
        entries.frombytes(fat[: (clusters + 2) * entries.itemsize])
        if sys.byteorder != "little":
            entries.byteswap()
        mask = 0xFFFF if kind == "FAT16" else 0x0FFFFFFF
        for cluster in range(2, min(clusters + 2, len(entries))):
            if entries[cluster] & mask:
                add(cluster)
    return FatMap(allocated, total * bps, kind)
