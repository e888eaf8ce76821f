"""The handlers chained in the order of the state machine, each fed what the previous ones
returned, as the contract's payloads say (only the calls moto lacks are played back)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from compactor import aws
from compactor.handlers import (
    attach_volumes,
    check_compaction,
    check_instance,
    check_snapshots,
    create_snapshots,
    enable_fast_snapshot_restore,
    launch,
    prepare,
    register_image,
    report,
    start_compaction,
    teardown,
)
from conftest import (
    EXECUTION,
    SOURCE_IMAGE_ID,
    World,
    listed_blocks,
    serve_image,
    serve_snapshot_blocks,
    source_image,
    ssm_ping,
)
from support import capture, respond, summary_volume

TIMINGS = {"start": "2026-11-21T10:00:00Z", "prepare": "2026-11-21T10:00:01Z"}


def command_succeeds() -> None:
    def invocation(params: dict[str, Any]) -> dict[str, Any]:
        command = aws.ssm().list_commands(CommandId=params["CommandId"])["Commands"][0]
        parameters = command["Parameters"]
        sources = parameters["SourceVolumeIds"][0].split(",")
        # the data plane's summary: a target volume or, with target snapshot, the snapshot
        direct = parameters["Target"] == ["snapshot"]
        targets = parameters["TargetSnapshotIds" if direct else "TargetVolumeIds"][0].split(",")
        line = {
            "volumes": [
                summary_volume(
                    s,
                    targetVolumeId=None if direct else t,
                    targetSnapshotId=t if direct else None,
                    source_bytes_read=100 * (n + 1),
                    target_bytes_written=10 * (n + 1),
                )
                for n, (s, t) in enumerate(zip(sources, targets, strict=True))
            ]
        }
        return {
            "Status": "Success",
            "StatusDetails": "Success",
            "StandardOutputContent": json.dumps(line),
        }

    respond(aws.ssm(), "GetCommandInvocation", invocation)


def record_changes_to(source_ids: list[str]) -> list[str]:
    """Every EC2 call other than a Describe* whose parameters name one of the source ids."""
    changes: list[str] = []

    def check(params: dict[str, Any], model: Any, **_: Any) -> None:
        if not model.name.startswith("Describe") and any(
            i in json.dumps(params) for i in source_ids
        ):
            changes.append(model.name)

    aws.ec2().meta.events.register("before-parameter-build.ec2", check)
    return changes


def run_workflow(world: World, execution_input: dict[str, Any]) -> dict[str, Any]:
    ctx = world.context
    state: dict[str, Any] = {
        "input": execution_input,
        "executionName": EXECUTION,
        "launchAttempt": 1,
        "timings": dict(TIMINGS),
    }
    state["plan"] = prepare.handler({"input": state["input"], "executionName": EXECUTION}, ctx)
    serve_snapshot_blocks({v["sourceSnapshotId"]: [0, 3, 4] for v in state["plan"]["volumes"]})
    state["sourceBlocks"] = listed_blocks(world, state["plan"])
    state["instance"] = launch.handler({"plan": state["plan"], "launchAttempt": 1}, ctx)
    ssm_ping("Online")
    state["ready"] = check_instance.handler(
        {"plan": state["plan"], "instance": state["instance"]}, ctx
    )
    assert state["ready"]["ready"]
    for _ in range(5):  # the Attach volumes poll loop
        state["attached"] = attach_volumes.handler(
            {"plan": state["plan"], "instance": state["instance"]}, ctx
        )
        if state["attached"]["done"]:
            break
    assert state["attached"]["done"], state["attached"]
    state["command"] = start_compaction.handler(
        {
            "plan": state["plan"],
            "instance": state["instance"],
            "attached": state["attached"],
            "sourceBlocks": state["sourceBlocks"],
            "launchAttempt": state["launchAttempt"],
        },
        ctx,
    )
    command_succeeds()
    state["compaction"] = check_compaction.handler(
        {"instance": state["instance"], "command": state["command"]}, ctx
    )
    assert state["compaction"]["done"]
    if state["plan"]["target"] == "snapshot":  # the `Direct snapshots` Pass state
        state["snapshots"] = {"snapshots": state["command"]["directSnapshots"], "completed": False}
    else:
        state["snapshots"] = create_snapshots.handler(
            {"plan": state["plan"], "attached": state["attached"]}, ctx
        )
    state["snapshots"] = check_snapshots.handler({"snapshots": state["snapshots"]}, ctx)
    assert state["snapshots"]["completed"]
    if state["plan"]["image"] is not None:
        state["image"] = register_image.handler(
            {"plan": state["plan"], "snapshots": state["snapshots"]}, ctx
        )
    if state["plan"]["fastSnapshotRestoreAzs"]:
        state["fastSnapshotRestore"] = enable_fast_snapshot_restore.handler(
            {"plan": state["plan"], "snapshots": state["snapshots"]}, ctx
        )
    keep = {
        "snapshotIds": [s["snapshotId"] for s in state["snapshots"]["snapshots"]],
        "imageId": state.get("image", {}).get("imageId"),
    }
    for _ in range(3):
        state["teardown"] = teardown.handler(
            {"executionName": EXECUTION, "outcome": "success", "keep": keep}, ctx
        )
        if state["teardown"]["remaining"] == 0:
            break
    assert state["teardown"]["remaining"] == 0
    state["report"] = report.handler({**state, "outcome": "success"}, ctx)
    # Step Functions carries the state as JSON: every result must survive the round trip as is
    assert json.loads(json.dumps(state)) == state
    return state["report"]


def moto_direct_volumes(world: World, snapshot_ids: list[str]) -> set[str]:
    """moto's StartSnapshot makes an EC2 volume to snapshot (EBS makes none): not a leftover."""
    described = world.ec2.describe_snapshots(SnapshotIds=snapshot_ids)["Snapshots"]
    return {s["VolumeId"] for s in described}


@pytest.mark.parametrize("target", ["snapshot", "volume"])
def test_snapshot_job(world: World, target: str) -> None:
    source = world.snapshot(tags={"team": "db"})
    described = world.ec2.describe_snapshots(SnapshotIds=[source])["Snapshots"]
    before = world.inventory()
    changes = record_changes_to([source])
    started = capture(aws.ebs(), "StartSnapshot")
    result = run_workflow(world, {"snapshotId": source, "target": target})
    (volume,) = result["volumes"]
    assert (
        volume["sourceSnapshotId"],
        volume["sourceBytesRead"],
        volume["targetBytesWritten"],
    ) == (source, 100, 10)
    assert result["target"] == target
    after = world.inventory()
    assert after["instances"] == before["instances"]
    assert world.ec2.describe_snapshots(SnapshotIds=[source])["Snapshots"] == described
    assert after["snapshots"] - before["snapshots"] == {volume["newSnapshotId"]}
    if target == "volume":
        assert after["volumes"] == before["volumes"]
        assert (volume["targetSnapshotId"], started) == (None, [])
        # CreateVolume (attach_volumes, after boot) reads the source, RunInstances never names
        # it; CreateSnapshot names it in the new snapshot's lineage tag
        assert changes == ["CreateVolume", "CreateSnapshot"]
    else:
        direct = [volume["newSnapshotId"]]
        assert after["volumes"] - before["volumes"] == moto_direct_volumes(world, direct)
        assert volume["targetSnapshotId"] == volume["newSnapshotId"]
        assert len(started) == 1 and started[0]["VolumeSize"] == 8
        assert changes == ["CreateVolume"]  # no CreateSnapshot: StartSnapshot (ebs) instead


@pytest.mark.parametrize("target", ["snapshot", "volume"])
def test_image_job_with_fast_snapshot_restore(world: World, target: str) -> None:
    image = source_image(world, volume_count=2)
    serve_image(image)
    sources = [m["Ebs"]["SnapshotId"] for m in image["BlockDeviceMappings"] if "Ebs" in m]
    changes = record_changes_to([SOURCE_IMAGE_ID, *sources])
    respond(aws.ec2(), "DescribeFastSnapshotRestores", lambda _: {"FastSnapshotRestores": []})
    respond(
        aws.ec2(),
        "EnableFastSnapshotRestores",
        lambda params: {
            "Successful": [
                {"SnapshotId": s, "AvailabilityZone": "us-east-1a", "State": "enabling"}
                for s in params["SourceSnapshotIds"]
            ]
        },
    )
    registered = capture(aws.ec2(), "RegisterImage")
    result = run_workflow(
        world,
        {"imageId": SOURCE_IMAGE_ID, "fastSnapshotRestoreAzs": ["us-east-1a"], "target": target},
    )
    assert [v["targetBytesWritten"] for v in result["volumes"]] == [10, 20]
    new = [v["newSnapshotId"] for v in result["volumes"]]
    assert [m["Ebs"]["SnapshotId"] for m in registered[0]["BlockDeviceMappings"][:2]] == new
    assert result["imageId"] is not None
    assert [s["snapshotId"] for s in result["fastSnapshotRestore"]] == new
    assert [v["targetSnapshotId"] for v in result["volumes"]] == (
        new if target == "snapshot" else [None, None]
    )
    # CreateVolume (after boot) reads the sources; the others name them in lineage tags
    # (StartSnapshot, an ebs call, instead of CreateSnapshot with target snapshot)
    creates = ["CreateSnapshot", "CreateSnapshot"] if target == "volume" else []
    assert changes == ["CreateVolume", "CreateVolume", *creates, "RegisterImage"]
