"""Source snapshots (read only) and the new snapshots of the compacted target volumes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from compactor import aws, tags
from compactor.config import Config
from compactor.errors import InvalidInput, SnapshotFailed, SnapshotNotCompleted, SnapshotNotFound
from compactor.models import AttachedVolume, Plan, SnapshotItem, SnapshotsResult

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef, SnapshotTypeDef


def describe_source(snapshot_id: str) -> SnapshotTypeDef:
    """The source snapshot, which must exist in this Region and be completed."""
    try:
        found = aws.ec2().describe_snapshots(SnapshotIds=[snapshot_id])["Snapshots"]
    except ClientError as error:
        if aws.error_code(error) == "InvalidSnapshot.NotFound":
            found = []
        elif aws.error_code(error) == "InvalidSnapshotID.Malformed":
            raise InvalidInput(f"snapshot id {snapshot_id} is malformed") from error
        else:
            raise
    if not found:
        raise SnapshotNotFound(
            f"snapshot {snapshot_id} not found in {aws.region()}: check the id, or copy it to "
            "this Region (or share it with this account)"
        )
    snapshot = found[0]
    state = snapshot.get("State")
    if state != "completed":
        hint = (
            "wait until it is completed and start again"
            if state == "pending"
            else f"it cannot be read ({snapshot.get('StateMessage', 'no reason given')})"
        )
        raise SnapshotNotCompleted(f"snapshot {snapshot_id} is {state}, not completed: {hint}")
    return snapshot


def create_from_targets(
    plan: Plan, volumes: Sequence[AttachedVolume], config: Config
) -> list[SnapshotItem]:
    """Snapshot each compacted target volume, once: a retried call finds the earlier snapshots."""
    by_index = {volume["index"]: volume for volume in volumes}
    sources = {
        s["SnapshotId"]: s
        for s in aws.ec2().describe_snapshots(
            SnapshotIds=[v["sourceSnapshotId"] for v in plan["volumes"]]
        )["Snapshots"]
    }
    existing = _existing_by_volume(config.stack_name, plan["executionName"])
    items: list[SnapshotItem] = []
    for volume in plan["volumes"]:
        target_volume_id = by_index[volume["index"]]["targetVolumeId"]
        source = sources[volume["sourceSnapshotId"]]
        snapshot_id = existing.get(target_volume_id)
        if snapshot_id is None:
            snapshot_id = aws.ec2().create_snapshot(
                VolumeId=target_volume_id,
                Description=source.get("Description")
                or f"Compacted copy of {volume['sourceSnapshotId']}",
                TagSpecifications=[
                    tags.specification(
                        "snapshot",
                        _new_snapshot_tags(plan, source, volume["sourceSnapshotId"], config),
                    )
                ],
            )["SnapshotId"]
        items.append(
            {
                "index": volume["index"],
                "snapshotId": snapshot_id,
                "sourceSnapshotId": volume["sourceSnapshotId"],
                "deviceName": volume["deviceName"],
            }
        )
    return items


def _new_snapshot_tags(
    plan: Plan, source: SnapshotTypeDef, source_snapshot_id: str, config: Config
) -> dict[str, str]:
    result = tags.copyable(tags.from_aws(source.get("Tags")), config.trigger_tag_key)
    result.update(plan["tags"])
    result.update(tags.ownership(config.stack_name, plan["executionName"], tags.ROLE_SNAPSHOT))
    result[tags.SOURCE_SNAPSHOT] = source_snapshot_id
    if plan["source"]["kind"] == "image":
        result[tags.SOURCE_IMAGE] = plan["source"]["imageId"]
    return result


def _existing_by_volume(stack_name: str, execution_name: str) -> dict[str, str]:
    filters: list[FilterTypeDef] = [
        *tags.ownership_filters(stack_name, execution_name),
        {"Name": f"tag:{tags.ROLE}", "Values": [tags.ROLE_SNAPSHOT]},
    ]
    return {
        s["VolumeId"]: s["SnapshotId"] for s in _describe_own(filters) if s.get("State") != "error"
    }


def _describe_own(filters: Sequence[FilterTypeDef]) -> list[SnapshotTypeDef]:
    pages = (
        aws.ec2().get_paginator("describe_snapshots").paginate(OwnerIds=["self"], Filters=filters)
    )
    return [snapshot for page in pages for snapshot in page["Snapshots"]]


def check(result: SnapshotsResult) -> SnapshotsResult:
    """Progress of the new snapshots; SnapshotFailed when one is in state error."""
    items = result["snapshots"]
    described = {
        s["SnapshotId"]: s
        for s in aws.ec2().describe_snapshots(SnapshotIds=[i["snapshotId"] for i in items])[
            "Snapshots"
        ]
    }
    checked: list[SnapshotItem] = []
    for item in items:
        snapshot = described[item["snapshotId"]]
        if snapshot.get("State") == "error":
            raise SnapshotFailed(
                f"snapshot {item['snapshotId']} of the compacted volume failed "
                f"({snapshot.get('StateMessage', 'no reason given')}): start the workflow again"
            )
        checked.append(
            {
                "index": item["index"],
                "snapshotId": item["snapshotId"],
                "sourceSnapshotId": item["sourceSnapshotId"],
                "deviceName": item["deviceName"],
                "state": snapshot.get("State", "pending"),
                "progress": snapshot.get("Progress", ""),
            }
        )
    return {"snapshots": checked, "completed": all(i["state"] == "completed" for i in checked)}


def full_sizes(snapshot_ids: Sequence[str]) -> dict[str, int | None]:
    """FullSnapshotSizeInBytes of the snapshots that still exist (None where EC2 gives none)."""
    if not snapshot_ids:
        return {}
    found = aws.ec2().describe_snapshots(
        OwnerIds=["self"], Filters=[{"Name": "snapshot-id", "Values": list(snapshot_ids)}]
    )["Snapshots"]
    return {s["SnapshotId"]: s.get("FullSnapshotSizeInBytes") for s in found}
