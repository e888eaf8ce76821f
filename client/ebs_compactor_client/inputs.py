"""Execution and batch inputs built from command-line flags, checked against the project's own
schemas (contract/schemas, linked into this package as `contract/`) before anything starts."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

EXECUTION_SCHEMA = "execution-input.schema.json"
BATCH_SCHEMA = "batch-input.schema.json"
# StartExecution's name rule: 1-80 characters; the client keeps to letters, digits, - and _
# (names with other characters break CloudWatch Logs and metrics).
NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


class InputError(ValueError):
    """A flag combination or value the workflow would refuse; the message says which."""


@cache
def schema(name: str) -> dict[str, Any]:
    """One of the contract's schemas, as shipped in the package (a link to contract/schemas in
    a checkout; a copy in a wheel)."""
    text = resources.files("ebs_compactor_client").joinpath("contract", name).read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _registry() -> Registry:
    names = (EXECUTION_SCHEMA, BATCH_SCHEMA)
    return Registry().with_resources(
        (n, Resource.from_contents(schema(n), default_specification=DRAFT7)) for n in names
    )


def validate(document: dict[str, Any], schema_name: str) -> None:
    """Raise InputError naming every place the document breaks the schema."""
    validator = jsonschema.Draft7Validator(schema(schema_name), registry=_registry())
    problems = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    if problems:
        lines = [f"{_where(p.absolute_path)}: {p.message}" for p in problems[:10]]
        raise InputError(f"the input breaks {schema_name}:\n  " + "\n  ".join(lines))


def _where(path: Iterable[Any]) -> str:
    parts = list(path)
    return "input" if not parts else "input." + ".".join(str(p) for p in parts)


def parse_tags(pairs: Sequence[str]) -> dict[str, str]:
    """KEY=VALUE flags as a dict (the value may be empty and may hold '=')."""
    tags: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"tag {pair!r}: write KEY=VALUE")
        if key in tags:
            raise InputError(f"tag {key}: given twice")
        tags[key] = value
    return tags


def options(
    *,
    method: str | None = None,
    jobs: int | None = None,
    verify: bool | None = None,
    kms_key: str | None = None,
    tags: Sequence[str] = (),
    fsr_azs: Sequence[str] = (),
    dry_run: bool = False,
    copy_sharing: bool = False,
) -> dict[str, Any]:
    """The execution-input options the flags set; an option not given is left to the workflow's
    default (so the schema's default stays the only one)."""
    out: dict[str, Any] = {}
    if method is not None:
        out["method"] = method
    if jobs is not None:
        out["jobs"] = jobs
    if verify is not None:
        out["verify"] = verify
    if kms_key:
        out["kmsKeyId"] = kms_key
    if tags:
        out["tags"] = parse_tags(tags)
    if fsr_azs:
        out["fastSnapshotRestoreAzs"] = list(dict.fromkeys(fsr_azs))
    if dry_run:
        out["dryRun"] = True
    if copy_sharing:
        out["copySharing"] = True
    return out


def execution_input(
    snapshot: str | None, image: str | None, image_name: str | None, opts: dict[str, Any]
) -> dict[str, Any]:
    """The input of one compaction: exactly one source, then the options."""
    if bool(snapshot) == bool(image):
        raise InputError("give exactly one of --snapshot and --image")
    if image_name and not image:
        raise InputError("--image-name names the new AMI: it needs --image")
    document: dict[str, Any] = {"snapshotId": snapshot} if snapshot else {"imageId": image}
    if image_name:
        document["imageName"] = image_name
    document.update(opts)
    validate(document, EXECUTION_SCHEMA)
    return document


def items_from_file(path: Path) -> list[dict[str, str]]:
    """--items FILE: a JSON list of {"snapshotId"} / {"imageId"} objects or of bare ids, or one
    id per line (blank lines and # comments skipped)."""
    text = path.read_text()
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError:
        loaded = [line.split("#", 1)[0].strip() for line in text.splitlines()]
        loaded = [line for line in loaded if line]
    if isinstance(loaded, dict) and "items" in loaded:
        loaded = loaded["items"]
    if not isinstance(loaded, list):
        raise InputError(f"{path}: expected a JSON list of items or one id per line")
    return [_item(entry, path) for entry in loaded]


def _item(entry: Any, path: Path) -> dict[str, str]:
    if isinstance(entry, dict):
        return entry
    if isinstance(entry, str) and entry.startswith("ami-"):
        return {"imageId": entry}
    if isinstance(entry, str):
        return {"snapshotId": entry}
    raise InputError(f"{path}: {entry!r} is neither an id nor an item object")


def batch_input(
    *,
    items: list[dict[str, str]],
    selector: dict[str, Any] | None,
    opts: dict[str, Any],
    min_savings_percent: float | None,
    max_concurrency: int | None,
    tolerated_failure_percentage: float | None,
) -> dict[str, Any]:
    """The input of one batch: explicit items or a selector, the options every child gets, the
    concurrency and the tolerated failures (unset ones take the batch workflow's defaults)."""
    if bool(items) == bool(selector):
        raise InputError(
            "give the items (--items FILE, --snapshot, --image) or a selector (--tag, "
            "--created-before, --min-size-gib, --resource-type), not both and not neither"
        )
    document: dict[str, Any] = {"items": items} if items else {"selector": selector}
    if opts:
        document["options"] = opts
    if min_savings_percent is not None:
        document["minSavingsPercent"] = min_savings_percent
    if max_concurrency is not None:
        document["maxConcurrency"] = max_concurrency
    if tolerated_failure_percentage is not None:
        document["toleratedFailurePercentage"] = tolerated_failure_percentage
    validate(document, BATCH_SCHEMA)
    return document


def selector(
    tag: str | None,
    created_before: str | None,
    min_size_gib: int | None,
    resource_types: Sequence[str],
    include_compacted: bool = False,
) -> dict[str, Any] | None:
    """The selector the flags describe, or None when no selector flag was given."""
    out: dict[str, Any] = {}
    if tag:
        key, sep, value = tag.partition("=")
        if not key:
            raise InputError(f"--tag {tag!r}: write KEY=VALUE or KEY (any value)")
        out["tag"] = {"key": key, "value": value} if sep else {"key": key}
    if created_before:
        out["createdBefore"] = created_before
    if min_size_gib is not None:
        out["minSizeGiB"] = min_size_gib
    if out and resource_types:
        out["resourceTypes"] = list(dict.fromkeys(resource_types))
    elif resource_types:
        raise InputError(
            "--resource-type narrows a selector: add --tag, --created-before or --min-size-gib"
        )
    if out and include_compacted:
        out["includeCompacted"] = True
    elif include_compacted:
        raise InputError(
            "--include-compacted widens a selector: add --tag, --created-before or --min-size-gib"
        )
    return out or None


def check_name(name: str | None) -> str | None:
    if name is not None and not NAME.match(name):
        raise InputError(f"--name {name!r}: 1-80 characters of letters, digits, - and _")
    return name
