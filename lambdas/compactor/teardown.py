"""teardown: delete what one execution created, found by its stack and execution tags.

Each call does what it can and reports how much is still there; the state machine calls again
until nothing remains. Resources without both tags (or with other values) are never touched:
the tag filters select them and each one's tags are checked again before acting."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from compactor import aws, tags
from compactor.errors import InvalidInput
from compactor.models import Outcome, TeardownResult
from compactor.observability import logger

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef

OUTCOMES: tuple[Outcome, ...] = ("success", "failure", "retry")
_GONE_INSTANCE_STATES = frozenset({"terminated"})
# a resource that is still being deleted by an earlier call, or that is busy for a moment
_TRANSIENT_ERRORS = frozenset(
    {"IncorrectState", "VolumeInUse", "InvalidSnapshot.InUse", "IncorrectInstanceState"}
)
_ALREADY_GONE_ERRORS = frozenset(
    {
        "InvalidVolume.NotFound",
        "InvalidSnapshot.NotFound",
        "InvalidAMIID.NotFound",
        "InvalidAMIID.Unavailable",
        "InvalidInstanceID.NotFound",
    }
)


@dataclass
class Keep:
    snapshot_ids: frozenset[str] = frozenset()
    image_id: str | None = None


@dataclass
class _Progress:
    remaining: int = 0
    terminated_instances: list[str] = field(default_factory=list)
    deleted_volumes: list[str] = field(default_factory=list)
    deleted_snapshots: list[str] = field(default_factory=list)
    deregistered_images: list[str] = field(default_factory=list)


def parse_keep(raw: Any) -> Keep:
    if raw is None:
        return Keep()
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"teardown keep must be an object, got {raw!r}")
    snapshot_ids = raw.get("snapshotIds") or []
    image_id = raw.get("imageId")
    if not isinstance(snapshot_ids, list) or not all(isinstance(s, str) for s in snapshot_ids):
        raise InvalidInput(f"teardown keep.snapshotIds must be a list of ids, got {snapshot_ids!r}")
    if image_id is not None and not isinstance(image_id, str):
        raise InvalidInput(f"teardown keep.imageId must be an id or null, got {image_id!r}")
    return Keep(frozenset(snapshot_ids), image_id)


def teardown(stack_name: str, execution_name: str, outcome: str, keep: Keep) -> TeardownResult:
    if not stack_name or not execution_name:
        raise InvalidInput("teardown needs the stack name and the execution name")
    if outcome not in OUTCOMES:
        raise InvalidInput(f"teardown outcome {outcome!r} is invalid: use one of {OUTCOMES}")
    owned = tags.ownership_filters(stack_name, execution_name)
    progress = _Progress()
    _instances(owned, stack_name, execution_name, progress)
    _volumes(owned, stack_name, execution_name, progress)
    if outcome == "failure":
        # AMIs first: a snapshot cannot be deleted while an AMI uses it
        _images(owned, stack_name, execution_name, keep, progress)
        _snapshots(owned, stack_name, execution_name, keep, progress)
    logger.info("teardown", extra={"outcome": outcome, "progress": progress.__dict__})
    return {
        "remaining": progress.remaining,
        "terminatedInstances": progress.terminated_instances,
        "deletedVolumes": progress.deleted_volumes,
        "deletedSnapshots": progress.deleted_snapshots,
        "deregisteredImages": progress.deregistered_images,
    }


def _owned(resource: Mapping[str, Any], stack_name: str, execution_name: str) -> bool:
    return tags.is_owned(tags.from_aws(resource.get("Tags")), stack_name, execution_name)


def _instances(
    owned: Sequence[FilterTypeDef], stack_name: str, execution_name: str, progress: _Progress
) -> None:
    live = [
        instance
        for page in aws.ec2().get_paginator("describe_instances").paginate(Filters=owned)
        for reservation in page["Reservations"]
        for instance in reservation.get("Instances", [])
        if instance.get("State", {}).get("Name") not in _GONE_INSTANCE_STATES
        and _owned(instance, stack_name, execution_name)
    ]
    to_terminate = [
        i["InstanceId"] for i in live if i.get("State", {}).get("Name") != "shutting-down"
    ]
    if to_terminate:
        states = aws.ec2().terminate_instances(InstanceIds=to_terminate)["TerminatingInstances"]
        progress.terminated_instances.extend(to_terminate)
        progress.remaining += sum(
            1 for s in states if s.get("CurrentState", {}).get("Name") not in _GONE_INSTANCE_STATES
        )
    progress.remaining += len(live) - len(to_terminate)


def _volumes(
    owned: Sequence[FilterTypeDef], stack_name: str, execution_name: str, progress: _Progress
) -> None:
    for page in aws.ec2().get_paginator("describe_volumes").paginate(Filters=owned):
        for volume in page["Volumes"]:
            if not _owned(volume, stack_name, execution_name):
                continue
            volume_id = volume["VolumeId"]
            if volume.get("State") != "available":
                # attached to an instance that is going away (DeleteOnTermination), or deleting
                progress.remaining += 1
                continue
            _delete(
                lambda resource_id: aws.ec2().delete_volume(VolumeId=resource_id),
                volume_id,
                progress.deleted_volumes,
                progress,
            )


def _images(
    owned: Sequence[FilterTypeDef],
    stack_name: str,
    execution_name: str,
    keep: Keep,
    progress: _Progress,
) -> None:
    found = aws.ec2().describe_images(Owners=["self"], Filters=list(owned))["Images"]
    for image in found:
        image_id = image["ImageId"]
        if (
            image_id == keep.image_id
            or image.get("State") == "deregistered"
            or not _owned(image, stack_name, execution_name)
        ):
            continue
        _delete(
            lambda resource_id: aws.ec2().deregister_image(ImageId=resource_id),
            image_id,
            progress.deregistered_images,
            progress,
        )


def _snapshots(
    owned: Sequence[FilterTypeDef],
    stack_name: str,
    execution_name: str,
    keep: Keep,
    progress: _Progress,
) -> None:
    pages = aws.ec2().get_paginator("describe_snapshots").paginate(OwnerIds=["self"], Filters=owned)
    for snapshot in _flatten(page["Snapshots"] for page in pages):
        snapshot_id = snapshot["SnapshotId"]
        if snapshot_id in keep.snapshot_ids or not _owned(snapshot, stack_name, execution_name):
            continue
        _delete(
            lambda resource_id: aws.ec2().delete_snapshot(SnapshotId=resource_id),
            snapshot_id,
            progress.deleted_snapshots,
            progress,
        )


def _flatten(pages: Iterable[Sequence[Any]]) -> Iterable[Any]:
    for page in pages:
        yield from page


def _delete(
    call: Callable[[str], object], resource_id: str, done: list[str], progress: _Progress
) -> None:
    try:
        call(resource_id)
    except ClientError as error:
        code = aws.error_code(error)
        if code in _ALREADY_GONE_ERRORS:
            return
        if code in _TRANSIENT_ERRORS:
            logger.info("not deleted yet", extra={"resource": resource_id, "error": code})
            progress.remaining += 1
            return
        raise
    done.append(resource_id)
