"""check_instance: is the transfer instance running and managed by SSM? (The source volumes are
attached afterwards, by attach_volumes.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import boto3
from botocore.exceptions import ClientError

from compactor import aws
from compactor.errors import InstanceLaunchFailed, InstanceLost
from compactor.models import InstanceResult, Plan, ReadyResult
from compactor.observability import logger

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import InstanceTypeDef

LOST_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
LAUNCH_FAILED_STATES = frozenset({"shutting-down", "terminated"})
# Client.* state reasons that are not launch failures: someone (or the instance itself) shut it
# down; the workflow relaunches as for a Spot loss
SHUTDOWN_REASONS = frozenset(
    {
        "Client.UserInitiatedShutdown",
        "Client.InstanceInitiatedShutdown",
        "Client.UserInitiatedHibernate",
    }
)


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


def instance_arn(instance_id: str) -> str:
    """The instance's ARN as IAM gives it in ec2:SourceInstanceArn for calls signed with its role
    (arn:PARTITION:ec2:REGION:ACCOUNT:instance/ID): the account is the reservation's owner, the
    partition the Region's (botocore's endpoint data: aws-cn, aws-us-gov, aws-iso...)."""
    reservations = aws.ec2().describe_instances(InstanceIds=[instance_id])["Reservations"]
    owners = [r["OwnerId"] for r in reservations if r.get("OwnerId")]
    if not owners:
        raise InstanceLost(
            f"transfer instance {instance_id} is not listed by DescribeInstances any more: the "
            "workflow launches a new one"
        )
    region = aws.region()
    partition = boto3.session.Session().get_partition_for_region(region)
    return f"arn:{partition}:ec2:{region}:{owners[0]}:instance/{instance_id}"


def raise_if_lost(instance: InstanceTypeDef) -> None:
    state = instance.get("State", {}).get("Name", "")
    if state in LOST_STATES:
        reason = instance.get("StateReason", {}).get("Message") or "no reason given"
        raise InstanceLost(
            f"transfer instance {instance['InstanceId']} is {state} ({reason}): the workflow "
            "launches a new one"
        )


def raise_if_launch_failed(plan: Plan, instance: InstanceTypeDef) -> None:
    """EC2 ends an instance it cannot start with a Client.* state reason: Client.InternalError
    (typically KMS refused the grant for an encrypted volume), Client.InvalidKMSKey.InvalidState
    (the key is disabled or pending deletion), Client.VolumeLimitExceeded. Launching again
    fails the same way, so this is not a lost instance: fail at once, naming the keys and fix."""
    state = instance.get("State", {}).get("Name", "")
    reason = instance.get("StateReason", {})
    code = reason.get("Code", "")
    if state not in LAUNCH_FAILED_STATES or not code.startswith("Client."):
        return
    if code in SHUTDOWN_REASONS:
        return
    keys = plan_kms_keys(plan)
    # the encrypted root (and a target without a key) uses the account's default EBS key
    named = ", ".join([*keys, "the account's default EBS key (root volume)"])
    if code == "Client.VolumeLimitExceeded":
        fix = (
            "the account or Region reached an EBS volume or storage limit: delete unused volumes "
            "or ask for a higher EBS quota, then start the compaction again"
        )
    else:
        fix = (
            "make sure each key is enabled (not disabled or pending deletion), that its key "
            "policy lets this account use it and lets EC2/EBS create grants on it "
            "(kms:CreateGrant with kms:GrantIsForAWSResource), and that the launch role may use "
            "it; then start the compaction again"
        )
    raise InstanceLaunchFailed(
        f"transfer instance {instance['InstanceId']} is {state} at launch: "
        f"{reason.get('Message') or code} ({code}); KMS keys of the volumes: {named}. "
        f"Launching again would fail the same way: {fix}"
    )


def plan_kms_keys(plan: Plan) -> list[str]:
    keys: list[str] = []
    for volume in plan["volumes"]:
        loose = cast("Mapping[str, Any]", volume)
        for name in ("kmsKeyId", "targetKmsKeyId"):
            key = loose.get(name)
            if key and key not in keys:
                keys.append(str(key))
    return keys


def check(plan: Plan, launched: InstanceResult) -> ReadyResult:
    try:
        instance = describe(launched["instanceId"])
        if instance is None:
            return {"ready": False, "state": "pending", "pingStatus": None}
        raise_if_launch_failed(plan, instance)
        raise_if_lost(instance)
        state = instance.get("State", {}).get("Name", "pending")
        if state != "running":
            return {"ready": False, "state": state, "pingStatus": None}
        ping = ssm_ping_status(launched["instanceId"])
    except ClientError as error:
        if not aws.is_transient(error):
            raise
        logger.warning("transient error, next poll", extra={"error": str(error)})
        return {
            "ready": False,
            "state": "unknown",
            "pingStatus": None,
            "transientError": f"{aws.error_code(error)}: {aws.error_message(error)}",
        }
    return {"ready": ping == "Online", "state": state, "pingStatus": ping}


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
