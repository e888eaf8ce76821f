from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError
from compactor import aws, errors
from compactor.handlers import check_compaction, start_compaction
from conftest import (
    DOCUMENT,
    EXECUTION,
    PROGRAM_BUCKET,
    PROGRAM_KEY,
    World,
    listed_blocks,
    ready_instance,
    serve_snapshot_blocks,
)
from support import capture, error_response, instance_result, respond, summary_volume


def start(
    world: World, plan: dict[str, Any], instance: dict[str, Any], attached: dict[str, Any]
) -> dict[str, Any]:
    serve_snapshot_blocks({v["sourceSnapshotId"]: [0, 1, 5] for v in plan["volumes"]})
    listed = listed_blocks(world, plan)
    return start_compaction.handler(
        {"plan": plan, "instance": instance, "attached": attached, "sourceBlocks": listed},
        world.context,
    )


def check(world: World, instance: dict[str, Any], command: dict[str, Any]) -> dict[str, Any]:
    return check_compaction.handler({"instance": instance, "command": command}, world.context)


def invocation(status: str, stdout: str = "", stderr: str = "", details: str | None = None) -> None:
    respond(
        aws.ssm(),
        "GetCommandInvocation",
        lambda params: {
            "CommandId": params["CommandId"],
            "InstanceId": params["InstanceId"],
            "Status": status,
            "StatusDetails": details or status,
            "StandardOutputContent": stdout,
            "StandardErrorContent": stderr,
        },
    )


def test_sends_the_document_with_the_contract_parameters(world: World) -> None:
    plan, instance, ready = ready_instance(
        world, {"snapshotId": world.snapshot(), "jobs": 32, "verify": False, "method": "trim"}
    )
    calls = capture(aws.ssm(), "SendCommand")
    command = start(world, plan, instance, ready)
    (request,) = calls
    volume = ready["volumes"][0]
    assert request["InstanceIds"] == [instance["instanceId"]]
    assert request["DocumentName"] == DOCUMENT
    url = request["Parameters"].pop("SourceBlocksUrl")[0]
    assert f"/{EXECUTION}/source-blocks.tar.gz?" in url and "X-Amz-Signature=" in url
    # the program: a presigned GET of the stack's file asset (the document pins its SHA-256)
    program = request["Parameters"].pop("ProgramUrl")[0]
    assert f"{PROGRAM_BUCKET}" in program and f"/{PROGRAM_KEY}?" in program
    assert "X-Amz-Signature=" in program and "X-Amz-Expires=3600" in program
    assert request["Parameters"] == {
        "SourceVolumeIds": [volume["sourceVolumeId"]],
        "TargetVolumeIds": [volume["targetVolumeId"]],
        "SourceDeviceNames": ["/dev/sdf"],
        "TargetDeviceNames": ["/dev/sdp"],
        "Method": ["trim"],
        "Jobs": ["32"],
        "Verify": ["false"],
        "Mode": ["copy"],
        "Target": ["volume"],
        "TargetSnapshotIds": [""],
    }
    assert request["CloudWatchOutputConfig"] == {
        "CloudWatchOutputEnabled": True,
        "CloudWatchLogGroupName": "/compactor-test/commands",
    }
    assert EXECUTION in request["Comment"]
    assert command == {"commandId": command["commandId"], "directSnapshots": []}
    assert (
        aws.ssm().list_commands(CommandId=command["commandId"])["Commands"][0]["DocumentName"]
        == DOCUMENT
    )


def test_multi_volume_parameters_are_comma_lists_in_pair_order(world: World) -> None:
    plan, instance, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    second = {
        "index": 1,
        "sourceVolumeId": "vol-0000000000000000b",
        "targetVolumeId": "vol-0000000000000000d",
        "sourceDeviceName": "/dev/sdg",
        "targetDeviceName": "/dev/sdq",
    }
    plan["volumes"].append(dict(plan["volumes"][0], index=1))
    ready["volumes"].insert(0, second)
    calls = capture(aws.ssm(), "SendCommand")
    start(world, plan, instance, ready)
    params = calls[0]["Parameters"]
    first = ready["volumes"][1]
    assert params["SourceVolumeIds"] == [f"{first['sourceVolumeId']},vol-0000000000000000b"]
    assert params["TargetDeviceNames"] == ["/dev/sdp,/dev/sdq"]


def test_refuses_volumes_that_are_not_all_attached(world: World) -> None:
    plan, instance, attached = ready_instance(world, {"snapshotId": world.snapshot()})
    calls = capture(aws.ssm(), "SendCommand")
    with pytest.raises(errors.InstanceNotReady, match="not all attached"):
        start(world, plan, instance, dict(attached, done=False))
    with pytest.raises(errors.InstanceNotReady):
        start(world, plan, instance, dict(attached, volumes=[]))
    assert calls == []


def test_reads_the_attached_volumes_not_a_ready_result(world: World) -> None:
    """start_compaction takes $.attached (attach_volumes' result); $.ready has no volumes."""
    plan, instance, attached = ready_instance(world, {"snapshotId": world.snapshot()})
    ready = {"ready": True, "state": "running", "pingStatus": "Online"}
    with pytest.raises(errors.InvalidInput, match="payload has no 'attached'"):
        start_compaction.handler(
            {"plan": plan, "instance": instance, "ready": ready}, world.context
        )
    assert start(world, plan, instance, attached)["commandId"]


def test_invocation_not_there_yet_is_not_done(world: World) -> None:
    plan, instance, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    command = start(world, plan, instance, ready)
    respond(aws.ssm(), "GetCommandInvocation", lambda _: error_response("InvocationDoesNotExist"))
    assert check(world, instance, command) == {
        "done": False,
        "status": "Pending",
        "summary": None,
        "progress": None,
    }


def running_instance(world: World) -> dict[str, Any]:
    """A running instance and the fields of launch's result check_compaction reads."""
    instance_id = world.ec2.run_instances(MinCount=1, MaxCount=1, ImageId=world.base_image_id)[
        "Instances"
    ][0]["InstanceId"]
    return instance_result(instance_id, world.azs[0])


COMMAND = {"commandId": "0b6f7a2e-1111-4c1e-9a3b-0123456789ab", "directSnapshots": []}


@pytest.mark.parametrize("status", ["Pending", "InProgress", "Delayed", "Cancelling"])
def test_running_command_is_not_done(world: World, status: str) -> None:
    instance = running_instance(world)
    invocation(status, stdout="")
    assert check(world, instance, COMMAND) == {
        "done": False,
        "status": status,
        "summary": None,
        "progress": None,
    }


def test_invocation_not_created_yet_is_not_done(world: World) -> None:
    instance = running_instance(world)
    respond(aws.ssm(), "GetCommandInvocation", lambda _: error_response("InvocationDoesNotExist"))
    assert check(world, instance, COMMAND) == {
        "done": False,
        "status": "Pending",
        "summary": None,
        "progress": None,
    }


@pytest.mark.parametrize(
    ("client", "operation", "code"),
    [
        ("ssm", "GetCommandInvocation", "ThrottlingException"),
        ("ssm", "GetCommandInvocation", "InternalServerError"),
        ("ec2", "DescribeInstances", "RequestLimitExceeded"),
        ("ec2", "DescribeInstances", "Unavailable"),
    ],
)
def test_throttled_or_5xx_poll_is_not_done_yet(
    world: World, client: str, operation: str, code: str
) -> None:
    instance = running_instance(world)
    respond(getattr(aws, client)(), operation, lambda _: error_response(code, "slow down"))
    invocation("Success", stdout='{"volumes": []}\n')  # answers only when not throttled
    result = check(world, instance, COMMAND)
    assert (result["done"], result["summary"]) == (False, None)
    assert result["transientError"].startswith(f"{operation}: {code}")


def test_other_errors_still_raise(world: World) -> None:
    instance = running_instance(world)
    respond(aws.ssm(), "GetCommandInvocation", lambda _: error_response("AccessDeniedException"))
    with pytest.raises(ClientError, match="AccessDeniedException"):
        check(world, instance, COMMAND)


def test_success_gives_the_summary_line(world: World) -> None:
    plan, instance, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    command = start(world, plan, instance, ready)
    pair = ready["volumes"][0]
    summary = {
        "volumes": [summary_volume(pair["sourceVolumeId"], targetVolumeId=pair["targetVolumeId"])]
    }
    invocation("Success", stdout=json.dumps(summary) + "\n")
    assert check(world, instance, command) == {
        "done": True,
        "status": "Success",
        "summary": summary,
        "progress": None,
    }


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"source_bytes_read": "1048576"}, "source_bytes_read must be integer or null"),
        ({"partitions": []}, "must not contain {'partitions'} properties"),
        ({"methods": {"copied": 1}}, "methods must be named by propertyName definition"),
    ],
)
def test_a_summary_line_of_another_shape_is_a_failure_naming_the_key(
    world: World, change: dict[str, Any], named: str
) -> None:
    """The report reads the line's counts: a line the contract does not describe is not trusted."""
    plan, instance, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    command = start(world, plan, instance, ready)
    entry = summary_volume(ready["volumes"][0]["sourceVolumeId"]) | change
    invocation("Success", stdout=json.dumps({"volumes": [entry]}) + "\n")
    with pytest.raises(errors.CompactionFailed) as caught:
        check(world, instance, command)
    assert "does not follow contract/schemas/summary.schema.json" in str(caught.value)
    assert named in str(caught.value), str(caught.value)


def test_success_without_a_summary_is_a_failure(world: World) -> None:
    plan, instance, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    command = start(world, plan, instance, ready)
    invocation("Success", stdout="copied\n")
    with pytest.raises(errors.CompactionFailed, match=r"no .*summary"):
        check(world, instance, command)


@pytest.mark.parametrize("status", ["Failed", "TimedOut", "Cancelled"])
def test_failure_reports_the_program_error_line(world: World, status: str) -> None:
    plan, instance, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    command = start(world, plan, instance, ready)
    line = {
        "error": "unsupported: LVM physical volume on partition 2, use --method trim",
        "sourceVolumeId": "vol-1",
    }
    invocation(status, stdout=json.dumps(line) + "\n", stderr="progress 50%\n")
    with pytest.raises(errors.CompactionFailed) as caught:
        check(world, instance, command)
    assert str(caught.value) == line["error"]


def test_failure_without_an_error_line_names_the_status(world: World) -> None:
    plan, instance, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    command = start(world, plan, instance, ready)
    invocation("TimedOut", stderr="copying 12%\n", details="ExecutionTimedOut")
    with pytest.raises(errors.CompactionFailed, match=r"ended ExecutionTimedOut.*copying 12%"):
        check(world, instance, command)


def test_instance_gone_during_the_command(world: World) -> None:
    plan, instance, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    command = start(world, plan, instance, ready)
    world.ec2.terminate_instances(InstanceIds=[instance["instanceId"]])
    invocation("InProgress")
    with pytest.raises(errors.InstanceLost):
        check(world, instance, command)
