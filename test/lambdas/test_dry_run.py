"""`"dryRun": true` (docs/workflow.md, "Dry run"): prepare carries it into the plan, launch maps no
target volume, attach_volumes pairs the sources with no target, start_compaction sends the
document in inspect mode, create_snapshots refuses a pair without a target, and the report turns
the inspect line into outcome `estimated` with the estimate (results checked against their
schemas by the autouse fixture)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from compactor import aws, errors, sizing
from compactor.config import Config
from compactor.handlers import create_snapshots, prepare, report
from compactor.report.build import build
from conftest import (
    EXECUTION,
    World,
    listed_blocks,
    ready_instance,
    serve_image,
    serve_snapshot_blocks,
    source_image,
)
from support import capture, instance_result

BLOCK = 512 * 1024


def _plan(world: World, execution_input: dict[str, Any]) -> dict[str, Any]:
    return prepare.handler({"input": execution_input, "executionName": EXECUTION}, world.context)


def test_the_plan_says_dry_run_and_defaults_to_false(world: World) -> None:
    snapshot_id = world.snapshot()
    assert _plan(world, {"snapshotId": snapshot_id, "dryRun": True})["dryRun"] is True
    assert _plan(world, {"snapshotId": snapshot_id})["dryRun"] is False


def test_a_dry_run_that_is_not_a_boolean_is_refused(world: World) -> None:
    with pytest.raises(errors.InvalidInput, match="dryRun 'yes' is invalid: use true or false"):
        _plan(world, {"snapshotId": world.snapshot(), "dryRun": "yes"})


def test_a_dry_run_of_a_job_too_large_to_copy_is_still_estimated(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATE_MACHINE_TIMEOUT_MINUTES", "180")
    snapshot_id = world.snapshot(size=1000)
    with pytest.raises(errors.JobTooLarge):
        _plan(world, {"snapshotId": snapshot_id})
    assert _plan(world, {"snapshotId": snapshot_id, "dryRun": True})["sourcesReady"] is True


def _dry_run_to_the_command(
    world: World, execution_input: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """prepare → launch → ready → attach → start_compaction of a dry run: (plan, attached,
    the RunInstances request, the SendCommand requests)."""
    from compactor.handlers import start_compaction

    launches = capture(aws.ec2(), "RunInstances")
    plan, instance, attached = ready_instance(world, {**execution_input, "dryRun": True})
    serve_snapshot_blocks({v["sourceSnapshotId"]: [0, 1, 5] for v in plan["volumes"]})
    listed = listed_blocks(world, plan)
    sent = capture(aws.ssm(), "SendCommand")
    start_compaction.handler(
        {"plan": plan, "instance": instance, "attached": attached, "sourceBlocks": listed},
        world.context,
    )
    (launched,) = launches
    return plan, attached, launched, sent


def test_a_dry_run_launches_the_root_alone_and_inspects_the_sources(world: World) -> None:
    before = world.inventory()["volumes"]
    _, attached, launched, sent = _dry_run_to_the_command(
        world, {"snapshotId": world.snapshot(), "method": "trim"}
    )
    # no target volume, and no room for trim's scratch image: the root volume as configured
    assert [m["DeviceName"] for m in launched["BlockDeviceMappings"]] == ["/dev/xvda"]
    assert (
        launched["BlockDeviceMappings"][0]["Ebs"]["VolumeSize"] == Config.from_env().root_volume_gib
    )
    (pair,) = attached["volumes"]
    assert (pair["targetVolumeId"], pair["targetDeviceName"]) == (None, None)
    # the only volume made besides the instance's root is the source volume
    made = world.inventory()["volumes"] - before
    assert pair["sourceVolumeId"] in made
    (request,) = sent
    parameters = request["Parameters"]
    assert parameters["Mode"] == ["inspect"]
    # inspect never looks at the targets: the sources fill the lists the document requires
    assert (
        parameters["TargetVolumeIds"] == parameters["SourceVolumeIds"] == [pair["sourceVolumeId"]]
    )
    assert parameters["TargetDeviceNames"] == parameters["SourceDeviceNames"] == ["/dev/sdf"]


def test_a_dry_run_of_an_ami_inspects_every_volume(world: World) -> None:
    image = source_image(world, volume_count=2)
    serve_image(image)
    plan, attached, launched, sent = _dry_run_to_the_command(world, {"imageId": image["ImageId"]})
    assert len(plan["volumes"]) == 2
    assert len(launched["BlockDeviceMappings"]) == 1
    assert [v["targetVolumeId"] for v in attached["volumes"]] == [None, None]
    (request,) = sent
    assert request["Parameters"]["Mode"] == ["inspect"]
    assert request["Parameters"]["TargetVolumeIds"] == request["Parameters"]["SourceVolumeIds"]
    assert len(request["Parameters"]["SourceVolumeIds"][0].split(",")) == 2


def test_copy_mode_needs_every_target(world: World) -> None:
    plan, attached, _, _ = _dry_run_to_the_command(world, {"snapshotId": world.snapshot()})
    plan = {**plan, "dryRun": False}
    from compactor.ssm.commands import document_parameters

    with pytest.raises(errors.InvalidInput, match="no targetVolumeId"):
        document_parameters(plan, attached, "https://example.com/b", "https://example.com/p")  # type: ignore[arg-type]


def test_check_compaction_returns_the_inspect_line_unchanged(world: World) -> None:
    from compactor.handlers import check_compaction
    from test_compaction import invocation

    _, attached, _, sent = _dry_run_to_the_command(world, {"snapshotId": world.snapshot()})
    line = {
        "mode": "inspect",
        "volumes": [_inspected(attached["volumes"][0]["sourceVolumeId"], 61, 9 * BLOCK)],
    }
    invocation("Success", stdout=json.dumps(line) + "\n")
    instance = instance_result(sent[0]["InstanceIds"][0])
    command = {"commandId": "0b6f7a2e-1111-4c1e-9a3b-0123456789ab", "directSnapshots": []}
    result = check_compaction.handler({"instance": instance, "command": command}, world.context)
    assert (result["done"], result["summary"]) == (True, line)


def test_no_snapshot_is_created_of_a_dry_run_pair(world: World) -> None:
    plan, attached, _, _ = _dry_run_to_the_command(world, {"snapshotId": world.snapshot()})
    before = world.inventory()["snapshots"]
    with pytest.raises(errors.InvalidInput, match="no target volume"):
        create_snapshots.handler({"plan": plan, "attached": attached}, world.context)
    assert world.inventory()["snapshots"] == before


def test_a_dry_run_launches_the_smallest_types_with_the_bound_of_the_copy(world: World) -> None:
    config = dataclasses.replace(Config.from_env(), instance_types=())
    copy = sizing.plan(3 * 1024**4, True, config)
    dry = sizing.plan(3 * 1024**4, True, config, dry_run=True)
    assert copy.instance_types[0].endswith(".4xlarge")
    assert dry.instance_types == list(sizing.SIZE_CLASSES[0].types(config.architecture))
    assert (dry.compaction_poll, dry.budget_seconds) == (copy.compaction_poll, copy.budget_seconds)
    # the INSTANCE_TYPES setting wins for a dry run too
    assert sizing.plan(1, True, Config.from_env(), dry_run=True).instance_types == list(
        Config.from_env().instance_types
    )


# ---------------------------------------------------------------- the report

TIMINGS = {"start": "2026-11-21T10:00:00.000Z", "compaction": "2026-11-21T10:01:10.000Z"}


def _inspected(source_volume_id: str, predicted: int, to_read: int) -> dict[str, Any]:
    return {
        "sourceVolumeId": source_volume_id,
        "size": 8 << 30,
        "live_bytes": to_read - 4096,
        "bytes_to_read": to_read,
        "predicted_blocks": predicted,
        "held_blocks": 6_000,
    }


def dry_run_state(volumes: int = 1, held: list[int | None] | None = None) -> dict[str, Any]:
    held = held or [6_000] * volumes
    sources = [f"snap-0{i}" for i in range(volumes)]
    return {
        "input": {"snapshotId": sources[0], "dryRun": True},
        "executionName": EXECUTION,
        "timings": TIMINGS,
        "plan": {
            "executionName": EXECUTION,
            "source": {"kind": "snapshot", "snapshotId": sources[0]},
            "volumes": [
                {"index": i, "sourceSnapshotId": s, "sourceFullSizeBytes": 4_000 * BLOCK}
                for i, s in enumerate(sources)
            ],
            "instanceTypes": ["m7i.large", "m6i.large"],
            "verify": True,
            "dryRun": True,
            "notes": [],
        },
        "attached": {
            "done": True,
            "volumes": [
                {"index": i, "sourceVolumeId": f"vol-s{i}", "targetVolumeId": None}
                for i in range(volumes)
            ],
        },
        "compaction": {
            "done": True,
            "status": "Success",
            "summary": {
                "mode": "inspect",
                "volumes": [
                    _inspected(f"vol-s{i}", 1_500 + i, 700 * 1024**2) for i in range(volumes)
                ],
            },
        },
        "sourceBlocks": {
            "complete": True,
            "volumes": [{"index": i, "heldBlocks": h} for i, h in enumerate(held)],
        },
        "image": {"imageId": None, "warnings": []},
        "teardown": {"remaining": 0},
        "outcome": "estimated",
    }


def test_the_report_of_a_dry_run_is_the_estimate(world: World) -> None:
    sent = capture(aws.events(), "PutEvents")
    result = report.handler(dry_run_state(), world.context)
    assert (result["outcome"], result["dryRun"], result["delivered"]) == ("estimated", True, False)
    assert result["newSnapshotIds"] == [] and result["imageId"] is None
    (volume,) = result["volumes"]
    assert volume["newSnapshotId"] is None and volume["writtenBlocks"] is None
    config = Config.from_env()
    # 700 MiB, twice (verify), at min(650 Mbps / 8 / 2, the volumes' gp3 throughput)
    rate = sizing.copy_rate(650, config)
    expected_seconds = -(-2 * 700 * 1024**2 // rate)
    assert volume["estimate"] == {
        "sourceStoredBytes": 6_000 * BLOCK,  # the held blocks win over FullSnapshotSizeInBytes
        "liveBytes": 700 * 1024**2 - 4096,
        "predictedStoredBytes": 1_500 * BLOCK,
        "predictedSavingsBytes": 4_500 * BLOCK,
        "predictedSavingsPercent": 75.0,
        "bytesToRead": 700 * 1024**2,
        "copySeconds": int(expected_seconds),
    }
    assert result["estimate"] == {
        "volumes": 1,
        **{k: v for k, v in volume["estimate"].items() if k != "predictedSavingsPercent"},
        "savingsPercent": 75.0,
    }
    (entries,) = (call["Entries"] for call in sent)
    assert entries[0]["DetailType"] == "EBS Snapshot Compaction Succeeded"
    assert json.loads(entries[0]["Detail"])["estimate"]["savingsPercent"] == 75.0


def test_an_ami_dry_run_sums_its_volumes_and_falls_back_to_the_full_size(world: World) -> None:
    """Volume 1 could not be listed: its stored bytes are FullSnapshotSizeInBytes."""
    state = dry_run_state(volumes=2, held=[6_000, None])
    result = build(state, world_now(), Config.from_env())
    first, second = (v["estimate"] for v in result["volumes"])
    assert first is not None and second is not None
    assert second["sourceStoredBytes"] == 4_000 * BLOCK
    assert second["predictedStoredBytes"] == 1_501 * BLOCK
    total = result["estimate"]
    assert total is not None
    assert total["volumes"] == 2
    assert total["sourceStoredBytes"] == 10_000 * BLOCK
    assert total["predictedStoredBytes"] == 3_001 * BLOCK
    assert total["predictedSavingsBytes"] == 6_999 * BLOCK
    assert total["savingsPercent"] == 70.0  # 6,999 / 10,000
    assert total["copySeconds"] == first["copySeconds"] + second["copySeconds"]  # type: ignore[operator]


def test_copy_seconds_are_those_of_the_types_a_compaction_would_get(world: World) -> None:
    """The dry run ran on the smallest types; the estimate is for the copy's (3 TiB: 4xlarge)."""
    config = dataclasses.replace(Config.from_env(), instance_types=())
    state = dry_run_state()
    state["plan"]["bytesToCopy"] = 3 * 1024**4
    (volume,) = build(state, world_now(), config)["volumes"]
    assert volume["estimate"] is not None
    rate = sizing.copy_rate(sizing.SizeClass("4xlarge", None).baseline_mbps("x86_64"), config)
    assert volume["estimate"]["copySeconds"] == -(-2 * 700 * 1024**2 // rate)


def test_a_prediction_above_what_the_source_stores_saves_nothing(world: World) -> None:
    state = dry_run_state()
    state["compaction"]["summary"]["volumes"][0]["predicted_blocks"] = 7_000
    (volume,) = build(state, world_now(), None)["volumes"]
    assert volume["estimate"] is not None
    assert (volume["estimate"]["predictedSavingsBytes"], volume["estimate"]["copySeconds"]) == (
        0,
        None,  # no config: no rate
    )


def test_a_dry_run_that_failed_before_the_inspection_has_no_estimate(world: World) -> None:
    state = dry_run_state()
    del state["compaction"]
    state["outcome"] = "failure"
    state["error"] = {"Error": "InstanceNotReady", "Cause": "no SSM"}
    result = report.handler(state, world.context)
    assert (result["outcome"], result["dryRun"], result["estimate"]) == ("failure", True, None)
    assert result["volumes"][0]["estimate"] is None


def test_a_compaction_report_says_it_is_no_dry_run(world: World) -> None:
    state = dry_run_state()
    state["plan"]["dryRun"] = False
    result = build(state, world_now(), Config.from_env())
    assert (result["dryRun"], result["estimate"]) == (False, None)
    assert "estimate" not in result["volumes"][0]


def world_now() -> Any:
    from datetime import UTC, datetime

    return datetime(2026, 11, 21, 10, 5, tzinfo=UTC)
