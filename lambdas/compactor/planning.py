"""prepare: validate the execution input against this account and Region and produce the plan.
It only reads: nothing is created, so a bad input leaves nothing behind.

A source snapshot that is still `pending` (tagged at creation, by DLM or AWS Backup) is not an
error: every check is made all the same and the plan comes back with `sourcesReady: false` and
`pendingSnapshotIds`; the state machine calls prepare again (a bounded poll) until it says
`sourcesReady: true`, and only that last plan is used. While pending, a snapshot has its
VolumeSize, encryption, key and tags but usually no FullSnapshotSizeInBytes, so the bytes to copy
(and with them the instance size and the compaction bound) count the whole volume for it; the
final plan counts what the completed snapshot holds."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING

from compactor import aws, contract, fast_snapshot_restore, images, kms, sizing, snapshots, tags
from compactor.config import Config
from compactor.errors import InvalidInput, SnapshotArchived, TooManyVolumes, VolumeTooLarge
from compactor.models import ImageSpec, Plan, SourceRef, VolumePlan
from compactor.validation import ExecutionInput, parse_execution_input

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import SnapshotTypeDef, TagTypeDef


def plan(
    raw_input: object, execution_name: str, config: Config, account_id: str | None = None
) -> Plan:
    """account_id: this account (the handler takes it from its function ARN); looked up with
    GetCallerIdentity only when None and a source is encrypted."""
    if not isinstance(execution_name, str) or not execution_name:
        raise InvalidInput("executionName is missing from the prepare payload")
    request = parse_execution_input(raw_input, aws.region(), config.trigger_tag_key)
    _check_availability_zones(request.fast_snapshot_restore_azs)
    target_key = (
        kms.usable_key_arn(request.kms_key_id, "kmsKeyId of the input")
        if request.kms_key_id
        else None
    )
    source, image, mappings = _source(request, config)
    sources = [snapshots.describe_source(snapshot_id) for _, snapshot_id in mappings]
    _check_tag_counts(sources, image, request, config)
    this_account, notes = cache(lambda: account_id or kms.caller_account()), list[str]()
    volumes = [
        _volume_plan(index, device, source_snapshot, target_key, config, this_account, notes)
        for index, ((device, _), source_snapshot) in enumerate(zip(mappings, sources, strict=True))
    ]
    pending = [s["SnapshotId"] for s in sources if s.get("State") in snapshots.PENDING_STATES]
    bytes_to_copy = sum(
        v["sourceFullSizeBytes"]
        if v["sourceFullSizeBytes"] is not None
        else v["sizeGiB"] * sizing.GIB
        for v in volumes
    )
    if request.fast_snapshot_restore_azs:
        # the new snapshots have the sizes of the source volumes
        fast_snapshot_restore.check_sizes({v["sourceSnapshotId"]: v["sizeGiB"] for v in volumes})
        fast_snapshot_restore.check_limit(len(volumes))
    # while a source is pending its whole volume counts, an upper bound: the size refusals wait
    # for the plan of completed sources, which counts what they hold (a dry run: sizing.plan)
    size = sizing.plan(bytes_to_copy, request.verify, config, not pending, request.dry_run)
    if not pending:
        _check_restore_expiry(sources, size.budget_seconds)
    return {
        "executionName": execution_name,
        "source": source,
        "volumes": volumes,
        "image": image,
        "method": request.method,
        "target": request.target,
        "jobs": request.jobs,
        "verify": request.verify,
        "fastSnapshotRestoreAzs": list(request.fast_snapshot_restore_azs),
        "kmsKeyId": target_key,
        "imageName": _image_name(request, image, execution_name),
        "tags": request.tags,
        "sourcesReady": not pending,
        "pendingSnapshotIds": pending,
        "instanceTypes": size.instance_types,
        "compactionPoll": size.compaction_poll,
        "bytesToCopy": bytes_to_copy,
        "dryRun": request.dry_run,
        "notes": notes,
        "copySharing": request.copy_sharing,
    }


def _source(
    request: ExecutionInput, config: Config
) -> tuple[SourceRef, ImageSpec | None, list[tuple[str | None, str]]]:
    """What to compact, the source AMI's attributes (None for a snapshot) and the (device name,
    snapshot id) of each source volume."""
    if request.image_id is None:
        assert request.snapshot_id is not None
        return (
            {"kind": "snapshot", "snapshotId": request.snapshot_id},
            None,
            [(None, request.snapshot_id)],
        )
    source_image = images.describe_source(request.image_id)
    image = images.capture(source_image, images.uefi_data(request.image_id), config.trigger_tag_key)
    mappings: list[tuple[str | None, str]] = list(images.snapshot_mappings(image))
    most = contract.limit("maxVolumesPerJob")
    if len(mappings) > most:
        raise TooManyVolumes(
            f"AMI {request.image_id} has {len(mappings)} EBS volumes from snapshots; one job "
            f"handles at most {most}"
        )
    if not mappings:
        raise InvalidInput(f"AMI {request.image_id} has no EBS volume backed by a snapshot")
    return {"kind": "image", "imageId": request.image_id}, image, mappings


def _check_tag_counts(
    sources: Sequence[SnapshotTypeDef],
    image: ImageSpec | None,
    request: ExecutionInput,
    config: Config,
) -> None:
    for source_snapshot in sources:
        _check_tag_count(
            source_snapshot.get("Tags"), request.tags, config, source_snapshot["SnapshotId"]
        )
    if image is not None:
        _check_tag_count(tags.to_aws(image["tags"]), request.tags, config, image["imageId"])


def _check_restore_expiry(sources: Sequence[SnapshotTypeDef], budget_seconds: int) -> None:
    """A temporarily restored snapshot goes back to the archive tier at RestoreExpiryTime: it
    must stay restored until the job is done (the compaction budget plus the other phases)."""
    now = datetime.datetime.now(datetime.UTC)
    done_by = now + datetime.timedelta(seconds=budget_seconds + sizing.OTHER_PHASES_SECONDS)
    for snapshot in sources:
        expiry = snapshot.get("RestoreExpiryTime")
        if expiry is None or expiry >= done_by:
            continue
        ended = expiry <= now
        raise SnapshotArchived(
            f"snapshot {snapshot['SnapshotId']} is restored from the archive tier only "
            f"temporarily: its restore {'ended' if ended else 'ends'} at {expiry.isoformat()}"
            + ("" if ended else f", before this job may be done ({done_by.isoformat()})")
            + ". Extend the restore (RestoreSnapshotTier with TemporaryRestoreDays, or "
            "PermanentRestore) and start again"
        )


def _check_tag_count(
    source_tags: Sequence[TagTypeDef] | None,
    extra: Mapping[str, str],
    config: Config,
    source_id: str,
) -> None:
    """The outputs get the source's user tags, the input's and this project's: EC2 takes 50."""
    merged = tags.copyable(tags.from_aws(source_tags), config.trigger_tag_key) | dict(extra)
    if len(merged) + tags.OWN_TAGS_PER_OUTPUT > tags.MAX_PER_RESOURCE:
        raise InvalidInput(
            f"the copy of {source_id} would need {len(merged) + tags.OWN_TAGS_PER_OUTPUT} tags "
            f"(its user tags, the input's tags and {tags.OWN_TAGS_PER_OUTPUT} of this project), "
            f"more than the {tags.MAX_PER_RESOURCE} EC2 allows: pass fewer tags"
        )


def _check_availability_zones(names: tuple[str, ...]) -> None:
    if not names:
        return
    zones = aws.ec2().describe_availability_zones(AllAvailabilityZones=False)["AvailabilityZones"]
    known = {z["ZoneName"] for z in zones if "ZoneName" in z}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise InvalidInput(
            f"fastSnapshotRestoreAzs: {', '.join(unknown)} is not an Availability Zone of "
            f"{aws.region()} (known: {', '.join(sorted(known))})"
        )


def _volume_plan(
    index: int,
    device_name: str | None,
    snapshot: SnapshotTypeDef,
    target_key: str | None,
    config: Config,
    this_account: Callable[[], str],
    notes: list[str],
) -> VolumePlan:
    snapshot_id = snapshot["SnapshotId"]
    size = snapshot["VolumeSize"]
    if size > config.max_volume_gib:
        raise VolumeTooLarge(
            f"snapshot {snapshot_id} is of a {size} GiB volume, more than MAX_VOLUME_GIB="
            f"{config.max_volume_gib}: raise maxVolumeGiB in the stack settings to compact it"
        )
    encrypted = bool(snapshot.get("Encrypted"))
    key = target_key
    source_arn: str | None = None
    if encrypted:
        source_key = snapshot.get("KmsKeyId")
        # the source volume is created with the snapshot's key, so that key must be usable too
        source_arn = (
            kms.usable_key_arn(source_key, f"key of snapshot {snapshot_id}") if source_key else None
        )
        owner = kms.key_account(source_arn)
        if owner is not None and owner != this_account():
            # the outputs must not depend on a key its owner can disable, revoke or delete:
            # the input's key, else this account's EBS default key (Encrypted, no KmsKeyId)
            notes.append(
                f"The new snapshot of {snapshot_id} is encrypted with "
                + (f"KMS key {target_key}" if target_key else "this account's default EBS key")
                + f", not with the source's key {source_arn}: that key belongs to account "
                f"{owner}, which can disable, revoke or delete it and so make the copy unreadable "
                "here."
            )
        else:
            key = key or source_arn
    return {
        "index": index,
        "sourceSnapshotId": snapshot_id,
        "deviceName": device_name,
        "sizeGiB": size,
        "encrypted": encrypted or key is not None,
        "kmsKeyId": key,
        "targetKmsKeyId": key,
        "sourceKmsKeyId": source_arn,
        "sourceFullSizeBytes": snapshot.get("FullSnapshotSizeInBytes"),
    }


def _image_name(
    request: ExecutionInput, image: ImageSpec | None, execution_name: str
) -> str | None:
    if image is None:
        return None
    name = request.image_name or images.default_name(image["name"], execution_name)
    existing = images.owned_image_named(name)
    if existing is not None:
        raise InvalidInput(
            f"an AMI named {name!r} already exists ({existing['ImageId']}): pass another imageName"
        )
    return name
