"""teardown: delete what one execution created, found by its stack and execution tags.

Each call does what it can and reports how much is still there (`remaining`); the state machine
calls again, in a bounded loop, until nothing remains. Resources without both tags (or with other
values) are never touched: the tag filters select them and each one's tags are checked again
before acting.

Outcomes: `success` and `retry` remove the transfer instance and the volumes; `failure` and
`cleanup` (the cleanup state machine, started when an execution ended FAILED, TIMED_OUT or
ABORTED) also deregister the execution's AMIs and delete its new snapshots, EXCEPT what was
delivered: a snapshot tagged `ebs-snapshot-compactor:delivered` (check_snapshots puts it once all
new snapshots are completed) is never deleted, and neither is an AMI carrying it (register_image
registers the AMI with it) or any AMI once any snapshot of the execution is delivered; the roles'
explicit Denies back this (lib/delivered-outputs.ts). `keep` names more to leave in place. `retry`
(before a relaunch) also deletes the undelivered snapshots: with target snapshot, the direct
snapshots of the lost attempt (the next attempt starts new ones). Every outcome deletes the
execution's undelivered snapshots in state `error` (a direct snapshot EBS cancelled: never an
output).

A pending snapshot whose DeleteSnapshot EC2 refuses (IncorrectState, or any other 4xx but
InUse: AWS does not document whether a pending direct snapshot may be deleted) is not waited
for: it is listed in `leftToTimeOut`, not counted in `remaining`. A direct snapshot that nobody
writes to turns `error` after limits.directSnapshotTimeoutMinutes, and the sweeper (or a later
teardown) deletes it then.

Volumes in every state: `available` and `error` are deleted; `creating`, `in-use` (attaching,
attached, detaching) and `deleting` count as remaining: the instance is terminated first, and EC2
detaches its volumes (and deletes those with DeleteOnTermination) on its own.

Answers that mean "later", not "no": InvalidSnapshot.InUse (EC2 refuses DeleteSnapshot of an AMI's
snapshot until the AMI's deregistration has settled), VolumeInUse / IncorrectState /
IncorrectInstanceState (a resource busy for a moment), and every throttling or 5xx answer
(compactor.aws.is_transient) on any call: they count as remaining, and teardown never raises for
them, so the bounded loop asks again.

The execution's objects in the stack's bucket (the source block lists) are deleted on every
outcome but `retry`: the next launch attempt still needs them.

What teardown cannot see: tag-filtered Describe* answers lag right after a resource was created
(and an aborted execution's Lambda may still create one after teardown ran). A call cannot delete
what the answers do not list yet, so `remaining: 0` means "nothing visible now"; that is why the
cleanup state machine waits past the longest task timeout and then runs teardown again."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from botocore.exceptions import ClientError

from compactor import aws, source_blocks, tags
from compactor.errors import InvalidInput
from compactor.models import TeardownResult
from compactor.observability import logger

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef

# what to delete (cleanup = failure, run by the cleanup state machine): the Task states' literal
# `outcome` (contract/tasks.json)
Outcome = Literal["success", "failure", "retry", "cleanup"]
OUTCOMES: tuple[Outcome, ...] = ("success", "retry", "failure", "cleanup")
# outcomes that also remove the execution's (undelivered) snapshots and AMIs
_REMOVES_OUTPUTS: frozenset[str] = frozenset({"failure", "cleanup"})
# outcomes that remove every undelivered snapshot (the others: only those in state error)
_REMOVES_SNAPSHOTS: frozenset[str] = _REMOVES_OUTPUTS | {"retry"}
_GONE_INSTANCE_STATES = frozenset({"terminated"})
# volume states (DescribeVolumes): creating | available | in-use | deleting | deleted | error
_DELETABLE_VOLUME_STATES = frozenset({"available", "error"})
_GONE_VOLUME_STATES = frozenset({"deleted"})
_GONE_IMAGE_STATES = frozenset({"deregistered"})
# a resource that is still being deleted by an earlier call, or that is busy for a moment
_BUSY_ERRORS = frozenset(
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


class _Later(Exception):
    """A call answered "not now" (throttled, 5xx, busy); already counted and recorded."""


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
    deleted_objects: list[str] = field(default_factory=list)
    kept_snapshots: list[str] = field(default_factory=list)
    kept_images: list[str] = field(default_factory=list)
    transient_errors: list[str] = field(default_factory=list)
    left_to_time_out: list[str] = field(default_factory=list)

    def later(self, what: str, error: ClientError, count: int = 1) -> _Later:
        """Count `count` resources as remaining because `what` answered "not now"."""
        self.remaining += count
        code = aws.error_code(error) or "error"
        self.transient_errors.append(f"{what}: {code}")
        logger.info("not done yet", extra={"call": what, "error": code})
        return _Later(what)


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


def teardown(
    stack_name: str, execution_name: str, outcome: str, keep: Keep, bucket: str
) -> TeardownResult:
    if not stack_name or not execution_name:
        raise InvalidInput("teardown needs the stack name and the execution name")
    if outcome not in OUTCOMES:
        raise InvalidInput(f"teardown outcome {outcome!r} is invalid: use one of {OUTCOMES}")
    owned = tags.ownership_filters(stack_name, execution_name)
    progress = _Progress()
    # a step that got a "not now" answer stops; the others still run
    for step in (_instances, _volumes):
        with contextlib.suppress(_Later):
            step(owned, stack_name, execution_name, progress)
    with contextlib.suppress(_Later):
        _outputs(owned, stack_name, execution_name, keep, progress, outcome)
    if outcome != "retry":
        deleted, later = source_blocks.delete_execution_objects(bucket, execution_name)
        progress.deleted_objects.extend(deleted)
        progress.remaining += len(later)
        progress.transient_errors.extend(later)
    logger.info("teardown", extra={"outcome": outcome, "progress": progress.__dict__})
    return {
        "remaining": progress.remaining,
        "terminatedInstances": progress.terminated_instances,
        "deletedVolumes": progress.deleted_volumes,
        "deletedSnapshots": progress.deleted_snapshots,
        "deregisteredImages": progress.deregistered_images,
        "deletedObjects": progress.deleted_objects,
        "keptSnapshots": progress.kept_snapshots,
        "keptImages": progress.kept_images,
        "transientErrors": progress.transient_errors,
        "leftToTimeOut": progress.left_to_time_out,
    }


def _owned(resource: Mapping[str, Any], stack_name: str, execution_name: str) -> bool:
    return tags.is_owned(tags.from_aws(resource.get("Tags")), stack_name, execution_name)


def _describe(what: str, progress: _Progress, pages: Callable[[], Iterable[Any]]) -> list[Any]:
    """Every page of a Describe* call; a transient answer counts one remaining, stops the step."""
    try:
        return list(pages())
    except ClientError as error:
        if aws.is_transient(error):
            raise progress.later(what, error) from error
        raise


def _instances(
    owned: Sequence[FilterTypeDef], stack_name: str, execution_name: str, progress: _Progress
) -> None:
    pages = _describe(
        "DescribeInstances",
        progress,
        lambda: aws.ec2().get_paginator("describe_instances").paginate(Filters=owned),
    )
    live = [
        instance
        for page in pages
        for reservation in page["Reservations"]
        for instance in reservation.get("Instances", [])
        if instance.get("State", {}).get("Name") not in _GONE_INSTANCE_STATES
        and _owned(instance, stack_name, execution_name)
    ]
    to_terminate = [
        i["InstanceId"] for i in live if i.get("State", {}).get("Name") != "shutting-down"
    ]
    progress.remaining += len(live) - len(to_terminate)
    if not to_terminate:
        return
    try:
        states = aws.ec2().terminate_instances(InstanceIds=to_terminate)["TerminatingInstances"]
    except ClientError as error:
        code = aws.error_code(error)
        if aws.is_transient(error) or code in _BUSY_ERRORS:
            raise progress.later("TerminateInstances", error, len(to_terminate)) from error
        if code in _ALREADY_GONE_ERRORS:
            return
        raise
    progress.terminated_instances.extend(to_terminate)
    progress.remaining += sum(
        1 for s in states if s.get("CurrentState", {}).get("Name") not in _GONE_INSTANCE_STATES
    )


def _volumes(
    owned: Sequence[FilterTypeDef], stack_name: str, execution_name: str, progress: _Progress
) -> None:
    pages = _describe(
        "DescribeVolumes",
        progress,
        lambda: aws.ec2().get_paginator("describe_volumes").paginate(Filters=owned),
    )
    for volume in _flatten(page["Volumes"] for page in pages):
        state = volume.get("State")
        if state in _GONE_VOLUME_STATES or not _owned(volume, stack_name, execution_name):
            continue
        volume_id = volume["VolumeId"]
        if state not in _DELETABLE_VOLUME_STATES:
            # creating; in-use (attaching, attached, detaching) to an instance that teardown
            # terminated, EC2 detaches it; deleting. Also any state EC2 adds later: wait.
            progress.remaining += 1
            continue
        _delete(
            "DeleteVolume",
            lambda resource_id: aws.ec2().delete_volume(VolumeId=resource_id),
            volume_id,
            progress.deleted_volumes,
            progress,
        )


def _outputs(
    owned: Sequence[FilterTypeDef],
    stack_name: str,
    execution_name: str,
    keep: Keep,
    progress: _Progress,
    outcome: str,
) -> None:
    """The execution's AMIs (failure, cleanup) and new snapshots (failure, cleanup, retry; on
    any outcome those in state error), minus what was delivered or is to be kept. The
    snapshots are described first: without knowing which are delivered, nothing is removed."""
    snapshot_pages = _describe(
        "DescribeSnapshots",
        progress,
        lambda: (
            aws.ec2().get_paginator("describe_snapshots").paginate(OwnerIds=["self"], Filters=owned)
        ),
    )
    snapshots = [
        s
        for s in _flatten(page["Snapshots"] for page in snapshot_pages)
        if _owned(s, stack_name, execution_name)
    ]
    delivered = {
        s["SnapshotId"] for s in snapshots if tags.is_delivered(tags.from_aws(s.get("Tags")))
    }

    if outcome not in _REMOVES_OUTPUTS:
        # success / retry: no AMI is touched, nor a snapshot one uses
        doomed = [
            s for s in snapshots if outcome in _REMOVES_SNAPSHOTS or s.get("State") == "error"
        ]
        if doomed:
            in_images = {
                i
                for image in _own_images(owned, stack_name, execution_name, progress)
                for i in _image_snapshot_ids(image)
            }
            for snapshot in doomed:
                _snapshot(snapshot, delivered, keep, in_images, progress)
        return
    used_by_kept_images = _images(
        _own_images(owned, stack_name, execution_name, progress), delivered, keep, progress
    )
    for snapshot in snapshots:
        _snapshot(snapshot, delivered, keep, used_by_kept_images, progress)


def _own_images(
    owned: Sequence[FilterTypeDef], stack_name: str, execution_name: str, progress: _Progress
) -> list[Any]:
    return [
        image
        for page in _describe(
            "DescribeImages",
            progress,
            lambda: (
                aws.ec2().get_paginator("describe_images").paginate(Owners=["self"], Filters=owned)
            ),
        )
        for image in page["Images"]
        if image.get("State") not in _GONE_IMAGE_STATES
        and _owned(image, stack_name, execution_name)
    ]


def _snapshot(
    snapshot: Mapping[str, Any],
    delivered: set[str],
    keep: Keep,
    used_by_kept_images: set[str],
    progress: _Progress,
) -> None:
    """Deletes one snapshot of the execution unless it is to stay. A pending one EC2 refuses to
    delete is left to its timeout (`leftToTimeOut`), not waited for."""
    snapshot_id = snapshot["SnapshotId"]
    if (
        snapshot_id in delivered
        or snapshot_id in keep.snapshot_ids
        or snapshot_id in used_by_kept_images
    ):
        progress.kept_snapshots.append(snapshot_id)
        return
    try:
        aws.ec2().delete_snapshot(SnapshotId=snapshot_id)
    except ClientError as error:
        code = aws.error_code(error)
        if code in _ALREADY_GONE_ERRORS:
            return
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        refused = code == "IncorrectState" or (400 <= status < 500 and code not in _BUSY_ERRORS)
        if snapshot.get("State") == "pending" and refused and not aws.is_transient(error):
            progress.left_to_time_out.append(snapshot_id)
            logger.warning(
                "pending snapshot left to its timeout",
                extra={"snapshotId": snapshot_id, "error": code},
            )
            return
        if code in _BUSY_ERRORS or aws.is_transient(error):
            progress.later(f"DeleteSnapshot {snapshot_id}", error)
            return
        raise
    progress.deleted_snapshots.append(snapshot_id)


def _images(
    images: Sequence[Mapping[str, Any]], delivered: set[str], keep: Keep, progress: _Progress
) -> set[str]:
    """Deregisters the execution's AMIs but those to keep; returns the snapshots the kept ones
    use. An AMI exists only after delivery: once anything is delivered, every AMI stays, and so
    does an AMI tagged delivered (register_image tags it so; IAM refuses its deregistration)."""
    used_by_kept_images: set[str] = set()
    for image in images:
        image_id = image["ImageId"]
        image_snapshots = set(_image_snapshot_ids(image))
        if (
            image_id == keep.image_id
            or delivered
            or tags.is_delivered(tags.from_aws(image.get("Tags")))
            or image_snapshots & keep.snapshot_ids
        ):
            progress.kept_images.append(image_id)
            used_by_kept_images |= image_snapshots
            continue
        _delete(
            "DeregisterImage",
            lambda resource_id: aws.ec2().deregister_image(ImageId=resource_id),
            image_id,
            progress.deregistered_images,
            progress,
        )
    return used_by_kept_images


def _image_snapshot_ids(image: Mapping[str, Any]) -> Iterator[str]:
    for mapping in image.get("BlockDeviceMappings", []):
        snapshot_id = mapping.get("Ebs", {}).get("SnapshotId")
        if snapshot_id:
            yield str(snapshot_id)


def _flatten(pages: Iterable[Sequence[Any]]) -> Iterable[Any]:
    for page in pages:
        yield from page


def _delete(
    what: str,
    call: Callable[[str], object],
    resource_id: str,
    done: list[str],
    progress: _Progress,
) -> None:
    try:
        call(resource_id)
    except ClientError as error:
        code = aws.error_code(error)
        if code in _ALREADY_GONE_ERRORS:
            return
        if code in _BUSY_ERRORS or aws.is_transient(error):
            progress.later(f"{what} {resource_id}", error)
            return
        raise
    done.append(resource_id)
