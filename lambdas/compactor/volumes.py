"""Where each volume of a job is attached: source i at /dev/sd[f+i], target i at /dev/sd[p+i]."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SOURCE_FIRST_LETTER = "f"
TARGET_FIRST_LETTER = "p"


def source_device(index: int) -> str:
    return "/dev/sd" + chr(ord(SOURCE_FIRST_LETTER) + index)


def target_device(index: int) -> str:
    return "/dev/sd" + chr(ord(TARGET_FIRST_LETTER) + index)


def has_target_volumes(plan: Mapping[str, Any]) -> bool:
    """Whether the job copies to target volumes: not in a dry run (it only inspects) and not with
    target snapshot (the transfer instance writes the new snapshots directly). A plan made before
    `target` existed copied to volumes."""
    return not plan.get("dryRun") and plan.get("target", "volume") == "volume"


def writes_direct_snapshots(plan: Mapping[str, Any]) -> bool:
    """target snapshot, not a dry run: start_compaction starts one direct snapshot per volume."""
    return not plan.get("dryRun") and plan.get("target") == "snapshot"
