"""The execution input, checked against contract/schemas/execution-input.schema.json (what is
valid is the schema's to say; docs/contract.md, "Execution input"). This module only words a
schema failure for the user and checks what needs this Region and this stack: a snapshot ARN's
Region, the reserved tag keys and the trigger tag."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from aws_lambda_powertools.utilities.validation.exceptions import SchemaValidationError

from compactor import schemas, tags
from compactor.errors import InvalidInput, SnapshotInOtherRegion
from compactor.models import Method, Target


@dataclass(frozen=True)
class ExecutionInput:
    snapshot_id: str | None
    image_id: str | None
    method: Method
    target: Target
    jobs: int
    verify: bool
    fast_snapshot_restore_azs: tuple[str, ...]
    kms_key_id: str | None
    image_name: str | None
    tags: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False
    copy_sharing: bool = False


def parse_execution_input(raw: Any, region: str, trigger_tag_key: str) -> ExecutionInput:
    try:
        valid = schemas.validate(copy.deepcopy(raw), schemas.EXECUTION_INPUT)
    except SchemaValidationError as error:
        raise InvalidInput(_wording(error, raw)) from None
    user_tags = dict(valid["tags"])
    _check_tag_keys(user_tags, trigger_tag_key)
    snapshot_id = valid.get("snapshotId")
    return ExecutionInput(
        snapshot_id=_in_region(snapshot_id, region) if snapshot_id is not None else None,
        image_id=valid.get("imageId"),
        method=cast(Method, valid["method"]),
        target=_target(valid),
        jobs=int(valid["jobs"]),  # JSON Schema counts 16.0 as an integer
        verify=valid["verify"],
        fast_snapshot_restore_azs=tuple(valid["fastSnapshotRestoreAzs"]),
        kms_key_id=valid.get("kmsKeyId"),
        image_name=valid.get("imageName"),
        tags=user_tags,
        dry_run=bool(valid.get("dryRun", False)),
        copy_sharing=bool(valid.get("copySharing", False)),
    )


def _target(valid: Mapping[str, Any]) -> Target:
    """The input's target, else its default: `snapshot`, but `volume` for `method: trim`, which
    stages and fstrims a writable device (a direct snapshot is none)."""
    method, target = valid["method"], valid.get("target")
    if target is None:
        return "volume" if method == "trim" else "snapshot"
    if target == "snapshot" and method == "trim":
        raise InvalidInput(
            'target "snapshot" cannot be combined with method "trim": trim stages each '
            "partition and fstrims it on a writable device, and a direct snapshot is none. "
            'Use method "allocated" to write the snapshot directly, or target "volume" (the '
            'default with "trim") to trim'
        )
    return cast(Target, target)


def _in_region(snapshot_id: str, region: str) -> str:
    """The snapshot id of an id or of a snapshot ARN (arn:PARTITION:ec2:REGION:ACCOUNT:snapshot/ID,
    the schema checked the form) of this Region."""
    if not snapshot_id.startswith("arn:"):
        return snapshot_id
    arn_region, resource = snapshot_id.split(":")[3], snapshot_id.split(":")[5]
    bare_id = resource.removeprefix("snapshot/")
    if arn_region != region:
        raise SnapshotInOtherRegion(
            f"snapshot {bare_id} is in {arn_region}, this workflow runs in {region}: "
            f"copy the snapshot to {region} (CopySnapshot) or start the workflow deployed there"
        )
    return bare_id


def _check_tag_keys(user_tags: Mapping[str, str], trigger_tag_key: str) -> None:
    for key in user_tags:
        if key.startswith("aws:") or key.startswith(tags.PREFIX):
            raise InvalidInput(
                f"tag {key!r}: keys starting with aws: or {tags.PREFIX} are reserved"
            )
        if key == trigger_tag_key:
            raise InvalidInput(
                f"tag {key!r} is the trigger tag: putting it on the outputs would start a "
                "compaction of the compacted snapshot; remove it"
            )


# The words for a schema failure, by the input key that failed (the first part of the error's
# path; "" = the input as a whole) and the JSON Schema keyword ("*" = any other). Each takes the
# input's value of that key (the whole input for ""), the key's schema and the error.
_Wording = Callable[[Any, Mapping[str, Any], SchemaValidationError], str]


def _source_count(given: str) -> _Wording:
    return lambda value, schema, error: (
        f"give exactly one of snapshotId and imageId ({given} given)"
    )


def _unknown_keys(value: Any, schema: Mapping[str, Any], error: SchemaValidationError) -> str:
    known = sorted(schema["properties"])
    return (
        f"unknown input key(s) {', '.join(sorted(set(value) - set(known)))}: "
        f"allowed are {', '.join(known)}"
    )


def _tag_lengths(value: Any, schema: Mapping[str, Any], error: SchemaValidationError) -> str:
    where = f"tag {error.path[2]!r}" if error.path and len(error.path) > 2 else "tags"
    return (
        f"{where}: keys are {schema['propertyNames']['minLength']}-"
        f"{schema['propertyNames']['maxLength']} and values at most "
        f"{schema['additionalProperties']['maxLength']} characters long"
    )


_WORDING: dict[tuple[str, str], _Wording] = {
    ("", "type"): lambda value, schema, error: (
        f"the execution input must be a JSON object, got {type(value).__name__}: "
        'send e.g. {"snapshotId": "snap-0123456789abcdef0"}'
    ),
    ("", "additionalProperties"): _unknown_keys,
    # if/then/else of the schema: no source given, a null snapshotId, or both
    ("", "required"): _source_count("neither was"),
    ("snapshotId", "not"): _source_count("neither was"),
    ("snapshotId", "const"): _source_count("both were"),
    ("snapshotId", "*"): lambda value, schema, error: (
        f"snapshotId {value!r} is neither a snapshot id (snap-0123456789abcdef0) nor a "
        "snapshot ARN (arn:aws:ec2:REGION::snapshot/snap-...)"
    ),
    ("imageId", "*"): lambda value, schema, error: (
        f"imageId {value!r} is not an AMI id (ami-0123456789abcdef0)"
    ),
    ("imageName", "const"): lambda value, schema, error: (
        "imageName applies to AMI input only: remove it or pass imageId"
    ),
    ("imageName", "*"): lambda value, schema, error: (
        f"imageName {value!r} is invalid: 3-128 characters of letters, digits, "
        "spaces and ( ) [ ] . / - ' @ _"
    ),
    ("copySharing", "const"): lambda value, schema, error: (
        "copySharing applies to AMI input only (it copies an AMI's launch permissions, its "
        "snapshots' create-volume permissions and its deprecation time): remove it or pass imageId"
    ),
    ("copySharing", "*"): lambda value, schema, error: (
        f"copySharing {value!r} is invalid: use true or false"
    ),
    ("dryRun", "*"): lambda value, schema, error: f"dryRun {value!r} is invalid: use true or false",
    ("method", "*"): lambda value, schema, error: (
        f"method {value!r} is invalid: use one of {', '.join(schema['enum'])}"
    ),
    ("target", "*"): lambda value, schema, error: (
        f"target {value!r} is invalid: use one of {', '.join(schema['enum'])}"
    ),
    ("jobs", "*"): lambda value, schema, error: (
        f"jobs {value!r} is invalid: use a whole number {schema['minimum']}-{schema['maximum']}"
    ),
    ("verify", "*"): lambda value, schema, error: f"verify {value!r} is invalid: use true or false",
    ("fastSnapshotRestoreAzs", "pattern"): lambda value, schema, error: (
        f"fastSnapshotRestoreAzs: {error.value} is not an Availability Zone name "
        "(us-east-1a; zone ids such as use1-az1 are not accepted)"
    ),
    ("fastSnapshotRestoreAzs", "uniqueItems"): lambda value, schema, error: (
        "fastSnapshotRestoreAzs lists an Availability Zone twice"
    ),
    ("fastSnapshotRestoreAzs", "*"): lambda value, schema, error: (
        f"fastSnapshotRestoreAzs {value!r} is invalid: use a list of Availability Zone names "
        'such as ["us-east-1a"]'
    ),
    ("kmsKeyId", "*"): lambda value, schema, error: (
        f"kmsKeyId {value!r} is invalid: use a key id, key ARN, alias/NAME or alias ARN"
    ),
    ("tags", "maxProperties"): lambda value, schema, error: (
        f"tags has {len(value)} entries: at most {schema['maxProperties']} are allowed"
    ),
    ("tags", "propertyNames"): _tag_lengths,
    ("tags", "maxLength"): _tag_lengths,
    ("tags", "*"): lambda value, schema, error: (
        f"tags {value!r} is invalid: use an object of string keys and values"
    ),
    ("AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID", "*"): lambda value, schema, error: (
        f"AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID {value!r} is invalid: it is set by Step "
        "Functions to the ARN of the execution that started this one; leave it out"
    ),
}


def _wording(error: SchemaValidationError, raw: Any) -> str:
    """The message for the first schema failure; the schema's own words for one not listed."""
    path = error.path or []
    key = str(path[1]) if len(path) > 1 else ""
    schema = schemas.load(schemas.EXECUTION_INPUT)
    wording = _WORDING.get((key, str(error.rule))) or _WORDING.get((key, "*"))
    if wording is None:
        return f"the execution input is invalid: {error.validation_message}"
    value = raw.get(key) if key and isinstance(raw, Mapping) else raw
    return wording(value, schema["properties"].get(key, schema), error)
