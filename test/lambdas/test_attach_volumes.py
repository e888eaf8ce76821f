from __future__ import annotations

from typing import Any

import pytest
from compactor import aws, errors
from compactor.config import Config
from compactor.ec2.attach import client_token
from compactor.ec2.launch import gp3_performance
from compactor.handlers import attach_volumes
from conftest import EXECUTION, STACK, World, plan_and_launch
from support import amend, capture, client_error, error_response, on_params, respond


def attach(world: World, plan: dict[str, Any], instance: dict[str, Any]) -> dict[str, Any]:
    return attach_volumes.handler({"plan": plan, "instance": instance}, world.context)


def source_volumes(world: World) -> list[dict[str, Any]]:
    return world.ec2.describe_volumes(
        Filters=[{"Name": "tag:ebs-snapshot-compactor:role", "Values": ["source-volume"]}]
    )["Volumes"]  # type: ignore[no-any-return]


def two_volume_plan(world: World) -> tuple[dict[str, Any], dict[str, Any]]:
    """A plan of two snapshots (as an AMI job would have), launched with its two targets."""
    plan, _ = plan_and_launch(world, {"snapshotId": world.snapshot(size=10)})
    assert plan["volumes"][0]["sizeGiB"] == 10
    plan["volumes"].append(
        dict(plan["volumes"][0], index=1, sourceSnapshotId=world.snapshot(size=5), sizeGiB=5)
    )
    from compactor.handlers import launch

    instance = launch.handler({"plan": plan, "launchAttempt": 2}, world.context)
    return plan, instance


def test_creates_tags_and_attaches_then_done(world: World) -> None:
    plan, instance = two_volume_plan(world)
    creates = capture(aws.ec2(), "CreateVolume")
    attaches = capture(aws.ec2(), "AttachVolume")
    first = attach(world, plan, instance)
    assert first["done"] is False
    assert len(creates) == 2 and len(attaches) == 2
    for index, request in enumerate(creates):
        volume = plan["volumes"][index]
        assert request["SnapshotId"] == volume["sourceSnapshotId"]
        assert request["AvailabilityZone"] == instance["availabilityZone"]
        assert request["VolumeType"] == "gp3"
        assert request["VolumeInitializationRate"] == 200
        # launch's gp3 rule (500 IOPS per GiB at most, 3,000 at least) on the volume's size
        assert (request["Iops"], request["Throughput"]) == (
            gp3_performance(volume["sizeGiB"], Config.from_env())
        )
        assert len(request["ClientToken"]) <= 64
        assert "Encrypted" not in request  # encrypted like the snapshot
        assert request["TagSpecifications"][0]["ResourceType"] == "volume"
        assert {t["Key"]: t["Value"] for t in request["TagSpecifications"][0]["Tags"]} == {
            "ebs-snapshot-compactor:stack": STACK,
            "ebs-snapshot-compactor:execution": EXECUTION,
            "ebs-snapshot-compactor:role": "source-volume",
            "ebs-snapshot-compactor:volume-index": str(index),
            "ebs-snapshot-compactor:source-snapshot": volume["sourceSnapshotId"],
        }
    assert creates[0]["ClientToken"] != creates[1]["ClientToken"]
    assert [(a["InstanceId"], a["Device"]) for a in attaches] == [
        (instance["instanceId"], "/dev/sdf"),
        (instance["instanceId"], "/dev/sdg"),
    ]
    second = attach(world, plan, instance)
    assert second["done"] is True, second
    assert second["waitingFor"] == []
    by_device = {
        m["DeviceName"]: m["Ebs"]["VolumeId"]
        for m in world.ec2.describe_instances(InstanceIds=[instance["instanceId"]])["Reservations"][
            0
        ]["Instances"][0]["BlockDeviceMappings"]
    }
    assert second["volumes"] == [
        {
            "index": i,
            "sourceVolumeId": by_device[src],
            "targetVolumeId": by_device[tgt],
            "sourceDeviceName": src,
            "targetDeviceName": tgt,
        }
        for i, (src, tgt) in enumerate([("/dev/sdf", "/dev/sdp"), ("/dev/sdg", "/dev/sdq")])
    ]
    assert {v["VolumeId"] for v in source_volumes(world)} == {
        v["sourceVolumeId"] for v in second["volumes"]
    }


def test_idempotent_a_second_call_creates_and_attaches_nothing(world: World) -> None:
    plan, instance = two_volume_plan(world)
    attach(world, plan, instance)
    done = attach(world, plan, instance)
    creates = capture(aws.ec2(), "CreateVolume")
    attaches = capture(aws.ec2(), "AttachVolume")
    again = attach(world, plan, instance)
    assert again == done
    assert (creates, attaches) == ([], [])
    assert len(source_volumes(world)) == 2


def test_retried_create_uses_the_same_client_token(world: World) -> None:
    """Tag-filtered DescribeVolumes lags after CreateVolume: the retried CreateVolume carries the
    same ClientToken, so EC2 answers with the volume of the first call."""
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    creates = capture(aws.ec2(), "CreateVolume")
    attach(world, plan, instance)
    # the tag filter does not list the volume yet
    respond(
        aws.ec2(),
        "DescribeVolumes",
        lambda params: {"Volumes": []} if "Filters" in params else None,
    )
    attach(world, plan, instance)
    assert len(creates) == 2
    assert creates[0]["ClientToken"] == creates[1]["ClientToken"]


def test_a_relaunched_instance_gets_its_own_volume_attached(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    attach(world, plan, instance)
    world.ec2.terminate_instances(InstanceIds=[instance["instanceId"]])
    from compactor.handlers import launch

    relaunched = launch.handler({"plan": plan, "launchAttempt": 2}, world.context)
    assert relaunched["availabilityZone"] != instance["availabilityZone"]
    creates = capture(aws.ec2(), "CreateVolume")
    attach(world, plan, relaunched)
    result = attach(world, plan, relaunched)
    assert result["done"] is True
    # the old volume is in the other AZ: a new one, with a token of the new instance
    assert creates[0]["AvailabilityZone"] == relaunched["availabilityZone"]
    assert creates[0]["ClientToken"] == client_token(EXECUTION, relaunched["instanceId"], 0, 200)
    assert client_token(EXECUTION, relaunched["instanceId"], 0, 200) != client_token(
        EXECUTION, instance["instanceId"], 0, 200
    )
    (volume,) = world.ec2.describe_volumes(VolumeIds=[result["volumes"][0]["sourceVolumeId"]])[
        "Volumes"
    ]
    assert volume["Attachments"][0]["InstanceId"] == relaunched["instanceId"]


def set_volume_state(state: str, attachment: str | None = None) -> Any:
    def change(parsed: dict[str, Any]) -> None:
        for volume in parsed.get("Volumes", []):
            volume["State"] = state
            for found in volume.get("Attachments", []):
                if attachment:
                    found["State"] = attachment

    return change


def test_waits_while_the_volume_is_creating(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    amend(aws.ec2(), "DescribeVolumes", set_volume_state("creating"))
    attaches = capture(aws.ec2(), "AttachVolume")
    for _ in range(2):
        result = attach(world, plan, instance)
        assert result["done"] is False
        assert any("creating" in w for w in result["waitingFor"]), result
    assert attaches == []  # never AttachVolume before `available`
    assert len(source_volumes(world)) == 1


def test_waits_while_attaching(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    attach(world, plan, instance)
    aws.reset_clients()
    amend(aws.ec2(), "DescribeVolumes", set_volume_state("in-use", "attaching"))
    attaches = capture(aws.ec2(), "AttachVolume")
    result = attach(world, plan, instance)
    assert result["done"] is False
    assert any("attaching" in w for w in result["waitingFor"]), result
    assert attaches == []


def test_attach_refused_for_now_is_waiting(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})

    def refuse(_: dict[str, Any]) -> None:
        raise client_error("AttachVolume", "IncorrectState", "vol is creating")

    on_params(aws.ec2(), "AttachVolume", refuse)
    result = attach(world, plan, instance)
    assert result["done"] is False and result["waitingFor"]


def test_volume_in_error_fails_naming_the_snapshot(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    amend(aws.ec2(), "DescribeVolumes", set_volume_state("error"))
    with pytest.raises(errors.VolumeCreationFailed, match=plan["volumes"][0]["sourceSnapshotId"]):
        attach(world, plan, instance)


@pytest.mark.parametrize("action", ["terminate", "stop"])
def test_instance_lost(world: World, action: str) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    if action == "terminate":
        world.ec2.terminate_instances(InstanceIds=[instance["instanceId"]])
    else:
        world.ec2.stop_instances(InstanceIds=[instance["instanceId"]])
    creates = capture(aws.ec2(), "CreateVolume")
    with pytest.raises(errors.InstanceLost, match=instance["instanceId"]):
        attach(world, plan, instance)
    assert creates == []


@pytest.mark.parametrize("operation", ["DescribeInstances", "DescribeVolumes", "CreateVolume"])
def test_transient_error_is_not_done(world: World, operation: str) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    respond(aws.ec2(), operation, lambda _: error_response("RequestLimitExceeded", "slow down"))
    result = attach(world, plan, instance)
    assert result["done"] is False
    assert result["transientError"] == "RequestLimitExceeded: slow down"


def test_other_errors_are_raised(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    respond(aws.ec2(), "CreateVolume", lambda _: error_response("UnauthorizedOperation"))
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        attach(world, plan, instance)


def test_initialization_rate_without_capacity_falls_back_to_the_default_rate(world: World) -> None:
    plan, instance = two_volume_plan(world)
    calls: list[dict[str, Any]] = []

    def no_rate_capacity(params: dict[str, Any]) -> None:
        calls.append(params)
        if "VolumeInitializationRate" in params:
            raise client_error(
                "CreateVolume",
                "InsufficientCapacity",
                "There is not enough capacity for the requested volume initialization rate.",
            )

    on_params(aws.ec2(), "CreateVolume", no_rate_capacity)
    attach(world, plan, instance)
    # volume 0: with the rate (refused), then without; volume 1: without from the start
    assert ["VolumeInitializationRate" in c for c in calls] == [True, False, False]
    assert calls[0]["ClientToken"] != calls[1]["ClientToken"]
    assert len(source_volumes(world)) == 2


def test_capacity_error_not_about_the_rate_is_raised(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    respond(
        aws.ec2(),
        "CreateVolume",
        lambda _: error_response("InsufficientVolumeCapacity", "no gp3 capacity"),
    )
    with pytest.raises(Exception, match="InsufficientVolumeCapacity"):
        attach(world, plan, instance)


def test_rate_off_sends_no_rate(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLUME_INITIALIZATION_RATE", "0")
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    creates = capture(aws.ec2(), "CreateVolume")
    attach(world, plan, instance)
    assert "VolumeInitializationRate" not in creates[0]


def test_ignores_source_volumes_of_another_execution_or_instance(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    attach(world, plan, instance)
    other_plan = dict(plan, executionName="exec-2")
    creates = capture(aws.ec2(), "CreateVolume")
    attach(world, other_plan, instance)
    assert len(creates) == 1  # exec-1's volume is not exec-2's
