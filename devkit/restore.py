"""A volume restored the way an ENCRYPTED restore of a snapshot reads (issue 19).

A 512 KiB block the snapshot does not hold reads, on a volume restored with encryption, as the
decryption of zeros under the volume's key: bytes that look random (awslabs/coldsnap #395/#396,
#470; bottlerocket-os/bottlerocket #2169). A copy that leaves out a block the filesystem needs
because it held only zeros is then corrupt, while an unencrypted restore (absent blocks read as
zeros) hides it. These helpers build such restores: every held block with its bytes, every
other block with pseudo-random bytes derived from a seed and the block's index (deterministic,
so a failure reproduces).

- ``restore_image(image, dest, seed)``: the blocks a written volume's backing file holds (its
  allocated 512 KiB chunks, devkit.chunks: what a snapshot of it stores) kept, the rest random;
- ``restore_blocks(blocks, size, dest, seed)``: a snapshot's blocks (index -> 512 KiB).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from pathlib import Path

from devkit.chunks import CHUNK, written_chunks


def absent_block(seed: str, index: int) -> bytes:
    """What block ``index`` of an encrypted restore reads when the snapshot does not hold it."""
    key = hashlib.sha256(f"{seed}/{index}".encode()).digest()
    return random.Random(key).randbytes(CHUNK)


def restore_blocks(blocks: Mapping[int, bytes], size: int, dest: Path, seed: str) -> Path:
    """``dest``: a ``size``-byte volume holding ``blocks`` (index -> bytes) and random bytes in
    every other block."""
    with open(dest, "wb") as out:
        for index in range(-(-size // CHUNK)):
            data = blocks.get(index)
            if data is None:
                data = absent_block(seed, index)
            out.write(data[: min(CHUNK, size - index * CHUNK)])
    return dest


def restore_image(image: Path, dest: Path, seed: str) -> Path:
    """``dest``: ``image`` as an encrypted restore of its snapshot reads it: the chunks its
    backing file holds (allocated, zeros included) kept, every other chunk random."""
    size = image.stat().st_size
    held = written_chunks(image)
    with open(image, "rb") as src, open(dest, "wb") as out:
        for index in range(-(-size // CHUNK)):
            length = min(CHUNK, size - index * CHUNK)
            if index in held:
                src.seek(index * CHUNK)
                out.write(src.read(length))
            else:
                out.write(absent_block(seed, index)[:length])
    return dest
