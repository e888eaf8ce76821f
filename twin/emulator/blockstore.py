"""Sparse files that stand in for EBS volumes and snapshots, and the loop devices that expose them.

An EBS snapshot stores the 512 KiB blocks that were ever written to its volume.  A sparse file
keeps the same information in its allocation map: a block that was written (even with zeros) is
allocated, a block never written is a hole.  Copies therefore follow the allocation map
(SEEK_DATA/SEEK_HOLE) instead of comparing bytes, so a written zero block stays written.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from bench.chunks import CHUNK, data_extents
from bench.chunks import written_chunks as written_chunks  # the twin's name for it

EBS_BLOCK = CHUNK  # 512 KiB
_COPY_PIECE = 8 * 1024 * 1024


def _extent_pieces(f: BinaryIO, start: int, length: int) -> Iterator[bytes]:
    """The bytes of [start, start + length) of an open file, at most _COPY_PIECE at a time."""
    f.seek(start)
    remaining = length
    while remaining:
        piece = f.read(min(_COPY_PIECE, remaining))
        if not piece:
            break
        yield piece
        remaining -= len(piece)


def sparse_copy(source: Path, target: Path) -> None:
    """Copy a file so that the target has data exactly where the source has (no more, no less)."""
    size = source.stat().st_size
    with open(source, "rb") as src, open(target, "wb") as dst:
        dst.truncate(size)
        for start, length in data_extents(source):
            dst.seek(start)
            for piece in _extent_pieces(src, start, length):
                dst.write(piece)
        dst.flush()
        os.fsync(dst.fileno())


def create_blank(path: Path, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


def fingerprint(path: Path) -> str:
    """Hash of a file's bytes and of its allocation map: equal fingerprints mean unchanged."""
    digest = hashlib.sha256()
    for start, length in data_extents(path):
        digest.update(f"{start}:{length};".encode())
    with open(path, "rb") as f:
        for start, length in data_extents(path):
            for piece in _extent_pieces(f, start, length):
                digest.update(piece)
    return digest.hexdigest()


@dataclass
class LoopDevices:
    """Loop devices this process attached; it detaches only those, never anyone else's."""

    attached: dict[str, Path] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(
        self, backing: Path, offset: int = 0, size: int | None = None, read_only: bool = False
    ) -> str:
        """A loop device over `backing` (a file, or one of our loop devices: from `offset`, `size`
        bytes, like a partition of it)."""
        args = ["losetup", "--find", "--show"]
        if offset or size is not None:
            args += ["--offset", str(offset)] + (["--sizelimit", str(size)] if size else [])
        if read_only:
            args.append("--read-only")
        device = subprocess.run(
            [*args, str(backing)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        with self._lock:
            self.attached[device] = backing
        return device

    def detach(self, device: str) -> None:
        with self._lock:
            if device not in self.attached:
                raise ValueError(f"{device} was not attached by this emulator; refusing to detach")
            del self.attached[device]
        result = subprocess.run(["losetup", "--detach", device], capture_output=True, text=True)
        if result.returncode != 0 and "No such device" not in result.stderr:
            raise RuntimeError(f"losetup --detach {device} failed: {result.stderr.strip()}")

    def release_stacked(self, devices: list[str]) -> list[str]:
        """Unmount and detach what a command built on top of `devices` and left behind.

        On EC2 a lost instance takes its kernel with it; here the "instance" shares this machine's
        kernel, so the loop devices and mounts its programs made over its volumes would outlive it.
        Returns the stacked devices released.
        """
        released: list[str] = []
        stacked = _loops_backed_by(set(devices))
        for device in reversed(stacked):  # the outermost first
            for mountpoint in _mountpoints_of(device):
                subprocess.run(["umount", "-l", mountpoint], capture_output=True)
            subprocess.run(["losetup", "--detach", device], capture_output=True)
            released.append(device)
        return released

    def kernel_leftovers(self, workdir: Path) -> list[str]:
        """Loop devices the kernel still has over files under `workdir` (deleted ones included)
        or over devices made from them."""
        roots = {
            dev for dev, backing in _kernel_loops().items() if Path(backing).is_relative_to(workdir)
        }
        return sorted(roots | set(_loops_backed_by(roots)))

    def detach_all(self) -> list[str]:
        """Detach everything this process attached; returns the devices that could not be."""
        failed = []
        for device in list(self.attached):
            try:
                self.detach(device)
            except (RuntimeError, ValueError):
                failed.append(device)
        return failed


def _kernel_loops() -> dict[str, str]:
    """Every loop device the kernel has, with its backing file (a path, possibly another device)."""
    loops = {}
    for entry in Path("/sys/block").glob("loop*"):
        backing = entry / "loop" / "backing_file"
        if backing.exists():
            loops[f"/dev/{entry.name}"] = backing.read_text().strip().removesuffix(" (deleted)")
    return loops


def _loops_backed_by(devices: set[str]) -> list[str]:
    """Loop devices over `devices`, transitively, in the order they stack (innermost first)."""
    found: list[str] = []
    frontier = set(devices)
    loops = _kernel_loops()
    while frontier:
        layer = [dev for dev, backing in loops.items() if backing in frontier and dev not in found]
        found += sorted(layer)
        frontier = set(layer)
    return found


def _mountpoints_of(device: str) -> list[str]:
    mountpoints = []
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            source, mountpoint = line.split()[:2]
            if source == device:
                mountpoints.append(mountpoint.replace("\\040", " "))
    return mountpoints
