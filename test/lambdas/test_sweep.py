"""The sweeper (compactor/sweeper.py, handlers/sweep.py) against moto: what an ended execution
left is torn down after the grace period, never a running execution's resources, never a
delivered output, every Describe* read to its last page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from compactor import aws, contract, sweeper, tags
from compactor.errors import ConfigError
from compactor.handlers import sweep as sweep_handler
from conftest import STACK, World
from support import capture, error_response, respond
from test_contract import _Recording
from test_metrics import emf_points, named

HOUR = timedelta(hours=1)
GRACE_MINUTES = 30


@pytest.fixture
def machine(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    arn = aws.sfn().create_state_machine(
        name=f"{STACK}-main",
        definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
        roleArn="arn:aws:iam::123456789012:role/compactor-test-workflow",
    )["stateMachineArn"]
    monkeypatch.setenv("STATE_MACHINE_ARN", arn)
    monkeypatch.setenv("SWEEP_GRACE_MINUTES", str(GRACE_MINUTES))
    yield arn


def config() -> sweeper.SweepConfig:
    return sweeper.SweepConfig.from_env()


def start(machine: str, name: str, abort: bool = False) -> None:
    arn = aws.sfn().start_execution(stateMachineArn=machine, name=name)["executionArn"]
    if abort:
        aws.sfn().stop_execution(executionArn=arn)


def leave(
    world: World,
    execution: str,
    *,
    snapshot: bool = False,
    delivered: bool = False,
    image: bool = False,
    stack: str = STACK,
) -> dict[str, str]:
    """What an execution of `stack` leaves: an instance and a volume, optionally a new snapshot
    (delivered or not) and an AMI on it. Returns the ids by type."""
    owned = tags.ownership(stack, execution, "x")
    if not execution:
        owned.pop(tags.EXECUTION)
    ec2 = world.ec2
    spec = [tags.specification("instance", owned)]
    ids = {
        "instance": ec2.run_instances(
            ImageId=world.base_image_id, MinCount=1, MaxCount=1, TagSpecifications=spec
        )["Instances"][0]["InstanceId"],
        "volume": ec2.create_volume(
            Size=8,
            AvailabilityZone=world.azs[0],
            TagSpecifications=[tags.specification("volume", owned)],
        )["VolumeId"],
    }
    if snapshot or delivered or image:
        snapshot_tags = {**owned, **({tags.DELIVERED: tags.DELIVERED_VALUE} if delivered else {})}
        ids["snapshot"] = ec2.create_snapshot(
            VolumeId=ids["volume"],
            TagSpecifications=[tags.specification("snapshot", snapshot_tags)],
        )["SnapshotId"]
    if image:
        ids["image"] = ec2.register_image(
            Name=f"compacted-{execution}-{len(world.inventory()['images'])}",
            RootDeviceName="/dev/xvda",
            BlockDeviceMappings=[
                {"DeviceName": "/dev/xvda", "Ebs": {"SnapshotId": ids["snapshot"]}}
            ],
        )["ImageId"]
        ec2.create_tags(Resources=[ids["image"]], Tags=tags.to_aws(owned))
    return ids


def alive(world: World, ids: dict[str, str]) -> dict[str, bool]:
    inventory = world.inventory()
    plural = {
        "instance": "instances",
        "volume": "volumes",
        "snapshot": "snapshots",
        "image": "images",
    }
    return {kind: rid in inventory[plural[kind]] for kind, rid in ids.items()}


def later(hours: float = 1) -> datetime:
    return datetime.now(UTC) + timedelta(hours=hours)


def entry(result: sweeper.SweepResult, name: str) -> sweeper.SweepExecution:
    (found,) = [e for e in result["executions"] if e["executionName"] == name]
    return found


def test_an_aborted_executions_leftovers_are_swept_after_the_grace(
    world: World, machine: str
) -> None:
    start(machine, "exec-aborted", abort=True)
    ids = leave(world, "exec-aborted", image=True)
    result = sweeper.sweep(config(), later())
    assert alive(world, ids) == dict.fromkeys(ids, False)
    swept = entry(result, "exec-aborted")
    assert (swept["status"], swept["action"], swept["teardownOutcome"]) == (
        "ABORTED",
        "sweep",
        "cleanup",
    )
    assert sorted((r["type"], r["id"]) for r in swept["removed"]) == sorted(
        (kind, rid) for kind, rid in ids.items()
    )
    # the instance is still shutting down: teardown counts it remaining, the next run is clean
    assert (result["removed"], result["remaining"], swept["remaining"]) == (4, 1, 1)
    assert sweeper.sweep(config(), later())["executions"] == []


def test_a_running_executions_resources_are_kept(world: World, machine: str) -> None:
    start(machine, "exec-running")
    ids = leave(world, "exec-running", snapshot=True)
    result = sweeper.sweep(config(), later(24))
    assert alive(world, ids) == dict.fromkeys(ids, True)
    kept = entry(result, "exec-running")
    assert (kept["status"], kept["action"], kept["removed"]) == ("RUNNING", "kept-running", [])
    assert kept["found"]["snapshot"] == [ids["snapshot"]]


def test_a_recently_ended_execution_is_kept_within_the_grace(world: World, machine: str) -> None:
    start(machine, "exec-just-aborted", abort=True)
    ids = leave(world, "exec-just-aborted")
    within = sweeper.sweep(config(), later(GRACE_MINUTES / 60 - 0.1))
    assert entry(within, "exec-just-aborted")["action"] == "kept-grace"
    assert alive(world, ids) == dict.fromkeys(ids, True)
    past = sweeper.sweep(config(), later(GRACE_MINUTES / 60 + 0.1))
    assert entry(past, "exec-just-aborted")["action"] == "sweep"
    assert alive(world, ids) == dict.fromkeys(ids, False)


def test_a_delivered_snapshot_and_its_ami_are_never_deleted(world: World, machine: str) -> None:
    start(machine, "exec-delivered", abort=True)
    ids = leave(world, "exec-delivered", delivered=True, image=True)
    result = sweeper.sweep(config(), later(48))
    assert alive(world, ids) == {
        "instance": False,
        "volume": False,
        "snapshot": True,
        "image": True,
    }
    swept = entry(result, "exec-delivered")
    assert set(swept["found"]) == {"instance", "volume"}  # outputs are not leftovers
    assert {r["type"] for r in swept["removed"]} == {"instance", "volume"}


def test_an_ami_tagged_delivered_is_not_a_leftover(world: World, machine: str) -> None:
    """register_image registers the AMI tagged delivered: the sweeper leaves it out (and the
    roles may not deregister it), even when no snapshot of its execution carries the tag."""
    start(machine, "exec-ami-delivered", abort=True)
    ids = leave(world, "exec-ami-delivered", image=True)
    world.ec2.create_tags(
        Resources=[ids["image"]], Tags=tags.to_aws({tags.DELIVERED: tags.DELIVERED_VALUE})
    )
    swept = entry(sweeper.sweep(config(), later(48)), "exec-ami-delivered")
    assert "image" not in swept["found"]
    assert alive(world, ids)["image"] is True


def test_a_succeeded_execution_loses_only_its_instance_and_volumes(
    world: World, machine: str
) -> None:
    """A SUCCEEDED execution is swept with teardown's `success`: even an undelivered snapshot
    of it stays (kept-outputs once nothing else is left)."""
    start(machine, "exec-done")
    ids = leave(world, "exec-done", snapshot=True)
    stopped = datetime.now(UTC)
    respond(
        aws.sfn(),
        "DescribeExecution",
        lambda params: {"executionArn": params["executionArn"], "status": "SUCCEEDED",
                        "stopDate": stopped, "startDate": stopped,
                        "stateMachineArn": machine},
    )  # fmt: skip
    first = entry(sweeper.sweep(config(), later()), "exec-done")
    assert (first["action"], first["teardownOutcome"]) == ("sweep", "success")
    assert alive(world, ids) == {"instance": False, "volume": False, "snapshot": True}
    second = entry(sweeper.sweep(config(), later()), "exec-done")
    assert (second["action"], second["removed"]) == ("kept-outputs", [])


def test_an_unknown_execution_is_swept_only_once_its_resources_are_old(
    world: World, machine: str
) -> None:
    """DescribeExecution is eventually consistent: a just-started execution may answer
    ExecutionDoesNotExist, so its resources' age stands in for the end."""
    ids = leave(world, "exec-never-seen", snapshot=True)
    young = sweeper.sweep(config(), datetime.now(UTC) + timedelta(minutes=5))
    assert entry(young, "exec-never-seen")["status"] == "NOT_FOUND"
    assert entry(young, "exec-never-seen")["action"] == "kept-grace"
    assert alive(world, ids) == dict.fromkeys(ids, True)
    old = sweeper.sweep(config(), later(2))
    assert entry(old, "exec-never-seen")["teardownOutcome"] == "cleanup"
    assert alive(world, ids) == dict.fromkeys(ids, False)


@pytest.mark.parametrize("name", ["release-1.2.3", "build.7", "nightly@2026-11-26", "café-β"])
def test_a_running_execution_with_any_allowed_name_is_kept(
    world: World, machine: str, name: str
) -> None:
    """StartExecution allows any name without white space, brackets, wildcards, the specials
    " # % \\ ^ | ~ ` $ & , ; : / and control characters (botocore's stepfunctions model): such
    an execution is asked about like any other, never taken for one that does not exist."""
    start(machine, name)
    ids = leave(world, name, snapshot=True)
    kept = entry(sweeper.sweep(config(), later(24)), name)
    assert (kept["status"], kept["action"], kept["removed"]) == ("RUNNING", "kept-running", [])
    assert alive(world, ids) == dict.fromkeys(ids, True)


@pytest.mark.parametrize("code", ["InvalidArn", "ThrottlingException"])
def test_an_execution_step_functions_cannot_answer_for_is_kept(
    world: World, machine: str, code: str
) -> None:
    """Only DescribeExecution's answer proves an execution ended: an ARN it refuses (a tag value
    no execution could have) or a throttled call keeps the resources, named in the result."""
    ids = leave(world, "exec-unanswered", snapshot=True)
    calls = respond(aws.sfn(), "DescribeExecution", lambda _: error_response(code))
    result = sweeper.sweep(config(), later(48))
    kept = entry(result, "exec-unanswered")
    assert (kept["status"], kept["action"], kept["removed"]) == ("UNKNOWN", "kept-unknown", [])
    assert alive(world, ids) == dict.fromkeys(ids, True)
    assert [c["executionArn"].rsplit(":", 1)[1] for c in calls] == ["exec-unanswered"]


def test_other_stacks_and_untagged_executions_are_not_touched(world: World, machine: str) -> None:
    other = leave(world, "exec-other", stack="another-stack")
    untracked = leave(world, "")
    result = sweeper.sweep(config(), later(48))
    assert alive(world, other) == dict.fromkeys(other, True)
    assert alive(world, untracked) == dict.fromkeys(untracked, True)
    assert sorted(result["untracked"]) == sorted(untracked.values())
    assert [e["executionName"] for e in result["executions"]] == []


def test_every_page_is_read(world: World, machine: str) -> None:
    """Two volumes of one execution on two DescribeVolumes pages: both found, both deleted
    (moto answers in one page, so the pages are served here from what moto describes)."""
    start(machine, "exec-paged", abort=True)
    first = leave(world, "exec-paged")
    second = leave(world, "exec-paged")
    volumes = {
        v["VolumeId"]: v
        for v in world.ec2.describe_volumes(VolumeIds=[first["volume"], second["volume"]])[
            "Volumes"
        ]
    }

    def pages(params: dict[str, Any]) -> dict[str, Any]:
        if params.get("NextToken") == "page-2":
            return {"Volumes": [volumes[second["volume"]]]}
        return {"Volumes": [volumes[first["volume"]]], "NextToken": "page-2"}

    calls = respond(aws.ec2(), "DescribeVolumes", pages)
    deleted = capture(aws.ec2(), "DeleteVolume")
    result = sweeper.sweep(config(), later())
    assert sorted(entry(result, "exec-paged")["found"]["volume"]) == sorted(volumes)
    assert sorted(d["VolumeId"] for d in deleted) == sorted(volumes)
    assert [c.get("NextToken") for c in calls][:2] == [None, "page-2"]


def test_the_cap_defers_the_rest_to_the_next_run(world: World, machine: str) -> None:
    for name in ("exec-a", "exec-b"):
        start(machine, name, abort=True)
        leave(world, name)
    first = sweeper.sweep(config(), later(), max_executions=1)
    assert sorted(e["action"] for e in first["executions"]) == ["deferred", "sweep"]
    second = sweeper.sweep(config(), later(), max_executions=1)
    assert [e["action"] for e in second["executions"]] == ["sweep"]
    assert contract.limit("sweepMaxExecutionsPerRun") >= 1


def test_the_handler_reports_metric_event_and_log(
    world: World,
    machine: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    start(machine, "exec-left", abort=True)
    ids = leave(world, "exec-left")

    class Later(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Later:  # type: ignore[override]
            return cls.fromtimestamp(later().timestamp(), tz)

    monkeypatch.setattr(sweep_handler, "datetime", Later)
    logged: list[dict[str, Any]] = []
    monkeypatch.setattr(
        sweeper.logger,
        "info",
        lambda message, extra=None: logged.append({"message": message, **(extra or {})}),
    )
    sent = capture(aws.events(), "PutEvents")
    capsys.readouterr()
    result = sweep_handler.handler({}, world.context)
    out = capsys.readouterr().out
    assert result["removed"] == 2
    assert [p["value"] for p in named(emf_points(out), "ResourcesSwept")] == [2]
    # the terminated instance is still shutting down: remaining until the next run
    assert [p["value"] for p in named(emf_points(out), "SweepRemaining")] == [1]
    (entries,) = (call["Entries"] for call in sent)
    assert entries[0]["DetailType"] == sweeper.SWEPT_DETAIL_TYPE
    assert entries[0]["Source"] == "ebs-snapshot-compactor"
    detail = json.loads(entries[0]["Detail"])
    assert {r["id"] for r in detail["executions"][0]["removed"]} == set(ids.values())
    swept_lines = [line for line in logged if line["message"] == "swept"]
    assert sorted(line["resourceId"] for line in swept_lines) == sorted(ids.values())
    # a clean run publishes nothing and counts 0
    sent.clear()
    assert sweep_handler.handler({}, world.context)["removed"] == 0
    assert sent == []
    assert [p["value"] for p in named(emf_points(capsys.readouterr().out), "ResourcesSwept")] == [0]


def test_sweep_config_reads_exactly_the_contracts_keys(world: World, machine: str) -> None:
    import os

    recording = _Recording({k: os.environ[k] for k in contract.variable_names("SweepConfig")})
    sweeper.SweepConfig.from_env(recording)
    assert recording.read == set(contract.variable_names("SweepConfig"))


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SWEEP_GRACE_MINUTES", "", "SWEEP_GRACE_MINUTES is missing"),
        ("SWEEP_GRACE_MINUTES", "5", "at least 30"),
        ("SWEEP_GRACE_MINUTES", "soon", "whole number"),
        ("STATE_MACHINE_ARN", "arn:aws:lambda:x", "not a state machine ARN"),
    ],
)
def test_sweep_config_refuses_bad_values(
    world: World, machine: str, monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        sweeper.SweepConfig.from_env()


def test_every_page_of_images_is_read_by_the_sweep_and_its_teardown(
    world: World, machine: str
) -> None:
    """Two undelivered AMIs of one aborted execution on two DescribeImages pages: both found by the
    sweeper and both deregistered by teardown (which pages DescribeImages too)."""
    start(machine, "exec-images", abort=True)
    first = leave(world, "exec-images", image=True)
    second = leave(world, "exec-images", image=True)
    images = {
        i["ImageId"]: i
        for i in world.ec2.describe_images(ImageIds=[first["image"], second["image"]])["Images"]
    }

    def pages(params: dict[str, Any]) -> dict[str, Any]:
        if params.get("NextToken") == "page-2":
            return {"Images": [images[second["image"]]]}
        return {"Images": [images[first["image"]]], "NextToken": "page-2"}

    calls = respond(aws.ec2(), "DescribeImages", pages)
    deregistered = capture(aws.ec2(), "DeregisterImage")
    result = sweeper.sweep(config(), later())
    assert sorted(entry(result, "exec-images")["found"]["image"]) == sorted(images)
    assert sorted(d["ImageId"] for d in deregistered) == sorted(images)
    assert [c.get("NextToken") for c in calls] == [None, "page-2"] * 2  # the sweep, then teardown
