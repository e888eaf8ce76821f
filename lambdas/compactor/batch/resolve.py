"""resolve_batch: the batch input → `$.batch` (the Distributed Map's items, concurrency and
tolerated failure). Reads only; a bad input fails the batch before any child starts."""

from __future__ import annotations

from typing import Any

from compactor import aws
from compactor.batch import items, selector
from compactor.batch.batch_input import parse_batch_input
from compactor.errors import InvalidInput


def resolve(raw_input: Any, batch_name: str, trigger_tag_key: str) -> dict[str, Any]:
    if not isinstance(batch_name, str) or not batch_name:
        raise InvalidInput("executionName is missing from the resolve_batch payload")
    request = parse_batch_input(raw_input)
    if request.items is not None:
        items.check_count(len(request.items), "items lists")
        sources = items.unique(request.items)
        selected_by = "items"
    else:
        assert request.selector is not None  # the schema asks for exactly one
        found = selector.resolve(request.selector)
        items.check_count(len(found), "the selector matches")
        sources = selector.ids(found)
        selected_by = "selector"
    built = items.build(request, sources, batch_name, aws.region(), trigger_tag_key)
    batch = {
        "executionName": batch_name,
        "selectedBy": selected_by,
        "count": len(built),
        "maxConcurrency": request.max_concurrency,
        "toleratedFailurePercentage": request.tolerated_failure_percentage,
        "items": built,
    }
    items.check_payload(batch, raw_input)
    return batch
