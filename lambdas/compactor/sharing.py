"""copySharing: give the new AMI and its snapshots the sharing of the source AMI and its snapshots.

Called by register_image after the new AMI is registered (execution input `copySharing: true`,
AMI input only). What it copies, read at that moment from the source:

- the AMI's launch permissions (DescribeImageAttribute launchPermission): accounts (UserId),
  organizations (OrganizationArn) and organizational units (OrganizationalUnitArn), added to the
  new AMI with ModifyImageAttribute;
- each source snapshot's createVolumePermission accounts (DescribeSnapshotAttribute), added to
  the new snapshot of the same device with ModifySnapshotAttribute;
- the AMI's DeprecationTime (DescribeImages), set with EnableImageDeprecation. EC2 refuses a time
  in the past: a source that is already deprecated makes the new AMI deprecated at the earliest
  time EC2 accepts (the next whole minute plus one), and the notes say so.

Group "all" (public) is never added, to the AMI or to a snapshot: a public source gives a private
copy and a note. ModifyImageAttribute answers InvalidAMIID.Unavailable while the new AMI is
`pending`, so the AMI is awaited first; still pending when the Lambda's time runs short, the
task raises TransientAwsError and the workflow retries it (register_image then finds the AMI it
registered and comes back here). Every call is idempotent (adding a permission twice is a
no-op). Any other refusal is listed in the result's `warnings` and the other steps still run;
register_image then fails the task with SharingNotCopied (the sharing is part of what the input
asked for), and nothing is undone: the new snapshots and AMI are kept."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from botocore.exceptions import ClientError

from compactor import aws
from compactor.errors import TransientAwsError
from compactor.models import LaunchPermission, SharingResult, SnapshotItem, SnapshotSharing
from compactor.observability import logger

PUBLIC_GROUP = "all"
# launch permission keys EC2 answers with that this copies (Group "all" never)
LAUNCH_PERMISSION_KEYS = ("UserId", "OrganizationArn", "OrganizationalUnitArn")
# entries per ModifyImageAttribute / ModifySnapshotAttribute call
MODIFY_BATCH = 50
POLL_SECONDS = 5.0
# time kept back from the Lambda's remaining time for the calls after the wait
RESERVE_SECONDS = 20.0

_sleep: Callable[[float], None] = time.sleep


def copy(
    source_image_id: str,
    image_id: str,
    snapshots: Sequence[SnapshotItem],
    seconds_left: float,
    now: datetime | None = None,
) -> SharingResult:
    """Copy the source's sharing to `image_id` and its snapshots; returns what was copied."""
    result: SharingResult = {
        "launchPermissions": [],
        "createVolumePermissions": [],
        "deprecationTime": None,
        "sourcePublic": False,
        "notes": [],
        "warnings": [],
    }
    state = wait_available(image_id, seconds_left)
    if state != "available":
        result["warnings"].append(
            f"copySharing: the new AMI {image_id} is {state}, not available: nothing was shared"
        )
        return result
    _guarded(
        result, "launch permissions", lambda: _launch_permissions(source_image_id, image_id, result)
    )
    for item in snapshots:
        _guarded(
            result,
            f"createVolumePermission of {item['sourceSnapshotId']}",
            lambda item=item: _volume_permissions(item, result),  # type: ignore[misc]
        )
    _guarded(
        result,
        "deprecation time",
        lambda: _deprecation(source_image_id, image_id, now or datetime.now(UTC), result),
    )
    logger.info("copied sharing", extra={"imageId": image_id, "sharing": result})
    return result


def wait_available(image_id: str, seconds_left: float) -> str:
    """The new AMI's state once it is no longer pending (or missing: DescribeImages may not list
    a just-registered AMI yet); TransientAwsError when that takes longer than the time left."""
    deadline = time.monotonic() + max(seconds_left - RESERVE_SECONDS, 0.0)
    while True:
        state = _image_state(image_id)
        if state not in ("pending", None):
            return state
        if time.monotonic() + POLL_SECONDS > deadline:
            raise TransientAwsError(
                f"the new AMI {image_id} is still {state or 'not visible'}: its launch "
                "permissions can be set only once it is available; the workflow retries this step"
            )
        _sleep(POLL_SECONDS)


def _image_state(image_id: str) -> str | None:
    try:
        images = aws.ec2().describe_images(ImageIds=[image_id])["Images"]
    except ClientError as error:
        if aws.error_code(error) in ("InvalidAMIID.NotFound", "InvalidAMIID.Unavailable"):
            return None
        raise
    return str(images[0].get("State")) if images else None


def _guarded(result: SharingResult, what: str, step: Callable[[], None]) -> None:
    """Run one copy step; EC2 refusing it is a warning (throttling goes up and is retried)."""
    try:
        step()
    except ClientError as error:
        if aws.is_transient(error):
            raise
        result["warnings"].append(
            f"copySharing: could not copy the {what}: {aws.error_code(error)}: "
            f"{aws.error_message(error)}"
        )


def _launch_permissions(source_image_id: str, image_id: str, result: SharingResult) -> None:
    answer = aws.ec2().describe_image_attribute(
        ImageId=source_image_id, Attribute="launchPermission"
    )
    wanted: list[LaunchPermission] = []
    for permission in answer.get("LaunchPermissions", []):
        if permission.get("Group") == PUBLIC_GROUP:
            result["sourcePublic"] = True
            result["notes"].append(
                f"the source AMI {source_image_id} is public; the new AMI {image_id} was NOT made "
                "public (copySharing never adds the group all): make it public yourself if you "
                "mean to (ModifyImageAttribute LaunchPermission Add Group=all)"
            )
            continue
        entry = {k: str(permission[k]) for k in LAUNCH_PERMISSION_KEYS if k in permission}  # type: ignore[literal-required]
        if entry and entry not in wanted:
            wanted.append(entry)  # type: ignore[arg-type]
    for start in range(0, len(wanted), MODIFY_BATCH):
        aws.ec2().modify_image_attribute(
            ImageId=image_id,
            LaunchPermission={"Add": wanted[start : start + MODIFY_BATCH]},  # type: ignore[typeddict-item]
        )
    result["launchPermissions"] = wanted


def _volume_permissions(item: SnapshotItem, result: SharingResult) -> None:
    source, new = item["sourceSnapshotId"], item["snapshotId"]
    answer = aws.ec2().describe_snapshot_attribute(
        SnapshotId=source, Attribute="createVolumePermission"
    )
    user_ids: list[str] = []
    for permission in answer.get("CreateVolumePermissions", []):
        if permission.get("Group") == PUBLIC_GROUP:
            result["sourcePublic"] = True
            result["notes"].append(
                f"the source snapshot {source} is public; the new snapshot {new} was NOT made "
                "public (copySharing never adds the group all)"
            )
        elif "UserId" in permission and permission["UserId"] not in user_ids:
            user_ids.append(permission["UserId"])
    for start in range(0, len(user_ids), MODIFY_BATCH):
        aws.ec2().modify_snapshot_attribute(
            SnapshotId=new,
            Attribute="createVolumePermission",
            OperationType="add",
            UserIds=user_ids[start : start + MODIFY_BATCH],
        )
    if user_ids:
        entry: SnapshotSharing = {
            "snapshotId": new,
            "sourceSnapshotId": source,
            "userIds": user_ids,
        }
        result["createVolumePermissions"].append(entry)


def _deprecation(source_image_id: str, image_id: str, now: datetime, result: SharingResult) -> None:
    images = aws.ec2().describe_images(ImageIds=[source_image_id])["Images"]
    raw = images[0].get("DeprecationTime") if images else None
    if not raw:
        return
    at = parse_time(str(raw))
    earliest = now.replace(second=0, microsecond=0) + timedelta(minutes=2)
    if at < earliest:
        result["notes"].append(
            f"the source AMI is deprecated at {raw}, in the past or within two minutes; EC2 "
            "accepts no past time,"
            f" so the new AMI is deprecated at {_iso(earliest)}, about the earliest it allows"
        )
        at = earliest
    aws.ec2().enable_image_deprecation(ImageId=image_id, DeprecateAt=at)
    result["deprecationTime"] = _iso(at)


def parse_time(value: str) -> datetime:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
