"""A volume restored the way an ENCRYPTED restore of a snapshot reads (issue 19).

A 512 KiB block the snapshot does not hold reads, on a volume restored with encryption, as the
decryption of zeros under the volume's key: bytes that look random (awslabs/coldsnap #395/#396,
#470; bottlerocket-os/bottlerocket #2169). A copy that leaves out a block the filesystem needs
because it held only zeros is then corrupt, while an unencrypted restore (absent blocks read as
zeros) hides it. ``absent_block`` is the one model of those bytes, used by these helpers and by
the twin's emulated volumes (twin/emulator/encryption.py): deterministic, so two restores with
the same key read the same bytes and a failure reproduces.

- ``restore_image(image, dest, key)``: the blocks a written volume's backing file holds (its
  allocated 512 KiB chunks, devkit.chunks: what a snapshot of it stores) kept, the rest random;
- ``restore_blocks(blocks, size, dest, key)``: a snapshot's blocks (index -> 512 KiB);
- ``replay_written(image, partitions, work, key)``: the blocks that a replay of each crashed
  journal/log writes on such a restore where the snapshot holds nothing (the oracle for what
  sparsecopy's replay may add to held ∩ needed).
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from devkit.chunks import CHUNK, written_chunks
from devkit.commands import run
from devkit.disks.image import DiskImage, Partition
from devkit.disks.layout import partition_loop, partition_mount

_ZEROS = bytes(CHUNK)


def absent_block(key: str, index: int) -> bytes:
    """What block ``index`` of a volume encrypted under ``key`` reads when its snapshot does not
    hold it: the AES-256-XTS decryption of zeros, under a key derived from ``key``, with the
    block index as the tweak."""
    secret = hashlib.sha512(f"ebs-volume-key:{key}".encode()).digest()
    tweak = index.to_bytes(16, "little")
    decryptor = Cipher(algorithms.AES(secret), modes.XTS(tweak)).decryptor()
    return decryptor.update(_ZEROS) + decryptor.finalize()


def restore_blocks(blocks: Mapping[int, bytes], size: int, dest: Path, key: str) -> Path:
    """``dest``: a ``size``-byte volume holding ``blocks`` (index -> bytes) and random bytes in
    every other block."""
    with open(dest, "wb") as out:
        for index in range(-(-size // CHUNK)):
            data = blocks.get(index)
            if data is None:
                data = absent_block(key, index)
            out.write(data[: min(CHUNK, size - index * CHUNK)])
    return dest


def restore_image(image: Path, dest: Path, key: str) -> Path:
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
                out.write(absent_block(key, index)[:length])
    return dest


def _pending(disk: DiskImage, part: Partition) -> bool:
    """Whether the partition's journal/log holds changes a replay would write."""
    with partition_loop(disk, part.number, read_only=True) as device:
        if part.fs == "ext4":
            return "needs_recovery" in run("dumpe2fs", "-h", device)
        return "<CLEAN>" not in run("xfs_logprint", "-t", device)


def replay_written(image: Path, partitions: Iterable[Partition], work: Path, key: str) -> set[int]:
    """The 512 KiB blocks that ``image`` (a snapshot's backing file: its allocated chunks are
    what it holds) does not hold and that a replay writes: every ext4 partition whose journal
    needs recovery replayed by ``e2fsck -E journal_only``, every XFS with a dirty log mounted
    and unmounted, as sparsecopy does, on an encrypted restore of it (``work``, removed after).
    Every write changes a block there, so the changed blocks are the written ones."""
    size = image.stat().st_size
    source = DiskImage(image, size, "none", list(partitions))
    crashed = [p for p in source.partitions if p.fs in ("ext4", "xfs") and _pending(source, p)]
    if not crashed:  # the common case: no restore to write
        return set()
    disk = source.copy_at(restore_image(image, work, key))
    try:
        for part in crashed:
            if part.fs == "ext4":
                with partition_loop(disk, part.number) as device:
                    proc = subprocess.run(
                        ["e2fsck", "-E", "journal_only", "-p", device], capture_output=True
                    )
                if proc.returncode not in (0, 1):  # 1: the journal replayed, something fixed
                    raise RuntimeError(f"e2fsck on partition {part.number}: {proc.stderr!r}")
            else:
                with partition_mount(disk, part.number):  # nouuid: a copy of a mounted image
                    pass
        held = written_chunks(image)
        out = set()
        with open(work, "rb") as f:
            for index in range(-(-size // CHUNK)):
                data = f.read(CHUNK)
                if index not in held and data != absent_block(key, index)[: len(data)]:
                    out.add(index)
        return out
    finally:
        work.unlink(missing_ok=True)
