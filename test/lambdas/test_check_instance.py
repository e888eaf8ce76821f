from __future__ import annotations

from typing import Any

import pytest
from compactor import aws, errors
from compactor.handlers import check_instance
from conftest import EXECUTION, STACK, World, plan_and_launch, ssm_ping
from support import amend, error_response, respond


def check(world: World, plan: dict[str, Any], instance: dict[str, Any]) -> dict[str, Any]:
    return check_instance.handler({"plan": plan, "instance": instance}, world.context)


def test_running_and_online_is_ready(world: World) -> None:
    """No volume check any more: the sources are attached afterwards by attach_volumes."""
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    calls = ssm_ping("Online")
    result = check(world, plan, instance)
    assert result == {"ready": True, "state": "running", "pingStatus": "Online"}
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


def test_launch_volumes_are_tagged_as_the_transfer_instance_s(world: World) -> None:
    _, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    described = world.ec2.describe_volumes(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance["instanceId"]]}]
    )["Volumes"]
    assert len(described) == 2  # root and target: no source volume at launch
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
    assert check(world, plan, unknown) == {"ready": False, "state": "pending", "pingStatus": None}


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


def terminated_with(code: str, message: str) -> Any:
    def change(parsed: dict[str, Any]) -> None:
        for reservation in parsed["Reservations"]:
            for found in reservation["Instances"]:
                found["State"] = {"Code": 48, "Name": "terminated"}
                found["StateReason"] = {"Code": code, "Message": message}

    return change


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("Client.InternalError", "Client.InternalError: Client error on launch"),
        (
            "Client.InvalidKMSKey.InvalidState",
            "Client.InvalidKMSKey.InvalidState: The KMS key provided is in an incorrect state",
        ),
        ("Client.VolumeLimitExceeded", "Client.VolumeLimitExceeded: Volume limit exceeded"),
    ],
)
def test_client_state_reason_at_launch_fails_at_once(world: World, code: str, message: str) -> None:
    """Not a Spot loss: relaunching would fail the same way, so no InstanceLost."""
    plan, instance = plan_and_launch(
        world, {"snapshotId": world.snapshot(), "kmsKeyId": world.kms_key_arn}
    )
    amend(aws.ec2(), "DescribeInstances", terminated_with(code, message))
    with pytest.raises(errors.InstanceLaunchFailed) as caught:
        check(world, plan, instance)
    assert not isinstance(caught.value, errors.InstanceLost)
    text = str(caught.value)
    assert code in text and instance["instanceId"] in text
    assert world.kms_key_arn in text
    assert "default EBS key" in text
    if code == "Client.VolumeLimitExceeded":
        assert "quota" in text
    else:
        assert "enabled" in text and "CreateGrant" in text


def test_plan_target_key_is_named(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    plan["volumes"][0]["targetKmsKeyId"] = "arn:aws:kms:us-east-1:123456789012:key/target"
    amend(aws.ec2(), "DescribeInstances", terminated_with("Client.InternalError", "x"))
    with pytest.raises(errors.InstanceLaunchFailed, match="key/target"):
        check(world, plan, instance)


@pytest.mark.parametrize(
    "code",
    ["Server.SpotInstanceTermination", "Server.InternalError", "Client.UserInitiatedShutdown"],
)
def test_spot_loss_or_shutdown_is_instance_lost(world: World, code: str) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    amend(aws.ec2(), "DescribeInstances", terminated_with(code, f"{code}: gone"))
    with pytest.raises(errors.InstanceLost, match=f"{code}: gone"):
        check(world, plan, instance)


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "InternalError", "ServiceUnavailable"])
def test_transient_error_is_not_ready(world: World, code: str) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    respond(aws.ec2(), "DescribeInstances", lambda _: error_response(code, "slow down"))
    result = check(world, plan, instance)
    assert (result["ready"], result["pingStatus"]) == (False, None)
    assert result["transientError"] == f"{code}: slow down"


def test_transient_ssm_error_is_not_ready(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    respond(
        aws.ssm(), "DescribeInstanceInformation", lambda _: error_response("ThrottlingException")
    )
    result = check(world, plan, instance)
    assert result["ready"] is False
    assert result["transientError"].startswith("ThrottlingException")


def test_other_errors_are_raised(world: World) -> None:
    plan, instance = plan_and_launch(world, {"snapshotId": world.snapshot()})
    respond(aws.ec2(), "DescribeInstances", lambda _: error_response("UnauthorizedOperation"))
    with pytest.raises(Exception, match="UnauthorizedOperation"):
        check(world, plan, instance)
