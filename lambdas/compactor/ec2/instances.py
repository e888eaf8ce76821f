"""check_instance: is the transfer instance running, managed by SSM, with its volumes attached?"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from compactor import aws
from compactor.errors import InstanceLost
from compactor.models import AttachedVolume, InstanceResult, Plan, ReadyResult
from compactor.volumes import source_device, target_device

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import InstanceTypeDef

LOST_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})


def describe(instance_id: str) -> InstanceTypeDef | None:
    """The instance, or None while EC2 does not list it yet (eventual consistency after launch)."""
    try:
        reservations = aws.ec2().describe_instances(InstanceIds=[instance_id])["Reservations"]
    except ClientError as error:
        if aws.error_code(error) == "InvalidInstanceID.NotFound":
            return None
        raise
    found = [i for r in reservations for i in r.get("Instances", [])]
    return found[0] if found else None


def raise_if_lost(instance: InstanceTypeDef) -> None:
    state = instance.get("State", {}).get("Name", "")
    if state in LOST_STATES:
        reason = instance.get("StateReason", {}).get("Message") or "no reason given"
        raise InstanceLost(
            f"transfer instance {instance['InstanceId']} is {state} ({reason}): the workflow "
            "launches a new one"
        )


def check(plan: Plan, launched: InstanceResult) -> ReadyResult:
    instance = describe(launched["instanceId"])
    if instance is None:
        return {"ready": False, "state": "pending", "pingStatus": None, "volumes": []}
    raise_if_lost(instance)
    state = instance.get("State", {}).get("Name", "pending")
    attached = {
        m["DeviceName"]: m["Ebs"]["VolumeId"]
        for m in instance.get("BlockDeviceMappings", [])
        if "DeviceName" in m and "VolumeId" in m.get("Ebs", {})
    }
    volumes = _job_volumes(plan, attached)
    if state != "running" or volumes is None:
        return {"ready": False, "state": state, "pingStatus": None, "volumes": volumes or []}
    ping = ssm_ping_status(launched["instanceId"])
    return {"ready": ping == "Online", "state": state, "pingStatus": ping, "volumes": volumes}


def _job_volumes(plan: Plan, attached: dict[str, str]) -> list[AttachedVolume] | None:
    """The job's volume pairs, or None until every one of them shows up as attached."""
    volumes: list[AttachedVolume] = []
    for volume in plan["volumes"]:
        source, target = source_device(volume["index"]), target_device(volume["index"])
        if source not in attached or target not in attached:
            return None
        volumes.append(
            {
                "index": volume["index"],
                "sourceVolumeId": attached[source],
                "targetVolumeId": attached[target],
                "sourceDeviceName": source,
                "targetDeviceName": target,
            }
        )
    return volumes


def ssm_ping_status(instance_id: str) -> str | None:
    # SSM applies Filters page by page: a page may be empty and still carry a NextToken, so an
    # account with many managed nodes can list the instance only on a later page
    pages = (
        aws.ssm()
        .get_paginator("describe_instance_information")
        .paginate(Filters=[{"Key": "InstanceIds", "Values": [instance_id]}])
    )
    for page in pages:
        for info in page.get("InstanceInformationList", []):
            if info.get("InstanceId", instance_id) == instance_id:
                return info.get("PingStatus")
    return None
