"""The emulator's additions to moto, exercised through boto3 like the handlers use them."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from twin_helpers import DOCUMENT, create_document, holey_image, send, wait_invocation

from twin.emulator.blockstore import EBS_BLOCK, written_chunks
from twin.emulator.faults import Faults
from twin.emulator.server import Emulator


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


def test_snapshot_restores_into_a_volume_the_command_reads(emulator: Emulator, tmp_path: Path):
    snap = emulator.register_snapshot(holey_image(tmp_path / "disk.img"), "source")
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

    create_document(ssm)
    command_id = send(ssm, instance_id, SourceVolumeIds=[volumes["/dev/sdf"]])
    inv = wait_invocation(ssm, command_id, instance_id)
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
    create_document(ssm)
    with pytest.raises(ClientError) as caught:
        send(ssm, "i-123", SourceVolumeIds=["not-a-volume"])
    assert caught.value.response["Error"]["Code"] == "InvalidParameters"


def test_failed_command_reports_exit_code_and_output(emulator: Emulator, tmp_path: Path):
    snap = emulator.register_snapshot(holey_image(tmp_path / "disk.img"))
    instance_id, volumes = _launch(emulator, snap)
    ssm = emulator.boto3_client("ssm")
    create_document(ssm)
    command_id = send(ssm, instance_id, SourceVolumeIds=[volumes["/dev/sdf"]], Mode=["fail"])
    inv = wait_invocation(ssm, command_id, instance_id)
    assert (inv["Status"], inv["ResponseCode"]) == ("Failed", 3)
    assert json.loads(inv["StandardOutputContent"]) == {"error": "told to fail"}


def test_target_snapshot_is_pending_then_completed_with_written_size(
    emulator: Emulator, tmp_path: Path
) -> None:
    snap = emulator.register_snapshot(holey_image(tmp_path / "disk.img"))
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
        snap = emu.register_snapshot(holey_image(tmp_path / "disk.img"))
        _, volumes = _launch(emu, snap)
        ec2 = emu.boto3_client("ec2")
        new = ec2.create_snapshot(VolumeId=volumes["/dev/sdp"])["SnapshotId"]
        states = [
            ec2.describe_snapshots(SnapshotIds=[new])["Snapshots"][0]["State"] for _ in range(3)
        ]
        assert states[-1] == "error"


def test_spot_capacity_fault_fails_spot_requests_only(tmp_path: Path, root_only: None) -> None:
    with Emulator(tmp_path / "emu", Faults.named("spot-capacity")) as emu:
        snap = emu.register_snapshot(holey_image(tmp_path / "disk.img"))
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
        snap = emu.register_snapshot(holey_image(tmp_path / "disk.img"))
        instance_id, volumes = _launch(emu, snap)
        ssm, ec2 = emu.boto3_client("ssm"), emu.boto3_client("ec2")
        doc = json.loads(json.dumps(DOCUMENT))
        doc["mainSteps"][0]["inputs"]["runCommand"].insert(0, "sleep 5")
        create_document(ssm, doc)
        command_id = send(ssm, instance_id, SourceVolumeIds=[volumes["/dev/sdf"]])
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
        # the run's thread frees the devices as it ends (after the kill, not before)
        assert run.thread is not None
        run.thread.join(timeout=30)
        assert emu.state.loops.attached == {}
        assert emu.state.volume_files == {}


def test_fast_snapshot_restore_goes_enabling_optimizing_enabled(emulator: Emulator, tmp_path):
    snap = emulator.register_snapshot(holey_image(tmp_path / "disk.img"))
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
    image = holey_image(tmp_path / "disk.img")
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


# --- harsh by default: eventual consistency (twin/emulator/consistency.py) ----------------------

EXECUTION_FILTER = [{"Name": "tag:ebs-snapshot-compactor:execution", "Values": ["e-1"]}]
EXECUTION_TAGS = [{"Key": "ebs-snapshot-compactor:execution", "Value": "e-1"}]


def test_fresh_resources_are_missing_from_tag_filtered_describes_for_a_few_calls(
    emulator: Emulator,
) -> None:
    from twin.emulator.consistency import TAG_LAG_CALLS

    ec2 = emulator.boto3_client("ec2")
    volume = ec2.create_volume(
        AvailabilityZone="us-east-1a", Size=1,
        TagSpecifications=[{"ResourceType": "volume", "Tags": EXECUTION_TAGS}],
    )["VolumeId"]  # fmt: skip
    snapshot = ec2.create_snapshot(
        VolumeId=volume, TagSpecifications=[{"ResourceType": "snapshot", "Tags": EXECUTION_TAGS}]
    )["SnapshotId"]
    instance = ec2.run_instances(
        ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": EXECUTION_TAGS}],
    )["Instances"][0]["InstanceId"]  # fmt: skip

    def tagged() -> tuple[list[str], list[str], list[str]]:
        vols = [v["VolumeId"] for v in ec2.describe_volumes(Filters=EXECUTION_FILTER)["Volumes"]]
        snaps = [
            s["SnapshotId"]
            for s in ec2.describe_snapshots(OwnerIds=["self"], Filters=EXECUTION_FILTER)[
                "Snapshots"
            ]
        ]
        insts = [
            i["InstanceId"]
            for r in ec2.describe_instances(Filters=EXECUTION_FILTER)["Reservations"]
            for i in r["Instances"]
        ]
        return vols, snaps, insts

    # By id they are there at once, also while tag filters still miss them.
    assert ec2.describe_volumes(VolumeIds=[volume])["Volumes"]
    assert ec2.describe_snapshots(SnapshotIds=[snapshot])["Snapshots"]
    assert ec2.describe_instances(InstanceIds=[instance])["Reservations"]
    for _ in range(TAG_LAG_CALLS):
        assert tagged() == ([], [], [])
    assert tagged() == ([volume], [snapshot], [instance])
    # Without a tag filter nothing lags.
    fresh = ec2.create_volume(AvailabilityZone="us-east-1a", Size=1)["VolumeId"]
    assert fresh in [v["VolumeId"] for v in ec2.describe_volumes()["Volumes"]]
    assert emulator.state.tag_lag_hidden == 3 * TAG_LAG_CALLS
    # A long Wait of the workflow lets it settle at once (the runner POSTs /_twin/settle).
    later = ec2.create_volume(
        AvailabilityZone="us-east-1a", Size=1,
        TagSpecifications=[{"ResourceType": "volume", "Tags": EXECUTION_TAGS}],
    )["VolumeId"]  # fmt: skip
    import urllib.request

    urllib.request.urlopen(
        urllib.request.Request(f"{emulator.endpoint}/_twin/settle", data=b"{}", method="POST")
    ).close()
    assert later in tagged()[0]


def test_an_amis_snapshot_is_in_use_until_the_deregistration_settles(
    emulator: Emulator,
) -> None:
    from twin.emulator.consistency import DEREGISTER_SETTLE_CALLS

    ec2 = emulator.boto3_client("ec2")
    volume = ec2.create_volume(AvailabilityZone="us-east-1a", Size=1)["VolumeId"]
    snapshot = ec2.create_snapshot(VolumeId=volume)["SnapshotId"]
    for _ in range(3):
        ec2.describe_snapshots(SnapshotIds=[snapshot])  # let it complete
    image = ec2.register_image(
        Name="uses-the-snapshot", Architecture="x86_64", RootDeviceName="/dev/xvda",
        BlockDeviceMappings=[{"DeviceName": "/dev/xvda", "Ebs": {"SnapshotId": snapshot}}],
    )["ImageId"]  # fmt: skip

    def delete() -> str:
        try:
            ec2.delete_snapshot(SnapshotId=snapshot)
        except ClientError as error:
            return str(error.response["Error"]["Code"])
        return "deleted"

    assert delete() == "InvalidSnapshot.InUse"
    ec2.deregister_image(ImageId=image)
    assert [delete() for _ in range(DEREGISTER_SETTLE_CALLS)] == [
        "InvalidSnapshot.InUse"
    ] * DEREGISTER_SETTLE_CALLS
    assert delete() == "deleted"
    assert not ec2.describe_snapshots(Filters=[{"Name": "snapshot-id", "Values": [snapshot]}])[
        "Snapshots"
    ]


# --- faults at the front door (twin/emulator/injection.py) --------------------------------------


def test_throttle_fault_answers_the_states_requests_with_the_services_throttling_error(
    tmp_path: Path, root_only: None
) -> None:
    import boto3
    from botocore.config import Config

    with Emulator(tmp_path / "emu", Faults(throttle_states=("Check instance",))) as emu:
        no_retries = Config(retries={"mode": "standard", "total_max_attempts": 1})
        session = boto3.Session(**{k: v for k, v in {
            "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
            "region_name": emu.region}.items()})  # fmt: skip

        def client(service: str, state: str | None) -> Any:
            c = session.client(service, endpoint_url=emu.endpoint, config=no_retries)
            if state:
                c.meta.events.register(
                    "before-send",
                    lambda request, **_: request.headers.__setitem__(
                        "X-Twin-State", state.replace(" ", "%20")
                    ),
                )
            return c

        def code(call: Any) -> tuple[str, int]:
            try:
                call()
            except ClientError as error:
                return error.response["Error"]["Code"], error.response["ResponseMetadata"][
                    "HTTPStatusCode"
                ]
            return "ok", 200

        ec2, ssm = client("ec2", "Check instance"), client("ssm", "Check instance")
        assert code(ec2.describe_instances) == ("RequestLimitExceeded", 503)
        assert code(ssm.describe_instance_information) == ("ThrottlingException", 400)
        # Other states and unmarked calls are not throttled.
        assert code(client("ec2", "Launch transfer instance").describe_instances) == ("ok", 200)
        assert code(client("ec2", None).describe_instances) == ("ok", 200)
        for _ in range(emu.state.faults.throttled_requests - 2):
            assert code(ec2.describe_instances)[0] == "RequestLimitExceeded"
        assert code(ec2.describe_instances) == ("ok", 200)  # for a while, not for ever
        assert emu.state.throttled_served == {"Check instance": emu.state.faults.throttled_requests}


def test_lost_control_terminates_only_the_executions_running_instance(emulator: Emulator) -> None:
    import urllib.request

    ec2 = emulator.boto3_client("ec2")

    def launch(execution: str) -> str:
        tags = [{"Key": "ebs-snapshot-compactor:execution", "Value": execution}]
        return str(
            ec2.run_instances(
                ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
            )["Instances"][0]["InstanceId"]
        )  # fmt: skip

    mine, other = launch("e-1"), launch("e-2")
    request = urllib.request.Request(
        f"{emulator.endpoint}/_twin/lost", data=json.dumps({"execution": "e-1"}).encode(),
        method="POST", headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request) as answer:
        assert json.loads(answer.read()) == {"interrupted": [mine]}
    states = {
        i["InstanceId"]: (i["State"]["Name"], i.get("StateReason", {}).get("Code"))
        for r in ec2.describe_instances(InstanceIds=[mine, other])["Reservations"]
        for i in r["Instances"]
    }
    assert states[mine] == ("terminated", "Server.SpotInstanceTermination")
    assert states[other][0] == "running"


def test_fault_grammar_validates_kind_and_state() -> None:
    from twin.emulator.faults import FaultError, StateFault, parse

    states = ["Prepare", "Check compaction", "Report"]
    assert parse("error@Report", states) == StateFault("error", "Report")
    assert parse("instance-lost", states) == "instance-lost"
    assert parse("none", states) is None
    with pytest.raises(FaultError, match="Task states are: Prepare, Check compaction, Report"):
        parse("error@Reprot", states)
    with pytest.raises(FaultError, match="KIND 'explode'"):
        parse("explode@Report", states)
    with pytest.raises(FaultError, match="KIND@STATE"):
        parse("meteor", states)
