"""Disk-image builders for the data-plane tests, the benchmark and the local twin.

Everything here runs as root on a kernel that does not scan partition tables: partitions are
reached through offset loop devices (``losetup -o OFFSET --sizelimit SIZE``). Every context
manager detaches the loop devices it attached and unmounts what it mounted, even on failure, and
never touches devices it did not set up itself (other users share the loop devices).

Typical use::

    disk = build_gpt_efi_ext4(tmp_path / "disk.img")
    with partition_mount(disk, 3) as mnt:
        fill_dirty(mnt, seed=1)
    hashes = file_hashes(disk, 3)

Stable API (imported by the local twin and the benchmark):
- types: ``Partition``, ``DiskImage`` (``files``: what each partition must still hold), ``CHUNK``
- devices: ``loop_device``, ``mounted``, ``partition_loop``, ``partition_mount``
- disks: ``build_gpt_efi_ext4``, ``build_gpt_xfs`` (``crash=``), ``build_mbr_ntfs``,
  ``build_mbr_logical``, ``build_bare_ext4`` (``crash=``), ``build_bare_ext2_crashed``,
  ``build_ext4_swap``, ``build_btrfs``, ``build_empty``, ``build_random_partition``
- dirt: ``fill_dirty``, ``crash_after_writes``, ``snapshot_while_mounted``, ``ntfs_set_dirty``
- checks: ``file_hashes``, ``recovered_copy``, ``fsck_clean``, ``partition_table``,
  ``same_bytes``, ``seed_method_image``, ``data_chunks``, ``written_chunks``, ``nonzero_chunks``
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from bench import chunks as chunk_map

MIB = 1024 * 1024
CHUNK = chunk_map.CHUNK  # EBS snapshot block size, 512 KiB
SECTOR = 512


@dataclass(frozen=True)
class Partition:
    """One partition of a disk image. ``number`` is 1-based; a bare disk has number 1."""

    number: int
    start: int  # bytes
    size: int  # bytes
    fs: str  # "ext4", "xfs", "ntfs", "vfat", "swap", "btrfs", "none" (raw data) or "empty"


@dataclass
class DiskImage:
    """A disk image file plus what the builder put on it."""

    path: Path
    size: int
    table: str  # "gpt", "mbr" or "none"
    partitions: list[Partition] = field(default_factory=list)
    # Files the builder left on each partition and that must survive: {number: {path: sha256}}.
    files: dict[int, dict[str, str]] = field(default_factory=dict)

    def partition(self, number: int) -> Partition:
        for part in self.partitions:
            if part.number == number:
                return part
        raise KeyError(f"{self.path} has no partition {number}")


def run(*args: str, input_: bytes | None = None) -> str:
    """Run a command; raise with its stderr when it fails."""
    proc = subprocess.run(list(args), input=input_, capture_output=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed ({proc.returncode}): "
            f"{proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout.decode(errors="replace")


def _retry(action: list[str], attempts: int = 20) -> None:
    # Unmounting our own mountpoint races with FUSE daemons and udev for a moment.
    for attempt in range(attempts):
        proc = subprocess.run(action, capture_output=True, check=False)
        if proc.returncode == 0:
            return
        time.sleep(0.1 * (attempt + 1))
    raise RuntimeError(f"{' '.join(action)} kept failing: {proc.stderr.decode().strip()}")


@contextlib.contextmanager
def loop_device(
    path: str | os.PathLike[str],
    offset: int = 0,
    size: int | None = None,
    read_only: bool = False,
    sector_size: int = 512,
) -> Iterator[str]:
    """Attach ``path`` (from ``offset``, ``size`` bytes) to a free loop device; always detach.

    ``sector_size=4096`` makes a disk with 4 KiB logical sectors."""
    args = ["losetup", "--find", "--show", "--offset", str(offset)]
    if sector_size != 512:
        args += ["--sector-size", str(sector_size)]
    if size is not None:
        args += ["--sizelimit", str(size)]
    if read_only:
        args.append("--read-only")
    device = run(*args, str(path)).strip()
    try:
        yield device
    finally:
        _detach(device, str(path), offset)


def _serves(device: str, path: str, offset: int) -> bool:
    """Whether ``device`` is still attached to ``path`` at ``offset``."""
    sysdir = Path(f"/sys/block/{Path(device).name}/loop")
    try:
        backing = (sysdir / "backing_file").read_text().strip()
        at = int((sysdir / "offset").read_text().strip())
    except (OSError, ValueError):
        return False
    return backing == os.path.realpath(path) and at == offset


def _detach(device: str, path: str, offset: int) -> None:
    """Detach our loop device. Never retried blindly: once freed, the same name may belong to
    another user's new device (tests run concurrently with other loop-device users)."""
    for attempt in range(20):
        subprocess.run(["losetup", "--detach", device], capture_output=True, check=False)
        # A device still open elsewhere is only marked for autoclear: wait until it no longer
        # serves this file.
        if not _serves(device, path, offset):
            return
        time.sleep(0.1 * (attempt + 1))
    raise RuntimeError(f"loop device {device} still serves {path}: detach it by hand")


@contextlib.contextmanager
def mounted(
    device: str, fstype: str | None = None, options: str = "", image: str | None = None
) -> Iterator[Path]:
    """Mount ``device`` on a fresh temporary directory; always unmount and remove it.

    ``fstype="ntfs"`` mounts through ntfs-3g (FUSE); everything else through the kernel.
    """
    mnt = Path(tempfile.mkdtemp(prefix="sparsecopy-test-mnt-"))
    try:
        if fstype == "ntfs":
            run("ntfs-3g", *(["-o", options] if options else []), device, str(mnt))
        else:
            run(
                "mount",
                *(["-t", fstype] if fstype else []),
                *(["-o", options] if options else []),
                device,
                str(mnt),
            )
        try:
            yield mnt
        finally:
            daemons = _fuse_daemons(mnt) if fstype == "ntfs" else []
            _retry(["umount", str(mnt)])
            # umount returns before ntfs-3g has closed the device: wait, so that detaching
            # the loop device right after really detaches it.
            _wait_until(lambda: not any(_running(pid) for pid in daemons))
    finally:
        mnt.rmdir()


def _running(pid: int) -> bool:
    """Whether a process exists and has not exited (a zombie has closed its files)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _fuse_daemons(mnt: Path) -> list[int]:
    """Process ids of the FUSE daemons serving ``mnt``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(mnt).encode() in cmdline:
                pids.append(int(entry))
    return pids


def _wait_until(done: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for a device to be released")
        time.sleep(0.05)


@contextlib.contextmanager
def partition_loop(disk: DiskImage, number: int, read_only: bool = False) -> Iterator[str]:
    """An offset loop device over one partition of ``disk``."""
    part = disk.partition(number)
    with loop_device(disk.path, part.start, part.size, read_only) as device:
        yield device


@contextlib.contextmanager
def partition_mount(disk: DiskImage, number: int, options: str = "") -> Iterator[Path]:
    """Mount one partition (ext4, xfs, btrfs through the kernel; ntfs through ntfs-3g)."""
    part = disk.partition(number)
    if part.fs == "vfat":
        raise ValueError("this kernel has no vfat driver: use the mtools helpers for FAT")
    opts = options
    if part.fs == "xfs":
        # Test images are often copies of each other: identical UUIDs must still mount.
        opts = ",".join(o for o in ("nouuid", options) if o)
    with (
        partition_loop(disk, number) as device,
        mounted(device, part.fs, opts) as mnt,
    ):
        yield mnt


# ---------------------------------------------------------------- building blocks


def create_sparse(path: Path, size: int) -> None:
    """A sparse file of ``size`` bytes that holds no data (like a never-written EBS volume)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)


def _sfdisk_partitions(path: Path, fs: list[str]) -> list[Partition]:
    table = json.loads(run("sfdisk", "--json", str(path)))["partitiontable"]
    sector = int(table.get("sectorsize", SECTOR))
    parts = []
    # ``fs`` names the partitions in sfdisk's order (for MBR: 1-4, then logical 5, 6, ...).
    for entry, fs_name in zip(table["partitions"], fs, strict=True):
        number = int(entry["node"][len(str(path)) :])
        parts.append(Partition(number, entry["start"] * sector, entry["size"] * sector, fs_name))
    return sorted(parts, key=lambda p: p.number)


def make_gpt(path: Path, size: int, layout: list[tuple[int, str, str]]) -> DiskImage:
    """Create ``path`` with a GPT. ``layout``: (size in MiB or 0 = rest, sgdisk type code, fs)."""
    create_sparse(path, size)
    args = ["sgdisk", "--clear"]
    for number, (mib, code, _fs) in enumerate(layout, start=1):
        end = f"+{mib}M" if mib else "0"
        args += [f"--new={number}:0:{end}", f"--typecode={number}:{code}"]
    run(*args, str(path))
    return DiskImage(path, size, "gpt", _sfdisk_partitions(path, [fs for _, _, fs in layout]))


def make_mbr(path: Path, size: int, script: str, fs: list[str]) -> DiskImage:
    """Create ``path`` with an MBR from an sfdisk ``script``; ``fs`` names each partition."""
    create_sparse(path, size)
    run("sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", str(path), input_=script.encode())
    return DiskImage(path, size, "mbr", _sfdisk_partitions(path, fs))


def mkfs(disk: DiskImage, number: int, *extra: str) -> None:
    """Make the filesystem named by the partition's ``fs`` on it."""
    part = disk.partition(number)
    with partition_loop(disk, number) as device:
        if part.fs == "ext4":
            run("mkfs.ext4", "-q", "-F", *extra, device)
        elif part.fs == "xfs":
            run("mkfs.xfs", "-q", "-f", *extra, device)
        elif part.fs == "btrfs":
            run("mkfs.btrfs", "-q", "-f", *extra, device)
        elif part.fs == "ntfs":
            run("mkntfs", "-q", "-F", "-f", *extra, device)
        elif part.fs == "swap":
            run("mkswap", *extra, device)
        elif part.fs == "vfat":
            run("mkfs.fat", *extra, device)
        else:
            raise ValueError(f"no mkfs for {part.fs!r}")


def _write_random(path: Path, size: int, rng: random.Random) -> str:
    """Write ``size`` bytes of incompressible data; return its SHA-256."""
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            block = rng.randbytes(min(left, MIB))
            digest.update(block)
            f.write(block)
            left -= len(block)
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest()


def fill_dirty(
    mnt: Path,
    seed: int,
    files: int = 6,
    file_size: int = 8 * MIB,
    delete: tuple[int, ...] = (1, 3, 5),
) -> dict[str, str]:
    """Write ``files`` random files, sync, then delete some of them (1-based numbers).

    The deleted files' blocks stay non-zero on the device but are free in the filesystem: the
    "dirty" state a long-lived volume's snapshot carries. Returns {relative path: sha256} of the
    files that remain (each fsync'ed, so they survive a crash right after this returns).
    """
    rng = random.Random(seed)
    sub = mnt / "data"
    sub.mkdir(exist_ok=True)
    kept: dict[str, str] = {}
    for i in range(1, files + 1):
        name = f"data/file{i:02d}.bin"
        kept[name] = _write_random(mnt / name, file_size, rng)
    os.sync()
    for i in delete:
        name = f"data/file{i:02d}.bin"
        (mnt / name).unlink()
        del kept[name]
    os.sync()
    return kept


def crash_after_writes(
    mnt: Path, seed: int, files: int = 3, file_size: int = 8 * MIB
) -> dict[str, str]:
    """Write and fsync more files, then shut the filesystem down without a clean unmount.

    Works for XFS and ext4 (``xfs_io -x -c "shutdown -f"``: flush the log, stop all I/O). The
    device afterwards is what a crash-consistent snapshot of a running instance looks like: the
    journal/log holds changes the on-disk free-space maps do not show yet. Returns the new files'
    hashes. The caller still unmounts (the context manager does).
    """
    rng = random.Random(seed)
    sub = mnt / "crash"
    sub.mkdir(exist_ok=True)
    written = {}
    for i in range(1, files + 1):
        name = f"crash/late{i:02d}.bin"
        written[name] = _write_random(mnt / name, file_size, rng)
    run("xfs_io", "-x", "-c", "shutdown -f", str(mnt))
    return written


def snapshot_while_mounted(
    mnt: Path, live: Path, dest: Path, seed: int, files: int = 3, file_size: int = 8 * MIB
) -> dict[str, str]:
    """Write and fsync files, then copy the image while the filesystem is still mounted.

    This is exactly what an EBS snapshot of a running instance captures: the fsync'ed changes
    are committed to the journal, but the block bitmaps and inode tables at their home
    locations are still dirty in the kernel's cache. Returns the new files' hashes.
    """
    rng = random.Random(seed)
    (mnt / "crash").mkdir(exist_ok=True)
    written = {}
    for i in range(1, files + 1):
        name = f"crash/late{i:02d}.bin"
        written[name] = _write_random(mnt / name, file_size, rng)
    run("cp", "--sparse=always", str(live), str(dest))
    return written


def write_random_bytes(path: Path, offset: int, size: int, seed: int) -> None:
    """Overwrite ``size`` bytes at ``offset`` of an image file with random data."""
    rng = random.Random(seed)
    with open(path, "r+b") as f:
        f.seek(offset)
        left = size
        while left:
            block = rng.randbytes(min(left, MIB))
            f.write(block)
            left -= len(block)


def scribble_free_space(path: Path, start: int, size: int, seed: int) -> None:
    """Fill a partition with random bytes before mkfs: the "ever written" history of a volume."""
    write_random_bytes(path, start, size, seed)


# ---------------------------------------------------------------- disk builders
# Each returns a DiskImage. Sizes are small so a test run stays within minutes; images are sparse.

BIOS_BOOT = "EF02"
EFI_SYSTEM = "EF00"
LINUX = "8300"
LINUX_SWAP = "8200"


def build_gpt_efi_ext4(
    path: Path, size: int = 160 * MIB, seed: int = 1, root_uuid: str | None = None
) -> DiskImage:
    """GPT: 1 MiB BIOS-boot (random "boot loader" bytes), 32 MiB EFI (FAT16), rest ext4, dirty.
    ``root_uuid``: the ext4's UUID (images built from one base share it), else a random one."""
    disk = make_gpt(
        path,
        size,
        [(1, BIOS_BOOT, "none"), (32, EFI_SYSTEM, "vfat"), (0, LINUX, "ext4")],
    )
    boot = disk.partition(1)
    write_random_bytes(path, boot.start, 200 * 1024, seed)  # like GRUB core.img: part data
    mkfs(disk, 2, "-F", "16", "-n", "EFI")
    efi_files(disk, 2, seed)
    mkfs(disk, 3, *(["-U", root_uuid] if root_uuid else []))
    with partition_mount(disk, 3) as mnt:
        disk.files[3] = fill_dirty(mnt, seed)
    return disk


def efi_files(disk: DiskImage, number: int, seed: int) -> None:
    """Put a few files on a FAT partition with mtools, then delete one (FAT leaves the data)."""
    part = disk.partition(number)
    image = f"{disk.path}@@{part.start}"
    rng = random.Random(seed)
    kept = disk.files.setdefault(number, {})
    with tempfile.TemporaryDirectory() as tmp:
        for name, size in (("BOOTX64.EFI", 900 * 1024), ("grub.cfg", 3000), ("old.bin", 3 * MIB)):
            content = rng.randbytes(size)
            Path(tmp, name).write_bytes(content)
            if name != "old.bin":
                kept[f"EFI/BOOT/{name}"] = hashlib.sha256(content).hexdigest()
        run("mmd", "-i", image, "::/EFI", "::/EFI/BOOT")
        for name in ("BOOTX64.EFI", "grub.cfg", "old.bin"):
            run("mcopy", "-i", image, str(Path(tmp, name)), f"::/EFI/BOOT/{name}")
        run("mdel", "-i", image, "::/EFI/BOOT/old.bin")


def build_gpt_xfs(
    path: Path,
    size: int = 400 * MIB,
    seed: int = 2,
    crash: bool = False,
    root_uuid: str | None = None,
) -> DiskImage:
    """GPT like AL2023: 1 MiB BIOS-boot, 10 MiB EFI (FAT), rest XFS; dirty, optionally crashed.
    ``root_uuid``: the XFS's UUID (images built from one base share it), else a random one."""
    disk = make_gpt(
        path, size, [(1, BIOS_BOOT, "none"), (10, EFI_SYSTEM, "vfat"), (0, LINUX, "xfs")]
    )
    write_random_bytes(path, disk.partition(1).start, 100 * 1024, seed)
    mkfs(disk, 2, "-F", "16", "-n", "EFI")
    efi_files(disk, 2, seed)
    mkfs(disk, 3, *(["-m", f"uuid={root_uuid}"] if root_uuid else []))
    with partition_mount(disk, 3) as mnt:
        disk.files[3] = fill_dirty(mnt, seed, files=8, file_size=16 * MIB, delete=(2, 4, 6, 8))
        if crash:
            disk.files[3].update(crash_after_writes(mnt, seed + 100, files=4, file_size=16 * MIB))
    return disk


def build_mbr_ntfs(path: Path, size: int = 200 * MIB, seed: int = 3) -> DiskImage:
    """MBR like Windows: two NTFS partitions (system and data), both dirty."""
    disk = make_mbr(
        path,
        size,
        "label: dos\nstart=2048, size=100MiB, type=7, bootable\nstart=, size=, type=7\n",
        ["ntfs", "ntfs"],
    )
    for number in (1, 2):
        part = disk.partition(number)
        scribble_free_space(path, part.start, part.size // 2, seed + number)
        with partition_loop(disk, number) as device:
            run(
                "mkntfs",
                "-q",
                "-F",
                "-f",
                "--sector-size",
                "512",
                "--partition-start",
                str(part.start // SECTOR),
                device,
            )
        with partition_mount(disk, number) as mnt:
            disk.files[number] = fill_dirty(mnt, seed + number, files=6, file_size=6 * MIB)
    return disk


def build_mbr_logical(path: Path, size: int = 160 * MIB, seed: int = 4) -> DiskImage:
    """MBR with a primary ext4 and an extended partition holding two logical ext4 partitions."""
    disk = make_mbr(
        path,
        size,
        "label: dos\nstart=2048, size=40MiB, type=83\nstart=, size=, type=5\n"
        "size=40MiB, type=83\nsize=, type=83\n",
        ["ext4", "extended", "ext4", "ext4"],
    )
    for number in (1, 5, 6):
        mkfs(disk, number)
        with partition_mount(disk, number) as mnt:
            disk.files[number] = fill_dirty(
                mnt, seed + number, files=4, file_size=4 * MIB, delete=(2,)
            )
    return disk


def build_bare_ext4(
    path: Path, size: int = 128 * MIB, seed: int = 5, crash: bool = False
) -> DiskImage:
    """A volume that is one ext4 filesystem, no partition table; dirty, optionally crashed."""
    live = path.with_suffix(".live") if crash else path
    create_sparse(live, size)
    disk = DiskImage(live, size, "none", [Partition(1, 0, size, "ext4")])
    mkfs(disk, 1)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed)
        if crash:
            disk.files[1].update(snapshot_while_mounted(mnt, live, path, seed + 100))
    if crash:
        live.unlink()
        disk.path = path
    return disk


def build_ext4_swap(path: Path, size: int = 128 * MIB, seed: int = 6) -> DiskImage:
    """GPT with ext4 and a swap partition whose pages hold stale (random) data."""
    disk = make_gpt(path, size, [(96, LINUX, "ext4"), (0, LINUX_SWAP, "swap")])
    swap = disk.partition(2)
    scribble_free_space(path, swap.start, swap.size, seed)  # stale pages: garbage to drop
    mkfs(disk, 2)
    mkfs(disk, 1)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed)
    return disk


def build_btrfs(path: Path, size: int = 256 * MIB, seed: int = 7) -> DiskImage:
    """A bare btrfs volume, dirty (btrfs is copied by trim or raw, not by a parsed map)."""
    create_sparse(path, size)
    disk = DiskImage(path, size, "none", [Partition(1, 0, size, "btrfs")])
    mkfs(disk, 1)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed, files=6, file_size=8 * MIB)
    return disk


def build_empty(path: Path, size: int = 64 * MIB) -> DiskImage:
    """A never-written volume: no table, no filesystem, no data."""
    create_sparse(path, size)
    return DiskImage(path, size, "none", [Partition(1, 0, size, "empty")])


def build_random_partition(path: Path, size: int = 64 * MIB, seed: int = 8) -> DiskImage:
    """GPT with one partition of random bytes (no filesystem) and one mostly zero."""
    disk = make_gpt(path, size, [(24, LINUX, "none"), (0, LINUX, "none")])
    first = disk.partition(1)
    write_random_bytes(path, first.start, first.size, seed)
    second = disk.partition(2)
    write_random_bytes(path, second.start + 3 * MIB + 4096, 8192, seed + 1)  # a lone island
    return disk


def build_bare_ext2_crashed(path: Path, size: int = 96 * MIB, seed: int = 9) -> DiskImage:
    """ext2 (no journal) shut down while mounted: the state stays "not clean" and nothing can
    be replayed, so a copier must not trust its bitmaps."""
    create_sparse(path, size)
    disk = DiskImage(path, size, "none", [Partition(1, 0, size, "ext4")])
    with partition_loop(disk, 1) as device:
        run("mkfs.ext2", "-q", "-F", device)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed, files=4, file_size=4 * MIB, delete=(2,))
        disk.files[1].update(crash_after_writes(mnt, seed + 100, files=2, file_size=4 * MIB))
    return disk


def ntfs_set_dirty(disk: DiskImage, number: int) -> None:
    """Set the "volume is dirty" flag of an NTFS partition, as Windows leaves it after a crash.

    No Linux tool sets it (ntfsfix only clears it), so this edits $Volume (MFT record 3) and its
    copy in $MFTMirr in place: boot sector -> MFT -> VOLUME_INFORMATION (0x70) -> flags |= 1.
    """
    part = disk.partition(number)
    with open(disk.path, "r+b") as f:
        f.seek(part.start)
        boot = f.read(512)
        sector, per_cluster = struct.unpack_from("<HB", boot, 11)
        mft_lcn, mirror_lcn = struct.unpack_from("<QQ", boot, 48)
        per_record = struct.unpack_from("<b", boot, 64)[0]
        cluster = sector * per_cluster
        record_size = cluster * per_record if per_record > 0 else 1 << -per_record
        for lcn in (mft_lcn, mirror_lcn):  # $MFTMirr must match, or ntfs-3g refuses to mount
            _set_volume_dirty(f, part.start + lcn * cluster + 3 * record_size, record_size)


def _set_volume_dirty(f: BinaryIO, record_at: int, record_size: int) -> None:
    f.seek(record_at)
    record = f.read(record_size)
    assert record[:4] == b"FILE", "MFT record 3 not where expected"
    pos = struct.unpack_from("<H", record, 20)[0]
    while True:
        kind, length = struct.unpack_from("<II", record, pos)
        assert kind != 0xFFFFFFFF, "$Volume has no VOLUME_INFORMATION"
        if kind == 0x70:
            value = pos + struct.unpack_from("<H", record, pos + 20)[0]
            flags_at = value + 10
            assert flags_at % 512 < 510, "flags word sits under an update-sequence slot"
            flags = struct.unpack_from("<H", record, flags_at)[0] | 0x0001
            f.seek(record_at + flags_at)
            f.write(struct.pack("<H", flags))
            return
        pos += length


# ---------------------------------------------------------------- checking


def _hash_tree(root: Path) -> dict[str, str]:
    hashes = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = Path(dirpath, name)
            if full.is_symlink() or not full.is_file():
                continue
            rel = str(full.relative_to(root))
            if rel.startswith(("System Volume Information", "$")):
                continue
            with open(full, "rb") as f:
                hashes[rel] = hashlib.file_digest(f, "sha256").hexdigest()
    return hashes


def file_hashes(disk: DiskImage, number: int) -> dict[str, str]:
    """SHA-256 of every regular file in one partition: {relative path: hex digest}.

    ext4/xfs/btrfs: kernel mount (read-only; a dirty log is replayed in memory by the kernel
    only if the device is writable, so pass a recovered copy for crashed images); ntfs: ntfs-3g
    read-only; vfat: mtools (no kernel driver here).
    """
    part = disk.partition(number)
    if part.fs == "vfat":
        with tempfile.TemporaryDirectory() as tmp:
            run("mcopy", "-s", "-n", "-Q", "-i", f"{disk.path}@@{part.start}", "::/*", tmp)
            return _hash_tree(Path(tmp))
    options = "ro,nouuid" if part.fs == "xfs" else "ro"
    with partition_loop(disk, number) as device, mounted(device, part.fs, options) as mnt:
        return _hash_tree(mnt)


def recovered_copy(disk: DiskImage, dest: Path) -> DiskImage:
    """A sparse copy of the image whose filesystems went through their own recovery.

    Mounting each kernel filesystem read-write replays its journal/log; the copy is then "the
    source's view after its own recovery", the reference every target file is checked against.
    """
    run("cp", "--sparse=always", str(disk.path), str(dest))
    copy = DiskImage(dest, disk.size, disk.table, list(disk.partitions))
    for part in copy.partitions:
        if part.fs in ("ext4", "xfs", "btrfs"):
            with partition_mount(copy, part.number):
                pass
    return copy


def fsck_clean(disk: DiskImage, number: int) -> None:
    """Raise unless the partition's filesystem checks clean in no-change mode."""
    part = disk.partition(number)
    if part.fs == "vfat":
        with partition_loop(disk, number, read_only=True) as device:
            run("fsck.fat", "-n", device)
        return
    with partition_loop(disk, number, read_only=True) as device:
        if part.fs == "ext4":
            run("e2fsck", "-f", "-n", device)
        elif part.fs == "xfs":
            run("xfs_repair", "-n", device)
        elif part.fs == "btrfs":
            run("btrfs", "check", "--readonly", device)
        elif part.fs == "ntfs":
            run("ntfsfix", "--no-action", device)
        else:
            raise ValueError(f"no fsck for {part.fs!r}")


def seed_method_image(disk: DiskImage, dest: Path) -> Path:
    """The seed method's trimmed image, made independently of sparsecopy.

    Copy the whole disk (what ``dd`` does), mount every partition with discard through an offset
    loop device (ntfs-3g for NTFS), run fstrim, unmount. The kernel punches holes where the
    filesystem has free space. ``nonzero_chunks(dest)`` is then what ``ddpt oflag=sparse`` onto a
    blank volume writes: the baseline every sparsecopy result is compared against.
    """
    run("cp", "--sparse=always", str(disk.path), str(dest))
    image = DiskImage(dest, disk.size, disk.table, list(disk.partitions))
    for part in image.partitions:
        if part.fs in ("ext4", "xfs", "btrfs", "ntfs"):
            with partition_mount(image, part.number, "discard") as mnt:
                run("fstrim", str(mnt))
    return dest


def data_chunks(path: Path) -> set[int]:
    """Indexes of the 512 KiB aligned chunks of a sparse file that hold allocated data.

    This is how tests count "written 512 KiB chunks" of a target: writing zeros allocates, as on
    EBS, so every chunk the program wrote shows up here. The SEEK_DATA/SEEK_HOLE walk is
    bench/chunks.py's, which the twin and the benchmark use too.
    """
    return chunk_map.written_chunks(path)


def written_chunks(path: Path) -> int:
    """Number of 512 KiB chunks of a sparse target file that hold data."""
    return len(data_chunks(path))


def nonzero_chunks(path: Path) -> set[int]:
    """Chunks of a file that hold at least one non-zero byte (reads the data regions only)."""
    found = set()
    zero = bytes(CHUNK)
    with open(path, "rb") as f:
        for index in sorted(data_chunks(path)):
            f.seek(index * CHUNK)
            block = f.read(CHUNK)
            if block != zero[: len(block)]:
                found.add(index)
    return found


def same_bytes(a: Path, b: Path, start: int, size: int) -> bool:
    """Whether two files hold the same bytes in [start, start + size)."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        fa.seek(start)
        fb.seek(start)
        left = size
        while left:
            n = min(left, 4 * MIB)
            if fa.read(n) != fb.read(n):
                return False
            left -= n
    return True


def partition_table(path: Path) -> str:
    """The partition table as sfdisk dumps it (``label-id``, entries, GUIDs), for comparison."""
    return run("sfdisk", "--dump", str(path)).replace(str(path), "DISK")


# ---------------------------------------------------------------- block lists (--source-blocks)


def build_ext4_swap_raw_unwritten(path: Path, size: int = 192 * MIB, seed: int = 13) -> DiskImage:
    """GPT: ext4 (dirty), swap over stale random pages, a raw data partition with scattered
    writes (no filesystem: LVM-like), and a partition that was never written."""
    disk = make_gpt(
        path,
        size,
        [(64, LINUX, "ext4"), (16, LINUX_SWAP, "swap"), (32, LINUX, "none"), (0, LINUX, "empty")],
    )
    swap = disk.partition(2)
    scribble_free_space(path, swap.start, swap.size, seed)
    mkfs(disk, 2)
    mkfs(disk, 1)
    with partition_mount(disk, 1) as mnt:
        disk.files[1] = fill_dirty(mnt, seed, files=6, file_size=6 * MIB)
    raw = disk.partition(3)
    rng = random.Random(seed)
    for island in range(16):
        length = rng.choice((4096, 65536, 300 * 1024, MIB))
        offset = rng.randrange(0, raw.size - length, 4096)
        write_random_bytes(path, raw.start + offset, length, seed + island)
    return disk


def source_block_list(chunks: set[int] | list[int], size: int) -> dict[str, object]:
    """ListSnapshotBlocks' answer (pages merged) for a snapshot holding these 512 KiB chunks of
    a ``size``-byte volume; VolumeSize in whole GiB, rounded down."""
    return {
        "BlockSize": CHUNK,
        "VolumeSize": size // (1 << 30),
        "Blocks": [{"BlockIndex": index} for index in sorted(chunks)],
    }


# ---------------------------------------------------------------- stale inode tables (ext4)


@dataclass(frozen=True)
class InodeTableGroup:
    """One block group's inode table as dumpe2fs prints it (block numbers of the filesystem)."""

    number: int
    flags: frozenset[str]
    table_first: int
    table_last: int
    unused_inodes: int | None  # None without group descriptor checksums
    first_inode: int
    all_inodes_free: bool


def inode_table_groups(device: str) -> tuple[dict[str, int], list[InodeTableGroup]]:
    """({"block_size", "inode_size", "inodes_per_group"}, groups) from ``dumpe2fs device``."""
    text = run("dumpe2fs", device)

    def field_(name: str) -> int:
        return int(text.split(f"\n{name}:", 1)[1].split("\n", 1)[0].strip())

    geometry = {
        "block_size": field_("Block size"),
        "inode_size": field_("Inode size"),
        "inodes_per_group": field_("Inodes per group"),
    }
    per_group = geometry["inodes_per_group"]
    groups = []
    for section in text.split("\nGroup ")[1:]:
        header, _, body = section.partition("\n")
        if not header.split(":", 1)[0].isdigit():
            continue  # "Group descriptor size:" in the superblock part
        number = int(header.split(":", 1)[0])
        flags = header.rsplit("[", 1)[1].rstrip("]").split(", ") if "[" in header else []
        table = body.split("Inode table at ", 1)[1].split(None, 1)[0]
        first, last = (int(b) for b in table.split("-"))
        counts = body.split(" unused inodes", 1)
        unused = int(counts[0].rsplit(" ", 1)[1]) if len(counts) == 2 else None
        first_inode = number * per_group + 1
        free = body.split("Free inodes: ", 1)[1].split("\n", 1)[0].strip()
        whole = f"{first_inode}-{first_inode + per_group - 1}"
        groups.append(
            InodeTableGroup(
                number, frozenset(flags), first, last, unused, first_inode, free == whole
            )
        )
    return geometry, groups


def unused_inode_table_blocks(device: str) -> list[tuple[int, int]]:
    """(first block, count) of the inode-table blocks no inode can occupy, by the group
    descriptors (INODE_UNINIT: the whole table; else past inodes per group minus the unused
    count). Checksum validity is not checked here: this is where a builder put stale bytes."""
    geometry, groups = inode_table_groups(device)
    per_block = geometry["block_size"] // geometry["inode_size"]
    out = []
    for group in groups:
        if group.unused_inodes is None:
            continue
        uninit = "INODE_UNINIT" in group.flags
        used = 0 if uninit else geometry["inodes_per_group"] - group.unused_inodes
        skip = -(-used // per_block)
        count = group.table_last - group.table_first + 1 - skip
        if count > 0:
            out.append((group.table_first + skip, count))
    return out


def _plant_deleted_inodes(device: str) -> list[tuple[int, int]]:
    """Give the first inode of every table block of each group with no inode in use a
    deleted inode's dtime (links count 0, mode 0: e2fsck accepts it). Returns the blocks."""
    geometry, groups = inode_table_groups(device)
    block_size = geometry["block_size"]
    dtime = struct.pack("<I", 0x65000000)  # a 2023 timestamp, above s_inodes_count
    planted = []
    with open(device, "r+b") as f:
        for group in groups:
            if group.number == 0 or not group.all_inodes_free:
                continue
            for block in range(group.table_first, group.table_last + 1):
                f.seek(block * block_size + 0x14)  # i_dtime of the block's first inode
                f.write(dtime)
            planted.append((group.table_first, group.table_last - group.table_first + 1))
        f.flush()
        os.fsync(f.fileno())
    return planted


def stale_inode_table_ranges(disk: DiskImage, number: int) -> list[tuple[int, int]]:
    """Byte ranges of the disk in inode-table blocks no inode can occupy that hold non-zero
    bytes (with group checksums: by the descriptors; without: the tables of groups whose
    inodes are all free, the ones ``build_stale_inode_tables(checksums=False)`` planted)."""
    part = disk.partition(number)
    with partition_loop(disk, number, read_only=True) as device:
        geometry, groups = inode_table_groups(device)
        if any(g.unused_inodes is not None for g in groups):
            blocks = unused_inode_table_blocks(device)
        else:
            blocks = [
                (g.table_first, g.table_last - g.table_first + 1)
                for g in groups
                if g.number and g.all_inodes_free
            ]
    size = geometry["block_size"]
    out = []
    with open(disk.path, "rb") as f:
        for first, count in blocks:
            for block in range(first, first + count):
                f.seek(part.start + block * size)
                if f.read(size).strip(b"\0"):
                    out.append((part.start + block * size, size))
    return out


def build_stale_inode_tables(
    path: Path, size: int = 256 * MIB, seed: int = 14, checksums: bool = True
) -> DiskImage:
    """GPT with one dirty ext4 partition whose unused inode-table blocks hold stale bytes.

    Where such bytes come from: the partition held data before mkfs (a reused volume), mkfs
    could not discard (EBS has no discard; ``-E nodiscard`` here, since a loop device over a
    file would punch holes) and, with lazy_itable_init, wrote only the used part of each
    group's inode table. The kernel's lazyinit thread zeroes the rest during a read-write mount,
    slowly; a session shorter than it (``noinit_itable`` here, to be deterministic) leaves
    groups flagged INODE_UNINIT without ITABLE_ZEROED, and the tails past the last used inode,
    holding the old bytes. Partition 1's files are in ``files[1]``.

    ``checksums=False`` makes the filesystem with ``-O ^metadata_csum,^uninit_bg``: without
    group descriptor checksums mkfs has no lazy init and zeroes every table, so the builder then
    plants the stale bytes itself (a deleted inode's dtime in every table block of each group
    with no inode in use, which e2fsck accepts). Raises when no stale byte ended up in place.
    """
    disk = make_gpt(path, size, [(0, LINUX, "ext4")])
    part = disk.partition(1)
    write_random_bytes(path, part.start, part.size, seed)
    features = [] if checksums else ["-O", "^metadata_csum,^uninit_bg"]
    mkfs(disk, 1, "-E", "nodiscard,lazy_itable_init=1", *features)
    with partition_mount(disk, 1, "noinit_itable") as mnt:
        disk.files[1] = fill_dirty(mnt, seed, files=6, file_size=12 * MIB)
    if not checksums:
        with partition_loop(disk, 1) as device:
            _plant_deleted_inodes(device)
    if not stale_inode_table_ranges(disk, 1):
        raise RuntimeError(f"{path}: no stale bytes in unused inode tables; the builder broke")
    return disk
