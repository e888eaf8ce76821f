"""A restore of a snapshot into an encrypted volume, on a sparse image file.

A block an EBS snapshot does not hold reads as zeros on an unencrypted restore, but on an
encrypted one as the decryption of zeros under the new volume's key: random bytes (issue #19;
awslabs/coldsnap #395). On a sparse backing file "held" is every 512 KiB chunk that holds data
(devkit.chunks.written_chunks); this fills every other chunk with pseudo-random bytes derived
from a key and the chunk index, so the same key restores the same bytes (a failure can be
replayed) and different keys differ (nothing may depend on what an absent block reads as).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from devkit.chunks import CHUNK, written_chunks


def absent_block(key: str, index: int, length: int = CHUNK) -> bytes:
    """What the absent 512 KiB block `index` reads as on a volume restored with `key`."""
    # a str seed is hashed (SHA-512) by random.seed: stable across runs and Python versions
    return random.Random(f"{key}:{index}").randbytes(length)


def restore_encrypted(image: Path, key: str) -> int:
    """Fill every chunk of `image` that holds no data with `absent_block(key, index)`, in
    place; return how many chunks were filled. The last chunk may be short."""
    size = image.stat().st_size
    held = written_chunks(image)
    filled = 0
    with image.open("r+b") as f:
        for index in range(-(-size // CHUNK)):
            if index in held:
                continue
            f.seek(index * CHUNK)
            f.write(absent_block(key, index, min(CHUNK, size - index * CHUNK)))
            filled += 1
        f.flush()
        os.fsync(f.fileno())
    return filled
