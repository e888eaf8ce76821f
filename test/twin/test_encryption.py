"""Encrypted volumes in the emulator (twin/emulator/encryption.py): where a snapshot holds no
block, a volume made from it reads zeros unencrypted and its key's pseudo-random bytes encrypted;
a snapshot of such a volume stores only what was written; GetSnapshotBlock of a block the
snapshot does not hold fails. No loop devices: the emulator and boto3 alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from twin_helpers import holey_image

from devkit.ebs import wire
from devkit.restore import absent_block
from twin.emulator.blockstore import EBS_BLOCK, written_chunks
from twin.emulator.ec2_volumes import volume_path
from twin.emulator.server import Emulator

pytestmark = pytest.mark.needs_root

ZONE = "us-east-1a"
OTHER_KEY = "arn:aws:kms:us-east-1:123456789012:key/00000000-1111-2222-3333-444444444444"


def _block(path: Path, index: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(index * EBS_BLOCK)
        return f.read(EBS_BLOCK)


def _volume(emu: Emulator, **params: Any) -> tuple[dict[str, Any], Path]:
    ec2 = emu.boto3_client("ec2")
    volume_id = ec2.create_volume(AvailabilityZone=ZONE, **params)["VolumeId"]
    described = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]
    return described, volume_path(emu.state, volume_id)


def test_unencrypted_restore_reads_zeros_where_the_snapshot_holds_nothing(
    emulator: Emulator, tmp_path: Path
) -> None:
    snap = emulator.register_snapshot(holey_image(tmp_path / "disk.img"))
    described, path = _volume(emulator, SnapshotId=snap)
    assert not described["Encrypted"]
    assert _block(path, 100) == b"z" * EBS_BLOCK
    assert _block(path, 50) == bytes(EBS_BLOCK)


def test_encrypted_restore_reads_its_keys_bytes_where_the_snapshot_holds_nothing(
    emulator: Emulator, tmp_path: Path
) -> None:
    snap = emulator.register_snapshot(holey_image(tmp_path / "disk.img"))
    described, path = _volume(emulator, SnapshotId=snap, Encrypted=True)
    key = described["KmsKeyId"]
    assert described["Encrypted"] and key
    # held blocks read their bytes, zeros included (block 0 holds "HELLO twin" then zeros)
    assert _block(path, 0).startswith(b"HELLO twin\0")
    assert _block(path, 101) == b"z" * EBS_BLOCK
    # an absent block reads the decryption of zeros: not zeros, the same for the same key
    # and index, different for another index or key
    assert _block(path, 50) == absent_block(key, 50) != bytes(EBS_BLOCK)
    assert absent_block(key, 50) != absent_block(key, 51)
    assert absent_block(key, 50) != absent_block(OTHER_KEY, 50)
    other, other_path = _volume(emulator, SnapshotId=snap, Encrypted=True, KmsKeyId=OTHER_KEY)
    assert other["KmsKeyId"] == OTHER_KEY
    assert _block(other_path, 50) == absent_block(OTHER_KEY, 50)


def test_a_volume_from_an_encrypted_snapshot_is_encrypted_with_its_key(
    emulator: Emulator, tmp_path: Path
) -> None:
    snap = emulator.register_snapshot(holey_image(tmp_path / "disk.img"), kms_key_id=OTHER_KEY)
    described, path = _volume(emulator, SnapshotId=snap)
    assert (described["Encrypted"], described["KmsKeyId"]) == (True, OTHER_KEY)
    assert _block(path, 7) == absent_block(OTHER_KEY, 7)


def test_encryption_by_default_and_launch_mappings_encrypt_restores(
    emulator: Emulator, tmp_path: Path
) -> None:
    snap = emulator.register_snapshot(holey_image(tmp_path / "disk.img"))
    ec2 = emulator.boto3_client("ec2")
    reservation = ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m6i.large",
        BlockDeviceMappings=[{"DeviceName": "/dev/sdf",
                              "Ebs": {"SnapshotId": snap, "Encrypted": True}}],
    )  # fmt: skip
    instance = ec2.describe_instances(InstanceIds=[reservation["Instances"][0]["InstanceId"]])
    mapped = instance["Reservations"][0]["Instances"][0]["BlockDeviceMappings"]
    volume_id = next(m["Ebs"]["VolumeId"] for m in mapped if m["DeviceName"] == "/dev/sdf")
    key = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"][0]["KmsKeyId"]
    assert _block(volume_path(emulator.state, volume_id), 3) == absent_block(key, 3)
    ec2.enable_ebs_encryption_by_default()
    described, path = _volume(emulator, SnapshotId=snap)
    assert described["Encrypted"]
    assert _block(path, 3) == absent_block(described["KmsKeyId"], 3)


def test_a_blank_encrypted_volume_reads_zeros(emulator: Emulator) -> None:
    described, path = _volume(emulator, Size=1, Encrypted=True)
    assert described["Encrypted"]
    assert written_chunks(path) == set()
    assert _block(path, 3) == bytes(EBS_BLOCK)


def test_a_snapshot_of_an_encrypted_restore_stores_what_was_held_or_written(
    emulator: Emulator, tmp_path: Path
) -> None:
    snap = emulator.register_snapshot(holey_image(tmp_path / "disk.img"))
    described, path = _volume(emulator, SnapshotId=snap, Encrypted=True)
    with open(path, "r+b") as f:
        f.seek(7 * EBS_BLOCK + 10)
        f.write(b"written")
    ec2 = emulator.boto3_client("ec2")
    new = ec2.create_snapshot(VolumeId=described["VolumeId"])["SnapshotId"]
    # the fill the restore reads is not data of the volume: only held and written blocks
    assert written_chunks(emulator.snapshot_file(new)) == {0, 7, 100, 101}
    assert _block(emulator.snapshot_file(new), 7)[10:17] == b"written"
    snapshot = ec2.describe_snapshots(SnapshotIds=[new])["Snapshots"][0]
    assert (snapshot["Encrypted"], snapshot.get("KmsKeyId")) == (True, described["KmsKeyId"])
    # a restore nobody read yet is not filled: its snapshot is still the held blocks
    unread = ec2.create_volume(AvailabilityZone=ZONE, SnapshotId=snap, Encrypted=True)
    newer = ec2.create_snapshot(VolumeId=unread["VolumeId"])["SnapshotId"]
    assert written_chunks(emulator.snapshot_file(newer)) == {0, 100, 101}


def _ebs(emu: Emulator) -> Any:
    return boto3.client(
        "ebs", endpoint_url=emu.endpoint, region_name=emu.region,
        aws_access_key_id="testing", aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 0}),
    )  # fmt: skip


def test_get_snapshot_block_of_a_block_the_snapshot_does_not_hold_fails(
    emulator: Emulator, tmp_path: Path
) -> None:
    snap = emulator.register_snapshot(holey_image(tmp_path / "disk.img"))
    client = _ebs(emulator)
    listed = client.list_snapshot_blocks(SnapshotId=snap)["Blocks"]
    assert [b["BlockIndex"] for b in listed] == [0, 100, 101]
    # even with the token the emulator would make for that index: no such block exists
    with pytest.raises(ClientError) as excinfo:
        client.get_snapshot_block(
            SnapshotId=snap, BlockIndex=50, BlockToken=wire.block_token(snap, 50)
        )
    error = excinfo.value.response
    assert (error["Error"]["Code"], error.get("Reason")) == (
        "ValidationException",
        "INVALID_BLOCK_TOKEN",
    )
    got = client.get_snapshot_block(
        SnapshotId=snap, BlockIndex=100, BlockToken=listed[1]["BlockToken"]
    )
    assert got["BlockData"].read() == b"z" * EBS_BLOCK
