"""What a copy of each disk must carry ("needed"), read with the filesystems' own tools.

This is the ground truth for the lower bound and for "needed" and is deliberately independent of
the program under test. Needed = the whole disk except what is provably not needed:
- filesystem partitions: only what the filesystem marks allocated. ext4 from `dumpe2fs` (block
  bitmaps), less the inode-table blocks no inode can occupy when group checksums are on (the
  whole table of an INODE_UNINIT group, and past the last possibly-used inode elsewhere, as
  e2image does); XFS from `xfs_db freesp -d` (free-space btrees and AGFL); NTFS from
  `ntfscat -i 6` ($Bitmap) plus the backup boot sector after the last cluster;
- swap partitions: only the header page (the pages are dropped at the next boot);
- everything else (partition-table structures, raw, LVM and never-written partitions, gaps
  between partitions, a disk without a table) is needed as a whole, since it may hold anything.
"""

from __future__ import annotations

import re
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from bench.disk import FILESYSTEMS, SECTOR, Layout, Part
from bench.system import BenchError, Resources, run
from devkit.chunks import Extent, complement, merge, shift, total

GPT_SECTORS = 34  # protective MBR + header + 32 sectors of entries; the backup is 33 at the end


SWAP_PAGE = 4096  # the swap header page (x86-64 page size)


@dataclass(frozen=True)
class Allocation:
    extents: list[Extent]  # needed absolute byte ranges on the disk
    bytes: int
    fs_bytes: dict[int, int]  # partition number -> bytes its filesystem marks allocated
    # absolute ranges inside filesystems a faithful copy keeps byte for byte (ext4 backups)
    verbatim: list[Extent] = field(default_factory=list)


def table_extents(layout: Layout) -> list[Extent]:
    if layout.table == "gpt":
        backup = (GPT_SECTORS - 1) * SECTOR
        return [(0, GPT_SECTORS * SECTOR), (layout.size - backup, backup)]
    if layout.table == "dos":
        return [(0, SECTOR)]
    return []


def not_needed(part: Part, fs_extents: list[Extent] | None) -> list[Extent]:
    """Absolute byte ranges of `part` a copy need not carry (`fs_extents`: its filesystem's
    allocated ranges relative to the partition, None when it holds no filesystem)."""
    end = part.start + part.size
    if part.kind in FILESYSTEMS:
        if fs_extents is None:
            raise BenchError(f"partition {part.number} ({part.kind}) has no allocation map")
        return complement(shift(fs_extents, part.start), part.start, end)
    if part.kind == "swap":
        return [(part.start + SWAP_PAGE, part.size - SWAP_PAGE)]
    return []


def _block_ranges(line: str) -> list[Extent]:
    """'7897-8192, 9000' -> [(7897, 296), (9000, 1)] (first block, count)."""
    ranges = []
    for item in filter(None, (part.strip() for part in line.split(","))):
        first, _, last = item.partition("-")
        ranges.append((int(first), int(last or first) - int(first) + 1))
    return ranges


def unusable_inode_tables(text: str, block_size: int) -> list[Extent]:
    """Inode-table blocks (first block, count) no inode can occupy, from `dumpe2fs` output.

    Only with group checksums (metadata_csum or uninit_bg): then the kernel and e2fsck trust a
    group's INODE_UNINIT flag and its unused-inode count and never read past them.
    """
    features = re.search(r"^Filesystem features:\s+(.*)$", text, flags=re.MULTILINE)
    if not features or not {"metadata_csum", "uninit_bg"} & set(features.group(1).split()):
        return []
    header = dict(re.findall(r"^([A-Z][\w ]+):\s+(\S+)", text, flags=re.MULTILINE))
    try:
        per_group, inode_size = int(header["Inodes per group"]), int(header["Inode size"])
    except KeyError as err:
        raise BenchError(f"dumpe2fs output lacks {err}") from err
    unusable: list[Extent] = []
    for group in re.split(r"^(?=Group \d+:)", text, flags=re.MULTILINE)[1:]:
        flags = re.match(r"Group \d+:[^\n\[]*(?:\[([^\]]*)\])?", group)
        table = re.search(r"^\s+Inode table at (\d+)-(\d+)", group, flags=re.MULTILINE)
        counted = re.search(r"\d+ free inodes, \d+ directories(?:, (\d+) unused inodes)?", group)
        if not flags or not table or not counted:
            raise BenchError(f"dumpe2fs group without inode table or inode counts: {group[:60]!r}")
        first, last = int(table.group(1)), int(table.group(2))
        if "INODE_UNINIT" in (flags.group(1) or ""):
            used_blocks = 0
        else:
            # dumpe2fs prints ", N unused inodes" only when N > 0
            used = per_group - int(counted.group(1) or 0)
            used_blocks = -(-used * inode_size // block_size)
        if first + used_blocks <= last:
            unusable.append((first + used_blocks, last - first - used_blocks + 1))
    return unusable


def parse_dumpe2fs(text: str) -> list[Extent]:
    """Needed byte ranges of an ext2/3/4 filesystem from `dumpe2fs` output: every block not
    listed in a group's `Free blocks:` nor an inode-table block no inode can occupy."""
    header = dict(re.findall(r"^([A-Z][\w ]+):\s+(\S+)", text, flags=re.MULTILINE))
    try:
        block_size = int(header["Block size"])
        block_count = int(header["Block count"])
    except KeyError as err:
        raise BenchError(f"dumpe2fs output lacks {err}; is this an ext filesystem?") from err
    free: list[Extent] = unusable_inode_tables(text, block_size)
    for line in re.findall(r"^\s+Free blocks: (.*)$", text, flags=re.MULTILINE):
        free += _block_ranges(line)
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


def ext4_backups(text: str) -> list[Extent]:
    """Byte ranges of the backup superblocks and group descriptors, from `dumpe2fs` output:
    what `e2fsck -b` recovers from. No tool rewrites them on mount, so a faithful copy of a clean
    source has them byte for byte."""
    header = dict(re.findall(r"^([A-Z][\w ]+):\s+(\S+)", text, flags=re.MULTILINE))
    block_size = int(header.get("Block size", "0"))
    found: list[Extent] = []
    for sb, gd_first, gd_last in re.findall(
        r"^\s+Backup superblock at (\d+), Group descriptors at (\d+)-(\d+)", text, re.MULTILINE
    ):
        found.append((int(sb) * block_size, block_size))
        found.append((int(gd_first) * block_size, (int(gd_last) - int(gd_first) + 1) * block_size))
    return found


def filesystem_extents(device: str, fs: str) -> tuple[list[Extent], list[Extent]]:
    """(allocated byte ranges, ranges a copy must keep byte for byte) of the filesystem on
    `device`, relative to its start."""
    if fs == "ext4":
        text = run(["dumpe2fs", device])
        return parse_dumpe2fs(text), ext4_backups(text)
    if fs == "xfs":
        sb = run(["xfs_db", "-r", "-c", "sb 0", "-c", "p agblocks dblocks blocksize", device])
        return parse_xfs(sb, run(["xfs_db", "-r", "-c", "freesp -d", device])), []
    if fs == "ntfs":
        with open(device, "rb") as f:
            boot = f.read(SECTOR)
        proc = subprocess.run(["ntfscat", "-i", "6", device], capture_output=True, check=False)
        if proc.returncode != 0:
            raise BenchError(f"ntfscat -i 6 {device}: {proc.stderr.decode().strip()}")
        return parse_ntfs(boot, proc.stdout), []
    raise BenchError(f"no allocation reader for {fs!r}")


def needed_extents(layout: Layout, fs_extents: dict[int, list[Extent]]) -> list[Extent]:
    """Needed absolute byte ranges: the whole disk less each partition's not-needed part."""
    free: list[Extent] = []
    for part in layout.parts:
        free += not_needed(part, fs_extents.get(part.number))
    return complement(free, 0, layout.size)


def allocation(image: Path, layout: Layout, res: Resources) -> Allocation:
    """What a copy of the disk in `image` must carry (see the module's docstring)."""
    fs_extents: dict[int, list[Extent]] = {}
    verbatim: list[Extent] = []
    for part in layout.filesystems():
        device = res.attach(image, offset=part.start, size=part.size, read_only=True)
        try:
            fs_extents[part.number], keep = filesystem_extents(device, part.kind)
        finally:
            res.detach(device)
        verbatim += shift(keep, part.start)
    extents = needed_extents(layout, fs_extents)
    fs_bytes = {number: total(extents) for number, extents in fs_extents.items()}
    return Allocation(extents, total(extents), fs_bytes, merge(verbatim))
