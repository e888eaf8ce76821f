"""target snapshot (issue #11): the input's target and its defaults, a launch without target
volumes, start_compaction's StartSnapshot per volume before SendCommand (compactor/
direct_snapshots.py), check_compaction's checks of the direct snapshots, teardown's
`leftToTimeOut` and the report's `target` / `targetSnapshotId`. moto serves StartSnapshot (it
ignores Encrypted, KmsKeyArn, ClientToken and Timeout), so those are checked on the request."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from compactor import aws, direct_snapshots, errors, sweeper, validation
from compactor.handlers import (
    check_compaction,
    create_snapshots,
    report,
    start_compaction,
    teardown,
)
from compactor.models import VolumePlan
from conftest import (
    EXECUTION,
    REGION,
    World,
    listed_blocks,
    ready_instance,
    serve_snapshot_blocks,
)
from support import (
    capture,
    error_response,
    instance_result,
    on_params,
    respond,
    summary_volume,
)
from test_sweep import config as sweep_config
from test_sweep import entry as sweep_entry
from test_sweep import later, machine  # noqa: F401 (the fixture)
from test_sweep import start as start_execution

SNAPSHOT = "snap-0123456789abcdef0"


def parse(**raw: Any) -> validation.ExecutionInput:
    return validation.parse_execution_input({"snapshotId": SNAPSHOT, **raw}, REGION, "compact")


# --- input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "target"),
    [
        ({}, "snapshot"),
        ({"method": "allocated"}, "snapshot"),
        ({"method": "trim"}, "volume"),
        ({"target": "volume"}, "volume"),
        ({"target": "volume", "method": "trim"}, "volume"),
        ({"target": "snapshot", "method": "allocated"}, "snapshot"),
    ],
)
def test_the_target_and_its_defaults(raw: dict[str, Any], target: str) -> None:
    assert parse(**raw).target == target


def test_snapshot_with_trim_is_refused_naming_both_and_what_to_do() -> None:
    with pytest.raises(errors.InvalidInput) as raised:
        parse(target="snapshot", method="trim")
    message = str(raised.value)
    assert 'target "snapshot"' in message and 'method "trim"' in message
    assert 'method "allocated"' in message and 'target "volume"' in message


def test_an_unknown_target_is_worded() -> None:
    with pytest.raises(errors.InvalidInput, match="target 'disk' is invalid: use one of snapshot"):
        parse(target="disk")


# --- launch and attach ------------------------------------------------------------------------


def snapshot_job(world: World, **execution_input: Any) -> tuple[Any, Any, Any]:
    return ready_instance(
        world, {"snapshotId": world.snapshot(), "target": "snapshot", **execution_input}
    )


def test_launch_maps_the_root_alone_and_attach_gives_no_target(world: World) -> None:
    launched = capture(aws.ec2(), "RunInstances")
    plan, _, attached = snapshot_job(world)
    assert plan["target"] == "snapshot"
    (request,) = launched
    assert [m["DeviceName"] for m in request["BlockDeviceMappings"]] == ["/dev/xvda"]
    (pair,) = attached["volumes"]
    assert (pair["targetVolumeId"], pair["targetDeviceName"]) == (None, None)


# --- start_compaction -----------------------------------------------------------------------


def start(
    world: World,
    plan: dict[str, Any],
    instance: dict[str, Any],
    attached: dict[str, Any],
    attempt: int = 1,
) -> dict[str, Any]:
    serve_snapshot_blocks({v["sourceSnapshotId"]: [0, 1, 5] for v in plan["volumes"]})
    listed = listed_blocks(world, plan)
    return start_compaction.handler(
        {
            "plan": plan,
            "instance": instance,
            "attached": attached,
            "sourceBlocks": listed,
            "launchAttempt": attempt,
        },
        world.context,
    )


def calls_in_order() -> list[str]:
    order: list[str] = []
    on_params(aws.ebs(), "StartSnapshot", lambda _: order.append("StartSnapshot"))
    on_params(aws.ssm(), "SendCommand", lambda _: order.append("SendCommand"))
    return order


@pytest.mark.parametrize(
    ("interval", "attempts", "minutes"),
    [
        (60, 10, 240),  # a short budget: the least timeout
        (60, 600, 600),  # the budget (10 h): a later volume may wait that long for its first put
        (61, 299, 304),  # 303.98 minutes, rounded up
        (300, 900, 4320),  # 75 h: StartSnapshot's largest Timeout
    ],
)
def test_timeout_covers_the_compaction_budget(interval: int, attempts: int, minutes: int) -> None:
    plan: Any = {"compactionPoll": {"intervalSeconds": interval, "maxAttempts": attempts}}
    assert direct_snapshots.timeout_minutes(plan) == minutes
    assert direct_snapshots.TIMEOUT_MAX_MINUTES == 4320


def test_starts_each_snapshot_before_the_command_and_names_them_in_it(world: World) -> None:
    source = world.snapshot(size=12, tags={"team": "db"}, description="nightly")
    plan, instance, attached = ready_instance(
        world, {"snapshotId": source, "target": "snapshot", "tags": {"env": "prod"}}
    )
    order = calls_in_order()
    started = capture(aws.ebs(), "StartSnapshot")
    sent = capture(aws.ssm(), "SendCommand")
    command = start(world, plan, instance, attached, attempt=3)
    assert order == ["StartSnapshot", "SendCommand"]
    (request,) = started
    assert request["VolumeSize"] == 12
    assert request["Description"] == "nightly"
    assert request["ClientToken"] == f"{EXECUTION}-a3-v0"
    assert request["Timeout"] == 240 == direct_snapshots.TIMEOUT_MINUTES
    assert "Encrypted" not in request and "KmsKeyArn" not in request  # an unencrypted source
    tags = {t["Key"]: t["Value"] for t in request["Tags"]}
    assert tags["team"] == "db" and tags["env"] == "prod"
    assert tags["ebs-snapshot-compactor:role"] == "snapshot"
    assert tags["ebs-snapshot-compactor:execution"] == EXECUTION
    assert tags["ebs-snapshot-compactor:source-snapshot"] == source
    # the instance role's EBS direct grant matches this against the caller's ec2:SourceInstanceArn
    assert tags["ebs-snapshot-compactor:writer-instance"] == (
        f"arn:aws:ec2:{REGION}:123456789012:instance/{instance['instanceId']}"
    )
    (item,) = command["directSnapshots"]
    assert item == {
        "index": 0,
        "snapshotId": item["snapshotId"],
        "sourceSnapshotId": source,
        "deviceName": None,
    }
    parameters = sent[0]["Parameters"]
    assert parameters["Target"] == ["snapshot"]
    assert parameters["TargetSnapshotIds"] == [item["snapshotId"]]
    assert (parameters["TargetVolumeIds"], parameters["TargetDeviceNames"]) == ([""], [""])
    assert parameters["SourceVolumeIds"] == [attached["volumes"][0]["sourceVolumeId"]]
    assert parameters["Mode"] == ["copy"]
    # the snapshot exists, tagged as CreateSnapshot's would be (moto keeps the tags)
    described = world.ec2.describe_snapshots(SnapshotIds=[item["snapshotId"]])["Snapshots"][0]
    assert {t["Key"]: t["Value"] for t in described["Tags"]} == tags


def test_two_volumes_in_index_order_with_their_tokens(world: World) -> None:
    first, second = world.snapshot(size=8), world.snapshot(size=16)
    plan, instance, attached = ready_instance(world, {"snapshotId": first, "target": "snapshot"})
    # an AMI's two volumes, as prepare plans them (the snapshot input has one)
    plan["volumes"].append(
        {**plan["volumes"][0], "index": 1, "sourceSnapshotId": second, "sizeGiB": 16}
    )
    attached["volumes"].append(
        {**attached["volumes"][0], "index": 1, "sourceDeviceName": "/dev/sdg"}
    )
    started = capture(aws.ebs(), "StartSnapshot")
    sent = capture(aws.ssm(), "SendCommand")
    command = start(world, plan, instance, attached)
    assert [r["ClientToken"] for r in started] == [f"{EXECUTION}-a1-v0", f"{EXECUTION}-a1-v1"]
    assert [r["VolumeSize"] for r in started] == [8, 16]
    ids = [i["snapshotId"] for i in command["directSnapshots"]]
    assert [i["sourceSnapshotId"] for i in command["directSnapshots"]] == [first, second]
    assert sent[0]["Parameters"]["TargetSnapshotIds"] == [",".join(ids)]


def test_the_tags_and_description_are_those_create_snapshot_gives(world: World) -> None:
    """One function makes both (snapshots.new_snapshot_fields): the same source, input and
    execution give the same tags through StartSnapshot and through CreateSnapshot."""
    source = world.snapshot(tags={"team": "db", "cost-center": "42"}, description="weekly")
    execution_input = {"snapshotId": source, "tags": {"env": "prod"}}
    plan, instance, attached = ready_instance(world, {**execution_input, "target": "snapshot"})
    started = capture(aws.ebs(), "StartSnapshot")
    start(world, plan, instance, attached)
    volume_plan, _, volume_attached = ready_instance(world, {**execution_input, "target": "volume"})
    created = capture(aws.ec2(), "CreateSnapshot")
    create_snapshots.handler({"plan": volume_plan, "attached": volume_attached}, world.context)
    (direct,), (made,) = started, created
    assert direct["Description"] == made["Description"] == "weekly"
    create_tags = {t["Key"]: t["Value"] for t in made["TagSpecifications"][0]["Tags"]}
    direct_tags = {t["Key"]: t["Value"] for t in direct["Tags"]}
    # and the writer's ARN, which only a direct snapshot needs (the instance role's grant)
    assert direct_tags.pop("ebs-snapshot-compactor:writer-instance").endswith(
        f":instance/{instance['instanceId']}"
    )
    assert direct_tags == create_tags


def test_an_encrypted_volume_gets_the_target_key_arn(world: World) -> None:
    """The input's kmsKeyId (prepare resolves it to this account's key ARN: targetKmsKeyId)."""
    plan, instance, attached = ready_instance(
        world,
        {"snapshotId": world.snapshot(), "target": "snapshot", "kmsKeyId": world.kms_key_arn},
    )
    started = capture(aws.ebs(), "StartSnapshot")
    start(world, plan, instance, attached)
    assert plan["volumes"][0]["targetKmsKeyId"] == world.kms_key_arn
    assert (started[0]["Encrypted"], started[0]["KmsKeyArn"]) == (True, world.kms_key_arn)


def volume_plan(**overrides: Any) -> VolumePlan:
    volume: dict[str, Any] = {
        "index": 0,
        "sourceSnapshotId": SNAPSHOT,
        "deviceName": None,
        "sizeGiB": 8,
        "encrypted": True,
        "kmsKeyId": None,
        "targetKmsKeyId": None,
        "sourceKmsKeyId": None,
        "sourceFullSizeBytes": None,
    }
    volume.update(overrides)
    return volume  # type: ignore[return-value]


def test_encryption_like_the_target_volume(world: World) -> None:
    assert direct_snapshots.encryption(volume_plan(encrypted=False)) == {}
    # encrypted without a key of this account: the account's default EBS key
    assert direct_snapshots.encryption(volume_plan()) == {"Encrypted": True}
    assert direct_snapshots.encryption(volume_plan(targetKmsKeyId=world.kms_key_arn)) == {
        "Encrypted": True,
        "KmsKeyArn": world.kms_key_arn,
    }
    # StartSnapshot takes a key ARN only: an alias or a bare id is resolved (DescribeKey)
    aws.kms().create_alias(AliasName="alias/compact", TargetKeyId=world.kms_key_arn)
    for key in ("alias/compact", world.kms_key_arn.split("/")[-1]):
        assert direct_snapshots.encryption(volume_plan(targetKmsKeyId=key)) == {
            "Encrypted": True,
            "KmsKeyArn": world.kms_key_arn,
        }
    # a plan of before targetKmsKeyId: its kmsKeyId
    old: dict[str, Any] = dict(volume_plan(kmsKeyId=world.kms_key_arn))
    del old["targetKmsKeyId"]
    assert direct_snapshots.encryption(old)["KmsKeyArn"] == world.kms_key_arn  # type: ignore[arg-type]


def test_the_client_token_is_deterministic_per_attempt_and_volume() -> None:
    token = direct_snapshots.client_token
    assert token("exec-1", 1, 0) == token("exec-1", 1, 0) == "exec-1-a1-v0"
    assert len({token("exec-1", 1, 0), token("exec-1", 2, 0), token("exec-1", 1, 1)}) == 3
    assert len(token("x" * 300, 1, 0)) == 255


def test_a_retried_call_sends_the_same_tokens(world: World) -> None:
    plan, instance, attached = snapshot_job(world)
    started = capture(aws.ebs(), "StartSnapshot")
    start(world, plan, instance, attached, attempt=2)
    start(world, plan, instance, attached, attempt=2)
    assert [r["ClientToken"] for r in started] == [f"{EXECUTION}-a2-v0"] * 2


@pytest.mark.parametrize(
    ("code", "reason", "error", "words"),
    [
        ("AccessDeniedException", None, errors.CompactionFailed, "ebs:StartSnapshot"),
        ("ValidationException", "INVALID_TAG", errors.CompactionFailed, "127 characters"),
        ("ServiceQuotaExceededException", None, errors.CompactionFailed, "quota"),
        ("ConflictException", None, errors.CompactionFailed, "client token"),
        ("ValidationException", "INVALID_CUSTOMER_KEY", errors.KmsKeyNotUsable, "kmsKeyArns"),
        ("AccessDeniedException", "DEPENDENCY_ACCESS_DENIED", errors.KmsKeyNotUsable, "kmsKeyId"),
        ("RequestThrottledException", None, errors.TransientAwsError, "RequestThrottledException"),
        ("ConcurrentLimitExceededException", None, errors.TransientAwsError, "ConcurrentLimit"),
        ("InternalServerException", None, errors.TransientAwsError, "InternalServer"),
    ],
)
def test_a_refused_start_snapshot_sends_no_command(
    world: World, code: str, reason: str | None, error: type[Exception], words: str
) -> None:
    plan, instance, attached = snapshot_job(world)

    def refuse(_: dict[str, Any]) -> dict[str, Any]:
        answer = error_response(code, "no")
        if reason:
            answer["Reason"] = reason
        if code == "InternalServerException":
            answer["ResponseMetadata"] = {"HTTPStatusCode": 500}
        return answer

    respond(aws.ebs(), "StartSnapshot", refuse)
    sent = capture(aws.ssm(), "SendCommand")
    with pytest.raises(error) as raised:
        start(world, plan, instance, attached)
    assert words in str(raised.value)
    if error is not errors.TransientAwsError:
        assert "volume 0" in str(raised.value) and code in str(raised.value)
    assert sent == []


def test_target_volume_and_a_dry_run_start_no_snapshot(world: World) -> None:
    started = capture(aws.ebs(), "StartSnapshot")
    sent = capture(aws.ssm(), "SendCommand")
    for execution_input in ({"target": "volume"}, {"target": "snapshot", "dryRun": True}):
        plan, instance, attached = ready_instance(
            world, {"snapshotId": world.snapshot(), **execution_input}
        )
        command = start(world, plan, instance, attached)
        assert command["directSnapshots"] == []
    assert started == []
    assert [s["Parameters"]["Target"] for s in sent] == [["volume"], ["volume"]]
    assert [s["Parameters"]["TargetSnapshotIds"] for s in sent] == [[""], [""]]
    dry = sent[1]["Parameters"]
    assert (dry["Mode"], dry["TargetVolumeIds"]) == (["inspect"], dry["SourceVolumeIds"])


# --- check_compaction ---------------------------------------------------------------------------


def running_instance(world: World) -> dict[str, Any]:
    instance_id = world.ec2.run_instances(MinCount=1, MaxCount=1, ImageId=world.base_image_id)[
        "Instances"
    ][0]["InstanceId"]
    return instance_result(instance_id, world.azs[0])


def direct_command(snapshot_ids: list[str]) -> dict[str, Any]:
    return {
        "commandId": "0b6f7a2e-1111-4c1e-9a3b-0123456789ab",
        "directSnapshots": [
            {"index": n, "snapshotId": s, "sourceSnapshotId": SNAPSHOT, "deviceName": None}
            for n, s in enumerate(snapshot_ids)
        ],
    }


def answer_invocation(status: str, summary: dict[str, Any] | None = None) -> None:
    respond(
        aws.ssm(),
        "GetCommandInvocation",
        lambda params: {
            "CommandId": params["CommandId"],
            "InstanceId": params["InstanceId"],
            "Status": status,
            "StatusDetails": status,
            "StandardOutputContent": json.dumps(summary) if summary else "",
            "StandardErrorContent": "",
        },
    )


def summary_naming(*snapshot_ids: str | None) -> dict[str, Any]:
    return {
        "volumes": [
            summary_volume(f"vol-{n}", targetVolumeId=None, targetSnapshotId=s)
            for n, s in enumerate(snapshot_ids)
        ]
    }


def check(world: World, instance: dict[str, Any], command: dict[str, Any]) -> dict[str, Any]:
    return check_compaction.handler({"instance": instance, "command": command}, world.context)


def test_a_summary_naming_the_direct_snapshots_is_done(world: World) -> None:
    instance = running_instance(world)
    answer_invocation("Success", summary_naming("snap-a", "snap-b"))
    result = check(world, instance, direct_command(["snap-a", "snap-b"]))
    assert result["done"] and result["summary"] == summary_naming("snap-a", "snap-b")


@pytest.mark.parametrize(
    "named",
    [("snap-b", "snap-a"), ("snap-a",), ("snap-a", None), ("snap-a", "snap-c"), (None, None)],
)
def test_a_summary_naming_other_snapshots_fails(
    world: World, named: tuple[str | None, ...]
) -> None:
    instance = running_instance(world)
    answer_invocation("Success", summary_naming(*named))
    with pytest.raises(errors.CompactionFailed, match=r"not the direct snapshots .*snap-a.*snap-b"):
        check(world, instance, direct_command(["snap-a", "snap-b"]))


def test_target_volume_summaries_are_not_compared(world: World) -> None:
    instance = running_instance(world)
    answer_invocation("Success", summary_naming(None))
    assert check(world, instance, direct_command([]))["done"]


def direct_snapshot(world: World) -> str:
    return str(aws.ebs().start_snapshot(VolumeSize=1, Timeout=240)["SnapshotId"])


def test_a_direct_snapshot_in_state_error_fails_the_running_copy(world: World) -> None:
    instance = running_instance(world)
    ids = [direct_snapshot(world), direct_snapshot(world)]
    answer_invocation("InProgress")
    assert check(world, instance, direct_command(ids))["done"] is False

    def cancelled(parsed: dict[str, Any]) -> None:
        for snapshot in parsed["Snapshots"]:
            if snapshot["SnapshotId"] == ids[1]:
                snapshot.update(State="error", StateMessage="timed out")

    from support import amend

    amend(aws.ec2(), "DescribeSnapshots", cancelled)
    with pytest.raises(errors.SnapshotFailed, match=f"{ids[1]} is in state error \\(timed out\\)"):
        check(world, instance, direct_command(ids))


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "InvalidSnapshot.NotFound"])
def test_a_throttled_or_unlisted_snapshot_read_is_not_done_yet(world: World, code: str) -> None:
    instance = running_instance(world)
    answer_invocation("InProgress")
    respond(aws.ec2(), "DescribeSnapshots", lambda _: error_response(code, "later"))
    result = check(world, instance, direct_command(["snap-0123456789abcdef1"]))
    assert result["done"] is False and code in result["transientError"]


# --- teardown ------------------------------------------------------------------------------------


def owned_direct_snapshot(world: World, delivered: bool = False) -> str:
    tags = [
        {"Key": "ebs-snapshot-compactor:stack", "Value": "compactor-test"},
        {"Key": "ebs-snapshot-compactor:execution", "Value": EXECUTION},
        {"Key": "ebs-snapshot-compactor:role", "Value": "snapshot"},
    ]
    if delivered:
        tags.append({"Key": "ebs-snapshot-compactor:delivered", "Value": "true"})
    return str(aws.ebs().start_snapshot(VolumeSize=1, Tags=tags)["SnapshotId"])


def in_state(snapshot_id: str, state: str) -> None:
    from support import amend

    amend(
        aws.ec2(),
        "DescribeSnapshots",
        lambda parsed: [
            s.update(State=state) for s in parsed["Snapshots"] if s["SnapshotId"] == snapshot_id
        ],
    )


def run_teardown(world: World, outcome: str) -> dict[str, Any]:
    return teardown.handler({"executionName": EXECUTION, "outcome": outcome}, world.context)


@pytest.mark.parametrize(
    "code", ["IncorrectState", "InvalidParameterValue", "UnauthorizedOperation"]
)
def test_a_pending_snapshot_ec2_will_not_delete_is_left_to_its_timeout(
    world: World, code: str
) -> None:
    pending = owned_direct_snapshot(world)
    in_state(pending, "pending")
    respond(aws.ec2(), "DeleteSnapshot", lambda _: error_response(code, "pending"))
    result = run_teardown(world, "failure")
    assert result["leftToTimeOut"] == [pending]
    assert (result["remaining"], result["deletedSnapshots"]) == (0, [])  # the loop can finish
    assert pending in world.inventory()["snapshots"]


def test_a_pending_snapshot_ec2_deletes_is_deleted(world: World) -> None:
    pending = owned_direct_snapshot(world)
    in_state(pending, "pending")
    result = run_teardown(world, "failure")
    assert (result["deletedSnapshots"], result["leftToTimeOut"]) == ([pending], [])
    assert pending not in world.inventory()["snapshots"]


def test_a_completed_snapshot_refused_for_a_moment_is_waited_for(world: World) -> None:
    snapshot_id = owned_direct_snapshot(world)
    respond(aws.ec2(), "DeleteSnapshot", lambda _: error_response("IncorrectState", "busy"))
    result = run_teardown(world, "failure")
    assert (result["remaining"], result["leftToTimeOut"]) == (1, [])
    assert snapshot_id in world.inventory()["snapshots"]


def test_a_throttled_delete_of_a_pending_snapshot_is_waited_for(world: World) -> None:
    pending = owned_direct_snapshot(world)
    in_state(pending, "pending")
    respond(aws.ec2(), "DeleteSnapshot", lambda _: error_response("RequestLimitExceeded", "later"))
    result = run_teardown(world, "cleanup")
    assert (result["remaining"], result["leftToTimeOut"]) == (1, [])


@pytest.mark.parametrize("outcome", ["success", "retry", "failure", "cleanup"])
def test_every_outcome_deletes_a_snapshot_in_state_error_but_never_a_delivered_one(
    world: World, outcome: str
) -> None:
    failed = owned_direct_snapshot(world)
    delivered = owned_direct_snapshot(world, delivered=True)
    in_state(failed, "error")
    result = run_teardown(world, outcome)
    assert result["deletedSnapshots"] == [failed]
    assert world.inventory()["snapshots"] >= {delivered}
    assert failed not in world.inventory()["snapshots"]


def test_success_leaves_a_completed_undelivered_snapshot_alone(world: World) -> None:
    snapshot_id = owned_direct_snapshot(world)
    assert run_teardown(world, "success")["deletedSnapshots"] == []
    assert snapshot_id in world.inventory()["snapshots"]


# --- report -------------------------------------------------------------------------------------


def test_the_report_names_the_target_the_direct_snapshots_and_what_was_left(world: World) -> None:
    state: dict[str, Any] = {
        "input": {"snapshotId": SNAPSHOT},
        "executionName": EXECUTION,
        "plan": {
            "executionName": EXECUTION,
            "target": "snapshot",
            "source": {"kind": "snapshot", "snapshotId": SNAPSHOT},
            "volumes": [{"index": 0, "sourceSnapshotId": SNAPSHOT, "sourceFullSizeBytes": None}],
        },
        "command": direct_command(["snap-0123456789abcdef1"]),
        "teardown": {"remaining": 0, "leftToTimeOut": ["snap-0123456789abcdef1"]},
        "error": {"Error": "CompactionFailed", "Cause": "the copy failed"},
        "outcome": "failure",
    }
    result = report.handler(state, world.context)
    assert result["target"] == "snapshot"
    # deleted or left pending: not a new snapshot, but named as the direct one
    assert result["volumes"][0]["targetSnapshotId"] == "snap-0123456789abcdef1"
    assert result["volumes"][0]["newSnapshotId"] is None
    (note,) = result["notes"]
    assert "snap-0123456789abcdef1" in note and "240 minutes" in note and "sweeper" in note


@pytest.mark.parametrize(
    ("execution_input", "target"),
    [
        ({"snapshotId": SNAPSHOT}, "snapshot"),
        ({"snapshotId": SNAPSHOT, "method": "trim"}, "volume"),
        ({"snapshotId": SNAPSHOT, "target": "volume"}, "volume"),
        ({"snapshotId": SNAPSHOT, "target": "disk"}, None),
    ],
)
def test_a_report_without_a_plan_takes_the_inputs_target(
    world: World, execution_input: dict[str, Any], target: str | None
) -> None:
    state = {
        "input": execution_input,
        "executionName": EXECUTION,
        "error": {"Error": "InvalidInput", "Cause": "bad"},
        "outcome": "failure",
    }
    assert report.handler(state, world.context)["target"] == target


def test_a_plan_without_a_target_reports_volume(world: World) -> None:
    state = {
        "input": {"snapshotId": SNAPSHOT},
        "executionName": EXECUTION,
        "plan": {"executionName": EXECUTION, "volumes": []},
        "outcome": "failure",
        "error": {"Error": "X", "Cause": "y"},
    }
    assert report.handler(state, world.context)["target"] == "volume"


# --- sweeper ------------------------------------------------------------------------------------


def succeeded(state_machine_arn: str) -> None:
    stopped = datetime.now(UTC)
    respond(
        aws.sfn(),
        "DescribeExecution",
        lambda params: {
            "executionArn": params["executionArn"],
            "status": "SUCCEEDED",
            "stopDate": stopped,
            "startDate": stopped,
            "stateMachineArn": state_machine_arn,
        },
    )


def test_the_sweep_deletes_a_succeeded_executions_snapshot_in_state_error(
    world: World,
    machine: str,  # noqa: F811 (test_sweep's fixture)
) -> None:
    """E.g. the direct snapshot of a lost launch attempt that EC2 would not delete while it was
    pending: it turned `error` after its timeout. Not an output, so not kept."""
    start_execution(machine, EXECUTION)
    succeeded(machine)
    failed = owned_direct_snapshot(world)
    completed = owned_direct_snapshot(world)  # undelivered but completed: kept-outputs as before
    in_state(failed, "error")
    result = sweep_entry(sweeper.sweep(sweep_config(), later()), EXECUTION)
    assert (result["action"], result["teardownOutcome"]) == ("sweep", "success")
    assert result["removed"] == [{"type": "snapshot", "id": failed}]
    assert failed not in world.inventory()["snapshots"]
    assert completed in world.inventory()["snapshots"]


def test_the_sweep_counts_a_pending_snapshot_left_to_its_timeout_as_remaining(
    world: World,
    machine: str,  # noqa: F811 (test_sweep's fixture)
) -> None:
    start_execution(machine, EXECUTION, abort=True)
    pending = owned_direct_snapshot(world)
    in_state(pending, "pending")
    respond(aws.ec2(), "DeleteSnapshot", lambda _: error_response("IncorrectState", "pending"))
    result = sweeper.sweep(sweep_config(), later())
    swept = sweep_entry(result, EXECUTION)
    assert (swept["action"], swept["removed"], swept["remaining"]) == ("sweep", [], 1)
    assert result["remaining"] == 1
    assert pending in world.inventory()["snapshots"]
