"""The tags of docs/contract.md: ownership (stack + execution), role, lineage, and copying."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mypy_boto3_ec2.literals import ResourceTypeType
    from mypy_boto3_ec2.type_defs import FilterTypeDef, TagSpecificationTypeDef, TagTypeDef

PREFIX = "ebs-snapshot-compactor:"
STACK = PREFIX + "stack"
EXECUTION = PREFIX + "execution"
ROLE = PREFIX + "role"
SOURCE_SNAPSHOT = PREFIX + "source-snapshot"
SOURCE_IMAGE = PREFIX + "source-image"
# on a source volume (role source-volume): the plan's volume index it was created for
VOLUME_INDEX = PREFIX + "volume-index"
# put by check_snapshots on every new snapshot once all of them are completed (the delivery point),
# and by register_image on the new AMI as it registers it (an AMI exists only after that point):
# teardown never deletes a snapshot or AMI carrying it, nor an AMI whose snapshots carry it, and the
# roles' explicit Denies (lib/delivered-outputs.ts) refuse deleting, deregistering or untagging it
DELIVERED = PREFIX + "delivered"
DELIVERED_VALUE = "true"
# on a direct snapshot (target snapshot): the ARN of the transfer instance that writes it. The
# instance role may use the EBS direct APIs only on snapshots whose tag names the calling instance
# (ec2:SourceInstanceArn, lib/transfer-instance.ts): only this execution's, never one delivered
# earlier or another execution's (instance ids are never reused)
WRITER_INSTANCE = PREFIX + "writer-instance"

MAX_PER_RESOURCE = 50  # EC2's limit
# stack, execution, role, source-snapshot, (AMI jobs) source-image, (direct snapshots)
# writer-instance and, added by CreateTags at delivery, delivered: counted up front so that
# CreateTags cannot hit EC2's limit after the work
OWN_TAGS_PER_OUTPUT = 7

ROLE_INSTANCE = "transfer-instance"
# volumes attach_volumes creates from the source snapshots once the instance is online
ROLE_SOURCE_VOLUME = "source-volume"
ROLE_SNAPSHOT = "snapshot"
ROLE_IMAGE = "image"


def ownership(stack_name: str, execution_name: str, role: str) -> dict[str, str]:
    return {STACK: stack_name, EXECUTION: execution_name, ROLE: role}


def ownership_filters(stack_name: str, execution_name: str) -> list[FilterTypeDef]:
    return [
        {"Name": f"tag:{STACK}", "Values": [stack_name]},
        {"Name": f"tag:{EXECUTION}", "Values": [execution_name]},
    ]


def is_owned(tags: Mapping[str, str], stack_name: str, execution_name: str) -> bool:
    return tags.get(STACK) == stack_name and tags.get(EXECUTION) == execution_name


def is_delivered(tags: Mapping[str, str]) -> bool:
    return tags.get(DELIVERED) == DELIVERED_VALUE


def from_aws(tags: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    return {str(t["Key"]): str(t.get("Value", "")) for t in tags or ()}


def to_aws(tags: Mapping[str, str]) -> list[TagTypeDef]:
    return [{"Key": key, "Value": value} for key, value in tags.items()]


def specification(
    resource_type: ResourceTypeType, tags: Mapping[str, str]
) -> TagSpecificationTypeDef:
    return {"ResourceType": resource_type, "Tags": to_aws(tags)}


def copyable(tags: Mapping[str, str], trigger_tag_key: str) -> dict[str, str]:
    """User tags a compacted copy inherits: not AWS-reserved ones, not the trigger tag (copying it
    would start a compaction of the result) and not this project's own (they are set afresh)."""
    return {
        key: value
        for key, value in tags.items()
        if not key.startswith("aws:") and not key.startswith(PREFIX) and key != trigger_tag_key
    }
