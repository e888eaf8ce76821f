from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError
from compactor import aws, errors
from compactor.handlers import check_snapshots, create_snapshots
from conftest import EXECUTION, STACK, World, ready_instance
from support import amend, capture, error_response, respond

DELIVERED = "ebs-snapshot-compactor:delivered"


def create(world: World, plan: dict[str, Any], attached: dict[str, Any]) -> dict[str, Any]:
    return create_snapshots.handler({"plan": plan, "attached": attached}, world.context)


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


def new_snapshots(world: World, count: int = 2) -> dict[str, Any]:
    """What create_snapshots returns, on snapshots made directly (tagged like the workflow's)."""
    items = []
    for index in range(count):
        snapshot_id = world.snapshot(
            tags={
                "ebs-snapshot-compactor:stack": STACK,
                "ebs-snapshot-compactor:execution": EXECUTION,
                "ebs-snapshot-compactor:role": "snapshot",
            }
        )
        items.append(
            {
                "index": index,
                "snapshotId": snapshot_id,
                "sourceSnapshotId": world.snapshot(),
                "deviceName": None,
            }
        )
    return {"snapshots": items}


def states(*by_position: str) -> Callable[[dict[str, Any]], None]:
    """Amend DescribeSnapshots: the n-th snapshot asked for is in state by_position[n]."""

    def change(parsed: dict[str, Any]) -> None:
        for snapshot, state in zip(parsed["Snapshots"], by_position, strict=False):
            snapshot.update(State=state, Progress="100%" if state == "completed" else "40%")

    return change


def check(world: World, snapshots: dict[str, Any]) -> dict[str, Any]:
    return check_snapshots.handler({"snapshots": snapshots}, world.context)


def delivered(world: World, snapshots: dict[str, Any]) -> list[bool]:
    return [
        tags_of(world, i["snapshotId"]).get(DELIVERED) == "true" for i in snapshots["snapshots"]
    ]


def test_check_reports_progress_and_completion(world: World) -> None:
    created = new_snapshots(world, count=1)
    amend(aws.ec2(), "DescribeSnapshots", states("pending"))
    pending = check(world, created)
    assert pending == {
        "snapshots": [dict(created["snapshots"][0], state="pending", progress="40%")],
        "completed": False,
    }
    aws.reset_clients()
    done = check(world, pending)
    assert done["completed"] is True
    assert done["snapshots"][0]["state"] == "completed"
    assert done["snapshots"][0]["snapshotId"] == created["snapshots"][0]["snapshotId"]


def test_delivered_tag_exactly_when_all_are_completed(world: World) -> None:
    created = new_snapshots(world)
    tagging = capture(aws.ec2(), "CreateTags")
    amend(aws.ec2(), "DescribeSnapshots", states("completed", "pending"))
    assert check(world, created)["completed"] is False
    assert delivered(world, created) == [False, False]
    assert tagging == []
    aws.reset_clients()
    tagging = capture(aws.ec2(), "CreateTags")
    assert check(world, created)["completed"] is True
    assert delivered(world, created) == [True, True]
    assert tagging == [
        {
            "Resources": [i["snapshotId"] for i in created["snapshots"]],
            "Tags": [{"Key": DELIVERED, "Value": "true"}],
        }
    ]
    # idempotent: a repeated check keeps the tags and tags nothing again
    assert check(world, created)["completed"] is True
    assert len(tagging) == 1
    assert delivered(world, created) == [True, True]


def test_snapshot_in_error(world: World) -> None:
    created = new_snapshots(world)
    failed = created["snapshots"][1]["snapshotId"]
    amend(
        aws.ec2(),
        "DescribeSnapshots",
        lambda parsed: [
            s.update(State="error", StateMessage="internal error")
            for s in parsed["Snapshots"]
            if s["SnapshotId"] == failed
        ],
    )
    with pytest.raises(errors.SnapshotFailed, match="internal error"):
        check(world, created)
    assert delivered(world, created) == [False, False]


@pytest.mark.parametrize("code", ["RequestLimitExceeded", "InternalError"])
def test_throttled_describe_is_not_completed_yet(world: World, code: str) -> None:
    created = new_snapshots(world)
    respond(aws.ec2(), "DescribeSnapshots", lambda _: error_response(code, "slow down"))
    result = check(world, created)
    assert result["completed"] is False
    assert result["snapshots"] == created["snapshots"]
    assert code in result["transientError"]


def test_snapshot_not_listed_yet_is_not_completed_yet(world: World) -> None:
    created = new_snapshots(world)
    respond(aws.ec2(), "DescribeSnapshots", lambda _: error_response("InvalidSnapshot.NotFound"))
    result = check(world, created)
    assert (result["completed"], "InvalidSnapshot.NotFound" in result["transientError"]) == (
        False,
        True,
    )


def test_throttled_tagging_is_not_completed_until_tagged(world: World) -> None:
    created = new_snapshots(world)
    respond(aws.ec2(), "CreateTags", lambda _: error_response("RequestLimitExceeded"))
    result = check(world, created)
    assert result["completed"] is False
    assert "CreateTags" in result["transientError"]
    assert delivered(world, created) == [False, False]
    aws.reset_clients()
    assert check(world, created)["completed"] is True
    assert delivered(world, created) == [True, True]


def test_other_errors_still_raise(world: World) -> None:
    created = new_snapshots(world)
    respond(aws.ec2(), "CreateTags", lambda _: error_response("UnauthorizedOperation"))
    with pytest.raises(ClientError, match="UnauthorizedOperation"):
        check(world, created)


def test_source_snapshot_is_unchanged(world: World) -> None:
    source = world.snapshot(tags={"team": "db"})
    described = world.ec2.describe_snapshots(SnapshotIds=[source])["Snapshots"]
    plan, _, ready = ready_instance(world, {"snapshotId": source})
    create(world, plan, ready)
    assert world.ec2.describe_snapshots(SnapshotIds=[source])["Snapshots"] == described
