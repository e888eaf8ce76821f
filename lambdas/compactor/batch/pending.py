"""A batch against EBS's quota of pending snapshots (limits.json ebsPendingSnapshotsPerAccount).

A child with target snapshot starts one snapshot per volume of its source (StartSnapshot, before
its copy) and completes them at its end, so they are pending while it copies; the Distributed Map
runs up to maxConcurrency children at once, any of them together. The most the batch can hold
pending at once is therefore the sum of the volume counts of its maxConcurrency largest items. A
batch where that sum passes the quota is refused here, before any child starts, instead of
children failing at StartSnapshot (ServiceQuotaExceededException) later. Not counted: a dry run
(options.dryRun, and the estimates of minSavingsPercent) and target volume start no snapshot
through StartSnapshot. An AMI counts its EBS volumes from snapshots (DescribeImages); one that is
not found, or has more than maxVolumesPerJob volumes, fails its child before any snapshot starts
(ImageNotFound, TooManyVolumes) and counts 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compactor import aws, contract
from compactor.batch import items
from compactor.errors import InvalidInput

# DescribeImages' page size (it accepts up to 1000)
_PAGE_SIZE = 1000


def check(
    built: Sequence[Mapping[str, Any]], max_concurrency: int, region: str, trigger_tag_key: str
) -> None:
    """InvalidInput when the batch's maxConcurrency largest items could hold more snapshots
    pending at once than the account's quota, naming the highest maxConcurrency that fits."""
    quota = contract.limit("ebsPendingSnapshotsPerAccount")
    most_per_item = contract.limit("maxVolumesPerJob")
    direct = [i for i in built if items.starts_snapshots(i["input"], region, trigger_tag_key)]
    if min(max_concurrency, len(direct)) * most_per_item <= quota:
        return  # even AMIs of the most volumes a job takes fit: nothing to look up
    counts = _image_volume_counts([i["id"] for i in direct if i["kind"] == "image"])
    volumes = sorted((_started(i, counts, most_per_item) for i in direct), reverse=True)
    at_once = sum(volumes[:max_concurrency])
    if at_once <= quota:
        return
    fits = max((k for k in range(1, max_concurrency) if sum(volumes[:k]) <= quota), default=0)
    raise InvalidInput(
        f"with maxConcurrency {max_concurrency} this batch could hold {at_once} snapshots pending "
        f"at once (the {max_concurrency} items with the most volumes: each running child starts "
        "one snapshot per volume of its source before its copy), over EBS's quota of "
        f"{quota} pending snapshots per account (limits.json ebsPendingSnapshotsPerAccount): "
        + (
            f"give maxConcurrency {fits} or less"
            if fits
            else "no maxConcurrency fits (an item alone has more volumes than the quota)"
        )
        + ", put the AMIs with many volumes in a batch of their own, or ask AWS for a higher "
        "quota first (docs/batch.md, Limits); other snapshots pending in the account count too"
    )


def _started(item: Mapping[str, Any], image_volumes: Mapping[str, int], most: int) -> int:
    """The snapshots an item's child starts: 1 for a snapshot; an AMI's EBS volumes from
    snapshots, 0 for one not found or with more than `most` (prepare refuses it first)."""
    if item["kind"] != "image":
        return 1
    count = image_volumes.get(item["id"], 0)
    return count if count <= most else 0


def _image_volume_counts(image_ids: Sequence[str]) -> dict[str, int]:
    """AMI id -> its EBS volumes from snapshots, for the AMIs DescribeImages finds (a filter, not
    ImageIds: an id that does not exist must not fail the call)."""
    if not image_ids:
        return {}
    pages = (
        aws.ec2()
        .get_paginator("describe_images")
        .paginate(
            Filters=[{"Name": "image-id", "Values": sorted(set(image_ids))}],
            PaginationConfig={"PageSize": _PAGE_SIZE},
        )
    )
    return {
        image["ImageId"]: sum(
            1 for m in image.get("BlockDeviceMappings", []) if m.get("Ebs", {}).get("SnapshotId")
        )
        for page in pages
        for image in page["Images"]
    }
