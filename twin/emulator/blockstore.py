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

EBS_BLOCK = 512 * 1024
_COPY_PIECE = 8 * 1024 * 1024


def data_extents(path: Path) -> Iterator[tuple[int, int]]:
    """Yield (offset, length) of every allocated extent of a file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after offset
                return
            end = os.lseek(fd, start, os.SEEK_HOLE)
            yield start, end - start
            offset = end
    finally:
        os.close(fd)


def written_chunks(path: Path, chunk: int = EBS_BLOCK) -> set[int]:
    """Indexes of the chunk-aligned blocks that hold any allocated byte."""
    chunks: set[int] = set()
    for start, length in data_extents(path):
        chunks.update(range(start // chunk, (start + length - 1) // chunk + 1))
    return chunks


def sparse_copy(source: Path, target: Path) -> None:
    """Copy a file so that the target has data exactly where the source has (no more, no less)."""
    size = source.stat().st_size
    with open(source, "rb") as src, open(target, "wb") as dst:
        dst.truncate(size)
        for start, length in data_extents(source):
            src.seek(start)
            dst.seek(start)
            remaining = length
            while remaining:
                piece = src.read(min(_COPY_PIECE, remaining))
                if not piece:
                    break
                dst.write(piece)
                remaining -= len(piece)
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
            f.seek(start)
            remaining = length
            while remaining:
                piece = f.read(min(_COPY_PIECE, remaining))
                if not piece:
                    break
                digest.update(piece)
                remaining -= len(piece)
    return digest.hexdigest()


@dataclass
class LoopDevices:
    """Loop devices this process attached; it detaches only those, never anyone else's."""

    attached: dict[str, Path] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, backing: Path) -> str:
        device = subprocess.run(
            ["losetup", "--find", "--show", str(backing)],
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

    def detach_all(self) -> list[str]:
        """Detach everything this process attached; returns the devices that could not be."""
        failed = []
        for device in list(self.attached):
            try:
                self.detach(device)
            except (RuntimeError, ValueError):
                failed.append(device)
        return failed
