"""attach_volumes: create the source volumes from the source snapshots in the transfer
instance's AZ and attach them, once the instance is online (docs/contract.md, "Attach volumes").

Not mapped at launch on purpose: a source disk from the same base image as the transfer AMI
carries the same root filesystem UUID, and an instance launched with it can boot from it.

Every call is idempotent and does one step per volume: find it (tags), create it if missing
(CreateVolume with a ClientToken, so a retried call gets the same volume back even while
tag-filtered DescribeVolumes does not list it yet), attach it when `available`, and report done
only when every source volume is `in-use` and attached to this instance. The poll loop of the
state machine calls it again until then."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from compactor import aws, tags
from compactor.config import Config
from compactor.ec2.instances import describe, raise_if_lost
from compactor.ec2.launch import gp3_performance, is_about_initialization_rate
from compactor.errors import VolumeCreationFailed
from compactor.models import AttachedVolume, AttachResult, InstanceResult, Plan, VolumePlan
from compactor.observability import emit, logger
from compactor.volumes import has_target_volumes, source_device, target_device

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import (
        CreateVolumeRequestTypeDef,
        FilterTypeDef,
        VolumeTypeDef,
    )

# A volume in these states is on its way out: never reused
GONE_STATES = frozenset({"deleting", "deleted"})
# AttachVolume answers that mean "not yet" right after CreateVolume (eventual consistency) or
# while an attachment from a previous call is in progress
ATTACH_NOT_YET = frozenset(
    {"IncorrectState", "InvalidVolume.NotFound", "VolumeInUse", "IncorrectInstanceState"}
)


def attach(plan: Plan, launched: InstanceResult, config: Config) -> AttachResult:
    try:
        return _attach(plan, launched, config)
    except ClientError as error:
        if not aws.is_transient(error):
            raise
        logger.warning("transient error, next poll", extra={"error": str(error)})
        return {
            "done": False,
            "volumes": [],
            "waitingFor": ["an answer from EC2"],
            "transientError": f"{aws.error_code(error)}: {aws.error_message(error)}",
        }


def _attach(plan: Plan, launched: InstanceResult, config: Config) -> AttachResult:
    instance_id = launched["instanceId"]
    instance = describe(instance_id)
    if instance is None:
        return {"done": False, "volumes": [], "waitingFor": [f"instance {instance_id} listed"]}
    raise_if_lost(instance)
    state = instance.get("State", {}).get("Name", "pending")
    if state != "running":
        return {"done": False, "volumes": [], "waitingFor": [f"instance {instance_id} {state}"]}
    zone = instance.get("Placement", {}).get("AvailabilityZone") or launched["availabilityZone"]
    targets = {
        m["DeviceName"]: m["Ebs"]["VolumeId"]
        for m in instance.get("BlockDeviceMappings", [])
        if "DeviceName" in m and "VolumeId" in m.get("Ebs", {})
    }
    found = _source_volumes(plan["executionName"], instance_id, zone, config)
    rate = config.volume_initialization_rate
    volumes: list[AttachedVolume] = []
    waiting: list[str] = []
    for volume in plan["volumes"]:
        index = volume["index"]
        source = found.get(index)
        if source is None:
            source, rate = _create(plan, volume, instance_id, zone, rate, config)
        source_id = source["VolumeId"]
        waiting.extend(_advance(source, index, instance_id))
        target_id = targets.get(target_device(index))
        if not has_target_volumes(plan):
            # launched without targets: a dry run only inspects the sources, target snapshot
            # writes the new snapshots directly
            target_id = None
        elif target_id is None:
            waiting.append(f"target volume {index} at {target_device(index)}")
            continue
        volumes.append(
            {
                "index": index,
                "sourceVolumeId": source_id,
                "targetVolumeId": target_id,
                "sourceDeviceName": source_device(index),
                "targetDeviceName": target_device(index) if target_id else None,
            }
        )
    done = not waiting and len(volumes) == len(plan["volumes"])
    return {"done": done, "volumes": volumes, "waitingFor": waiting}


def _source_volumes(
    execution: str, instance_id: str, zone: str, config: Config
) -> dict[int, VolumeTypeDef]:
    """This execution's source volumes usable by this instance, by volume index: in its AZ, not
    being deleted, not attached to another instance (a lost one of an earlier launch)."""
    filters: list[FilterTypeDef] = [
        *tags.ownership_filters(config.stack_name, execution),
        {"Name": f"tag:{tags.ROLE}", "Values": [tags.ROLE_SOURCE_VOLUME]},
    ]
    found: dict[int, VolumeTypeDef] = {}
    pages = aws.ec2().get_paginator("describe_volumes").paginate(Filters=filters)
    for page in pages:
        for volume in page.get("Volumes", []):
            index_tag = tags.from_aws(volume.get("Tags")).get(tags.VOLUME_INDEX, "")
            if not index_tag.isdigit() or volume.get("State") in GONE_STATES:
                continue
            if volume.get("AvailabilityZone") != zone:
                continue
            holders = {a.get("InstanceId") for a in volume.get("Attachments", [])}
            if holders - {instance_id}:
                continue
            index = int(index_tag)
            # prefer the one already attached to this instance
            if index not in found or instance_id in holders:
                found[index] = volume
    return found


def _create(
    plan: Plan,
    volume: VolumePlan,
    instance_id: str,
    zone: str,
    rate: int | None,
    config: Config,
) -> tuple[VolumeTypeDef, int | None]:
    """CreateVolume (idempotent by ClientToken), then the volume as DescribeVolumes knows it by
    id; returns the initialization rate the following volumes should ask for."""
    try:
        created = aws.ec2().create_volume(**_request(plan, volume, instance_id, zone, rate, config))
    except ClientError as error:
        if rate is None or not is_about_initialization_rate(error):
            raise
        # the rate's capacity is per Region: do without it from here on
        logger.warning(
            "no capacity for the volume initialization rate; default rate instead",
            extra={"index": volume["index"], "error": aws.error_message(error)},
        )
        emit("VolumeInitializationRateFallback", 1)
        rate = None
        created = aws.ec2().create_volume(**_request(plan, volume, instance_id, zone, rate, config))
    logger.info(
        "created source volume",
        extra={"index": volume["index"], "volumeId": created["VolumeId"], "rate": rate},
    )
    described = _describe_by_id(created["VolumeId"])
    return (described or _as_volume(created)), rate


def _as_volume(created: Any) -> VolumeTypeDef:
    volume: VolumeTypeDef = created
    return volume


def _describe_by_id(volume_id: str) -> VolumeTypeDef | None:
    try:
        volumes = aws.ec2().describe_volumes(VolumeIds=[volume_id])["Volumes"]
    except ClientError as error:
        if aws.error_code(error) == "InvalidVolume.NotFound":  # not listed yet
            return None
        raise
    return volumes[0] if volumes else None


def _request(
    plan: Plan,
    volume: VolumePlan,
    instance_id: str,
    zone: str,
    rate: int | None,
    config: Config,
) -> CreateVolumeRequestTypeDef:
    iops, throughput = gp3_performance(volume["sizeGiB"], config)
    own = tags.ownership(config.stack_name, plan["executionName"], tags.ROLE_SOURCE_VOLUME)
    own[tags.VOLUME_INDEX] = str(volume["index"])
    own[tags.SOURCE_SNAPSHOT] = volume["sourceSnapshotId"]
    # no Encrypted/KmsKeyId: a volume from an encrypted snapshot is encrypted like it
    request: CreateVolumeRequestTypeDef = {
        "SnapshotId": volume["sourceSnapshotId"],
        "AvailabilityZone": zone,
        "VolumeType": "gp3",
        "Iops": iops,
        "Throughput": throughput,
        "TagSpecifications": [tags.specification("volume", own)],
        "ClientToken": client_token(plan["executionName"], instance_id, volume["index"], rate),
    }
    if rate is not None:
        request["VolumeInitializationRate"] = rate
    return request


def client_token(execution: str, instance_id: str, index: int, rate: int | None) -> str:
    """One per (execution, launched instance, volume, rate): a retried call gets the volume of
    the first one; a relaunch (new instance) or the fallback without the rate a new one."""
    key = f"{execution}|{instance_id}|{index}|{rate}"
    return hashlib.sha256(key.encode()).hexdigest()[:64]


def _advance(source: VolumeTypeDef, index: int, instance_id: str) -> list[str]:
    """One step for a source volume; what it is still waiting for (empty when attached)."""
    volume_id = source["VolumeId"]
    state = source.get("State", "creating")
    device = source_device(index)
    mine = [a for a in source.get("Attachments", []) if a.get("InstanceId") == instance_id]
    if state == "in-use" and mine:
        attachment = mine[0].get("State", "attaching")
        if attachment == "attached":
            return []
        return [f"source volume {index} ({volume_id}) {attachment}"]
    if state == "available":
        try:
            aws.ec2().attach_volume(VolumeId=volume_id, InstanceId=instance_id, Device=device)
        except ClientError as error:
            if aws.error_code(error) not in ATTACH_NOT_YET:
                raise
            logger.info("not attachable yet", extra={"volumeId": volume_id, "error": str(error)})
            return [f"source volume {index} ({volume_id}) attachable"]
        return [f"source volume {index} ({volume_id}) attaching at {device}"]
    if state == "error":
        raise VolumeCreationFailed(
            f"source volume {index} ({volume_id}) from snapshot {source.get('SnapshotId')} ended "
            "in state error: EBS could not create it (for an encrypted snapshot, check that its "
            "KMS key is enabled and that its key policy lets this account use it and create "
            "grants for EBS)"
        )
    return [f"source volume {index} ({volume_id}) {state}"]
