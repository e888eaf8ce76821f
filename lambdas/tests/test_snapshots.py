from __future__ import annotations

from typing import Any

import pytest
from compactor import aws, errors
from compactor.handlers import check_snapshots, create_snapshots

from tests.conftest import EXECUTION, STACK, World, ready_instance
from tests.support import amend


def create(world: World, plan: dict[str, Any], ready: dict[str, Any]) -> dict[str, Any]:
    return create_snapshots.handler({"plan": plan, "ready": ready}, world.context)


def tags_of(world: World, snapshot_id: str) -> dict[str, str]:
    snapshot = world.ec2.describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"][0]
    return {t["Key"]: t["Value"] for t in snapshot.get("Tags", [])}


def test_snapshots_each_target_with_copied_description_and_tags(world: World) -> None:
    source = world.snapshot(
        tags={
            "team": "db",
            "aws:backup:source-resource": "x",
            "compact": "yes",
            "ebs-snapshot-compactor:role": "snapshot",
        },
        description="db volume, nightly",
    )
    plan, _, ready = ready_instance(
        world, {"snapshotId": source, "tags": {"env": "prod", "team": "data"}}
    )
    result = create(world, plan, ready)
    (item,) = result["snapshots"]
    assert result == {
        "snapshots": [
            {
                "index": 0,
                "snapshotId": item["snapshotId"],
                "sourceSnapshotId": source,
                "deviceName": None,
            }
        ]
    }
    snapshot = world.ec2.describe_snapshots(SnapshotIds=[item["snapshotId"]])["Snapshots"][0]
    assert snapshot["VolumeId"] == ready["volumes"][0]["targetVolumeId"]
    assert snapshot["Description"] == "db volume, nightly"
    assert tags_of(world, item["snapshotId"]) == {
        "team": "data",
        "env": "prod",
        "ebs-snapshot-compactor:stack": STACK,
        "ebs-snapshot-compactor:execution": EXECUTION,
        "ebs-snapshot-compactor:role": "snapshot",
        "ebs-snapshot-compactor:source-snapshot": source,
    }


def test_a_retried_call_creates_no_second_snapshot(world: World) -> None:
    plan, _, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    first = create(world, plan, ready)
    before = world.inventory()["snapshots"]
    assert create(world, plan, ready) == first
    assert world.inventory()["snapshots"] == before


def test_check_reports_progress_and_completion(world: World) -> None:
    plan, _, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    created = create(world, plan, ready)
    amend(
        aws.ec2(),
        "DescribeSnapshots",
        lambda parsed: [s.update(State="pending", Progress="40%") for s in parsed["Snapshots"]],
    )
    pending = check_snapshots.handler({"snapshots": created}, world.context)
    assert pending == {
        "snapshots": [dict(created["snapshots"][0], state="pending", progress="40%")],
        "completed": False,
    }
    aws.reset_clients()
    done = check_snapshots.handler({"snapshots": pending}, world.context)
    assert done["completed"] is True
    assert done["snapshots"][0]["state"] == "completed"
    assert done["snapshots"][0]["snapshotId"] == created["snapshots"][0]["snapshotId"]


def test_snapshot_in_error(world: World) -> None:
    plan, _, ready = ready_instance(world, {"snapshotId": world.snapshot()})
    created = create(world, plan, ready)
    amend(
        aws.ec2(),
        "DescribeSnapshots",
        lambda parsed: [
            s.update(State="error", StateMessage="internal error") for s in parsed["Snapshots"]
        ],
    )
    with pytest.raises(errors.SnapshotFailed, match="internal error"):
        check_snapshots.handler({"snapshots": created}, world.context)


def test_source_snapshot_is_unchanged(world: World) -> None:
    source = world.snapshot(tags={"team": "db"})
    described = world.ec2.describe_snapshots(SnapshotIds=[source])["Snapshots"]
    plan, _, ready = ready_instance(world, {"snapshotId": source})
    create(world, plan, ready)
    assert world.ec2.describe_snapshots(SnapshotIds=[source])["Snapshots"] == described
