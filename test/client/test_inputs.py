"""Execution and batch inputs from flags, checked with contract/schemas before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ebs_compactor_client import inputs

SNAP = "snap-0123456789abcdef0"
AMI = "ami-0123456789abcdef0"


def test_the_package_reads_the_contracts_schema() -> None:
    repo = Path(__file__).resolve().parents[2]
    shipped = inputs.schema(inputs.EXECUTION_SCHEMA)
    assert shipped == json.loads(
        (repo / "contract/schemas/execution-input.schema.json").read_text()
    )


def test_a_snapshot_input_carries_only_the_options_given() -> None:
    opts = inputs.options(
        method="trim",
        jobs=4,
        verify=False,
        tags=["team=db", "note=a=b"],
        fsr_azs=["us-east-1a", "us-east-1a"],
    )
    document = inputs.execution_input(SNAP, None, None, opts)
    assert document == {
        "snapshotId": SNAP,
        "method": "trim",
        "jobs": 4,
        "verify": False,
        "tags": {"team": "db", "note": "a=b"},
        "fastSnapshotRestoreAzs": ["us-east-1a"],
    }
    assert inputs.execution_input(SNAP, None, None, inputs.options()) == {"snapshotId": SNAP}


def test_an_image_input_with_its_name() -> None:
    document = inputs.execution_input(None, AMI, "golden-compact", {})
    assert document == {"imageId": AMI, "imageName": "golden-compact"}


@pytest.mark.parametrize(
    ("snapshot", "image", "image_name", "message"),
    [
        (None, None, None, "exactly one of --snapshot and --image"),
        (SNAP, AMI, None, "exactly one of --snapshot and --image"),
        (SNAP, None, "name", "--image-name names the new AMI"),
        ("snap-XYZ", None, None, "input.snapshotId"),
        (None, "ami-nothex!", None, "input.imageId"),
    ],
)
def test_bad_sources_are_refused_naming_the_flag_or_field(
    snapshot: str | None, image: str | None, image_name: str | None, message: str
) -> None:
    with pytest.raises(inputs.InputError, match=message.replace(".", r"\.")):
        inputs.execution_input(snapshot, image, image_name, {})


def test_bad_options_are_refused_by_the_schema() -> None:
    with pytest.raises(inputs.InputError, match=r"input\.kmsKeyId"):
        inputs.execution_input(SNAP, None, None, inputs.options(kms_key="not a key"))
    with pytest.raises(inputs.InputError, match="KEY=VALUE"):
        inputs.options(tags=["novalue"])
    with pytest.raises(inputs.InputError, match="given twice"):
        inputs.options(tags=["a=1", "a=2"])


def test_execution_names_follow_the_rule() -> None:
    assert inputs.check_name("nightly-42_a") == "nightly-42_a"
    for bad in ("", "has space", "x" * 81, "a:b"):
        with pytest.raises(inputs.InputError, match="--name"):
            inputs.check_name(bad)


def test_batch_of_items_with_options_and_limits() -> None:
    document = inputs.batch_input(
        items=[{"snapshotId": SNAP}, {"imageId": AMI}],
        selector=None,
        opts=inputs.options(jobs=8),
        min_savings_percent=20,
        max_concurrency=3,
        tolerated_failure_percentage=50,
    )
    assert document == {
        "items": [{"snapshotId": SNAP}, {"imageId": AMI}],
        "options": {"jobs": 8},
        "minSavingsPercent": 20,
        "maxConcurrency": 3,
        "toleratedFailurePercentage": 50,
    }


def test_batch_items_are_checked_through_the_execution_inputs_patterns() -> None:
    # batch-input.schema.json refers to execution-input.schema.json's patterns ($ref)
    with pytest.raises(inputs.InputError, match=r"input\.items\.0\.snapshotId"):
        inputs.batch_input(
            items=[{"snapshotId": "snap-bad"}],
            selector=None,
            opts={},
            min_savings_percent=None,
            max_concurrency=None,
            tolerated_failure_percentage=None,
        )


def test_batch_needs_items_or_a_selector_not_both() -> None:
    for items, selector in (([], None), ([{"snapshotId": SNAP}], {"minSizeGiB": 1})):
        with pytest.raises(inputs.InputError, match="not both and not neither"):
            inputs.batch_input(
                items=items,
                selector=selector,
                opts={},
                min_savings_percent=None,
                max_concurrency=None,
                tolerated_failure_percentage=None,
            )


def test_batch_concurrency_above_the_limit_is_refused() -> None:
    with pytest.raises(inputs.InputError, match="maxConcurrency"):
        inputs.batch_input(
            items=[{"snapshotId": SNAP}],
            selector=None,
            opts={},
            min_savings_percent=None,
            max_concurrency=10_000,
            tolerated_failure_percentage=None,
        )


def test_selector_from_flags() -> None:
    assert inputs.selector("env=prod", "2026-01-01T00:00:00Z", 8, ["snapshot", "image"]) == {
        "tag": {"key": "env", "value": "prod"},
        "createdBefore": "2026-01-01T00:00:00Z",
        "minSizeGiB": 8,
        "resourceTypes": ["snapshot", "image"],
    }
    assert inputs.selector("env", None, None, []) == {"tag": {"key": "env"}}
    assert inputs.selector(None, None, None, []) is None
    with pytest.raises(inputs.InputError, match="--resource-type"):
        inputs.selector(None, None, None, ["image"])
    assert inputs.selector("env", None, None, [], include_compacted=True) == {
        "tag": {"key": "env"},
        "includeCompacted": True,
    }
    with pytest.raises(inputs.InputError, match="--include-compacted"):
        inputs.selector(None, None, None, [], include_compacted=True)


def test_items_file_as_json_or_lines(tmp_path: Path) -> None:
    as_json = tmp_path / "items.json"
    as_json.write_text(json.dumps([SNAP, AMI, {"snapshotId": SNAP}]))
    assert inputs.items_from_file(as_json) == [
        {"snapshotId": SNAP},
        {"imageId": AMI},
        {"snapshotId": SNAP},
    ]
    lines = tmp_path / "items.txt"
    lines.write_text(f"# nightly\n{SNAP}\n\n{AMI}  # golden\n")
    assert inputs.items_from_file(lines) == [{"snapshotId": SNAP}, {"imageId": AMI}]
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    with pytest.raises(inputs.InputError, match="expected a JSON list"):
        inputs.items_from_file(bad)
