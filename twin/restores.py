"""Restores of a new snapshot, made as a user would make them: CreateVolume from the snapshot in
the emulator, so that each block the snapshot does not hold reads what EBS gives it (zeros on an
unencrypted volume, the key's pseudo-random bytes on an encrypted one: emulator/encryption.py).
The checks (files, fsck, the boot) read these volumes, never the snapshot's written blocks.

Which restores: an unencrypted snapshot can be restored both ways (unencrypted, and with
Encrypted=true as EBS encryption by default or a launch mapping does); an encrypted snapshot only
encrypted (EC2 has no way to restore it unencrypted), with its own key. The encrypted restore
comes first: it is the harsh one, and the one a launch with encryption makes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .emulator.ec2_volumes import volume_path
from .emulator.server import Emulator

UNENCRYPTED = "unencrypted"
ENCRYPTED = "encrypted"


@dataclass(frozen=True)
class Restore:
    """One way to restore a snapshot: its label in the report and CreateVolume's extra params."""

    label: str
    params: tuple[tuple[str, Any], ...] = ()


def restores_for(emu: Emulator, snapshot_id: str) -> list[Restore]:
    """The restores a user can make of this snapshot (see the module docstring)."""
    snapshot = emu.ec2.snapshots[snapshot_id]
    if snapshot.encrypted:
        return [Restore(ENCRYPTED)]
    return [Restore(ENCRYPTED, (("Encrypted", True),)), Restore(UNENCRYPTED)]


@dataclass(frozen=True)
class Restored:
    """A restore made: the volume, its backing file, and how it is encrypted."""

    label: str
    volume_id: str
    path: Path
    kms_key_id: str | None

    def facts(self) -> dict[str, Any]:
        return {"restore": self.label, "volumeId": self.volume_id, "kmsKeyId": self.kms_key_id}


@contextlib.contextmanager
def restored(emu: Emulator, snapshot_id: str, restore: Restore) -> Iterator[Restored]:
    """A volume made from the snapshot the restore's way; deleted afterwards."""
    ec2 = emu.boto3_client("ec2")
    zone = f"{emu.region}a"
    volume = ec2.create_volume(SnapshotId=snapshot_id, AvailabilityZone=zone, VolumeType="gp3",
                               **dict(restore.params))  # fmt: skip
    try:
        yield Restored(
            restore.label,
            volume["VolumeId"],
            volume_path(emu.state, volume["VolumeId"]),
            volume.get("KmsKeyId") if volume.get("Encrypted") else None,
        )
    finally:
        ec2.delete_volume(VolumeId=volume["VolumeId"])
