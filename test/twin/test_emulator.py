"""The emulator's additions to moto, exercised through boto3 like the handlers use them."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from twin.emulator.blockstore import EBS_BLOCK, written_chunks
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator

GIB = 1024**3

DOCUMENT = {
    "schemaVersion": "2.2",
    "description": "test document",
    "parameters": {
        "SourceVolumeIds": {"type": "String", "allowedPattern": "^vol-[0-9a-f]+$"},
        "Mode": {"type": "String", "default": "ok", "allowedValues": ["ok", "fail"]},
    },
    "mainSteps": [
        {
            "action": "aws:runShellScript",
            "name": "run",
            "inputs": {
                "timeoutSeconds": "60",
                "runCommand": [
                    "set -eu",
                    'vol="{{ SourceVolumeIds }}"',
                    'link="$SPARSECOPY_BY_ID_DIR/nvme-Amazon_Elastic_Block_Store_${vol/-/}"',
                    'dev=$(readlink -f "$link")',
                    'echo "reading $dev" >&2',
                    'if [ "{{Mode}}" = fail ]; then echo \'{"error": "told to fail"}\'; exit 3; fi',
                    'head -c 16 "$dev" | od -An -c >&2',
                    "sleep 0.3",
                    'echo "{\\"device\\": \\"$dev\\", \\"first\\": \\"$(head -c 5 "$dev")\\"}"',
                ],
            },
        }
    ],
}


def _image(path: Path) -> Path:
    with open(path, "wb") as f:
        f.truncate(GIB)
        f.write(b"HELLO twin")
        f.seek(100 * EBS_BLOCK)
        f.write(b"z" * EBS_BLOCK * 2)
    return path


@pytest.fixture
def emulator(tmp_path: Path, root_only: None) -> Iterator[Emulator]:
    with Emulator(tmp_path / "emu", Faults()) as emu:
        yield emu


def _launch(emu: Emulator, snapshot_id: str, **extra: Any) -> tuple[str, dict[str, str]]:
    ec2 = emu.boto3_client("ec2")
    reservation = ec2.run_instances(
        ImageId="ami-12c6146b",
        MinCount=1,
        MaxCount=1,
        InstanceType="m6i.large",
        BlockDeviceMappings=[
            {
                "DeviceName": "/dev/sdf",
                "Ebs": {
                    "SnapshotId": snapshot_id,
                    "VolumeType": "gp3",
                    "DeleteOnTermination": True,
                },
            },
            {
                "DeviceName": "/dev/sdp",
                "Ebs": {"VolumeSize": 1, "VolumeType": "gp3", "DeleteOnTermination": True},
            },
        ],
        **extra,
    )
    instance = reservation["Instances"][0]
    volumes = {
        m["DeviceName"]: m["Ebs"]["VolumeId"]
        for m in ec2.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"][0][
            "Instances"
        ][0]["BlockDeviceMappings"]
    }
    return instance["InstanceId"], volumes


def _create_document(ssm: Any, document: dict[str, Any] = DOCUMENT) -> None:
    ssm.create_document(
        Content=json.dumps(document),
        Name="twin-test-doc",
        DocumentType="Command",
        DocumentFormat="JSON",
    )


def _send(ssm: Any, instance_id: str, **parameters: list[str]) -> str:
    """Send the document created by _create_document; returns the command id."""
    return ssm.send_command(
        DocumentName="twin-test-doc", InstanceIds=[instance_id], Parameters=parameters
    )["Command"]["CommandId"]


def _wait_invocation(ssm: Any, command_id: str, instance_id: str) -> dict[str, Any]:
    seen = []
    for _ in range(200):
        try:
            inv = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        except ClientError as error:
            seen.append(error.response["Error"]["Code"])
            continue
        seen.append(inv["Status"])
        if inv["Status"] not in ("Pending", "InProgress", "Delayed"):
            inv["seen"] = seen
            return inv
        time.sleep(0.05)
    raise AssertionError(f"command never finished: {seen[-5:]}")


def test_snapshot_restores_into_a_volume_the_command_reads(emulator: Emulator, tmp_path: Path):
    snap = emulator.register_snapshot(_image(tmp_path / "disk.img"), "source")
    ec2, ssm = emulator.boto3_client("ec2"), emulator.boto3_client("ssm")
    described = ec2.describe_snapshots(SnapshotIds=[snap])["Snapshots"][0]
    assert described["State"] == "completed"
    assert described["VolumeSize"] == 1
    assert described["FullSnapshotSizeInBytes"] == 3 * EBS_BLOCK

    instance_id, volumes = _launch(emulator, snap)
    info = ssm.describe_instance_information(
        Filters=[{"Key": "InstanceIds", "Values": [instance_id]}]
    )["InstanceInformationList"]
    assert info == []  # the agent has not registered on the first poll
    info = ssm.describe_instance_information(
        Filters=[{"Key": "InstanceIds", "Values": [instance_id]}]
    )["InstanceInformationList"]
    assert [(i["InstanceId"], i["PingStatus"]) for i in info] == [(instance_id, "Online")]

    _create_document(ssm)
    command_id = _send(ssm, instance_id, SourceVolumeIds=[volumes["/dev/sdf"]])
    inv = _wait_invocation(ssm, command_id, instance_id)
    assert inv["seen"][0] == "InvocationDoesNotExist"
    assert "InProgress" in inv["seen"]
    assert inv["Status"] == "Success", inv["StandardErrorContent"]
    out = json.loads(inv["StandardOutputContent"])
    assert out["first"] == "HELLO"
    assert out["device"].startswith("/dev/loop")
    assert "reading /dev/loop" in inv["StandardErrorContent"]
    assert emulator.state.loops.attached == {}  # released when the command ended

    ec2.terminate_instances(InstanceIds=[instance_id])
    assert (
        ec2.describe_volumes(Filters=[{"Name": "volume-id", "Values": list(volumes.values())}])[
            "Volumes"
        ]
        == []
    )
    assert emulator.state.volume_files == {}


def test_bad_parameter_is_refused_like_ssm(emulator: Emulator, tmp_path: Path) -> None:
    ssm = emulator.boto3_client("ssm")
    _create_document(ssm)
    with pytest.raises(ClientError) as caught:
        _send(ssm, "i-123", SourceVolumeIds=["not-a-volume"])
    assert caught.value.response["Error"]["Code"] == "InvalidParameters"


def test_failed_command_reports_exit_code_and_output(emulator: Emulator, tmp_path: Path):
    snap = emulator.register_snapshot(_image(tmp_path / "disk.img"))
    instance_id, volumes = _launch(emulator, snap)
    ssm = emulator.boto3_client("ssm")
    _create_document(ssm)
    command_id = _send(ssm, instance_id, SourceVolumeIds=[volumes["/dev/sdf"]], Mode=["fail"])
    inv = _wait_invocation(ssm, command_id, instance_id)
    assert (inv["Status"], inv["ResponseCode"]) == ("Failed", 3)
    assert json.loads(inv["StandardOutputContent"]) == {"error": "told to fail"}


def test_target_snapshot_is_pending_then_completed_with_written_size(
    emulator: Emulator, tmp_path: Path
) -> None:
    snap = emulator.register_snapshot(_image(tmp_path / "disk.img"))
    _, volumes = _launch(emulator, snap)
    target = volumes["/dev/sdp"]
    with open(emulator.state.volume_files[target], "r+b") as f:
        f.seek(7 * EBS_BLOCK)
        f.write(b"data")
    ec2 = emulator.boto3_client("ec2")
    new = ec2.create_snapshot(VolumeId=target)["SnapshotId"]
    states = [ec2.describe_snapshots(SnapshotIds=[new])["Snapshots"][0] for _ in range(3)]
    assert [s["State"] for s in states] == ["pending", "completed", "completed"]
    assert states[-1]["FullSnapshotSizeInBytes"] == EBS_BLOCK
    assert written_chunks(emulator.snapshot_file(new)) == {7}


def test_snapshot_error_fault(tmp_path: Path, root_only: None) -> None:
    with Emulator(tmp_path / "emu", Faults.named("snapshot-error")) as emu:
        snap = emu.register_snapshot(_image(tmp_path / "disk.img"))
        _, volumes = _launch(emu, snap)
        ec2 = emu.boto3_client("ec2")
        new = ec2.create_snapshot(VolumeId=volumes["/dev/sdp"])["SnapshotId"]
        states = [
            ec2.describe_snapshots(SnapshotIds=[new])["Snapshots"][0]["State"] for _ in range(3)
        ]
        assert states[-1] == "error"


def test_spot_capacity_fault_fails_spot_requests_only(tmp_path: Path, root_only: None) -> None:
    with Emulator(tmp_path / "emu", Faults.named("spot-capacity")) as emu:
        snap = emu.register_snapshot(_image(tmp_path / "disk.img"))
        spot = {"InstanceMarketOptions": {"MarketType": "spot"}}
        for _ in range(2):
            with pytest.raises(ClientError) as caught:
                _launch(emu, snap, **spot)
            assert caught.value.response["Error"]["Code"] == "InsufficientInstanceCapacity"
        instance_id, _ = _launch(emu, snap, **spot)
        assert instance_id.startswith("i-")


def test_instance_lost_fault_terminates_the_first_instance_mid_command(
    tmp_path: Path, root_only: None
) -> None:
    with Emulator(tmp_path / "emu", Faults.named("instance-lost")) as emu:
        snap = emu.register_snapshot(_image(tmp_path / "disk.img"))
        instance_id, volumes = _launch(emu, snap)
        ssm, ec2 = emu.boto3_client("ssm"), emu.boto3_client("ec2")
        doc = json.loads(json.dumps(DOCUMENT))
        doc["mainSteps"][0]["inputs"]["runCommand"].insert(0, "sleep 5")
        _create_document(ssm, doc)
        command_id = _send(ssm, instance_id, SourceVolumeIds=[volumes["/dev/sdf"]])
        for _ in range(100):
            state = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0][
                "Instances"
            ][0]["State"]["Name"]
            if state == "terminated":
                break
            time.sleep(0.05)
        assert state == "terminated"
        with pytest.raises(ClientError):  # InvocationDoesNotExist on the first poll, as always
            ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        # The agent died with the instance: the invocation never reports an end.
        inv = ssm.get_command_invocation(CommandId=command_id, InstanceId=instance_id)
        assert inv["Status"] == "InProgress"
        run = emu.state.runs[(command_id, instance_id)]
        assert run.process is not None and run.process.poll() is not None  # killed
        assert emu.state.loops.attached == {}
        assert emu.state.volume_files == {}


def test_fast_snapshot_restore_goes_enabling_optimizing_enabled(emulator: Emulator, tmp_path):
    snap = emulator.register_snapshot(_image(tmp_path / "disk.img"))
    ec2 = emulator.boto3_client("ec2")
    result = ec2.enable_fast_snapshot_restores(
        AvailabilityZones=["us-east-1a"], SourceSnapshotIds=[snap]
    )
    assert [i["State"] for i in result["Successful"]] == ["enabling"]
    states = [
        ec2.describe_fast_snapshot_restores(Filters=[{"Name": "snapshot-id", "Values": [snap]}])[
            "FastSnapshotRestores"
        ][0]["State"]
        for _ in range(3)
    ]
    assert states == ["optimizing", "enabled", "enabled"]
    bad = ec2.enable_fast_snapshot_restores(
        AvailabilityZones=["us-east-1a"], SourceSnapshotIds=["snap-0000000000000000"]
    )
    assert (
        bad["Successful"] == [] and bad["Unsuccessful"][0]["SnapshotId"] == "snap-0000000000000000"
    )


def test_no_loop_device_left_after_exit(tmp_path: Path, root_only: None) -> None:
    image = _image(tmp_path / "disk.img")
    with Emulator(tmp_path / "emu") as emu:
        emu.state.loops.attach(image)
        assert _devices_on(image)
    # By backing file, not device name: other users may get the same /dev/loopN right away.
    assert _devices_on(image) == []


def _devices_on(path: Path) -> list[str]:
    listed = subprocess.run(
        ["losetup", "--associated", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return [line.split(":", 1)[0] for line in listed.splitlines() if line.strip()]
