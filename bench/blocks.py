"""The block list of a source disk, as EBS's ListSnapshotBlocks would return it, the bytes
held / needed arithmetic the report prints, and the lower bound: the held blocks a copy needs.

A snapshot of a volume holds the 512 KiB blocks that were ever written; on the bench's sparse
image files that is every 512 KiB chunk that holds data (SEEK_DATA/SEEK_HOLE), the same rule
as devkit.chunks.written_chunks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from devkit.chunks import CHUNK, Extent, chunk_set, merge, total, written_chunks

GIB = 1 << 30


def block_list(chunks: Iterable[int], volume_bytes: int) -> dict[str, Any]:
    """ListSnapshotBlocks' shape, pages merged: BlockSize, VolumeSize (GiB) and Blocks.

    VolumeSize is the size in whole GiB rounded down: a list whose VolumeSize exceeds the device
    is refused by sparsecopy, and a device larger than VolumeSize is fine (EBS volumes are whole
    GiB, so on 1 GiB multiples this is exact).
    """
    return {
        "BlockSize": CHUNK,
        "VolumeSize": volume_bytes // GIB,
        "Blocks": [{"BlockIndex": index} for index in sorted(chunks)],
    }


def write_block_list(image: Path, path: Path) -> set[int]:
    """Write the block list of the disk in `image` to `path`; return the listed chunk indices."""
    chunks = written_chunks(image)
    path.write_text(json.dumps(block_list(chunks, image.stat().st_size)) + "\n")
    return chunks


def chunk_extents(chunks: Iterable[int]) -> list[Extent]:
    """Byte ranges of a set of 512 KiB chunks, adjacent chunks joined."""
    return merge((index * CHUNK, CHUNK) for index in chunks)


def intersect(a: Iterable[Extent], b: Iterable[Extent]) -> list[Extent]:
    """Byte ranges covered by both `a` and `b`."""
    left, right = merge(a), merge(b)
    out: list[Extent] = []
    i = j = 0
    while i < len(left) and j < len(right):
        start = max(left[i][0], right[j][0])
        end = min(left[i][0] + left[i][1], right[j][0] + right[j][1])
        if start < end:
            out.append((start, end - start))
        if left[i][0] + left[i][1] <= right[j][0] + right[j][1]:
            i += 1
        else:
            j += 1
    return out


def held_and_needed(held: Iterable[int], needed: Iterable[Extent]) -> int:
    """Bytes both held by the snapshot (chunk indices) and needed by the copy (byte ranges)."""
    return total(intersect(chunk_extents(held), needed))


def held_needed_chunks(held: Iterable[int], needed: Iterable[Extent]) -> set[int]:
    """The lower bound on what a copy stores: the held blocks that hold a needed byte.

    Exactly these, zeros included (issue #19): a block the new snapshot does not hold reads as
    random bytes on an encrypted restore, so a needed all-zero block must be stored too; a
    block the source does not hold reads the same on the source's restores, so it need not.
    """
    return set(held) & chunk_set(needed)


def read_limit(held_needed_bytes: int) -> float:
    """The issue's bound on source bytes read with the block list: 1.1 x held-and-needed + 1 MiB."""
    return 1.1 * held_needed_bytes + (1 << 20)
