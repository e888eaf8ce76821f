"""The batch input, checked against contract/schemas/batch-input.schema.json (what is valid is
the schema's to say; docs/batch.md). This module words a schema failure for the user, as
compactor/validation.py does for the execution input, and fills in the defaults that live in
contract/limits.json."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aws_lambda_powertools.utilities.validation.exceptions import SchemaValidationError

from compactor import contract, schemas
from compactor.errors import InvalidInput

BATCH_INPUT = "batch-input.schema.json"
# keys of `options` the items set (or that cannot apply to several children)
RESERVED_OPTIONS = ("snapshotId", "imageId", "imageName")


@dataclass(frozen=True)
class Selector:
    resource_types: tuple[str, ...]
    tag_key: str | None = None
    tag_value: str | None = None
    created_before: datetime | None = None
    min_size_gib: int | None = None
    # also select sources that already have a delivered compacted copy
    include_compacted: bool = False


@dataclass(frozen=True)
class BatchInput:
    # explicit items as given ({"snapshotId": ...} or {"imageId": ...}); None with a selector
    items: tuple[dict[str, str], ...] | None
    selector: Selector | None
    options: dict[str, Any] = field(default_factory=dict)
    min_savings_percent: float | None = None
    max_concurrency: int = 2
    tolerated_failure_percentage: float = 100


def parse_batch_input(raw: Any) -> BatchInput:
    try:
        valid = schemas.validate(copy.deepcopy(raw), BATCH_INPUT)
    except SchemaValidationError as error:
        raise InvalidInput(_wording(error, raw)) from None
    selector = valid.get("selector")
    return BatchInput(
        items=tuple(valid["items"]) if "items" in valid else None,
        selector=_selector(selector) if selector is not None else None,
        options=dict(valid["options"]),
        min_savings_percent=_min_savings(valid),
        max_concurrency=int(valid.get("maxConcurrency", contract.limit("batchDefaultConcurrency"))),
        tolerated_failure_percentage=float(valid["toleratedFailurePercentage"]),
    )


def _min_savings(valid: Mapping[str, Any]) -> float | None:
    top = valid.get("minSavingsPercent")
    inner = (valid.get("selector") or {}).get("minSavingsPercent")
    if top is not None and inner is not None:
        raise InvalidInput(
            "minSavingsPercent is given twice (at the top and in selector): give it once"
        )
    chosen = top if top is not None else inner
    return float(chosen) if chosen is not None else None


def _selector(raw: Mapping[str, Any]) -> Selector:
    tag = raw.get("tag") or {}
    created_before = raw.get("createdBefore")
    return Selector(
        resource_types=tuple(raw["resourceTypes"]),
        tag_key=tag.get("key"),
        tag_value=tag.get("value"),
        created_before=_timestamp(created_before) if created_before else None,
        min_size_gib=raw.get("minSizeGiB"),
        include_compacted=bool(raw.get("includeCompacted", False)),
    )


def _timestamp(text: str) -> datetime:
    """createdBefore as an aware datetime (the schema checked the form; the date may still be
    impossible, e.g. 2026-02-30)."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"selector.createdBefore {text!r} is not a real date and time: "
            "use e.g. 2026-01-01T00:00:00Z"
        ) from None


# The words for a schema failure, by the error's path below the input (joined with ".", list
# indexes as "[]") and the JSON Schema keyword ("*" = any other). Each takes the failing value,
# the error and the limits.
_Wording = Callable[[Any, SchemaValidationError], str]


def _unknown_keys(where: str, schema_pointer: str) -> _Wording:
    def words(value: Any, error: SchemaValidationError) -> str:
        known = sorted(schemas.load(BATCH_INPUT, schema_pointer)["properties"])
        unknown = sorted(set(value) - set(known)) if isinstance(value, Mapping) else []
        return f"unknown {where} key(s) {', '.join(unknown)}: allowed are {', '.join(known)}"

    return words


def _item_words(value: Any, error: SchemaValidationError) -> str:
    return (
        f'items: {value!r} is not a source: each item is {{"snapshotId": "snap-..."}} '
        '(an id or a snapshot ARN) or {"imageId": "ami-..."}, exactly one key'
    )


_WORDING: dict[tuple[str, str], _Wording] = {
    ("", "type"): lambda value, error: (
        f"the batch input must be a JSON object, got {type(value).__name__}: send e.g. "
        '{"items": [{"snapshotId": "snap-0123456789abcdef0"}]}'
    ),
    ("", "additionalProperties"): _unknown_keys("batch input", ""),
    ("", "oneOf"): lambda value, error: (
        "give exactly one of items (a list of snapshot/AMI ids) and selector "
        f"({'both were' if isinstance(value, Mapping) and 'items' in value else 'neither was'}"
        " given)"
    ),
    ("items", "minItems"): lambda value, error: "items is empty: list at least one source",
    ("items", "*"): lambda value, error: (
        'items must be a list such as [{"snapshotId": "snap-0123456789abcdef0"}, '
        '{"imageId": "ami-0123456789abcdef0"}]'
    ),
    ("items[]", "*"): _item_words,
    ("items[].snapshotId", "*"): lambda value, error: (
        f"items: snapshotId {error.value!r} is neither a snapshot id (snap-0123456789abcdef0) "
        "nor a snapshot ARN (arn:aws:ec2:REGION::snapshot/snap-...)"
    ),
    ("items[].imageId", "*"): lambda value, error: (
        f"items: imageId {error.value!r} is not an AMI id (ami-0123456789abcdef0)"
    ),
    ("selector", "additionalProperties"): _unknown_keys("selector", "/properties/selector"),
    ("selector", "*"): lambda value, error: (
        'selector must be an object such as {"tag": {"key": "backup", "value": "nightly"}}'
    ),
    ("selector.resourceTypes", "*"): lambda value, error: (
        f"selector.resourceTypes {value!r} is invalid: use a non-empty list of "
        '"snapshot" and/or "image", each once'
    ),
    ("selector.tag", "*"): lambda value, error: (
        f'selector.tag {value!r} is invalid: use {{"key": K}} or {{"key": K, "value": V}}'
        " (key 1-128, value at most 256 characters)"
    ),
    ("selector.createdBefore", "*"): lambda value, error: (
        f"selector.createdBefore {value!r} is invalid: use an ISO 8601 time with a zone, "
        "e.g. 2026-01-01T00:00:00Z"
    ),
    ("selector.minSizeGiB", "*"): lambda value, error: (
        f"selector.minSizeGiB {value!r} is invalid: use a whole number of GiB, at least 1"
    ),
    ("selector.includeCompacted", "*"): lambda value, error: (
        f"selector.includeCompacted {value!r} is invalid: use true (also compact sources that "
        "already have a delivered compacted copy) or false (the default: leave them out)"
    ),
    ("selector.minSavingsPercent", "*"): lambda value, error: (
        f"selector.minSavingsPercent {value!r} is invalid: use a number 0-100"
    ),
    ("minSavingsPercent", "*"): lambda value, error: (
        f"minSavingsPercent {value!r} is invalid: use a number 0-100"
    ),
    ("options", "propertyNames"): lambda value, error: (
        f"options must not set {', '.join(k for k in RESERVED_OPTIONS if k in value)}: the "
        "items name the sources, and one imageName cannot serve several AMIs"
    ),
    ("options", "*"): lambda value, error: (
        f"options {value!r} is invalid: use an object of execution-input options "
        '(e.g. {"method": "trim", "jobs": 8})'
    ),
    ("maxConcurrency", "*"): lambda value, error: (
        f"maxConcurrency {value!r} is invalid: use a whole number 1-"
        f"{contract.limit('batchMaxConcurrency')}"
    ),
    ("toleratedFailurePercentage", "*"): lambda value, error: (
        f"toleratedFailurePercentage {value!r} is invalid: use a number 0-100 (100, the "
        "default, lets every item run whatever the others do)"
    ),
}


def _where(error: SchemaValidationError) -> tuple[str, list[Any]]:
    """The failing value's place as a wording key (`items[].snapshotId`) and its raw path."""
    path = list((error.path or [])[1:])
    return _key(path), path


def _wording(error: SchemaValidationError, raw: Any) -> str:
    """The message for the first schema failure, worded for the failing value or, failing
    that, for the closest enclosing key that has words; the schema's own words for the rest."""
    _, path = _where(error)
    for depth in range(len(path), -1, -1):
        key = _key(path[:depth])
        wording = _WORDING.get((key, str(error.rule))) if depth == len(path) else None
        wording = wording or _WORDING.get((key, "*"))
        if wording is not None:
            return wording(_value_at(raw, path[:depth]), error)
    return f"the batch input is invalid: {error.validation_message}"


def _key(path: list[Any]) -> str:
    parts: list[str] = []
    for part in path:
        if str(part).isdigit():
            parts[-1:] = [f"{parts[-1] if parts else ''}[]"]
        else:
            parts.append(str(part))
    return ".".join(parts)


def _value_at(raw: Any, path: list[Any]) -> Any:
    value = raw
    for part in path:
        try:
            value = value[int(part) if str(part).isdigit() else part]
        except (KeyError, IndexError, TypeError, ValueError):
            return None
    return value
