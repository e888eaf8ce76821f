"""A batch selector resolved into sources: this account's completed snapshots (DescribeSnapshots
OwnerIds self) and available AMIs (DescribeImages Owners self), every page, with the filters EC2
applies itself (state, tag); the creation date and the size EC2 can only match exactly, so they
are compared here. Resources carrying this project's stack tag (outputs of earlier compactions,
work in progress) are never selected: compacting a compacted copy again saves nothing. Nor, unless
the selector sets includeCompacted, are sources that already have a delivered compacted copy (a
snapshot or AMI of this account tagged delivered whose lineage tag names the source): repeating a
selector batch compacts only what is new. Those are returned apart, with their copies, so that the
batch can say what it left out and why."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from compactor import aws, tags
from compactor.batch.batch_input import Selector

if TYPE_CHECKING:
    from mypy_boto3_ec2.type_defs import FilterTypeDef, PaginatorConfigTypeDef

# MaxResults of each Describe* call (both accept up to 1000 per page)
PAGE_SIZE = 1000


# the lineage tag naming the source on a compacted copy, by the kind of source
_LINEAGE = {"snapshot": tags.SOURCE_SNAPSHOT, "image": tags.SOURCE_IMAGE}


@dataclass(frozen=True)
class Source:
    kind: str  # "snapshot" | "image"
    id: str  # snap-... / ami-...
    created: datetime


@dataclass(frozen=True)
class Compacted:
    """A selected source left out: its delivered compacted copies (snap-... / ami-...)."""

    source: Source
    copies: tuple[str, ...]


@dataclass(frozen=True)
class Resolved:
    sources: list[Source]
    # None when not looked for (includeCompacted)
    compacted: list[Compacted] | None


def resolve(selector: Selector) -> Resolved:
    """The selected sources, snapshots first then AMIs, each oldest first (then by id), and
    those left out for their delivered copies."""
    found: list[Source] = []
    if "snapshot" in selector.resource_types:
        found += sorted(_snapshots(selector), key=lambda s: (s.created, s.id))
    if "image" in selector.resource_types:
        found += sorted(_images(selector), key=lambda s: (s.created, s.id))
    if selector.include_compacted:
        return Resolved(found, None)
    copies = _delivered_copies(set(selector.resource_types))
    compacted = [Compacted(s, copies[(s.kind, s.id)]) for s in found if (s.kind, s.id) in copies]
    left_out = {c.source for c in compacted}
    return Resolved([s for s in found if s not in left_out], compacted)


def _delivered_copies(kinds: set[str]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(kind, source id) -> the delivered copies of it in this account, by their lineage tag: a
    snapshot source's new snapshots, an AMI source's new AMIs (its snapshots alone are not the
    AMI the input asked for: a run that failed to register one compacts again)."""
    delivered: list[FilterTypeDef] = [
        {"Name": f"tag:{tags.DELIVERED}", "Values": [tags.DELIVERED_VALUE]}
    ]
    paging: PaginatorConfigTypeDef = {"PageSize": PAGE_SIZE}
    found: dict[tuple[str, str], list[str]] = {}
    if "snapshot" in kinds:
        snapshot_pages = (
            aws.ec2()
            .get_paginator("describe_snapshots")
            .paginate(OwnerIds=["self"], Filters=delivered, PaginationConfig=paging)
        )
        for snapshot_page in snapshot_pages:
            for snapshot in snapshot_page.get("Snapshots", []):
                _add_copy(found, "snapshot", snapshot.get("Tags"), str(snapshot["SnapshotId"]))
    if "image" in kinds:
        image_pages = (
            aws.ec2()
            .get_paginator("describe_images")
            .paginate(Owners=["self"], Filters=delivered, PaginationConfig=paging)
        )
        for image_page in image_pages:
            for image in image_page.get("Images", []):
                _add_copy(found, "image", image.get("Tags"), str(image["ImageId"]))
    return {key: tuple(sorted(ids)) for key, ids in found.items()}


def _add_copy(
    found: dict[tuple[str, str], list[str]], kind: str, raw_tags: Any, copy_id: str
) -> None:
    source_id = tags.from_aws(raw_tags).get(_LINEAGE[kind])
    if source_id:
        found.setdefault((kind, source_id), []).append(copy_id)


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
