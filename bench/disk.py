"""The bench's source disks, each a sparse image file built through loop devices.

- `dirty`: seed 000's dirty disk, scaled down: one partition, five equal files filling it, files
  1/3/5 deleted. The deleted files' blocks keep their random bytes, so the volume is "dirty" the
  way a snapshot of a long-lived volume is: every block was written once, only two fifths are
  still allocated. One per filesystem (ext4, xfs, ntfs).
- `empty`: a never-written volume (no table, no data).
- `mixed`: GPT with a dirty ext4, a swap partition whose pages hold stale bytes, a raw data
  partition partly written, and a never-written partition.
- `lvm`: GPT with one LVM-like partition (an LVM2 PV label, then scattered writes; copied raw).
- `stale-itable`: the dirty ext4 disk over a partition that held random bytes before mkfs, made
  with lazy inode-table initialisation and mounted with `noinit_itable`, so groups flagged
  INODE_UNINIT (not ITABLE_ZEROED) keep stale non-zero bytes in their inode tables.
- `zeros-ext4`, `zeros-xfs`, `zeros-ntfs`: the dirty disk with allocated zeros (issue #19): a
  live file of written zeros (a swap file made with `dd if=/dev/zero`, a preallocated database
  file) takes 10% of the free space before the five files fill the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.system import BenchError, Resources, run

SECTOR = 512
MIB = 1024 * 1024
FILESYSTEMS = ("ext4", "xfs", "ntfs")
# What a partition holds: a filesystem, swap, raw data of no known layout, or nothing at all.
KINDS = (*FILESYSTEMS, "swap", "raw", "empty")
# Linux volumes on EC2 (AL2023) carry GPT; Windows volumes are usually MBR.
TABLE_FOR_FS = {"ext4": "gpt", "xfs": "gpt", "ntfs": "dos"}
FILE_NAMES = tuple(f"test{i}" for i in range(1, 6))
DELETED = ("test1", "test3", "test5")
# Room left for the metadata the five files need (extent trees, MFT records) so the last one fits.
FILL_SLACK = 0.01
# The dirty disk with a live zero-filled file, per filesystem.
ZERO_DISKS = {f"zeros-{fs}": fs for fs in FILESYSTEMS}
ZERO_FILE = "zerofile"
ZERO_SHARE = 0.10  # of the free space, before the five files
# Disks besides the dirty one per filesystem.
EXTRA_DISKS = ("empty", "mixed", "lvm", "stale-itable", *ZERO_DISKS)
# sfdisk's GPT type shortcuts: L Linux filesystem, S swap, V LVM.
GPT_TYPE = {"ext4": "L", "xfs": "L", "swap": "S", "raw": "L", "empty": "L", "lvm": "V"}


@dataclass(frozen=True)
class Part:
    number: int  # 1-based, as in the table; 1 for a disk without a table
    kind: str  # one of KINDS
    start: int  # bytes from the start of the disk
    size: int


@dataclass(frozen=True)
class Layout:
    table: str | None  # "gpt", "dos" (MBR) or None (no partition table)
    size: int
    parts: tuple[Part, ...]

    def filesystems(self) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if p.kind in FILESYSTEMS)

    def single_filesystem(self) -> Part | None:
        """The partition, when the disk is a table plus one filesystem (what the peers copy)."""
        if self.table is None or len(self.parts) != 1:
            return None
        return self.parts[0] if self.parts[0].kind in FILESYSTEMS else None


@dataclass(frozen=True)
class Disk:
    name: str  # "ext4", "xfs", "ntfs" (the dirty disks) or one of EXTRA_DISKS
    image: Path
    layout: Layout
    file_size: int = 0  # size of each of the five files (0: no files)
    # partition number -> {live file name: SHA-256}; files named in DELETED must be gone
    live_files: dict[int, dict[str, str]] = field(default_factory=dict)
    zero_file_size: int = 0  # the live ZERO_FILE's size, in each filesystem that has one


def sfdisk_parts(image: Path, kinds: list[str]) -> tuple[str, list[Part]]:
    """Read back the table sfdisk wrote: its label and the partitions' places."""
    info = json.loads(run(["sfdisk", "--json", str(image)]))["partitiontable"]
    sector = int(info.get("sectorsize", SECTOR))
    entries = info["partitions"]
    if len(entries) != len(kinds):
        raise BenchError(f"{image}: sfdisk made {len(entries)} partitions, wanted {len(kinds)}")
    parts = []
    for number, (entry, kind) in enumerate(zip(entries, kinds, strict=True), start=1):
        parts.append(Part(number, kind, int(entry["start"]) * sector, int(entry["size"]) * sector))
    return str(info["label"]), parts


def make_table(image: Path, table: str, parts: list[tuple[str, int | None]]) -> Layout:
    """Write a table whose first partition starts at 1 MiB (as in seed 000).

    `parts`: (kind, size in bytes or None for the rest of the disk). A kind "lvm" is a raw
    partition typed LVM.
    """
    lines = [f"label: {table}"]
    for i, (kind, size) in enumerate(parts):
        start = "start=2048, " if i == 0 else ""
        if table == "dos":
            part_type = "7" if kind == "ntfs" else "82" if kind == "swap" else "83"
        else:
            part_type = GPT_TYPE[kind]
        size_field = f"size={size // SECTOR}, " if size is not None else ""
        lines.append(f"{start}{size_field}type={part_type}")
    run(["sfdisk", "--quiet", str(image)], input_text="\n".join(lines) + "\n")
    kinds = ["raw" if kind == "lvm" else kind for kind, _ in parts]
    label, found = sfdisk_parts(image, kinds)
    return Layout(table=label, size=image.stat().st_size, parts=tuple(found))


def blank_image(image: Path, size: int) -> None:
    image.unlink(missing_ok=True)
    with image.open("wb") as f:
        f.truncate(size)


def make_filesystem(device: str, fs: str, hidden_sectors: int, ext4_options: str = "") -> None:
    if fs == "ext4":
        extra = ["-E", ext4_options] if ext4_options else []
        run(["mkfs.ext4", "-q", "-F", "-m", "0", "-L", "bench", *extra, device])
    elif fs == "xfs":
        run(["mkfs.xfs", "-q", "-f", "-L", "bench", device])
    elif fs == "ntfs":
        run(["mkfs.ntfs", "-Q", "-F", "-q", "-L", "bench", "-p", str(hidden_sectors), device])
    else:
        raise BenchError(f"unknown filesystem {fs!r}; choose from {', '.join(FILESYSTEMS)}")


def write_random_file(path: Path, size: int) -> str:
    """Fill `path` with `size` random bytes (like seed 000's openssl stream); return its SHA-256."""
    digest = hashlib.sha256()
    with path.open("wb", buffering=0) as f:
        remaining = size
        while remaining:
            block = os.urandom(min(remaining, 4 * MIB))
            digest.update(block)
            f.write(block)
            remaining -= len(block)
        os.fsync(f.fileno())
    return digest.hexdigest()


def write_random(image: Path, start: int, size: int, rng: random.Random) -> None:
    """Overwrite `size` bytes of `image` at `start` with random bytes (stale data)."""
    with image.open("r+b") as f:
        f.seek(start)
        left = size
        while left:
            block = rng.randbytes(min(left, 4 * MIB))
            f.write(block)
            left -= len(block)


def write_zero_file(path: Path, size: int) -> str:
    """`size` bytes of written zeros (not a sparse file: every block allocated and written, as
    `dd if=/dev/zero` does); return its SHA-256."""
    digest = hashlib.sha256()
    block = bytes(4 * MIB)
    with path.open("wb", buffering=0) as f:
        remaining = size
        while remaining:
            piece = block[: min(remaining, len(block))]
            digest.update(piece)
            f.write(piece)
            remaining -= len(piece)
        os.fsync(f.fileno())
    return digest.hexdigest()


def free_bytes(mount_dir: Path) -> int:
    stat = os.statvfs(mount_dir)
    return stat.f_bavail * stat.f_frsize


def fill_dirty(mount_dir: Path, fs: str, size: int) -> tuple[int, dict[str, str]]:
    """Five equal files filling the mounted filesystem, then 1, 3 and 5 deleted.

    Returns (file size, {live name: SHA-256}).
    """
    file_size = int(free_bytes(mount_dir) * (1 - FILL_SLACK) / len(FILE_NAMES)) // MIB * MIB
    if file_size < MIB:
        raise BenchError(f"{fs} on {size} bytes has no room for five files; use a larger SIZE")
    hashes = {}
    for name in FILE_NAMES:
        try:
            hashes[name] = write_random_file(mount_dir / name, file_size)
        except OSError as err:
            raise BenchError(f"writing {name} ({file_size} bytes) on {fs}: {err}") from err
    for name in DELETED:
        (mount_dir / name).unlink()
        del hashes[name]
    os.sync()
    return file_size, hashes


def dirty_filesystem(
    image: Path,
    layout: Layout,
    part: Part,
    mount_dir: Path,
    res: Resources,
    *,
    ext4_options: str = "",
    mount_options: tuple[str, ...] = (),
    zero_file_size: int = 0,
) -> tuple[int, dict[str, str]]:
    """mkfs on `part`, a ZERO_FILE of `zero_file_size` bytes if any, then fill_dirty; clean
    unmount."""
    device = res.attach(image, offset=part.start, size=part.size)
    try:
        make_filesystem(device, part.kind, part.start // SECTOR, ext4_options)
        res.mount(device, mount_dir, part.kind, mount_options)
        try:
            zeros = {}
            if zero_file_size:
                zeros[ZERO_FILE] = write_zero_file(mount_dir / ZERO_FILE, zero_file_size)
            file_size, hashes = fill_dirty(mount_dir, part.kind, layout.size)
            return file_size, {**zeros, **hashes}
        finally:
            res.umount(mount_dir)
    finally:
        res.detach(device)


def build_dirty(image: Path, fs: str, size: int, mount_dir: Path, res: Resources) -> Disk:
    """Seed 000's disk: a table, one partition from 1 MiB to the end, the dirty filesystem."""
    blank_image(image, size)
    layout = make_table(image, TABLE_FOR_FS[fs], [(fs, None)])
    file_size, hashes = dirty_filesystem(image, layout, layout.parts[0], mount_dir, res)
    return Disk(fs, image, layout, file_size, {1: hashes})


def build_zeros(name: str, image: Path, size: int, mount_dir: Path, res: Resources) -> Disk:
    """The dirty disk of ZERO_DISKS[name] with a live ZERO_FILE of ZERO_SHARE of the free space
    (estimated from the partition: mkfs's own metadata is small next to it)."""
    fs = ZERO_DISKS[name]
    blank_image(image, size)
    layout = make_table(image, TABLE_FOR_FS[fs], [(fs, None)])
    part = layout.parts[0]
    zero_size = mib_share(part.size, ZERO_SHARE)
    file_size, hashes = dirty_filesystem(
        image, layout, part, mount_dir, res, zero_file_size=zero_size
    )
    return Disk(name, image, layout, file_size, {part.number: hashes}, zero_size)


def build_empty(image: Path, size: int) -> Disk:
    """A never-written volume: no table, no filesystem, no data."""
    blank_image(image, size)
    return Disk("empty", image, Layout(None, size, (Part(1, "empty", 0, size),)))


def mib_share(size: int, share: float) -> int:
    """`share` of `size`, in whole MiB (at least 1 MiB)."""
    return max(MIB, int(size * share) // MIB * MIB)


def build_mixed(image: Path, size: int, mount_dir: Path, res: Resources, seed: int = 11) -> Disk:
    """GPT: dirty ext4 (45%), swap with stale pages (15%), raw data 60% written (20%), and a
    never-written partition (the rest)."""
    blank_image(image, size)
    layout = make_table(
        image,
        "gpt",
        [
            ("ext4", mib_share(size, 0.45)),
            ("swap", mib_share(size, 0.15)),
            ("raw", mib_share(size, 0.20)),
            ("empty", None),
        ],
    )
    ext4, swap, raw, _ = layout.parts
    rng = random.Random(seed)
    # Swap: the pages of a swap area in use hold whatever was swapped out; mkswap rewrites only
    # its header page.
    write_random(image, swap.start, swap.size, rng)
    device = res.attach(image, offset=swap.start, size=swap.size)
    try:
        run(["mkswap", "--label", "benchswap", device])
    finally:
        res.detach(device)
    # Raw data (a database's raw device, say): the first 60% written.
    write_random(image, raw.start, raw.size * 6 // 10 // SECTOR * SECTOR, rng)
    file_size, hashes = dirty_filesystem(image, layout, ext4, mount_dir, res)
    return Disk("mixed", image, layout, file_size, {ext4.number: hashes})


def lvm_crc(data: bytes) -> int:
    """LVM2's label checksum: CRC-32 (reflected, 0xEDB88320) seeded with 0xf597a6cf, no final
    inversion. zlib.crc32 inverts on entry and exit, so seed it with the inverted value and
    invert its result."""
    return zlib.crc32(data, 0xF597A6CF ^ 0xFFFFFFFF) ^ 0xFFFFFFFF


def lvm_label(pv_uuid: bytes, device_size: int) -> bytes:
    """Sector 1 of an LVM2 physical volume: label header and PV header (no metadata area)."""
    sector = bytearray(SECTOR)
    sector[0:8] = b"LABELONE"
    struct.pack_into("<QII", sector, 8, 1, 0, 32)  # sector number, crc (later), content offset
    sector[24:32] = b"LVM2 001"
    struct.pack_into("<32sQ", sector, 32, pv_uuid, device_size)
    # data areas list: one area from 1 MiB to the end, then the terminator; no metadata areas.
    struct.pack_into("<QQQQQQQQ", sector, 72, MIB, 0, 0, 0, 0, 0, 0, 0)
    struct.pack_into("<I", sector, 16, lvm_crc(bytes(sector[20:])))
    return bytes(sector)


def scattered_writes(size: int, rng: random.Random, share: float) -> list[tuple[int, int]]:
    """Random (offset, length) writes of 4 KiB to 1 MiB, sector-aligned, covering about `share`
    of `size` bytes (overlaps allowed), none in the first MiB (the PV header area)."""
    writes = []
    budget = int(size * share)
    while budget > 0:
        length = rng.choice((4096, 16384, 65536, 262144, MIB))
        offset = rng.randrange(MIB, size - length) // SECTOR * SECTOR
        writes.append((offset, length))
        budget -= length
    return writes


def build_lvm(image: Path, size: int, seed: int = 12) -> Disk:
    """GPT with one LVM-typed partition: a PV label, a metadata text area and scattered writes
    (logical volumes' blocks) over about 25% of it; copied raw by every method."""
    blank_image(image, size)
    layout = make_table(image, "gpt", [("lvm", None)])
    (part,) = layout.parts
    rng = random.Random(seed)
    with image.open("r+b") as f:
        f.seek(part.start + SECTOR)
        f.write(lvm_label(rng.randbytes(32).hex()[:32].encode(), part.size))
        f.seek(part.start + 4096)
        f.write(b'bench_vg {\nid = "bench"\nseqno = 1\n}\n'.ljust(4096, b"\0"))
        for offset, length in scattered_writes(part.size, rng, 0.25):
            f.seek(part.start + offset)
            f.write(rng.randbytes(length))
    return Disk("lvm", image, layout)


def uninit_groups_without_zeroed_tables(dumpe2fs_text: str) -> int:
    """Groups flagged INODE_UNINIT whose inode table is not flagged ITABLE_ZEROED."""
    count = 0
    for flags in re.findall(r"^Group \d+: .*\[([^\]]*)\]", dumpe2fs_text, flags=re.MULTILINE):
        names = {f.strip() for f in flags.split(",")}
        if "INODE_UNINIT" in names and "ITABLE_ZEROED" not in names:
            count += 1
    return count


def build_stale_itable(
    image: Path, size: int, mount_dir: Path, res: Resources, seed: int = 13
) -> Disk:
    """The dirty ext4 disk over a partition that held random bytes, with inode tables left
    uninitialised (stale) in the groups no inode uses."""
    blank_image(image, size)
    layout = make_table(image, "gpt", [("ext4", None)])
    (part,) = layout.parts
    write_random(image, part.start, part.size, random.Random(seed))
    file_size, hashes = dirty_filesystem(
        image,
        layout,
        part,
        mount_dir,
        res,
        ext4_options="nodiscard,lazy_itable_init=1",
        mount_options=("noinit_itable",),
    )
    device = res.attach(image, offset=part.start, size=part.size, read_only=True)
    try:
        stale = uninit_groups_without_zeroed_tables(run(["dumpe2fs", device]))
    finally:
        res.detach(device)
    if not stale:
        raise BenchError("stale-itable: no INODE_UNINIT group kept a non-zeroed inode table")
    return Disk("stale-itable", image, layout, file_size, {part.number: hashes})


def build(name: str, image: Path, size: int, mount_dir: Path, res: Resources) -> Disk:
    """Build the disk called `name` (a filesystem name: its dirty disk) into `image`."""
    builders: dict[str, Callable[[], Disk]] = {
        "empty": lambda: build_empty(image, size),
        "mixed": lambda: build_mixed(image, size, mount_dir, res),
        "lvm": lambda: build_lvm(image, size),
        "stale-itable": lambda: build_stale_itable(image, size, mount_dir, res),
    }
    if name in FILESYSTEMS:
        return build_dirty(image, name, size, mount_dir, res)
    if name in ZERO_DISKS:
        return build_zeros(name, image, size, mount_dir, res)
    if name in builders:
        return builders[name]()
    raise BenchError(f"unknown disk {name!r}; choose from {', '.join(FILESYSTEMS + EXTRA_DISKS)}")
