"""Sparse files that stand in for EBS volumes and snapshots (devkit.loop exposes them as devices).

An EBS snapshot stores the 512 KiB blocks that were ever written to its volume.  A sparse file
keeps the same information in its allocation map: a block that was written (even with zeros) is
allocated, a block never written is a hole.  Copies therefore follow the allocation map
(SEEK_DATA/SEEK_HOLE) instead of comparing bytes, so a written zero block stays written.
"""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from devkit.chunks import CHUNK, data_extents
from devkit.chunks import written_chunks as written_chunks  # the twin's name for it

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


def holds_block(path: Path, index: int) -> bool:
    """Whether a snapshot's file holds the 512 KiB block at this index (any data in it)."""
    start = index * EBS_BLOCK
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, start, os.SEEK_DATA) < start + EBS_BLOCK
    except OSError as err:
        if err.errno == errno.ENXIO:  # no data at or after start
            return False
        raise
    finally:
        os.close(fd)


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
