"""The execution input checked by its schema and worded by compactor/validation.py, without AWS
(test_prepare.py runs the same refusals through the handler and checks nothing is created)."""

from __future__ import annotations

from typing import Any

import pytest
from compactor import errors, schemas, tags, validation

REGION = "us-east-1"
TRIGGER = "compact"
SNAPSHOT = "snap-0123456789abcdef0"


def parse(raw: Any) -> validation.ExecutionInput:
    return validation.parse_execution_input(raw, REGION, TRIGGER)


def test_defaults_come_from_the_schema_and_the_input_is_left_alone() -> None:
    raw = {"snapshotId": SNAPSHOT}
    parsed = parse(raw)
    assert raw == {"snapshotId": SNAPSHOT}
    assert parsed == validation.ExecutionInput(
        snapshot_id=SNAPSHOT,
        image_id=None,
        method="allocated",
        target="snapshot",
        jobs=16,
        verify=True,
        fast_snapshot_restore_azs=(),
        kms_key_id=None,
        image_name=None,
        tags={},
    )


def test_a_snapshot_arn_of_this_region_gives_its_id() -> None:
    assert (
        parse({"snapshotId": f"arn:aws:ec2:{REGION}::snapshot/{SNAPSHOT}"}).snapshot_id == SNAPSHOT
    )
    arn = f"arn:aws:ec2:{REGION}:123456789012:snapshot/{SNAPSHOT}"
    assert parse({"snapshotId": arn}).snapshot_id == SNAPSHOT


def test_a_snapshot_arn_of_another_region_is_refused() -> None:
    with pytest.raises(errors.SnapshotInOtherRegion, match=f"{SNAPSHOT} is in eu-west-1"):
        parse({"snapshotId": f"arn:aws:ec2:eu-west-1::snapshot/{SNAPSHOT}"})


def test_null_counts_as_not_given() -> None:
    parsed = parse({"snapshotId": None, "imageId": "ami-0123456789abcdef0", "imageName": None})
    assert (parsed.snapshot_id, parsed.image_id, parsed.image_name) == (
        None,
        "ami-0123456789abcdef0",
        None,
    )
    with pytest.raises(errors.InvalidInput, match="neither was given"):
        parse({"snapshotId": None})


def test_a_whole_float_is_a_job_count() -> None:
    jobs = parse({"snapshotId": SNAPSHOT, "jobs": 8.0}).jobs
    assert jobs == 8 and isinstance(jobs, int)


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        ({"jobs": 2.5}, r"jobs 2.5 is invalid: use a whole number 1-64"),
        ({"verify": None}, "verify None is invalid: use true or false"),
        ({"method": None}, "method None is invalid: use one of allocated, trim"),
        (
            {"fastSnapshotRestoreAzs": ["us-east-1a", "us-east-1a"]},
            "lists an Availability Zone twice",
        ),
        ({"fastSnapshotRestoreAzs": [1]}, r"fastSnapshotRestoreAzs \[1\] is invalid: use a list"),
        (
            {"tags": {f"k{n}": "v" for n in range(41)}},
            "tags has 41 entries: at most 40 are allowed",
        ),
        ({"tags": {"k": "v" * 257}}, "tag 'k': keys are 1-128 and values at most 256 characters"),
        ({"tags": {"k" * 129: "v"}}, "tags: keys are 1-128 and values at most 256 characters"),
        ({"tags": {"": "v"}}, "tags: keys are 1-128"),
        ({"tags": []}, r"tags \[\] is invalid: use an object of string keys and values"),
        ({"tags": {f"{tags.PREFIX}x": "1"}}, "are reserved"),
        ({"kmsKeyId": 5}, "kmsKeyId 5 is invalid"),
        ({"imageId": "ami-0123456789abcdef0"}, "both were given"),
        ({"AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID": "me"}, "set by Step Functions"),
    ],
)
def test_refusals_say_what_is_wrong(extra: dict[str, Any], complaint: str) -> None:
    with pytest.raises(errors.InvalidInput, match=complaint):
        parse({"snapshotId": SNAPSHOT, **extra})


def test_a_child_of_the_batch_state_machine_is_accepted() -> None:
    """The batch Map's Compact/Estimate tasks merge the link to their iteration into the input."""
    iteration = (
        "arn:aws:states:us-east-1:123456789012:execution:Compactor-Batch/Compact each item:0a1b"
    )
    raw = {"snapshotId": SNAPSHOT, "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID": iteration}
    assert parse(raw) == parse({"snapshotId": SNAPSHOT})


def test_every_input_key_has_its_own_words() -> None:
    """A new key in the schema needs a sentence for its refusal (else the schema's own words)."""
    keys = set(schemas.load(schemas.EXECUTION_INPUT)["properties"])
    assert keys == {key for key, rule in validation._WORDING if rule == "*"}
