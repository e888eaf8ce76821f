"""What each filesystem marks allocated, read with the filesystem's own tools.

This is the ground truth for the lower bound and is deliberately independent of the program
under test: ext4 from `dumpe2fs` (block bitmaps), XFS from `xfs_db freesp -d` (free-space
btrees and AGFL), NTFS from `ntfscat -i 6` ($Bitmap) plus the backup boot sector after the last
cluster. Partition-table structures (GPT at both ends, or the MBR sector) count as allocated too.
"""

from __future__ import annotations

import re
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bench.chunks import Extent, complement, merge, shift, total
from bench.disk import SECTOR, Layout
from bench.system import BenchError, Resources, run

GPT_SECTORS = 34  # protective MBR + header + 32 sectors of entries; the backup is 33 at the end


@dataclass(frozen=True)
class Allocation:
    extents: list[Extent]  # absolute byte ranges on the disk
    bytes: int


def table_extents(layout: Layout) -> list[Extent]:
    if layout.table == "gpt":
        backup = (GPT_SECTORS - 1) * SECTOR
        return [(0, GPT_SECTORS * SECTOR), (layout.size - backup, backup)]
    return [(0, SECTOR)]


def parse_dumpe2fs(text: str) -> list[Extent]:
    """Allocated byte ranges of an ext2/3/4 filesystem from `dumpe2fs` output."""
    header = dict(re.findall(r"^([A-Z][\w ]+):\s+(\S+)", text, flags=re.MULTILINE))
    try:
        block_size = int(header["Block size"])
        block_count = int(header["Block count"])
    except KeyError as err:
        raise BenchError(f"dumpe2fs output lacks {err}; is this an ext filesystem?") from err
    free: list[Extent] = []
    for line in re.findall(r"^\s+Free blocks: (.*)$", text, flags=re.MULTILINE):
        for item in filter(None, (part.strip() for part in line.split(","))):
            first, _, last = item.partition("-")
            start = int(first)
            free.append((start, int(last or first) - start + 1))
    allocated = complement(free, 0, block_count)
    return [(start * block_size, length * block_size) for start, length in allocated]


def parse_xfs(sb_text: str, freesp_text: str) -> list[Extent]:
    """Allocated byte ranges of XFS from `xfs_db -c 'sb 0' -c 'p ...'` and `freesp -d`."""
    sb = {k: int(v) for k, v in re.findall(r"^(\w+) = (\d+)$", sb_text, flags=re.MULTILINE)}
    try:
        agblocks, dblocks, block_size = sb["agblocks"], sb["dblocks"], sb["blocksize"]
    except KeyError as err:
        raise BenchError(f"xfs_db superblock output lacks {err}") from err
    free: list[Extent] = []
    for agno, agbno, length in re.findall(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s*$", freesp_text, re.M):
        free.append((int(agno) * agblocks + int(agbno), int(length)))
    allocated = complement(free, 0, dblocks)
    return [(start * block_size, length * block_size) for start, length in allocated]


def ntfs_geometry(boot_sector: bytes) -> tuple[int, int]:
    """(cluster size, total sectors) from an NTFS boot sector."""
    if boot_sector[3:11] != b"NTFS    ":
        raise BenchError("the partition has no NTFS boot sector")
    bytes_per_sector = struct.unpack_from("<H", boot_sector, 0x0B)[0]
    spc = boot_sector[0x0D]
    sectors_per_cluster = 1 << (256 - spc) if spc > 0x80 else spc
    total_sectors = struct.unpack_from("<Q", boot_sector, 0x28)[0]
    return bytes_per_sector * sectors_per_cluster, total_sectors * bytes_per_sector


def bitmap_runs(bitmap: bytes, bits: int) -> list[Extent]:
    """(first, count) runs of set bits among the first `bits` bits (LSB first, like $Bitmap)."""
    runs: list[Extent] = []
    start = -1
    index = 0
    while index < bits:
        byte = bitmap[index >> 3]
        if index & 7 == 0 and index + 8 <= bits and byte in (0, 0xFF):
            is_set, step = byte == 0xFF, 8  # a whole byte at once
        else:
            is_set, step = bool((byte >> (index & 7)) & 1), 1
        if is_set and start < 0:
            start = index
        elif not is_set and start >= 0:
            runs.append((start, index - start))
            start = -1
        index += step
    if start >= 0:
        runs.append((start, bits - start))
    return runs


def parse_ntfs(boot_sector: bytes, bitmap: bytes) -> list[Extent]:
    """Allocated byte ranges of NTFS: clusters set in $Bitmap plus the backup boot sector."""
    cluster, fs_bytes = ntfs_geometry(boot_sector)
    clusters = fs_bytes // cluster
    if len(bitmap) * 8 < clusters:
        raise BenchError(f"$Bitmap has {len(bitmap) * 8} bits for {clusters} clusters")
    extents = [(first * cluster, count * cluster) for first, count in bitmap_runs(bitmap, clusters)]
    extents.append((fs_bytes, SECTOR))  # backup boot sector, just after the last cluster
    return extents


def filesystem_extents(device: str, fs: str) -> list[Extent]:
    """Allocated byte ranges of the filesystem on `device`, relative to its start."""
    if fs == "ext4":
        return parse_dumpe2fs(run(["dumpe2fs", device]))
    if fs == "xfs":
        sb = run(["xfs_db", "-r", "-c", "sb 0", "-c", "p agblocks dblocks blocksize", device])
        return parse_xfs(sb, run(["xfs_db", "-r", "-c", "freesp -d", device]))
    if fs == "ntfs":
        with open(device, "rb") as f:
            boot = f.read(SECTOR)
        proc = subprocess.run(["ntfscat", "-i", "6", device], capture_output=True, check=False)
        if proc.returncode != 0:
            raise BenchError(f"ntfscat -i 6 {device}: {proc.stderr.decode().strip()}")
        return parse_ntfs(boot, proc.stdout)
    raise BenchError(f"no allocation reader for {fs!r}")


def allocation(image: Path, layout: Layout, res: Resources) -> Allocation:
    device = res.attach(image, offset=layout.part_start, size=layout.part_size, read_only=True)
    try:
        in_fs = filesystem_extents(device, layout.fs)
    finally:
        res.detach(device)
    extents = merge(table_extents(layout) + shift(in_fs, layout.part_start))
    return Allocation(extents=extents, bytes=total(extents))
