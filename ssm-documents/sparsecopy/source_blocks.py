"""``--source-blocks FILE``: the 512 KiB blocks the source snapshot holds (ListSnapshotBlocks).

FILE is JSON, optionally gzip-compressed (recognised by its 1f 8b magic), in the shape of
ListSnapshotBlocks' pages merged: ``{"BlockSize": 524288, "VolumeSize": <GiB>, "Blocks":
[{"BlockIndex": N}, ...]}`` and/or the compact ``"BlockRanges": [[first_index, count], ...]``
(the union of both is used; other keys such as BlockToken are ignored). Every byte of the source
outside the listed blocks reads as zeros on a volume restored from that snapshot, so the copy
neither reads nor writes it.
"""

import gzip
import json
import threading
import zlib
from typing import NamedTuple

from .errors import Failure
from .extents import Extents, intersect, normalize
from .shared import EBS_BLOCK_BYTES

BLOCK_SIZE = EBS_BLOCK_BYTES  # the EBS snapshot block size ListSnapshotBlocks reports
GIB = 1024**3


class BlockList(NamedTuple):
    path: str
    volume_gib: int
    ranges: list[tuple[int, int]]  # (first block index, count), sorted, merged
    blocks: int  # distinct blocks listed


def _index(value: object, what: str, path: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise Failure(
        f"--source-blocks {path}: {what} is {json.dumps(value)[:40]}, not a non-negative "
        "integer: pass the block list ListSnapshotBlocks returned"
    )


def _document(path: str) -> object:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise Failure(f"cannot read --source-blocks {path}: {exc.strerror}") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise Failure(
                f"--source-blocks {path} starts like gzip but does not decompress ({exc}): "
                "pass the block list file as written, plain or gzip-compressed"
            ) from exc
    try:
        return json.loads(raw)
    except ValueError as exc:  # also UnicodeDecodeError
        raise Failure(
            f"--source-blocks {path} is not valid JSON ({exc}): pass the block list "
            "ListSnapshotBlocks returned (its pages merged)"
        ) from exc


def load(path: str) -> BlockList:
    """Parse and check the shape of the block list (not yet against the device)."""
    doc = _document(path)
    if not isinstance(doc, dict):
        raise Failure(
            f"--source-blocks {path} holds a JSON {type(doc).__name__}, not an object with "
            "BlockSize, VolumeSize and Blocks or BlockRanges"
        )
    if "BlockSize" not in doc or "VolumeSize" not in doc:
        missing = " and ".join(k for k in ("BlockSize", "VolumeSize") if k not in doc)
        raise Failure(
            f"--source-blocks {path} has no {missing}: pass the block list "
            "ListSnapshotBlocks returned (its pages merged)"
        )
    block_size = doc["BlockSize"]
    if not (type(block_size) is int and block_size == BLOCK_SIZE):
        raise Failure(
            f"--source-blocks {path}: BlockSize is {json.dumps(block_size)[:40]}, but this "
            f"program only understands EBS snapshot blocks of {BLOCK_SIZE} bytes: "
            "pass the block list ListSnapshotBlocks returned"
        )
    volume_gib = _index(doc["VolumeSize"], "VolumeSize", path)
    if "Blocks" not in doc and "BlockRanges" not in doc:
        raise Failure(
            f"--source-blocks {path} has neither Blocks nor BlockRanges: "
            "a snapshot without data has an empty Blocks list"
        )
    ranges: list[tuple[int, int]] = []
    blocks, block_ranges = doc.get("Blocks", []), doc.get("BlockRanges", [])
    if not isinstance(blocks, list) or not isinstance(block_ranges, list):
        raise Failure(f"--source-blocks {path}: Blocks and BlockRanges must be JSON lists")
    for entry in blocks:
        if not isinstance(entry, dict) or "BlockIndex" not in entry:
            raise Failure(
                f"--source-blocks {path}: a Blocks entry is {json.dumps(entry)[:60]}, "
                'not {"BlockIndex": N}'
            )
        ranges.append((_index(entry["BlockIndex"], "a BlockIndex", path), 1))
    for entry in block_ranges:
        if not (isinstance(entry, list) and len(entry) == 2):
            raise Failure(
                f"--source-blocks {path}: a BlockRanges entry is {json.dumps(entry)[:60]}, "
                "not [first_index, count]"
            )
        first = _index(entry[0], "a BlockRanges first index", path)
        count = _index(entry[1], "a BlockRanges count", path)
        if count == 0:
            raise Failure(f"--source-blocks {path}: BlockRanges entry {entry} counts 0 blocks")
        ranges.append((first, count))
    merged = normalize(ranges)
    return BlockList(path, volume_gib, merged, sum(count for _, count in merged))


class Held:
    """The listed blocks as byte ranges of one device, and which of them the copy read."""

    def __init__(self, blocks: BlockList, size: int) -> None:
        self.blocks = blocks.blocks
        self.size = size
        self.extents: Extents = [
            (first * BLOCK_SIZE, min(count * BLOCK_SIZE, size - first * BLOCK_SIZE))
            for first, count in blocks.ranges
        ]
        # One byte per block of the device (32 MiB for 16 TiB): set when any byte was read.
        self._touched = bytearray(-(-size // BLOCK_SIZE))
        self._lock = threading.Lock()

    def clip(self, extents: Extents) -> Extents:
        """The parts of ``extents`` that lie in listed blocks (needed ∩ held)."""
        return intersect(extents, self.extents)

    def touch(self, offset: int, length: int) -> None:
        """Record a read of the source's bytes [offset, offset + length)."""
        if length <= 0:
            return
        first, last = offset // BLOCK_SIZE, (offset + length - 1) // BLOCK_SIZE
        with self._lock:
            self._touched[first : last + 1] = b"\x01" * (last + 1 - first)

    def blocks_read(self) -> int:
        """Listed blocks of which at least one byte was read."""
        with self._lock:
            return sum(
                self._touched[start // BLOCK_SIZE : -(-(start + length) // BLOCK_SIZE)].count(1)
                for start, length in self.extents
            )


def against_device(blocks: BlockList, size: int, source: str) -> Held:
    """Check the list against the source device (before anything is written)."""
    if blocks.volume_gib * GIB > size:
        raise Failure(
            f"--source-blocks {blocks.path} is for a {blocks.volume_gib} GiB volume but source "
            f"{source} has {size} bytes: pass the block list of the snapshot this source "
            "volume was restored from"
        )
    if blocks.ranges:
        first, count = blocks.ranges[-1]
        last = first + count - 1
        if last * BLOCK_SIZE >= size:
            raise Failure(
                f"--source-blocks {blocks.path} lists block {last} (bytes from "
                f"{last * BLOCK_SIZE}) past the end of source {source} ({size} bytes): "
                "pass the block list of the snapshot this source volume was restored from"
            )
    return Held(blocks, size)
