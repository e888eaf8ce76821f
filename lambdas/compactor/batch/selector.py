"""A batch selector resolved into sources: this account's completed snapshots (DescribeSnapshots
OwnerIds self) and available AMIs (DescribeImages Owners self), every page, with the filters EC2
applies itself (state, tag); the creation date and the size EC2 can only match exactly, so they
are compared here. Resources carrying this project's stack tag (outputs of earlier compactions,
work in progress) are never selected: compacting a compacted copy again saves nothing."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from compactor import aws, tags
from compactor.batch.batch_input import Selector

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef

# MaxResults of each Describe* call (both accept up to 1000 per page)
PAGE_SIZE = 1000


@dataclass(frozen=True)
class Source:
    kind: str  # "snapshot" | "image"
    id: str  # snap-... / ami-...
    created: datetime


def resolve(selector: Selector) -> list[Source]:
    """The selected sources, snapshots first then AMIs, each oldest first (then by id)."""
    found: list[Source] = []
    if "snapshot" in selector.resource_types:
        found += sorted(_snapshots(selector), key=lambda s: (s.created, s.id))
    if "image" in selector.resource_types:
        found += sorted(_images(selector), key=lambda s: (s.created, s.id))
    return found


def _tag_filters(selector: Selector) -> list[FilterTypeDef]:
    if selector.tag_key is None:
        return []
    if selector.tag_value is None:
        return [{"Name": "tag-key", "Values": [selector.tag_key]}]
    return [{"Name": f"tag:{selector.tag_key}", "Values": [selector.tag_value]}]


def _snapshots(selector: Selector) -> Iterator[Source]:
    pages = (
        aws.ec2()
        .get_paginator("describe_snapshots")
        .paginate(
            OwnerIds=["self"],
            Filters=[{"Name": "status", "Values": ["completed"]}, *_tag_filters(selector)],
            PaginationConfig={"PageSize": PAGE_SIZE},
        )
    )
    for page in pages:
        for snapshot in page.get("Snapshots", []):
            created = _aware(snapshot["StartTime"])
            size = int(snapshot.get("VolumeSize") or 0)
            if _wanted(selector, snapshot.get("Tags"), created, size):
                yield Source("snapshot", str(snapshot["SnapshotId"]), created)


def _images(selector: Selector) -> Iterator[Source]:
    pages = (
        aws.ec2()
        .get_paginator("describe_images")
        .paginate(
            Owners=["self"],
            Filters=[{"Name": "state", "Values": ["available"]}, *_tag_filters(selector)],
            PaginationConfig={"PageSize": PAGE_SIZE},
        )
    )
    for page in pages:
        for image in page.get("Images", []):
            created = _aware(image.get("CreationDate") or "1970-01-01T00:00:00Z")
            size = sum(
                int(m.get("Ebs", {}).get("VolumeSize") or 0)
                for m in image.get("BlockDeviceMappings", [])
            )
            if _wanted(selector, image.get("Tags"), created, size):
                yield Source("image", str(image["ImageId"]), created)


def _wanted(selector: Selector, raw_tags: Any, created: datetime, size_gib: int) -> bool:
    if tags.STACK in tags.from_aws(raw_tags):
        return False
    if selector.created_before is not None and created >= selector.created_before:
        return False
    return selector.min_size_gib is None or size_gib >= selector.min_size_gib


def _aware(value: datetime | str) -> datetime:
    """StartTime (a datetime from botocore) or CreationDate (an ISO string) with a time zone."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def ids(sources: list[Source]) -> list[Mapping[str, str]]:
    """The sources as batch items ({"snapshotId": ...} / {"imageId": ...})."""
    return [{"snapshotId": s.id} if s.kind == "snapshot" else {"imageId": s.id} for s in sources]
