"""Fast snapshot restore: the per-Region limit and enabling it on the new snapshots."""

from __future__ import annotations

from collections.abc import Sequence

from compactor import aws
from compactor.errors import FastSnapshotRestoreLimitExceeded, InvalidInput
from compactor.models import FastSnapshotRestoreState

REGION_LIMIT = 5
# EBS enables fast snapshot restore only on snapshots of at most 16 TiB (EBS User Guide, "Amazon EBS
# fast snapshot restore", Considerations)
MAX_SNAPSHOT_GIB = 16_384
_ACTIVE_STATES = ["enabling", "optimizing", "enabled"]


def active_snapshot_ids() -> set[str]:
    """Snapshots with fast snapshot restore enabled (or on the way) in any AZ of this Region."""
    snapshot_ids: set[str] = set()
    paginator = aws.ec2().get_paginator("describe_fast_snapshot_restores")
    for page in paginator.paginate(Filters=[{"Name": "state", "Values": _ACTIVE_STATES}]):
        for item in page.get("FastSnapshotRestores", []):
            if "SnapshotId" in item:
                snapshot_ids.add(item["SnapshotId"])
    return snapshot_ids


def check_sizes(sizes_gib: dict[str, int]) -> None:
    too_large = {
        snapshot_id: size for snapshot_id, size in sizes_gib.items() if size > MAX_SNAPSHOT_GIB
    }
    if too_large:
        listed = ", ".join(f"{snapshot_id} ({size} GiB)" for snapshot_id, size in too_large.items())
        raise InvalidInput(
            f"fastSnapshotRestoreAzs: fast snapshot restore works only on snapshots of at most "
            f"{MAX_SNAPSHOT_GIB} GiB, and {listed} is larger: drop fastSnapshotRestoreAzs"
        )


def check_limit(requested: int) -> None:
    active = active_snapshot_ids()
    if requested + len(active) > REGION_LIMIT:
        raise FastSnapshotRestoreLimitExceeded(
            f"fast snapshot restore for {requested} new snapshot(s) would exceed the limit of "
            f"{REGION_LIMIT} per Region in {aws.region()}: {len(active)} already have it "
            f"({', '.join(sorted(active)) or 'none'}); disable it on some of them, raise the "
            "quota, or drop fastSnapshotRestoreAzs"
        )


def enable(snapshot_ids: Sequence[str], azs: Sequence[str]) -> list[FastSnapshotRestoreState]:
    response = aws.ec2().enable_fast_snapshot_restores(
        AvailabilityZones=list(azs), SourceSnapshotIds=list(snapshot_ids)
    )
    failures = [
        f"{item.get('SnapshotId')} in {error.get('AvailabilityZone')}: "
        f"{error.get('Error', {}).get('Code')}: {error.get('Error', {}).get('Message')}"
        for item in response.get("Unsuccessful", [])
        for error in item.get("FastSnapshotRestoreStateErrors", [])
    ]
    if failures:
        if any("limit" in failure.lower() for failure in failures):
            raise FastSnapshotRestoreLimitExceeded(
                "EnableFastSnapshotRestores hit the per-Region limit: "
                + "; ".join(failures)
                + ": disable it on other snapshots or raise the quota"
            )
        raise RuntimeError("EnableFastSnapshotRestores failed: " + "; ".join(failures))
    return [
        {
            "snapshotId": item.get("SnapshotId", ""),
            "availabilityZone": item.get("AvailabilityZone", ""),
            "state": item.get("State", ""),
        }
        for item in response.get("Successful", [])
    ]
