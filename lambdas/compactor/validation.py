"""Checks of the execution input that need no AWS call (docs/contract.md, "Execution input")."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from compactor import tags
from compactor.errors import InvalidInput, SnapshotInOtherRegion
from compactor.models import Method

KNOWN_KEYS = frozenset(
    {
        "snapshotId",
        "imageId",
        "method",
        "jobs",
        "verify",
        "fastSnapshotRestoreAzs",
        "kmsKeyId",
        "imageName",
        "tags",
    }
)
METHODS: tuple[Method, ...] = ("allocated", "trim")
MIN_JOBS, MAX_JOBS, DEFAULT_JOBS = 1, 64, 16

_SNAPSHOT_ID = re.compile(r"^snap-[0-9a-f]{8,17}$")
_SNAPSHOT_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):ec2:(?P<region>[a-z0-9-]+):(?P<account>\d{12})?:"
    r"snapshot/(?P<id>snap-[0-9a-f]{8,17})$"
)
_IMAGE_ID = re.compile(r"^ami-[0-9a-f]{8,17}$")
_AZ_NAME = re.compile(r"^[a-z]{2}(-[a-z0-9]+)+-\d+[a-z](-[a-z0-9-]+)?$")
# KMS key id, key ARN, alias name or alias ARN
_KMS_KEY = re.compile(
    r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32}"
    r"|alias/[a-zA-Z0-9/_-]{1,250}|arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key|alias)/[a-zA-Z0-9/_-]+)$"
)
# RegisterImage: 3-128 characters of letters, digits, ( ) [ ] space . / - ' @ _
_IMAGE_NAME = re.compile(r"^[a-zA-Z0-9()\[\] ./'@_-]{3,128}$")
_MAX_USER_TAGS = 40  # EC2 allows 50 per resource; leave room for ours and the copied ones


@dataclass(frozen=True)
class ExecutionInput:
    snapshot_id: str | None
    image_id: str | None
    method: Method
    jobs: int
    verify: bool
    fast_snapshot_restore_azs: tuple[str, ...]
    kms_key_id: str | None
    image_name: str | None
    tags: dict[str, str] = field(default_factory=dict)


def parse_execution_input(raw: Any, region: str, trigger_tag_key: str) -> ExecutionInput:
    if not isinstance(raw, Mapping):
        raise InvalidInput(
            f"the execution input must be a JSON object, got {type(raw).__name__}: "
            'send e.g. {"snapshotId": "snap-0123456789abcdef0"}'
        )
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:
        raise InvalidInput(
            f"unknown input key(s) {', '.join(unknown)}: "
            f"allowed are {', '.join(sorted(KNOWN_KEYS))}"
        )
    has_snapshot, has_image = raw.get("snapshotId") is not None, raw.get("imageId") is not None
    if has_snapshot == has_image:
        raise InvalidInput(
            "give exactly one of snapshotId and imageId "
            f"({'both were' if has_snapshot else 'neither was'} given)"
        )
    snapshot_id = _snapshot_id(raw["snapshotId"], region) if has_snapshot else None
    image_id = _image_id(raw["imageId"]) if has_image else None
    image_name = raw.get("imageName")
    if image_name is not None:
        if not has_image:
            raise InvalidInput("imageName applies to AMI input only: remove it or pass imageId")
        if not isinstance(image_name, str) or not _IMAGE_NAME.match(image_name):
            raise InvalidInput(
                f"imageName {image_name!r} is invalid: 3-128 characters of letters, digits, "
                "spaces and ( ) [ ] . / - ' @ _"
            )
    return ExecutionInput(
        snapshot_id=snapshot_id,
        image_id=image_id,
        method=_method(raw.get("method", "allocated")),
        jobs=_jobs(raw.get("jobs", DEFAULT_JOBS)),
        verify=_boolean("verify", raw.get("verify", True)),
        fast_snapshot_restore_azs=_az_names(raw.get("fastSnapshotRestoreAzs", [])),
        kms_key_id=_kms_key(raw.get("kmsKeyId")),
        image_name=image_name,
        tags=_user_tags(raw.get("tags", {}), trigger_tag_key),
    )


def _snapshot_id(value: Any, region: str) -> str:
    if isinstance(value, str) and _SNAPSHOT_ID.match(value):
        return value
    arn = _SNAPSHOT_ARN.match(value) if isinstance(value, str) else None
    if arn is None:
        raise InvalidInput(
            f"snapshotId {value!r} is neither a snapshot id (snap-0123456789abcdef0) nor a "
            "snapshot ARN (arn:aws:ec2:REGION::snapshot/snap-...)"
        )
    if arn["region"] != region:
        raise SnapshotInOtherRegion(
            f"snapshot {arn['id']} is in {arn['region']}, this workflow runs in {region}: "
            f"copy the snapshot to {region} (CopySnapshot) or start the workflow deployed there"
        )
    return arn["id"]


def _image_id(value: Any) -> str:
    if not isinstance(value, str) or not _IMAGE_ID.match(value):
        raise InvalidInput(f"imageId {value!r} is not an AMI id (ami-0123456789abcdef0)")
    return value


def _method(value: Any) -> Method:
    if value not in METHODS:
        raise InvalidInput(f"method {value!r} is invalid: use one of {', '.join(METHODS)}")
    return cast(Method, value)


def _jobs(value: Any) -> int:
    # bool is an int in Python; true is not a job count
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_JOBS <= value <= MAX_JOBS:
        raise InvalidInput(f"jobs {value!r} is invalid: use a whole number {MIN_JOBS}-{MAX_JOBS}")
    return value


def _boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} {value!r} is invalid: use true or false")
    return value


def _az_names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(az, str) for az in value):
        raise InvalidInput(
            f"fastSnapshotRestoreAzs {value!r} is invalid: use a list of Availability Zone names "
            'such as ["us-east-1a"]'
        )
    bad = [az for az in value if not _AZ_NAME.match(az)]
    if bad:
        raise InvalidInput(
            f"fastSnapshotRestoreAzs: {', '.join(bad)} is not an Availability Zone name "
            "(us-east-1a; zone ids such as use1-az1 are not accepted)"
        )
    if len(set(value)) != len(value):
        raise InvalidInput("fastSnapshotRestoreAzs lists an Availability Zone twice")
    return tuple(value)


def _kms_key(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _KMS_KEY.match(value):
        raise InvalidInput(
            f"kmsKeyId {value!r} is invalid: use a key id, key ARN, alias/NAME or alias ARN"
        )
    return value


def _user_tags(value: Any, trigger_tag_key: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidInput(f"tags {value!r} is invalid: use an object of string keys and values")
    if len(value) > _MAX_USER_TAGS:
        raise InvalidInput(f"tags has {len(value)} entries: at most {_MAX_USER_TAGS} are allowed")
    for key, tag_value in value.items():
        if not 1 <= len(key) <= 128 or len(tag_value) > 256:
            raise InvalidInput(
                f"tag {key!r}: keys are 1-128 and values at most 256 characters long"
            )
        if key.startswith("aws:") or key.startswith(tags.PREFIX):
            raise InvalidInput(
                f"tag {key!r}: keys starting with aws: or {tags.PREFIX} are reserved"
            )
        if key == trigger_tag_key:
            raise InvalidInput(
                f"tag {key!r} is the trigger tag: putting it on the outputs would start a "
                "compaction of the compacted snapshot; remove it"
            )
    return dict(value)
