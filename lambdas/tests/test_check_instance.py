from __future__ import annotations

from typing import Any

import pytest
from compactor import aws, errors
from compactor.handlers import check_instance

from tests.conftest import EXECUTION, STACK, World, plan_and_launch, ssm_ping
from tests.support import amend, respond


def check(world: World, plan: dict[str, Any], instance: dict[str, Any]) -> dict[str, Any]:
    return check_instance.handler({"plan": plan, "instance": instance}, world.context)


def test_running_and_online_is_ready_with_its_volume_pairs(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    calls = ssm_ping("Online")
    result = check(world, plan, instance)
    attached = {
        m["DeviceName"]: m["Ebs"]["VolumeId"]
        for m in world.ec2.describe_instances(InstanceIds=[instance["instanceId"]])["Reservations"][
            0
        ]["Instances"][0]["BlockDeviceMappings"]
    }
    assert result == {
        "ready": True,
        "state": "running",
        "pingStatus": "Online",
        "volumes": [
            {
                "index": 0,
                "sourceVolumeId": attached["/dev/sdf"],
                "targetVolumeId": attached["/dev/sdp"],
                "sourceDeviceName": "/dev/sdf",
                "targetDeviceName": "/dev/sdp",
            }
        ],
    }
    assert calls[0]["Filters"] == [{"Key": "InstanceIds", "Values": [instance["instanceId"]]}]


def test_ping_status_found_on_a_later_page(world: World) -> None:
    """SSM filters page by page: an empty first page with a NextToken is not "not managed"."""
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    calls = respond(
        aws.ssm(),
        "DescribeInstanceInformation",
        lambda params: (
            {
                "InstanceInformationList": [
                    {"InstanceId": instance["instanceId"], "PingStatus": "Online"}
                ]
            }
            if params.get("NextToken") == "page-2"
            else {"InstanceInformationList": [], "NextToken": "page-2"}
        ),
    )
    result = check(world, plan, instance)
    assert (result["ready"], result["pingStatus"]) == (True, "Online")
    assert len(calls) == 2


def test_volumes_are_tagged_as_the_transfer_instance_s(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    ssm_ping("Online")
    volumes = check(world, plan, instance)["volumes"][0]
    described = world.ec2.describe_volumes(
        VolumeIds=[volumes["sourceVolumeId"], volumes["targetVolumeId"]]
    )["Volumes"]
    for volume in described:
        assert {t["Key"]: t["Value"] for t in volume["Tags"]} == {
            "ebs-snapshot-compactor:stack": STACK,
            "ebs-snapshot-compactor:execution": EXECUTION,
            "ebs-snapshot-compactor:role": "transfer-instance",
        }


def test_not_ready_until_ssm_manages_the_instance(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    ssm_ping(None)
    result = check(world, plan, instance)
    assert (result["ready"], result["state"], result["pingStatus"]) == (False, "running", None)
    aws.reset_clients()
    ssm_ping("ConnectionLost")
    assert check(world, plan, instance)["ready"] is False


def test_pending_instance_is_not_ready(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})

    def pending(parsed: dict[str, Any]) -> None:
        for reservation in parsed["Reservations"]:
            for found in reservation["Instances"]:
                found["State"] = {"Code": 0, "Name": "pending"}

    amend(aws.ec2(), "DescribeInstances", pending)
    result = check(world, plan, instance)
    assert (result["ready"], result["state"]) == (False, "pending")


def test_instance_not_listed_yet_is_pending(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    unknown = dict(instance, instanceId="i-0123456789abcdef0")
    assert check(world, plan, unknown) == {
        "ready": False,
        "state": "pending",
        "pingStatus": None,
        "volumes": [],
    }


@pytest.mark.parametrize("action", ["terminate", "stop"])
def test_lost_instance(world: World, action: str) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    if action == "terminate":
        world.ec2.terminate_instances(InstanceIds=[instance["instanceId"]])
    else:
        world.ec2.stop_instances(InstanceIds=[instance["instanceId"]])
    with pytest.raises(
        errors.InstanceLost,
        match=f"{instance['instanceId']} is (terminated|stopped|stopping|shutting-down)",
    ):
        check(world, plan, instance)
