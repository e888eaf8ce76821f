"""Byte extents and 512 KiB chunk maps (an EBS snapshot stores a volume in 512 KiB blocks).

Counting chunks the same way everywhere: the bench, the twin's snapshots and the data-plane
tests all take "the chunks a volume holds" from the allocation map of its sparse backing file
(SEEK_DATA/SEEK_HOLE: writing zeros allocates, as on EBS)."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

# the EBS snapshot block, from its one source
CHUNK: int = json.loads(
    (Path(__file__).resolve().parents[1] / "contract" / "dataplane.json").read_text()
)["constants"]["ebsBlockBytes"]["value"]

# (start, length) in bytes
Extent = tuple[int, int]


def merge(extents: Iterable[Extent]) -> list[Extent]:
    """Sort extents and join those that overlap or touch; drop empty ones."""
    merged: list[Extent] = []
    for start, length in sorted(e for e in extents if e[1] > 0):
        if merged and start <= merged[-1][0] + merged[-1][1]:
            last_start, last_length = merged[-1]
            merged[-1] = (last_start, max(last_length, start + length - last_start))
        else:
            merged.append((start, length))
    return merged


def shift(extents: Iterable[Extent], offset: int) -> list[Extent]:
    return [(start + offset, length) for start, length in extents]


def total(extents: Iterable[Extent]) -> int:
    return sum(length for _, length in merge(extents))


def complement(extents: Iterable[Extent], start: int, end: int) -> list[Extent]:
    """The parts of [start, end) not covered by `extents`."""
    gaps: list[Extent] = []
    cursor = start
    for ext_start, length in merge(extents):
        ext_end = ext_start + length
        if ext_end <= cursor:
            continue
        if ext_start >= end:
            break
        if ext_start > cursor:
            gaps.append((cursor, ext_start - cursor))
        cursor = max(cursor, ext_end)
    if cursor < end:
        gaps.append((cursor, end - cursor))
    return gaps


def chunk_set(extents: Iterable[Extent]) -> set[int]:
    """Indices of the chunks that any extent touches."""
    chunks: set[int] = set()
    for start, length in merge(extents):
        chunks.update(range(start // CHUNK, (start + length - 1) // CHUNK + 1))
    return chunks


def split_by_chunk(extents: Iterable[Extent]) -> Iterator[tuple[int, Extent]]:
    """(chunk index, piece) for every piece of `extents` cut at chunk boundaries."""
    for start, length in merge(extents):
        cursor, end = start, start + length
        while cursor < end:
            piece_end = min(end, (cursor // CHUNK + 1) * CHUNK)
            yield cursor // CHUNK, (cursor, piece_end - cursor)
            cursor = piece_end


def data_extents(path: Path) -> list[Extent]:
    """The ranges of a (sparse) file that hold data, from SEEK_DATA/SEEK_HOLE."""
    extents: list[Extent] = []
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        offset = 0
        while offset < size:
            try:
                data = os.lseek(fd, offset, os.SEEK_DATA)
            except OSError as err:
                if err.errno == errno.ENXIO:  # no data after offset
                    break
                raise
            hole = os.lseek(fd, data, os.SEEK_HOLE)
            extents.append((data, hole - data))
            offset = hole
    finally:
        os.close(fd)
    return extents


def copy_image(source: Path, dest: Path) -> None:
    """Copy a backing file keeping exactly the chunks it holds: its holes stay holes and its
    written zeros stay written (a snapshot holds them, issue #19). `cp --sparse=always`, and
    `--sparse=auto` on a source that has holes, turn runs of written zeros into holes."""
    with source.open("rb") as src, dest.open("wb") as dst:
        dst.truncate(os.fstat(src.fileno()).st_size)
        for start, length in data_extents(source):
            done = 0
            while done < length:
                copied = os.copy_file_range(
                    src.fileno(), dst.fileno(), length - done, start + done, start + done
                )
                if copied == 0:
                    raise OSError(f"{source} ended early at byte {start + done}")
                done += copied
        os.fsync(dst.fileno())


def written_chunks(path: Path) -> set[int]:
    """Chunks of a backing file that hold any data: what a snapshot of that volume would store."""
    return chunk_set(data_extents(path))


def nonzero_chunks(path: Path, extents: Iterable[Extent] | None = None) -> set[int]:
    """Chunks in which some byte inside `extents` (default: the file's data) is not zero."""
    if extents is None:
        extents = data_extents(path)
    found: set[int] = set()
    with path.open("rb", buffering=0) as f:
        for chunk, (start, length) in split_by_chunk(extents):
            if chunk in found:
                continue
            f.seek(start)
            data = f.read(length)
            if data != bytes(len(data)):
                found.add(chunk)
    return found


def source_block_list(chunks: Iterable[int], size: int) -> dict[str, object]:
    """ListSnapshotBlocks' answer (pages merged) for a snapshot holding these 512 KiB chunks of
    a `size`-byte volume; VolumeSize in whole GiB, rounded down."""
    return {
        "BlockSize": CHUNK,
        "VolumeSize": size // (1 << 30),
        "Blocks": [{"BlockIndex": index} for index in sorted(chunks)],
    }
