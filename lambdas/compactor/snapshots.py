"""Source snapshots (read only) and the new snapshots: of the compacted target volumes
(CreateSnapshot, target volume) or written directly (StartSnapshot, target snapshot:
compactor/direct_snapshots.py). Both get their description and tags from `new_snapshot_fields`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, TypedDict

from botocore.exceptions import ClientError

from compactor import aws, tags
from compactor.config import Config
from compactor.errors import (
    InvalidInput,
    SnapshotArchived,
    SnapshotFailed,
    SnapshotNotCompleted,
    SnapshotNotFound,
)
from compactor.models import AttachedVolume, NewSnapshots, Plan, SnapshotItem, SnapshotsResult
from compactor.observability import logger

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef, SnapshotTypeDef


def describe_source(snapshot_id: str) -> SnapshotTypeDef:
    """The source snapshot, which must exist in this Region, be readable (completed, or pending /
    recovering: prepare waits for those) and be in the standard storage tier."""
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
    if state == "error":
        raise SnapshotNotCompleted(
            f"snapshot {snapshot_id} is in state error "
            f"({snapshot.get('StateMessage') or 'no StateMessage given'}): EC2 could not "
            "complete it and it cannot be read; take a new snapshot of the volume (or pick "
            "another one) and start again"
        )
    if state == "recoverable":
        raise SnapshotNotCompleted(
            f"snapshot {snapshot_id} is in the Recycle Bin (state recoverable): restore it "
            "(RestoreSnapshotFromRecycleBin) and start again"
        )
    if state not in PENDING_STATES and state != "completed":
        raise SnapshotNotCompleted(f"snapshot {snapshot_id} is {state}, not completed")
    if snapshot.get("StorageTier") == "archive":
        expiry = snapshot.get("RestoreExpiryTime")
        raise SnapshotArchived(
            f"snapshot {snapshot_id} is in the archive storage tier (StorageTier archive"
            + (f", its temporary restore ended at {expiry.isoformat()}" if expiry else "")
            + "): a volume cannot be created from it. Restore it first (RestoreSnapshotTier, "
            "permanently or with TemporaryRestoreDays long enough for the job; it takes up to "
            "72 hours), then start again"
        )
    return snapshot


# states a source snapshot can leave on its own to become completed
PENDING_STATES = frozenset({"pending", "recovering"})


def create_from_targets(
    plan: Plan, volumes: Sequence[AttachedVolume], config: Config
) -> list[SnapshotItem]:
    """Snapshot each compacted target volume, once: a retried call finds the earlier snapshots."""
    by_index = {volume["index"]: volume for volume in volumes}
    fields = new_snapshot_fields(plan, config)
    existing = _existing_by_volume(config.stack_name, plan["executionName"])
    items: list[SnapshotItem] = []
    for volume in plan["volumes"]:
        target_volume_id = by_index[volume["index"]]["targetVolumeId"]
        if target_volume_id is None:
            raise InvalidInput(
                f"volume {volume['index']} has no target volume (a dry run makes none): this is "
                "a workflow bug, no snapshot is created in a dry run"
            )
        snapshot_id = existing.get(target_volume_id)
        if snapshot_id is None:
            new = fields[volume["index"]]
            snapshot_id = aws.ec2().create_snapshot(
                VolumeId=target_volume_id,
                Description=new.description,
                TagSpecifications=[tags.specification("snapshot", new.tags)],
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


class NewSnapshotFields(NamedTuple):
    description: str
    tags: dict[str, str]


def new_snapshot_fields(plan: Plan, config: Config) -> dict[int, NewSnapshotFields]:
    """The description and tags of each volume's new snapshot, by volume index, whichever way
    it is made (CreateSnapshot of a target volume, StartSnapshot of a direct one): the source's
    description (else "Compacted copy of <source>"; at most 255 characters, both calls' limit),
    the source's copyable tags, the plan's tags, this stack's ownership tags (role snapshot)
    and the lineage tags."""
    sources = {
        s["SnapshotId"]: s
        for s in aws.ec2().describe_snapshots(
            SnapshotIds=[v["sourceSnapshotId"] for v in plan["volumes"]]
        )["Snapshots"]
    }
    fields: dict[int, NewSnapshotFields] = {}
    for volume in plan["volumes"]:
        source_id = volume["sourceSnapshotId"]
        source = sources[source_id]
        description = source.get("Description") or f"Compacted copy of {source_id}"
        fields[volume["index"]] = NewSnapshotFields(
            description[:255], _new_snapshot_tags(plan, source, source_id, config)
        )
    return fields


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


def check(result: NewSnapshots | SnapshotsResult) -> SnapshotsResult:
    """Progress of the new snapshots; SnapshotFailed when one is in state error.

    When every one is `completed`, they are all tagged delivered (CreateTags, idempotent) before
    this returns `completed: true`: from then on teardown keeps them whatever happens later. A
    throttling or 5xx answer is "not completed yet" (`transientError`), like a snapshot that
    DescribeSnapshots does not list yet right after CreateSnapshot."""
    items = result["snapshots"]
    snapshot_ids = [i["snapshotId"] for i in items]
    try:
        described = {
            s["SnapshotId"]: s
            for s in aws.ec2().describe_snapshots(SnapshotIds=snapshot_ids)["Snapshots"]
        }
    except ClientError as error:
        if aws.is_transient(error) or aws.error_code(error) == "InvalidSnapshot.NotFound":
            return _not_yet(items, "DescribeSnapshots", error)
        raise
    checked: list[SnapshotItem] = []
    for item in items:
        snapshot = described.get(item["snapshotId"], {})
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
    if not all(i["state"] == "completed" for i in checked):
        return {"snapshots": checked, "completed": False}
    untagged = [
        snapshot_id
        for snapshot_id in snapshot_ids
        if not tags.is_delivered(tags.from_aws(described[snapshot_id].get("Tags")))
    ]
    if untagged:
        try:
            aws.ec2().create_tags(
                Resources=untagged, Tags=tags.to_aws({tags.DELIVERED: tags.DELIVERED_VALUE})
            )
        except ClientError as error:
            if aws.is_transient(error):
                return _not_yet(checked, "CreateTags", error)
            raise
    return {"snapshots": checked, "completed": True}


def _not_yet(items: Sequence[SnapshotItem], call: str, error: ClientError) -> SnapshotsResult:
    message = f"{call}: {aws.error_code(error)}: {aws.error_message(error)}"
    logger.info("snapshots not checked yet", extra={"error": message})
    return {"snapshots": list(items), "completed": False, "transientError": message}


class NewSnapshotState(TypedDict):
    fullSizeBytes: int | None
    delivered: bool


def describe_new(snapshot_ids: Sequence[str]) -> dict[str, NewSnapshotState]:
    """The new snapshots that still exist: FullSnapshotSizeInBytes (None where EC2 gives none)
    and whether they carry the delivered tag. A filter, not SnapshotIds, so that a snapshot that
    teardown deleted is simply absent instead of an error."""
    if not snapshot_ids:
        return {}
    pages = (
        aws.ec2()
        .get_paginator("describe_snapshots")
        .paginate(
            OwnerIds=["self"], Filters=[{"Name": "snapshot-id", "Values": list(snapshot_ids)}]
        )
    )
    return {
        s["SnapshotId"]: {
            "fullSizeBytes": s.get("FullSnapshotSizeInBytes"),
            "delivered": tags.is_delivered(tags.from_aws(s.get("Tags"))),
        }
        for page in pages
        for s in page["Snapshots"]
    }
