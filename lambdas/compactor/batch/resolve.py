"""resolve_batch: the batch input → `$.batch` (the Distributed Map's items, concurrency and
tolerated failure, and the selected sources left out because they were compacted already). Reads
only; a bad input fails the batch before any child starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compactor import aws, contract, tags
from compactor.batch import items, pending, selector
from compactor.batch.batch_input import parse_batch_input
from compactor.errors import InvalidInput


def resolve(raw_input: Any, batch_name: str, trigger_tag_key: str) -> dict[str, Any]:
    if not isinstance(batch_name, str) or not batch_name:
        raise InvalidInput("executionName is missing from the resolve_batch payload")
    request = parse_batch_input(raw_input)
    compacted: list[selector.Compacted] | None = None
    if request.items is not None:
        items.check_count(len(request.items), "items lists")
        sources = items.unique(request.items)
        selected_by = "items"
    else:
        assert request.selector is not None  # the schema asks for exactly one
        found = selector.resolve(request.selector)
        compacted = found.compacted
        items.check_count(len(found.sources), "the selector matches")
        sources = selector.ids(found.sources)
        selected_by = "selector"
    built = items.build(request, sources, batch_name, aws.region(), trigger_tag_key)
    pending.check(built, request.max_concurrency, aws.region(), trigger_tag_key)
    batch = {
        "executionName": batch_name,
        "selectedBy": selected_by,
        "count": len(built),
        "maxConcurrency": request.max_concurrency,
        "toleratedFailurePercentage": request.tolerated_failure_percentage,
        "items": built,
        "alreadyCompacted": _already_compacted(compacted),
    }
    items.check_payload(batch, raw_input)
    return batch


def _already_compacted(compacted: Sequence[selector.Compacted] | None) -> dict[str, Any] | None:
    """What the selector left out and why; the list is cut to batchMaxItems entries so that a
    fleet compacted long ago cannot push the state past Step Functions' payload limit."""
    if compacted is None:
        return None
    listed = compacted[: contract.limit("batchMaxItems")]
    return {
        "count": len(compacted),
        "reason": (
            "a delivered compacted copy exists (a snapshot or AMI of this account tagged "
            f"{tags.DELIVERED} whose {tags.SOURCE_SNAPSHOT} / {tags.SOURCE_IMAGE} tag names "
            "the source): set selector.includeCompacted to compact them again"
        ),
        "sources": [
            {"id": c.source.id, "kind": c.source.kind, "copies": list(c.copies)} for c in listed
        ],
    }
