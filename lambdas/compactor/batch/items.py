"""The batch's items (`$.batch.items`), one per source: the child's name and its whole execution
input (the batch's options plus the source id), and the dry run to estimate it first when the
batch asks for a minimum saving. Each input is checked against the execution input's schema here
(compactor/validation.py) so that a bad option fails the batch before any child starts, with the
same words a single run would give. Whether a source exists is not checked: its child fails
(SnapshotNotFound, ImageNotFound) and the others go on."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from compactor import contract
from compactor.batch import names
from compactor.batch.batch_input import BatchInput
from compactor.errors import InvalidInput, SnapshotInOtherRegion
from compactor.validation import ExecutionInput, parse_execution_input

# room kept in the state for the Map's own result and Step Functions' wrapping
PAYLOAD_MARGIN_BYTES = 16 * 1024


def source_id(item: Mapping[str, str]) -> tuple[str, str]:
    """(kind, bare id) of {"snapshotId": id or ARN} / {"imageId": id}."""
    if "imageId" in item:
        return "image", item["imageId"]
    return "snapshot", item["snapshotId"].rsplit("/", 1)[-1]


def unique(sources: Sequence[Mapping[str, str]]) -> list[Mapping[str, str]]:
    """The sources in their order, each id once (an ARN and the bare id are the same snapshot)."""
    seen: set[str] = set()
    kept: list[Mapping[str, str]] = []
    for item in sources:
        _, bare = source_id(item)
        if bare not in seen:
            seen.add(bare)
            kept.append(item)
    return kept


def check_count(count: int, what: str) -> None:
    most = contract.limit("batchMaxItems")
    if count > most:
        raise InvalidInput(
            f"{what} {count} items; a batch takes at most {most} (limits.json batchMaxItems, "
            "which keeps the batch's state under Step Functions' 256 KiB): split it into "
            f"batches of at most {most} (e.g. narrow the selector with createdBefore or "
            "minSizeGiB, or a more specific tag)"
        )


def build(
    request: BatchInput,
    sources: Sequence[Mapping[str, str]],
    batch_name: str,
    region: str,
    trigger_tag_key: str,
) -> list[dict[str, Any]]:
    built = []
    for index, source in enumerate(sources):
        kind, bare = source_id(source)
        child_input = {**request.options, **source}
        _check_input(child_input, index, bare, region, trigger_tag_key)
        name = names.child_name(batch_name, index, bare)
        estimate = None
        if request.min_savings_percent is not None:
            estimate = {
                "name": names.estimate_name(name),
                "input": {**child_input, "dryRun": True},
                "minSavingsPercent": request.min_savings_percent,
            }
        built.append(
            {
                "id": bare,
                "kind": kind,
                "childName": name,
                "input": child_input,
                "estimate": estimate,
            }
        )
    return built


def _check_input(
    child_input: Mapping[str, Any], index: int, bare: str, region: str, trigger_tag_key: str
) -> None:
    try:
        _parse(child_input, region, trigger_tag_key)
    except InvalidInput as error:
        raise InvalidInput(f"item {index} ({bare}): {error}") from None


def _parse(
    child_input: Mapping[str, Any], region: str, trigger_tag_key: str
) -> ExecutionInput | None:
    """The child's execution input as prepare reads it; None for a snapshot ARN of another
    Region (the item's own problem: its child fails with SnapshotInOtherRegion, the others go
    on)."""
    try:
        return parse_execution_input(dict(child_input), region, trigger_tag_key)
    except SnapshotInOtherRegion:
        return None


def starts_snapshots(child_input: Mapping[str, Any], region: str, trigger_tag_key: str) -> bool:
    """Whether the child starts its new snapshots with StartSnapshot (target snapshot, not a dry
    run): those count against EBS's pending snapshots quota (compactor/batch/pending.py)."""
    request = _parse(child_input, region, trigger_tag_key)
    return request is not None and not request.dry_run and request.target == "snapshot"


def check_payload(batch: Mapping[str, Any], raw_input: Any) -> None:
    """The state at the Map (the batch input plus `$.batch`) must fit Step Functions' payload
    limit; options with many long tags can make even a batch under batchMaxItems too large."""
    limit = contract.limit("statePayloadMaxBytes")
    size = len(json.dumps(batch, separators=(",", ":")).encode("utf-8")) + len(
        json.dumps(raw_input, separators=(",", ":")).encode("utf-8")
    )
    if size + PAYLOAD_MARGIN_BYTES > limit:
        count = max(len(batch["items"]), 1)
        fits = max(1, int((limit - PAYLOAD_MARGIN_BYTES) * count / size))
        raise InvalidInput(
            f"the batch's {count} items with these options make {size // 1024} KiB of state, "
            f"over what Step Functions' {limit // 1024} KiB payload limit leaves: split it into "
            f"batches of about {fits} items, or pass fewer or shorter options (tags)"
        )
