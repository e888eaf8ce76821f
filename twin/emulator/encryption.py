"""What a volume created from a snapshot reads where the snapshot holds no block: zeros when the
volume is unencrypted, and when it is encrypted the decryption of zeros under the volume's key,
i.e. pseudo-random bytes (awslabs/coldsnap #395/#396/#470, bottlerocket-os/bottlerocket #2169:
an unwritten region of an encrypted launch read as garbage).

The model (the bytes: devkit.restore.absent_block, shared with the data-plane tests' restores):
a volume is encrypted when its snapshot is, when CreateVolume or a RunInstances
mapping asks for Encrypted=true, or when the account has EBS encryption by default. Its key is the
KmsKeyId asked for, else the snapshot's key, else the account's default EBS key. Before anything
reads the volume, the twin writes into every 512 KiB block the snapshot does not hold the
AES-256-XTS decryption of zeros under a key derived from that KMS key id, with the block index as
the tweak: deterministic, so two restores with the same key read the same bytes, and different
for another key or block. A blank volume (no snapshot) reads zeros whatever its encryption.

The loop devices that stand in for the volume read its file directly, so the bytes must be in the
file before anything reads it (ec2_volumes.volume_path fills it then; the transfer instance's own
root, which nothing reads, is never filled); its allocation map then no longer says what was
written to it. The emulator keeps each filled volume's origin (its key and the blocks its
snapshot held): a CreateSnapshot of it stores the held blocks and every other block whose bytes
are no longer the fill (written since). A block overwritten with exactly its own fill bytes
(copied from another volume of the same key at the same index) counts as unwritten: the one
place the twin is kinder than EBS; the workflow never snapshots a volume made from a snapshot
(its targets are blank volumes).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devkit.restore import absent_block

from .blockstore import EBS_BLOCK, written_chunks


@dataclass
class FilledVolume:
    """A volume made from a snapshot with encryption: its key and, once filled, the blocks its
    snapshot held. The fill is written the first time anything reads the volume (ec2_volumes.
    volume_path: an attach for a command, a restore's check), so that a volume nobody reads (the
    transfer instance's root) costs no gigabytes of pseudo-random bytes."""

    kms_key_id: str
    held: frozenset[int] = frozenset()
    filled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


def volume_kms_key(backend: Any, volume: Any) -> str | None:
    """The KMS key of a volume made from a snapshot, settling the record the way EC2 does (an
    encrypted snapshot's key when none was asked for; EBS encryption by default), or None when
    the volume is unencrypted."""
    snapshot = backend.snapshots.get(volume.snapshot_id or "")
    if snapshot is not None and snapshot.encrypted and not volume.encrypted:
        volume.encrypted = True
    if not volume.encrypted and getattr(backend, "ebs_encryption_by_default", False):
        volume.encrypted = True
    if not volume.encrypted:
        return None
    if not volume.kms_key_id:
        snapshot_key = getattr(snapshot, "kms_key_id", None) if snapshot is not None else None
        if snapshot_key:
            volume.kms_key_id = snapshot_key
        else:
            if not backend.default_kms_key_id:
                backend._create_default_encryption_key()
            volume.kms_key_id = backend.default_kms_key_id
    return str(volume.kms_key_id)


def fill_holes(path: Path, origin: FilledVolume) -> None:
    """Write the fill into every 512 KiB block of the volume's file that its snapshot did not
    hold (until then the file is a copy of the snapshot's: its allocation map is the held set).
    Once per volume; the caller may read the file when this returns."""
    with origin.lock:
        if origin.filled:
            return
        held = frozenset(written_chunks(path))
        blocks = path.stat().st_size // EBS_BLOCK
        fd = os.open(path, os.O_WRONLY)
        try:
            for index in range(blocks):
                if index not in held:
                    os.pwrite(fd, absent_block(origin.kms_key_id, index), index * EBS_BLOCK)
        finally:  # no fsync: loop devices read the file through the same page cache
            os.close(fd)
        origin.held, origin.filled = held, True


def snapshot_blocks(path: Path, origin: FilledVolume | None) -> set[int] | None:
    """The blocks a snapshot of the volume stores, when its file's allocation map does not say
    (a filled volume); None when it does."""
    with origin.lock if origin is not None else contextlib.nullcontext():
        if origin is None or not origin.filled:
            return None
        return written_blocks(path, origin)


def written_blocks(path: Path, origin: FilledVolume) -> set[int]:
    """The blocks of a filled volume a snapshot stores: those its snapshot held and those
    written since (their bytes are no longer the fill)."""
    blocks = path.stat().st_size // EBS_BLOCK
    out = set(origin.held)
    with open(path, "rb", buffering=0) as f:
        for index in range(blocks):
            if index in origin.held:
                continue
            f.seek(index * EBS_BLOCK)
            if f.read(EBS_BLOCK) != absent_block(origin.kms_key_id, index):
                out.add(index)
    return out


def copy_blocks(source: Path, blocks: Iterable[int], target: Path) -> None:
    """A sparse file of the source's size holding exactly these 512 KiB blocks of it."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        dst.truncate(source.stat().st_size)
        for index in sorted(blocks):
            src.seek(index * EBS_BLOCK)
            dst.seek(index * EBS_BLOCK)
            dst.write(src.read(EBS_BLOCK))
        dst.flush()
        os.fsync(dst.fileno())
