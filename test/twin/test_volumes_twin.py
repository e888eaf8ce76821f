"""The emulator moves volumes and attachments through EC2's states, refuses what EC2 refuses,
and ends an instance whose launch volume's KMS key is unusable (items 1 and 7 of issue 7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from twin_helpers import create_document as _create_document  # type: ignore[import-not-found]
from twin_helpers import holey_image as _image  # type: ignore[import-not-found]
from twin_helpers import send as _send  # type: ignore[import-not-found]
from twin_helpers import wait_invocation as _wait_invocation  # type: ignore[import-not-found]

from twin.emulator.server import Emulator


def _instance(ec2: Any, **extra: Any) -> dict[str, Any]:
    return ec2.run_instances(  # type: ignore[no-any-return]
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        InstanceType="m6i.large",
        Placement={"AvailabilityZone": "us-east-1a"},
        **extra,
    )["Instances"][0]


def _state(ec2: Any, volume_id: str) -> tuple[str, list[str]]:
    (volume,) = ec2.describe_volumes(VolumeIds=[volume_id])["Volumes"]
    return volume["State"], [a["State"] for a in volume["Attachments"]]


def test_create_volume_is_creating_then_available_and_idempotent_by_token(
    emulator: Emulator, tmp_path: Path
) -> None:
    snap = emulator.register_snapshot(_image(tmp_path / "disk.img"), "source")
    ec2 = emulator.boto3_client("ec2")
    args = {"SnapshotId": snap, "AvailabilityZone": "us-east-1a", "VolumeType": "gp3"}
    first = ec2.create_volume(ClientToken="token-1", **args)
    assert first["State"] == "creating"
    again = ec2.create_volume(ClientToken="token-1", **args)
    assert again["VolumeId"] == first["VolumeId"]
    other = ec2.create_volume(ClientToken="token-2", **args)
    assert other["VolumeId"] != first["VolumeId"]
    states = [_state(ec2, first["VolumeId"])[0] for _ in range(3)]
    assert states == ["creating", "creating", "available"]


def test_attach_volume_goes_attaching_then_attached_and_refuses_like_ec2(
    emulator: Emulator, tmp_path: Path
) -> None:
    snap = emulator.register_snapshot(_image(tmp_path / "disk.img"), "source")
    ec2 = emulator.boto3_client("ec2")
    instance_id = _instance(ec2)["InstanceId"]
    volume_id = ec2.create_volume(SnapshotId=snap, AvailabilityZone="us-east-1a")["VolumeId"]
    with pytest.raises(ClientError) as caught:
        ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    assert caught.value.response["Error"]["Code"] == "IncorrectState"  # still creating
    while _state(ec2, volume_id)[0] == "creating":
        pass
    elsewhere = ec2.create_volume(SnapshotId=snap, AvailabilityZone="us-east-1b")["VolumeId"]
    for _ in range(3):
        _state(ec2, elsewhere)
    with pytest.raises(ClientError) as caught:
        ec2.attach_volume(VolumeId=elsewhere, InstanceId=instance_id, Device="/dev/sdg")
    assert caught.value.response["Error"]["Code"] == "InvalidVolume.ZoneMismatch"
    answer = ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    assert answer["State"] == "attaching"
    assert _state(ec2, volume_id) == ("in-use", ["attaching"])
    assert _state(ec2, volume_id) == ("in-use", ["attached"])
    with pytest.raises(ClientError) as caught:
        ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdh")
    assert caught.value.response["Error"]["Code"] == "IncorrectState"  # in-use


def test_the_command_sees_a_volume_attached_after_launch(
    emulator: Emulator, tmp_path: Path
) -> None:
    """The run's devices are what is attached when the command starts, not only what
    RunInstances mapped."""
    snap = emulator.register_snapshot(_image(tmp_path / "disk.img"), "source")
    ec2, ssm = emulator.boto3_client("ec2"), emulator.boto3_client("ssm")
    instance_id = _instance(ec2)["InstanceId"]
    volume_id = ec2.create_volume(SnapshotId=snap, AvailabilityZone="us-east-1a")["VolumeId"]
    while _state(ec2, volume_id)[0] == "creating":
        pass
    ec2.attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device="/dev/sdf")
    _create_document(ssm)
    inv = _wait_invocation(ssm, _send(ssm, instance_id, SourceVolumeIds=[volume_id]), instance_id)
    assert inv["Status"] == "Success", inv["StandardErrorContent"]
    assert json.loads(inv["StandardOutputContent"])["first"] == "HELLO"
    assert emulator.state.loops.attached == {}


@pytest.mark.parametrize("disable", ["disable_key", "schedule_key_deletion"])
def test_unusable_kms_key_at_launch_terminates_the_instance(
    emulator: Emulator, disable: str
) -> None:
    ec2, kms = emulator.boto3_client("ec2"), emulator.boto3_client("kms")
    metadata = kms.create_key()["KeyMetadata"]
    key = metadata["Arn"]
    getattr(kms, disable)(KeyId=metadata["KeyId"])
    mapping = {
        "DeviceName": "/dev/sdp",
        "Ebs": {"VolumeSize": 1, "VolumeType": "gp3", "Encrypted": True, "KmsKeyId": key},
    }
    launched = _instance(ec2, BlockDeviceMappings=[mapping])
    assert launched["State"]["Name"] == "pending"
    (found,) = ec2.describe_instances(InstanceIds=[launched["InstanceId"]])["Reservations"][0][
        "Instances"
    ]
    assert found["State"]["Name"] == "terminated"
    assert found["StateReason"]["Code"] == "Client.InvalidKMSKey.InvalidState"


def test_enabled_kms_key_at_launch_runs(emulator: Emulator) -> None:
    ec2, kms = emulator.boto3_client("ec2"), emulator.boto3_client("kms")
    key = kms.create_key()["KeyMetadata"]["Arn"]
    mapping = {
        "DeviceName": "/dev/sdp",
        "Ebs": {"VolumeSize": 1, "VolumeType": "gp3", "Encrypted": True, "KmsKeyId": key},
    }
    launched = _instance(ec2, BlockDeviceMappings=[mapping])
    (found,) = ec2.describe_instances(InstanceIds=[launched["InstanceId"]])["Reservations"][0][
        "Instances"
    ]
    assert found["State"]["Name"] == "running"
